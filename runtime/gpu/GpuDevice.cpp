//===- GpuDevice.cpp - one Device over either vendor's driver -------------===//
#include "runtime/gpu/GpuDevice.h"

#include "runtime/format/FileUtil.h"
#include "runtime/format/OpTable.h"
#include "runtime/gpu/CudaApi.h"
#include "runtime/gpu/HipApi.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <atomic>
#include <cassert>
#include <cstdlib>
#include <map>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace strata::runtime::gpu {
namespace {

/// Device memory comes in whole units of this, aligned to it.
constexpr uint64_t kAlignment = 256;
/// Readable bytes past every allocation's end (see alloc()).
constexpr uint64_t kSlack = 16;
/// The largest module file loadFunction reads.
constexpr size_t kMaxModuleBytes = size_t(1) << 30;

std::string dlerrorText() {
  const char *e = dlerror();
  return e ? e : "unknown dlerror";
}

void *toPointer(uint64_t address) {
  return reinterpret_cast<void *>(static_cast<uintptr_t>(address));
}

uint64_t toAddress(const void *p) { return reinterpret_cast<uintptr_t>(p); }

/// Distinguishes devices for the per-thread binding, even one created at
/// the address of a destroyed one.
std::atomic<uint64_t> nextDeviceId{1};

/// A Device on device 0 of vendor \p Api (CudaApi, HipApi).
template <class Api> class GpuDevice final : public Device {
public:
  /// Loads the driver library named by Api (or its environment variable),
  /// resolves every symbol and opens device 0; null and \p error on failure.
  static std::unique_ptr<Device> create(std::string &error);
  /// Waits for the device, then frees every buffer, weight, module and
  /// event it still holds.
  ~GpuDevice() override;

  const char *name() const override { return Api::kName; }
  bool supports(format::Recipe) const override { return false; }
  void *alloc(uint64_t bytes, std::string &error) override;
  void release(void *ptr) override;
  bool fill32(void *dst, uint32_t pattern, uint64_t bytes,
              std::string &error) override;
  bool upload(void *dst, const void *src, uint64_t bytes,
              std::string &error) override;
  bool download(void *dst, const void *src, uint64_t bytes,
                std::string &error) override;
  bool copy(void *dst, const void *src, uint64_t bytes,
            std::string &error) override;
  void *mapWeight(const void *host, uint64_t bytes,
                  std::string &error) override;
  bool launch(const Launch &launch, std::string &error) override;
  bool synchronize(std::string &error) override;
  const char *codeTarget() const override { return Api::kTarget; }
  bool loadFunction(const std::string &path, const std::string &symbol,
                    DeviceFunction &out, std::string &error) override;
  bool launchCode(const CodeLaunch &launch, std::string &error) override;
  bool encodeTensorMap(const TensorMapRequest &req, TensorMapBytes &out,
                       std::string &error) override;
  bool createEvents(size_t n, std::string &error) override;
  bool recordEvent(size_t slot, std::string &error) override;
  bool eventSeconds(size_t from, size_t to, double &seconds,
                    std::string &error) override;
  bool supportsGraphs() const override { return true; }
  bool beginCapture(std::string &error) override;
  bool endCapture(DeviceGraph &graph, std::string &error) override;
  bool launchGraph(const DeviceGraph &graph, std::string &error) override;
  void releaseGraph(DeviceGraph &graph) override;
  std::string description() const override { return description_; }

private:
  using Module = typename Api::Module;
  using Function = typename Api::Function;
  using Event = typename Api::Event;
  using Stream = typename Api::Stream;
  using GraphExec = typename Api::GraphExec;

  /// A module file's driver handle and its bytes (kept: the driver need
  /// not have copied the image).
  struct LoadedModule {
    Module module{};
    std::string image;
  };

  /// What a live graph holds, for messages.
  struct GraphInfo {
    size_t launches = 0;
    std::string last; ///< the name of its last launch
  };

  GpuDevice() = default;

  /// "backend 'cuda': <what>: <entry point> failed: <driver's message>".
  std::string failure(const Status &st, std::string_view what) const;
  /// "backend 'cuda': <what>".
  std::string message(std::string_view what) const;
  /// What a wait for the device was for, naming the last launch: a kernel's
  /// fault surfaces at the next synchronizing call, not at its launch.
  std::string waitingFor(std::string_view what) const;
  /// Makes the device current on the calling thread (a driver call once
  /// per thread).
  bool bind(std::string &error);
  /// Refuses \p what (anything but a launch) during a capture, naming it:
  /// the driver would invalidate the capture or fail obscurely.
  bool notCapturing(std::string_view what, std::string &error) const;
  /// Waits for the stream after a copy, so that copies keep their
  /// synchronous contract (the host buffer may be reused on return, the
  /// downloaded bytes are there).
  bool finishCopy(std::string_view what, std::string &error);

  typename Api::Symbols sym_;
  typename Api::Context ctx_;
  /// The one stream every copy, fill, launch, event and graph goes to, in
  /// order: non-blocking, as capture is illegal on the legacy stream.
  Stream stream_{};
  bool open_ = false;
  uint64_t id_ = 0;
  std::string description_;
  std::unordered_set<uint64_t> buffers_; ///< live alloc() results
  /// Weights by (host address, bytes): each uploaded once.
  std::map<std::pair<const void *, uint64_t>, uint64_t> weights_;
  std::unordered_map<std::string, LoadedModule> modules_; ///< by path
  /// Dynamic shared memory each function was allowed beyond the default.
  std::unordered_map<Function, uint32_t> sharedAllowed_;
  std::vector<void *> params_; ///< launchCode's kernelParams, reused
  std::vector<Event> events_;
  std::vector<bool> recorded_;
  std::string lastLaunch_;
  /// Graph capture: whether one is open, its launches so far and the last.
  bool capturing_ = false;
  GraphInfo capture_;
  std::unordered_map<GraphExec, GraphInfo> graphs_; ///< live, by handle
};

template <class Api>
std::unique_ptr<Device> GpuDevice<Api>::create(std::string &error) {
  const char *env = std::getenv(Api::kLibraryEnv);
  bool fromEnv = env && *env;
  std::string library = fromEnv ? env : Api::kLibrary;
  // Never closed: a driver keeps threads and exit handlers running in its
  // code, and the next device reuses the loaded library.
  void *lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::string why = dlerrorText();
    error = fmt::format("backend '{}': cannot load {} ({}): {}", Api::kName,
                        library,
                        fromEnv ? fmt::format("named by ${}", Api::kLibraryEnv)
                                : std::string(Api::kMissingHint),
                        why);
    return nullptr;
  }

