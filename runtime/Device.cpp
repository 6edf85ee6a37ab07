//===- Device.cpp - the backend registry ----------------------------------===//
#include "runtime/Device.h"

#include "runtime/cpu/CpuBackend.h"
#include "runtime/gpu/GpuDevice.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>

namespace strata::runtime {

bool Device::loadFunction(const std::string &path, const std::string &symbol,
                          DeviceFunction &, std::string &error) {
  error = fmt::format("backend '{}' runs recipes, not generated code ({} in "
                      "{}): use a GPU backend for a {} plan",
                      name(), symbol, path, "GPU");
  return false;
}

bool Device::launchCode(const CodeLaunch &launch, std::string &error) {
  error = fmt::format("backend '{}' cannot launch generated code ({})", name(),
                      launch.name);
  return false;
}

bool Device::encodeTensorMap(const TensorMapRequest &, TensorMapBytes &,
                             std::string &error) {
  error = fmt::format("backend '{}' has no tensor maps (a TMA feature of "
                      "cuda on sm_90)",
                      name());
  return false;
}

bool Device::beginCapture(std::string &error) {
  error = fmt::format("backend '{}' has no graphs to capture launches into",
                      name());
  return false;
}

bool Device::endCapture(DeviceGraph &, std::string &error) {
  return beginCapture(error);
}

bool Device::launchGraph(const DeviceGraph &, std::string &error) {
  return beginCapture(error);
}

void Device::releaseGraph(DeviceGraph &graph) { graph = DeviceGraph{}; }

bool Device::createEvents(size_t n, std::string &) {
  hostEvents_.assign(n, 0.0);
  return true;
}

bool Device::recordEvent(size_t slot, std::string &error) {
  if (slot >= hostEvents_.size()) {
    error = fmt::format("event slot {} of {}", slot, hostEvents_.size());
    return false;
  }
  if (!synchronize(error))
    return false;
  hostEvents_[slot] = std::chrono::duration<double>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  return true;
}

bool Device::eventSeconds(size_t from, size_t to, double &seconds,
                          std::string &error) {
  if (from >= hostEvents_.size() || to >= hostEvents_.size()) {
    error = fmt::format("event slots {} and {} of {}", from, to,
                        hostEvents_.size());
    return false;
  }
  seconds = hostEvents_[to] - hostEvents_[from];
  return true;
}

std::vector<std::string> deviceNames() {
  std::vector<std::string> names{"cpu"};
  for (std::string &gpu : gpu::gpuBackendNames())
    names.push_back(std::move(gpu));
  return names;
}

std::unique_ptr<Device> createDevice(const std::string &name,
                                     std::string &error,
                                     const DeviceOptions &options) {
  if (name == "cpu")
    return std::make_unique<CpuDevice>(options.threads);
  if (std::ranges::count(gpu::gpuBackendNames(), name))
    return gpu::createGpuDevice(name, error);
  error = fmt::format("unknown backend '{}' (available: {})", name,
                      fmt::join(deviceNames(), ", "));
  return nullptr;
}

} // namespace strata::runtime
