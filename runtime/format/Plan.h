//===- Plan.h - the compiled plan: compiler/runtime contract ----*- C++ -*-===//
//
// A plan directory holds `plan.json` (this structure, versioned) and, for
// GPU targets, kernel files. The runtime reads it, maps the GGUF, allocates
// one arena of `arenaBytes`, and launches `kernels` in order. It makes no
// decisions; everything here was decided by the compiler.
//
// Shapes may depend on the token count T: each dim is
// `floor(coef*T / div) + constant` (div is 1 but for pooled dims like T / 64).
// Buffers are sized and placed for T = maxTokens; a run with T' <= maxTokens
// uses the same offsets with smaller extents.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/GgmlType.h"
#include "runtime/format/Liveness.h"
#include "runtime/format/OpTable.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strata::format {

class ModelInfo;

/// The newest plan format version this build reads and writes: version 3
/// adds generation state ("state", kernel inputs {"state": N}, the inputs
/// tok, pos and seq).
constexpr int kPlanVersion = 3;
/// The oldest version this build reads. A plan without state is written as
/// version 2, byte for byte what a version 2 build wrote (planVersionOf).
constexpr int kPlanMinVersion = 2;

/// `floor(coef*T / div) + constant`, div >= 1.
struct PlanDim {
  int64_t coef = 0;
  int64_t constant = 0;
  int64_t div = 1;
  int64_t at(int64_t t) const {
    int64_t n = coef * t, q = n / div;
    return (q * div > n ? q - 1 : q) + constant;
  }
  bool operator==(const PlanDim &o) const {
    return coef == o.coef && constant == o.constant && div == o.div;
  }
};

/// An arena buffer.
struct PlanBuffer {
  std::string name; ///< the IR value it holds, for reports and --check
  PlanDType dtype = PlanDType::F32;
  std::vector<PlanDim> shape;
  uint64_t offset = 0; ///< byte offset in the arena
  uint64_t bytes = 0;  ///< size at T = maxTokens
  /// A view (a reshape): the buffer whose storage this one shows under
  /// another shape (same offset and bytes, an earlier index), or -1. A view
  /// is never written; it holds whatever value its base holds.
  int64_t viewOf = -1;

  int64_t numElements(int64_t t) const;
};

/// A GGUF tensor the plan reads.
struct PlanWeight {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> dims; ///< ggml order, ne[0] first
};

/// An attribute value: int, float, bool, string, or list of ints/floats.
struct PlanAttr {
  enum class Kind { Int, Float, Bool, Str, Ints, Floats };
  Kind kind = Kind::Int;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
};

/// A kernel operand: an arena buffer, a weight or (version 3) a state, by
/// index.
struct PlanOperand {
  bool isWeight = false;
  uint32_t index = 0;
  bool isState = false; ///< Plan::states[index] (never with isWeight)

  /// An arena buffer (neither a weight nor a state).
  bool isBuffer() const { return !isWeight && !isState; }
};

/// Persistent storage outside the arena (plan version 3): a KV cache, a
/// recurrent state. Allocated and zeroed when the executor is created; it
/// keeps its contents across runs. Its dims are constants (slots, context
/// positions, heads, ...), never functions of T.
struct PlanState {
  std::string name; ///< e.g. "blk.0.k_cache"
  /// f32, bf16 (the elements) or i8 (the int8 KV cache: rows of the last
  /// dim, each its int8 values then an f32 scale; stateBytes).
  PlanDType dtype = PlanDType::F32;
  std::vector<uint64_t> shape; ///< IR order, slowest first
  uint64_t bytes = 0;          ///< stateBytes(dtype, shape)
};

/// The state dtypes: f32 (recurrent state and, by default, every cache),
/// bf16 and i8 (the KV caches under strata-compile --kv).
bool isStateDType(PlanDType t);

/// Bytes of a state of \p dtype and \p shape, nullopt on overflow, an empty
/// shape or dim, or a state dtype's layout rule broken. f32 and bf16: the
/// elements, dense. i8: the shape's rows of its last dim D (D a multiple of
/// 4), each stored as D int8 values then one f32 scale (D + 4 bytes,
/// 4-aligned), rows in the shape's order: slot-major like every state, a
/// (slot, position, head) row self-contained. Checked arithmetic.
std::optional<uint64_t> stateBytes(PlanDType dtype,
                                   const std::vector<uint64_t> &shape);