  std::unique_ptr<GpuDevice> dev(new GpuDevice());
  std::string missing;
  Api::forEachSymbol(dev->sym_, [&](const char *symbol, auto &slot) {
    if (!missing.empty())
      return;
    dlerror();
    void *p = dlsym(lib, symbol);
    if (!p) {
      missing = fmt::format("backend '{}': {} has no symbol {} (a driver too "
                            "old?): {}",
                            Api::kName, library, symbol, dlerrorText());
      return;
    }
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(p);
  });
  if (!missing.empty()) {
    error = missing;
    return nullptr;
  }

  if (Status st = Api::init(dev->sym_); !st.ok()) {
    error = dev->failure(st, fmt::format("initialising {}", library));
    return nullptr;
  }
  if (Status st = Api::open(dev->sym_, dev->ctx_); !st.ok()) {
    error = dev->failure(st, "opening device 0");
    return nullptr;
  }
  dev->open_ = true;
  dev->id_ = nextDeviceId++;
  // Records this thread as bound (open() made the device current here).
  if (!dev->bind(error))
    return nullptr;
  if (Status st = Api::createStream(dev->sym_, dev->stream_); !st.ok()) {
    dev->stream_ = {};
    error = dev->failure(st, "creating a stream");
    return nullptr;
  }

  char deviceName[256] = {};
  if (Status st = Api::deviceName(dev->sym_, dev->ctx_, deviceName,
                                  sizeof(deviceName) - 1);
      !st.ok()) {
    error = dev->failure(st, "reading the device name");
    return nullptr;
  }
  std::string version;
  if (Status st = Api::driverVersion(dev->sym_, version); !st.ok()) {
    error = dev->failure(st, "reading the driver version");
    return nullptr;
  }
  dev->description_ =
      fmt::format("{}: {} (driver {})", Api::kName, deviceName, version);
  return dev;
}

