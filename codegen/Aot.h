//===- Aot.h - ahead-of-time compilation of a plan's kernels ----*- C++ -*-===//
//
// Emits every kernel of a GPU plan (KernelEmitter), writes the sources into
// the plan directory, compiles each distinct specialisation once with
// clang-19 (gfx1151: a code object; sm_90: PTX and, where ptxas is installed,
// a cubin) in parallel behind a cache keyed by a hash of source, flags and
// compiler, and fills each kernel's `code` (module, symbol, launch, args).
// No vendor SDK is involved.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/format/Plan.h"

#include <string>

namespace strata::codegen {

/// How to compile.
struct AotOptions {
  std::string clang = "clang-19"; ///< the device compiler
  std::string ptxas;              ///< "" = look for it; "none" = skip cubins
  std::string cacheDir;           ///< "" = $XDG_CACHE_HOME or ~/.cache
  int jobs = 0;                   ///< parallel compiles; 0 = one per core
  bool progress = true;           ///< a progress line on stderr
};

/// What a compile did, for the report and tests.
struct AotStats {
  size_t kernels = 0;  ///< plan kernels given code
  size_t distinct = 0; ///< distinct specialisations (modules)
  size_t compiled = 0; ///< compiled now (cache misses)
  size_t cached = 0;   ///< taken from the cache
  double seconds = 0;
  bool cubins = false; ///< sm_90: ptxas made cubins
};

/// The default cache folder: $XDG_CACHE_HOME/strata-compile or
/// ~/.cache/strata-compile.
std::string defaultCacheDir();

/// Generates and compiles code for every kernel of \p plan (target gfx1151
/// or sm_90) into \p planDir/kernels and fills each kernel's `code`. On
/// failure returns false with \p error naming the kernel and the emitted
/// file (and the compiler's first lines); nothing is left half-written in
/// the cache.
bool compileKernels(format::Plan &plan, const std::string &planDir,
                    const AotOptions &options, AotStats &stats,
                    std::string &error);

} // namespace strata::codegen
