//===- GemmEmitter.cpp - matmul chains and grouped expert GEMMs -----------===//
//
// One tile loop for every GEMM the plans hold: C[M, N] = A[M, K] * W[N, K]^T
// with W in any block type. Per K step of 32 the block stages an A tile and a
// W tile in LDS/shared (each weight block's 8-element pieces decoded once per
// tile by BlockDecode.h, the same decoder the CPU uses), then its waves run
// the target's 16x16x16 matrix op (fragments by mma_load_a/b, ldmatrix on
// sm_90; mma_16x16x16_f: WMMA on gfx1151, mma.sync on sm_90). On sm_90
// quantised weights are copied raw into LDS by cp.async a stage (256 or 128
// elements of K) ahead and decoded from there, so no global load waits
// inside the K loop; elsewhere the next step's pieces are loaded and decoded
// in registers while the matrix units work. f32 weights (routers, small
// projections) take an f32 FMA tile (or warp dot products for a few
// columns) instead, so their numbers stay f32 as on the CPU. Epilogues are the
// fused body's elementwise ops on the accumulator, with other operands read at
// the same (row, column); hc_read after a chain (hyper-connection K3) reduces
// over the streams through an LDS tile, so the gate tensor never reaches
// memory.
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"
#include "codegen/Limits.h"
#include "codegen/Options.h"
#include "codegen/gemm/GemvForm.h"

#include "ir/Target.h"

#include "runtime/format/GgmlType.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <numeric>

namespace strata::codegen::detail {

using format::BodyOp;
using format::BodyRef;
using format::Recipe;

namespace {

constexpr int kBK = 32;     ///< K per staged tile (one 32-block, 1/8 of a 256)
constexpr int kSkinnyN = 8; ///< the most columns of a skinny GEMM
/// The f32 chains' row-block form: rows a block takes, in passes of
/// kF32RowPass (its accumulators a column): a block's weight slices are
/// read from L2 once and reused from L1 by its later passes.
constexpr int64_t kF32RowBlock = 32, kF32RowPass = 8;
/// Rows x N x K products the row-block form computes in the time of one
/// wave of f32 tiles: on the H200 the MoE router (K 2048, N 128) took 28 us
/// at T = 512 and 850 us at 16,384 on row blocks (about 2e-13 s a
/// product), its tiles 183 us at either (bench/results/
/// peer-profile-moe-20261203T192031Z.txt, -20261203T184808Z.txt): the
/// tiles from T = 8.5e8 / (N K), 3,240 rows for that router, 650 for
/// q4x's (K 2560, N 512), 6,900 for the delta rule's gates (N 48).
constexpr int64_t kF32RowBlockWork = 850'000'000;
constexpr int kSkinnyRows = 4; ///< rows per warp of a skinny GEMM

/// Row stride (floats) of the f32 Cs tile of \p bn columns: 4 floats of
/// padding put the 8 rows an accumulator store touches in different banks
/// (2-way instead of 8-way conflicts at bn = 128).
int csLd(int bn) { return bn + 4; }

/// A ref's identity (kind, index) for value tracking.
std::pair<int, uint32_t> key(const BodyRef &r) {
  return {static_cast<int>(r.kind), r.index};
}

/// One GEMM: how its A rows and W rows are found, and its epilogue.
struct Gemm {
  Tensor a;              ///< activations [.., K]
  std::vector<Tensor> w; ///< one weight, or gate and up (swiglu)
  int64_t n = 0, k = 0;  ///< N and K
  std::string mRows;     ///< C expression of M (rows of A)
  /// C expression of tile row m's row of A (a gather for the experts).
  std::string aIndex = "m";
  int64_t mPer = 1; ///< A rows per leading-dim row of the result
  bool mma = true;  ///< matrix units (else f32 FMA)
  int bm = 64, bn = 64, nt = 128;
  /// The epilogue stages an f32 [bm][bn] tile (Cs) in the LDS region after
  /// the K loop (hc_read's stream mean).
  bool csTile = false;
  /// Unquantised weights of at most kSkinnyN rows: dot products by warps (a
  /// warp per kSkinnyRows rows, each lane 8 k at a time) instead of the FMA
  /// tile, whose 16 columns of threads would mostly compute zeros.
  bool skinny = false;
  /// Column c of the tile -> global column (default n0 + c).
  std::function<std::string(const std::string &)> colOf;
  std::vector<std::string> epilogue; ///< lines; `v` is the accumulator(s)
  /// f32 weights on the matrix units (sm_90, bf16 A): W as the sum of
  /// `split` bf16 terms, K walked once per term (step k0: term k0 / K at
  /// k0 % K), so each product is exact and the sum keeps ~24 bits of W.
  int split = 1;
  /// The TMA tile (sm_90a, GemmEmitter::pickTma): A and W copied by the
  /// TMA into a ring of `stages` stages, wgmma by two consumer
  /// warpgroups, a producer warp.
  bool tma = false;
  int stages = 0;
  uint32_t aIn = 0, wIn = 0; ///< A's and W's kernel inputs
  format::PlanDim mDim;      ///< rows of A as a function of T
  int64_t wsOff = -1;        ///< W converted to bf16 at this workspace offset
  int mapA = -1, mapW = -1;  ///< their tensor maps
  int tmaBlocks = 1;         ///< blocks of the TMA tile an SM
  /// The stream mean's image (bf16 [rows, streams, d], a kernel input):
  /// the block's rows x streams x its d range copied by the TMA during
  /// the K loop (mapX), read back from shared memory by the mean.
  uint32_t xIn = 0;
  int mapX = -1;
  /// A few-column f32-weight chain over the same A merged into the TMA
  /// tile (K2's injection logits, GemmEmitter::mergeSkinny): its weights
  /// as three bf16 terms in 16 columns at extraBase (term 0 and 1 of
  /// output s at columns 2s and 2s + 1, term 2 at 8 + 2s: one lane of a
  /// quad holds all three), after the tile's own nMain columns.
  const Gemm *extra = nullptr;
  int64_t extraBase = 0, nMain = 0;
};

/// Rows of A a TMA tile takes (two consumer warpgroups of 64).
constexpr int kTmaARows = 128;
/// The prompt length from which GEMM chains take the TMA tile (an
/// alternate code whose pre-launch converts W into the workspace, ~5 us
/// per 10 MB of bf16): at 512 rows the ~2x faster K loop already repays it
/// on the prefill's shapes (estimate from bench/tma_gemm_bench.cu; the
/// tile measured at T = 16,384).
constexpr int64_t kTmaMinTokens = 512;

/// Whether the TMA tiles store through shared memory where they can
/// (GemmEmitter::stagedStores); option gemm-staged=0 turns it off (an A/B
/// option).
bool stagedOn(const format::Plan &plan) {
  return option(plan, Opt::GemmStaged) != 0;
}

/// Rows per expert from which the grouped GEMMs take the TMA tile. Its
/// pre-launch dequantises all the experts' weights (qwen4exp: 2.6 ms a
/// layer for 5 GB of bf16 on the H200) and saves ~0.3 us a token a layer
/// against the cp.async tiles: even at ~170 rows an expert (~8,800 tokens
/// of top-10 of 512). Measured: with the tile from 512 tokens the prefill
/// of 1,024 tokens took 210 ms against 144 before
/// (bench/results/bench-20261201T233349Z.txt).
constexpr int64_t kGroupedTmaRows = 192;

/// Whether the TMA tiles of plain chains and grouped experts are 128
/// columns wide at two blocks an SM (one block's epilogue overlapping the
/// other's K loop, as K3's do) instead of up to 256 at one:
/// option gemm-tma-pair=1, for A/B runs (measured +2.6 % in all, dense
/// +5.6 %: ab-pair-persist-20261202T020121Z.txt).
bool pairOn(const format::Plan &plan) {
  return option(plan, Opt::GemmTmaPair) != 0;
}

/// Whether kernel \p label's TMA tiles (one chain, or the grouped experts)
/// run persistent blocks (each loops over tiles; its producer loads the
/// next tile's stages while the consumers run the epilogue). By default the
/// families measured faster so (test/device/results/experiments/
/// ab-pair-persist-20261202T020121Z.txt, every kernel persistent against
/// none): the hyper-connection GEMMs (K3 -2.4 %, K2 -2.7 %, the output
/// mixer's down -1.7 %: short K loops or 5 column tiles, so the epilogue
/// and the last wave weigh) and the experts' down projection (K = 640,
/// -3.5 %); not the dense GEMMs (+1.8 %) or the experts' gate/up (+0.8 %).
/// Option gemm-tma-persist=on makes every such kernel persistent, =off
/// none; auto (the default) the families above.
bool persistFor(const format::Plan &plan, const std::string &label) {
  if (int64_t v = option(plan, Opt::GemmTmaPersist); v != 0)
    return v == 1;
  return label == "fused:hc_up_mix" || label == "fused:hc_down_inject" ||
         label == "fused:hc_down" || label == "moe_grouped_down";
}

/// Which weights a variant of the kernel puts on the TMA tile.
enum class TmaUse {
  None,      ///< none (the kernel's own code: the cp.async tiles)
  Float16,   ///< bf16 and f16 (converted by the pre-launch)
  Quantised, ///< those and quantised ones (dequantised by the pre-launch)
};

/// Tiles covering rows(T) * mult rows: floor((coef*mult*T)/(div*tile)) +
/// floor(c*mult/tile) + 2 >= the exact ceiling (extra blocks exit at once).
format::PlanDim tilesOf(const format::PlanDim &rows, int64_t mult,
                        int64_t tile) {
  format::PlanDim d;
  d.coef = rows.coef * mult;
  d.div = rows.div * tile;
  d.constant = rows.constant * mult / tile + (rows.coef ? 2 : 1);
  if (d.coef == 0)
    d = {0, (rows.constant * mult + tile - 1) / tile, 1};
  // Keep the fraction small.
  int64_t g = std::gcd(d.coef, d.div);
  if (g > 1) {
    d.coef /= g;
    d.div /= g;
  }
  return d;
}

/// Declares `arow`, tile row m's row of A.
std::string aRowOf(const Gemm &g) {
  return fmt::format("const {} *arow = {} + (long)({}) * {}L;", g.a.ctype,
                     g.a.ptr, g.aIndex, g.k);
}

/// The waves' grid over a matrix-unit tile: wm waves down, wn across.
void waveGrid(int bm, int nt, int &wm, int &wn) {
  const int nw = nt / 32;
  wm = 1;
  while (wm * wm < nw && (bm / 16) % (wm * 2) == 0)
    wm *= 2;
  wn = nw / wm;
}

/// Body ops after a matmul that the chain absorbs.
struct Chain {
  const BodyOp *mm = nullptr;
  std::vector<std::string> epi;       ///< epilogue lines
  const BodyOp *streamMean = nullptr; ///< a trailing hc_read, if any
  std::string gateVar;                ///< its gate operand's variable
  int stores = 0;                     ///< kernel outputs it stores
  Tensor out;                         ///< the last of them
  std::string outVar;                 ///< its value's variable
};

class GemmEmitter {
public:
  explicit GemmEmitter(Emitter &e) : e(e) {}
  void runChains();
  void runGrouped();
  /// The grouped GEMM's TMA alternate (sm_90a, from kTmaMinTokens; see
  /// runGrouped), or false where the GEMM does not take the tile.
  bool groupedTma(Gemm g, bool swiglu, const Tensor &y, const Tensor &off,
                  const Tensor &perm, int64_t slotsPerToken, int64_t experts);

private:
  Emitter &e;
  /// Whether every chain can take the decode form at \p rows rows of T
  /// (one weight, K of whole 8-element pieces, no stream mean, at most 32
  /// accumulator rows: one per lane for the epilogue).
  static bool gemvFits(const std::vector<Chain> &chains,
                       const std::vector<Gemm> &gemms, int64_t rows);
  /// Emits the chains' decode form as the kernel's own code, for runs of at
  /// most \p rows rows of T: a warp per output column (a row of W) walks K
  /// 8 elements a lane, decoding each weight piece once and multiplying it
  /// with every row of A (A's few rows stay in L1), then sums over the
  /// warp; lane m runs the epilogue of row m. Each chain takes its own
  /// blocks of grid x. Every weight byte is read once for all rows, and
  /// the columns spread over the whole GPU (the tiles give a one-row run
  /// N / 64 blocks, most of their rows empty: 117 GB/s on the H200).
  /// With \p rowBlock > 0 (the f32 chains' row-block form, below) grid y
  /// splits the rows \p rowDim into blocks of \p rowBlock rows, each
  /// walked in passes of \p rows.
  void emitGemv(const std::vector<Chain> &chains,
                const std::vector<Gemm> &gemms, int64_t rows,
                const std::string &sym, int64_t rowBlock = 0,
                const format::PlanDim &rowDim = {});
  /// The row from which chains of f32 weights take the tiles, below which
  /// they take the row-block form (the decode form over grid y's blocks of
  /// kF32RowBlock rows): where the tiles fill the target (a tile's rows x
  /// units / column tiles), or earlier where the row-block form's work
  /// passes a wave of tiles' time (kF32RowBlockWork). The f32 tiles' blocks
  /// each walk all of K (the MoE router of K 2048, N 128 at T = 512: 4 tiles of
  /// 128 rows, 183 us on the H200; the delta rule's gates, N 48: 154 us), while
  /// warp dot products split K over warps and spread the columns over the whole
  /// GPU. 0: no row-block form (weights not all f32, a stream mean, option
  /// gemm-f32-rows=off).
  int64_t f32TileRows(const std::vector<Chain> &chains,
                      const std::vector<Gemm> &gemms) const;
  /// The stream-mean decode form takes a chain's K in one warp: below it.
  static constexpr int64_t kGemvStreamK = 1024;
  /// The decode form's shape (selectGemv) for \p columns columns in all
  /// (every routed expert's, for the grouped form) of \p g's K, \p rows
  /// accumulator rows a column, under the plan's options (\p rowBlocks:
  /// the row-block form's, GemvProblem::rowBlocks).
  GemvForm gemvShape(const Gemm &g, int64_t columns, int64_t rows,
                     bool rowBlocks = false) const;
  /// What decoding one piece of every matrix of \p g costs a warp, in
  /// units of a plain block type's piece: IQ3_S (grid lookups, signs)
  /// counts two. The decode forms keep cost x columns x unrolled pieces
  /// within gemm-decode-pieces (registers: loads in flight against warps).
  static int64_t gemvCost(const Gemm &g);
  /// Opens a decode-form kernel: `wave`, `lane` and the slices' reduction
  /// area; with \p iq3s (IQ3_S weights) the grid's copy in LDS, else
  /// IQ3_S would decode from the table itself until gemvClose().
  void gemvOpen(bool iq3s, const std::string &sym, int64_t stageBytes = 0);
  /// Bytes of shared memory one warp of \p g's staged decode form takes
  /// (0: not staged): every matrix's and column's chunk of gemvChunk()
  /// pieces, each with 16 bytes of alignment room.
  int64_t gemvStage(const Gemm &g, GemvForm shape) const;
  /// Pieces (256 of K) a staged warp copies at once: its budget of 4 KiB
  /// of shared memory over its columns' and matrices' piece bytes.
  static int64_t gemvChunk(const Gemm &g, GemvForm shape);
  /// Shared bytes of one column's chunk of \p q pieces of \p w: 16 bytes
  /// of room for the chunk's address modulo 16, rounded up to 16 so the
  /// next one starts aligned.
  static int64_t stageSlot(int64_t q, const Tensor &w) {
    return (q * pieceBytes(w) + 16 + 15) / 16 * 16;
  }
  /// Bytes of a 256-element piece of \p w.
  static int64_t pieceBytes(const Tensor &w) {
    return 256 / w.blockSize * w.blockBytes;
  }
  /// Opens the decode forms' loop over the rows m0 + r < M of a K piece
  /// (at most \p rows): `m`, `arow` and the piece of A, `av`, defined.
  void gemvRows(const Gemm &g, int64_t rows);
  /// Closes the decode-form kernel opened by gemvOpen.
  void gemvClose();
  /// The decode form's columns: with `base` (the block's first of its
  /// chain) and rowBase_ (W's first row: the expert's) defined, each warp's
  /// dot products of its \p shape.cols columns over rows \p first ..
  /// \p end (C expressions, uniform in the block) in passes of \p rows,
  /// summed over \p shape.slices warps, then the epilogue of (column c,
  /// row m0 + r) by lane c * rows + r of the column's first slice.
  void gemvBody(const Gemm &g, int64_t rows, GemvForm shape,
                const std::string &first, const std::string &end);
  /// The decode form of a chain with a stream mean (hyper-connection K3):
  /// a warp per hidden column takes that column of every stream's gate
  /// (K whole: the gate's K is short), then lane m - m0 averages the
  /// streams' gate x image as streamReduce does; `base` defined.
  void gemvStreamBody(const Gemm &g, const Chain &c, int64_t rows);
  /// gemvBody's loop over K: \p piece(k, prefix) prints one piece at lane
  /// position k decoding from the rows named prefix{b}_{c}. Staged: each
  /// warp's chunks copied to shared memory (gemvStage), then decoded
  /// there; direct: decoded where they lie in global memory.
  void gemvStaged(const Gemm &g, int64_t rows, GemvForm shape,
                  const std::function<void(const std::string &,
                                           const std::string &)> &piece);
  void gemvDirect(const Gemm &g, GemvForm shape,
                  const std::function<void(const std::string &,
                                           const std::string &)> &piece);
  /// gemvBody's sums over the warp (and its slices) and the epilogue.
  void gemvReduce(const Gemm &g, int64_t rows, GemvForm shape);
  /// W's first row in gemvBody (a C expression).
  std::string rowBase_ = "0L";
  /// IQ3_S weights decode with the grid's copy in LDS (iq3s_lds), which
  /// the tiles stage once per block; the decode forms read the table
  /// itself (L1-resident: a block's few pieces do not repay the copy and
  /// its barrier).
  bool iq3sLds_ = true;

  /// Emits the grouped GEMM \p g's decode form as the kernel's own code,
  /// for runs of at most \p rows rows of T (\p slotsPerToken slots each,
  /// sorted by expert: \p off holds the \p experts + 1 offsets): grid x is
  /// (slot, column group); the block of an expert's first slot takes all
  /// its slots (a warp per column: each weight piece decoded once for
  /// them), every other block exits. Only the routed experts' weights are
  /// read, each once.
  void emitGroupedGemv(const Gemm &g, const Tensor &off, int64_t experts,
                       int64_t slotsPerToken, int64_t rows,
                       const std::string &sym);
  /// The decode forms of a kernel: its own code for one row (a single
  /// sequence's step: one accumulator a column, so registers leave room
  /// for more warps and pieces in flight) and, where the plan runs more
  /// rows, the form for up to \p rows rows as an alternate from two rows
  /// (batched steps, speculation). \p emit prints one form for (rows,
  /// symbol). Returns the kernel with that alternate.
  EmittedKernel
  gemvForms(int64_t rows,
            const std::function<void(int64_t, const std::string &)> &emit);
  /// Two LDS buffers per staged tile (one barrier per K step), where every
  /// chain's doubled tiles fit the static LDS budget.
  bool doubleBuffer_ = false;
  /// Bytes of the kernel's one LDS region (strata_lds): the chains run in
  /// different blocks, so each carves its tiles (and Cs) from the start.
  int64_t region_ = 0;
  /// The region exceeds the static limit: dynamic shared memory, sized by
  /// the launch (plan.json shared_bytes).
  bool dynamic_ = false;
  /// The most LDS a GEMM kernel takes (two blocks still fit an SM). 112
  /// KiB would give the Q8_0/Q6_K tiles (~108 KiB) two buffers and wgmma:
  /// measured 2.5 ms slower in all at T = 16,384, so they keep mma.sync.
  static constexpr int64_t kMaxLds = 100 * 1024;
  /// Declares the kernel's LDS region strata_lds (static or dynamic).
  void declareRegion();
  /// Declares `rt` and `ct`, the block's row and column tile, and returns
  /// whether the column tiles are grid x (where \p colsFirst and grid y can
  /// hold \p rowTiles at the plan's longest prompt): consecutive blocks
  /// then share a row tile of A and sweep W, so A is read from DRAM about
  /// once instead of once per pass over the rows per few column tiles.
  /// Measured on the H200 (T = 16384): dense GEMMs 589 -> 535 ms, the
  /// experts' down 170 -> 165, gate/up even; but K2 (two chains) 59.0 ->
  /// 62.6 and K3 (stream mean) 80.3 -> 81.5, which keep rows first.
  bool tileOrder(const format::PlanDim &rowTiles, bool colsFirst);
  /// Whether \p g stages its raw weight blocks in LDS by cp.async, a stage
  /// (stageK) ahead, and decodes its W tiles from there (block types whose
  /// blocks divide the stage; sm_90 only: gfx1151 has no asynchronous copy
  /// and 64 KiB of LDS).
  bool rawStaged(const Gemm &g) const;
  /// K elements per raw stage: a 256-element superblock where K allows,
  /// else 128 (the experts' down projection, K = 640, of 32-element
  /// blocks); 0 where neither divides K.
  static int64_t stageK(const Gemm &g);
  /// Bytes of one row's stage (stageK elements) of \p g's weights.
  static int64_t superBytes(const Gemm &g);
  /// Every row's stage starts 16-byte aligned (Q4_K, Q5_K): copied
  /// exactly; else a 16-byte aligned window around it, which keeps each
  /// byte's address mod 16, so the decoders' aligned loads stay valid.
  static bool rawAligned(const Gemm &g);
  /// LDS bytes of one staged row (the stage or its window).
  static int64_t rawRowBytes(const Gemm &g);
  /// Decides doubleBuffer_ and region_ for the kernel's GEMMs (\p extra:
  /// other static LDS bytes) and declares the region.
  void planBuffers(const std::vector<const Gemm *> &gemms, int64_t extra);
  /// LDS bytes of \p g: its staged tiles with \p nbuf buffers, and its two
  /// raw superblock slots where it stages raw blocks.
  int64_t tileBytes(const Gemm &g, int nbuf) const;