/// A function of the token count T: piecewise polynomials in T. Piece i
/// applies from T = pieces[i].from until the next piece starts; its value is
/// c[0] + c[1]*T + c[2]*T^2 + ... Byte and FLOP counts are such functions
/// (QSA attention is quadratic up to its key budget and linear after it);
/// they are exact where T is a multiple of every pooled dim's divisor.
struct PlanPoly {
  struct Piece {
    int64_t from = 0;
    std::vector<double> c;
  };
  std::vector<Piece> pieces; ///< sorted by `from`; empty = 0

  double at(int64_t t) const;
  static PlanPoly constant(double v);
  /// c[0] + c[1]*T + ... for every T.
  static PlanPoly of(std::vector<double> c);
  PlanPoly &operator+=(const PlanPoly &o);
  PlanPoly operator*(double s) const;
  bool operator==(const PlanPoly &o) const;
};

/// A tensor inside a fused kernel's body: one of the kernel's inputs or
/// outputs, or a kernel-local temporary (never in the arena), optionally
/// viewed with another shape over the same storage (a reshape in the body).
struct BodyRef {
  enum class Kind : uint8_t { In, Out, Tmp };
  Kind kind = Kind::In;
  uint32_t index = 0;
  std::vector<PlanDim> view; ///< empty: the tensor's own shape
};

/// A kernel-local temporary of a fused body.
struct BodyTemp {
  DType dtype = DType::F32;
  std::vector<PlanDim> shape;
  uint64_t bytes(int64_t t) const;
};

/// One catalog recipe inside a fused body.
struct BodyOp {
  Recipe recipe = Recipe::Reshape;
  std::vector<BodyRef> inputs;
  std::vector<BodyRef> outputs;
  std::map<std::string, PlanAttr> attrs;
};

/// Target code for a kernel, filled by codegen: the module and symbol to
/// launch, the grid as functions of T, the block, shared/LDS bytes and the
/// argument order.
/// A launch from the kernel's module, with the kernel's arguments, that runs
/// just before the kernel's own: a chunk-parallel pre-pass (the gated delta
/// rule's per-chunk inverses) whose results the kernel reads from the
/// workspace.
struct PlanPreLaunch {
  std::string symbol;
  std::vector<PlanDim> grid; ///< x, y, z
  std::vector<int64_t> block;
  uint64_t sharedBytes = 0;
};

/// A tensor map (the TMA's descriptor of a global tensor, sm_90) that the
/// runtime encodes for the kernel parameter `tmap:N` and passes by value
/// (128 bytes): the operand's storage from `offset` seen as a tensor of
/// `dims` (innermost first, each a function of T), `strides` bytes apart
/// (dims 1.. ), copied `box` elements at a time into shared memory with
/// `swizzle` (0, 32, 64 or 128 bytes). Elements past the dims read as 0.
struct PlanTensorMap {
  PlanOperand operand; ///< a buffer or a weight (unless workspace)
  /// The kernel's own workspace instead of an operand (JSON `{"workspace":
  /// 0}`): what a pre-launch wrote there for the kernel (16-bit weights
  /// converted to bf16 for the matrix units), bounded by the workspace the
  /// kernel asks for at each T.
  bool workspace = false;
  uint64_t offset = 0; ///< bytes from the operand's start, 16-byte aligned
  PlanDType dtype = PlanDType::BF16;
  std::vector<PlanDim> dims;     ///< 1 to 5, innermost first
  std::vector<uint64_t> strides; ///< bytes, one per dim after the first
  std::vector<uint32_t> box;     ///< elements a copy, one per dim, 1..256
  uint32_t swizzle = 0;
};