template <class Api> GpuDevice<Api>::~GpuDevice() {
  if (!open_)
    return;
  // Nothing here can report an error; give back what the driver takes.
  std::string ignored;
  if (!bind(ignored))
    return;
  if (capturing_) {
    // A capture left open (its owner failed midway): end it, drop it.
    typename Api::Graph g{};
    if (Api::endCapture(sym_, stream_, g).ok() && g)
      (void)Api::destroyGraph(sym_, g);
  }
  if (stream_)
    (void)Api::synchronize(sym_, stream_);
  for (const auto &[exec, info] : graphs_)
    (void)Api::destroyGraphExec(sym_, exec);
  for (Event e : events_)
    (void)Api::destroyEvent(sym_, e);
  for (uint64_t p : buffers_)
    (void)Api::release(sym_, p);
  for (const auto &[key, p] : weights_)
    (void)Api::release(sym_, p);
  for (const auto &[path, m] : modules_)
    (void)Api::unloadModule(sym_, m.module);
  if (stream_)
    (void)Api::destroyStream(sym_, stream_);
  Api::close(sym_, ctx_);
}

template <class Api>
std::string GpuDevice<Api>::failure(const Status &st,
                                    std::string_view what) const {
  return fmt::format("backend '{}': {}: {} failed: {}", Api::kName, what,
                     st.call, Api::errorString(sym_, st.code));
}

template <class Api>
std::string GpuDevice<Api>::message(std::string_view what) const {
  return fmt::format("backend '{}': {}", Api::kName, what);
}

template <class Api>
std::string GpuDevice<Api>::waitingFor(std::string_view what) const {
  if (lastLaunch_.empty())
    return std::string(what);
  return fmt::format("{} (last launch: {})", what, lastLaunch_);
}

template <class Api> bool GpuDevice<Api>::bind(std::string &error) {
  thread_local uint64_t bound = 0;
  if (bound == id_)
    return true;
  if (Status st = Api::bind(sym_, ctx_); !st.ok()) {
    error = failure(st, "making the device current on this thread");
    return false;
  }
  bound = id_;
  return true;
}

template <class Api>
bool GpuDevice<Api>::notCapturing(std::string_view what,
                                  std::string &error) const {
  if (!capturing_)
    return true;
  error = message(fmt::format("{} while capturing a graph (a capture takes "
                              "launches only)",
                              what));
  return false;
}

template <class Api>
bool GpuDevice<Api>::finishCopy(std::string_view what, std::string &error) {
  if (Status st = Api::synchronize(sym_, stream_); !st.ok()) {
    error = failure(st, waitingFor(what));
    return false;
  }
  return true;
}

template <class Api>
void *GpuDevice<Api>::alloc(uint64_t bytes, std::string &error) {
  // Whole units, as the drivers hand them out anyway, with 16 bytes to
  // spare past the end (generated GEMMs copy 16-byte aligned windows around
  // weight rows, up to 15 bytes past a row); zero bytes still get an
  // address of their own.
  uint64_t rounded =
      (bytes + kSlack + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < bytes) {
    error = message(fmt::format("cannot allocate {} bytes", bytes));
    return nullptr;
  }
  if (!notCapturing(fmt::format("allocating {} bytes", bytes), error) ||
      !bind(error))
    return nullptr;
  uint64_t p = 0;
  if (Status st = Api::alloc(sym_, rounded, p); !st.ok()) {
    error = failure(st, fmt::format("allocating {} bytes", bytes));
    return nullptr;
  }
  if (p == 0 || p % kAlignment != 0) {
    (void)Api::release(sym_, p);
    error = message(fmt::format("the driver returned address {:#x} for {} "
                                "bytes, not {}-byte aligned",
                                p, bytes, kAlignment));
    return nullptr;
  }
  buffers_.insert(p);
  return toPointer(p);
}

template <class Api> void GpuDevice<Api>::release(void *ptr) {
  if (!ptr)
    return;
  auto it = buffers_.find(toAddress(ptr));
  assert(it != buffers_.end() && "release() of memory not from alloc()");
  if (it == buffers_.end())
    return;
  buffers_.erase(it);
  std::string ignored;
  if (bind(ignored))
    (void)Api::release(sym_, toAddress(ptr));
}

template <class Api>
bool GpuDevice<Api>::fill32(void *dst, uint32_t pattern, uint64_t bytes,
                            std::string &error) {
  if (bytes % 4 != 0) {
    error =
        message(fmt::format("fill32 of {} bytes, not a multiple of 4", bytes));
    return false;
  }
  if (bytes == 0)
    return true;
  if (!notCapturing(fmt::format("filling {} bytes", bytes), error) ||
      !bind(error))
    return false;
  if (Status st =
          Api::fill32(sym_, stream_, toAddress(dst), pattern, bytes / 4);
      !st.ok()) {
    error = failure(st, fmt::format("filling {} bytes at {} with {:#010x}",
                                    bytes, dst, pattern));
    return false;
  }
  return true;
}

