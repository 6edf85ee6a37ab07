//===- Executor.h - run a compiled plan on a device -------------*- C++ -*-===//
//
// The executor maps the GGUF, checks the plan's weights against it, allocates
// one arena of `plan.arenaBytes` and, per run, writes the prompt's token ids
// into the plan's input buffer and launches every kernel in order with shapes
// evaluated at the prompt length T'. It makes no decisions of its own.
//
// When the plan is loaded, every buffer a kernel reads must be a plan input,
// an earlier kernel's output or a view of one (same offset and size). What
// that cannot see (a kernel writing less than its shape, extents that
// disagree at T' < max_tokens) shows up at run time: the arena is filled with
// NaN (the 32-bit pattern kPoison) before every run (before the first only
// with setPoisonEachRun(false)), and the executor reports NaN always in the
// output, and after every kernel with setNanCheck.
//
// On a GPU the second run at a prompt length captures its launches into a
// device graph, and every later run at that length replays it with one call
// (setGraphs): the plan's order is kept, the driver's per-launch host cost
// is paid at capture only. A single run launches one kernel at a time, as
// capturing costs about what launching does, plus instantiation. The poison
// fill and the token upload are enqueued before the graph on the same
// stream, so they still happen before every run.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Device.h"
#include "runtime/format/Plan.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strata::format {
class GgufFile;
} // namespace strata::format

namespace strata::runtime {

/// The arena's fill before each run: a quiet NaN as f32 and, per half, as
/// f16 and bf16; as an i32 it is an id far out of any table's range.
constexpr uint32_t kPoison = 0x7FC07FC0u;

/// One kernel's comparison under setCheck: the GPU's outputs against the CPU
/// backend's on the same inputs.
struct KernelCheck {
  double worstNmse = 0;    ///< over its float outputs
  double mismatch = 0;     ///< fraction of differing i32 elements
  std::string worstOutput; ///< the buffer with the worst NMSE (or mismatch)
  bool pass = true;
};

/// The bars of setCheck, per output type (NMSE of the GPU against the CPU
/// on the same inputs: the GPU's matrix units round operands to bf16/f16
/// and its reductions run in another order; i32 outputs (routing, top-k)
/// may differ only where values tie within that rounding).
struct CheckBars {
  double f32Nmse = 1e-4;
  double bf16Nmse = 1e-4;
  double i32Mismatch = 0.01;
};

/// GraphUse::off of the first run at a prompt length.
inline constexpr const char *kGraphFirstRun = "first run at this prompt length";

/// How the last run launched the plan's generated code.
struct GraphUse {
  bool used = false;         ///< one device graph ran every kernel
  bool captured = false;     ///< this run captured it (first at its length)
  size_t launches = 0;       ///< the launches in that graph
  double captureSeconds = 0; ///< capture and instantiation, when captured
  /// When not used, why: kGraphFirstRun, "turned off", "profiling each
  /// kernel", "capture failed: ...".
  std::string off;
};

/// One row of a run (plans with state): a token id, its position in its
/// sequence and the sequence's slot (docs/generation-design.md).
struct Row {
  int32_t token = 0;
  int32_t pos = 0;
  int32_t seq = 0;
};

/// The plan's output buffer after a run, as f32.
struct RunOutput {
  std::vector<int64_t> shape; ///< at T', e.g. [T', vocab]
  std::vector<float> data;    ///< row-major
};

class Executor {
public:
  /// Opens \p ggufPath, checks the plan's weights against it (the error names
  /// the weight), creates backend \p backendName, checks that it implements
  /// every recipe of the plan and allocates the arena. Returns null and sets
  /// \p error to a one-line message on failure.
  /// A plan with generated code (GPU targets) loads its modules from
  /// \p planDir (the folder its plan.json came from). With
  /// \p syntheticSeed the weights are not read from the file (which may be
  /// shapes-only) but filled with deterministic random blocks
  /// (SyntheticWeights.h).
  static std::unique_ptr<Executor>
  create(const format::Plan &plan, const std::string &ggufPath,
         const std::string &backendName, std::string &error,
         const DeviceOptions &options = {}, const std::string &planDir = "",
         std::optional<uint64_t> syntheticSeed = std::nullopt);
  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  /// Runs the plan on \p tokens (1 <= size <= plan().maxTokens, each a valid
  /// row of every table that reads them) and returns plan.outputs[0].
  /// Errors name the kernel ("kernel 12 (matmul): ...") or the token.
  bool run(const std::vector<int32_t> &tokens, RunOutput &out,
           std::string &error);