struct PlanCode {
  std::string module;
  std::string symbol;
  std::vector<PlanDim> grid; ///< x, y, z
  std::vector<int64_t> block;
  uint64_t sharedBytes = 0;
  std::vector<std::string> args;
  /// The tensor maps `tmap:N` arguments name (N indexes this list).
  std::vector<PlanTensorMap> tensorMaps;
  std::optional<PlanPreLaunch> pre;
  /// Workspace bytes the code itself needs, f(T); {0, 0, 1} = none. Code
  /// that asks for workspace keeps no body temporaries there (the delta
  /// rule's slice temporaries are views), so the two share it.
  PlanDim workspace;
  /// Code for longer prompts, in increasing minTokens: a run of T tokens
  /// launches the last alternate whose minTokens <= T, else this code
  /// (GEMMs whose quantised weights a pre-launch dequantises for the TMA
  /// tile: worth it only over enough rows). Alternates have none.
  std::vector<PlanCode> alternates;
  int64_t minTokens = 0; ///< an alternate's first T
  /// The kernel inputs (indices into PlanKernel::inputs, buffers) this
  /// code reads as int8 activations, eight values a scale
  /// (BlockDecodeInt8.h's strata_qa8: the decode GEMVs of
  /// gemm-decode-int8); --check rounds them alike before the cpu backend
  /// reruns the kernel, so the comparison is of the same arithmetic.
  std::vector<uint32_t> int8Inputs;
  /// The code a run of \p t tokens launches: this or an alternate.
  const PlanCode &at(int64_t t) const;
};

/// One launch: a catalog recipe, or a fused kernel whose body is a list of
/// catalog recipes over its inputs, outputs and temporaries.
struct PlanKernel {
  Recipe recipe = Recipe::Reshape; ///< catalog kernels
  std::string fused;               ///< fused kernels: the kernel's name
  std::vector<BodyTemp> temps;     ///< fused kernels
  std::vector<BodyOp> body;        ///< fused kernels, in order
  std::vector<PlanOperand> inputs;
  std::vector<uint32_t> outputs; ///< buffer indices
  /// Per output, the input it is written over in place (same storage), or
  /// -1; empty means none.
  std::vector<int32_t> tied;
  std::map<std::string, PlanAttr> attrs;
  std::string variant; ///< the kernel variant a target picked ("" = none)
  PlanPoly bytes;      ///< bytes moved at the kernel boundary, f(T)
  PlanPoly flops;      ///< floating-point ops, f(T)
  std::optional<PlanCode> code;

  bool isFused() const { return !fused.empty(); }
  /// "matmul" or "fused:hc_k1" (one word, for tables).
  std::string label() const;
  /// Workspace bytes at \p t: all temporaries (each 256-byte aligned) or
  /// what the code asks for, whichever is larger.
  uint64_t workspaceBytes(int64_t t) const;
  const PlanAttr *attr(const std::string &name) const;
};

/// The target's roofline as the compiler planned with it (Targets.def):
/// what strata-run --profile measures kernels against. Zero = unknown.
struct PlanRoofline {
  double memGBs = 0;    ///< streaming bandwidth, GB/s
  double vecTflops = 0; ///< vector f32 peak
  double matTflops = 0; ///< matrix f16/bf16 peak
};

/// A compiled plan.
struct Plan {
  /// The version read (a plan is written as planVersionOf(plan)).
  int version = kPlanVersion;
  std::string model;  ///< the description's model name
  std::string arch;   ///< general.architecture of the GGUF it was built for
  std::string target; ///< "host", "gfx1151", "sm_90"
  /// Compile options that changed what the plan computes, by name (e.g.
  /// "qsa_compress_ratio" from strata-compile --qsa-compress-ratio), so a
  /// plan says how it was made.
  std::map<std::string, int64_t> options;
  /// Every GGUF metadata value the compiler folded into the plan (eps, rope
  /// bases, counts, hash constants...), by key, as MetaValue::toString
  /// prints it, or "(absent)" for a key the file did not have; the
  /// executor refuses a file that disagrees.
  std::map<std::string, std::string> metadata;
  int64_t maxTokens = 0;
  PlanRoofline roofline;
  uint64_t arenaBytes = 0;
  uint64_t arenaLowerBound = 0; ///< max over time of live bytes
  std::vector<PlanBuffer> buffers;
  std::vector<PlanWeight> weights;
  std::vector<PlanKernel> kernels;
  /// Buffers the caller fills: the token ids; with state, then the rows'
  /// positions and slots (all i32 [T]).
  std::vector<uint32_t> inputs;
  std::vector<uint32_t> outputs; ///< buffers the caller reads (logits)
  /// Generation state (version 3); with any, options "max_context" and
  /// "max_batch" bound the rows' positions and slots.
  std::vector<PlanState> states;
  /// GPU plans: the kernel that fills a weight with synthetic blocks on the
  /// device (runtime/SyntheticBlock.h; `strata-run --synthetic-weights`),
  /// launched with grid x given by the runtime; absent: the host fills.
  std::optional<PlanCode> syntheticFill;
};

