//===- GemmEmitter.h - the GEMM families' shared emitter --------*- C++ -*-===//
//
// Private to codegen/gemm/ and codegen/grouped/: the GemmEmitter class
// (declared once, its members defined in the files of both families), the
// Gemm and Chain records and the helpers they share.
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
#pragma once

#include "codegen/EmitterImpl.h"
#include "codegen/Options.h"
#include "codegen/gemm/GemmForm.h"
#include "codegen/gemm/GemvForm.h"
#include "codegen/grouped/GroupedForm.h"
#include "ir/OpCost.h"

#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

namespace strata::codegen::detail::gemm {

using format::BodyOp;
using format::BodyRef;
using format::Recipe;

constexpr int kBK = 32; ///< K per staged tile (one 32-block, 1/8 of a 256)
/// The most columns of a skinny GEMM (ir/OpCost.h).
constexpr int kSkinnyN = static_cast<int>(ir::kSkinnyGemmColumns);
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
/// The same for 16-bit weights, per K element of the tiles' walk: their
/// matrix-unit tiles are bound by one block's loads in flight, not its
/// FMAs. On the H200 K2 (f16, N 320 + 4, K 10,240) at 64 rows ran 6 tiles
/// in 131 us (bench/results/chunk64-profile-20261205T1848Z.txt): 12.8 ns
/// a K element, in which the row blocks compute 64,000 row x N products
/// (2e-13 s each, as above), so the tiles from T = 64,000 / N (200 rows
/// for K2).
constexpr int64_t kRowBlockWork16PerK = 64'000;
constexpr int kSkinnyRows = 4; ///< rows per warp of a skinny GEMM

/// Row stride (floats) of the f32 Cs tile of \p bn columns: 4 floats of
/// padding put the 8 rows an accumulator store touches in different banks
/// (2-way instead of 8-way conflicts at bn = 128).
inline int csLd(int bn) { return bn + 4; }

/// A ref's identity (kind, index) for value tracking.
inline std::pair<int, uint32_t> key(const BodyRef &r) {
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
  /// The portable split (gfx1151's f16 terms; sm_90 under portable-forms):
  /// term t scaled by STRATA_MMA_TERM_SCALE^t (strata_split_terms), the
  /// accumulators multiplied by the scale where each later term starts and
  /// by its inverse power after the last (mma.sync / WMMA, not wgmma).
  bool splitScaled = false;
  /// The KernelVariants.def row pickTile took the tile as (a variant or a
  /// form row), recorded where a code object prints it.
  std::string tileRow;
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
inline bool stagedOn(const format::Plan &plan) {
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
inline bool pairOn(const format::Plan &plan) {
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
inline bool persistFor(const format::Plan &plan, const std::string &label) {
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
inline format::PlanDim tilesOf(const format::PlanDim &rows, int64_t mult,
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
inline std::string aRowOf(const Gemm &g) {
  return fmt::format("const {} *arow = {} + (long)({}) * {}L;", g.a.ctype,
                     g.a.ptr, g.aIndex, g.k);
}

/// The waves' grid over a matrix-unit tile: wm waves down, wn across.
inline void waveGrid(int bm, int nt, int &wm, int &wn) {
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
  /// The TMA tile's columns for N = \p n.
  static int tmaColumns(int64_t n);
  explicit GemmEmitter(Emitter &e) : e(e) {}
  void runChains();
  void runGrouped();
  /// The grouped GEMM's tile kernel \p sym over expert-sorted rows (a
  /// block scan of the offsets finds each block's expert and row tile).
  void groupedTile(const Gemm &g, const Tensor &y, const Tensor &off,
                   int64_t experts, const std::string &sym);
  /// The grouped GEMM's dequantise-once alternate (GroupedForm
  /// Kind::Dequant): a pre-launch decodes every expert of each quantised
  /// matrix of \p g once into the workspace as the matrix units' 16-bit
  /// type, then groupedTile reads them there.
  void groupedDequantOnce(Gemm g, const Tensor &y, const Tensor &off,
                          int64_t experts);
  /// The grouped GEMM's TMA alternate (sm_90a) in the tile \p f chose
  /// (selectGrouped: from f.tmaFrom rows, where f.tmaFrom > 0).
  void groupedTma(Gemm g, bool swiglu, const Tensor &y, const Tensor &off,
                  const Tensor &perm, int64_t slotsPerToken, int64_t experts,
                  const GroupedForm &f);

private:
  Emitter &e;
  /// What the TMA tile takes under the plan's options: 16-bit weights, and
  /// quantised ones unless gemm-tma-quant=0 (the probe that selects the
  /// form and the emission read the same rule).
  TmaUse tmaUse() const {
    return option(e.plan, Opt::GemmTmaQuant) == 0 ? TmaUse::Float16
                                                  : TmaUse::Quantised;
  }
  /// Emits an alternate of the kernel (from \p from rows, symbol suffix
  /// \p suffix) by \p emit into a fresh EmittedKernel and appends it to the
  /// own code's alternates; the own code and its workspace flag are kept.
  void addAlternate(int64_t from, const char *suffix,
                    const std::function<void()> &emit);
  /// The dequantise-once form of the chains (GemmForm.h, Kind::Dequant)
  /// as \p sym: a pre-launch (\p sym _prep) decodes the weights of the
  /// chains whose shape says `dequant` once into the workspace as the
  /// matrix units' 16-bit type (the TMA tile's conversion), then the
  /// variant's tiles read them there as 16-bit weights; the other chains
  /// keep their tiles.
  void emitDequantOnce(const std::vector<Chain> &chains,
                       std::vector<Gemm> gemms, const GemmProblem &shapes,
                       const std::string &sym);
  /// The chains as selectGemm sees them (GemmForm.h); \p probeTma asks
  /// pickTma of a copy of each (the TMA tile from kTmaMinTokens rows).
  GemmProblem gemmProblem(const std::vector<Chain> &chains,
                          const std::vector<Gemm> &gemms,
                          const std::vector<Tensor> &ys, bool probeTma);
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
  /// \p aq8Words: words of shared memory for the int8 rows of A
  /// (gemvInt8Words), 0 for none. \p gridBarrier false: the caller's
  /// first barrier (before any read of iq3s_lds) is the grid copy's.
  void gemvOpen(bool iq3s, const std::string &sym, int64_t stageBytes = 0,
                int64_t aq8Words = 0, bool wide = false,
                bool gridBarrier = true);
  /// Whether \p g's decode form over \p rows accumulator rows multiplies
  /// int8 activations: option gemm-decode-int8, every matrix of a block
  /// type with an integer form (runtime/format/BlockDecodeInt8.h), A's
  /// quantised rows (16 bytes a piece of 8) within int8ABytes().
  bool gemvInt8(const Gemm &g, int64_t rows) const;
  /// Whether \p g's int8 decode form over \p rows rows takes the wide
  /// pieces (option gemm-decode-wide): every matrix Q4_K (or, at 2, every
  /// matrix Q6_K), K whole super-blocks; the grouped experts' rows only
  /// under grouped-decode-wide (groupedWide_).
  bool gemvWide(const Gemm &g, int64_t rows) const;
  /// Words of shared memory of \p g's int8 rows of A (0: not int8).
  int64_t gemvInt8Words(const Gemm &g, int64_t rows) const;
  /// Shared memory the int8 rows of A may take: static arrays, so the
  /// targets' static budget (Targets.def, staticSharedBudget()) less the
  /// decode form's other arrays (the slices' sums, IQ3_S's grid).
  static int64_t int8ABytes();
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
  /// Declares `float t[P]` (P: \p n rounded up to a power of two) holding
  /// \p value at i < n (a C expression in `i`), zeros after, and sums each
  /// over the warp (warp_sum_many<P>).
  void warpSumMany(const std::string &value, int64_t n);
  /// The stream-mean chain's sums over the warp and its average over the
  /// streams (a power of two of them), a row's gates gathered by shuffles.
  void gemvStreamReduce(const Gemm &g, const Chain &c, int64_t rows);
  /// Opens the decode forms' loop over the rows m0 + r < M of a K piece
  /// (at most \p rows): `m`, `arow` and the piece of A, `av`, defined;
  /// with \p hoist, rows past M repeat the last (no exit from the loop).
  void gemvRows(const Gemm &g, int64_t rows, bool hoist);
  /// The int8 form's prologue of a pass (gemvInt8): the block quantises
  /// rows m0 .. m0 + \p rows - 1 (< M) of A into aq8, 16 bytes a piece of
  /// 8 (strata_qa8: two words of int8, the scale, the scaled sum).
  void gemvQuantA(const Gemm &g, int64_t rows);
  /// Records \p g's A, where it is a kernel input, as read by a GEMV as
  /// int8 activations or as floats (EmittedKernel::int8Inputs).
  void noteGemvInput(const Gemm &g, bool int8);
  /// A decode-form kernel's entry: the signature (two blocks an SM), the
  /// prologue, IQ3_S's grid staged in LDS where \p iq3s (its barrier
  /// left to the caller where \p gridBarrier is false), `wave` and `lane`.
  void gemvEntry(bool iq3s, const std::string &sym, bool gridBarrier = true);
  /// Closes the decode-form kernel opened by gemvOpen.
  void gemvClose();
  /// Whether the matrix-unit decode form (GemmDecodeMma.cpp) can run every
  /// chain: sm_90, bf16 A, K a multiple of 32, quantised or 16-bit weights
  /// (one matrix, or gate and up), no stream mean.
  bool gemvMmaFits(const std::vector<Chain> &chains,
                   const std::vector<Gemm> &gemms) const;
  /// Emits the chains' matrix-unit decode form as kernel \p sym: rows in
  /// passes of 16, each warp 16 columns (selectGemvMma's slices of K), each
  /// chain its own blocks of grid x.
  void emitGemvMma(const std::vector<Chain> &chains,
                   const std::vector<Gemm> &gemms, const std::string &sym);
  /// One chain of emitGemvMma, `base` (its first block) defined.
  void gemvMmaBody(const Gemm &g, GemvMmaForm form);
  /// The decode form's columns: with `base` (the block's first of its
  /// chain) and rowBase_ (W's first row: the expert's) defined, each warp's
  /// dot products of its \p shape.cols columns over rows \p first ..
  /// \p end (C expressions, uniform in the block) in passes of \p rows,
  /// summed over \p shape.slices warps, then the epilogue of (column c,
  /// row m0 + r) by lane c * rows + r of the column's first slice. With
  /// colLoop_ set, each pass of rows loops the block's warps over its
  /// column groups after A's quantisation.
  void gemvBody(const Gemm &g, int64_t rows, GemvForm shape,
                const std::string &first, const std::string &end);
  /// The rows of the \p cols columns from C expression \p at (W's first
  /// row rowBase_) as prefix{b}_{c}; a column past N reads column 0.
  void gemvColumnRows(const Gemm &g, int cols, const std::string &at,
                      const std::string &prefix, const char *indent);
  /// L2 prefetches of the rows prefix{b}_{c}, 128 bytes a lane over the
  /// group's \p slices warps (`slice`, `lane` defined).
  void gemvPrefetchRows(const Gemm &g, int slices, int cols,
                        const std::string &prefix, const char *indent);
  /// gemm-decode-prefetch-ahead: the blocks resident at launch ask L2 for
  /// the rows of the column groups that later blocks (or their own later
  /// loops) take, before the grid dependency wait; \p groups and \p shapes
  /// are the chains'.
  void gemvPrefetchAhead(const std::vector<Gemm> &gemms,
                         const std::vector<GemvForm> &shapes,
                         const std::vector<int64_t> &groups);
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
  /// gemvDirect for the wide pieces: a lane's 32 values at 1024 slice +
  /// 256 (lane / 8) + its place in the super-block (Q4_K: 64 ((lane % 8) /
  /// 2) + 16 (lane % 2); Q6_K: 128 (lane / 4 % 2) + 32 (lane / 2 % 2) + 16
  /// (lane % 2)) of each step of 1024 slices values.
  void gemvDirectWide(const Gemm &g, GemvForm shape,
                      const std::function<void(const std::string &,
                                               const std::string &)> &piece);
  /// gemvDirect's loop: the whole steps of \p span values (\p unroll
  /// of them unrolled), then a partial one with the lane's bound checked;
  /// \p lanePos is the lane's first value in a step.
  void gemvLoop(const Gemm &g, int64_t span, int64_t unroll,
                const std::string &lanePos,
                const std::function<void(const std::string &,
                                         const std::string &)> &piece);
  void gemvDirect(const Gemm &g, GemvForm shape,
                  const std::function<void(const std::string &,
                                           const std::string &)> &piece);
  /// gemvBody's sums over the warp (and its slices) and the epilogue.
  void gemvReduce(const Gemm &g, int64_t rows, GemvForm shape);
  /// W's first row in gemvBody (a C expression).
  std::string rowBase_ = "0L";
  /// Whether gemvBody's grouped experts (rowBase_ an expert's) take the
  /// wide pieces: set by emitGroupedGemv (grouped-decode-wide), whose
  /// gemvOpen then declares A's aligned wide arrays.
  bool groupedWide_ = false;
  /// Blocks an SM gemvEntry caps the registers for; 0: option
  /// gemm-decode-blocks (emitGroupedGemv sets grouped-decode-blocks for
  /// its one-row form).
  int64_t minBlocks_ = 0;
  /// A chain's loop over column groups in gemvBody (gemm-decode-grid):
  /// its \p groups groups of kGemvWarps / slices warps run on \p stride
  /// blocks, block b taking groups b, b + stride, ...; groups 0: a block
  /// a group (no loop). Set by emitGemv around each chain's body.
  struct ColumnLoop {
    int64_t groups = 0, stride = 0;
  };
  ColumnLoop colLoop_;
  /// gemm-decode-prefetch-early: the kernel's chains wait for the kernel
  /// before them themselves (grid_dependency_wait after gemvBody's prefetch
  /// of the weight rows, first in gemvStreamBody), so withGridWait adds no
  /// wait at the entry. Set by emitGemv (dense chains only: a grouped
  /// chain's rows follow the routing, which the kernels before write).
  bool earlyWait_ = false;
  /// Whether gemm-decode-prefetch-early applies: sm_90 with both
  /// gemm-decode-prefetch and gemm-decode-prefetch-early on.
  bool prefetchEarly() const;
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

} // namespace strata::codegen::detail::gemm