  /// Runs the plan on \p rows (1 <= size <= plan().maxTokens): row r's
  /// token at position rows[r].pos of slot rows[r].seq, reading and writing
  /// the plan's state (kept from earlier runs of this executor). Every
  /// position must be below the plan's max_context and every slot below its
  /// max_batch, no two rows at one position of one slot; this is checked
  /// before any kernel runs (a one-line error naming the row). A plan
  /// without state computes rows of slot 0 at positions 0, 1, ... only.
  /// run(tokens) is runRows of slot 0 from position 0.
  /// With \p keep, only those rows of the output come back, in that order
  /// (out.shape[0] is their count): a run of many rows whose logits are
  /// mostly not wanted (a prompt chunk of a --logits all plan) copies only
  /// the wanted rows from the device. Each must be a row of the output.
  bool runRows(const std::vector<Row> &rows, RunOutput &out, std::string &error,
               const std::vector<int64_t> *keep = nullptr);

  /// True if the plan returns the greedy id of each logits row beside the
  /// logits (a second output, i32 [rows]: strata-compile --greedy-ids).
  bool hasGreedyIds() const { return plan_.outputs.size() > 1; }
  /// runRows, reading the greedy ids instead of the logits: \p ids gets
  /// the argmax of each logits row (the lowest id on ties), computed on the
  /// device, and no logits cross to the host. Fails on a plan without them
  /// and where a row's logits hold NaN or +inf or only -inf (the error
  /// names the row and the value, as the logits' scan does).
  bool runRowsIds(const std::vector<Row> &rows, std::vector<int32_t> &ids,
                  std::string &error);
  /// runRowsIds for some rows and the logits of others: \p ids gets the
  /// greedy ids of rows \p idRows (in that order, each checked as above)
  /// and \p out the logits rows \p keep (none when empty): a server's
  /// step where greedy streams need an id and sampled ones their logits.
  bool runRowsIds(const std::vector<Row> &rows,
                  const std::vector<int64_t> &idRows, std::vector<int32_t> &ids,
                  const std::vector<int64_t> &keep, RunOutput &out,
                  std::string &error);

  /// The plan's max_context and max_batch (0 for a plan without state).
  int64_t maxContext() const { return maxContext_; }
  int64_t maxBatch() const { return maxBatch_; }
  /// Zeroes every state (every slot forgets its sequence).
  bool resetStates(std::string &error);
  /// The values of state \p index (plan().states) as f32: bf16 widened, i8
  /// rows dequantised (stateElements).
  bool readState(size_t index, std::vector<float> &out, std::string &error);

  /// True if the plan has a recurrent state: one that every row advances
  /// (a conv window, a delta-rule state, a token history: what a State-class
  /// kernel other than kv_store writes) rather than one indexed by position
  /// (a cache written by kv_store). Rows run and then taken back (rejected
  /// speculative drafts) leave a cache to be rewritten by the next row at
  /// each position, but a recurrent state changed for good: only
  /// restoreSlot() takes that back.
  bool hasRecurrentState() const { return !recurrent_.empty(); }
  /// The bytes of one slot's part of the recurrent states: what saveSlot()
  /// copies.
  uint64_t recurrentSlotBytes() const;
  /// Copies \p slot's part of every recurrent state into the executor's
  /// snapshot of that slot (device memory, allocated at the slot's first
  /// save; a later save replaces it), on the device, in order with the
  /// runs. Fails naming a bad slot or the device's error.
  bool saveSlot(int32_t slot, std::string &error);
  /// Copies \p slot's snapshot back into its recurrent states: they are
  /// again what they were at its saveSlot(). Fails when the slot was never
  /// saved.
  bool restoreSlot(int32_t slot, std::string &error);

