//===- Target.cpp - target descriptions and kernel variants ---------------===//
#include "ir/Target.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

namespace strata::ir {

namespace {

enum class TargetId {
#define TARGET(Id, Name, Gpu, WaveSize, Units, SharedPerBlock, SharedPerUnit,  \
               RegsPerUnit, MemGBs, VecF32, MatF16, MatI8, TensorMaps,         \
               StaticShared)                                                   \
  Id,
#include "runtime/format/Targets.def"
};

struct VariantRow {
  TargetId target;
  const char *name;
  MatrixPath path;
  int tileM, tileN, tileK;
  double efficiency;
  const char *types;
};

constexpr VariantRow kVariantRows[] = {
#define VARIANT(Target, Name, Path, TileM, TileN, TileK, Efficiency, Types)    \
  {TargetId::Target, Name, MatrixPath::Path, TileM, TileN, TileK,              \
   Efficiency,       Types},
#include "ir/KernelVariants.def"
};

struct FormRow {
  TargetId target;
  const char *name;
  MatrixPath path;
  int tileM, tileN, tileK, threads, passes;
  double efficiency;
};

constexpr FormRow kFormRows[] = {
#define VARIANT(Target, Name, Path, TileM, TileN, TileK, Efficiency, Types)
#define FORM(Target, Name, Path, TileM, TileN, TileK, Threads, Passes,         \
             Efficiency)                                                       \
  {TargetId::Target, Name,   MatrixPath::Path, TileM, TileN, TileK,            \
   Threads,          Passes, Efficiency},
#include "ir/KernelVariants.def"
};

} // namespace

const std::vector<Target> &allTargets() {
  static const std::vector<Target> kTargets = {
#define TARGET(Id, Name, Gpu, WaveSize, Units, SharedPerBlock, SharedPerUnit,  \
               RegsPerUnit, MemGBs, VecF32, MatF16, MatI8, TensorMaps,         \
               StaticShared)                                                   \
  {Name,          Gpu != 0,     WaveSize,       Units,  SharedPerBlock,        \
   SharedPerUnit, RegsPerUnit,  MemGBs,         VecF32, MatF16,                \
   MatI8,         StaticShared, TensorMaps != 0},
#include "runtime/format/Targets.def"
  };
  return kTargets;
}

const Target *lookupTarget(std::string_view name) {
  for (const Target &t : allTargets())
    if (name == t.name)
      return &t;
  return nullptr;
}

std::string targetNames() {
  std::string s;
  for (const Target &t : allTargets())
    s += (s.empty() ? "" : ", ") + std::string(t.name);
  return s;
}

/// The peak of \p path on \p t, TFLOP/s (TOPS for I8).
static double pathPeak(const Target &t, MatrixPath path) {
  switch (path) {
  case MatrixPath::F16:
    return t.matF16Tflops;
  case MatrixPath::I8:
    return t.matI8Tops;
  case MatrixPath::F32:
    return t.vecF32Tflops;
  }
  return 0;
}

double KernelVariant::peakTflops() const { return pathPeak(*target, path); }

double KernelForm::peakTflops() const { return pathPeak(*target, path); }

bool KernelVariant::decodes(format::GgmlType t) const {
  for (format::GgmlType u : types)
    if (u == t)
      return true;
  return false;
}

static const std::vector<KernelVariant> &allVariants() {
  static const std::vector<KernelVariant> kVariants = [] {
    std::vector<KernelVariant> all;
    for (const VariantRow &r : kVariantRows) {
      KernelVariant v{&allTargets()[static_cast<size_t>(r.target)],
                      r.name,
                      r.path,
                      r.tileM,
                      r.tileN,
                      r.tileK,
                      r.efficiency,
                      {}};
      std::istringstream types(r.types);
      std::string t;
      while (types >> t)
        if (auto info = format::ggmlTypeFromIrName(t))
          v.types.push_back(info->type);
      all.push_back(std::move(v));
    }
    return all;
  }();
  return kVariants;
}

std::vector<const KernelVariant *> variantsOf(const Target &target) {
  std::vector<const KernelVariant *> out;
  for (const KernelVariant &v : allVariants())
    if (v.target == &target)
      out.push_back(&v);
  return out;
}

