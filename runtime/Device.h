//===- Device.h - the runtime's hardware abstraction ------------*- C++ -*-===//
//
// A `Device` is what the executor drives: it allocates the arena, moves
// bytes, makes weights visible to kernels and launches one recipe at a time.
// It makes no decisions; the plan did. Backends (cpu/; gpu/ for cuda and
// hip) implement it; `createDevice` picks one by name.
//
// Addresses handed to a device are its own (host pointers on the CPU). A
// launch names each operand with its address, element type and IR shape at
// the run's token count, so a backend needs nothing else from the plan.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/Plan.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strata::runtime {

/// The attributes of one kernel (PlanKernel::attrs).
using AttrMap = std::map<std::string, format::PlanAttr>;

/// One operand of a launch: an arena buffer or a GGUF weight.
struct TensorArg {
  /// Device address of the first element (weights: of the first row).
  void *data = nullptr;
  /// Bytes addressable at `data` (at least what `shape` covers).
  uint64_t bytes = 0;
  bool isWeight = false;
  /// Element type of a buffer.
  format::PlanDType dtype = format::PlanDType::F32;
  /// Storage type of a weight (rows of blocks along the last IR dim).
  format::GgmlType weightType = format::GgmlType::F32;
  /// IR order, row-major, last dim fastest; a ggml tensor [K, N] is [N, K].
  std::vector<int64_t> shape;
  /// Buffer or weight name, for diagnostics.
  std::string name;

  int64_t numElements() const {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
};

/// One kernel launch.
struct Launch {
  format::Recipe recipe = format::Recipe::Reshape;
  /// The kernel's attributes; null means none.
  const AttrMap *attrs = nullptr;
  std::vector<TensorArg> inputs;
  std::vector<TensorArg> outputs;
};

/// A function of generated code, loaded from a plan's module (a backend
/// handle; valid as long as the device).
struct DeviceFunction {
  void *handle = nullptr;
};

/// The 128 bytes of an encoded tensor map (the driver's CUtensorMap: its
/// alignment, its size), passed to a kernel by value.
struct alignas(128) TensorMapBytes {
  uint64_t words[16] = {};
};

/// What a tensor map describes (the plan's PlanTensorMap at one T, with
/// its operand's device address): the arguments of cuTensorMapEncodeTiled.
struct TensorMapRequest {
  const void *base = nullptr; ///< the first element
  format::PlanDType dtype = format::PlanDType::BF16;
  uint32_t rank = 0;
  uint64_t dims[5] = {};    ///< innermost first
  uint64_t strides[4] = {}; ///< bytes, dims 1..rank-1
  uint32_t box[5] = {};
  uint32_t swizzle = 0; ///< 0, 32, 64 or 128 bytes
};

/// One launch of generated code (a plan kernel's `code`).
struct CodeLaunch {
  const DeviceFunction *function = nullptr;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t sharedBytes = 0; ///< dynamic LDS/shared memory
  /// Each kernel parameter as 8 bytes, in order: device addresses and the
  /// token count T (a 64-bit integer), as the plan's `code.args` name them.
  std::vector<uint64_t> args;
  /// Per argument, the tensor map passed in its place (an index into
  /// `maps`) or -1; empty when the launch has none.
  std::vector<int32_t> argMaps;
  std::vector<TensorMapBytes> maps;
  std::string name; ///< for diagnostics: "kernel 12 (matmul) <symbol>"
  /// The kernel waits for the grid before it on the stream itself (its
  /// code begins with grid_dependency_wait()), so a backend may start it
  /// while that grid drains (CUDA: programmatic stream serialisation).
  bool overlap = false;
};

/// Launches recorded once and replayed with one call (a CUDA or HIP graph):
/// a GPU driver spends microseconds of host time on every launch, which a
/// plan of a thousand short kernels pays on every run; a graph pays it once,
/// when captured. A backend handle, valid until releaseGraph() or the end of
/// the device that made it.
struct DeviceGraph {
  void *handle = nullptr; ///< null: empty
  size_t launches = 0;    ///< launchCode() calls captured in it

  bool empty() const { return handle == nullptr; }
};

/// A compute device. Every fallible call returns false and sets \p error to
/// a one-line message.
class Device {
public:
  virtual ~Device() = default;

  /// The backend's name ("cpu").
  virtual const char *name() const = 0;
  /// True if launch() implements recipe \p r.
  virtual bool supports(format::Recipe r) const = 0;

