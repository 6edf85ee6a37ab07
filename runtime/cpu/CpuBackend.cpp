//===- CpuBackend.cpp - the cpu Device and the recipe dispatch ------------===//
#include "runtime/cpu/CpuBackend.h"

#include "runtime/cpu/CpuKernel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

namespace strata::runtime {

namespace {

using KernelFn = void (*)(cpu::KernelCtx &);

/// One entry per op of the op table, in its order (Ops.def).
constexpr KernelFn kKernels[] = {
#define OP(Id, Mnemonic, MinOperands, MaxOperands, NumResults, Attrs, Rule,    \
           Cost, Class)                                                        \
  &cpu::run##Id,
#include "runtime/format/Ops.def"
};

} // namespace

bool runCpuKernel(const Launch &launch, std::string &error, int threads) {
  try {
    cpu::KernelCtx ctx(launch, threads < 1 ? 1 : threads);
    kKernels[static_cast<size_t>(launch.recipe)](ctx);
    ctx.commit();
    return true;
  } catch (const cpu::KernelError &e) {
    error = e.what();
  } catch (const std::bad_alloc &) {
    error = "out of memory for the kernel's scratch space";
  } catch (const std::exception &e) {
    error = fmt::format("internal error: {}", e.what());
  }
  return false;
}

CpuDevice::CpuDevice(int threads)
    : threads_(threads > 0
                   ? threads
                   : std::max(1, static_cast<int>(
                                     std::thread::hardware_concurrency()))) {}

bool CpuDevice::supports(format::Recipe r) const {
  return static_cast<size_t>(r) < std::size(kKernels);
}

void *CpuDevice::alloc(uint64_t bytes, std::string &error) {
  uint64_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0)
    rounded = 64;
  void *p = rounded < bytes ? nullptr : std::aligned_alloc(64, rounded);
  if (!p)
    error = fmt::format("cannot allocate {} bytes of host memory", bytes);
  return p;
}

void CpuDevice::release(void *ptr) { std::free(ptr); }

bool CpuDevice::fill32(void *dst, uint32_t pattern, uint64_t bytes,
                       std::string &error) {
  if (bytes % 4 != 0) {
    error = fmt::format("fill32 of {} bytes, not a multiple of 4", bytes);
    return false;
  }
  uint8_t *p = static_cast<uint8_t *>(dst);
  for (uint64_t i = 0; i < bytes; i += 4)
    std::memcpy(p + i, &pattern, 4);
  return true;
}

bool CpuDevice::upload(void *dst, const void *src, uint64_t bytes,
                       std::string &error) {
  std::memcpy(dst, src, bytes);
  return true;
}

bool CpuDevice::download(void *dst, const void *src, uint64_t bytes,
                         std::string &error) {
  std::memcpy(dst, src, bytes);
  return true;
}

bool CpuDevice::copy(void *dst, const void *src, uint64_t bytes,
                     std::string &error) {
  std::memcpy(dst, src, bytes);
  return true;
}

void *CpuDevice::mapWeight(const void *host, uint64_t bytes,
                           std::string &error) {
  // Kernels only read weights; the mapping stays read-only.
  return const_cast<void *>(host);
}

bool CpuDevice::launch(const Launch &launch, std::string &error) {
  return runCpuKernel(launch, error, threads_);
}

} // namespace strata::runtime