static const std::vector<KernelForm> &allForms() {
  static const std::vector<KernelForm> kForms = [] {
    std::vector<KernelForm> all;
    for (const FormRow &r : kFormRows)
      all.push_back({&allTargets()[static_cast<size_t>(r.target)], r.name,
                     r.path, r.tileM, r.tileN, r.tileK, r.threads, r.passes,
                     r.efficiency});
    return all;
  }();
  return kForms;
}

std::vector<const KernelForm *> formsOf(const Target &target) {
  std::vector<const KernelForm *> out;
  for (const KernelForm &f : allForms())
    if (f.target == &target)
      out.push_back(&f);
  return out;
}

const KernelForm &formRow(const Target &target, std::string_view name) {
  for (const KernelForm *f : formsOf(target))
    if (name == f->name)
      return *f;
  throw std::logic_error("KernelVariants.def has no form " + std::string(name) +
                         " for " + target.name);
}

const KernelVariant *lookupVariant(const Target &target,
                                   std::string_view name) {
  for (const KernelVariant *v : variantsOf(target))
    if (name == v->name)
      return v;
  return nullptr;
}

/// Vector f32 FLOPs a tile spends decoding one quantised weight value to
/// the matrix type and staging it (a Q4_K value to bf16, its store to and
/// read from shared memory), calibrated on the H100 from the grouped
/// experts of the 30B-A3B Qwen3-MoE at 32 rows an expert
/// (bench/results/pp-rows-ab-20261207T024106Z-h100.txt): the 128-row tile
/// decoded 403 M values a layer in 233 us, the 16-row tile each twice in
/// 654 us, i.e. 67 TFLOP/s x efficiency / rate = 35 and 33. Other block
/// types and gfx1151 (scaled by its vector peak) are unmeasured.
constexpr double kDecodeFlopsPerValue = 34;

std::pair<double, double> predictGemm(const KernelVariant &v,
                                      const GemmCost &g) {
  double padded = std::ceil(g.rows / v.tileM) * v.tileM;
  double flops = 2 * padded * g.n * g.k * g.stacks;
  double compute = flops / (v.peakTflops() * 1e12 * v.efficiency);
  // A tile decodes its weights once per row tile: quantised expert stacks
  // of a few dozen rows an expert are bound by that decode, not by the
  // matrix units, so a taller tile that pads more rows can take less time.
  // Stacks only: there experts x column tiles fill the GPU whatever the
  // tile, while a dense GEMM of few rows has N / tileN blocks, and which
  // tile wins there turns on how many blocks fill the units (a term this
  // model lacks; unmeasured).
  if (g.stacks > 1 && format::ggmlTypeInfo(g.type).blockSize > 1) {
    double decoded = std::ceil(g.rows / v.tileM) * g.n * g.k * g.stacks;
    double rate = v.target->vecF32Tflops * 1e12 / kDecodeFlopsPerValue;
    compute = std::max(compute, decoded / (rate * v.efficiency));
  }
  double act = g.rows * g.stacks * (g.k + g.n) * 2; // bf16 in and out
  double bytes = g.weightBytes + act;
  if (v.path == MatrixPath::I8)
    bytes += g.rows * g.stacks * g.k * (2 + 1); // quantise activations
  return {std::max(compute, bytes / (v.target->memGBs * 1e9)), compute};
}

const KernelVariant *cheapestVariant(const Target &target, const GemmCost &g,
                                     const MatrixPath *only) {
  const KernelVariant *best = nullptr;
  std::pair<double, double> bestTime;
  for (const KernelVariant *v : variantsOf(target)) {
    if (!v->decodes(g.type) || (only && v->path != *only))
      continue;
    std::pair<double, double> t = predictGemm(*v, g);
    bool better =
        !best || t.first < bestTime.first * (1 - 1e-9) ||
        (t.first <= bestTime.first * (1 + 1e-9) && t.second < bestTime.second);
    if (better)
      best = v, bestTime = t;
  }
  return best;
}

} // namespace strata::ir
