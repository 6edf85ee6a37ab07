//===- CachedKernel.h - shared by the cached (decode) kernels ---*- C++ -*-===//
//
// Internal to codegen. The ops that read or write a plan state (a KV cache,
// a conv window, a delta-rule state, a token history; docs/IR.md) over rows
// that carry their slot and position belong to the families whose math they
// step (kv_store and attention_cached to attention, block_mean_cached and
// qsa_select_cached to qsa, gated_delta_cached to delta, conv1d_cached and
// ngram_hash_cached to row); this header is what their emitters share: the
// state operands' dims and storage, and the kernel's opening.
//
// Rows of one slot must come in increasing positions (Session does so); a
// row outside the state's slots or positions is skipped by the kernels (the
// executor refuses it before any kernel runs).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "codegen/EmitterImpl.h"

#include <cstdint>
#include <string>
#include <vector>

namespace strata::codegen::detail {

/// Threads of a cached kernel's block (the forms that size their own say
/// so).
constexpr int kCachedThreads = 128;

/// A run-time row of T ({coef 1}): the grid dim of a block per row.
extern const format::PlanDim kCachedRows;

/// The dims of a state operand \p i (all constants); throws Unsupported
/// when input \p i is no state.
std::vector<int64_t> stateDims(const Emitter &e, uint32_t i);

/// The storage of a cache state operand: f32, bf16 or i8 (rows of the last
/// dim, each its int8 values then an f32 scale: format::stateBytes).
struct CacheStore {
  format::PlanDType dtype = format::PlanDType::F32;
  std::string ctype = "float"; ///< the pointer's element type
  int64_t len = 1;             ///< values a row (the last dim)
  bool i8() const { return dtype == format::PlanDType::I8; }
  /// Elements (f32, bf16) or bytes (i8) from one row to the next.
  int64_t stride() const { return i8() ? len + 4 : len; }
};

/// The cache state operand \p i; an i8 one makes the source embed
/// runtime/KvQuant.h, the quantisation the CPU backend shares.
CacheStore cacheStore(Emitter &e, uint32_t i);

/// Dim \p d of \p t, which must be a constant.
int64_t constDim(const Tensor &t, size_t d);

/// Checks \p t is an activation element type ld() reads (not quantised,
/// not a body temporary); \p what names it in the diagnostic.
void expectLoadable(const Tensor &t, const char *what);

/// Opens the kernel: its entry line of \p threads threads and the prologue.
void beginCachedKernel(Emitter &e, int threads);

/// The cached ops' emitters, by family (each fills e.code and e.out).
void emitKvStore(Emitter &e, const format::BodyOp &op);
void emitAttentionCached(Emitter &e, const format::BodyOp &op);
void emitBlockMeanCached(Emitter &e, const format::BodyOp &op);
void emitQsaSelectCached(Emitter &e, const format::BodyOp &op);
void emitConv1dCached(Emitter &e, const format::BodyOp &op);
void emitGatedDeltaCached(Emitter &e, const format::BodyOp &op);
void emitGatedDeltaQkvCached(Emitter &e, const format::BodyOp &op);
void emitNgramHashCached(Emitter &e, const format::BodyOp &op);

} // namespace strata::codegen::detail