  /// After every kernel, scan its floating-point outputs for NaN and fail
  /// naming the first kernel that left one (slow; for debugging).
  void setNanCheck(bool on) { nanCheck_ = on; }

  /// Fill the arena with kPoison before every run (on, the default: a
  /// kernel that reads what this run did not write reads NaN) or before
  /// the first run only (off: generation, where the fill of a plan's whole
  /// arena, a GB for 1,024 rows, costs a decode step ~0.3 ms on the H100
  /// for nothing; --check and --nan-check runs keep it on).
  void setPoisonEachRun(bool on) { poisonEachRun_ = on; }

  /// Time every kernel of the following runs: synchronize after each launch
  /// and keep its wall time (seconds, per kernel of the plan) in
  /// kernelSeconds(). Serialises the device, so only for profiling.
  void setProfile(bool on) { profile_ = on; }
  /// Per kernel of the plan, its time in the last profiled run.
  const std::vector<double> &kernelSeconds() const { return kernelSeconds_; }
  /// Per slot the last run touched (in slot order), the positions its rows
  /// attend: its last row's position + 1 (empty for a plan without state).
  /// What the caches' reads of that run scale with (format::kernelRunBytes).
  const std::vector<int64_t> &lastRunAttended() const {
    return lastRunAttended_;
  }

  /// Keep a copy (as f32) of the buffers named \p names right after the
  /// kernel that writes each, before the arena reuses their bytes. Names are
  /// the IR value names of the plan's buffers. Returns false and sets
  /// \p error if a name is not a buffer some kernel writes.
  bool setCapture(const std::vector<std::string> &names, std::string &error);
  /// The buffers captured by the last run, by name.
  const std::map<std::string, RunOutput> &captured() const { return captured_; }

  /// Check every kernel of the following runs: before it runs on this
  /// (GPU) device, its input buffers are copied into a CPU backend's arena,
  /// the CPU runs the same kernel (recipe or fused body) and the outputs are
  /// compared against \p bars; run() fails naming the first kernel over a
  /// bar (with its fused body). Results per kernel in checks().
  bool setCheck(const CheckBars &bars, std::string &error);
  /// Per kernel of the plan, its comparison in the last checked run.
  const std::vector<KernelCheck> &checks() const { return checks_; }

  /// Run generated code as a device graph (on by default): the second run
  /// at a prompt length captures its launches and replays them, later runs
  /// at that length replay them with one call (the first launches one at a
  /// time: a graph run once costs more than it saves). Graphs stay unused
  /// where the device has none and while a per-kernel mode (profile, check,
  /// buffer capture, NaN check) is on; a capture the device refuses turns
  /// them off for this executor (the reason in graphUse()), never failing a
  /// run.
  void setGraphs(bool on);
  /// How the last run launched its kernels.
  const GraphUse &graphUse() const { return graphUse_; }

  /// Compares every synthetic weight on the device, byte for byte, with
  /// the host fill of the same seed (SyntheticBlock.h on both sides); on
  /// success \p report says how many weights and bytes and where they were
  /// made, else \p error names the first differing weight and byte.
  bool verifySyntheticWeights(std::string &report, std::string &error);

  const format::Plan &plan() const { return plan_; }
  Device &device() { return *device_; }

private:
  /// Where a kernel's operands live: a device, its arena, workspace and
  /// weights (the run's device, or the CPU that checks it).
  struct Bound {
    Device *device = nullptr;
    uint8_t *arena = nullptr;
    uint8_t *workspace = nullptr;
    std::vector<void *> weights;
    /// The plan's states (Plan::states), outside the arena.
    std::vector<void *> states;
    std::vector<void *> owned; ///< synthetic weights, released with it
  };

