//===- FakeGpuDriver.h - the fake driver a test sees ------------*- C++ -*-===//
//
// FakeGpuDriver.cpp is a shared library exporting every entry point of
// runtime/gpu/CudaSymbols.def and HipSymbols.def, implemented on host memory
// (device addresses are host addresses), so the GPU backends run their
// whole flow where no GPU is. A test loads the library by the same path as
// the backend (dlopen gives the same object) and reads or steers one
// vendor's state through fakeCudaState() / fakeHipState().
//
// Module images are text: a first line starting "FAKE", then one
// "<symbol> <parameters> [<op> [<width>]]" line per function (parameters: a
// count of 8-byte values, or their sizes listed, "8,128,8", where 128 is a
// tensor map); a launch copies the argument values (a tensor map as its 16
// words) and, when it runs, applies the op to
// host memory (float32; `width` elements per row, default 1):
//   axpy  (x, y, n):        y[i] = 2 x[i] + y[i]          for i < n*width
//   rows  (table, ids, out, n): out row r = table row ids[r] (int32), r < n
//   scale (in, out, n [, a tensor map]): out[i] = 2 in[i] + 1, i < n*width
// Streams capture launches only: a copy, fill, event or wait on a capturing
// stream (or an allocation during a capture) fails and invalidates it, as a
// driver does for what cannot be captured. A graph launch runs its recorded
// launches in order.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace strata::runtime::test {

/// One launch the fake received.
struct FakeLaunch {
  std::string function;
  uint32_t grid[3] = {};
  uint32_t block[3] = {};
  uint32_t sharedBytes = 0;
  std::vector<uint64_t> args; ///< each parameter's 8-byte value, in order
  /// cuda: launched by cuLaunchKernelEx with programmatic stream
  /// serialisation allowed (it may overlap the launch before it).
  bool overlap = false;
};

/// One cuTensorMapEncodeTiled call the fake accepted. The 128 bytes it
/// writes are words {kFakeTensorMapMagic, index in tensorMaps, address, 0,
/// ...}, so a test can tell which map a launch received.
struct FakeTensorMap {
  int type = 0;
  unsigned rank = 0;
  uint64_t address = 0;
  uint64_t dims[5] = {};
  uint64_t strides[4] = {};
  unsigned box[5] = {};
  int swizzle = 0, l2Promotion = 0, oobFill = 0;
};
constexpr uint64_t kFakeTensorMapMagic = 0x50414d524f534e45ull; // "ENSORMAP"

/// One vendor's fake device.
struct FakeGpuState {
  bool initialized = false; ///< cuInit / hipInit was called
  int contextRefs = 0;      ///< cuda: primary context retains - releases
  int binds = 0;            ///< cuCtxSetCurrent / hipSetDevice calls
  std::map<uint64_t, uint64_t> allocations; ///< live: address -> bytes
  int uploads = 0;                          ///< host-to-device copies
  int copies = 0;                           ///< device-to-device copies
  int fills = 0;                            ///< fill32 calls
  std::vector<std::string> modules;         ///< every image loaded, in order
  int moduleUnloads = 0;
  /// Every launch that ran (plain or replayed from a graph), in order.
  std::vector<FakeLaunch> launches;
  int liveStreams = 0;
  std::vector<unsigned> streamFlags; ///< of each stream created, in order
  int captures = 0;                  ///< capture sequences begun
  int captureMode = -1;              ///< the mode of the last one
  int liveGraphs = 0;                ///< captured, not yet destroyed
  int liveGraphExecs = 0;            ///< instantiated, not yet destroyed
  int graphLaunches = 0;
  /// cuda: every tensor map encoded, in order.
  std::vector<FakeTensorMap> tensorMaps;
  /// cuda: (function, bytes) of each dynamic shared memory opt-in.
  std::vector<std::pair<std::string, int>> sharedOptIns;
  int liveEvents = 0;
  /// The device clock events read: every launch takes kFakeLaunchMs.
  double clockMs = 0;
  /// The next call of this entry point fails with failCode.
  std::string failCall;
  int failCode = 0;
};

/// Milliseconds each fake launch takes on the fake clock.
constexpr double kFakeLaunchMs = 1.25;

} // namespace strata::runtime::test

extern "C" strata::runtime::test::FakeGpuState *fakeCudaState();
extern "C" strata::runtime::test::FakeGpuState *fakeHipState();