  /// Allocates \p bytes of device memory, aligned to at least 64 bytes.
  virtual void *alloc(uint64_t bytes, std::string &error) = 0;
  /// Frees memory from alloc() (null is ignored).
  virtual void release(void *ptr) = 0;
  /// Fills \p bytes (a multiple of 4) at \p dst with the 32-bit \p pattern.
  virtual bool fill32(void *dst, uint32_t pattern, uint64_t bytes,
                      std::string &error) = 0;
  /// Copies host memory to the device.
  virtual bool upload(void *dst, const void *src, uint64_t bytes,
                      std::string &error) = 0;
  /// Copies device memory to the host.
  virtual bool download(void *dst, const void *src, uint64_t bytes,
                        std::string &error) = 0;
  /// Copies \p bytes of device memory to device memory (not overlapping),
  /// in order with the launches and copies before and after it; the host
  /// does not wait for it. What rolls generation state back (a slot's
  /// recurrent states saved and restored) without a trip through the host.
  virtual bool copy(void *dst, const void *src, uint64_t bytes,
                    std::string &error) = 0;
  /// Makes \p bytes of weight data at host address \p host (the mapped GGUF,
  /// alive as long as the device) readable by kernels and returns the device
  /// address; the CPU returns \p host itself, a GPU uploads once.
  virtual void *mapWeight(const void *host, uint64_t bytes,
                          std::string &error) = 0;

  /// Enqueues one kernel. An operand inconsistent with the recipe (shape,
  /// type, attribute, out-of-range index) is an error, never a crash.
  virtual bool launch(const Launch &launch, std::string &error) = 0;
  /// Waits until every enqueued launch and copy has finished.
  virtual bool synchronize(std::string &error) = 0;

  /// The plan target whose generated code this device runs ("host" for the
  /// CPU, which runs recipes instead; "sm_90" for cuda; "gfx1151" for hip).
  virtual const char *codeTarget() const { return "host"; }
  /// Loads \p symbol from the module file \p path (a cubin or PTX for
  /// cuda, a code object for hip); each module is loaded once.
  virtual bool loadFunction(const std::string &path, const std::string &symbol,
                            DeviceFunction &out, std::string &error);
  /// Enqueues one launch of generated code.
  virtual bool launchCode(const CodeLaunch &launch, std::string &error);
  /// Encodes the tensor map \p req describes into \p out (host-side work,
  /// no launch); only backends with a tensor memory accelerator (cuda on
  /// sm_90) have them.
  virtual bool encodeTensorMap(const TensorMapRequest &req, TensorMapBytes &out,
                               std::string &error);

  /// Timing in stream order: resizes the event pool to \p n slots,
  /// records slot \p slot after the work enqueued so far, and reads the
  /// seconds between two recorded slots (after synchronize()).
  virtual bool createEvents(size_t n, std::string &error);
  virtual bool recordEvent(size_t slot, std::string &error);
  virtual bool eventSeconds(size_t from, size_t to, double &seconds,
                            std::string &error);

  /// Graphs: between beginCapture() and endCapture() every launchCode() is
  /// recorded instead of run, and nothing else may be enqueued (copies,
  /// fills, events and waits are refused, as a driver refuses them in a
  /// capture); launchGraph() then enqueues the whole sequence in order, on
  /// the same stream as every other call. True if this device has them
  /// (the CPU, with no launch overhead to save, has not: the calls below
  /// fail with a message).
  virtual bool supportsGraphs() const { return false; }
  /// Starts recording launchCode() calls (on the calling thread).
  virtual bool beginCapture(std::string &error);
  /// Ends the capture and makes \p graph (empty before) replayable. On
  /// failure the device is no longer capturing and \p graph stays empty;
  /// the launches recorded are dropped, none ran.
  virtual bool endCapture(DeviceGraph &graph, std::string &error);
  /// Enqueues one run of \p graph after the work enqueued so far.
  virtual bool launchGraph(const DeviceGraph &graph, std::string &error);
  /// Frees \p graph and empties it; an empty graph is ignored.
  virtual void releaseGraph(DeviceGraph &graph);

  /// One line naming the hardware and driver, for logs ("cuda: NVIDIA H200
  /// (driver 12.4)"); by default the backend's name.
  virtual std::string description() const { return name(); }

private:
  std::vector<double> hostEvents_; ///< the default events: host clock
};

/// The backends this build knows, in preference order ("cpu" first); a GPU
/// backend is listed even where its driver library is missing (creating it
/// then says which library was not found).
std::vector<std::string> deviceNames();

/// Settings a backend may use; each ignores what does not apply to it.
struct DeviceOptions {
  int threads = 0; ///< cpu: workers per kernel; 0 = one per hardware thread
};

/// Creates the backend named \p name, or returns null and sets \p error.
std::unique_ptr<Device> createDevice(const std::string &name,
                                     std::string &error,
                                     const DeviceOptions &options = {});

} // namespace strata::runtime