  Executor() = default;
  /// The checks and uploads of a run, then its launches: \p tokens with,
  /// for plans with state, \p pos and \p seq (same length).
  bool runPrepared(const std::vector<int32_t> &tokens,
                   const std::vector<int32_t> *pos,
                   const std::vector<int32_t> *seq, RunOutput &out,
                   std::string &error,
                   const std::vector<int64_t> *keep = nullptr,
                   std::vector<int32_t> *ids = nullptr,
                   const std::vector<int64_t> *idRows = nullptr);
  /// runRows' checks of \p rows, then runPrepared (with \p ids: the greedy
  /// ids read instead of the logits).
  bool runRowsAs(const std::vector<Row> &rows, RunOutput &out,
                 std::string &error, const std::vector<int64_t> *keep,
                 std::vector<int32_t> *ids, const std::vector<int64_t> *idRows);
  /// The error for greedy id -1 of output row \p row: where its logits
  /// hold NaN or +inf, or that they are all -inf.
  std::string badIdsRow(int64_t tokens, int64_t row);
  /// Buffer \p index (or any operand) at T' = \p tokens.
  TensorArg bufferArg(const Bound &b, uint32_t index, int64_t tokens) const;
  TensorArg operandArg(const Bound &b, const format::PlanOperand &o,
                       int64_t tokens) const;
  /// The tensor \p ref names inside fused kernel \p k at T' = \p tokens.
  TensorArg bodyArg(const Bound &b, const format::PlanKernel &k,
                    const format::BodyRef &ref, int64_t tokens) const;
  /// Launches kernel \p k on \p b: its generated code (GPU plans), or a
  /// catalog recipe, or a fused body interpreted one recipe at a time over
  /// its inputs, outputs and temporaries (in a workspace outside the
  /// arena).
  bool launchKernel(const Bound &b, size_t k, int64_t tokens,
                    std::string &error);
  /// The launches of the generated code at T' = \p tokens (computed once
  /// per prompt length; a graph of another length is released).
  bool prepareLaunches(int64_t tokens, std::string &error);
  /// Appends to \p l's maps the encoding of \p m at \p tokens (its
  /// operand's address, its dims at that T, checked against the storage;
  /// \p workspaceBytes: the kernel's workspace at that T).
  bool encodeTensorMap(CodeLaunch &l, const format::PlanTensorMap &m,
                       int64_t tokens, uint64_t workspaceBytes,
                       std::string &error);
  /// Launches every kernel at T' = \p t one at a time, with the
  /// per-kernel modes (check, profile events, buffer capture, NaN check).
  bool launchEach(int64_t t, std::string &error);
  /// Why the next run cannot use a graph ("" if it can).
  std::string graphsOffBecause() const;
  /// Captures launches_ into graph_; on failure notes why in graphFailure_
  /// (a run then launches one kernel at a time).
  void captureGraph();
  /// Before kernel \p k runs on the device: copies its input buffers into
  /// the checking CPU's arena and runs it there (before a tied output
  /// overwrites an input on the device).
  bool checkKernel(size_t k, int64_t tokens, std::string &error);
  /// After kernel \p k ran on the device: compares its outputs with the
  /// CPU's against the bars; fails naming the kernel and its body.
  bool compareKernel(size_t k, int64_t tokens, std::string &error);
  /// Copies buffer \p index at T' = \p tokens to the host as f32.
  bool readBuffer(const Bound &b, uint32_t index, int64_t tokens,
                  std::vector<float> &out, std::string &error);
  /// Rows \p keep (of the first dimension) of buffer \p index at T' =
  /// \p tokens as f32, consecutive rows in one download; \p shape is the
  /// buffer's with the first dimension their count.
  bool readRows(const Bound &b, uint32_t index, int64_t tokens,
                const std::vector<int64_t> &keep, std::vector<int64_t> &shape,
                std::vector<float> &out, std::string &error);
  /// Makes every plan weight readable on \p b's device: the file's bytes,
  /// or synthetic ones (GPU plans: made on the device by the plan's fill
  /// kernel; else generated on host threads and uploaded in chunks).
  bool loadWeights(Bound &b, std::string &error);