template <class Api>
bool GpuDevice<Api>::upload(void *dst, const void *src, uint64_t bytes,
                            std::string &error) {
  if (bytes == 0)
    return true;
  std::string what =
      fmt::format("copying {} bytes to the device at {}", bytes, dst);
  if (!notCapturing(what, error) || !bind(error))
    return false;
  if (Status st = Api::upload(sym_, stream_, toAddress(dst), src, bytes);
      !st.ok()) {
    error = failure(st, waitingFor(what));
    return false;
  }
  return finishCopy(what, error);
}

template <class Api>
bool GpuDevice<Api>::download(void *dst, const void *src, uint64_t bytes,
                              std::string &error) {
  if (bytes == 0)
    return true;
  std::string what =
      fmt::format("copying {} bytes from the device at {}", bytes, src);
  if (!notCapturing(what, error) || !bind(error))
    return false;
  if (Status st = Api::download(sym_, stream_, dst, toAddress(src), bytes);
      !st.ok()) {
    error = failure(st, waitingFor(what));
    return false;
  }
  return finishCopy(what, error);
}

template <class Api>
bool GpuDevice<Api>::copy(void *dst, const void *src, uint64_t bytes,
                          std::string &error) {
  if (bytes == 0)
    return true;
  std::string what = fmt::format("copying {} bytes on the device from {} to {}",
                                 bytes, src, dst);
  if (!notCapturing(what, error) || !bind(error))
    return false;
  // Stream-ordered like a launch: no host buffer to hand back, so no wait.
  if (Status st =
          Api::copy(sym_, stream_, toAddress(dst), toAddress(src), bytes);
      !st.ok()) {
    error = failure(st, waitingFor(what));
    return false;
  }
  return true;
}

template <class Api>
void *GpuDevice<Api>::mapWeight(const void *host, uint64_t bytes,
                                std::string &error) {
  auto key = std::make_pair(host, bytes);
  if (auto it = weights_.find(key); it != weights_.end())
    return toPointer(it->second);
  void *p = alloc(bytes, error);
  if (!p)
    return nullptr;
  if (!upload(p, host, bytes, error)) {
    release(p);
    return nullptr;
  }
  // Weights live as long as the device: not release()'s to free.
  buffers_.erase(toAddress(p));
  weights_.emplace(key, toAddress(p));
  return p;
}

template <class Api>
bool GpuDevice<Api>::launch(const Launch &launch, std::string &error) {
  error = message(fmt::format("runs generated code only, not recipe '{}': "
                              "compile the plan for target {}",
                              format::recipeInfo(launch.recipe).name,
                              Api::kTarget));
  return false;
}

template <class Api> bool GpuDevice<Api>::synchronize(std::string &error) {
  if (!notCapturing("waiting for the device", error) || !bind(error))
    return false;
  if (Status st = Api::synchronize(sym_, stream_); !st.ok()) {
    error = failure(st, waitingFor("waiting for the device"));
    return false;
  }
  return true;
}

template <class Api>
bool GpuDevice<Api>::loadFunction(const std::string &path,
                                  const std::string &symbol,
                                  DeviceFunction &out, std::string &error) {
  if (!bind(error))
    return false;
  auto it = modules_.find(path);
  if (it == modules_.end()) {
    std::string image, readError;
    if (!format::readWholeFile(path, kMaxModuleBytes, image, readError)) {
      error =
          message(fmt::format("loading function '{}': {}", symbol, readError));
      return false;
    }
    // The driver reads a PTX image as text up to its NUL; an ELF image
    // (cubin, code object) ignores the extra byte.
    image.push_back('\0');
    // The entry first, so the image is loaded from where it stays.
    it = modules_.emplace(path, LoadedModule{{}, std::move(image)}).first;
    if (Status st =
            Api::loadModule(sym_, it->second.module, it->second.image.data());
        !st.ok()) {
      modules_.erase(it);
      error = failure(
          st, fmt::format("loading module {} (for '{}')", path, symbol));
      return false;
    }
  }
  Function f{};
  if (Status st = Api::getFunction(sym_, f, it->second.module, symbol.c_str());
      !st.ok()) {
    error =
        failure(st, fmt::format("loading function '{}' from {}", symbol, path));
    return false;
  }
  out.handle = f;
  return true;
}