  void pickTile(Gemm &g, const std::string &variant);
  /// Whether \p g takes the TMA tile (sm_90a) in a variant with \p use:
  /// bf16 activations whose rows are contiguous (no gather), one weight of
  /// a kind \p use names, K a multiple of 8 (16-byte rows for the maps);
  /// quantised weights only where the rows grow with T. The tile is 128
  /// rows x the widest of 256/192/176/160/128/64 columns with the fewest
  /// past N (the stream mean: 128, a box of d per stream, two blocks an
  /// SM), its ring as many stages of 64 k as fit (measured with
  /// bench/tma_gemm_bench.cu: 589-733 TFLOP/s at the prefill's dense shapes,
  /// 74-92 % of cuBLAS, where the cp.async tiles reach 270-290).
  /// Option gemm-tma=0 keeps the cp.async tiles (for A/B runs).
  bool pickTma(Gemm &g, const Chain &c, const Tensor &y, TmaUse use);
  /// Emits the kernel's launch(es) as function \p sym: the chains \p gemms
  /// (copies: tiles are picked here), the weights \p use names on the TMA
  /// tile.
  void emitVariant(const std::vector<Chain> &chains, std::vector<Gemm> &gemms,
                   const std::vector<Tensor> &ys, TmaUse use,
                   const std::string &sym);
  /// The function being emitted ("@SYMBOL@" or an alternate's).
  std::string sym_ = "@SYMBOL@";
  /// The TMA tile's columns for N = \p n.
  static int tmaColumns(int64_t n);
  /// Merges the skinny chain \p r (a few outputs, f32 weights, \p g's A)
  /// into \p g's TMA tile: one pass over A for both (K2: the injection
  /// logits were a second read of A, 100 us of 290 per call at T =
  /// 16,384). The weights go to the workspace as bf16 terms (Gemm::extra).
  bool mergeSkinny(Gemm &g, const Chain &c, Gemm &r, const Chain &rc);
  /// Adds \p g's tensor maps (A, then W: the weight, or its bf16 copy in
  /// the workspace) to the kernel's code.
  void addTensorMaps(Gemm &g, const Chain &c);
  /// A launch of chains: grid, block, dynamic shared bytes.
  struct ChainLaunch {
    std::vector<format::PlanDim> grid;
    std::vector<int64_t> block;
    uint64_t sharedBytes = 0;
  };
  /// Emits kernel \p name running chains \p idx in one launch (each its
  /// own column tiles), then \p convBlocks column tiles converting the
  /// 16-bit weights of chains \p conv to bf16 in the workspace.
  ChainLaunch emitChains(const std::vector<Chain> &chains,
                         std::vector<Gemm> &gemms,
                         const std::vector<size_t> &idx,
                         const std::string &params, const std::string &name,
                         int64_t convBlocks,
                         const std::vector<size_t> &conv = {});
  /// The TMA tiles' stores through shared memory: each consumer warpgroup
  /// has written its 64 rows x \p cols results (elements of \p esz bytes,
  /// rows \p ld bytes apart) at `cs`; after its barrier, 16-byte stores of
  /// row pieces to \p ptr (rows of \p n elements, tile origin m0, n0),
  /// rows past M and columns past n skipped. Stores from the accumulators
  /// touch a 32-byte sector per row for 4 bytes (the grouped down
  /// projection's 839 MB of output ran the L2 at 72 % of its throughput).
  void stagedStores(const std::string &ptr, int64_t n, int64_t esz, int64_t ld,
                    int64_t cols);
  /// Opens the consumers' staging of results (rows \p ld bytes apart):
  /// declares `cs`, the warpgroup's 64 rows. In the ring once both
  /// warpgroups' last wgmma reads of it are done; \p persist: at \p off,
  /// an area of its own (the producer is refilling the ring), once the
  /// warpgroup's last reads of the previous tile's results are done.
  void openStaging(bool persist, int64_t off, int64_t ld);
  /// Closes the producer's K loop (and, \p persist, its tile loop) and
  /// opens the consumers' branch (\p persist: with the ring's position).
  void producerDone(bool persist);
  /// Opens a TMA tile kernel \p sym of 288 threads (\p blocks an SM):
  /// declares `strata_lds`, its dynamic shared memory aligned to 1024
  /// bytes (the 128-byte swizzle's atoms; the launch asks for 1 KiB more).
  void openTmaKernel(int blocks, const std::string &sym,
                     const std::string &params);
  /// Opens the TMA tile's loop over a consumer thread's accumulators
  /// (acc0[0][j][q]: \p groups 16-column groups, q by \p qStep) and
  /// declares r (its row: in the tile, or in the warpgroup's 64 where
  /// \p inWarpgroup) and c (its column in the group, plus j * 16 where
  /// \p addC); \p outer and \p body indent the loop and its lines.
  void accLoop(const char *outer, const char *body, int64_t groups, int qStep,
               bool inWarpgroup, bool addC = true);
  /// Emits the kernel's own launch over the TMA chains \p idx.
  void emitTmaKernel(const std::vector<Chain> &chains, std::vector<Gemm> &gemms,
                     const std::vector<size_t> &idx, const std::string &params);
  /// The stream mean after a chain's gate tile (Cs): each row's mean over
  /// the streams of gate x image.
  void streamReduce(const Gemm &g, const Chain &c);
  /// Whether \p g's tile runs on wgmma (sm_90a): its warpgroups tile it as
  /// bm / 64 down x the rest across, each 64 rows x 64 or 128 columns
  /// (128 x 128 by two, 64 x 128 by two, 64 x 64 by one), two LDS buffers.
  /// Option gemm-core=mma keeps mma.sync (an A/B option for measurements; the
  /// emitted source, and so the plan's cache keys, say which).
  bool useWgmma(const Gemm &g) const;
  /// Blocks of the kernel's \p nt threads that must fit one SM (a register
  /// cap: ptxas spends what launch_bounds allows): 85 registers a thread
  /// where every tile holds at most 32 accumulators, else 128 (two
  /// 256-thread tiles, four 128-thread ones), so one wave's loads and
  /// decode overlap the others' matrix ops. Measured on the H200: the
  /// dense Q4_K tile at 130 registers (one block per SM) ran 43 % slower
  /// than at 128.
  static int minBlocks(const std::vector<const Gemm *> &gemms, int nt);
  /// The staged K loop and the accumulators, then \p epi per element with
  /// `m`, `n`, `v` (and `v2` for two weights) defined.
  void tileLoop(const Gemm &g, const std::string &aRow,
                const std::vector<std::string> &wRow);
  /// tileLoop's K loop on the matrix units (wgmma or mma.sync), up to the
  /// per-element loop over its accumulators.
  void matrixTile(const Gemm &g, const std::string &aRow,
                  const std::vector<std::string> &wRow);
  /// tileLoop's warp dot products (a few columns, f32 weights).
  void skinnyTile(const Gemm &g, const std::string &aRow,
                  const std::vector<std::string> &wRow);
  /// tileLoop's f32 FMA tile (16 x 16 threads).
  void ffmaTile(const Gemm &g, const std::string &aRow,
                const std::vector<std::string> &wRow);
  void decodeW(const Tensor &w, const std::string &rowPtr, const std::string &k,
               const std::string &dst);
  /// Opens a block `{ float v[8];` holding the 8 elements of weight \p w
  /// at row n, k0 + kc (zeros past N or K); the caller closes it.
  void wPiece(const Gemm &g, const Tensor &w, const std::string &wRow,
              bool partialK);
  /// Stages the W tile (BN rows x 32 k) into Bs<b>, 8 adjacent elements per
  /// thread, each piece decoded once; \p conv converts a value for the tile
  /// ("to_mma" for the matrix units, "" for f32).
  void stageW8(const Gemm &g, const std::vector<std::string> &wRow, int ld,
               const std::string &conv, bool partialK);
};

void GemmEmitter::stageW8(const Gemm &g, const std::vector<std::string> &wRow,
                          int ld, const std::string &conv, bool partialK) {
  e.line("    for (int c = tid_x(); c < {}; c += {}) {{", g.bn * 4, g.nt);
  e.line("      int r = c >> 2, kc = (c & 3) * 8;");
  e.line("      long n = {};", g.colOf("r"));
  for (size_t b = 0; b < g.w.size(); ++b) {
    wPiece(g, g.w[b], wRow[b], partialK);
    e.line("      for (int j = 0; j < 8; ++j) Bs{}[r * {} + kc + j] = "
           "{}(v[j]); }}",
           b, ld, conv);
  }
  e.line("    }}");
}

int64_t GemmEmitter::tileBytes(const Gemm &g, int nbuf) const {
  if (g.skinny)
    return 0;
  int64_t elem = g.mma ? 2 : 4, ld = g.mma ? kBK + 8 : kBK + 1;
  if (!g.mma)
    nbuf = 1;
  int64_t raw = rawStaged(g) ? 2 * static_cast<int64_t>(g.w.size()) * g.bn *
                                   rawRowBytes(g)
                             : 0;
  return nbuf * (g.bm + static_cast<int64_t>(g.w.size()) * g.bn) * ld * elem +
         raw;
}

bool GemmEmitter::rawStaged(const Gemm &g) const {
  const int64_t s = stageK(g);
  if (e.target != "sm_90" || !g.mma || s == 0)
    return false;
  for (const Tensor &w : g.w)
    if (!(w.quant() || w.ctype == "f16" || w.ctype == "bf16") ||
        s % w.blockSize != 0 || w.ggml != g.w[0].ggml)
      return false;
  return true;
}

int64_t GemmEmitter::stageK(const Gemm &g) {
  // 16-bit weights (the hyper-connection projections) take 128-element
  // stages (256 bytes a row per slot, not 512), or 64 (K3: K = 320).
  if (!g.w[0].quant())
    return g.k % 128 == 0 ? 128 : g.k % 64 == 0 ? 64 : 0;
  return g.k % 256 == 0 ? 256 : g.k % 128 == 0 ? 128 : 0;
}

int64_t GemmEmitter::superBytes(const Gemm &g) {
  return stageK(g) / g.w[0].blockSize * g.w[0].blockBytes;
}

bool GemmEmitter::rawAligned(const Gemm &g) {
  return superBytes(g) % 16 == 0 &&
         g.k / g.w[0].blockSize * g.w[0].blockBytes % 16 == 0;
}

int64_t GemmEmitter::rawRowBytes(const Gemm &g) {
  // A window from the segment's start rounded down to 16 bytes: at most 15
  // bytes before it and the rest after it.
  int64_t lr =
      rawAligned(g) ? superBytes(g) : (superBytes(g) + 15 + 15) / 16 * 16;
  // A wave decodes 8 rows at the same offset of each: rows a multiple of
  // 128 bytes apart read the same banks (ncu: 56 % of the IQ3_S gate/up
  // tile's LDS wavefronts were excess). Quantised pieces are a few bytes a
  // row: an odd number of 16-byte units spreads the 8 rows over the banks
  // (IQ3_S gate/up 324 -> 301 ms at T = 16,384). 16-bit rows stay as they
  // are: padding them to 64 bytes mod 128 cost K2/K3 a block per SM
  // (77 -> 90 and 98 -> 125 ms).
  if (!g.w[0].quant())
    return lr;
  return (lr / 16) % 2 == 0 ? lr + 16 : lr;
}

void GemmEmitter::declareRegion() {
  if (!dynamic_) {
    e.line(
        "  STRATA_SHARED __attribute__((aligned(16))) uint8_t strata_lds[{}];",
        region_);
    return;
  }
  e.line("  extern STRATA_SHARED __attribute__((aligned(16))) uint8_t "
         "strata_dyn[];");
  e.line("  uint8_t *const strata_lds = strata_dyn;");
  e.out.sharedBytes = static_cast<uint64_t>(region_);
}

void GemmEmitter::planBuffers(const std::vector<const Gemm *> &gemms,
                              int64_t extra) {
  auto regionOf = [&](int nbuf) {
    int64_t r = 0;
    for (const Gemm *g : gemms)
      r = std::max({r, tileBytes(*g, nbuf),
                    g->csTile ? int64_t(g->bm) * csLd(g->bn) * 4 : 0});
    return r;
  };
  // Two buffers where they fit beside a second block per SM; past the
  // static limit the region is dynamic shared memory (opt-in).
  doubleBuffer_ = regionOf(2) + extra <= staticSharedBudget() ||
                  (std::any_of(gemms.begin(), gemms.end(),
                               [&](const Gemm *g) { return rawStaged(*g); }) &&
                   regionOf(2) + extra <= kMaxLds);
  region_ = regionOf(doubleBuffer_ ? 2 : 1);
  dynamic_ = region_ + extra > staticSharedBudget();
}

bool GemmEmitter::tileOrder(const format::PlanDim &rowTiles, bool colsFirst) {
  const bool colsFast = colsFirst && rowTiles.at(e.plan.maxTokens) <= 65535;
  e.line("  const int rt = {}, ct = {};", colsFast ? "bid_y()" : "bid_x()",
         colsFast ? "bid_x()" : "bid_y()");
  return colsFast;
}

int GemmEmitter::minBlocks(const std::vector<const Gemm *> &gemms, int nt) {
  int acc = 0;
  for (const Gemm *g : gemms) {
    int per;
    if (g->mma) {
      int wm, wn;
      waveGrid(g->bm, nt, wm, wn);
      per = (g->bm / 16 / wm) * (g->bn / 16 / wn) * 8;
    } else {
      per = g->skinny ? kSkinnyRows * g->bn : (g->bm / 16) * (g->bn / 16);
    }
    acc = std::max(acc, per * static_cast<int>(g->w.size()));
  }
  return static_cast<int>(launchBoundRegisters() /
                          (nt * (acc <= 32 ? 85 : 128)));
}

void GemmEmitter::pickTile(Gemm &g, const std::string &variant) {
  // The variant's path: f32 weights, and the f32 precision policy's
  // valu_f32 / ffma_f32 variants, take the f32 FMA tile.
  g.mma = g.w[0].ctype != "float" &&
          variant.find("valu_f32") == std::string::npos &&
          variant.find("ffma_f32") == std::string::npos;
  // Except f32 weights under bf16 activations on sm_90 (the MoE router,
  // K 2560 x N 512: 123 ms of the prefill on the FMA tile at T = 16,384;
  // the delta rule's gate projections, N 48: 22 ms): the matrix units over
  // three bf16 terms of W (split). A few columns keep the warp dot products.
  if (e.target == "sm_90" && g.w.size() == 1 && g.w[0].ctype == "float" &&
      g.a.ctype == "bf16" && g.n > kSkinnyN && g.k % kBK == 0) {
    g.mma = true;
    g.split = 3;
    g.bm = 128, g.bn = g.n <= 64 ? 64 : 128, g.nt = 256;
    return;
  }
  if (!g.mma) {
    g.bm = 32, g.nt = 256;
    // A few columns (the hyper-connection injection logits, N = 4): warp
    // dot products; 8 warps of kSkinnyRows rows make the 32-row tile.
    if (g.n <= kSkinnyN && g.k % 8 == 0 && g.w.size() == 1 && !g.w[0].quant()) {
      static_assert(8 * kSkinnyRows == 32, "skinny rows per block");
      g.skinny = true;
      g.bn = static_cast<int>(g.n);
      return;
    }
    // Columns rounded to 16, at most 64.
    g.bn = static_cast<int>(std::min<int64_t>(64, (g.n + 15) / 16 * 16));
    e.out.gemmTiles.push_back({variant, g.bm, g.bn});
    return;
  }
  // The tile of the variant's row (KernelVariants.def, which
  // select-expert-kernels costs with); a GEMM without a variant takes
  // 64 x 64.
  int tm = 64, tn = 64;
  if (const ir::Target *t = ir::lookupTarget(e.target))
    if (const ir::KernelVariant *v = ir::lookupVariant(*t, variant))
      tm = v->tileM, tn = v->tileN;
  // 64 columns where 128 would leave a ragged last tile (N = 320: 5 tiles
  // of 64, not 3 of 128 with 64 columns of zeros).
  if (tn == 128 && g.n % 128 != 0 && g.n % 64 == 0)
    tn = 64;
  // Gate and up (swiglu) stage two W tiles: 64 columns each keep the
  // accumulators of a 128-row tile within the register cap.
  if (tn == 128 && g.w.size() == 2)
    tn = 64;
  g.bm = tm;
  g.bn = tn;
  g.nt = tm * tn >= 128 * 64 ? 256 : 128;
  e.out.gemmTiles.push_back({variant, g.bm, g.bn});
}

bool GemmEmitter::useWgmma(const Gemm &g) const {
  // Option gemm-core=mma keeps these tiles on mma.sync (an A/B option).
  if (e.target != "sm_90" || !g.mma || g.skinny || !doubleBuffer_ ||
      g.k % kBK != 0 || g.bm % 64 != 0 || g.nt % 128 != 0 ||
      option(e.plan, Opt::GemmCore) == 1)
    return false;
  const int groups = g.nt / 128, wgM = g.bm / 64;
  if (groups % wgM != 0 || g.bn % (groups / wgM) != 0)
    return false;
  const int cols = g.bn / (groups / wgM);
  return cols == 64 || cols == 128;
}

void GemmEmitter::decodeW(const Tensor &w, const std::string &rowPtr,
                          const std::string &k, const std::string &dst) {
  if (w.quant()) {
    bool lds = w.ggml == format::GgmlType::IQ3_S && iq3sLds_;
    e.line(
        "        strata_dq8_{}{}({} + ({}) / {} * {}, (int)(({}) % {}), {}{});",
        format::ggmlTypeInfo(w.ggml).irName, lds ? "_grid" : "", rowPtr, k,
        w.blockSize, w.blockBytes, k, w.blockSize, dst,
        lds ? ", iq3s_lds" : "");
  } else {
    // Whole rows of K % 32 == 0 elements: 16-bit pieces are 16-byte aligned
    // (in global memory, or in a raw stage's LDS row of bytes).
    e.line("        ld8((const {} *){}, {}, {});", w.ctype, rowPtr, k, dst);
  }
}

void GemmEmitter::wPiece(const Gemm &g, const Tensor &w,
                         const std::string &wRow, bool partialK) {
  // Branch-free: a column past N reads row N - 1 and is zeroed after, so
  // the step's loads are one basic block the scheduler can issue ahead of
  // the matrix ops and consume after them.
  // Where the tiles cover N exactly there is nothing to test.
  const bool exact = g.n % g.bn == 0;
  e.line("      {{ float v[8];");
  if (exact)
    e.line("      {{ {{");
  else
    e.line("      {{ const long nl = n < {}L ? n : {}L; {{ const long n = nl;",
           g.n, g.n - 1);
  e.line("        {}", wRow);
  if (partialK)
    e.line("        for (int j = 0; j < 8; ++j) v[j] = k0 + kc + j < {}L ? "
           "ld(wrow, k0 + kc + j) : 0.0f;",
           g.k);
  else if (g.split > 1) {
    decodeW(w, "wrow", fmt::format("k0 % {}L + kc", g.k), "v");
    e.line("        strata_split_bf16(v, (int)(k0 / {}L));", g.k);
  } else
    decodeW(w, "wrow", "k0 + kc", "v");
  e.line("      }} }}");
  if (!exact)
    e.line("      {{ const bool nok = n < {}L; for (int j = 0; j < 8; ++j) "
           "v[j] = nok ? v[j] : 0.0f; }}",
           g.n);
}

void GemmEmitter::tileLoop(const Gemm &g, const std::string &aRow,
                           const std::vector<std::string> &wRow) {
  const bool partialK = g.k % kBK != 0;
  if (partialK && g.w[0].quant())
    throw Unsupported("K is not a multiple of the weight's block");
  // IQ3_S's grid (2 KiB) in LDS: its lookups are random per lane.
  if (std::any_of(g.w.begin(), g.w.end(), [](const Tensor &w) {
        return w.ggml == format::GgmlType::IQ3_S;
      })) {
    e.line("  STRATA_SHARED uint32_t iq3s_lds[512];");
    e.line("  for (int i = tid_x(); i < 512; i += {}) iq3s_lds[i] = "
           "strata_iq3s_grid[i];",
           g.nt);
    e.line("  sync_block();");
  }
  if (g.mma)
    matrixTile(g, aRow, wRow);
  else if (g.skinny)
    skinnyTile(g, aRow, wRow);
  else
    ffmaTile(g, aRow, wRow);
  e.line("        if (m < M && n < {}L) {{", g.n);
  for (const std::string &l : g.epilogue)
    e.line("          {}", l);
  e.line("        }}");
  e.line("      }}");
}

void GemmEmitter::matrixTile(const Gemm &g, const std::string &aRow,
                             const std::vector<std::string> &wRow) {
  const size_t nb = g.w.size();
  const bool partialK = g.k % kBK != 0;
  // The K walked: K, or K per bf16 term of split f32 weights.
  const int64_t kTot = g.k * g.split;
  // wgmma (sm_90a): each warpgroup takes 64 rows of the tile, all its
  // columns; the operands are read from LDS by the matrix unit (no
  // per-wave fragment loads) while the waves stage the next K step.
  const bool wg = useWgmma(g);
  // wgmma: warpgroups wgM down x wgN across; each wave 16 rows of its
  // warpgroup's 64 and all of its columns.
  const int wgM = g.bm / 64, wgN = wg ? g.nt / 128 / wgM : 1;
  int wm = 4 * wgM, wn = wgN;
  if (!wg)
    waveGrid(g.bm, g.nt, wm, wn);
  if ((g.bn / 16) % wn != 0)
    throw Unsupported("tile does not split over the waves");
  int fm = g.bm / 16 / wm, fn = g.bn / 16 / wn;
  const int ld = kBK + 8;
  // Software pipeline: the next K step's A and W pieces are loaded (and
  // W decoded) into registers while the matrix units work on this one;
  // with room for two LDS buffers one barrier per step suffices.
  const int nbuf = doubleBuffer_ ? 2 : 1;
  const int ca = (g.bm * 4 + g.nt - 1) / g.nt,
            cw = (g.bn * 4 + g.nt - 1) / g.nt;
  // bf16 A rows of whole 8-element pieces: one 16-byte load per piece.
  const bool vecA = g.a.ctype == "bf16" && !partialK && g.k % 8 == 0;
  // wgmma with two weights (gate and up): one B operand of 2 x bn rows,
  // the second weight's rows after the first's in every k chunk, so one
  // m64n(2 bn) reads A once for both.
  const bool pairB = wg && nb == 2 && wgN == 1 && 2 * g.bn <= 128;
  e.line("  mma_t *As = (mma_t *)strata_lds;");
  for (size_t b = 0; b < nb; ++b)
    e.line("  mma_t *Bs{} = As + {};", b,
           pairB ? nbuf * g.bm * ld + static_cast<int>(b) * g.bn * 8
                 : nbuf * (g.bm + static_cast<int>(b) * g.bn) * ld);
  e.line("  const int wave = tid_x() >> 5, wm = wave % {}, wn = wave / {};", wm,
         wm);
  for (size_t b = 0; b < nb; ++b)
    e.line("  float acc{}[{}][{}][8] = {{}};", b, fm, fn);
  e.line("  strata_u4 pa[{}], pw[{}][{}];", ca, nb, cw);
  // Raw-staged W: each superblock's rows by cp.async into two LDS slots
  // one superblock (8 K steps) ahead; the W pieces are decoded from LDS
  // at their step, so no global load waits inside the K loop.
  const bool raw = rawStaged(g);
  const int64_t sb = raw ? superBytes(g) : 0, lr = raw ? rawRowBytes(g) : 0,
                chunks = lr / 16;
  const bool window = raw && !rawAligned(g);
  const int64_t st = raw ? stageK(g) : 0; // K elements per stage
  if (raw)
    e.line("  uint8_t *Wr = strata_lds + {};",
           nbuf * (g.bm + static_cast<int64_t>(nb) * g.bn) * ld * 2);
  auto issueRaw = [&](const std::string &kb, const std::string &slot) {
    for (size_t b = 0; b < nb; ++b) {
      e.line("    for (int c = tid_x(); c < {}; c += {}) {{", g.bn * chunks,
             g.nt);
      e.line("      int r = c / {}, q = c % {};", chunks, chunks);
      e.line("      long n = {}; n = n < {}L ? n : {}L;", g.colOf("r"), g.n,
             g.n - 1);
      e.line("      {{ {}", wRow[b]);
      if (window)
        e.line("        const uint8_t *src = (const uint8_t *)((unsigned "
               "long long)(wrow + ({}) * {}L) & ~15ull);",
               kb, sb);
      else
        e.line("        const uint8_t *src = (const uint8_t *)wrow + ({}) * "
               "{}L;",
               kb, sb);
      e.line("        cp_async16(Wr + (({}) * {} + {}) * {} + r * {} + q * "
             "16, src + q * 16); }}",
             slot, nb, b, g.bn * lr, lr);
      e.line("    }}");
    }
  };
  // A piece loop's bound test, only where the last round is partial.
  auto guard = [&](int ci, int pieces) {
    return (ci + 1) * g.nt > pieces ? fmt::format("if (c < {})", pieces)
                                    : std::string();
  };
  auto load = [&](const std::string &kStep) {
    // The step's own k0 (k0 + 32 inside the loop), named apart first:
    // `const long k0 = k0 + 32` would read itself.
    e.line("    {{ const long kload = {}; {{ const long k0 = kload;", kStep);
    // Rows past M read row M - 1 (M > m0) and are zeroed: no branch.
    for (int ci = 0; ci < ca; ++ci) {
      e.line("    {{ int c = tid_x() + {}; {} {{", ci * g.nt,
             guard(ci, g.bm * 4));
      if (vecA) {
        // The row was found once (arw); the zeroing waits for the store,
        // so nothing waits on the load before the next step.
        e.line("      pa[{}] = *(const strata_u4 *)({} + (long)arw[{}] * {}L "
               "+ {} + (c & 3) * 8);",
               ci, g.a.ptr, ci, g.k,
               g.split > 1 ? fmt::format("k0 % {}L", g.k) : "k0");
      } else {
        e.line("      int r = c >> 2, kc = (c & 3) * 8; long m = m0 + r;");
        e.line("      const bool mok = m < M; if (!mok) m = M - 1;");
        e.line("      float v[8];");
        e.line("      {{ {} for (int j = 0; j < 8; ++j) v[j] = {}; }}", aRow,
               partialK ? "(k0 + kc + j < " + std::to_string(g.k) +
                              "L ? ld(arow, k0 + kc + j) : 0.0f)"
                        : "ld(arow, k0 + kc + j)");
        e.line("      for (int j = 0; j < 8; ++j) v[j] = mok ? v[j] : 0.0f;");
        e.line("      pa[{}] = pack8_mma(v);", ci);
      }
      e.line("    }} }}");
    }
    for (int ci = 0; ci < (raw ? 0 : cw); ++ci) {
      e.line("    {{ int c = tid_x() + {}; {} {{", ci * g.nt,
             guard(ci, g.bn * 4));
      e.line("      int r = c >> 2, kc = (c & 3) * 8;");
      e.line("      long n = {};", g.colOf("r"));
      for (size_t b = 0; b < nb; ++b) {
        wPiece(g, g.w[b], wRow[b], partialK);
        e.line("      pw[{}][{}] = pack8_mma(v); }}", b, ci);
      }
      e.line("    }} }}");
    }
    e.line("    }} }}");
  };
  if (raw) {
    issueRaw("0", "0");
    e.line("  cp_async_commit();");
  }
  if (vecA) {
    // Each thread's A rows, found once: the gather's index load and
    // division are not repeated every K step. Bit ci of amask: piece ci's
    // row is below M.
    e.line("  int arw[{}]; unsigned amask = 0;", ca);
    for (int ci = 0; ci < ca; ++ci)
      e.line("  {{ long m = m0 + ((tid_x() + {}) >> 2); if (m < M) amask |= "
             "{}u; else m = M - 1; arw[{}] = (int)({}); }}",
             ci * g.nt, 1u << ci, ci, g.aIndex);
  }
  load("0");
  e.line("  int buf = 0;");
  // Where a staged element lands in buffer `sb`: rows of ld elements
  // for the fragment loads; for wgmma, 16-byte chunks [k / 8][row], the
  // k chunks chunkLd elements apart: 32 bytes past a multiple of 128, so
  // a quarter-wave's stores (2 rows x 4 chunks) take 8 distinct bank
  // quads.
  auto chunkLd = [](int rows) { return rows * 8 + 16; };
  // (pairB: a weight's tile is half of a 2 x bn row one.)
  auto slot = [&](const std::string &tile, int rows, const std::string &r,
                  const std::string &kc, const std::string &sb) {
    if (pairB && tile != "As")
      rows *= 2;
    return wg ? fmt::format("{} + {} * {} + ({}) / 8 * {} + {} * 8", tile, sb,
                            rows * ld, kc, chunkLd(rows), r)
              : fmt::format("{} + {} * {} + {} * {} + {}", tile, sb, rows * ld,
                            r, ld, kc);
  };
  // Stores the K step at k0 into buffer `sb`: stageW its W pieces decoded
  // from the raw stage (copying the next superblock at a boundary),
  // stageRegs the pieces load() left in registers.
  auto stageW = [&](const std::string &bufx) {
    if (raw) {
      // A superblock boundary: the next one's copies go into the other
      // slot (its last readers passed the previous step's barrier), this
      // one's must have landed.
      e.line("    if (k0 % {} == 0) {{", st);
      e.line("    const long kb = k0 / {};", st);
      e.line("    if (k0 + {} < {}L) {{", st, g.k);
      issueRaw("kb + 1", "(kb + 1) & 1");
      e.line("    cp_async_commit(); cp_async_wait_one();");
      e.line("    }} else cp_async_wait_all();");
      e.line("    sync_block();");
      e.line("    }}");
      // This step's W pieces from the staged superblock.
      const bool exact = g.n % g.bn == 0;
      for (int ci = 0; ci < cw; ++ci) {
        e.line("    {{ int c = tid_x() + {}; {} {{", ci * g.nt,
               guard(ci, g.bn * 4));
        e.line("      int r = c >> 2, kc = (c & 3) * 8;");
        if (!exact)
          e.line("      const bool nok = {} < {}L;", g.colOf("r"), g.n);
        for (size_t b = 0; b < nb; ++b) {
          e.line("      {{ float v[8];");
          std::string seg =
              fmt::format("(Wr + (((k0 / {}) & 1) * {} + {}) * {} + r * {})",
                          st, nb, b, g.bn * lr, lr);
          if (window) {
            // The segment's offset in its window: its global address mod
            // 16.
            e.line("      const uint8_t *seg = {};", seg);
            e.line("      {{ long n = {}; n = n < {}L ? n : {}L; {}",
                   g.colOf("r"), g.n, g.n - 1, wRow[b]);
            e.line("        seg += (unsigned long long)(wrow + k0 / {} * "
                   "{}L) & 15; }}",
                   st, sb);
            seg = "seg";
          }
          decodeW(g.w[b], seg, fmt::format("k0 % {} + kc", st), "v");
          if (!exact)
            e.line("      for (int j = 0; j < 8; ++j) v[j] = nok ? v[j] : "
                   "0.0f;");
          e.line("      *(strata_u4 *)({}) = pack8_mma(v); }}",
                 slot("Bs" + std::to_string(b), g.bn, "r", "kc", bufx));
        }
        e.line("    }} }}");
      }
    }
  };
  // Stores the K step's pieces held in the registers load() filled: A's,
  // and W's where not raw-staged.
  auto stageRegs = [&](const std::string &bufx) {
    const std::string pr = "(c >> 2)", pk = "(c & 3) * 8";
    for (int ci = 0; ci < (raw ? 0 : cw); ++ci)
      for (size_t b = 0; b < nb; ++b)
        e.line("    {{ int c = tid_x() + {}; if (c < {}) *(strata_u4 *)({}) "
               "= pw[{}][{}]; }}",
               ci * g.nt, g.bn * 4,
               slot("Bs" + std::to_string(b), g.bn, pr, pk, bufx), b, ci);
    for (int ci = 0; ci < ca; ++ci)
      e.line("    {{ int c = tid_x() + {}; if (c < {}) *(strata_u4 *)({}) = "
             "{}; }}",
             ci * g.nt, g.bm * 4, slot("As", g.bm, pr, pk, bufx),
             vecA ? fmt::format("amask & {}u ? mma_from_bf16x8(pa[{}]) : "
                                "strata_u4{{0, 0, 0, 0}}",
                                1u << ci, ci)
                  : fmt::format("pa[{}]", ci));
  };
  auto stage = [&](const std::string &bufx) {
    stageW(bufx);
    stageRegs(bufx);
  };
  if (wg) {
    // Step k0's wgmma run while the waves stage step k0 + 32 into the
    // other buffer and load step k0 + 64; each warpgroup waits for its
    // own wgmma before the step's barrier, so a buffer is rewritten only
    // after every warpgroup's reads of it completed.
    e.line("  {{ const long k0 = 0;");
    stage("0");
    e.line("  }}");
    e.line("  fence_proxy_async(); sync_block();");
    load(fmt::format("{} < {}L ? {} : 0", kBK, kTot, kBK));
    e.line("  const int wgm = (wave >> 2) % {}, wgn = (wave >> 2) / {};", wgM,
           wgM);
    const int cols = g.bn / wgN;
    // Unrolled by a raw stage (8 K steps of a 256-element superblock, 4 of
    // 128, 2 of 64; else the 2 buffers): the step's position in the stage
    // and its buffer become constants, so the decoders' block offsets, the
    // LDS addresses and the boundary test fold into immediates. SASS: the
    // IQ3_S gate/up loop 340 -> 172 instructions a step (IMAD 58 -> 14),
    // down 305 -> 201, K3 212 -> 136; H200, T = 16,384: dense GEMMs 536 ->
    // 480 ms, gate/up 229 -> 219, down 166 -> 161, K3 80 -> 78, K2 59 -> 60.
    e.line("#pragma unroll {}", raw ? st / kBK : 2);
    e.line("  for (long k0 = 0; k0 < {}L; k0 += {}) {{", kTot, kBK);
    e.line("    wg_fence();");
    for (int kk = 0; kk < kBK; kk += 16) {
      e.line("    {{ const wg_desc da = wg_desc_of(As + buf * {} + wgm * "
             "512 + {}, {});",
             g.bm * ld, kk / 8 * chunkLd(g.bm), chunkLd(g.bm) * 2);
      if (pairB)
        e.line("    wgmma_m64n128_pair(&acc0[0][0][0], &acc1[0][0][0], da, "
               "wg_desc_of(Bs0 + buf * {} + {}, {}));",
               2 * g.bn * ld, kk / 8 * chunkLd(2 * g.bn),
               chunkLd(2 * g.bn) * 2);
      for (size_t b = 0; b < (pairB ? 0 : nb); ++b)
        e.line("    wgmma_m64n{}(&acc{}[0][0][0], da, wg_desc_of(Bs{} + buf "
               "* {} + wgn * {} + {}, {}));",
               cols, b, b, g.bn * ld, cols * 8, kk / 8 * chunkLd(g.bn),
               chunkLd(g.bn) * 2);
      e.line("    }}");
    }
    e.line("    wg_commit();");
    e.line("    if (k0 + {} < {}L) {{", kBK, kTot);
    // The register-held pieces first, then the load two steps ahead, then
    // the W decode: the load has the decode's time to land.
    e.line("    {{ const long kn = k0 + {}; {{ const long k0 = kn;", kBK);
    stageRegs("(buf ^ 1)");
    e.line("    }} }}");
    load(fmt::format("k0 + {} < {}L ? k0 + {} : k0", 2 * kBK, kTot, 2 * kBK));
    e.line("    {{ const long kn = k0 + {}; {{ const long k0 = kn;", kBK);
    stageW("(buf ^ 1)");
    e.line("    }} }}");
    e.line("    }}");
    for (size_t b = 0; b < nb; ++b)
      for (int q = 0; q < fn * 8; q += 32)
        e.line("    {}(&acc{}[0][0][0] + {});",
               b == 0 && q == 0 ? "wg_wait_all" : "wg_pin32", b, q);
    e.line("    fence_proxy_async(); sync_block();");
    e.line("    buf ^= 1;");
    e.line("  }}");
  } else {
    e.line("  for (long k0 = 0; k0 < {}L; k0 += {}) {{", kTot, kBK);
    stage("buf");
    e.line("    sync_block();");
    // The last step reloads itself (valid addresses, no branch).
    load(fmt::format("k0 + {} < {}L ? k0 + {} : k0", kBK, kTot, kBK));
    // Each wave's fragments once per 16 k (one ldmatrix.x4 per 16x16 on
    // sm_90), then its fm x fn tiles from registers.
    e.line("#pragma unroll");
    e.line("    for (int kk = 0; kk < {}; kk += 16) {{", kBK);
    e.line("      mma_fa fa[{}];", fm);
    e.line("#pragma unroll");
    e.line("      for (int i = 0; i < {}; ++i)", fm);
    e.line("        fa[i] = mma_load_a(As + buf * {} + ((wm * {} + i) * 16) "
           "* {} + kk, {});",
           g.bm * ld, fm, ld, ld);
    for (size_t b = 0; b < nb; ++b) {
      e.line("      {{ mma_fb fb[{}];", fn);
      e.line("#pragma unroll");
      e.line("      for (int j = 0; j < {}; ++j)", fn);
      e.line(
          "        fb[j] = mma_load_b(Bs{} + buf * {} + ((wn * {} + j) * 16) "
          "* {} + kk, {});",
          b, g.bn * ld, fn, ld, ld);
      e.line("#pragma unroll");
      e.line("      for (int i = 0; i < {}; ++i)", fm);
      e.line("#pragma unroll");
      e.line("        for (int j = 0; j < {}; ++j)", fn);
      e.line("          mma_16x16x16_f(acc{}[i][j], fa[i], fb[j]); }}", b);
    }
    e.line("    }}");
    if (nbuf == 2)
      e.line("    buf ^= 1;");
    else
      e.line("    sync_block();");
    e.line("  }}");
  }
  if (g.csTile && nbuf == 2) // Cs overwrites the tiles other waves read
    e.line("  sync_block();");
  if (g.csTile)
    e.line("  float *Cs = (float *)strata_lds;");
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i)", fm);
  e.line("#pragma unroll");
  e.line("    for (int j = 0; j < {}; ++j)", fn);
  e.line("#pragma unroll");
  e.line("      for (int q = 0; q < 8; ++q) {{");
  e.line("        int r, c;");
  e.line("        mma_acc_coord(q, &r, &c);");
  e.line("        r += (wm * {} + i) * 16;", fm);
  e.line("        c += (wn * {} + j) * 16;", fn);
  e.line("        long m = m0 + r, n = {};", g.colOf("c"));
  e.line("        float v = acc0[i][j][q];");
  if (nb > 1)
    e.line("        float v2 = acc1[i][j][q];");
}

void GemmEmitter::skinnyTile(const Gemm &g, const std::string &aRow,
                             const std::vector<std::string> &wRow) {
  const size_t nb = g.w.size();
  const bool partialK = g.k % kBK != 0;
  // Warp dot products: each lane takes 8 k of every row and column per
  // step (16-byte A loads, the few W rows hit in cache), sums over the
  // warp at the end; lane 0 runs the epilogue.
  if (nb != 1 || partialK || g.k % 8 != 0)
    throw Unsupported("skinny GEMM shape");
  e.line("  const int wave = tid_x() >> 5;");
  e.line("  float acc0[{}][{}] = {{}};", kSkinnyRows, g.bn);
  e.line("  for (long k0 = lane_id() * 8L; k0 < {}L; k0 += 256) {{", g.k);
  e.line("    float wv[{}][8];", g.bn);
  e.line("#pragma unroll");
  e.line("    for (int j = 0; j < {}; ++j) {{", g.bn);
  e.line("      const long n = {};", g.colOf("j"));
  e.line("      {} ld8(wrow, k0, wv[j]);", wRow[0]);
  e.line("    }}");
  e.line("#pragma unroll");
  e.line("    for (int i = 0; i < {}; ++i) {{", kSkinnyRows);
  e.line("      long m = m0 + wave * {} + i; m = m < M ? m : M - 1;",
         kSkinnyRows);
  e.line("      float av[8];");
  e.line("      {{ {} ld8(arow, k0, av); }}", aRow);
  e.line("#pragma unroll");
  e.line("      for (int j = 0; j < {}; ++j)", g.bn);
  e.line("#pragma unroll");
  e.line("        for (int u = 0; u < 8; ++u) acc0[i][j] += av[u] * "
         "wv[j][u];");
  e.line("    }}");
  e.line("  }}");
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i)", kSkinnyRows);
  e.line("#pragma unroll");
  e.line("    for (int j = 0; j < {}; ++j) acc0[i][j] = warp_sum(acc0[i][j]);",
         g.bn);
  e.line("  if (lane_id() == 0)");
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i)", kSkinnyRows);
  e.line("#pragma unroll");
  e.line("    for (int j = 0; j < {}; ++j) {{", g.bn);
  e.line("        long m = m0 + wave * {} + i, n = {};", kSkinnyRows,
         g.colOf("j"));
  e.line("        float v = acc0[i][j];");
}