/// What the plan format knows of a target (Targets.def): its name, whether
/// it is a GPU (plans carry code), the shared memory a block may use and
/// whether its plans may carry tensor maps.
struct PlanTarget {
  const char *name;
  bool gpu;
  uint64_t sharedPerBlock;
  bool tensorMaps;
};
/// The target named \p name, or null.
const PlanTarget *lookupPlanTarget(const std::string &name);
/// "host, gfx1151, sm_90".
std::string planTargetNames();

/// The version \p plan is written as: kPlanMinVersion without state (the
/// file is then exactly what a version 2 build wrote), else kPlanVersion.
int planVersionOf(const Plan &plan);

/// The plan input index of the rows' positions and slots (plans with state).
inline constexpr size_t kPlanInputPos = 1, kPlanInputSeq = 2;

/// Serialises \p plan as JSON text.
std::string planToJson(const Plan &plan);
/// Checks everything a runtime relies on: indices in range, buffers inside
/// the arena and sized for their shapes, recipe arity and attribute schema,
/// fused bodies (every temporary written before it is read, every output
/// written), tied outputs sharing their input's storage, every size and
/// launch dimension within its cap (docs/plan-format.md), the fields the
/// target allows, and the memory proof: walking the kernels in order, no
/// kernel writes storage that holds a value a later kernel (or the plan's
/// output) still reads, and every buffer read holds the value it names
/// (Liveness.h, the liveness plan-memory places buffers with). Version 3:
/// states named once, f32, their sizes capped one by one and summed, state
/// operands in range, State-class recipes writing a state given as input 0
/// (listing one output fewer), three i32 [T] inputs, max_context and
/// max_batch options. The one validator: planFromJson and the executor call
/// it. Sets \p error to "plan: <what>" on failure.
bool validatePlan(const Plan &plan, std::string &error);

/// What a kernel moves in one run: all its bytes, and of those the bytes of
/// the caches it reads (attention_cached's keys and values,
/// qsa_select_cached's compressed keys).
struct KernelRunBytes {
  double bytes = 0;
  double cacheBytes = 0;
};

/// The bytes kernel \p k of \p plan moves in a run of \p rows rows. The
/// plan counts a cache read whole (the full context) for each slot a run
/// touches, since it cannot know the positions; \p attended gives, per slot
/// of the run, the positions its rows attend (its last row's position + 1),
/// and the cache reads are scaled to them (QSA selection: the compressed
/// blocks of those positions; block-sparse attention: at most its selected
/// blocks). Empty \p attended, or a kernel that reads no cache: the plan's
/// count, with cacheBytes 0. --report's decode step and strata-run
/// --profile both count with it.
KernelRunBytes kernelRunBytes(const Plan &plan, const PlanKernel &k,
                              int64_t rows,
                              const std::vector<int64_t> &attended);

/// The storage sets of \p plan's buffers as its memory proof walks them
/// (positions: plan inputs 0, kernel k at k + 1, the output read at
/// kernels.size() + 1), each set's values buffer indices. For a plan
/// validatePlan accepted: what a placement must keep apart.
std::vector<LiveSet> planLiveSets(const Plan &plan);

/// Parses plan JSON and validates it (validatePlan) into \p plan, which it
/// replaces. On failure returns false and sets \p error to
/// "<name>: <json path>: <what>" or "<name>: <what>".
bool planFromJson(const std::string &text, const std::string &name, Plan &plan,
                  std::string &error);

/// Writes `plan.json` into directory \p dir (created if missing), atomically.
bool writePlanDir(const std::string &dir, const Plan &plan, std::string &error);
/// Reads and validates `dir/plan.json`.
bool readPlanDir(const std::string &dir, Plan &plan, std::string &error);

/// Checks that \p model is what \p plan was compiled for: its architecture
/// and every metadata value the plan baked in. Sets \p error to a message
/// naming the key, the plan's value and the file's on failure.
bool checkPlanMetadata(const Plan &plan, const ModelInfo &model,
                       std::string &error);

/// Checks that every weight of \p plan is in \p model with the declared type
/// and dims. Sets \p error to a message naming the weight on failure.
bool checkPlanWeights(const Plan &plan, const ModelInfo &model,
                      std::string &error);

} // namespace strata::format