template <class Api>
bool GpuDevice<Api>::launchCode(const CodeLaunch &launch, std::string &error) {
  if (!launch.function || !launch.function->handle) {
    error =
        message(fmt::format("launching {}: no function loaded", launch.name));
    return false;
  }
  if (!bind(error))
    return false;
  Function f = static_cast<Function>(launch.function->handle);
  if (launch.sharedBytes > Api::kSharedWithoutOptIn) {
    uint32_t &allowed = sharedAllowed_[f];
    if (allowed < launch.sharedBytes) {
      if (Status st = Api::allowShared(sym_, f, launch.sharedBytes); !st.ok()) {
        error = failure(st, fmt::format("allowing {} {} bytes of dynamic "
                                        "shared memory",
                                        launch.name, launch.sharedBytes));
        return false;
      }
      allowed = launch.sharedBytes;
    }
  }
  // The driver reads each parameter through a pointer to its value: 8
  // bytes (an address or T), or a tensor map's 128.
  params_.resize(launch.args.size());
  for (size_t i = 0; i < launch.args.size(); ++i) {
    const int32_t m = i < launch.argMaps.size() ? launch.argMaps[i] : -1;
    if (m >= 0 && static_cast<size_t>(m) >= launch.maps.size()) {
      error = message(fmt::format("launching {}: argument {} names tensor "
                                  "map {} of {}",
                                  launch.name, i, m, launch.maps.size()));
      return false;
    }
    params_[i] = m >= 0 ? const_cast<uint64_t *>(launch.maps[m].words)
                        : const_cast<uint64_t *>(&launch.args[i]);
  }
  if (Status st = Api::launch(
          sym_, stream_, f, launch.grid, launch.block, launch.sharedBytes,
          params_.empty() ? nullptr : params_.data(), launch.overlap);
      !st.ok()) {
    error = failure(st, fmt::format("launching {} (grid {}x{}x{}, block "
                                    "{}x{}x{}, {} shared bytes, {} arguments)",
                                    launch.name, launch.grid[0], launch.grid[1],
                                    launch.grid[2], launch.block[0],
                                    launch.block[1], launch.block[2],
                                    launch.sharedBytes, launch.args.size()));
    return false;
  }
  // A captured launch runs later, as part of its graph.
  if (capturing_) {
    ++capture_.launches;
    capture_.last = launch.name;
  } else {
    lastLaunch_ = launch.name;
  }
  return true;
}

template <class Api>
bool GpuDevice<Api>::encodeTensorMap(const TensorMapRequest &req,
                                     TensorMapBytes &out, std::string &error) {
  if constexpr (!Api::kTensorMaps) {
    return Device::encodeTensorMap(req, out, error);
  } else {
    if (!bind(error))
      return false;
    if (Status st = Api::encodeTensorMap(sym_, req, out); !st.ok()) {
      error =
          failure(st, fmt::format("encoding a tensor map ({}, rank {}, "
                                  "inner dim {}, box {}x{}, swizzle {})",
                                  format::planDTypeName(req.dtype), req.rank,
                                  req.dims[0], req.box[0],
                                  req.rank > 1 ? req.box[1] : 1, req.swizzle));
      return false;
    }
    return true;
  }
}

template <class Api>
bool GpuDevice<Api>::createEvents(size_t n, std::string &error) {
  if (!bind(error))
    return false;
  while (events_.size() > n) {
    (void)Api::destroyEvent(sym_, events_.back());
    events_.pop_back();
  }
  recorded_.assign(events_.size(), false);
  while (events_.size() < n) {
    Event e{};
    if (Status st = Api::createEvent(sym_, e); !st.ok()) {
      error = failure(
          st, fmt::format("creating timing event {} of {}", events_.size(), n));
      recorded_.assign(events_.size(), false);
      return false;
    }
    events_.push_back(e);
  }
  recorded_.assign(n, false);
  return true;
}

template <class Api>
bool GpuDevice<Api>::recordEvent(size_t slot, std::string &error) {
  if (slot >= events_.size()) {
    error = message(fmt::format("event slot {} of {}", slot, events_.size()));
    return false;
  }
  if (!notCapturing(fmt::format("recording event slot {}", slot), error) ||
      !bind(error))
    return false;
  if (Status st = Api::recordEvent(sym_, stream_, events_[slot]); !st.ok()) {
    error = failure(st, fmt::format("recording event slot {}", slot));
    return false;
  }
  recorded_[slot] = true;
  return true;
}