void GemmEmitter::ffmaTile(const Gemm &g, const std::string &aRow,
                           const std::vector<std::string> &wRow) {
  const size_t nb = g.w.size();
  // f32 FMA tile: 16 x 16 threads, BM/16 rows x BN/16 columns each.
  if (g.nt != 256 || g.bm % 16 || g.bn % 16)
    throw Unsupported("f32 tile shape");
  const int rm = g.bm / 16, rn = g.bn / 16;
  const int ld = kBK + 1;
  e.line("  float *As = (float *)strata_lds;");
  for (size_t b = 0; b < nb; ++b)
    e.line("  float *Bs{} = As + {};", b,
           (g.bm + static_cast<int>(b) * g.bn) * ld);
  e.line("  const int ty = tid_x() >> 4, tx = tid_x() & 15;");
  for (size_t b = 0; b < nb; ++b)
    e.line("  float acc{}[{}][{}] = {{}};", b, rm, rn);
  e.line("  for (long k0 = 0; k0 < {}L; k0 += {}) {{", g.k, kBK);
  e.line("    for (int c = tid_x(); c < {}; c += {}) {{", g.bm * kBK, g.nt);
  e.line("      int r = c / {}, kc = c % {};", kBK, kBK);
  e.line("      long m = m0 + r;");
  e.line("      float v = 0.0f;");
  e.line("      if (m < M && k0 + kc < {}L) {{ {} v = ld(arow, k0 + kc); }}",
         g.k, aRow);
  e.line("      As[r * {} + kc] = v;", ld);
  e.line("    }}");
  if (g.w[0].quant()) {
    // Quantised weights: 8-element pieces decoded once each, into f32.
    stageW8(g, wRow, ld, "", false);
  } else {
    e.line("    for (int c = tid_x(); c < {}; c += {}) {{", g.bn * kBK, g.nt);
    e.line("      int r = c / {}, kc = c % {};", kBK, kBK);
    e.line("      long n = {};", g.colOf("r"));
    for (size_t b = 0; b < nb; ++b) {
      e.line("      {{ float v = 0.0f;");
      e.line("      if (n < {}L && k0 + kc < {}L) {{ {} v = ld(wrow, k0 + "
             "kc); }}",
             g.n, g.k, wRow[b]);
      e.line("      Bs{}[r * {} + kc] = v; }}", b, ld);
    }
    e.line("    }}");
  }
  e.line("    sync_block();");
  // Not unrolled: a fully unrolled K step hoists every LDS load and
  // spills (measured: 256 VGPRs, 85 spills on gfx1151).
  e.line("    for (int kk = 0; kk < {}; ++kk)", kBK);
  e.line("#pragma unroll");
  e.line("      for (int i = 0; i < {}; ++i)", rm);
  e.line("#pragma unroll");
  e.line("        for (int j = 0; j < {}; ++j) {{", rn);
  for (size_t b = 0; b < nb; ++b)
    e.line("          acc{}[i][j] += As[(ty + 16 * i) * {} + kk] * Bs{}[(tx "
           "+ 16 * j) * {} + kk];",
           b, ld, b, ld);
  e.line("        }}");
  e.line("    sync_block();");
  e.line("  }}");
  if (g.csTile)
    e.line("  float *Cs = (float *)strata_lds;");
  e.line("#pragma unroll");
  e.line("  for (int i = 0; i < {}; ++i)", rm);
  e.line("#pragma unroll");
  e.line("    for (int j = 0; j < {}; ++j) {{", rn);
  e.line("        int r = ty + 16 * i, c = tx + 16 * j;");
  e.line("        long m = m0 + r, n = {};", g.colOf("c"));
  e.line("        float v = acc0[i][j];");
  if (nb > 1)
    e.line("        float v2 = acc1[i][j];");
}

