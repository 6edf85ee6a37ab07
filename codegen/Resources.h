//===- Resources.h - per-kernel resource usage and occupancy ----*- C++ -*-===//
//
// What each compiled kernel uses (registers, LDS / shared memory, scratch,
// spills) read from the compiler's own output: the AMDGPU metadata note of a
// gfx1151 code object and ptxas' -v report for sm_90. From those, resident
// waves / warps per SIMD / SM follow from the target description, so
// `strata-compile --report` can show occupancy before any hardware is
// touched. No LLVM header leaks out of this file: only Resources.cpp links
// LLVM.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace strata::codegen {

/// The resources one compiled kernel needs, as its compiler reported them.
/// Fields a target does not report keep their "unknown" default (-1 for
/// counts, 0 for byte sizes and spill counts).
struct KernelResources {
  /// The kernel's function name, as a launch looks it up (gfx1151: the
  /// metadata `.name`, without the `.kd` of the descriptor symbol; sm_90:
  /// the PTX entry name).
  std::string symbol;
  /// gfx1151: VGPRs per lane (`.vgpr_count`); they bound waves per SIMD.
  int vgprs = -1;
  /// sm_90: registers per thread (ptxas "Used N registers"); they bound
  /// warps per SM.
  int registers = -1;
  /// gfx1151: SGPRs per wave (`.sgpr_count`); reported, but on gfx10+ every
  /// wave gets a fixed SGPR block, so they do not limit occupancy.
  int sgprs = -1;
  /// Static LDS (gfx1151, `.group_segment_fixed_size`) or static shared
  /// memory (sm_90, "N bytes smem") per workgroup / block, bytes.
  uint64_t sharedBytes = 0;
  /// Per-lane private segment (gfx1151, `.private_segment_fixed_size`) or
  /// local-memory stack (sm_90, cumulative stack size when ptxas prints it,
  /// else the stack frame), bytes. Non-zero means slow scratch traffic.
  uint64_t scratchBytes = 0;
  /// gfx1151: VGPRs spilled to scratch (`.vgpr_spill_count`).
  int vgprSpills = 0;
  /// gfx1151: SGPRs spilled (`.sgpr_spill_count`).
  int sgprSpills = 0;
  /// sm_90: bytes stored to local memory by register spills, per thread.
  uint64_t spillStoreBytes = 0;
  /// sm_90: bytes loaded back from local memory by register spills.
  uint64_t spillLoadBytes = 0;
  /// Lanes per wave / warp (`.wavefront_size`; 32 for sm_90), -1 unknown.
  int waveSize = -1;
  /// Largest workgroup the kernel was compiled for
  /// (`.max_flat_workgroup_size`); -1 where the compiler does not say.
  int maxFlatWorkgroupSize = -1;
};

/// Reads every kernel's resources from the AMDGPU metadata note
/// (NT_AMDGPU_METADATA, owner "AMDGPU") of the code object at \p path, in
/// `amdhsa.kernels` order, appending to \p out. Returns false with \p error
/// naming the file if it cannot be read, is not an AMDGPU ELF, has no
/// metadata note or the note is malformed; \p out is then unchanged.
bool readAmdgpuCodeObject(const std::string &path,
                          std::vector<KernelResources> &out,
                          std::string &error);

/// Parses the stderr of `ptxas -v` (one entry per "Compiling entry function"
/// line, in that order), appending to \p out. Device functions' properties
/// are skipped: their cost is in the calling entry's cumulative stack size.
/// Returns false with \p error if a line that should carry numbers does not,
/// or no entry function is found; \p out is then unchanged.
bool parsePtxasInfo(const std::string &text, std::vector<KernelResources> &out,
                    std::string &error);

/// Waves per SIMD on gfx1151 for \p r launched with \p blockThreads threads
/// per workgroup (wave32, WGP mode): limited by the 16 wave slots, VGPRs and
/// LDS, counted in whole workgroups. 0 if one workgroup cannot be resident;
/// -1 if \p r.vgprs is unknown or the wave size is not 32.
int occupancyGfx1151(const KernelResources &r, int blockThreads);

/// Resident warps per SM on sm_90 for \p r launched with \p blockThreads
/// threads per block: limited by 64 warps, 32 blocks, registers and shared
/// memory, counted in whole blocks. 0 if one block cannot be resident; -1 if
/// \p r.registers is unknown.
int occupancySm90(const KernelResources &r, int blockThreads);

/// Why one block of \p blockThreads threads with resources \p r cannot be
/// resident on \p target ("gfx1151" or "sm_90") at all (occupancy 0), as a
/// sentence naming what it asks for and the limits; "" if it can, or if the
/// resources are unknown.
std::string launchProblem(const KernelResources &r, int blockThreads,
                          const std::string &target);

} // namespace strata::codegen