  format::Plan plan_;
  std::string planDir_;
  std::optional<uint64_t> synthetic_;
  bool syntheticOnDevice_ = false; ///< filled by the plan's kernel
  std::unique_ptr<format::GgufFile> gguf_;
  std::unique_ptr<Device> device_;
  Bound main_;
  std::vector<uint64_t> weightBytes_;
  /// Generated code: per kernel, the function of its code and of each
  /// alternate (PlanCode::alternates, in order); launches at launchesT_.
  bool code_ = false;
  std::vector<std::vector<DeviceFunction>> functions_;
  std::vector<CodeLaunch> launches_;
  /// Per kernel and code likewise, its pre-launch (PlanCode::pre; function
  /// null if none), run just before the kernel's own launch.
  std::vector<std::vector<DeviceFunction>> preFunctions_;
  std::vector<CodeLaunch> preLaunches_;
  int64_t launchesT_ = -1;
  int64_t runsAtT_ = 0; ///< runs at launchesT_ so far, this one included
  /// setGraphs: launches_ as one device graph (empty until captured).
  bool graphs_ = true;
  DeviceGraph graph_;
  /// The launches and graph of other row counts, kept so that generation,
  /// which alternates between prefill chunks and decode steps of a few row
  /// counts, replays one graph per shape instead of recapturing (at most
  /// kShapesKept; past that the kept ones are released).
  struct Shape {
    std::vector<CodeLaunch> launches, preLaunches;
    DeviceGraph graph;
    int64_t runs = 0;
  };
  static constexpr size_t kShapesKept = 8;
  std::map<int64_t, Shape> shapes_;
  /// Releases graph_ and every kept shape's graph.
  void releaseGraphs();
  std::string graphFailure_; ///< a capture failed: why (graphs stay off)
  GraphUse graphUse_;
  /// The greedy ids of the latest run, every row (runRowsIds picks).
  std::vector<int32_t> idStage_;
  /// readBuffer/readRows' host copy of a non-f32 output, kept: a decode
  /// step's logits are a vocabulary per row (16 MB at 16 rows of 248K), and
  /// a buffer allocated and freed per step is mapped, faulted in page by
  /// page and unmapped each time (glibc's mmap threshold; strata-serve
  /// fixes it low). An f32 output is downloaded into the caller's vector.
  std::vector<uint8_t> hostStage_;
  /// --check: the CPU backend that reruns every kernel.
  std::unique_ptr<Device> checkDevice_;
  Bound check_;
  CheckBars bars_;
  std::vector<KernelCheck> checks_;
  bool nanCheck_ = false;
  bool poisonEachRun_ = true;
  bool poisoned_ = false; ///< the arena has had its fill
  bool profile_ = false;
  std::vector<int64_t> lastRunAttended_;
  std::vector<double> kernelSeconds_;
  std::map<uint32_t, std::string> capture_; ///< buffer index -> name
  std::map<std::string, RunOutput> captured_;
  int64_t maxContext_ = 0, maxBatch_ = 0;
  /// The recurrent states (hasRecurrentState), in plan order.
  std::vector<size_t> recurrent_;
  /// Per slot saved, its snapshot: each recurrent state's slot slice, in
  /// recurrent_ order, at offsets rounded up to kSnapshotAlign.
  std::map<int32_t, void *> snapshots_;
  static constexpr uint64_t kSnapshotAlign = 256;
  /// Copies \p slot's recurrent slices to (\p save) or from its snapshot.
  bool copySlot(int32_t slot, bool save, std::string &error);
};

} // namespace strata::runtime