void GemmEmitter::runChains() {
  std::vector<Chain> chains;
  std::map<std::pair<int, uint32_t>, std::pair<size_t, std::string>> vars;
  int nextVar = 0;
  for (const BodyOp &op : e.body) {
    if (op.recipe == Recipe::Matmul) {
      if (op.inputs[0].kind != BodyRef::Kind::In ||
          op.inputs[1].kind != BodyRef::Kind::In)
        throw Unsupported("a matmul over a value computed in the kernel");
      chains.push_back({&op, {}, nullptr, {}});
      std::string v = fmt::format("x{}", nextVar++);
      chains.back().epi.push_back(fmt::format("float {} = v;", v));
      vars[key(op.outputs[0])] = {chains.size() - 1, v};
    } else {
      size_t chain = SIZE_MAX;
      for (const BodyRef &r : op.inputs) {
        auto it = vars.find(key(r));
        if (it == vars.end())
          continue;
        if (chain != SIZE_MAX && chain != it->second.first)
          throw Unsupported("an op joins two GEMM chains");
        chain = it->second.first;
      }
      if (chain == SIZE_MAX)
        throw Unsupported(fmt::format("'{}' does not follow a matmul",
                                      format::recipeInfo(op.recipe).name));
      Chain &c = chains[chain];
      if (c.streamMean)
        throw Unsupported("an op after the stream mean");
      if (op.recipe == Recipe::HcRead) {
        auto g = vars.find(key(op.inputs[1]));
        if (g == vars.end() || op.inputs[0].kind != BodyRef::Kind::In)
          throw Unsupported("hc_read after a GEMM must read the gate from it");
        c.streamMean = &op;
        c.gateVar = g->second.second;
        continue;
      }
      format::OpClass cls = format::recipeInfo(op.recipe).cls;
      if (cls != format::OpClass::Unary && cls != format::OpClass::Binary)
        throw Unsupported(fmt::format("'{}' cannot be a GEMM epilogue",
                                      format::recipeInfo(op.recipe).name));
      Tensor y = e.tensor(op.outputs[0]);
      std::string args;
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        auto it = vars.find(key(op.inputs[i]));
        std::string a;
        if (it != vars.end()) {
          a = it->second.second;
        } else {
          if (op.inputs[i].kind != BodyRef::Kind::In)
            throw Unsupported("an epilogue reads a value of another chain");
          Tensor t = e.tensor(op.inputs[i]);
          a = fmt::format("ld({}, {})", t.ptr,
                          elementIndex(t, y.shape, "row", "i"));
        }
        args += (i ? ", " : "") + a;
      }
      std::string fn =
          op.recipe == Recipe::Cast
              ? args
              : fmt::format(
                    "sm_{}({}{})", format::recipeInfo(op.recipe).name, args,
                    op.recipe == Recipe::Scale
                        ? fmt::format(", {}, {}",
                                      floatLit(e.floatAttr(op, "s")),
                                      floatLit(e.floatAttr(op, "b")))
                    : op.recipe == Recipe::Clamp
                        ? fmt::format(", {}, {}",
                                      floatLit(e.hasAttr(op, "min")
                                                   ? e.floatAttr(op, "min")
                                                   : -INFINITY),
                                      floatLit(e.hasAttr(op, "max")
                                                   ? e.floatAttr(op, "max")
                                                   : INFINITY))
                        : "");
      std::string v = fmt::format("x{}", nextVar++);
      c.epi.push_back(fmt::format("float {} = {};", v, fn));
      vars[key(op.outputs[0])] = {chain, v};
    }
    // Results that are kernel outputs are stored where they are made.
    for (const BodyRef &r : op.outputs)
      if (r.kind == BodyRef::Kind::Out) {
        auto it = vars.find(key(r));
        if (it == vars.end())
          continue;
        Tensor t = e.tensor(r);
        Chain &sc = chains[it->second.first];
        ++sc.stores;
        sc.out = t;
        sc.outVar = it->second.second;
        sc.epi.push_back(fmt::format("st({}, {}, {});", t.ptr,
                                     elementIndex(t, t.shape, "row", "i"),
                                     it->second.second));
      }
  }

  // All chains share the launch; blocks of chain c take grid.y tiles
  // [ybase_c, ybase_c + tiles_c).
  std::vector<Gemm> gemms;
  std::vector<Tensor> ys; ///< each chain's matmul output
  // The kernel's variant names one variant per matmul of the body, in order.
  std::vector<std::string> variants;
  for (size_t at = 0; at <= e.kernel.variant.size();) {
    size_t comma = e.kernel.variant.find(',', at);
    if (comma == std::string::npos)
      comma = e.kernel.variant.size();
    variants.push_back(e.kernel.variant.substr(at, comma - at));
    at = comma + 1;
  }
  for (Chain &c : chains) {
    Gemm g;
    g.a = e.tensor(c.mm->inputs[0]);
    g.w = {e.tensor(c.mm->inputs[1])};
    g.k = g.w[0].shape[1].constant;
    g.n = g.w[0].shape[0].constant;
    Tensor y = e.tensor(c.mm->outputs[0]);
    g.mPer = constProduct(y.shape, 1) / g.n;
    g.mRows = fmt::format("{} * {}L", dimExpr(y.shape[0]), g.mPer);
    size_t ci = &c - chains.data();
    pickTile(g, ci < variants.size() ? variants[ci] : e.kernel.variant);
    g.colOf = [](const std::string &c) { return "n0 + " + c; };
    std::string rowI =
        g.mPer == 1 ? "const long row = m, i = n; (void)row; (void)i;"
                    : fmt::format("const long row = m / {}L, i = (m % {}L) * "
                                  "{}L + n; (void)row; (void)i;",
                                  g.mPer, g.mPer, g.n);
    g.epilogue.push_back(rowI);
    if (c.streamMean) {
      // Tile columns are (stream, d) pairs: BD columns of d for each of the
      // n streams, so the block holds every stream of its d range.
      Tensor xn = e.tensor(c.streamMean->inputs[0]);
      int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant;
      // A 64 x 128 tile: its f32 gate tile (32 KiB) reuses the LDS region
      // of the staged operands once the K loop is done.
      g.bm = 64, g.bn = 128, g.nt = 256, g.csTile = true;
      if (g.bn % ns != 0)
        throw Unsupported("stream count does not divide the tile");
      int64_t bd = g.bn / ns;
      if (d % bd != 0)
        throw Unsupported("hidden size does not divide the tile");
      g.n = ns * d;
      for (std::string &l : c.epi)
        g.epilogue.push_back(l);
      // The gate alone: the image is read in the stream reduction below,
      // by rows of consecutive columns (a scattered 2-byte load per
      // accumulator here).
      g.epilogue.push_back(
          fmt::format("Cs[r * {} + c] = {};", csLd(g.bn), c.gateVar));
    } else {
      for (std::string &l : c.epi)
        g.epilogue.push_back(l);
    }
    ys.push_back(y);
    gemms.push_back(std::move(g));
  }
  // The TMA tile runs from kTmaMinTokens on, as an alternate code: its
  // pre-launch converts 16-bit (and, opted in, quantised) weights into the
  // workspace, a cost per call that pays off over enough rows, and its
  // 128 x 256 tiles leave short prompts few blocks. The kernel's own code
  // keeps the cp.async tiles (decode and short prompts as before).
  std::vector<Gemm> alt = gemms;
  // Plans with state decode: runs of a few rows take the decode form (the
  // kernel's own code) and the tiles become an alternate from the row after
  // it. Prefill-only plans keep the tiles as their own code.
  const int64_t decodeRows = option(e.plan, Opt::GemmDecodeRows);
  const bool decode = !e.plan.states.empty() && decodeRows > 0 &&
                      gemvFits(chains, gemms, decodeRows);
  // Chains of f32 weights: the row-block form until the tiles fill the
  // target (f32TileRows), from the decode forms' last row on.
  const int64_t f32From = f32TileRows(chains, gemms);
  const int64_t blockFrom = decode ? decodeRows + 1 : 1;
  const int64_t tileFrom = std::max(blockFrom, f32From);
  const bool rowBlock = f32From > blockFrom && e.plan.maxTokens >= blockFrom;
  auto alternate = [&](EmittedKernel &to, int64_t from, const char *suffix,
                       const std::function<void(const std::string &)> &emit) {
    e.out = EmittedKernel{};
    emit(std::string("@SYMBOL@") + suffix);
    EmittedKernel alt = std::move(e.out);
    alt.minTokens = from;
    alt.suffix = suffix;
    to.alternates.push_back(std::move(alt));
  };
  auto blocks = [&](const std::string &sym) {
    emitGemv(chains, gemms, kF32RowPass, sym, kF32RowBlock,
             ys.front().shape[0]);
  };
  auto tiles = [&](const std::string &sym) {
    emitVariant(chains, gemms, ys, TmaUse::None, sym);
  };
  EmittedKernel forms;
  if (decode) {
    forms = gemvForms(decodeRows, [&](int64_t rows, const std::string &sym) {
      emitGemv(chains, gemms, rows, sym);
    });
    if (rowBlock)
      alternate(forms, blockFrom, "_rowblk", blocks);
  } else if (rowBlock) {
    blocks("@SYMBOL@");
    forms = std::move(e.out);
  } else {
    tiles("@SYMBOL@");
    forms = std::move(e.out);
  }
  if ((decode || rowBlock) && e.plan.maxTokens >= tileFrom)
    alternate(forms, tileFrom, "_tile", tiles);
  e.out = std::move(forms);
  // Quantised weights too (their pre-launch dequantises W): measured on the
  // H200 at T = 16,384, the dense GEMMs 381 -> 213 ms, all kernels 1,174 ->
  // 1,008 ms (test/device/results/experiments/ab-tmaq-20261201T231133Z.txt).
  // Option gemm-tma-quant=0 keeps them on the cp.async tiles (for A/B
  // runs).
  const TmaUse use = option(e.plan, Opt::GemmTmaQuant) == 0 ? TmaUse::Float16
                                                            : TmaUse::Quantised;
  if (e.plan.maxTokens < kTmaMinTokens)
    return;
  bool any = false;
  for (size_t ci = 0; ci < alt.size(); ++ci) {
    Gemm probe = alt[ci];
    any |= pickTma(probe, chains[ci], ys[ci], use);
  }
  if (!any)
    return;
  EmittedKernel own = std::move(e.out);
  const bool ownWs = e.workspace;
  e.out = EmittedKernel{};
  e.workspace = false;
  emitVariant(chains, alt, ys, use, "@SYMBOL@_big");
  EmittedKernel big = std::move(e.out);
  big.minTokens = kTmaMinTokens;
  big.suffix = "_big";
  e.out = std::move(own);
  e.workspace = ownWs;
  e.out.alternates.push_back(std::move(big));
}

bool GemmEmitter::gemvFits(const std::vector<Chain> &chains,
                           const std::vector<Gemm> &gemms, int64_t rows) {
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    const Gemm &g = gemms[ci];
    if (g.w.size() != 1 || g.k % 8 != 0 || rows * g.mPer > 32 ||
        (g.w[0].quant() && g.w[0].blockSize % 8 != 0))
      return false;
    // The stream mean: a warp per hidden column takes every stream's gate
    // column over the whole K (its sum needs no second warp).
    if (chains[ci].streamMean &&
        (g.mPer != 1 || g.k >= kGemvStreamK || g.w[0].quant()))
      return false;
  }
  return true;
}

int64_t GemmEmitter::f32TileRows(const std::vector<Chain> &chains,
                                 const std::vector<Gemm> &gemms) const {
  if (option(e.plan, Opt::GemmF32Rows) != 0 ||
      !gemvFits(chains, gemms, kF32RowPass))
    return 0;
  const ir::Target *t = ir::lookupTarget(e.target);
  if (!t)
    return 0;
  int64_t bm = INT64_MAX, colTiles = 0, work = 0;
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    const Gemm &g = gemms[ci];
    // A few columns (kSkinnyN) already take warp dot products (and merge
    // into a neighbour's tile, K2's injection logits).
    if (chains[ci].streamMean || g.mPer != 1 || g.w[0].ctype != "float" ||
        g.skinny || g.n <= kSkinnyN || g.bm <= 0 || g.bn <= 0)
      return 0;
    bm = std::min<int64_t>(bm, g.bm);
    colTiles += (g.n + g.bn - 1) / g.bn;
    work += g.n * g.k;
  }
  if (gemms.empty())
    return 0;
  // Or earlier, where the row-block form's work passes one wave of tiles.
  return std::min(bm * ((t->units + colTiles - 1) / colTiles),
                  std::max<int64_t>(1, kF32RowBlockWork / work));
}

int64_t GemmEmitter::gemvCost(const Gemm &g) {
  int64_t cost = 0;
  for (const Tensor &w : g.w)
    cost += w.ggml == format::GgmlType::IQ3_S ? 2 : 1;
  return cost;
}

GemvForm GemmEmitter::gemvShape(const Gemm &g, int64_t columns, int64_t rows,
                                bool rowBlocks) const {
  GemvProblem p;
  p.rowBlocks = rowBlocks;
  p.columns = columns;
  p.k = g.k;
  p.rows = rows;
  p.cost = gemvCost(g);
  p.maxCols = option(e.plan, Opt::GemmDecodeCols);
  p.pieces = option(e.plan, Opt::GemmDecodePieces);
  return selectGemv(p);
}

