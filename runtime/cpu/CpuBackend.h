//===- CpuBackend.h - the CPU reference backend -----------------*- C++ -*-===//
//
// Simple, obviously correct reference code for every op of the op table
// (Ops.def); its numerics define the recipes (the GPU backends are checked
// against it). Host memory, at most two threads.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Device.h"

namespace strata::runtime {

/// Runs one launch on host memory with up to \p threads threads (1 or 2),
/// synchronously. On an inconsistent launch returns false and sets \p error
/// (without a kernel prefix; the executor adds "kernel N (recipe): ").
/// Results do not depend on \p threads.
bool runCpuKernel(const Launch &launch, std::string &error, int threads = 2);

/// The `cpu` Device: host allocations, synchronous launches.
class CpuDevice : public Device {
public:
  /// \p threads workers per kernel; 0 = one per hardware thread.
  explicit CpuDevice(int threads = 0);

  const char *name() const override { return "cpu"; }
  bool supports(format::Recipe r) const override;
  void *alloc(uint64_t bytes, std::string &error) override;
  void release(void *ptr) override;
  bool fill32(void *dst, uint32_t pattern, uint64_t bytes,
              std::string &error) override;
  bool upload(void *dst, const void *src, uint64_t bytes,
              std::string &error) override;
  bool download(void *dst, const void *src, uint64_t bytes,
                std::string &error) override;
  bool copy(void *dst, const void *src, uint64_t bytes,
            std::string &error) override;
  void *mapWeight(const void *host, uint64_t bytes,
                  std::string &error) override;
  bool launch(const Launch &launch, std::string &error) override;
  bool synchronize(std::string &error) override { return true; }

private:
  int threads_;
};

} // namespace strata::runtime
