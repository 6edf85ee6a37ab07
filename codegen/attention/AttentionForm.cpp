//===- AttentionForm.cpp - the attention family's choice of form ----------===//
#include "codegen/attention/AttentionForm.h"

#include "codegen/Limits.h"
#include "codegen/Options.h"
#include "codegen/device/attention/AttentionLayouts.h"
#include "ir/Target.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <stdexcept>

namespace strata::codegen {

const char *attentionFormName(AttentionForm::Kind kind) {
  switch (kind) {
  case AttentionForm::Kind::Ws:
    return "ws";
  case AttentionForm::Kind::Wg:
    return "wg";
  case AttentionForm::Kind::Gqa:
    return "gqa";
  case AttentionForm::Kind::Tile:
    return "tile";
  }
  return "?";
}

AttentionForm selectAttention(const AttentionShape &s,
                              const std::string &target,
                              const format::Plan &plan) {
  // The FMA tile: 16 query rows a block, 128 threads.
  constexpr int kBQ = 16, kThreads = 128;
  AttentionForm f;
  f.queryRows = kBQ;
  f.threads = kThreads;
  const int64_t h = s.heads, d = s.headDim, hkv = s.kvHeads, dv = s.valueDim;
  const int64_t block = s.block, nb = s.selections;
  // Words of the per-row block bitmap: every block a row may select.
  const int64_t nbw = block > 0 ? (s.maxTokens / block + 32) / 32 : 1;
  f.bitmapWords = nbw;
  const ir::Target *t = ir::lookupTarget(target);
  assert(t && t->gpu && "attention forms are for GPU targets");
  const int64_t limit = t->sharedPerBlock - 1024;
  const int64_t hg = h / hkv;
  // sm_90: the warpgroup form (attention_wg) where its tiles fit: 128 query
  // rows (NHB heads of a KV group x 128 / NHB tokens) per staged chunk of
  // 64 keys, wgmma for both products. Its epilogue reads the gate and
  // writes the output by element pairs.
  // Under portable-forms sm_90 takes gfx1151's form (attention_gqa on
  // mma.sync), so the differential suite checks its algorithm on the H200.
  const bool portable =
      target == "gfx1151" || option(plan, Opt::PortableForms) != 0;
  if (s.matrixUnits && s.gatePairs && !portable && d <= 256 && dv % 64 == 0 &&
      dv <= 256 &&
      (block == 0 || (block <= 64 && 64 % block == 0 && 64 / block <= 32) ||
       block % 64 == 0)) {
    int64_t nhb = hg % 4 == 0 ? 4 : hg % 2 == 0 ? 2 : 1;
    int64_t bqw = 128 / nhb, lc = 64 * 8 + 8;
    int64_t ncw = (s.maxTokens / 64 + 32) / 32;
    int64_t tiles = 2 * 2 * lc * (2 * (d / 8) + dv / 8);
    int64_t shared = tiles + (block > 0 ? 4 * (bqw * nbw + ncw) : 0);
    // QSA: the sparse form (all heads of a KV group for 128 / HG tokens,
    // the union of their selections compacted) where its tables fit;
    // option attn-sparse=0 keeps the chunk form (for A/B runs).
    bool sparse = block >= 2 && 64 % block == 0 && s.causal && hg <= 128 &&
                  nbw * 32 <= 65536 && option(plan, Opt::AttnSparse) != 0;
    // Its union tables hold row bitmaps of every block where they fit
    // (to ~20K tokens for qwen4exp); past that (or attn-compact=on) the
    // compact tables, bounded by the tile's selections (BQ x NB blocks),
    // not by the plan's length. attn-compact=off: never.
    bool compact = false;
    if (sparse) {
      int64_t bqs = 128 / hg, epc = 64 / block;
      auto needOf = [&](int64_t rowWords, int64_t chunks) {
        return tiles + 4 * (rowWords + 2 * nbw + chunks * bqs + bqs + 1) +
               2 * chunks * epc;
      };
      int64_t nch = (nbw * 32 + epc - 1) / epc;
      int64_t need = needOf(bqs * nbw, nch);
      const int64_t compactOpt = option(plan, Opt::AttnCompact);
      compact = need + 64 > limit || compactOpt == 1;
      if (compactOpt == 2)
        compact = false;
      if (compact) {
        // The scan's scratch (the masks) holds a word per warp of the
        // larger form (attention_ws: 384 threads).
        constexpr int64_t kScanWords = 384 / 32;
        nch = std::max((std::min(nbw * 32, bqs * nb) + epc - 1) / epc,
                       (kScanWords + bqs - 1) / bqs);
        need = needOf(0, nch);
      }
      sparse = need <= limit;
      if (sparse)
        nhb = hg, bqw = bqs, ncw = nch, shared = need;
    }
    f.groupHeads = nhb;
    f.chunkWords = ncw;
    // The sparse form warp-specialised (attention_ws: a producer
    // warpgroup gathering K and V into mbarrier-completed stages, two
    // consumer warpgroups without a block barrier per chunk; its eight
    // mbarriers before the tables); attn-ws=0 keeps attention_wg's.
    if (sparse && shared + 64 <= limit && option(plan, Opt::AttnWs) != 0) {
      f.kind = AttentionForm::Kind::Ws;
      f.queryRows = bqw, f.headsPerBlock = nhb, f.threads = 384;
      f.sharedBytes = static_cast<uint64_t>(shared + 64);
      f.sparse = true;
      f.compact = compact;
      // attn-pingpong=1: the two consumers taking turns to issue (FA3's
      // ping-pong; off by default since the producer split: -3.4 % without
      // the turns, measured side by side); attn-expfirst=1: each step's
      // wait for P V kept after the softmax's exponentials (no gain, 75.0
      // vs 74.6 ms); attn-trace=1: one block prints its phases' cycles (a
      // diagnostic). One copy of the consumers' step, P copied between
      // steps (-2.9 % on attention: half the loop's code to fetch);
      // attn-rolled=0 unrolls it by two. The softmax's variant bits
      // (wg_softmax_chunk's SMX): the scale in the exponent's FFMA, tree
      // reductions and the lazy rescale, all on (-4.4 % on attention).
      f.pingpong = option(plan, Opt::AttnPingpong) != 0;
      f.expFirst = option(plan, Opt::AttnExpFirst) != 0;
      f.trace = option(plan, Opt::AttnTrace) != 0;
      f.rolled = option(plan, Opt::AttnRolled) != 0;
      f.smx = static_cast<int>(option(plan, Opt::AttnSmx));
      return f;
    }
    if (shared <= limit) {
      f.kind = AttentionForm::Kind::Wg;
      f.queryRows = bqw, f.headsPerBlock = nhb, f.threads = 256;
      f.sharedBytes = static_cast<uint64_t>(shared);
      f.sparse = sparse;
      f.compact = sparse && compact;
      return f;
    }
  }
  if (s.matrixUnits) {
    // NSP waves split a row group's value columns (at most 128 each: no
    // spills at DV = 256) and its keys; as many heads of the KV group per
    // block (NRG, up to 12 waves) and keys per chunk (KC) as shared memory
    // allows.
    // QSA: chunks gather the union of the tile's selected blocks (the
    // sparse form) where a chunk holds whole blocks; attn-sparse=0 keeps
    // the chunk walk.
    const int64_t nsp = (dv + 127) / 128;
    for (int64_t g = hg; g >= 1; --g) {
      if (hg % g || g * nsp > 12)
        continue;
      for (int64_t c : {64, 32, 16}) {
        if (c % (16 * nsp) || dv % (16 * nsp))
          continue;
        const bool sparse = block > 0 && c % block == 0 && s.causal &&
                            option(plan, Opt::AttnSparse) != 0;
        // The kernel's own layout (AttentionLayouts.h): Q, K, V^T, P, the
        // partial maxima and sums, the QSA bitmap, the union and a
        // chunk's block ids.
        const int64_t need =
            gqa_layout_of(g, nsp, c, d, dv, block > 0 ? nbw : 0,
                          sparse ? c / block : 0)
                .bytes;
        if (need <= limit) {
          f.kind = AttentionForm::Kind::Gqa;
          f.sparse = sparse;
          f.rowGroups = g, f.splits = nsp, f.keyChunk = c;
          f.headsPerBlock = g;
          f.threads = 32 * g * nsp;
          f.sharedBytes = static_cast<uint64_t>(need);
          return f;
        }
      }
    }
  }
  // Keys per staged chunk: the most (32, 16 or 8) whose tiles fit the
  // static shared budget.
  int64_t kc = 32;
  for (; kc > 8; kc /= 2) {
    // The kernel's static arrays (AttentionLayouts.h; AttentionTile.h
    // checks its arrays against the same function).
    const int64_t need = attention_tile_shared(
        kBQ, kc, d, dv, block > 0 ? nbw : 0, s.qBytes, s.kBytes, s.vBytes);
    if (need <= staticSharedBudget())
      break;
  }
  f.kind = AttentionForm::Kind::Tile;
  f.keyChunk = kc;
  return f;
}

CachedAttentionForm selectCachedAttention(const CachedAttentionShape &s,
                                          const std::string &target) {
  CachedAttentionForm f;
  if (s.kvHeads <= 0 || s.heads % s.kvHeads != 0)
    throw std::runtime_error(
        fmt::format("query heads {} are not a multiple of kv heads {}", s.heads,
                    s.kvHeads));
  f.group = s.heads / s.kvHeads;
  f.cols = (s.valueDim + s.threads - 1) / s.threads;
  f.pieces = s.headDim % 4 == 0 ? 4 : 1;
  // A lane holds an eighth of a key in registers.
  if (s.headDim > 256)
    throw std::runtime_error("a head dim above 256");
  // The group's queries and a tile of its scores sit in shared memory; its
  // accumulators (group x cols a thread) in registers.
  if (f.group * (s.headDim + kCachedKeyTile) * 4 > staticSharedBudget())
    throw std::runtime_error(
        fmt::format("a GQA group of {} heads of dim {} does not fit shared "
                    "memory",
                    f.group, s.headDim));
  if (f.group * f.cols > 64)
    throw std::runtime_error(
        fmt::format("a GQA group of {} heads of value dim {} does not fit "
                    "registers",
                    f.group, s.valueDim));
  const ir::Target *t = ir::lookupTarget(target);
  const int64_t units = t ? t->units : 1;
  const int64_t rows = std::max<int64_t>(1, s.maxTokens);
  const int64_t record = s.heads * (s.valueDim + 2) * 4;
  f.chunks = (2 * units + s.kvHeads - 1) / s.kvHeads;
  f.chunks = std::min(f.chunks, (s.maxSlots + s.minChunk - 1) / s.minChunk);
  f.chunks = std::min(f.chunks, kCachedAttentionWorkspace / (rows * record));
  f.chunks = std::max<int64_t>(f.chunks, 1);
  f.rowFloats = (s.heads * f.chunks * (s.valueDim + 2) + 3) / 4 * 4;
  return f;
}

} // namespace strata::codegen