void GemmEmitter::gemvRows(const Gemm &g, int64_t rows) {
  e.line("#pragma unroll");
  e.line("    for (int r = 0; r < {}; ++r) {{", rows);
  e.line("      if (m0 + r >= M) break;");
  e.line("      const long m = m0 + r;");
  e.line("      {}", aRowOf(g));
  e.line("      float av[8];");
  e.line("      ld8(arow, k, av);");
}

void GemmEmitter::gemvClose() {
  e.line("}}");
  iq3sLds_ = true;
}

int64_t GemmEmitter::gemvChunk(const Gemm &g, GemvForm shape) {
  int64_t bytes = 0;
  for (const Tensor &w : g.w)
    bytes += pieceBytes(w) * shape.cols;
  return std::max<int64_t>(1, 4096 / bytes);
}

int64_t GemmEmitter::gemvStage(const Gemm &g, GemvForm shape) const {
  if (option(e.plan, Opt::GemmDecodeStage) == 0)
    return 0;
  for (const Tensor &w : g.w)
    if (!w.quant() || 256 % w.blockSize != 0)
      return 0;
  const int64_t pieces = (g.k + 255) / 256;
  const int64_t perSlice = (pieces + shape.slices - 1) / shape.slices;
  const int64_t q = std::min(gemvChunk(g, shape), perSlice);
  int64_t bytes = 0;
  for (const Tensor &w : g.w)
    bytes += stageSlot(q, w) * shape.cols;
  return bytes;
}

void GemmEmitter::gemvOpen(bool iq3s, const std::string &sym,
                           int64_t stageBytes) {
  // At least two blocks an SM: registers capped at 128 (the unrolled pieces
  // of gate and up took 182, one block an SM).
  e.line("STRATA_KERNEL_MIN({}, 2) void {}({}) {{", kGemvWarps * 32, sym,
         e.params());
  e.prologue();
  // IQ3_S's grid in LDS: a warp's 32 random lookups in the global table
  // touch up to 16 L1 lines each (the grouped gate/up ran at 250 GB/s so).
  iq3sLds_ = iq3s;
  if (iq3s) {
    e.line("  STRATA_SHARED uint32_t iq3s_lds[512];");
    e.line("  for (int i = tid_x(); i < 512; i += {}) iq3s_lds[i] = "
           "strata_iq3s_grid[i];",
           kGemvWarps * 32);
    e.line("  sync_block();");
  }
  e.line("  const int wave = tid_x() >> 5, lane = lane_id();");
  e.line("  STRATA_SHARED float red[2][{}][32];", kGemvWarps);
  if (stageBytes > 0)
    e.line("  STRATA_SHARED __attribute__((aligned(16))) uint8_t "
           "wstage[{}][{}];",
           kGemvWarps, stageBytes);
}

void GemmEmitter::gemvBody(const Gemm &g, int64_t rows, GemvForm shape,
                           const std::string &first, const std::string &end) {
  const size_t nb = g.w.size();
  const int slices = shape.slices, cols = shape.cols;
  // Warps in groups of `slices` per `cols` columns; slice j takes the
  // 256-element pieces j, j + slices, ... of K.
  e.line("  const int slice = wave % {}, group = wave / {};", slices, slices);
  e.line("  const long n0 = ((long)(bid_x() - base) * {} + group) * {};",
         kGemvWarps / slices, cols);
  e.line("  const bool live = n0 < {}L;", g.n);
  for (size_t b = 0; b < nb; ++b) {
    const Tensor &w = g.w[b];
    const int64_t rowBytes = w.quant() ? g.k / w.blockSize * w.blockBytes : g.k;
    // A column past N (the last group's) reads column 0 and stores nothing.
    for (int c = 0; c < cols; ++c)
      e.line("  const {} *wrow{}_{} = {} + ({} + (n0 + {} < {}L ? n0 + {} : "
             "0L)) * {}L;",
             w.quant() ? "uint8_t" : w.ctype, b, c, w.ptr, rowBase_, c, g.n, c,
             rowBytes);
  }
  e.line("  const long M = {};", end);
  // Rows in passes of `rows` (one pass for a decode run); the block agrees
  // on every bound, so its barriers are uniform.
  e.line("  for (long m0 = {}; m0 < M; m0 += {}) {{", first, rows);
  for (size_t b = 0; b < nb; ++b)
    e.line("  float acc{}[{}][{}] = {{}};", b, cols, rows);
  e.line("  if (live) {{");
  // One piece: every column's weights decoded, then each row of A loaded
  // once for all of them.
  auto piece = [&](const std::string &k, const std::string &from) {
    e.line("    const long k = {};", k);
    for (size_t b = 0; b < nb; ++b)
      e.line("    float w{}[{}][8];", b, cols);
    for (int c = 0; c < cols; ++c)
      for (size_t b = 0; b < nb; ++b)
        decodeW(g.w[b], fmt::format("{}{}_{}", from, b, c), "k",
                fmt::format("w{}[{}]", b, c));
    gemvRows(g, rows);
    e.line("#pragma unroll");
    e.line("      for (int c = 0; c < {}; ++c)", cols);
    e.line("#pragma unroll");
    e.line("      for (int u = 0; u < 8; ++u) {{");
    for (size_t b = 0; b < nb; ++b)
      e.line("        acc{}[c][r] += av[u] * w{}[c][u];", b, b);
    e.line("      }}");
    e.line("    }}");
  };
  // Staged (gemm-decode-stage=1) or decoded where the bytes lie: measured
  // on the H200 (bench/results/gemv-stage-20261203.txt) the copy's wide
  // loads did not pay: the decode forms are bound by the decode's
  // instructions, not by loads in flight.
  const int64_t stage = gemvStage(g, shape);
  if (stage > 0) {
    gemvStaged(g, rows, shape, piece);
  } else {
    gemvDirect(g, shape, piece);
  }
  e.line("  }}");
  gemvReduce(g, rows, shape);
}

void GemmEmitter::gemvStaged(
    const Gemm &g, int64_t rows, GemvForm shape,
    const std::function<void(const std::string &, const std::string &)>
        &piece) {
  (void)rows;
  const size_t nb = g.w.size();
  const int cols = shape.cols;
  // Slice j takes the contiguous pieces [j P, (j + 1) P) of K, in chunks
  // of Q pieces: the warp copies a chunk of each column (16 bytes a lane,
  // all in flight), then decodes it from shared memory.
  const int64_t pieces = (g.k + 255) / 256;
  const int64_t perSlice = (pieces + shape.slices - 1) / shape.slices;
  const int64_t q = std::min(gemvChunk(g, shape), perSlice);
  e.line("  const long kBeg = slice * {}L, kEnd = kBeg + {}L < {}L ? kBeg + "
         "{}L : {}L;",
         perSlice * 256, perSlice * 256, g.k, perSlice * 256, g.k);
  e.line("  for (long kc = kBeg; kc < kEnd; kc += {}L) {{", q * 256);
  e.line("    const long kce = kc + {}L < kEnd ? kc + {}L : kEnd;", q * 256,
         q * 256);
  int64_t at = 0;
  for (size_t b = 0; b < nb; ++b) {
    const Tensor &w = g.w[b];
    for (int c = 0; c < cols; ++c) {
      // Byte b of the row lands at wl + b: the chunk's first byte at its
      // buffer's start plus its address modulo 16.
      e.line("    const uint8_t *src{}_{} = wrow{}_{} + kc / {} * {};", b, c, b,
             c, w.blockSize, w.blockBytes);
      e.line("    uint8_t *dst{}_{} = wstage[wave] + {} + "
             "(int)((uint64_t)src{}_{} & 15);",
             b, c, at, b, c);
      e.line("    wave_copy_bytes(dst{}_{}, src{}_{}, (kce - kc) / {} * {}, "
             "lane);",
             b, c, b, c, w.blockSize, w.blockBytes);
      e.line("    const uint8_t *wl{}_{} = dst{}_{} - kc / {} * {};", b, c, b,
             c, w.blockSize, w.blockBytes);
      at += stageSlot(q, w);
    }
  }
  e.line("    cp_async_commit();");
  e.line("    cp_async_wait_all();");
  e.line("    sync_wave();");
  e.line("#pragma unroll {}", std::min<int64_t>(q, shape.unroll));
  e.line("    for (int it = 0; it < {}; ++it) {{", q);
  e.line("      if (kc + it * 256L + lane * 8L >= kce) break;");
  piece("kc + it * 256L + lane * 8L", "wl");
  e.line("    }}");
  // The chunk's bytes are read before the next chunk's copy overwrites
  // them.
  e.line("    sync_wave();");
  e.line("  }}");
}

void GemmEmitter::gemvDirect(
    const Gemm &g, GemvForm shape,
    const std::function<void(const std::string &, const std::string &)>
        &piece) {
  const int slices = shape.slices;
  // The whole pieces in a loop of a fixed count without a bound check, so
  // that the unrolled pieces' loads are all issued before the first one's
  // FMAs wait; a last partial piece checks its bound.
  const int64_t span = 256 * int64_t(slices);
  const int64_t whole = g.k / span;
  const std::string lanePos = "(slice * 32L + lane) * 8L";
  if (whole > 0) {
    e.line("#pragma unroll {}", std::min<int64_t>(whole, shape.unroll));
    e.line("  for (int it = 0; it < {}; ++it) {{", whole);
    piece(fmt::format("{} + it * {}L", lanePos, span), "wrow");
    e.line("  }}");
  }
  if (g.k % span != 0) {
    e.line("  if ({} + {}L < {}L) {{", lanePos, whole * span, g.k);
    piece(fmt::format("{} + {}L", lanePos, whole * span), "wrow");
    e.line("  }}");
  }
}

void GemmEmitter::gemvReduce(const Gemm &g, int64_t rows, GemvForm shape) {
  const size_t nb = g.w.size();
  const int slices = shape.slices, cols = shape.cols;
  // Sum over the warp; lane c * rows + r then holds (column c, row r).
  e.line("  float mine[{}] = {{}};", nb);
  e.line("#pragma unroll");
  e.line("  for (int c = 0; c < {}; ++c)", cols);
  e.line("#pragma unroll");
  e.line("  for (int r = 0; r < {}; ++r) {{", rows);
  for (size_t b = 0; b < nb; ++b) {
    e.line("    const float s{} = warp_sum(acc{}[c][r]);", b, b);
    e.line("    if (lane == c * {} + r) mine[{}] = s{};", rows, b, b);
  }
  e.line("  }}");
  const std::string at = fmt::format("lane < {}", rows * cols);
  if (slices > 1) {
    // Each slice hands its sums to the group's slice 0, which adds the
    // slices in order (deterministic).
    e.line("  if ({}) {{", at);
    for (size_t b = 0; b < nb; ++b)
      e.line("    red[{}][wave][lane] = mine[{}];", b, b);
    e.line("  }}");
    e.line("  sync_block();");
  }
  e.line("  if (live && slice == 0 && {} && m0 + lane % {} < M && n0 + lane / "
         "{} < {}L) {{",
         at, rows, rows, g.n);
  e.line("    const long m = m0 + lane % {}, n = n0 + lane / {};", rows, rows);
  if (slices > 1) {
    e.line("    float v = 0.0f{};", nb > 1 ? ", v2 = 0.0f" : "");
    e.line("    for (int j = 0; j < {}; ++j) {{", slices);
    e.line("      v += red[0][wave + j][lane];");
    if (nb > 1)
      e.line("      v2 += red[1][wave + j][lane];");
    e.line("    }}");
  } else {
    e.line("    const float v = mine[0]{};", nb > 1 ? ", v2 = mine[1]" : "");
  }
  for (const std::string &l : g.epilogue)
    e.line("    {}", l);
  e.line("  }}");
  if (slices > 1)
    e.line("  sync_block();");
  e.line("  }}");
}

void GemmEmitter::gemvStreamBody(const Gemm &g, const Chain &c, int64_t rows) {
  Tensor xn = e.tensor(c.streamMean->inputs[0]);
  Tensor y = e.tensor(c.streamMean->outputs[0]);
  const int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant;
  const Tensor &w = g.w[0];
  e.line("  const long dc = (long)(bid_x() - base) * {} + wave;", kGemvWarps);
  e.line("  if (dc >= {}L) return;", d);
  e.line("  const long M = {};", g.mRows);
  for (int64_t st = 0; st < ns; ++st)
    e.line("  const {} *wrow{} = {} + ({}L + dc) * {}L;", w.ctype, st, w.ptr,
           st * d, g.k);
  e.line("  for (long m0 = 0; m0 < M; m0 += {}) {{", rows);
  e.line("  float acc[{}][{}] = {{}};", ns, rows);
  const int64_t pieces = (g.k + 255) / 256;
  e.line("#pragma unroll");
  e.line("  for (int it = 0; it < {}; ++it) {{", pieces);
  e.line("    const long k = lane * 8L + it * 256L;");
  e.line("    if (k >= {}L) break;", g.k);
  e.line("    float wv[{}][8];", ns);
  for (int64_t st = 0; st < ns; ++st)
    decodeW(w, fmt::format("wrow{}", st), "k", fmt::format("wv[{}]", st));
  gemvRows(g, rows);
  e.line("#pragma unroll");
  e.line("      for (int s = 0; s < {}; ++s)", ns);
  e.line("#pragma unroll");
  e.line("        for (int u = 0; u < 8; ++u) acc[s][r] += av[u] * wv[s][u];");
  e.line("    }}");
  e.line("  }}");
  e.line("#pragma unroll");
  e.line("  for (int s = 0; s < {}; ++s)", ns);
  e.line("#pragma unroll");
  e.line("    for (int r = 0; r < {}; ++r) acc[s][r] = warp_sum(acc[s][r]);",
         rows);
  // Lane m - m0: each stream's gate (the chain's epilogue at column s D +
  // dc) times the image, averaged over the streams as streamReduce does.
  e.line("  if (lane < {} && m0 + lane < M) {{", rows);
  e.line("    const long m = m0 + lane;");
  e.line("    float a = 0;");
  e.line("#pragma unroll");
  e.line("    for (int s = 0; s < {}; ++s) {{", ns);
  e.line("      float v = acc[s][0];");
  e.line("#pragma unroll");
  e.line("      for (int r = 1; r < {}; ++r) v = lane == r ? acc[s][r] : v;",
         rows);
  e.line("      const long n = s * {}L + dc;", d);
  // The epilogue without its last line (the tiles' store of the gate into
  // Cs).
  for (size_t l = 0; l + 1 < g.epilogue.size(); ++l)
    e.line("      {}", g.epilogue[l]);
  e.line("      a += {} * ld({}, {});", c.gateVar, xn.ptr,
         elementIndex(xn, xn.shape, "row", "i"));
  e.line("    }}");
  e.line("    st({}, m * {}L + dc, a / {}.0f);", y.ptr, d, ns);
  e.line("  }}");
  e.line("  }}");
}

EmittedKernel GemmEmitter::gemvForms(
    int64_t rows,
    const std::function<void(int64_t, const std::string &)> &emit) {
  emit(1, "@SYMBOL@");
  EmittedKernel own = std::move(e.out);
  e.out = EmittedKernel{};
  const int64_t upTo = std::min<int64_t>(rows, e.plan.maxTokens);
  if (upTo > 1) {
    emit(upTo, "@SYMBOL@_rows");
    EmittedKernel many = std::move(e.out);
    many.minTokens = 2;
    many.suffix = "_rows";
    own.alternates.push_back(std::move(many));
  }
  e.out = EmittedKernel{};
  return own;
}

void GemmEmitter::emitGemv(const std::vector<Chain> &chains,
                           const std::vector<Gemm> &gemms, int64_t rows,
                           const std::string &sym, int64_t rowBlock,
                           const format::PlanDim &rowDim) {
  std::vector<GemvForm> shapes;
  int64_t stage = 0;
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    const Gemm &g = gemms[ci];
    shapes.push_back(gemvShape(g, g.n, rows * g.mPer, rowBlock > 0));
    if (!chains[ci].streamMean)
      stage = std::max(stage, gemvStage(g, shapes.back()));
  }
  gemvOpen(false, sym, stage);
  int64_t base = 0;
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    const Gemm &g = gemms[ci];
    const GemvForm shape = shapes[ci];
    // A stream-mean chain's warp takes one hidden column over the whole K.
    const int64_t cols = chains[ci].streamMean
                             ? kGemvWarps
                             : kGemvWarps / shape.slices * shape.cols;
    // A stream-mean chain's columns are the hidden size's (a warp each).
    const int64_t outCols =
        chains[ci].streamMean
            ? e.tensor(chains[ci].streamMean->inputs[0]).shape[2].constant
            : g.n;
    const int64_t blocks = (outCols + cols - 1) / cols;
    e.line("  if (bid_x() >= {} && bid_x() < {}) {{", base, base + blocks);
    e.line("  const long base = {};", base);
    rowBase_ = "0L";
    if (chains[ci].streamMean) {
      gemvStreamBody(g, chains[ci], rows);
    } else if (rowBlock > 0) {
      // Block y's rows [y R, y R + R) of M (uniform in the block).
      e.line("  const long mb = (long)bid_y() * {}L, me = mb + {}L < {} ? mb "
             "+ {}L : {};",
             rowBlock * g.mPer, rowBlock * g.mPer, g.mRows, rowBlock * g.mPer,
             g.mRows);
      gemvBody(g, rows * g.mPer, shape, "mb", "me");
    } else {
      gemvBody(g, rows * g.mPer, shape, "0L", g.mRows);
    }
    e.line("  return;");
    e.line("  }}");
    base += blocks;
  }
  gemvClose();
  e.out.grid = {{0, base, 1},
                rowBlock > 0 ? tilesOf(rowDim, 1, rowBlock)
                             : format::PlanDim{0, 1, 1},
                {0, 1, 1}};
  e.out.block = {kGemvWarps * 32, 1, 1};
  e.out.sharedBytes = 0;
}

void GemmEmitter::emitVariant(const std::vector<Chain> &chains,
                              std::vector<Gemm> &gemms,
                              const std::vector<Tensor> &ys, TmaUse use,
                              const std::string &sym) {
  sym_ = sym;
  for (size_t ci = 0; ci < gemms.size(); ++ci) {
    Gemm &g = gemms[ci];
    const Chain &c = chains[ci];
    pickTma(g, c, ys[ci], use);
    if (c.streamMean) {
      Tensor xn = e.tensor(c.streamMean->inputs[0]);
      int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant,
              bd = g.bn / ns;
      g.colOf = [bd, d](const std::string &c) {
        return fmt::format("({}) / {} * {}L + d0 + ({}) % {}", c, bd, d, c, bd);
      };
      // The gate tile's row stride follows the tile's final width.
      g.epilogue.back() =
          fmt::format("Cs[r * {} + c] = {};", csLd(g.bn), c.gateVar);
    }
  }
  std::vector<bool> merged(gemms.size(), false);
  for (size_t ci = 0; ci < gemms.size(); ++ci)
    for (size_t ri = 0; ri < gemms.size() && !gemms[ci].extra; ++ri)
      if (ri != ci && !merged[ri] &&
          mergeSkinny(gemms[ci], chains[ci], gemms[ri], chains[ri]))
        merged[ri] = true;
  std::vector<size_t> tmaIdx, restIdx;
  for (size_t ci = 0; ci < gemms.size(); ++ci)
    if (!merged[ci])
      (gemms[ci].tma ? tmaIdx : restIdx).push_back(ci);
  if (tmaIdx.empty()) {
    std::string params = e.params();
    ChainLaunch l = emitChains(chains, gemms, restIdx, params, sym_, 0);
    e.out.grid = l.grid;
    e.out.block = l.block;
    e.out.sharedBytes = l.sharedBytes;
    return;
  }
  // TMA tiles copy W as bf16: 16-bit float weights are converted into the
  // workspace first (a pre-launch; wgmma takes one element type for both
  // operands, and the matrix-unit path rounded f16 weights to bf16 anyway,
  // so the numbers are those of the tiles before).
  int64_t ws = 0, conv = 0;
  for (size_t ci : tmaIdx) {
    Gemm &g = gemms[ci];
    if (g.w[0].ctype == "f16" || g.w[0].quant() || g.extra) {
      g.wsOff = ws;
      ws += (g.n * g.k * 2 + 255) / 256 * 256;
      conv += g.n * g.k;
    }
  }
  e.workspace = ws > 0;
  if (ws > 0)
    e.out.workspace = {0, ws, 1};
  for (size_t ci : tmaIdx)
    addTensorMaps(gemms[ci], chains[ci]);
  std::string params = e.params();
  // The other chains (and the conversion) run in the pre-launch: its blocks
  // keep their own occupancy instead of the TMA tile's shared memory.
  if (ws > 0 || !restIdx.empty()) {
    const int64_t convBlocks =
        ws > 0 ? std::min<int64_t>(256, (conv + 2047) / 2048) : 0;
    ChainLaunch l = emitChains(chains, gemms, restIdx, params, sym_ + "_prep",
                               convBlocks, tmaIdx);
    format::PlanPreLaunch pre;
    pre.grid = l.grid;
    pre.block = l.block;
    pre.sharedBytes = l.sharedBytes;
    e.out.pre = std::move(pre);
  }
  emitTmaKernel(chains, gemms, tmaIdx, params);
}

