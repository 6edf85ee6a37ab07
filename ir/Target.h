//===- Target.h - target descriptions and kernel variants -------*- C++ -*-===//
//
// Targets (Targets.def) and their matmul/expert kernel variants
// (KernelVariants.def) are data: select-expert-kernels, the precision
// policy and the report read them; nothing else knows a target's numbers.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/GgmlType.h"

#include <string>
#include <string_view>
#include <vector>

namespace strata::ir {

/// A compilation target.
struct Target {
  const char *name;
  bool gpu;
  int waveSize;
  int units;
  int64_t sharedPerBlock, sharedPerUnit, regsPerUnit;
  double memGBs;       ///< streaming bandwidth to plan with
  double vecF32Tflops; ///< vector f32 peak
  double matF16Tflops; ///< matrix f16/bf16 peak
  double matI8Tops;    ///< matrix int8 peak (0 = none)
  /// Shared memory a kernel may declare statically (beyond it: opt-in
  /// dynamic shared memory).
  int64_t staticSharedPerBlock;
  bool tensorMaps; ///< plans may carry tensor maps (TMA descriptors)
};

/// Every target, in Targets.def order.
const std::vector<Target> &allTargets();
/// The target spelled \p name, or nullptr.
const Target *lookupTarget(std::string_view name);
/// "host, gfx1151, sm_90".
std::string targetNames();

/// The matrix path a variant runs on.
enum class MatrixPath { F16, I8, F32 };

/// A matmul / expert GEMM kernel variant of one target.
struct KernelVariant {
  const Target *target;
  const char *name;
  MatrixPath path;
  int tileM, tileN, tileK;
  double efficiency; ///< of the path's peak, for full tiles
  std::vector<format::GgmlType> types;

  /// The path's peak on the target, TFLOP/s (TOPS for I8).
  double peakTflops() const;
  bool decodes(format::GgmlType t) const;
};

/// A tile the code generator takes by rule (KernelVariants.def's FORM
/// rows): alternates for long runs and special shapes.
struct KernelForm {
  const Target *target;
  const char *name;
  MatrixPath path;
  int tileM, tileN, tileK; ///< rows exactly; the widest columns
  int threads;
  int passes;        ///< products run per FLOP counted (split terms: 3)
  double efficiency; ///< of the path's peak, for full tiles

  /// The path's peak on the target, TFLOP/s (TOPS for I8).
  double peakTflops() const;
};

/// The form rows of \p target, in KernelVariants.def order.
std::vector<const KernelForm *> formsOf(const Target &target);
/// The form named \p name of \p target; throws std::logic_error when the
/// table has none (the code generator asks only for rows it was written
/// against).
const KernelForm &formRow(const Target &target, std::string_view name);

/// The variants of \p target, in KernelVariants.def order.
std::vector<const KernelVariant *> variantsOf(const Target &target);
/// The variant named \p name of \p target, or nullptr.
const KernelVariant *lookupVariant(const Target &target, std::string_view name);

/// One GEMM as the variants' cost model sees it (select-expert-kernels, at
/// a plan's largest run).
struct GemmCost {
  format::GgmlType type = format::GgmlType::F32; ///< the weight's
  double rows = 0;        ///< M of each stack (an expert's rows)
  double n = 0, k = 0;    ///< of each stack
  double stacks = 1;      ///< experts, each a GEMM of `rows` rows
  double weightBytes = 0; ///< of every stack
};

/// Predicted seconds of \p g by \p v: (time, compute time), where
///   compute = 2 Mpad N K stacks / (path peak x efficiency), Mpad = M
///             rounded up to the variant's row tile (small M wastes tiles);
///             for quantised expert stacks at least their decode, N K
///             stacks values once per row tile at the vector units' rate
///             (kDecodeFlopsPerValue) x efficiency
///   memory  = (weight bytes + bf16 activations in and out) / bandwidth,
///             plus the int8 path's pass that quantises the activations
///   time    = max(compute, memory).
std::pair<double, double> predictGemm(const KernelVariant &v,
                                      const GemmCost &g);

/// The variant of \p target that decodes g.type with the least predicted
/// time (between equal times, memory-bound GEMMs, the least compute time,
/// which leaves the units free for others), of path \p only where given;
/// nullptr where none decodes it.
const KernelVariant *cheapestVariant(const Target &target, const GemmCost &g,
                                     const MatrixPath *only = nullptr);

} // namespace strata::ir
