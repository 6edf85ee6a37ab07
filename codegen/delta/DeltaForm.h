//===- DeltaForm.h - the gated delta rule's choice of form ------*- C++ -*-===//
//
// Select, then emit, for the gated delta rule (as for attention:
// codegen/attention/AttentionForm.h). The forms (codegen/device/delta/):
//   TwoPass - bf16 q and k, V in column blocks of 32: a pre-launch
//             (delta_prep) writes each chunk's inverse and decays into the
//             workspace, the kernel (delta_seq) runs the chunks in order
//   Mma     - bf16 q and k: one matrix-unit kernel per head and 32 state
//             columns (delta_mma), 32- or 16-token chunks
//   Chunked - f32 (the f32 policy) or unaligned operands: FMA over column
//             blocks, SPLIT threads per column (delta_chunked)
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>

namespace strata::codegen {

/// What selection needs of a gated delta rule kernel.
struct DeltaShape {
  int64_t keyHeads = 0, keyDim = 0, heads = 0, valueDim = 0;
  /// q and k bf16, the key dim a multiple of 32, 16-byte aligned views.
  bool matrixUnits = false;
  /// V's rows copyable by 16-byte pieces (offset and strides aligned).
  bool valueAligned = false;
  int64_t qBytes = 2, kBytes = 2, vBytes = 2; ///< element sizes
};

/// The form a delta rule kernel takes, its tiles, launch and memory.
struct DeltaForm {
  enum class Kind { TwoPass, Mma, Chunked } kind = Kind::Chunked;
  int64_t chunk = 32; ///< tokens a chunk
  int64_t threads = 128;
  uint64_t sharedBytes = 0; ///< the kernel's dynamic shared memory
  // TwoPass.
  int buffers = 1;              ///< stages of the sequential pass
  uint64_t prepSharedBytes = 0; ///< the pre-launch's
  int64_t recordBytes = 0;      ///< workspace a chunk and head
  // Chunked.
  int rows = 0, split = 0, columns = 0; ///< R, SPLIT, NCOL
  /// Why no form fits ("" when one does).
  std::string unsupported;
};

/// "two-pass", "mma" or "chunked".
const char *deltaFormName(DeltaForm::Kind kind);

/// The form \p shape takes on \p target ("gfx1151" or "sm_90").
DeltaForm selectDelta(const DeltaShape &shape, const std::string &target);

} // namespace strata::codegen