void GemmEmitter::accLoop(const char *outer, const char *body, int64_t groups,
                          int qStep, bool inWarpgroup, bool addC) {
  e.line("#pragma unroll");
  e.line("{}for (int j = 0; j < {}; ++j)", outer, groups);
  e.line("#pragma unroll");
  e.line("{}  for (int q = 0; q < 8; {}) {{", outer,
         qStep == 1 ? "++q" : fmt::format("q += {}", qStep));
  e.line("{}int r, c;", body);
  e.line("{}mma_acc_coord(q, &r, &c);", body);
  e.line("{}r += {}(wave & 3) * 16;", body,
         inWarpgroup ? "" : "(wave >> 2) * 64 + ");
  if (addC)
    e.line("{}c += j * 16;", body);
}

void GemmEmitter::openTmaKernel(int blocks, const std::string &sym,
                                const std::string &params) {
  e.line("STRATA_KERNEL_MIN(288, {}) void {}({}) {{", blocks, sym, params);
  e.prologue();
  e.line("  extern STRATA_SHARED __attribute__((aligned(1024))) uint8_t "
         "strata_ring_raw[];");
  e.line("  uint8_t *const strata_lds = strata_ring_raw + ((1024u - "
         "(smem_addr(strata_ring_raw) & 1023u)) & 1023u);");
}

void GemmEmitter::producerDone(bool persist) {
  e.line("      }}");
  if (persist)
    e.line("      }}");
  e.line("    }}");
  e.line("  }} else {{");
  if (persist)
    e.line("  int it = 0;");
}

void GemmEmitter::openStaging(bool persist, int64_t off, int64_t ld) {
  e.line("  if (wave < 8) {{");
  if (persist) {
    e.line("    sync_named(2 + (wave >> 2), 128);");
    e.line("    uint8_t *const cs = strata_lds + {} + (wave >> 2) * {};", off,
           64 * ld);
  } else {
    e.line("    sync_named(1, 256);");
    e.line("    uint8_t *const cs = strata_lds + (wave >> 2) * {};", 64 * ld);
  }
}

void GemmEmitter::stagedStores(const std::string &ptr, int64_t n, int64_t esz,
                               int64_t ld, int64_t cols) {
  const int64_t chunks = cols * esz / 16;
  e.line("    sync_named(2 + (wave >> 2), 128);");
  e.line("    for (int i = tid_x() & 127; i < {}; i += 128) {{", 64 * chunks);
  e.line("      const int r = i / {}, ch = i % {};", chunks, chunks);
  e.line("      const long m = m0 + (wave >> 2) * 64 + r, n = n0 + ch * {};",
         16 / esz);
  e.line("      if (m < M && n < {}L)", n);
  e.line("        *(strata_u4 *)({} + m * {}L + n) = *(const strata_u4 *)(cs + "
         "r * {} + ch * 16);",
         ptr, n, ld);
  e.line("    }}");
}

void GemmEmitter::streamReduce(const Gemm &g, const Chain &c) {
  Tensor xn = e.tensor(c.streamMean->inputs[0]);
  int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant;
  int64_t bd = g.bn / ns;
  Tensor y = e.tensor(c.streamMean->outputs[0]);
  e.line("  sync_block();");
  e.line("  for (int q = tid_x(); q < {}; q += {}) {{", g.bm * bd, g.nt);
  e.line("    int r = q / {}, c = q % {};", bd, bd);
  e.line("    long m = m0 + r;");
  e.line("    if (m >= M) continue;");
  e.line("    float a = 0;");
  e.line("    const long row = m; (void)row;");
  e.line("#pragma unroll");
  e.line("    for (int s = 0; s < {}; ++s) {{", ns);
  e.line("      const long i = s * {}L + d0 + c; (void)i;", d);
  e.line("      a += Cs[r * {} + s * {} + c] * ld({}, {});", csLd(g.bn), bd,
         xn.ptr, elementIndex(xn, xn.shape, "row", "i"));
  e.line("    }}");
  e.line("    st({}, m * {}L + d0 + c, a / {}.0f);", y.ptr, d, ns);
  e.line("  }}");
}

GemmEmitter::ChainLaunch
GemmEmitter::emitChains(const std::vector<Chain> &chains,
                        std::vector<Gemm> &gemms,
                        const std::vector<size_t> &idx,
                        const std::string &params, const std::string &name,
                        int64_t convBlocks, const std::vector<size_t> &conv) {
  ChainLaunch l;
  // One launch, one block size; each chain keeps its row tile (grid x
  // covers the smallest; blocks past a chain's rows exit at once).
  int nt = idx.empty() ? 256 : 0;
  for (size_t ci : idx)
    nt = std::max(nt, gemms[ci].nt);
  std::vector<const Gemm *> all;
  for (size_t ci : idx) {
    Gemm &g = gemms[ci];
    g.nt = nt;
    // A narrow matrix-unit tile in a kernel of more waves (a 16 x 64 tile
    // beside K2's 256-thread injection logits) widens until its columns
    // split over the waves; columns past N are guarded like any ragged
    // last tile.
    if (g.mma) {
      int wm, wn;
      waveGrid(g.bm, nt, wm, wn);
      while ((g.bn / 16) % wn != 0)
        g.bn += 16;
    }
    all.push_back(&g);
  }
  planBuffers(all, 0);
  e.line("STRATA_KERNEL_MIN({}, {}) void {}({}) {{", nt,
         all.empty() ? 1 : minBlocks(all, nt), name, params);
  e.prologue();
  if (region_ > 0)
    declareRegion();
  int64_t ybase = 0, bmMin = INT64_MAX;
  format::PlanDim mDim{0, 1, 1};
  int64_t mPer = 1;
  for (size_t ci : idx) {
    bmMin = std::min<int64_t>(bmMin, gemms[ci].bm);
    mDim = e.tensor(chains[ci].mm->outputs[0]).shape[0];
    mPer = gemms[ci].mPer;
  }
  format::PlanDim rowTiles =
      idx.empty() ? format::PlanDim{0, 0, 1} : tilesOf(mDim, mPer, bmMin);
  // With conversion blocks the rows are grid x: the blocks past the row
  // tiles (of the first column tile) convert.
  const bool colsFast =
      tileOrder(rowTiles, convBlocks == 0 && idx.size() == 1 &&
                              !chains[idx[0]].streamMean);
  if (convBlocks > 0) {
    // 16-bit weights of the TMA tiles to bf16 in the workspace, 8 elements
    // a thread a round.
    e.line("  {{ const long R = {};", dimExpr(rowTiles));
    e.line("  if (rt >= R) {{");
    e.line("  if (ct != 0) return;");
    e.line("  const long cb = rt - R;");
    for (size_t ci : conv) {
      const Gemm &g = gemms[ci];
      if (g.wsOff < 0)
        continue;
      const int64_t rows = g.extra ? g.nMain : g.n;
      e.line("  for (long i = (cb * {} + tid_x()) * 8; i < {}L; i += {}L) {{",
             nt, rows * g.k, convBlocks * nt * 8);
      e.line("    float v[8];");
      if (g.w[0].quant())
        e.line("    {{ const long n = i / {}L, k = i % {}L; strata_dq8_{}({} + "
               "n * {}L + k / {} * {}, (int)(k % {}), v); }}",
               g.k, g.k, format::ggmlTypeInfo(g.w[0].ggml).irName, g.w[0].ptr,
               g.k / g.w[0].blockSize * g.w[0].blockBytes, g.w[0].blockSize,
               g.w[0].blockBytes, g.w[0].blockSize);
      else
        e.line("    ld8({}, i, v);", g.w[0].ptr);
      e.line("    *(strata_u4 *)(ws + {}L + i * 2) = pack8_mma(v);", g.wsOff);
      e.line("  }}");
      if (g.extra) {
        // Rows nMain.. : zeros up to extraBase, then the merged chain's
        // weights as bf16 terms (zeros where no output lands).
        e.line("  for (long i = (cb * {} + tid_x()) * 8; i < {}L; i += {}L) "
               "{{",
               nt, (g.n - g.nMain) * g.k, convBlocks * nt * 8);
        e.line("    const int rr = (int)(i / {}L) - {}; const long k = i % "
               "{}L;",
               g.k, g.extraBase - g.nMain, g.k);
        e.line("    const int s = (rr & 7) >> 1, term = rr >= 8 ? ((rr & 1) ? "
               "-1 : 2) : (rr & 1);");
        e.line("    float v[8] = {{}};");
        e.line("    if (rr >= 0 && term >= 0 && s < {}) {{ ld8({} + s * {}L, "
               "k, v); strata_split_bf16(v, term); }}",
               g.extra->n, g.extra->w[0].ptr, g.k);
        e.line("    *(strata_u4 *)(ws + {}L + ({}L * {}L + i) * 2) = "
               "pack8_mma(v);",
               g.wsOff, g.nMain, g.k);
        e.line("  }}");
      }
    }
    e.line("  return;");
    e.line("  }} }}");
    rowTiles.constant += convBlocks;
  }
  for (size_t ci : idx) {
    Gemm &g = gemms[ci];
    const Chain &c = chains[ci];
    int64_t ntiles = c.streamMean ? g.n / g.bn : (g.n + g.bn - 1) / g.bn;
    e.line("  if (ct >= {} && ct < {}) {{", ybase, ybase + ntiles);
    e.line("  const long M = {};", g.mRows);
    e.line("  const long m0 = (long)rt * {};", g.bm);
    e.line("  if (m0 >= M) return;");
    if (c.streamMean)
      e.line("  const long d0 = (long)(ct - {}) * {};", ybase,
             g.bn / e.tensor(c.streamMean->inputs[0]).shape[1].constant);
    else
      e.line("  const long n0 = (long)(ct - {}) * {};", ybase, g.bn);
    std::string aRow = aRowOf(g);
    std::string wRow =
        g.w[0].quant()
            ? fmt::format("const uint8_t *wrow = {} + n * {}L;", g.w[0].ptr,
                          g.k / g.w[0].blockSize * g.w[0].blockBytes)
            : fmt::format("const {} *wrow = {} + n * {}L;", g.w[0].ctype,
                          g.w[0].ptr, g.k);
    tileLoop(g, aRow, {wRow});
    if (c.streamMean)
      streamReduce(g, c);
    e.line("  return;");
    e.line("  }}");
    ybase += ntiles;
  }
  e.line("}}");
  const format::PlanDim colTiles{0, ybase, 1};
  l.grid = {colsFast ? colTiles : rowTiles,
            colsFast ? rowTiles : colTiles,
            {0, 1, 1}};
  l.block = {nt, 1, 1};
  l.sharedBytes = dynamic_ ? static_cast<uint64_t>(region_) : 0;
  e.out.sharedBytes = 0;
  return l;
}

int GemmEmitter::tmaColumns(int64_t n) {
  // The widest tile with the fewest columns past N.
  int64_t best = INT64_MAX;
  int bn = 0;
  for (int cand : {256, 192, 176, 160, 128, 64}) {
    int64_t cover = (n + cand - 1) / cand * cand;
    if (cover < best)
      best = cover, bn = cand;
  }
  return bn;
}

bool GemmEmitter::mergeSkinny(Gemm &g, const Chain &c, Gemm &r,
                              const Chain &rc) {
  if (!g.tma || c.streamMean || !r.skinny || r.n > 4 ||
      r.w[0].ctype != "float" || r.k != g.k ||
      rc.mm->inputs[0].kind != BodyRef::Kind::In ||
      rc.mm->inputs[0].index != c.mm->inputs[0].index ||
      !(r.a.shape == g.a.shape) || r.mRows != g.mRows)
    return false;
  const int64_t base = (g.n + 15) / 16 * 16;
  const int bn = tmaColumns(base + 16);
  const int64_t sb = kTmaARows * 128 + int64_t(bn) * 128;
  const int stages = static_cast<int>(std::min<int64_t>(
      {8, std::max<int64_t>(2, (g.k + 63) / 64), tmaRingBytes(1) / sb}));
  if (stages < 2)
    return false;
  g.bn = bn;
  g.stages = stages;
  g.tmaBlocks = 1;
  g.nMain = g.n;
  g.n = base + 16;
  g.extra = &r;
  g.extraBase = base;
  return true;
}

bool GemmEmitter::pickTma(Gemm &g, const Chain &c, const Tensor &y,
                          TmaUse use) {
  if (use == TmaUse::None || e.target != "sm_90" || !g.mma || g.skinny ||
      g.split != 1 || g.w.size() != 1 || g.a.ctype != "bf16" ||
      g.aIndex != "m" || g.k % 8 != 0 ||
      !(g.w[0].ctype == "bf16" || g.w[0].ctype == "f16" ||
        (use == TmaUse::Quantised && g.w[0].quant())) ||
      option(e.plan, Opt::GemmTma) == 0)
    return false;
  const BodyRef &a = c.mm->inputs[0], &w = c.mm->inputs[1];
  if (a.kind != BodyRef::Kind::In || w.kind != BodyRef::Kind::In ||
      e.kernel.inputs[a.index].isWeight)
    return false;
  // A's rows as one dim of the map: exact where y's rows are not floored.
  const format::PlanDim &yd = y.shape[0];
  if (g.mPer != 1 && yd.div != 1)
    return false;
  // Dequantising W pays off only over many rows: not for GEMMs whose rows
  // stay few at any T (the last position's logits).
  if (g.w[0].quant() &&
      (yd.coef == 0 || yd.at(kTmaMinTokens) * g.mPer < kTmaMinTokens))
    return false;
  int bn = 0, blocks = 1;
  if (c.streamMean) {
    // 128 columns, a box of bd = 128 / ns per stream (each a whole number
    // of 16-column tiles, so a thread holds every stream of its columns and
    // the mean is taken in registers); two blocks an SM, so one block's
    // epilogue (reading the image) overlaps the other's K loop (K is the
    // rank, a few steps).
    Tensor xn = e.tensor(c.streamMean->inputs[0]);
    int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant;
    const BodyRef &x = c.streamMean->inputs[0];
    if (128 % ns != 0 || (128 / ns) % 16 != 0 || d % (128 / ns) != 0 ||
        128 / ns > 64 || x.kind != BodyRef::Kind::In ||
        e.kernel.inputs[x.index].isWeight || xn.ctype != "bf16" ||
        xn.shape.size() != 3 || g.mPer != 1 || !(xn.shape[0] == y.shape[0]) ||
        d % 8 != 0)
      return false;
    bn = 128;
    blocks = 2;
    g.xIn = x.index;
  } else {
    bn = tmaColumns(g.n);
    if (pairOn(e.plan) && bn > 128)
      bn = 128, blocks = 2;
  }
  const int64_t sb = kTmaARows * 128 + int64_t(bn) * 128;
  const int64_t kt = (g.k + 63) / 64;
  // The stream mean's image tile (kTmaARows rows x 128 columns, bf16)
  // sits after the ring.
  const int64_t xBytes = c.streamMean ? kTmaARows * 128 * 2 : 0;
  int stages = static_cast<int>(std::min<int64_t>(
      {8, kt < 2 ? 2 : kt, (tmaRingBytes(blocks) - xBytes) / sb}));
  if (stages < 2)
    return false;
  g.tma = true;
  g.tmaBlocks = blocks;
  g.csTile = false;
  g.bm = kTmaARows;
  g.bn = bn;
  g.nt = 288;
  g.stages = stages;
  g.aIn = a.index;
  g.wIn = w.index;
  g.mDim = {yd.coef * g.mPer, yd.constant * g.mPer, yd.div};
  return true;
}

void GemmEmitter::addTensorMaps(Gemm &g, const Chain &c) {
  format::PlanTensorMap a;
  a.operand = e.kernel.inputs[g.aIn];
  a.dtype = format::PlanDType::BF16;
  a.dims = {{0, g.k, 1}, g.mDim};
  a.strides = {static_cast<uint64_t>(g.k * 2)};
  a.box = {64, static_cast<uint32_t>(kTmaARows)};
  a.swizzle = 128;
  g.mapA = static_cast<int>(e.out.tensorMaps.size());
  e.out.tensorMaps.push_back(a);
  format::PlanTensorMap w = a;
  if (g.wsOff >= 0) {
    w.workspace = true;
    w.operand = {false, 0};
    w.offset = static_cast<uint64_t>(g.wsOff);
  } else {
    w.operand = e.kernel.inputs[g.wIn];
  }
  w.dims = {{0, g.k, 1}, {0, g.n, 1}};
  // The stream mean's tile is the streams' column ranges, a box each.
  uint32_t rows = static_cast<uint32_t>(g.bn);
  if (c.streamMean)
    rows /= static_cast<uint32_t>(
        e.tensor(c.streamMean->inputs[0]).shape[1].constant);
  w.box = {64, rows};
  g.mapW = static_cast<int>(e.out.tensorMaps.size());
  e.out.tensorMaps.push_back(w);
  if (c.streamMean) {
    Tensor xn = e.tensor(c.streamMean->inputs[0]);
    const int64_t ns = xn.shape[1].constant, d = xn.shape[2].constant;
    format::PlanTensorMap x;
    x.operand = e.kernel.inputs[g.xIn];
    x.dtype = format::PlanDType::BF16;
    // Dims (d, rows, streams): the tile lies in shared memory as
    // [stream][row][bd], and the swizzle as wide as a row of bd puts the 8
    // rows a wave's accumulators span in distinct banks.
    x.dims = {{0, d, 1}, g.mDim, {0, ns, 1}};
    x.strides = {static_cast<uint64_t>(ns * d * 2),
                 static_cast<uint64_t>(d * 2)};
    x.box = {static_cast<uint32_t>(g.bn / ns), static_cast<uint32_t>(kTmaARows),
             static_cast<uint32_t>(ns)};
    x.swizzle = static_cast<uint32_t>(g.bn / ns * 2);
    g.mapX = static_cast<int>(e.out.tensorMaps.size());
    e.out.tensorMaps.push_back(x);
  }
}

