//===- GpuDevice.h - the cuda and hip backends ------------------*- C++ -*-===//
//
// Both GPU backends are one class template, GpuDevice<Api>, over a traits
// struct per vendor (CudaApi.h, HipApi.h) that names the driver library,
// loads its symbol table (CudaSymbols.def, HipSymbols.def) and wraps each
// driver call. Everything else (dlopen, memory bookkeeping, the module
// cache, argument marshalling, the event pool, graphs, messages) is written
// once.
//
// GPU backends run the plan's generated code (loadFunction, launchCode);
// they implement no recipe. Each device owns one non-blocking stream that
// every copy, fill, launch, event and graph goes to, in call order; copies
// wait for it, so they keep Device's synchronous contract.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Device.h"

#include <memory>
#include <string>
#include <vector>

namespace strata::runtime::gpu {

/// The GPU backends this build knows, in preference order ("cuda", "hip").
std::vector<std::string> gpuBackendNames();

/// Creates GPU backend \p name, device 0. Returns null and sets \p error
/// when \p name is no GPU backend or when its driver library (overridable
/// through $STRATA_CUDA_LIBRARY / $STRATA_HIP_LIBRARY), a symbol of it or
/// the device cannot be opened.
std::unique_ptr<Device> createGpuDevice(const std::string &name,
                                        std::string &error);

} // namespace strata::runtime::gpu
