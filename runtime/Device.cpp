//===- Device.cpp - the backend registry ----------------------------------===//
#include "runtime/Device.h"

#include "runtime/cpu/CpuBackend.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace strata::runtime {

std::vector<std::string> deviceNames() { return {"cpu"}; }

std::unique_ptr<Device> createDevice(const std::string &name,
                                     std::string &error,
                                     const DeviceOptions &options) {
  if (name == "cpu")
    return std::make_unique<CpuDevice>(options.threads);
  if (name == "cuda" || name == "hip")
    error = fmt::format("backend '{}' is not built into this runtime yet "
                        "(available: {})",
                        name, fmt::join(deviceNames(), ", "));
  else
    error = fmt::format("unknown backend '{}' (available: {})", name,
                        fmt::join(deviceNames(), ", "));
  return nullptr;
}

} // namespace strata::runtime