void GemmEmitter::emitTmaKernel(const std::vector<Chain> &chains,
                                std::vector<Gemm> &gemms,
                                const std::vector<size_t> &idx,
                                const std::string &params) {
  // Warps 0-7 are two consumer warpgroups (rows 0-63 and 64-127 of the
  // tile), warp 8 the producer (one lane issues every copy).
  int64_t ring = 0;
  int maxStages = 0, blocks = 2;
  // A persistent kernel keeps the staged results and the stream mean's
  // image tile out of the ring (the producer refills it during the
  // epilogue): fewer stages where they do not fit beside it.
  bool persist = persistFor(e.plan, e.kernel.label()) && idx.size() == 1;
  std::vector<bool> staged(gemms.size(), false);
  int64_t stageOff = 0, xOff = 0;
  for (size_t ci : idx) {
    Gemm &g = gemms[ci];
    const Chain &c = chains[ci];
    const int64_t sb = kTmaARows * 128 + int64_t(g.bn) * 128;
    const int64_t xBytes = g.mapX >= 0 ? int64_t(kTmaARows) * 256 : 0;
    // A chain whose one store is its result in rows of N (row m, column n
    // at m * N + n) stores through shared memory, as the grouped GEMMs do
    // (GemmEmitter::stagedStores).
    const Tensor &o = c.out;
    const int64_t esz = o.ctype == "float" ? 4 : 2;
    const int64_t csBytes = 128 * (g.bn * esz + 16);
    const bool stageable =
        stagedOn(e.plan) && !c.streamMean && !g.extra && c.stores == 1 &&
        g.mPer == 1 && !o.isTemp && o.ctype != "int32_t" &&
        constProduct(o.shape, 1) == g.n && (g.n * esz) % 16 == 0 &&
        g.epilogue.back().rfind("st(", 0) == 0;
    // Persistent: two stages at least beside the staged results, else the
    // results stored from the accumulators, else not persistent.
    auto fit = [&](bool st) {
      return (tmaRingBytes(g.tmaBlocks) - xBytes - (st ? csBytes : 0)) / sb;
    };
    staged[ci] =
        stageable && (persist ? fit(true) >= 2 : csBytes <= g.stages * sb);
    if (persist && fit(staged[ci]) < 2) {
      persist = false;
      staged[ci] = stageable && csBytes <= g.stages * sb;
    }
    if (persist) {
      g.stages = static_cast<int>(std::min<int64_t>(g.stages, fit(staged[ci])));
      stageOff = g.stages * sb;
      xOff = stageOff + (staged[ci] ? csBytes : 0);
      ring = xOff + xBytes;
    } else {
      ring = std::max(ring, g.stages * sb + xBytes);
    }
    maxStages = std::max(maxStages, g.stages);
    blocks = std::min(blocks, g.tmaBlocks);
  }
  openTmaKernel(blocks, sym_, params);
  // full[s], empty[s], then xfull (the stream mean's image tile; and,
  // persistent, xempty).
  e.line("  uint64_t *const full = (uint64_t *)(strata_lds + {}), *const "
         "empty = full + {}, *const xfull = full + {};",
         ring, maxStages, 2 * maxStages);
  int64_t ybase = 0;
  format::PlanDim mDim = gemms[idx[0]].mDim;
  const format::PlanDim rowTiles = tilesOf(mDim, 1, kTmaARows);
  const bool colsFast =
      !persist &&
      tileOrder(rowTiles, idx.size() == 1 && !chains[idx[0]].streamMean);
  for (size_t ci : idx) {
    Gemm &g = gemms[ci];
    const Chain &c = chains[ci];
    const int64_t sb = kTmaARows * 128 + int64_t(g.bn) * 128;
    int64_t ntiles = c.streamMean ? g.n / g.bn : (g.n + g.bn - 1) / g.bn;
    int64_t ns = 0, d = 0, bd = 0;
    if (c.streamMean) {
      Tensor xn = e.tensor(c.streamMean->inputs[0]);
      ns = xn.shape[1].constant, d = xn.shape[2].constant, bd = g.bn / ns;
    }
    // The tile's origin: rows m0.., columns n0.. (the stream mean: d0..
    // of each stream).
    const std::string col0 = c.streamMean ? "d0" : "n0";
    const int64_t colStep = c.streamMean ? bd : g.bn;
    if (persist) {
      // Tile i is row tile i / ntiles, column tile i % ntiles: consecutive
      // blocks share a row tile of A, as colsFast orders them.
      e.line("  {{");
      e.line("  const long M = {};", g.mRows);
      e.line("  const long tiles = (M + {}) / {} * {};", kTmaARows - 1,
             kTmaARows, ntiles);
    } else {
      e.line("  if (ct >= {} && ct < {}) {{", ybase, ybase + ntiles);
      e.line("  const long M = {};", g.mRows);
      e.line("  const long m0 = (long)rt * {};", g.bm);
      e.line("  if (m0 >= M) return;");
      e.line("  const long {} = (long)(ct - {}) * {};", col0, ybase, colStep);
    }
    const std::string tileLoop =
        "for (long tile = bid_x(), tn = 0; tile < tiles; tile += grid_x(), "
        "++tn)";
    const std::string origin =
        fmt::format("const long m0 = tile / {} * {}, {} = tile % {} * {};",
                    ntiles, kTmaARows, col0, ntiles, colStep);
    e.line("  if (tid_x() == 0) {{");
    e.line("    for (int s = 0; s < {}; ++s) {{ mbar_init(&full[s], 1); "
           "mbar_init(&empty[s], 2); }}",
           g.stages);
    if (g.mapX >= 0)
      e.line("    mbar_init(xfull, 1);");
    if (g.mapX >= 0 && persist)
      e.line("    mbar_init(xfull + 1, 2);");
    e.line("    mbar_init_fence();");
    e.line("  }}");
    e.line("  sync_block();");
    // The wave index from lane 0 (a shuffle), so ptxas knows the role
    // branches are warp-uniform: from tid_x() it took the consumers for a
    // divergent path and serialised their wgmma in some shapes (C7520).
    e.line("  const int wave = shfl_i(tid_x() >> 5, 0), kt = {};",
           (g.k + 63) / 64);
    if (!persist)
      e.line("  float acc0[1][{}][8] = {{}};", g.bn / 16);
    e.line("  if (wave == 8) {{");
    e.line("    if (lane_id() == 0) {{");
    e.line("      uint64_t ma, mw;");
    e.line("      STRATA_PARAM_ADDR(ma, \"{}\");",
           e.tensorMapParam(g.mapA, sym_));
    e.line("      STRATA_PARAM_ADDR(mw, \"{}\");",
           e.tensorMapParam(g.mapW, sym_));
    if (persist) {
      e.line("      int it = 0;");
      e.line("      {} {{", tileLoop);
      e.line("      {}", origin);
      e.line("      for (int k = 0; k < kt; ++k, ++it) {{");
      e.line("        const int s = it % {};", g.stages);
      e.line("        mbar_wait(&empty[s], ((it / {}) & 1) ^ 1);", g.stages);
    } else {
      e.line("      for (int k = 0; k < kt; ++k) {{");
      e.line("        const int s = k % {};", g.stages);
      e.line("        mbar_wait(&empty[s], ((k / {}) & 1) ^ 1);", g.stages);
    }
    e.line("        uint8_t *st = strata_lds + s * {};", sb);
    e.line("        mbar_expect_tx(&full[s], {});", sb);
    e.line("        tma_load_2d(st, ma, k * 64, (int)m0, &full[s]);");
    if (c.streamMean)
      for (int64_t s = 0; s < ns; ++s)
        e.line("        tma_load_2d(st + {}, mw, k * 64, (int)({}L + d0), "
               "&full[s]);",
               kTmaARows * 128 + s * bd * 128, s * d);
    else
      e.line("        tma_load_2d(st + {}, mw, k * 64, (int)n0, &full[s]);",
             kTmaARows * 128);
    if (g.mapX >= 0 && persist) {
      // The image tile once the ring's free stages are issued: the next
      // stage waits for the previous tile's epilogue anyway, which is
      // when its mean has read the image tile.
      e.line("        if (k == {}) {{",
             std::min<int64_t>(g.stages, (g.k + 63) / 64) - 1);
      e.line("          uint64_t mx;");
      e.line("          STRATA_PARAM_ADDR(mx, \"{}\");",
             e.tensorMapParam(g.mapX, sym_));
      e.line("          mbar_wait(xfull + 1, (int)(tn & 1) ^ 1);");
      e.line("          mbar_expect_tx(xfull, {});", kTmaARows * 256);
      e.line("          tma_load_3d(strata_lds + {}, mx, (int)d0, (int)m0, 0, "
             "xfull);",
             xOff);
      e.line("        }}");
    }
    if (g.mapX >= 0 && !persist) {
      // The image tile behind the first step's operands: needed only by
      // the epilogue.
      e.line("        if (k == 0) {{");
      e.line("          uint64_t mx;");
      e.line("          STRATA_PARAM_ADDR(mx, \"{}\");",
             e.tensorMapParam(g.mapX, sym_));
      e.line("          mbar_expect_tx(xfull, {});", kTmaARows * 256);
      e.line("          tma_load_3d(strata_lds + {}, mx, (int)d0, (int)m0, 0, "
             "xfull);",
             g.stages * sb);
      e.line("        }}");
    }
    producerDone(persist);
    if (persist) {
      e.line("  {} {{", tileLoop);
      e.line("  {}", origin);
      e.line("  float acc0[1][{}][8] = {{}};", g.bn / 16);
      e.line("    tma_gemm_consume<{}, {}, {}>(&acc0[0][0][0], strata_lds, "
             "full, empty, kt, wave >> 2, it, true);",
             g.bn, g.stages, sb);
      e.line("  it += kt;");
    } else {
      e.line("    tma_gemm_consume<{}, {}, {}>(&acc0[0][0][0], strata_lds, "
             "full, empty, kt, wave >> 2);",
             g.bn, g.stages, sb);
      e.line("  }}");
    }
    const Tensor &o = c.out;
    const int64_t esz = o.ctype == "float" ? 4 : 2;
    const int64_t ld = g.bn * esz + 16;
    if (staged[ci]) {
      openStaging(persist, stageOff, ld);
      accLoop("    ", "        ", g.bn / 16, 1, true);
      e.line("        const long m = m0 + (wave >> 2) * 64 + r, n = {};",
             g.colOf("c"));
      e.line("        float v = acc0[0][j][q];");
      e.line("        if (m < M && n < {}L) {{", g.n);
      for (size_t li = 0; li + 1 < g.epilogue.size(); ++li)
        e.line("          {}", g.epilogue[li]);
      e.line("          st(({} *)(cs + r * {}), c, {});", o.ctype, ld,
             c.outVar);
      e.line("        }}");
      e.line("      }}");
      stagedStores(o.ptr, g.n, esz, ld, g.bn);
      e.line("  }}");
    } else {
      accLoop("  ", "        ", g.bn / 16, 1, false);
      // The producer warp holds no accumulators: its rows read as past M.
      e.line("        long m = wave < 8 ? m0 + r : M, n = {};", g.colOf("c"));
      e.line("        float v = acc0[0][j][q];");
      e.line("        if (m < M && n < {}L) {{", g.extra ? g.nMain : g.n);
      for (size_t li = 0; li < g.epilogue.size(); ++li)
        // The stream mean keeps each gate in its accumulator.
        e.line("          {}",
               c.streamMean && li + 1 == g.epilogue.size()
                   ? fmt::format("acc0[0][j][q] = {};", c.gateVar)
                   : g.epilogue[li]);
      e.line("        }}");
      e.line("      }}");
      if (g.extra) {
        // The merged chain's outputs: lane t of each quad in the column tile
        // holding extraBase sums the three terms of output t.
        const int64_t tile = g.extraBase / g.bn, j0 = g.extraBase % g.bn / 16;
        e.line("  if (n0 == {}L && wave < 8 && (lane_id() & 3) < {}) {{",
               tile * g.bn, g.extra->n);
        e.line("#pragma unroll");
        e.line("    for (int h = 0; h < 2; ++h) {{");
        e.line("      const long m = m0 + (wave >> 2) * 64 + (wave & 3) * 16 + "
               "(lane_id() >> 2) + 8 * h, n = lane_id() & 3;");
        e.line(
            "      const float v = acc0[0][{}][2 * h] + acc0[0][{}][2 * h + 1] "
            "+ acc0[0][{}][4 + 2 * h];",
            j0, j0, j0);
        e.line("      if (m < M) {{");
        for (const std::string &l : g.extra->epilogue)
          e.line("        {}", l);
        e.line("      }}");
        e.line("    }}");
        e.line("  }}");
      }
      if (c.streamMean) {
        // Stream s of tile column c is column s * bd + c: accumulator (j + s
        // bd / 16, q) of the same thread.
        Tensor y = e.tensor(c.streamMean->outputs[0]);
        e.line("  mbar_wait(xfull, {});", persist ? "(int)(tn & 1)" : "0");
        e.line("  const uint8_t *const Xs = strata_lds + {};",
               persist ? xOff : g.stages * sb);
        // Two adjacent columns (accumulators q, q + 1) a step: one 4-byte
        // read of the image tile, one 4-byte store of the mean.
        accLoop("  ", "        ", bd / 16, 2, false);
        e.line("        const long m = wave < 8 ? m0 + r : M;");
        e.line("        if (m < M) {{");
        e.line("          float a0 = 0, a1 = 0;");
        e.line("#pragma unroll");
        e.line("          for (int s = 0; s < {}; ++s) {{", ns);
        // Image element (s, r, c) of the tile, swizzled by the copy over
        // rows of bd (2 bd bytes: 32, 64 or 128): the 16-byte chunk bits of
        // the offset (from bit 4) XOR the bits from bit 7; c is even, so c
        // and c + 1 share a 4-byte word.
        e.line("            const uint32_t o = ((s * {} + r) * {} + c) * 2;",
               kTmaARows, bd);
        e.line("            const uint32_t x = *(const uint32_t *)(Xs + (o ^ "
               "((o >> 7) & {}) << 4));",
               bd * 2 / 16 - 1);
        e.line("            a0 += acc0[0][j + s * {}][q] * __builtin_bit_cast("
               "float, x << 16);",
               bd / 16);
        e.line(
            "            a1 += acc0[0][j + s * {}][q + 1] * __builtin_bit_cast("
            "float, x & 0xffff0000u);",
            bd / 16);
        e.line("          }}");
        e.line("          st2({}, m * {}L + d0 + c, a0 / {}.0f, a1 / {}.0f);",
               y.ptr, d, ns, ns);
        e.line("        }}");
        e.line("      }}");
        if (persist) {
          // The image tile is free once every thread of both warpgroups
          // read it (one arrival each).
          e.line("  sync_named(2 + (wave >> 2), 128);");
          e.line("  if ((tid_x() & 127) == 0) mbar_arrive(xfull + 1);");
        }
      }
    }
    if (persist)
      e.line("  }}");
    e.line("  return;");
    e.line("  }}");
    if (persist)
      e.line("  }}");
    ybase += ntiles;
  }
  e.line("}}");
  const format::PlanDim colTiles{0, ybase, 1};
  if (persist) {
    // A block per SM (two where the tile fits twice), each looping over
    // the tiles.
    const ir::Target *t = ir::lookupTarget(e.target);
    e.out.grid = {{0, int64_t(t->units) * blocks, 1}, {0, 1, 1}, {0, 1, 1}};
  } else {
    e.out.grid = {colsFast ? colTiles : rowTiles,
                  colsFast ? rowTiles : colTiles,
                  {0, 1, 1}};
  }
  e.out.block = {288, 1, 1};
  e.out.sharedBytes = static_cast<uint64_t>(
      1024 + ring + (2 * int64_t(maxStages) + (persist ? 2 : 1)) * 8);
}

void GemmEmitter::emitGroupedGemv(const Gemm &g, const Tensor &off,
                                  int64_t experts, int64_t slotsPerToken,
                                  int64_t rows, const std::string &sym) {
  // The shape over every routed slot's columns.
  const GemvForm shape = gemvShape(g, slotsPerToken * g.n, rows);
  const int64_t cols = kGemvWarps / shape.slices * shape.cols;
  const int64_t colBlocks = (g.n + cols - 1) / cols;
  gemvOpen(std::any_of(g.w.begin(), g.w.end(),
                       [](const Tensor &w) {
                         return w.ggml == format::GgmlType::IQ3_S;
                       }),
           sym, gemvStage(g, shape));
  e.line("  const long s = bid_x() / {}L;", colBlocks);
  e.line("  const long base = s * {}L;", colBlocks);
  e.line("  if (s >= T * {}L) return;", slotsPerToken);
  // The slot's expert: the one whose slots [off[x], off[x + 1]) hold s,
  // looked for by all the block's threads at once (one round of loads; a
  // binary search waited on nine in a row).
  e.line("  STRATA_SHARED int found;");
  e.line("  if (tid_x() == 0) found = 0;");
  e.line("  sync_block();");
  e.line("  for (int x = tid_x(); x < {}; x += {})", experts, kGemvWarps * 32);
  e.line("    if ({}[x] <= s && s < {}[x + 1]) found = x;", off.ptr, off.ptr);
  e.line("  sync_block();");
  e.line("  const int ex = found;");
  // The expert's first slot takes all its slots (distinct tokens: at most
  // T, one pass for a decode run): its weights are read once.
  e.line("  if ({}[ex] != s) return;", off.ptr);
  rowBase_ = fmt::format("(long)ex * {}L", g.n);
  gemvBody(g, rows, shape, "s", fmt::format("{}[ex + 1]", off.ptr));
  gemvClose();
  // (slot, column group) pairs of T * slotsPerToken slots: grid x, which
  // holds them at any T.
  e.out.grid = {{slotsPerToken * colBlocks, 0, 1}, {0, 1, 1}, {0, 1, 1}};
  e.out.block = {kGemvWarps * 32, 1, 1};
  e.out.sharedBytes = 0;
}

