//===- Limits.h - hardware limits the emitters plan with --------*- C++ -*-===//
//
// Every hardware limit a kernel form is sized by comes from the target
// descriptions (runtime/format/Targets.def), never from a literal in an
// emitter. Where one form serves both GPU targets (the portable tiles), its
// limit is the smaller target's, so the form does not depend on the target.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>

namespace strata::codegen {

/// Shared memory a portable kernel declares statically at most: the
/// smallest static limit of the GPU targets (sm_90: CUDA's 48 KiB), less
/// 4 KiB kept for the prelude's own variables; past it a form takes
/// (opt-in) dynamic shared memory.
int64_t staticSharedBudget();

/// The register file of a unit that launch bounds are computed against:
/// the smallest of the GPU targets' (sm_90: 64 Ki 32-bit registers an SM).
int64_t launchBoundRegisters();

/// Shared memory a TMA tile's ring may take on sm_90 with \p blocks blocks
/// an SM: a block's limit (one block) or the SM's shared among the blocks
/// (each less 1 KiB the driver reserves), less each block's 1 KiB
/// alignment slack and its 16 barriers.
int64_t tmaRingBytes(int blocks);

/// Warps a decode form (GEMV) should launch to keep every unit's memory
/// pipe busy: the largest of the GPU targets' units x warps resident at 32
/// registers a lane (sm_90: 132 x 64 = 8,448), so one form serves both.
int64_t decodeWarpSlots();

} // namespace strata::codegen
