//===- AttentionForm.h - the attention family's choice of form --*- C++ -*-===//
//
// Select, then emit: `selectAttention` decides, from the kernel's shape, the
// target and the plan's code generation options alone (no printing), which
// form an attention kernel takes and how it is tiled, launched and sized;
// the emitter (AttentionEmitter.cpp) prints that form. Unit-tested without
// printing (test/unit/codegen/AttentionFormTest.cpp).
//
// The forms (codegen/device/attention/, arch/sm_90/AttentionW{g,s}.h):
//   Ws   - sm_90, QSA's sparse union form warp-specialised (attention_ws:
//          a producer warpgroup gathering K and V into mbarrier stages, two
//          wgmma consumer warpgroups)
//   Wg   - sm_90, the warpgroup form (attention_wg: 128 query rows per
//          staged chunk of 64 keys, wgmma for both products; dense chunks
//          or the sparse union)
//   Gqa  - bf16 on matrix units (attention_gqa, mma.sync / WMMA): the query
//          heads of one KV head per block, QSA's chunks gathered from the
//          union of its 16 tokens' blocks (sparse); gfx1151's form, and
//          sm_90's where the warpgroup tiles do not fit or under
//          portable-forms
//   Tile - f32 arithmetic (the f32 policy) or unaligned operands:
//          attention_tile, FMA over staged chunks of keys
// and, for the decode step's attention over the KV cache, the split of
// attention_cached (selectCachedAttention: its chunks a row and workspace).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>

namespace strata::format {
struct Plan;
}

namespace strata::codegen {

/// What selection needs of an attention kernel.
struct AttentionShape {
  int64_t heads = 0, headDim = 0, kvHeads = 0, valueDim = 0;
  int64_t block = 0;        ///< QSA block size (0: dense)
  int64_t selections = 1;   ///< QSA blocks a row selects (its index width)
  bool gated = false;       ///< sigmoid output gate
  bool causal = true;       ///<
  bool matrixUnits = false; ///< q, k, v bf16, dims multiples of 16, aligned
  bool gatePairs = true;    ///< the gate is readable by element pairs
  int64_t maxTokens = 0;    ///< the plan's max_tokens
  /// Element bytes of q, k and v (the Tile form stages them as they are).
  int64_t qBytes = 2, kBytes = 2, vBytes = 2;
};

/// The form an attention kernel takes, its tiles, launch and shared memory.
struct AttentionForm {
  enum class Kind { Ws, Wg, Gqa, Tile } kind = Kind::Tile;
  int64_t queryRows = 16;    ///< query tokens a block takes (BQ)
  int64_t headsPerBlock = 1; ///< query heads a block takes
  int64_t threads = 128;
  uint64_t sharedBytes = 0; ///< dynamic shared memory (0: static only)
  // Ws / Wg.
  int64_t groupHeads = 1;  ///< NHB: heads of a KV group per block (Wg)
  int64_t bitmapWords = 1; ///< NBW: words of a row's block bitmap
  int64_t chunkWords = 1;  ///< NCW: words of the chunk tables
  bool sparse = false;     ///< the union of a row group's selections (Ws,
                           ///< Wg, Gqa)
  bool compact = false;    ///< compact union tables (no row bitmaps)
  // Ws (code generation options).
  bool pingpong = false, expFirst = false, trace = false, rolled = true;
  int smx = 7;
  // Gqa.
  int64_t rowGroups = 0, splits = 0; ///< NRG, NSP
  int64_t keyChunk = 0;              ///< KC (Gqa and Tile)
};

/// Slots a cached-attention block scores at once (shared memory; a
/// multiple of 32).
constexpr int64_t kCachedKeyTile = 64;
/// Slots a chunk takes at least by default (attn-decode-chunk): below it
/// the q staging and the partials (group x (dv + 2) floats) outweigh the
/// keys read.
constexpr int64_t kCachedMinChunk = 32;
/// attention_cached's decode form: runs of at most this many rows split
/// each row over the chunks that fill the GPU (its own code), longer runs
/// take the split of max_tokens rows (an alternate).
constexpr int64_t kCachedDecodeRows = 16;
/// The partials at max_tokens rows stay below this: the chunk count is a
/// compile-time constant and the workspace grows with it and T.
constexpr int64_t kCachedAttentionWorkspace = int64_t(64) << 20;

/// What selection needs of attention_cached (the decode step's attention
/// over the KV cache, codegen/attention/CachedAttention.cpp).
struct CachedAttentionShape {
  int64_t heads = 0, headDim = 0, kvHeads = 0, valueDim = 0;
  /// The most slots a row reads: the context (dense), or the block index's
  /// entries x block (QSA).
  int64_t maxSlots = 0;
  int64_t maxTokens = 1; ///< the plan's largest run (rows of partials)
  int64_t threads = 128; ///< the kernel's block
  /// Slots a chunk takes at least (option attn-decode-chunk).
  int64_t minChunk = kCachedMinChunk;
};

/// attention_cached's split over key slots (flash-decoding): the pre-launch
/// scores chunks of a row's slots for every query head of a GQA group
/// (each K/V row read once) into partials in the workspace, the kernel
/// merges them. A row's slots are its keys 0 .. p (dense) or, with a block
/// index, `block` slots per index entry up to its last listed block.
struct CachedAttentionForm {
  int64_t group = 1;  ///< query heads per kv head (one block serves them)
  int64_t chunks = 1; ///< pre-launch blocks per (row, kv head)
  int64_t cols = 1;   ///< value columns a thread accumulates (dv / threads)
  int64_t pieces = 1; ///< key elements a lane loads at once (4: ld4)
  /// Workspace floats per row: acc [hkv][chunks][group][dv], then (m, l)
  /// [hkv][chunks][group][2].
  int64_t rowFloats = 0;
};

/// The split of attention_cached on \p target: two blocks a unit at one
/// row and a full context (one block's loads leave the memory idle while
/// it computes), no chunk shorter than s.minChunk there, and the
/// partials of max_tokens rows within kCachedAttentionWorkspace. At run
/// time a row's n slots go to the chunks in equal runs of at least
/// s.minChunk, so a short row takes fewer blocks. Throws
/// std::runtime_error for a shape the form cannot hold (the diagnostic).
CachedAttentionForm selectCachedAttention(const CachedAttentionShape &s,
                                          const std::string &target);

/// "ws", "wg", "gqa" or "tile".
const char *attentionFormName(AttentionForm::Kind kind);

/// The form \p shape takes on \p target ("gfx1151" or "sm_90") under the
/// code generation options of \p plan.
AttentionForm selectAttention(const AttentionShape &shape,
                              const std::string &target,
                              const format::Plan &plan);

} // namespace strata::codegen