void GemmEmitter::runGrouped() {
  if (e.body.size() != 1)
    throw Unsupported("a grouped GEMM with a fused body");
  const BodyOp &op = e.body[0];
  bool swiglu = op.recipe == Recipe::MoeGroupedSwiglu;
  Gemm g;
  Tensor y = e.tensor(op.outputs[0]);
  Tensor off = e.tensor(op.inputs[swiglu ? 2 : 1]);
  g.a = e.tensor(op.inputs[0]);
  Tensor perm;
  if (swiglu) {
    perm = e.tensor(op.inputs[1]);
    g.w = {e.tensor(op.inputs[3]), e.tensor(op.inputs[4])};
  } else {
    g.w = {e.tensor(op.inputs[2])};
  }
  int64_t experts = g.w[0].shape[0].constant;
  g.n = g.w[0].shape[1].constant;
  g.k = g.w[0].shape[2].constant;
  pickTile(g, e.kernel.variant);
  g.colOf = [](const std::string &c) { return "n0 + " + c; };
  int64_t slotsPerToken = y.shape[0].coef;
  if (y.shape[0].div != 1 || y.shape[0].constant != 0 ||
      (swiglu && g.a.shape[0].coef != 1))
    throw Unsupported("grouped rows are not T * k");
  g.epilogue.push_back(fmt::format("st({}, m * {}L + n, {});", y.ptr, g.n,
                                   swiglu ? "sm_silu(v) * v2" : "v"));
  if (swiglu)
    g.aIndex = fmt::format("{}[m] / {}", perm.ptr, slotsPerToken);
  // Plans with state decode: runs of a few rows take the decode form (the
  // kernel's own code), the tiles are an alternate from the row after it.
  const int64_t decodeRows = option(e.plan, Opt::GemmDecodeRows);
  const bool gemv = !e.plan.states.empty() && decodeRows > 0 && g.k % 8 == 0 &&
                    (!g.w[0].quant() || g.w[0].blockSize % 8 == 0);
  EmittedKernel gemvOwn;
  std::string sym = "@SYMBOL@";
  if (gemv) {
    e.out = gemvForms(decodeRows, [&](int64_t rows, const std::string &sym) {
      emitGroupedGemv(g, off, experts, slotsPerToken, rows, sym);
    });
    if (e.plan.maxTokens <= decodeRows)
      return;
    gemvOwn = std::move(e.out);
    e.out = EmittedKernel{};
    sym = "@SYMBOL@_tile";
  }
  std::string params = e.params();
  const int nt = g.nt;
  planBuffers({&g}, int64_t(nt) * 4 + 8); // + the tile scan
  e.line("STRATA_KERNEL_MIN({}, {}) void {}({}) {{", nt, minBlocks({&g}, nt),
         sym, params);
  e.prologue();
  declareRegion();
  format::PlanDim tiles = tilesOf(y.shape[0], 1, g.bm);
  tiles.constant += experts;
  const bool colsFast = tileOrder(tiles, true);
  // Which expert and which of its row tiles this block takes: a block scan
  // of the experts' tile counts.
  constexpr int kPer = 8;
  if (experts > int64_t(nt) * kPer)
    throw Unsupported("more experts than the tile scan covers");
  e.line("  STRATA_SHARED int scan[{}];", nt);
  e.line("  STRATA_SHARED int pick[2];");
  e.line("  const int per = {};", (experts + nt - 1) / nt);
  e.line("  int mine = 0;");
  e.line("  for (int x = tid_x() * per; x < (tid_x() + 1) * per && x < {}; "
         "++x)",
         experts);
  e.line("    mine += ({}[x + 1] - {}[x] + {}) / {};", off.ptr, off.ptr,
         g.bm - 1, g.bm);
  e.line("  scan[tid_x()] = mine;");
  e.line("  if (tid_x() == 0) pick[0] = -1;");
  e.line("  sync_block();");
  e.line("  for (int s = 1; s < {}; s <<= 1) {{", nt);
  e.line("    int add = tid_x() >= s ? scan[tid_x() - s] : 0;");
  e.line("    sync_block();");
  e.line("    scan[tid_x()] += add;");
  e.line("    sync_block();");
  e.line("  }}");
  e.line("  {{");
  e.line("    int before = scan[tid_x()] - mine, tile = rt;");
  e.line("    if (tile >= before && tile < before + mine) {{");
  e.line("      for (int x = tid_x() * per; x < {}; ++x) {{", experts);
  e.line("        int t = ({}[x + 1] - {}[x] + {}) / {};", off.ptr, off.ptr,
         g.bm - 1, g.bm);
  e.line("        if (tile < before + t) {{ pick[0] = x; pick[1] = tile - "
         "before; break; }}");
  e.line("        before += t;");
  e.line("      }}");
  e.line("    }}");
  e.line("  }}");
  e.line("  sync_block();");
  e.line("  if (pick[0] < 0) return;");
  e.line("  const int ex = pick[0];");
  e.line("  const long M = {}[ex + 1];", off.ptr);
  e.line("  const long m0 = {}[ex] + (long)pick[1] * {};", off.ptr, g.bm);
  e.line("  const long n0 = (long)ct * {};", g.bn);
  std::string aRow = aRowOf(g);
  std::vector<std::string> wRows;
  for (const Tensor &w : g.w) {
    int64_t rowBytes = w.quant() ? g.k / w.blockSize * w.blockBytes : g.k;
    wRows.push_back(
        fmt::format("const {} *wrow = {} + ((long)ex * {}L + n) * {}L;",
                    w.quant() ? "uint8_t" : w.ctype, w.ptr, g.n, rowBytes));
  }
  tileLoop(g, aRow, wRows);
  e.line("}}");
  // Row tiles (above): every expert's rows rounded up to the tile, at
  // most ceil(S / BM) + E.
  const format::PlanDim colTiles{0, (g.n + g.bn - 1) / g.bn, 1};
  e.out.grid = {
      colsFast ? colTiles : tiles, colsFast ? tiles : colTiles, {0, 1, 1}};
  e.out.block = {nt, 1, 1};
  if (gemv) {
    EmittedKernel tile = std::move(e.out);
    tile.minTokens = decodeRows + 1;
    tile.suffix = "_tile";
    e.out = std::move(gemvOwn);
    e.out.alternates.push_back(std::move(tile));
  }
  // The alternate's pre-launch dequantises every expert's weights whatever
  // T is: it pays off from kGroupedTmaRows rows per expert.
  const int64_t minTokens = std::max<int64_t>(
      kTmaMinTokens,
      (experts * kGroupedTmaRows + slotsPerToken - 1) / slotsPerToken);
  if (e.plan.maxTokens < minTokens)
    return;
  EmittedKernel own = std::move(e.out);
  const bool ownWs = e.workspace;
  e.out = EmittedKernel{};
  e.workspace = false;
  const bool big = groupedTma(g, swiglu, y, off, perm, slotsPerToken, experts);
  EmittedKernel alt = std::move(e.out);
  e.out = std::move(own);
  e.workspace = ownWs;
  if (big) {
    alt.minTokens = minTokens;
    alt.suffix = "_big";
    e.out.alternates.push_back(std::move(alt));
  }
}

bool GemmEmitter::groupedTma(Gemm g, bool swiglu, const Tensor &y,
                             const Tensor &off, const Tensor &perm,
                             int64_t slotsPerToken, int64_t experts) {
  const Tensor &w0 = g.w[0];
  if (e.target != "sm_90" || !g.mma || g.a.ctype != "bf16" || g.k % 8 != 0 ||
      !(w0.ctype == "bf16" || w0.ctype == "f16" || w0.quant()) ||
      option(e.plan, Opt::GemmTma) == 0 ||
      option(e.plan, Opt::GemmTmaGrouped) == 0 ||
      (w0.quant() && option(e.plan, Opt::GemmTmaQuant) == 0))
    return false;
  for (const Tensor &w : g.w)
    if (w.ctype != w0.ctype || w.ggml != w0.ggml)
      return false;
  // The tile's columns: gate and up side by side (bh of each, the pair's
  // rows interleaved so in the workspace), or the widest that covers N.
  int64_t bh = 0, bn = 0, nw = 0, colTiles = 0;
  const int blocks = pairOn(e.plan) ? 2 : 1;
  if (swiglu) {
    bh = blocks == 1 && (g.n % 128 == 0 || g.n > 256) ? 128 : 64;
    bn = 2 * bh;
    colTiles = (g.n + bh - 1) / bh;
    nw = colTiles * bn;
  } else {
    bn = blocks == 1 ? tmaColumns(g.n) : std::min(128, tmaColumns(g.n));
    colTiles = (g.n + bn - 1) / bn;
    nw = g.n;
  }
  const int64_t sb = kTmaARows * 128 + bn * 128, kt = (g.k + 63) / 64;
  const int stages = static_cast<int>(
      std::min<int64_t>({8, kt < 2 ? 2 : kt, tmaRingBytes(blocks) / sb}));
  if (stages < 2 || experts * nw > INT32_MAX)
    return false;
  // The workspace: W as bf16 [E * nw, K], the row-tile table (expert, its
  // tile) at the longest prompt, then (swiglu) A's rows gathered in slot
  // order, [S, K].
  format::PlanDim rowTiles = tilesOf(y.shape[0], 1, kTmaARows);
  rowTiles.constant += experts;
  const int64_t wBytes = (experts * nw * g.k * 2 + 255) / 256 * 256;
  const int64_t tableOff = wBytes;
  const int64_t aOff =
      tableOff + (rowTiles.at(e.plan.maxTokens) * 8 + 255) / 256 * 256;
  e.workspace = true;
  e.out.workspace = {swiglu ? y.shape[0].coef * g.k * 2 : 0,
                     aOff + (swiglu ? y.shape[0].constant * g.k * 2 : 0), 1};
  format::PlanTensorMap a;
  a.dtype = format::PlanDType::BF16;
  a.dims = {{0, g.k, 1}, y.shape[0]};
  a.strides = {static_cast<uint64_t>(g.k * 2)};
  a.box = {64, static_cast<uint32_t>(kTmaARows)};
  a.swizzle = 128;
  if (swiglu) {
    a.workspace = true;
    a.operand = {false, 0};
    a.offset = static_cast<uint64_t>(aOff);
  } else {
    a.operand = e.kernel.inputs[0];
  }
  format::PlanTensorMap w = a;
  w.workspace = true;
  w.operand = {false, 0};
  w.offset = 0;
  w.dims = {{0, g.k, 1}, {0, experts * nw, 1}};
  w.box = {64, static_cast<uint32_t>(bn)};
  e.out.tensorMaps = {a, w};
  std::string params = e.params();
  const std::string sym = "@SYMBOL@_big";

  // The pre-launch: block 0 writes the row-tile table (a scan of the
  // experts' tile counts, as the kernel's own code does in every block),
  // all blocks dequantise W into the workspace and (swiglu) gather A.
  constexpr int kPrepThreads = 256;
  constexpr int64_t kPrepBlocks = 1056; // 8 blocks of 256 on each of 132 SMs
  const std::string rows = dimExpr(rowTiles);
  e.line("STRATA_KERNEL_MIN({}, 1) void {}_prep({}) {{", kPrepThreads, sym,
         params);
  e.prologue();
  e.line("  const long stride = (long)grid_x() * {} * 8;", kPrepThreads);
  e.line("  if (bid_x() == 0) {{");
  e.line("    STRATA_SHARED int scan[{}];", kPrepThreads);
  e.line("    const int per = {};",
         (experts + kPrepThreads - 1) / kPrepThreads);
  e.line("    int mine = 0;");
  e.line("    for (int x = tid_x() * per; x < (tid_x() + 1) * per && x < {}; "
         "++x)",
         experts);
  e.line("      mine += ({}[x + 1] - {}[x] + {}) / {};", off.ptr, off.ptr,
         kTmaARows - 1, kTmaARows);
  e.line("    scan[tid_x()] = mine;");
  e.line("    sync_block();");
  e.line("    for (int s = 1; s < {}; s <<= 1) {{", kPrepThreads);
  e.line("      int add = tid_x() >= s ? scan[tid_x() - s] : 0;");
  e.line("      sync_block();");
  e.line("      scan[tid_x()] += add;");
  e.line("      sync_block();");
  e.line("    }}");
  e.line("    int *const table = (int *)(ws + {}L);", tableOff);
  e.line("    int at = scan[tid_x()] - mine;");
  e.line("    for (int x = tid_x() * per; x < (tid_x() + 1) * per && x < {}; "
         "++x)",
         experts);
  e.line("      for (int t = 0; t < ({}[x + 1] - {}[x] + {}) / {}; ++t, ++at) "
         "{{ table[2 * at] = x; table[2 * at + 1] = t; }}",
         off.ptr, off.ptr, kTmaARows - 1, kTmaARows);
  e.line("    for (long t = scan[{}] + tid_x(); t < {}; t += {}) table[2 * t] "
         "= -1;",
         kPrepThreads - 1, rows, kPrepThreads);
  e.line("  }}");
  const int64_t rowBytes =
      w0.quant() ? g.k / w0.blockSize * w0.blockBytes : g.k * 2;
  e.line("  for (long i = ((long)bid_x() * {} + tid_x()) * 8; i < {}L; i += "
         "stride) {{",
         kPrepThreads, experts * nw * g.k);
  e.line("    const long r = i / {}L, k = i % {}L, ex = r / {}L;", g.k, g.k,
         nw);
  if (swiglu) {
    e.line("    const long h = r % {}L, n = h / {} * {} + h % {};", nw, bn, bh,
           bh);
    e.line("    const uint8_t *const src = (const uint8_t *)(h % {} < {} ? {} "
           ": {});",
           bn, bh, g.w[0].ptr, g.w[1].ptr);
  } else {
    e.line("    const long n = r % {}L;", nw);
    e.line("    const uint8_t *const src = (const uint8_t *){};", w0.ptr);
  }
  e.line("    float v[8] = {{}};");
  e.line("    if (n < {}L) {{", g.n);
  e.line("      const uint8_t *const row = src + (ex * {}L + n) * {}L;", g.n,
         rowBytes);
  if (w0.quant())
    e.line("      strata_dq8_{}(row + k / {} * {}, (int)(k % {}), v);",
           format::ggmlTypeInfo(w0.ggml).irName, w0.blockSize, w0.blockBytes,
           w0.blockSize);
  else
    e.line("      ld8((const {} *)row, k, v);", w0.ctype);
  e.line("    }}");
  e.line("    *(strata_u4 *)(ws + i * 2) = pack8_mma(v);");
  e.line("  }}");
  if (swiglu) {
    e.line("  for (long i = ((long)bid_x() * {} + tid_x()) * 8; i < {} * {}L; "
           "i += stride) {{",
           kPrepThreads, dimExpr(y.shape[0]), g.k);
    e.line("    const long m = i / {}L, k = i % {}L;", g.k, g.k);
    e.line("    *(strata_u4 *)(ws + {}L + i * 2) = *(const strata_u4 *)({} + "
           "(long)({}[m] / {}) * {}L + k);",
           aOff, g.a.ptr, perm.ptr, slotsPerToken, g.k);
    e.line("  }}");
  }
  e.line("}}");
  format::PlanPreLaunch pre;
  pre.grid = {{0, kPrepBlocks, 1}, {0, 1, 1}, {0, 1, 1}};
  pre.block = {kPrepThreads, 1, 1};
  e.out.pre = std::move(pre);

  // The kernel: a producer warp copying A's tile (the expert's rows from
  // its offset; rows past them are masked) and W's (the expert's block of
  // rows in the workspace) into the ring, two consumer warpgroups.
  // Gate column c of the tile is accumulator (j, q), its up column (j +
  // bh / 16, q) of the same thread.
  const int64_t outCols = swiglu ? bh : bn;
  const int64_t esz = y.ctype == "float" ? 4 : 2;
  const int64_t ld = outCols * esz + 16, csBytes = 128 * ld;
  const bool stageable =
      stagedOn(e.plan) && (g.n * esz) % 16 == 0 && y.ctype != "int32_t";
  // Persistent (persistFor): blocks loop over the tiles, the staged
  // results outside the ring where two stages still fit.
  const bool persist = persistFor(e.plan, e.kernel.label());
  int ks = stages;
  bool staged = stageable && csBytes <= stages * sb;
  if (persist) {
    const int64_t beside = (tmaRingBytes(blocks) - csBytes) / sb;
    staged = stageable && beside >= 2;
    if (staged)
      ks = static_cast<int>(std::min<int64_t>(stages, beside));
  }
  const int64_t stageOff = ks * sb,
                ring = stageOff + (persist && staged ? csBytes : 0);
  openTmaKernel(blocks, sym, params);
  e.line("  uint64_t *const full = (uint64_t *)(strata_lds + {}), *const "
         "empty = full + {};",
         ring, ks);
  // A tile's expert and rows (the table's row tile rt), its columns (ct).
  const std::string tileOf[] = {
      fmt::format("const int *const tt = (const int *)(ws + {}L) + 2 * rt;",
                  tableOff),
      "const int ex = tt[0];",
      fmt::format("const long M = {}[ex + 1];", off.ptr),
      fmt::format("const long m0 = {}[ex] + (long)tt[1] * {};", off.ptr,
                  kTmaARows),
      fmt::format("const long n0 = (long)ct * {};", swiglu ? bh : bn)};
  const std::string tileLoop = fmt::format(
      "for (long tile = bid_x(); tile < tiles; tile += grid_x()) {{ const "
      "long rt = tile / {}, ct = tile % {};",
      colTiles, colTiles);
  bool colsFast = false;
  if (persist) {
    e.line("  const long tiles = {} * {}L;", dimExpr(rowTiles), colTiles);
  } else {
    colsFast = tileOrder(rowTiles, true);
    e.line("  {}", tileOf[0]);
    e.line("  if (tt[0] < 0) return;");
    for (int i = 1; i < 5; ++i)
      e.line("  {}", tileOf[i]);
  }
  e.line("  if (tid_x() == 0) {{");
  e.line("    for (int s = 0; s < {}; ++s) {{ mbar_init(&full[s], 1); "
         "mbar_init(&empty[s], 2); }}",
         ks);
  e.line("    mbar_init_fence();");
  e.line("  }}");
  e.line("  sync_block();");
  // The wave index from lane 0: warp-uniform to ptxas (as the TMA tile's).
  e.line("  const int wave = shfl_i(tid_x() >> 5, 0), kt = {};", kt);
  if (!persist)
    e.line("  float acc0[1][{}][8] = {{}};", bn / 16);
  e.line("  if (wave == 8) {{");
  e.line("    if (lane_id() == 0) {{");
  e.line("      uint64_t ma, mw;");
  e.line("      STRATA_PARAM_ADDR(ma, \"{}\");", e.tensorMapParam(0, sym));
  e.line("      STRATA_PARAM_ADDR(mw, \"{}\");", e.tensorMapParam(1, sym));
  if (persist) {
    // Tiles past the table's last are skipped by the producer and the
    // consumers alike (the ring's position stays in step).
    e.line("      int it = 0;");
    e.line("      {}", tileLoop);
    e.line("      {}", tileOf[0]);
    e.line("      if (tt[0] < 0) continue;");
    e.line("      {}", tileOf[1]);
    e.line("      {}", tileOf[3]);
  }
  e.line("      const int wr = (int)(ex * {}L + (long)ct * {});", nw, bn);
  e.line("      for (int k = 0; k < kt; ++k{}) {{", persist ? ", ++it" : "");
  e.line("        const int s = {} % {};", persist ? "it" : "k", ks);
  e.line("        mbar_wait(&empty[s], (({} / {}) & 1) ^ 1);",
         persist ? "it" : "k", ks);
  e.line("        uint8_t *st = strata_lds + s * {};", sb);
  e.line("        mbar_expect_tx(&full[s], {});", sb);
  e.line("        tma_load_2d(st, ma, k * 64, (int)m0, &full[s]);");
  e.line("        tma_load_2d(st + {}, mw, k * 64, wr, &full[s]);",
         kTmaARows * 128);
  producerDone(persist);
  if (persist) {
    e.line("  {}", tileLoop);
    e.line("  {}", tileOf[0]);
    e.line("  if (tt[0] < 0) continue;");
    for (int i = 1; i < 5; ++i)
      e.line("  {}", tileOf[i]);
    e.line("  float acc0[1][{}][8] = {{}};", bn / 16);
    e.line("    tma_gemm_consume<{}, {}, {}>(&acc0[0][0][0], strata_lds, "
           "full, empty, kt, wave >> 2, it, true);",
           bn, ks, sb);
    e.line("  it += kt;");
  } else {
    e.line("    tma_gemm_consume<{}, {}, {}>(&acc0[0][0][0], strata_lds, "
           "full, empty, kt, wave >> 2);",
           bn, ks, sb);
    e.line("  }}");
  }
  auto value = [&](const std::string &q) {
    return swiglu ? fmt::format("sm_silu(acc0[0][j][{}]) * acc0[0][j + {}][{}]",
                                q, bh / 16, q)
                  : fmt::format("acc0[0][j][{}]", q);
  };
  if (staged) {
    // Through shared memory (the ring, once both warpgroups' last wgmma
    // reads are done; persistent: an area of its own, free once the
    // warpgroup stored the previous tile): each warpgroup's 64 rows, then
    // 16-byte stores of whole row pieces. The accumulators' own 2-byte
    // stores touched a sector per row per instruction: the down
    // projection's 839 MB of output ran at 72 % of the L2's throughput.
    openStaging(persist, stageOff, ld);
    accLoop("    ", "        ", outCols / 16, 2, true, false);
    e.line("        st2(({} *)(cs + r * {}), j * 16 + c, {}, {});", y.ctype, ld,
           value("q"), value("q + 1"));
    e.line("      }}");
    stagedStores(y.ptr, g.n, esz, ld, outCols);
    e.line("  }}");
  } else {
    accLoop("  ", "      ", outCols / 16, 1, false);
    // The producer warp holds no accumulators: its rows read as past M.
    e.line("      const long m = wave < 8 ? m0 + r : M, n = n0 + c;");
    e.line("      if (m < M && n < {}L) st({}, m * {}L + n, {});", g.n, y.ptr,
           g.n, value("q"));
    e.line("    }}");
  }
  if (persist)
    e.line("  }}\n  }}");
  e.line("}}");
  const format::PlanDim cols{0, colTiles, 1};
  if (persist)
    e.out.grid = {{0, int64_t(ir::lookupTarget(e.target)->units) * blocks, 1},
                  {0, 1, 1},
                  {0, 1, 1}};
  else
    e.out.grid = {
        colsFast ? cols : rowTiles, colsFast ? rowTiles : cols, {0, 1, 1}};
  e.out.block = {288, 1, 1};
  e.out.sharedBytes = static_cast<uint64_t>(1024 + ring + 2 * int64_t(ks) * 8);
  return true;
}

} // namespace

void emitGemmKernel(Emitter &e) { GemmEmitter(e).runChains(); }
void emitGroupedKernel(Emitter &e) { GemmEmitter(e).runGrouped(); }

} // namespace strata::codegen::detail