template <class Api>
bool GpuDevice<Api>::eventSeconds(size_t from, size_t to, double &seconds,
                                  std::string &error) {
  if (from >= events_.size() || to >= events_.size()) {
    error = message(
        fmt::format("event slots {} and {} of {}", from, to, events_.size()));
    return false;
  }
  for (size_t slot : {from, to}) {
    if (!recorded_[slot]) {
      error = message(fmt::format("event slot {} was never recorded", slot));
      return false;
    }
  }
  if (!bind(error))
    return false;
  float ms = 0;
  if (Status st = Api::elapsedMs(sym_, ms, events_[from], events_[to]);
      !st.ok()) {
    error = failure(st, fmt::format("reading the time from event slot {} to "
                                    "{}",
                                    from, to));
    return false;
  }
  seconds = ms / 1000.0;
  return true;
}

template <class Api> bool GpuDevice<Api>::beginCapture(std::string &error) {
  if (!notCapturing("beginning a capture", error) || !bind(error))
    return false;
  if (Status st = Api::beginCapture(sym_, stream_); !st.ok()) {
    error = failure(st, "beginning to capture a graph");
    return false;
  }
  capturing_ = true;
  capture_ = GraphInfo{};
  return true;
}

template <class Api>
bool GpuDevice<Api>::endCapture(DeviceGraph &graph, std::string &error) {
  if (!capturing_) {
    error = message("ending a capture that was never begun");
    return false;
  }
  assert(graph.empty() && "endCapture() into a graph that holds one");
  if (!bind(error))
    return false;
  capturing_ = false;
  GraphInfo info = std::move(capture_);
  std::string what = fmt::format("a graph of {} launches", info.launches);
  typename Api::Graph g{};
  Status st = Api::endCapture(sym_, stream_, g);
  if (!st.ok() || !g) {
    if (g)
      (void)Api::destroyGraph(sym_, g);
    error = st.ok() ? message(fmt::format("capturing {}: the driver "
                                          "invalidated the capture",
                                          what))
                    : failure(st, fmt::format("capturing {}", what));
    return false;
  }
  GraphExec exec{};
  st = Api::instantiate(sym_, exec, g);
  // The executable graph is independent of the graph it was made from.
  (void)Api::destroyGraph(sym_, g);
  if (!st.ok()) {
    error = failure(st, fmt::format("instantiating {}", what));
    return false;
  }
  graph.handle = exec;
  graph.launches = info.launches;
  graphs_.emplace(exec, std::move(info));
  return true;
}

template <class Api>
bool GpuDevice<Api>::launchGraph(const DeviceGraph &graph, std::string &error) {
  auto it = graphs_.find(static_cast<GraphExec>(graph.handle));
  if (it == graphs_.end()) {
    error = message("launching a graph this device does not hold (empty or "
                    "released)");
    return false;
  }
  std::string what = fmt::format("a graph of {} launches (the last: {})",
                                 it->second.launches, it->second.last);
  if (!notCapturing("launching " + what, error) || !bind(error))
    return false;
  if (Status st = Api::launchGraph(sym_, stream_, it->first); !st.ok()) {
    error = failure(st, waitingFor("launching " + what));
    return false;
  }
  lastLaunch_ = what;
  return true;
}

template <class Api> void GpuDevice<Api>::releaseGraph(DeviceGraph &graph) {
  auto it = graphs_.find(static_cast<GraphExec>(graph.handle));
  graph = DeviceGraph{};
  if (it == graphs_.end())
    return;
  std::string ignored;
  if (bind(ignored))
    (void)Api::destroyGraphExec(sym_, it->first);
  graphs_.erase(it);
}

/// One GPU backend of the registry.
struct Backend {
  const char *name;
  std::unique_ptr<Device> (*create)(std::string &error);
};

/// Every GPU backend, in preference order.
const Backend kBackends[] = {
    {CudaApi::kName, &GpuDevice<CudaApi>::create},
    {HipApi::kName, &GpuDevice<HipApi>::create},
};

} // namespace

std::vector<std::string> gpuBackendNames() {
  std::vector<std::string> names;
  for (const Backend &b : kBackends)
    names.emplace_back(b.name);
  return names;
}

std::unique_ptr<Device> createGpuDevice(const std::string &name,
                                        std::string &error) {
  for (const Backend &b : kBackends)
    if (name == b.name)
      return b.create(error);
  error = fmt::format("unknown GPU backend '{}'", name);
  return nullptr;
}

} // namespace strata::runtime::gpu
