//===- GpuBackendTest.cpp - the cuda and hip backends ---------------------===//
//
// CI has no GPU and no driver: the backends are pointed (through
// $STRATA_CUDA_LIBRARY / $STRATA_HIP_LIBRARY) at FakeGpuDriver.cpp, which
// implements both vendors' symbol tables on host memory, and every Device
// call is checked against what the fake saw. The RealCuda tests run a
// hand-written PTX kernel through libcuda.so.1 where a driver is present
// and are skipped elsewhere.
//
//===----------------------------------------------------------------------===//
#include "FakeGpuDriver.h"

#include "runtime/Device.h"
#include "runtime/Executor.h"
#include "runtime/format/Gguf.h"
#include "runtime/format/OpTable.h"
#include "runtime/gpu/Driver.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

using namespace strata::runtime;
using namespace strata::runtime::test;
namespace fs = std::filesystem;
namespace format = strata::format;

namespace {

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

/// "backend 'cuda'", the start of every message of a backend.
std::string tag(const char *backend) {
  return std::string("backend '") + backend + "'";
}

class TempDir {
public:
  TempDir() {
    std::string templ = ::testing::TempDir() + "strata-gpu-test-XXXXXX";
    EXPECT_NE(::mkdtemp(templ.data()), nullptr);
    path = templ;
  }
  ~TempDir() { fs::remove_all(path); }
  /// Writes \p text to \p name and returns its path.
  std::string write(const std::string &name, const std::string &text) const {
    std::string file = path + "/" + name;
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }
  std::string path;
};

/// What differs between the vendors, as the tests see it.
struct Vendor {
  const char *name;
  const char *env;
  const char *target;
  const char *description;
  const char *stateFn;
  const char *initCall;
  const char *allocCall;
  const char *downloadCall;
  const char *syncCall;
  const char *getFunctionCall;
  const char *launchCall;
  const char *elapsedCall;
  const char *beginCaptureCall;
  const char *instantiateCall;
  const char *allocSymbol; ///< called directly to break a capture
  const char *outOfMemory;
  const char *launchFailure;
};

const Vendor kCuda = {
    .name = "cuda",
    .env = "STRATA_CUDA_LIBRARY",
    .target = "sm_90",
    .description = "cuda: Fake CUDA GPU (driver 12.4)",
    .stateFn = "fakeCudaState",
    .initCall = "cuInit",
    .allocCall = "cuMemAlloc_v2",
    .downloadCall = "cuMemcpyDtoHAsync_v2",
    .syncCall = "cuStreamSynchronize",
    .getFunctionCall = "cuModuleGetFunction",
    .launchCall = "cuLaunchKernel",
    .elapsedCall = "cuEventElapsedTime",
    .beginCaptureCall = "cuStreamBeginCapture_v2",
    .instantiateCall = "cuGraphInstantiateWithFlags",
    .allocSymbol = "cuMemAlloc_v2",
    .outOfMemory = "CUDA_ERROR_OUT_OF_MEMORY = 2",
    .launchFailure = "CUDA_ERROR_LAUNCH_FAILED = 719",
};

const Vendor kHip = {
    .name = "hip",
    .env = "STRATA_HIP_LIBRARY",
    .target = "gfx1151",
    .description = "hip: Fake HIP GPU (driver 60342134)",
    .stateFn = "fakeHipState",
    .initCall = "hipInit",
    .allocCall = "hipMalloc",
    .downloadCall = "hipMemcpyDtoHAsync",
    .syncCall = "hipStreamSynchronize",
    .getFunctionCall = "hipModuleGetFunction",
    .launchCall = "hipModuleLaunchKernel",
    .elapsedCall = "hipEventElapsedTime",
    .beginCaptureCall = "hipStreamBeginCapture",
    .instantiateCall = "hipGraphInstantiate",
    .allocSymbol = "hipMalloc",
    .outOfMemory = "hipErrorOutOfMemory = 2",
    .launchFailure = "hipErrorLaunchFailure = 719",
};

void PrintTo(const Vendor &v, std::ostream *os) { *os << v.name; }

/// Every test runs against the fake driver for one vendor.
class GpuBackend : public ::testing::TestWithParam<Vendor> {
protected:
  void SetUp() override {
    ::setenv(GetParam().env, STRATA_FAKE_GPU_DRIVER, 1);
    // The backend dlopens the same path, so this is the same object.
    lib = ::dlopen(STRATA_FAKE_GPU_DRIVER, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(lib, nullptr) << ::dlerror();
    auto state =
        reinterpret_cast<FakeGpuState *(*)()>(::dlsym(lib, GetParam().stateFn));
    ASSERT_NE(state, nullptr) << GetParam().stateFn;
    fake = state();
    *fake = FakeGpuState{};
  }
  void TearDown() override { ::unsetenv(GetParam().env); }

  /// Creates the backend on the fake driver.
  std::unique_ptr<Device> open() {
    std::string error;
    std::unique_ptr<Device> dev = createDevice(GetParam().name, error);
    EXPECT_NE(dev, nullptr) << error;
    return dev;
  }

  /// Loads \p symbol from a fake module file holding \p text.
  DeviceFunction load(Device &dev, const TempDir &dir, const std::string &text,
                      const std::string &symbol) {
    DeviceFunction fn;
    std::string error;
    EXPECT_TRUE(dev.loadFunction(dir.write("k.ptx", text), symbol, fn, error))
        << error;
    return fn;
  }

  FakeGpuState *fake = nullptr;
  void *lib = nullptr; ///< the fake driver
};

INSTANTIATE_TEST_SUITE_P(Vendors, GpuBackend, ::testing::Values(kCuda, kHip),
                         [](const auto &info) {
                           return std::string(info.param.name);
                         });

TEST_P(GpuBackend, MissingLibraryIsNamed) {
  std::string path =
      std::string("/nonexistent/") + (GetParam().name == std::string("cuda")
                                          ? "libcuda.so.1"
                                          : "libamdhip64.so");
  ::setenv(GetParam().env, path.c_str(), 1);
  std::string error;
  EXPECT_EQ(createDevice(GetParam().name, error), nullptr);
  EXPECT_TRUE(contains(error, tag(GetParam().name))) << error;
  EXPECT_TRUE(contains(error, "cannot load " + path)) << error;
  EXPECT_TRUE(contains(error, std::string("$") + GetParam().env)) << error;
  EXPECT_TRUE(contains(error, "No such file")) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST_P(GpuBackend, MissingSymbolIsNamed) {
  // The C library exists everywhere and has no driver entry point.
  ::setenv(GetParam().env, "libc.so.6", 1);
  std::string error;
  EXPECT_EQ(createDevice(GetParam().name, error), nullptr);
  EXPECT_TRUE(contains(error, tag(GetParam().name) +
                                  ": libc.so.6 has no symbol " +
                                  GetParam().initCall))
      << error;
}

TEST_P(GpuBackend, DriverInitFailureIsAMessage) {
  fake->failCall = GetParam().initCall;
  fake->failCode = 100;
  std::string error;
  EXPECT_EQ(createDevice(GetParam().name, error), nullptr);
  EXPECT_TRUE(contains(error, tag(GetParam().name) + ": initialising " +
                                  STRATA_FAKE_GPU_DRIVER + ": " +
                                  GetParam().initCall +
                                  " failed: no GPU device is detected"))
      << error;
}

TEST_P(GpuBackend, NamesItsTargetAndRunsNoRecipe) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  EXPECT_STREQ(dev->name(), GetParam().name);
  EXPECT_STREQ(dev->codeTarget(), GetParam().target);
  EXPECT_EQ(dev->description(), GetParam().description);
  for (const strata::format::RecipeInfo &r : strata::format::allRecipes())
    EXPECT_FALSE(dev->supports(r.id)) << r.name;
  Launch l;
  l.recipe = strata::format::allRecipes().front().id;
  std::string error;
  EXPECT_FALSE(dev->launch(l, error));
  EXPECT_TRUE(contains(error, "runs generated code only")) << error;
  EXPECT_TRUE(contains(error, strata::format::allRecipes().front().name))
      << error;
  EXPECT_TRUE(contains(error, GetParam().target)) << error;
}

TEST_P(GpuBackend, MemoryRoundTrip) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  std::string error;
  void *p = dev->alloc(1000, error);
  ASSERT_NE(p, nullptr) << error;
  uint64_t address = reinterpret_cast<uintptr_t>(p);
  EXPECT_EQ(address % 256, 0u);
  ASSERT_EQ(fake->allocations.count(address), 1u);
  EXPECT_EQ(fake->allocations[address], 1024u) << "whole 256-byte units";

  ASSERT_TRUE(dev->fill32(p, 0xdeadbeef, 1000, error)) << error;
  std::vector<uint32_t> words(250);
  ASSERT_TRUE(dev->download(words.data(), p, 1000, error)) << error;
  for (uint32_t w : words)
    ASSERT_EQ(w, 0xdeadbeefu);

  std::vector<uint8_t> bytes(1000), back(1000);
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  ASSERT_TRUE(dev->upload(p, bytes.data(), bytes.size(), error)) << error;
  ASSERT_TRUE(dev->download(back.data(), p, back.size(), error)) << error;
  EXPECT_EQ(back, bytes);

  // A device-to-device copy: one driver call, no trip through the host.
  void *q = dev->alloc(1000, error);
  ASSERT_NE(q, nullptr) << error;
  int uploads = fake->uploads;
  ASSERT_TRUE(dev->copy(q, p, 1000, error)) << error;
  EXPECT_EQ(fake->copies, 1);
  EXPECT_EQ(fake->uploads, uploads);
  std::fill(back.begin(), back.end(), 0);
  ASSERT_TRUE(dev->download(back.data(), q, back.size(), error)) << error;
  EXPECT_EQ(back, bytes);
  ASSERT_TRUE(dev->copy(q, p, 0, error)) << error;
  EXPECT_EQ(fake->copies, 1) << "nothing to copy, no call";
  dev->release(q);

  EXPECT_FALSE(dev->fill32(p, 0, 6, error));
  EXPECT_TRUE(contains(error, "not a multiple of 4")) << error;

  void *empty = dev->alloc(0, error);
  ASSERT_NE(empty, nullptr) << error;
  EXPECT_NE(empty, p);
  EXPECT_EQ(fake->allocations.size(), 2u);
  dev->release(p);
  dev->release(nullptr);
  EXPECT_EQ(fake->allocations.count(address), 0u);
  dev.reset();
  EXPECT_TRUE(fake->allocations.empty()) << "the destructor frees the rest";
}

TEST_P(GpuBackend, MapWeightUploadsOnce) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  std::vector<float> host(300);
  for (size_t i = 0; i < host.size(); ++i)
    host[i] = 0.5f * static_cast<float>(i);
  uint64_t bytes = host.size() * sizeof(float);
  std::string error;
  void *w = dev->mapWeight(host.data(), bytes, error);
  ASSERT_NE(w, nullptr) << error;
  EXPECT_NE(w, static_cast<void *>(host.data()));
  EXPECT_EQ(dev->mapWeight(host.data(), bytes, error), w);
  EXPECT_EQ(fake->uploads, 1);
  std::vector<float> back(host.size());
  ASSERT_TRUE(dev->download(back.data(), w, bytes, error)) << error;
  EXPECT_EQ(back, host);
  void *half = dev->mapWeight(host.data(), bytes / 2, error);
  ASSERT_NE(half, nullptr) << error;
  EXPECT_NE(half, w);
  EXPECT_EQ(fake->uploads, 2);
  dev.reset();
  EXPECT_TRUE(fake->allocations.empty());
}

TEST_P(GpuBackend, LoadFunctionReadsEachModuleOnce) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  TempDir dir;
  const std::string text = "FAKE module\nfirst 2\nsecond 0\n";
  std::string path = dir.write("m.ptx", text);
  DeviceFunction first, second, again;
  std::string error;
  ASSERT_TRUE(dev->loadFunction(path, "first", first, error)) << error;
  EXPECT_NE(first.handle, nullptr);
  // The fake reads the image up to its NUL: the exact text means the
  // backend terminated it.
  ASSERT_EQ(fake->modules, std::vector<std::string>{text});
  ASSERT_TRUE(dev->loadFunction(path, "second", second, error)) << error;
  EXPECT_NE(second.handle, first.handle);
  fs::remove(path);
  ASSERT_TRUE(dev->loadFunction(path, "first", again, error)) << error;
  EXPECT_EQ(again.handle, first.handle);
  EXPECT_EQ(fake->modules.size(), 1u) << "one load per path";

  DeviceFunction fn;
  EXPECT_FALSE(dev->loadFunction(path, "nope", fn, error));
  EXPECT_TRUE(contains(error, tag(GetParam().name) +
                                  ": loading function 'nope' from " + path +
                                  ": " + GetParam().getFunctionCall +
                                  " failed: named symbol not found"))
      << error;

  std::string missing = dir.path + "/missing.ptx";
  EXPECT_FALSE(dev->loadFunction(missing, "first", fn, error));
  EXPECT_TRUE(contains(error, "'first'")) << error;
  EXPECT_TRUE(contains(error, missing)) << error;

  std::string garbage = dir.write("garbage.hsaco", "\x7f"
                                                   "ELF garbage");
  EXPECT_FALSE(dev->loadFunction(garbage, "first", fn, error));
  EXPECT_TRUE(contains(error, garbage)) << error;
  EXPECT_TRUE(contains(error, "'first'")) << error;
  EXPECT_TRUE(contains(error, "device kernel image is invalid")) << error;
  EXPECT_EQ(fake->modules.size(), 1u);
  dev.reset();
  EXPECT_EQ(fake->moduleUnloads, 1);
}

TEST_P(GpuBackend, LaunchMarshalsEveryArgument) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  TempDir dir;
  DeviceFunction fn = load(*dev, dir, "FAKE\nmatmul 5\nnone 0\n", "matmul");
  std::string error;
  void *a = dev->alloc(64, error);
  void *b = dev->alloc(64, error);
  ASSERT_TRUE(a && b) << error;

  CodeLaunch l;
  l.function = &fn;
  l.grid[0] = 3, l.grid[1] = 2, l.grid[2] = 1;
  l.block[0] = 128, l.block[1] = 1, l.block[2] = 1;
  l.sharedBytes = 1024;
  l.args = {reinterpret_cast<uintptr_t>(a), reinterpret_cast<uintptr_t>(b), 77,
            UINT64_MAX, 0x0123456789abcdefull};
  l.name = "kernel 7 (matmul) matmul";
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  l.grid[0] = 9, l.block[2] = 2, l.sharedBytes = 0;
  l.args = {5, 4, 3, 2, 1};
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  CodeLaunch none;
  DeviceFunction noArgs = load(*dev, dir, "FAKE\nmatmul 5\nnone 0\n", "none");
  none.function = &noArgs;
  ASSERT_TRUE(dev->launchCode(none, error)) << error;

  ASSERT_EQ(fake->launches.size(), 3u);
  const FakeLaunch &r = fake->launches[0];
  EXPECT_EQ(r.function, "matmul");
  EXPECT_EQ(std::vector<uint32_t>(r.grid, r.grid + 3),
            (std::vector<uint32_t>{3, 2, 1}));
  EXPECT_EQ(std::vector<uint32_t>(r.block, r.block + 3),
            (std::vector<uint32_t>{128, 1, 1}));
  EXPECT_EQ(r.sharedBytes, 1024u);
  EXPECT_EQ(r.args, (std::vector<uint64_t>{reinterpret_cast<uintptr_t>(a),
                                           reinterpret_cast<uintptr_t>(b), 77,
                                           UINT64_MAX, 0x0123456789abcdefull}));
  const FakeLaunch &s = fake->launches[1];
  EXPECT_EQ(s.grid[0], 9u);
  EXPECT_EQ(s.block[2], 2u);
  EXPECT_EQ(s.sharedBytes, 0u);
  EXPECT_EQ(s.args, (std::vector<uint64_t>{5, 4, 3, 2, 1}));
  EXPECT_EQ(fake->launches[2].function, "none");
  EXPECT_TRUE(fake->launches[2].args.empty());
  EXPECT_TRUE(fake->sharedOptIns.empty());
}

/// Tensor maps (TMA descriptors): cuda encodes them through
/// cuTensorMapEncodeTiled with the request's fields and passes the 128
/// bytes by value in the argument's place; a failed encoding is a message
/// naming the call; hip has none.
TEST_P(GpuBackend, TensorMapsAreEncodedAndPassedByValue) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  std::string error;
  void *a = dev->alloc(64 * 1024, error);
  ASSERT_NE(a, nullptr) << error;
  TensorMapRequest req;
  req.base = a;
  req.dtype = format::PlanDType::BF16;
  req.rank = 2;
  req.dims[0] = 256, req.dims[1] = 100;
  req.strides[0] = 512;
  req.box[0] = 64, req.box[1] = 32;
  req.swizzle = 128;
  TensorMapBytes map;
  if (GetParam().name != std::string("cuda")) {
    EXPECT_FALSE(dev->encodeTensorMap(req, map, error));
    EXPECT_TRUE(contains(error, "backend 'hip' has no tensor maps")) << error;
    return;
  }
  ASSERT_TRUE(dev->encodeTensorMap(req, map, error)) << error;
  ASSERT_EQ(fake->tensorMaps.size(), 1u);
  const FakeTensorMap &m = fake->tensorMaps[0];
  EXPECT_EQ(m.type, 9) << "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16";
  EXPECT_EQ(m.rank, 2u);
  EXPECT_EQ(m.address, reinterpret_cast<uintptr_t>(a));
  EXPECT_EQ(m.dims[0], 256u);
  EXPECT_EQ(m.dims[1], 100u);
  EXPECT_EQ(m.strides[0], 512u);
  EXPECT_EQ(m.box[0], 64u);
  EXPECT_EQ(m.box[1], 32u);
  EXPECT_EQ(m.swizzle, 3) << "CU_TENSOR_MAP_SWIZZLE_128B";
  EXPECT_EQ(m.l2Promotion, 2);
  EXPECT_EQ(m.oobFill, 0) << "out-of-bounds elements read as zero";

  // In a launch the map takes its argument's place, 128 bytes by value.
  TempDir dir;
  DeviceFunction fn = load(*dev, dir, "FAKE\ntma 8,128,8\n", "tma");
  CodeLaunch l;
  l.function = &fn;
  l.args = {11, 0, 33};
  l.argMaps = {-1, 0, -1};
  l.maps = {map};
  l.name = "kernel 5 (attention) tma";
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_EQ(fake->launches.size(), 1u);
  std::vector<uint64_t> want = {11, kFakeTensorMapMagic, 0,
                                reinterpret_cast<uintptr_t>(a)};
  want.resize(1 + 16, 0);
  want.push_back(33);
  EXPECT_EQ(fake->launches[0].args, want);
  // An argument naming a map the launch does not carry.
  l.argMaps = {-1, 1, -1};
  EXPECT_FALSE(dev->launchCode(l, error));
  EXPECT_TRUE(contains(error, "argument 1 names tensor map 1 of 1")) << error;

  // What the driver refuses is a message naming the call and the map.
  req.box[1] = 300;
  EXPECT_FALSE(dev->encodeTensorMap(req, map, error));
  EXPECT_TRUE(contains(error, "encoding a tensor map (bf16, rank 2, inner "
                              "dim 256, box 64x300, swizzle 128): "
                              "cuTensorMapEncodeTiled failed"))
      << error;
  EXPECT_EQ(fake->tensorMaps.size(), 1u);
}

TEST_P(GpuBackend, LargeDynamicSharedMemory) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  TempDir dir;
  DeviceFunction fn = load(*dev, dir, "FAKE\nattn 1\n", "attn");
  CodeLaunch l;
  l.function = &fn;
  l.args = {1};
  l.name = "kernel 3 (attention) attn";
  // 60 KiB: above CUDA's 48 KiB default, within gfx1151's 64 KiB of LDS.
  l.sharedBytes = 60 * 1024;
  std::string error;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  EXPECT_EQ(fake->launches.size(), 2u);
  EXPECT_EQ(fake->launches[1].sharedBytes, 60u * 1024);
  if (GetParam().name == std::string("cuda")) {
    // One opt-in per function and size.
    EXPECT_EQ(fake->sharedOptIns,
              (std::vector<std::pair<std::string, int>>{{"attn", 60 * 1024}}));
    l.sharedBytes = 100 * 1024;
    ASSERT_TRUE(dev->launchCode(l, error)) << error;
    EXPECT_EQ(fake->sharedOptIns.size(), 2u);
    EXPECT_EQ(fake->sharedOptIns.back().second, 100 * 1024);
  } else {
    EXPECT_TRUE(fake->sharedOptIns.empty());
  }
}

TEST_P(GpuBackend, DriverErrorsBecomeMessages) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  std::string error;
  fake->failCall = GetParam().allocCall;
  fake->failCode = 2;
  EXPECT_EQ(dev->alloc(4096, error), nullptr);
  EXPECT_EQ(error, tag(GetParam().name) + ": allocating 4096 bytes: " +
                       GetParam().allocCall + " failed: out of memory (" +
                       GetParam().outOfMemory + ")");

  TempDir dir;
  DeviceFunction fn = load(*dev, dir, "FAKE\nk 1\n", "k");
  CodeLaunch l;
  l.function = &fn;
  l.args = {42};
  l.name = "kernel 12 (matmul) k";
  fake->failCall = GetParam().launchCall;
  fake->failCode = 719;
  EXPECT_FALSE(dev->launchCode(l, error));
  EXPECT_TRUE(contains(error, tag(GetParam().name) + ": launching " + l.name +
                                  " (grid 1x1x1, block 1x1x1, 0 shared "
                                  "bytes, 1 arguments): " +
                                  GetParam().launchCall +
                                  " failed: unspecified launch failure (" +
                                  GetParam().launchFailure + ")"))
      << error;

  // A kernel's fault surfaces at the next wait: it names the last launch.
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  fake->failCall = GetParam().syncCall;
  EXPECT_FALSE(dev->synchronize(error));
  EXPECT_TRUE(contains(error, "waiting for the device (last launch: " + l.name +
                                  "): " + GetParam().syncCall +
                                  " failed: unspecified launch failure"))
      << error;
  void *p = dev->alloc(16, error);
  ASSERT_NE(p, nullptr) << error;
  char host[16];
  fake->failCall = GetParam().downloadCall;
  EXPECT_FALSE(dev->download(host, p, sizeof(host), error));
  EXPECT_TRUE(contains(error, "(last launch: " + l.name + ")")) << error;
  EXPECT_TRUE(contains(error, GetParam().downloadCall)) << error;

  CodeLaunch unloaded;
  unloaded.name = "kernel 4 (norm) rms";
  EXPECT_FALSE(dev->launchCode(unloaded, error));
  EXPECT_EQ(error, tag(GetParam().name) +
                       ": launching kernel 4 (norm) rms: no function loaded");
  // The device still works after every failure.
  EXPECT_TRUE(dev->synchronize(error)) << error;
}

TEST_P(GpuBackend, EventsMeasureSecondsInStreamOrder) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  TempDir dir;
  DeviceFunction fn = load(*dev, dir, "FAKE\nk 0\n", "k");
  CodeLaunch l;
  l.function = &fn;
  std::string error;
  ASSERT_TRUE(dev->createEvents(3, error)) << error;
  EXPECT_EQ(fake->liveEvents, 3);
  ASSERT_TRUE(dev->recordEvent(0, error)) << error;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_TRUE(dev->recordEvent(1, error)) << error;
  ASSERT_TRUE(dev->synchronize(error)) << error;
  double seconds = -1;
  ASSERT_TRUE(dev->eventSeconds(0, 1, seconds, error)) << error;
  EXPECT_NEAR(seconds, 2 * kFakeLaunchMs / 1000, 1e-9);

  EXPECT_FALSE(dev->eventSeconds(0, 2, seconds, error));
  EXPECT_TRUE(contains(error, "event slot 2 was never recorded")) << error;
  EXPECT_FALSE(dev->recordEvent(3, error));
  EXPECT_TRUE(contains(error, "event slot 3 of 3")) << error;
  fake->failCall = GetParam().elapsedCall;
  fake->failCode = 400;
  EXPECT_FALSE(dev->eventSeconds(0, 1, seconds, error));
  EXPECT_TRUE(contains(error, GetParam().elapsedCall)) << error;
  EXPECT_TRUE(contains(error, "invalid resource handle")) << error;

  ASSERT_TRUE(dev->createEvents(1, error)) << error;
  EXPECT_EQ(fake->liveEvents, 1);
  EXPECT_FALSE(dev->eventSeconds(0, 0, seconds, error))
      << "resizing forgets what was recorded";
  dev.reset();
  EXPECT_EQ(fake->liveEvents, 0);
}

TEST_P(GpuBackend, WorksFromAnotherThread) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  int binds = fake->binds;
  bool ok = false;
  std::string error;
  // The cuda fake, like the driver, needs the context current on the
  // calling thread.
  std::thread([&] {
    void *p = dev->alloc(64, error);
    ok = p && dev->fill32(p, 1, 64, error) && dev->synchronize(error);
  }).join();
  EXPECT_TRUE(ok) << error;
  EXPECT_EQ(fake->binds, binds + 1) << "one bind for the new thread";
  void *p = dev->alloc(64, error);
  EXPECT_NE(p, nullptr) << error;
  EXPECT_EQ(fake->binds, binds + 1) << "none again on the creating thread";
}

TEST_P(GpuBackend, DestructorGivesEverythingBack) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  if (GetParam().name == std::string("cuda")) {
    EXPECT_EQ(fake->contextRefs, 1);
  }
  std::string error;
  ASSERT_NE(dev->alloc(100, error), nullptr) << error;
  float weight[4] = {1, 2, 3, 4};
  ASSERT_NE(dev->mapWeight(weight, sizeof(weight), error), nullptr) << error;
  TempDir dir;
  DeviceFunction fn = load(*dev, dir, "FAKE\nk 0\n", "k");
  ASSERT_TRUE(dev->createEvents(2, error)) << error;
  // A graph it still holds, and a capture left open.
  CodeLaunch l;
  l.function = &fn;
  DeviceGraph graph;
  ASSERT_TRUE(dev->beginCapture(error)) << error;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_TRUE(dev->endCapture(graph, error)) << error;
  ASSERT_TRUE(dev->beginCapture(error)) << error;
  EXPECT_EQ(fake->liveStreams, 1);
  dev.reset();
  EXPECT_TRUE(fake->allocations.empty());
  EXPECT_EQ(fake->liveEvents, 0);
  EXPECT_EQ(fake->moduleUnloads, 1);
  EXPECT_EQ(fake->contextRefs, 0);
  EXPECT_EQ(fake->liveStreams, 0);
  EXPECT_EQ(fake->liveGraphs, 0);
  EXPECT_EQ(fake->liveGraphExecs, 0);
}

/// Every call goes to one stream of the device's own that does not wait for
/// the legacy default stream (graph capture is illegal there); the fake
/// refuses the legacy stream.
TEST_P(GpuBackend, OneNonBlockingStream) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  EXPECT_EQ(fake->streamFlags, std::vector<unsigned>{1});
  EXPECT_EQ(fake->liveStreams, 1);
  EXPECT_TRUE(dev->supportsGraphs());
  dev.reset();
  EXPECT_EQ(fake->liveStreams, 0);
}

// ---- graphs -----------------------------------------------------------------

/// axpy (y += 2x) over \p n floats, as one launch.
CodeLaunch axpyLaunch(const DeviceFunction &fn, void *x, void *y, uint64_t n) {
  CodeLaunch l;
  l.function = &fn;
  l.grid[0] = 4;
  l.block[0] = 32;
  l.args = {reinterpret_cast<uintptr_t>(x), reinterpret_cast<uintptr_t>(y), n};
  l.name = "kernel 0 (add) axpy";
  return l;
}

TEST_P(GpuBackend, GraphReplaysWhatPlainLaunchesDo) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  TempDir dir;
  DeviceFunction fn = load(*dev, dir, "FAKE\naxpy 3 axpy\n", "axpy");
  constexpr uint64_t n = 100;
  std::vector<float> x(n), plain(n), replayed(n);
  for (uint64_t i = 0; i < n; ++i)
    x[i] = 0.25f * static_cast<float>(i) - 3;
  std::string error;
  void *dx = dev->alloc(n * 4, error);
  void *dy = dev->alloc(n * 4, error);
  ASSERT_TRUE(dx && dy) << error;
  ASSERT_TRUE(dev->upload(dx, x.data(), n * 4, error)) << error;
  CodeLaunch l = axpyLaunch(fn, dx, dy, n);

  // Plain: y = 1, two launches.
  ASSERT_TRUE(dev->fill32(dy, 0x3f800000, n * 4, error)) << error;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_TRUE(dev->download(plain.data(), dy, n * 4, error)) << error;
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_EQ(plain[i], 1 + 4 * x[i]) << i;
  std::vector<FakeLaunch> plainLaunches = fake->launches;

  // The same two, captured: nothing runs until the graph does.
  ASSERT_TRUE(dev->fill32(dy, 0x3f800000, n * 4, error)) << error;
  DeviceGraph graph;
  ASSERT_TRUE(dev->beginCapture(error)) << error;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_TRUE(dev->endCapture(graph, error)) << error;
  EXPECT_FALSE(graph.empty());
  EXPECT_EQ(graph.launches, 2u);
  EXPECT_EQ(fake->captureMode, 1) << "thread-local capture";
  EXPECT_EQ(fake->liveGraphs, 0) << "the graph goes once instantiated";
  EXPECT_EQ(fake->liveGraphExecs, 1);
  EXPECT_EQ(fake->launches.size(), 2u);
  ASSERT_TRUE(dev->download(replayed.data(), dy, n * 4, error)) << error;
  EXPECT_EQ(replayed, std::vector<float>(n, 1.0f));

  ASSERT_TRUE(dev->launchGraph(graph, error)) << error;
  ASSERT_TRUE(dev->synchronize(error)) << error;
  ASSERT_TRUE(dev->download(replayed.data(), dy, n * 4, error)) << error;
  EXPECT_EQ(replayed, plain);
  ASSERT_EQ(fake->launches.size(), 4u);
  for (size_t i = 0; i < 2; ++i) {
    const FakeLaunch &a = plainLaunches[i], &b = fake->launches[2 + i];
    EXPECT_EQ(a.function, b.function);
    EXPECT_EQ(a.args, b.args);
    EXPECT_EQ(std::vector<uint32_t>(a.grid, a.grid + 3),
              std::vector<uint32_t>(b.grid, b.grid + 3));
    EXPECT_EQ(std::vector<uint32_t>(a.block, a.block + 3),
              std::vector<uint32_t>(b.block, b.block + 3));
  }

  // Replayed again, on y as the first replay left it; events time it.
  ASSERT_TRUE(dev->createEvents(2, error)) << error;
  ASSERT_TRUE(dev->recordEvent(0, error)) << error;
  ASSERT_TRUE(dev->launchGraph(graph, error)) << error;
  ASSERT_TRUE(dev->recordEvent(1, error)) << error;
  ASSERT_TRUE(dev->download(replayed.data(), dy, n * 4, error)) << error;
  for (uint64_t i = 0; i < n; ++i)
    ASSERT_EQ(replayed[i], 1 + 8 * x[i]) << i;
  EXPECT_EQ(fake->graphLaunches, 2);
  double seconds = 0;
  ASSERT_TRUE(dev->eventSeconds(0, 1, seconds, error)) << error;
  EXPECT_NEAR(seconds, 2 * kFakeLaunchMs / 1000, 1e-9);

  dev->releaseGraph(graph);
  EXPECT_TRUE(graph.empty());
  EXPECT_EQ(fake->liveGraphExecs, 0);
  EXPECT_FALSE(dev->launchGraph(graph, error));
  EXPECT_EQ(error, tag(GetParam().name) +
                       ": launching a graph this device does not hold "
                       "(empty or released)");
  dev->releaseGraph(graph); // empty: ignored
}

TEST_P(GpuBackend, CaptureTakesLaunchesOnly) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  TempDir dir;
  DeviceFunction fn = load(*dev, dir, "FAKE\nk 0\n", "k");
  std::string error;
  void *p = dev->alloc(64, error);
  ASSERT_NE(p, nullptr) << error;
  ASSERT_TRUE(dev->createEvents(1, error)) << error;
  DeviceGraph graph;
  EXPECT_FALSE(dev->endCapture(graph, error));
  EXPECT_EQ(error,
            tag(GetParam().name) + ": ending a capture that was never begun");

  ASSERT_TRUE(dev->beginCapture(error)) << error;
  char host[64] = {};
  auto refused = [&](bool ok, const std::string &what) {
    EXPECT_FALSE(ok) << what;
    EXPECT_EQ(error, tag(GetParam().name) + ": " + what +
                         " while capturing a graph (a capture takes "
                         "launches only)");
  };
  refused(dev->fill32(p, 0, 64, error), "filling 64 bytes");
  refused(dev->upload(p, host, 64, error),
          fmt::format("copying 64 bytes to the device at {}", p));
  refused(dev->download(host, p, 64, error),
          fmt::format("copying 64 bytes from the device at {}", p));
  refused(dev->copy(p, static_cast<char *>(p) + 32, 32, error),
          fmt::format("copying 32 bytes on the device from {} to {}",
                      static_cast<void *>(static_cast<char *>(p) + 32), p));
  refused(dev->synchronize(error), "waiting for the device");
  refused(dev->recordEvent(0, error), "recording event slot 0");
  refused(dev->alloc(64, error) != nullptr, "allocating 64 bytes");
  refused(dev->beginCapture(error), "beginning a capture");
  CodeLaunch l;
  l.function = &fn;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  // None of those reached the driver, so the capture is intact.
  ASSERT_TRUE(dev->endCapture(graph, error)) << error;
  EXPECT_EQ(graph.launches, 1u);
  EXPECT_TRUE(fake->launches.empty());
  ASSERT_TRUE(dev->launchGraph(graph, error)) << error;
  ASSERT_TRUE(dev->synchronize(error)) << error;
  EXPECT_EQ(fake->launches.size(), 1u);
}

TEST_P(GpuBackend, CaptureFailuresAreMessages) {
  std::unique_ptr<Device> dev = open();
  ASSERT_NE(dev, nullptr);
  TempDir dir;
  DeviceFunction fn = load(*dev, dir, "FAKE\nk 0\n", "k");
  CodeLaunch l;
  l.function = &fn;
  l.name = "kernel 5 (silu) k";
  std::string error;
  DeviceGraph graph;
  bool cuda = GetParam().name == std::string("cuda");

  fake->failCall = GetParam().beginCaptureCall;
  fake->failCode = 1;
  EXPECT_FALSE(dev->beginCapture(error));
  EXPECT_EQ(error,
            tag(GetParam().name) + ": beginning to capture a graph: " +
                GetParam().beginCaptureCall + " failed: invalid argument (" +
                (cuda ? "CUDA_ERROR_INVALID_VALUE" : "hipErrorInvalidValue") +
                " = 1)");

  // A call the capture forbids, made on this thread behind the device's
  // back (another library, say), invalidates it: the graph is refused.
  ASSERT_TRUE(dev->beginCapture(error)) << error;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  // Called through its own type (UBSan checks the function type of an
  // indirect call): cuMemAlloc_v2(CUdeviceptr *, size_t), hipMalloc(void **,
  // size_t).
  void *allocate = ::dlsym(lib, GetParam().allocSymbol);
  ASSERT_NE(allocate, nullptr);
  gpu::CUdeviceptr ignoredCuda = 0;
  void *ignoredHip = nullptr;
  int allocRc =
      cuda ? reinterpret_cast<gpu::CUresult (*)(gpu::CUdeviceptr *, size_t)>(
                 allocate)(&ignoredCuda, 64)
           : reinterpret_cast<gpu::hipError_t (*)(void **, size_t)>(allocate)(
                 &ignoredHip, 64);
  EXPECT_EQ(allocRc, 900);
  EXPECT_FALSE(dev->endCapture(graph, error));
  EXPECT_TRUE(graph.empty());
  EXPECT_TRUE(contains(error, tag(GetParam().name) +
                                  ": capturing a graph of 1 launches: "))
      << error;
  EXPECT_TRUE(contains(error, cuda ? "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED "
                                     "= 901"
                                   : "hipErrorStreamCaptureInvalidated = 901"))
      << error;

  ASSERT_TRUE(dev->beginCapture(error)) << error;
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  fake->failCall = GetParam().instantiateCall;
  fake->failCode = 2;
  EXPECT_FALSE(dev->endCapture(graph, error));
  EXPECT_TRUE(graph.empty());
  EXPECT_TRUE(contains(
      error, tag(GetParam().name) + ": instantiating a graph of 1 launches: " +
                 GetParam().instantiateCall + " failed: out of memory"))
      << error;
  EXPECT_EQ(fake->liveGraphs, 0);
  EXPECT_EQ(fake->liveGraphExecs, 0);

  // Nothing captured ran, and the device works on.
  EXPECT_TRUE(fake->launches.empty());
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_TRUE(dev->synchronize(error)) << error;
  EXPECT_EQ(fake->launches.size(), 1u);
}

TEST(GpuGraphs, TheCpuHasNone) {
  std::string error;
  std::unique_ptr<Device> cpu = createDevice("cpu", error);
  ASSERT_NE(cpu, nullptr) << error;
  EXPECT_FALSE(cpu->supportsGraphs());
  DeviceGraph graph;
  EXPECT_FALSE(cpu->beginCapture(error));
  EXPECT_EQ(error, "backend 'cpu' has no graphs to capture launches into");
  EXPECT_FALSE(cpu->endCapture(graph, error));
  EXPECT_FALSE(cpu->launchGraph(graph, error));
  EXPECT_EQ(error, "backend 'cpu' has no graphs to capture launches into");
  cpu->releaseGraph(graph);
  EXPECT_TRUE(graph.empty());
}

// ---- the executor on the fake (graphs and plain launches)
// --------------------

constexpr int64_t kRows = 10, kWidth = 4, kMaxTokens = 5;

/// A GPU plan on the fake: x = rows(table, tokens), y = 2 x + 1, as two
/// launches of fake code (FakeGpuDriver.h), and the GGUF of its table.
class FakePlan {
public:
  FakePlan(const std::string &target, const TempDir &dir) {
    for (int64_t i = 0; i < kRows * kWidth; ++i)
      table.push_back(0.5f * static_cast<float>(i) - 7);
    format::ModelInfo info;
    info.addMeta("general.architecture", format::MetaValue::makeString("tiny"));
    format::GgufTensorData t;
    t.info.name = "token_embd.weight";
    t.info.type = format::GgmlType::F32;
    t.info.dims = {kWidth, kRows};
    t.bytes.resize(table.size() * 4);
    std::memcpy(t.bytes.data(), table.data(), t.bytes.size());
    gguf = dir.path + "/tiny.gguf";
    std::string error;
    EXPECT_TRUE(format::writeGguf(gguf, info, {t}, error)) << error;

    planDir = dir.path + "/plan";
    fs::create_directories(planDir);
    std::ofstream(planDir + "/k.fake") << fmt::format(
        "FAKE\nrows 4 rows {}\nscale 3 scale {}\n", kWidth, kWidth);
    plan.model = plan.arch = "tiny";
    plan.target = target;
    plan.maxTokens = kMaxTokens;
    plan.weights = {{"token_embd.weight",
                     format::GgmlType::F32,
                     {uint64_t(kWidth), uint64_t(kRows)}}};
    auto buffer = [&](const char *name, format::PlanDType type,
                      std::vector<format::PlanDim> shape) {
      format::PlanBuffer b;
      b.name = name;
      b.dtype = type;
      b.shape = std::move(shape);
      b.bytes = b.numElements(kMaxTokens) * 4;
      b.offset = plan.arenaBytes;
      plan.arenaBytes += (b.bytes + 255) / 256 * 256;
      plan.buffers.push_back(b);
    };
    constexpr format::PlanDim T = {1, 0};
    constexpr format::PlanDim W = {0, kWidth};
    buffer("tokens", format::PlanDType::I32, {T});
    buffer("x", format::PlanDType::F32, {T, W});
    buffer("y", format::PlanDType::F32, {T, W});
    plan.arenaLowerBound = plan.arenaBytes;
    auto kernel = [&](format::Recipe r, std::vector<format::PlanOperand> in,
                      uint32_t out, const char *symbol,
                      std::vector<std::string> args) {
      format::PlanKernel k;
      k.recipe = r;
      k.inputs = std::move(in);
      k.outputs = {out};
      format::PlanCode c;
      c.module = "k.fake";
      c.symbol = symbol;
      c.grid = {T, {0, 1}, {0, 1}};
      c.block = {32, 1, 1};
      c.args = std::move(args);
      k.code = c;
      plan.kernels.push_back(std::move(k));
    };
    kernel(format::Recipe::GetRows, {{true, 0}, {false, 0}}, 1, "rows",
           {"weight:0", "buffer:0", "buffer:1", "T"});
    kernel(format::Recipe::Silu, {{false, 1}}, 2, "scale",
           {"buffer:1", "buffer:2", "T"});
    plan.inputs = {0};
    plan.outputs = {2};
  }

  /// What the plan computes for \p tokens.
  std::vector<float> expected(const std::vector<int32_t> &tokens) const {
    std::vector<float> y;
    for (int32_t id : tokens)
      for (int64_t c = 0; c < kWidth; ++c)
        y.push_back(2 * table[id * kWidth + c] + 1);
    return y;
  }

  std::vector<float> table;
  std::string gguf, planDir;
  format::Plan plan;
};

TEST_P(GpuBackend, ExecutorOverlapsKernelsThatWaitForTheirPredecessor) {
  // A plan whose kernels begin with grid_dependency_wait() (sm_90 plans
  // say so in option grid_dependency_wait): on cuda every kernel launch,
  // plain or captured into a graph, allows programmatic stream
  // serialisation; HIP launches as before. Without the option no launch
  // overlaps.
  for (bool waits : {false, true}) {
    SCOPED_TRACE(waits ? "kernels wait" : "plain plan");
    TempDir dir;
    FakePlan p(GetParam().target, dir);
    if (waits)
      p.plan.options["grid_dependency_wait"] = 1;
    std::string error;
    std::unique_ptr<Executor> ex =
        Executor::create(p.plan, p.gguf, GetParam().name, error, {}, p.planDir);
    ASSERT_NE(ex, nullptr) << error;
    RunOutput out;
    const size_t before = fake->launches.size();
    std::vector<int32_t> a = {3, 1, 4};
    for (int run = 0; run < 3; ++run) {
      ASSERT_TRUE(ex->run(a, out, error)) << error;
      EXPECT_EQ(out.data, p.expected(a));
    }
    EXPECT_GT(fake->graphLaunches, 0) << "the last runs replay a graph";
    ASSERT_GT(fake->launches.size(), before);
    const bool overlap = waits && std::string(GetParam().name) == "cuda";
    for (size_t i = before; i < fake->launches.size(); ++i)
      EXPECT_EQ(fake->launches[i].overlap, overlap)
          << fake->launches[i].function;
  }
}

TEST_P(GpuBackend, ExecutorCopiesOnlyTheRowsKept) {
  // runRows with rows to keep downloads those rows of the output from the
  // device (offsets into the device buffer), in the order asked.
  TempDir dir;
  FakePlan p(GetParam().target, dir);
  std::string error;
  std::unique_ptr<Executor> ex =
      Executor::create(p.plan, p.gguf, GetParam().name, error, {}, p.planDir);
  ASSERT_NE(ex, nullptr) << error;
  const std::vector<int32_t> a = {3, 1, 4};
  const std::vector<float> all = p.expected(a);
  const size_t cols = all.size() / a.size();
  std::vector<Row> rows;
  for (size_t i = 0; i < a.size(); ++i)
    rows.push_back({a[i], static_cast<int32_t>(i), 0});
  const std::vector<int64_t> keep = {2, 0, 1};
  RunOutput out;
  for (int run = 0; run < 3; ++run) { // plain launches, capture, replay
    ASSERT_TRUE(ex->runRows(rows, out, error, &keep)) << error;
    ASSERT_EQ(out.shape.at(0), 3);
    std::vector<float> want;
    for (int64_t r : keep)
      want.insert(want.end(), all.begin() + r * cols,
                  all.begin() + (r + 1) * cols);
    EXPECT_EQ(out.data, want);
  }
}

TEST_P(GpuBackend, ExecutorGraphsGiveWhatPlainLaunchesGive) {
  TempDir dir;
  FakePlan p(GetParam().target, dir);
  std::string error;
  std::unique_ptr<Executor> ex =
      Executor::create(p.plan, p.gguf, GetParam().name, error, {}, p.planDir);
  ASSERT_NE(ex, nullptr) << error;
  RunOutput out;

  // The first run at a length launches one at a time, the second captures
  // and replays, later ones replay; each run fills the arena with poison
  // and uploads its tokens before the graph.
  std::vector<int32_t> a = {3, 1, 4}, b = {9, 0, 2};
  ASSERT_TRUE(ex->run(a, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(a));
  std::vector<float> plain = out.data;
  EXPECT_FALSE(ex->graphUse().used);
  EXPECT_EQ(ex->graphUse().off, kGraphFirstRun);
  EXPECT_EQ(fake->captures, 0);
  ASSERT_TRUE(ex->run(b, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(b));
  EXPECT_TRUE(ex->graphUse().used);
  EXPECT_TRUE(ex->graphUse().captured);
  EXPECT_EQ(ex->graphUse().launches, 2u);
  EXPECT_EQ(ex->graphUse().off, "");
  EXPECT_EQ(fake->captures, 1);
  EXPECT_EQ(fake->graphLaunches, 1);
  int fills = fake->fills;
  ASSERT_TRUE(ex->run(a, out, error)) << error;
  // The fake runs each call as it comes: a fill after the graph would have
  // left NaN in the output, stale tokens the rows of `b`.
  EXPECT_EQ(out.data, plain);
  EXPECT_EQ(fake->fills, fills + 1) << "the poison is laid before each run";
  EXPECT_TRUE(ex->graphUse().used);
  EXPECT_FALSE(ex->graphUse().captured);
  EXPECT_EQ(fake->captures, 1);
  EXPECT_EQ(fake->graphLaunches, 2);
  EXPECT_EQ(fake->launches.size(), 6u);
  // T = 3 in the replayed launches' arguments and grids.
  EXPECT_EQ(fake->launches.back().args.back(), 3u);
  EXPECT_EQ(fake->launches.back().grid[0], 3u);

  // Another length: its first run plain, then a capture of its own; the
  // graph of T = 3 is kept (generation alternates between prefill chunks
  // and decode steps of a few row counts) and replays when T = 3 returns.
  std::vector<int32_t> c = {7, 5};
  ASSERT_TRUE(ex->run(c, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(c));
  EXPECT_FALSE(ex->graphUse().used);
  EXPECT_EQ(fake->liveGraphExecs, 1) << "the graph of T = 3 is kept";
  ASSERT_TRUE(ex->run(c, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(c));
  EXPECT_TRUE(ex->graphUse().captured);
  EXPECT_EQ(fake->captures, 2);
  EXPECT_EQ(fake->liveGraphExecs, 2);
  EXPECT_EQ(fake->launches.back().args.back(), 2u);
  ASSERT_TRUE(ex->run(a, out, error)) << error;
  EXPECT_EQ(out.data, plain);
  EXPECT_TRUE(ex->graphUse().used);
  EXPECT_FALSE(ex->graphUse().captured) << "T = 3's graph replays at once";
  EXPECT_EQ(fake->captures, 2);
  EXPECT_EQ(fake->graphLaunches, 4);
  EXPECT_EQ(fake->launches.back().args.back(), 3u);
  ASSERT_TRUE(ex->run(c, out, error)) << error;
  EXPECT_TRUE(ex->graphUse().used);
  EXPECT_FALSE(ex->graphUse().captured);
  EXPECT_EQ(fake->graphLaunches, 5);

  // Plain launches give the same bytes.
  std::vector<float> graphed = out.data;
  ex->setGraphs(false);
  EXPECT_EQ(fake->liveGraphExecs, 0);
  ASSERT_TRUE(ex->run(c, out, error)) << error;
  EXPECT_EQ(out.data, graphed);
  EXPECT_FALSE(ex->graphUse().used);
  EXPECT_EQ(ex->graphUse().off, "turned off");
  EXPECT_EQ(fake->graphLaunches, 5);
  EXPECT_EQ(fake->launches.size(), 16u);

  // A per-kernel mode launches one at a time.
  ex->setGraphs(true);
  ex->setNanCheck(true);
  ASSERT_TRUE(ex->run(a, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(a));
  EXPECT_EQ(ex->graphUse().off, "checking each kernel for NaN");
  ex->setNanCheck(false);
  ex->setProfile(true);
  ASSERT_TRUE(ex->run(a, out, error)) << error;
  EXPECT_EQ(ex->graphUse().off, "profiling each kernel");
  EXPECT_EQ(ex->kernelSeconds().size(), 2u);
  ex->setProfile(false);
  ASSERT_TRUE(ex->run(a, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(a));
  EXPECT_TRUE(ex->graphUse().used);
  EXPECT_TRUE(ex->graphUse().captured);
  EXPECT_EQ(fake->graphLaunches, 6);
  ex.reset();
  EXPECT_EQ(fake->liveGraphExecs, 0);
  EXPECT_TRUE(fake->allocations.empty());
}

/// A plan argument `tmap:N`: the executor encodes the code's tensor map N
/// over its operand at the run's T (dims as functions of T) and launches
/// with it, plain and from a graph; a backend without tensor maps refuses
/// the run with a message.
TEST_P(GpuBackend, ExecutorEncodesTensorMapsPerLength) {
  TempDir dir;
  FakePlan p(GetParam().target, dir);
  std::ofstream(p.planDir + "/tm.fake")
      << fmt::format("FAKE\nscale 8,8,8,128 scale {}\n", kWidth);
  format::PlanCode &c = *p.plan.kernels[1].code;
  c.module = "tm.fake";
  c.args = {"buffer:1", "buffer:2", "T", "tmap:0"};
  // x [T, kWidth] f32 as dims {kWidth, T}, rows kWidth * 4 bytes apart.
  format::PlanTensorMap m;
  m.operand = {false, 1};
  m.dtype = format::PlanDType::F32;
  m.dims = {{0, kWidth, 1}, {1, 0, 1}};
  m.strides = {kWidth * 4};
  m.box = {kWidth, 2};
  c.tensorMaps = {m};
  std::string error;
  if (GetParam().name != std::string("cuda")) {
    // Tensor maps are an sm_90 field: a gfx1151 plan with one is refused
    // where it is read, before any backend sees it.
    EXPECT_FALSE(format::validatePlan(p.plan, error));
    EXPECT_TRUE(contains(error, "kernel 1 (silu): tensor maps are for "
                                "targets with a tensor memory accelerator "
                                "(sm_90), not 'gfx1151'"))
        << error;
    return;
  }
  ASSERT_TRUE(format::validatePlan(p.plan, error)) << error;
  std::unique_ptr<Executor> ex =
      Executor::create(p.plan, p.gguf, GetParam().name, error, {}, p.planDir);
  ASSERT_NE(ex, nullptr) << error;
  RunOutput out;
  std::vector<int32_t> a = {3, 1, 4};
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE(ex->run(a, out, error)) << error;
    EXPECT_EQ(out.data, p.expected(a));
  }
  EXPECT_TRUE(ex->graphUse().used);
  // Encoded once for T = 3 (the launches are prepared once per length).
  ASSERT_EQ(fake->tensorMaps.size(), 1u);
  EXPECT_EQ(fake->tensorMaps[0].dims[0], uint64_t(kWidth));
  EXPECT_EQ(fake->tensorMaps[0].dims[1], 3u);
  EXPECT_EQ(fake->tensorMaps[0].strides[0], uint64_t(kWidth * 4));
  EXPECT_EQ(fake->tensorMaps[0].type, 7) << "CU_TENSOR_MAP_DATA_TYPE_FLOAT32";
  const FakeLaunch &last = fake->launches.back();
  ASSERT_EQ(last.args.size(), 3u + 16);
  EXPECT_EQ(last.args[2], 3u);
  EXPECT_EQ(last.args[3], kFakeTensorMapMagic);
  EXPECT_EQ(last.args[5], fake->tensorMaps[0].address);
  // Another length encodes again, with its own dims.
  std::vector<int32_t> b = {7, 5};
  ASSERT_TRUE(ex->run(b, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(b));
  ASSERT_EQ(fake->tensorMaps.size(), 2u);
  EXPECT_EQ(fake->tensorMaps[1].dims[1], 2u);
  EXPECT_EQ(fake->tensorMaps[1].address, fake->tensorMaps[0].address);
}

/// A tensor map over the kernel's workspace (what its pre-launch wrote
/// there: the TMA tile's bf16 copy of F16 weights): encoded at the
/// workspace's address with the run's dims; the validator bounds it by the
/// workspace the code asks for.
TEST_P(GpuBackend, ExecutorEncodesWorkspaceTensorMaps) {
  TempDir dir;
  FakePlan p(GetParam().target, dir);
  std::ofstream(p.planDir + "/wsm.fake")
      << fmt::format("FAKE\nwsscale 8,8,8,8,128 wsscale {}\nwscopy "
                     "8,8,8,8,128 wscopy {}\n",
                     kWidth, kWidth);
  format::PlanCode &c = *p.plan.kernels[1].code;
  c.module = "wsm.fake";
  c.symbol = "wscopy";
  c.args = {"buffer:1", "buffer:2", "workspace", "T", "tmap:0"};
  c.pre =
      format::PlanPreLaunch{"wsscale", {{1, 0}, {0, 1}, {0, 1}}, {32, 1, 1}, 0};
  c.workspace = {4 * kWidth, 0, 1};
  format::PlanTensorMap m;
  m.workspace = true;
  m.dtype = format::PlanDType::F32;
  m.dims = {{0, kWidth, 1}, {1, 0, 1}};
  m.strides = {kWidth * 4};
  m.box = {kWidth, 2};
  c.tensorMaps = {m};
  std::string error;
  if (GetParam().name != std::string("cuda")) {
    EXPECT_FALSE(format::validatePlan(p.plan, error));
    EXPECT_TRUE(contains(error, "tensor maps are for targets with a tensor "
                                "memory accelerator (sm_90)"))
        << error;
    return;
  }
  ASSERT_TRUE(format::validatePlan(p.plan, error)) << error;
  std::unique_ptr<Executor> ex =
      Executor::create(p.plan, p.gguf, GetParam().name, error, {}, p.planDir);
  ASSERT_NE(ex, nullptr) << error;
  RunOutput out;
  std::vector<int32_t> a = {3, 1, 4};
  ASSERT_TRUE(ex->run(a, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(a));
  ASSERT_EQ(fake->tensorMaps.size(), 1u);
  EXPECT_EQ(fake->tensorMaps[0].dims[1], 3u);
  const FakeLaunch &last = fake->launches.back();
  ASSERT_EQ(last.args.size(), 4u + 16);
  EXPECT_EQ(fake->tensorMaps[0].address, last.args[2])
      << "the map's base is the workspace argument";
  // The pre-launch declares the same parameters: it gets the map too.
  const FakeLaunch &pre = fake->launches[fake->launches.size() - 2];
  EXPECT_EQ(pre.function, "wsscale");
  EXPECT_EQ(pre.args, last.args);
  // Half the rows the map spans at maxTokens: refused where the plan is
  // checked.
  c.workspace = {2 * kWidth, 0, 1};
  EXPECT_FALSE(format::validatePlan(p.plan, error));
  EXPECT_TRUE(contains(error, "of the kernel's workspace")) << error;
}

/// A kernel's alternate code (PlanCode::alternates): from its min_tokens
/// on, the executor launches the alternate (here with a pre-launch and a
/// workspace), below it the kernel's own code; each prompt length its own
/// launches, the results equal. An alternate whose symbol the module lacks
/// is refused when the plan loads, min_tokens out of order by the
/// validator.
TEST_P(GpuBackend, ExecutorPicksAlternateCodeByLength) {
  TempDir dir;
  FakePlan p(GetParam().target, dir);
  std::ofstream(p.planDir + "/ws.fake") << fmt::format(
      "FAKE\nwsscale 4 wsscale {}\nwscopy 4 wscopy {}\n", kWidth, kWidth);
  format::PlanCode &c = *p.plan.kernels[1].code;
  const std::string own = c.symbol;
  format::PlanCode alt;
  alt.module = "ws.fake";
  alt.symbol = "wscopy";
  alt.grid = c.grid;
  alt.block = c.block;
  alt.args = {"buffer:1", "buffer:2", "workspace", "T"};
  alt.pre =
      format::PlanPreLaunch{"wsscale", {{1, 0}, {0, 1}, {0, 1}}, {32, 1, 1}, 0};
  alt.workspace = {4 * kWidth, 0, 1};
  alt.minTokens = 3;
  c.alternates = {alt};
  std::string error;
  ASSERT_TRUE(format::validatePlan(p.plan, error)) << error;
  // The alternate round-trips through plan.json.
  format::Plan q;
  ASSERT_TRUE(
      format::planFromJson(format::planToJson(p.plan), "plan.json", q, error))
      << error;
  ASSERT_EQ(q.kernels[1].code->alternates.size(), 1u);
  EXPECT_EQ(q.kernels[1].code->alternates[0].minTokens, 3);
  EXPECT_EQ(q.kernels[1].code->alternates[0].pre->symbol, "wsscale");
  EXPECT_EQ(format::planToJson(q), format::planToJson(p.plan));
  std::unique_ptr<Executor> ex =
      Executor::create(p.plan, p.gguf, GetParam().name, error, {}, p.planDir);
  ASSERT_NE(ex, nullptr) << error;
  RunOutput out;
  std::vector<int32_t> shortP = {3, 1}, longP = {3, 1, 4};
  ASSERT_TRUE(ex->run(shortP, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(shortP));
  ASSERT_EQ(fake->launches.size(), 2u);
  EXPECT_EQ(fake->launches[1].function, own);
  ASSERT_TRUE(ex->run(longP, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(longP));
  ASSERT_EQ(fake->launches.size(), 5u);
  EXPECT_EQ(fake->launches[3].function, "wsscale");
  EXPECT_EQ(fake->launches[4].function, "wscopy");
  ASSERT_TRUE(ex->run(shortP, out, error)) << error;
  EXPECT_EQ(fake->launches.back().function, own);
  ex.reset();

  c.alternates[0].symbol = "absent";
  ex = Executor::create(p.plan, p.gguf, GetParam().name, error, {}, p.planDir);
  EXPECT_EQ(ex, nullptr);
  EXPECT_TRUE(contains(error, "kernel 1 (silu), its alternate for T >= 3: "))
      << error;
  c.alternates[0].symbol = "wscopy";
  for (int64_t bad : {int64_t(1), int64_t(kMaxTokens + 1)}) {
    c.alternates[0].minTokens = bad;
    EXPECT_FALSE(format::validatePlan(p.plan, error));
    EXPECT_TRUE(contains(error, "an alternate's min_tokens")) << error;
  }
}

/// A kernel whose code has a pre-launch (the gated delta rule's pre-pass):
/// both run, pre-launch first, with the kernel's arguments and a workspace
/// of the code's size at maxTokens, plain and in the graph; a module
/// without the pre-launch's symbol is refused when the plan loads.
TEST_P(GpuBackend, ExecutorRunsPreLaunchesBeforeTheirKernels) {
  TempDir dir;
  FakePlan p(GetParam().target, dir);
  std::ofstream(p.planDir + "/ws.fake") << fmt::format(
      "FAKE\nwsscale 4 wsscale {}\nwscopy 4 wscopy {}\n", kWidth, kWidth);
  format::PlanCode &c = *p.plan.kernels[1].code;
  c.module = "ws.fake";
  c.symbol = "wscopy";
  c.args = {"buffer:1", "buffer:2", "workspace", "T"};
  c.pre =
      format::PlanPreLaunch{"wsscale", {{1, 0}, {0, 1}, {0, 1}}, {32, 1, 1}, 0};
  // T rows of kWidth floats: the fake's launches fail outside allocations.
  c.workspace = {4 * kWidth, 0, 1};
  std::string error;
  ASSERT_TRUE(format::validatePlan(p.plan, error)) << error;
  std::unique_ptr<Executor> ex =
      Executor::create(p.plan, p.gguf, GetParam().name, error, {}, p.planDir);
  ASSERT_NE(ex, nullptr) << error;
  RunOutput out;
  std::vector<int32_t> a = {3, 1, 4};
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE(ex->run(a, out, error)) << error;
    EXPECT_EQ(out.data, p.expected(a));
  }
  EXPECT_TRUE(ex->graphUse().used);
  EXPECT_EQ(ex->graphUse().launches, 3u);
  ASSERT_EQ(fake->launches.size(), 9u);
  for (size_t i = 0; i < 9; i += 3) {
    EXPECT_EQ(fake->launches[i + 1].function, "wsscale");
    EXPECT_EQ(fake->launches[i + 2].function, "wscopy");
    EXPECT_EQ(fake->launches[i + 1].args, fake->launches[i + 2].args);
    EXPECT_EQ(fake->launches[i + 1].grid[0], 3u);
  }
  ex.reset();

  c.pre->symbol = "absent";
  ex = Executor::create(p.plan, p.gguf, GetParam().name, error, {}, p.planDir);
  EXPECT_EQ(ex, nullptr);
  EXPECT_NE(error.find("kernel 1 (silu), its pre-launch: "), std::string::npos)
      << error;
  c.pre->block = {2048, 1, 1};
  EXPECT_FALSE(format::validatePlan(p.plan, error));
  EXPECT_NE(error.find("its pre-launch needs a grid of 3 dims and a block "
                       "of 3 sizes of 1..1024 threads in all"),
            std::string::npos)
      << error;
}

TEST_P(GpuBackend, ExecutorFallsBackWhenCaptureFails) {
  TempDir dir;
  FakePlan p(GetParam().target, dir);
  std::string error;
  std::unique_ptr<Executor> ex =
      Executor::create(p.plan, p.gguf, GetParam().name, error, {}, p.planDir);
  ASSERT_NE(ex, nullptr) << error;
  RunOutput out;
  std::vector<int32_t> a = {3, 1, 4};
  ASSERT_TRUE(ex->run(a, out, error)) << error;
  fake->failCall = GetParam().beginCaptureCall;
  fake->failCode = 1;
  ASSERT_TRUE(ex->run(a, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(a));
  EXPECT_FALSE(ex->graphUse().used);
  EXPECT_EQ(
      ex->graphUse().off,
      "capture failed: " + tag(GetParam().name) +
          ": beginning to capture a graph: " + GetParam().beginCaptureCall +
          " failed: invalid argument (" +
          (GetParam().name == std::string("cuda") ? "CUDA_ERROR_INVALID_VALUE"
                                                  : "hipErrorInvalidValue") +
          " = 1)");
  // Not tried again.
  ASSERT_TRUE(ex->run(a, out, error)) << error;
  EXPECT_EQ(out.data, p.expected(a));
  EXPECT_EQ(fake->captures, 0);
  EXPECT_EQ(fake->launches.size(), 6u);
}

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// strata-run on the fake: the graph line, --no-graphs, --repeat, and the
/// same logits either way.
TEST_P(GpuBackend, StrataRunSaysWhetherAGraphRan) {
  TempDir dir;
  FakePlan p(GetParam().target, dir);
  std::string error;
  ASSERT_TRUE(format::writePlanDir(p.planDir, p.plan, error)) << error;
  auto run = [&](const std::string &args, std::string &out) {
    std::string cmd =
        fmt::format("{}={} {} {} --gguf {} --tokens 3,1,4 {} >{}/out 2>{}/err",
                    GetParam().env, STRATA_FAKE_GPU_DRIVER, STRATA_RUN_PATH,
                    p.planDir, p.gguf, args, dir.path, dir.path);
    int status = std::system(cmd.c_str());
    out = slurp(dir.path + "/out");
    EXPECT_EQ(slurp(dir.path + "/err"), "") << cmd;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  std::string out;
  ASSERT_EQ(run("--repeat 3 --dump-logits " + dir.path + "/g.f32", out), 0);
  EXPECT_TRUE(contains(out, "graph: 2 launches in one graph (captured in "
                            "run 2 in "))
      << out;
  EXPECT_TRUE(contains(out, "repeat: 3 runs: first ")) << out;
  ASSERT_EQ(run("", out), 0);
  EXPECT_TRUE(contains(out, "graph: off (first run at this prompt length; "
                            "with --repeat 2 or more, run 2 captures one)\n"))
      << out;
  ASSERT_EQ(run("--no-graphs --dump-logits " + dir.path + "/p.f32", out), 0);
  EXPECT_TRUE(contains(out, "graph: off (--no-graphs)\n")) << out;
  EXPECT_FALSE(contains(out, "repeat:")) << out;
  ASSERT_EQ(run("--profile", out), 0);
  EXPECT_TRUE(contains(out, "graph: off (profiling each kernel)\n")) << out;
  std::string graphed = slurp(dir.path + "/g.f32");
  EXPECT_EQ(graphed.size(), 3 * kWidth * 4u);
  EXPECT_EQ(graphed, slurp(dir.path + "/p.f32"));
}

TEST(GpuRegistry, ListsEveryBackend) {
  EXPECT_EQ(deviceNames(), (std::vector<std::string>{"cpu", "cuda", "hip"}));
  std::string error;
  EXPECT_EQ(createDevice("vulkan", error), nullptr);
  EXPECT_EQ(error, "unknown backend 'vulkan' (available: cpu, cuda, hip)");
}

// ---- a real driver (skipped without one) -----------------------------------

/// y[i] = 2 * x[i] + y[i] for i < n, and a kernel that writes and reads
/// dynamic shared memory at byte `offset`. Hand-written PTX, every
/// parameter 8 bytes as in generated code.
constexpr const char *kPtx = R"(.version 7.8
.target sm_90
.address_size 64

.extern .shared .align 16 .b8 smem[];

.visible .entry strata_test_axpy(.param .u64 x, .param .u64 y, .param .u64 n)
{
  .reg .pred %p<2>;
  .reg .b32 %r<5>;
  .reg .b64 %rd<10>;
  .reg .f32 %f<4>;
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [y];
  ld.param.u64 %rd3, [n];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mad.lo.s32 %r4, %r1, %r2, %r3;
  cvt.u64.u32 %rd4, %r4;
  setp.ge.u64 %p1, %rd4, %rd3;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd5, %rd1;
  cvta.to.global.u64 %rd6, %rd2;
  shl.b64 %rd7, %rd4, 2;
  add.s64 %rd8, %rd5, %rd7;
  add.s64 %rd9, %rd6, %rd7;
  ld.global.f32 %f1, [%rd8];
  ld.global.f32 %f2, [%rd9];
  fma.rn.f32 %f3, %f1, 0f40000000, %f2;
  st.global.f32 [%rd9], %f3;
DONE:
  ret;
}

.visible .entry strata_test_shared(.param .u64 out, .param .u64 offset)
{
  .reg .b32 %r<4>;
  .reg .b64 %rd<6>;
  ld.param.u64 %rd1, [out];
  ld.param.u64 %rd2, [offset];
  mov.u32 %r1, %tid.x;
  mov.u64 %rd3, smem;
  add.s64 %rd4, %rd3, %rd2;
  st.shared.u32 [%rd4], %r1;
  bar.sync 0;
  ld.shared.u32 %r2, [%rd4];
  add.u32 %r3, %r2, 7;
  cvta.to.global.u64 %rd5, %rd1;
  st.global.u32 [%rd5], %r3;
  ret;
}
)";

/// The cuda backend on the machine's own driver (not the fake), or null
/// and \p error where there is none (these tests then say SKIPPED).
std::unique_ptr<Device> realCuda(std::string &error) {
  ::unsetenv("STRATA_CUDA_LIBRARY");
  return createDevice("cuda", error);
}

TEST(GpuRealCuda, RunsHandWrittenPtx) {
  std::string error;
  std::unique_ptr<Device> dev = realCuda(error);
  if (!dev)
    GTEST_SKIP() << error;
  std::printf("%s\n", dev->description().c_str());
  TempDir dir;
  std::string path = dir.write("test.ptx", kPtx);
  DeviceFunction axpy, shared;
  ASSERT_TRUE(dev->loadFunction(path, "strata_test_axpy", axpy, error))
      << error;
  ASSERT_TRUE(dev->loadFunction(path, "strata_test_shared", shared, error))
      << error;

  constexpr size_t n = 1000;
  std::vector<float> x(n), y(n), back(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(i), y[i] = 1.0f;
  void *dx = dev->alloc(n * 4, error);
  void *dy = dev->alloc(n * 4, error);
  ASSERT_TRUE(dx && dy) << error;
  ASSERT_TRUE(dev->upload(dx, x.data(), n * 4, error)) << error;
  ASSERT_TRUE(dev->fill32(dy, 0x3f800000, n * 4, error)) << error; // 1.0f
  ASSERT_TRUE(dev->createEvents(2, error)) << error;
  ASSERT_TRUE(dev->recordEvent(0, error)) << error;
  CodeLaunch l;
  l.function = &axpy;
  l.grid[0] = (n + 255) / 256;
  l.block[0] = 256;
  l.args = {reinterpret_cast<uintptr_t>(dx), reinterpret_cast<uintptr_t>(dy),
            n};
  l.name = "axpy";
  ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_TRUE(dev->recordEvent(1, error)) << error;
  ASSERT_TRUE(dev->download(back.data(), dy, n * 4, error)) << error;
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(back[i], 2.0f * x[i] + y[i]) << i;
  ASSERT_TRUE(dev->synchronize(error)) << error;
  double seconds = -1;
  ASSERT_TRUE(dev->eventSeconds(0, 1, seconds, error)) << error;
  EXPECT_GE(seconds, 0.0);
  EXPECT_LT(seconds, 1.0);

  // 100 KiB of dynamic shared memory needs the opt-in on sm_90.
  void *out = dev->alloc(4, error);
  ASSERT_NE(out, nullptr) << error;
  CodeLaunch s;
  s.function = &shared;
  s.sharedBytes = 100 * 1024;
  s.args = {reinterpret_cast<uintptr_t>(out), s.sharedBytes - 4};
  s.name = "shared";
  ASSERT_TRUE(dev->launchCode(s, error)) << error;
  uint32_t value = 0;
  ASSERT_TRUE(dev->download(&value, out, 4, error)) << error;
  EXPECT_EQ(value, 7u);

  // The same kernels as a cubin (an ELF image), where ptxas is at hand.
  std::string ptxas = STRATA_PTXAS;
  if (!ptxas.empty() && ::access(ptxas.c_str(), X_OK) == 0) {
    std::string cubin = dir.path + "/test.cubin";
    std::string cmd = ptxas + " -arch=sm_90 -o " + cubin + " " + path;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    DeviceFunction fromCubin;
    ASSERT_TRUE(dev->loadFunction(cubin, "strata_test_axpy", fromCubin, error))
        << error;
    l.function = &fromCubin;
    ASSERT_TRUE(dev->launchCode(l, error)) << error;
    ASSERT_TRUE(dev->download(back.data(), dy, n * 4, error)) << error;
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(back[i], 4.0f * x[i] + y[i]) << i;
  }

  CodeLaunch tooWide = l;
  tooWide.block[0] = 4096;
  tooWide.name = "too wide";
  EXPECT_FALSE(dev->launchCode(tooWide, error));
  EXPECT_TRUE(contains(error, "launching too wide")) << error;
  std::printf("%s\n", error.c_str());
  EXPECT_TRUE(dev->synchronize(error)) << error;

  DeviceFunction missing;
  EXPECT_FALSE(dev->loadFunction(path, "nope", missing, error));
  EXPECT_TRUE(contains(error, "cuModuleGetFunction failed")) << error;
  std::printf("%s\n", error.c_str());
}

/// The graph path on the real driver: axpy captured once, replayed twice,
/// with a fill on the same stream before each replay.
TEST(GpuRealCuda, GraphReplaysHandWrittenPtx) {
  std::string error;
  std::unique_ptr<Device> dev = realCuda(error);
  if (!dev)
    GTEST_SKIP() << error;
  TempDir dir;
  std::string path = dir.write("test.ptx", kPtx);
  DeviceFunction axpy;
  ASSERT_TRUE(dev->loadFunction(path, "strata_test_axpy", axpy, error))
      << error;
  constexpr size_t n = 100000;
  std::vector<float> x(n), back(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(i % 1000) * 0.5f;
  void *dx = dev->alloc(n * 4, error);
  void *dy = dev->alloc(n * 4, error);
  ASSERT_TRUE(dx && dy) << error;
  ASSERT_TRUE(dev->upload(dx, x.data(), n * 4, error)) << error;
  CodeLaunch l;
  l.function = &axpy;
  l.grid[0] = (n + 255) / 256;
  l.block[0] = 256;
  l.args = {reinterpret_cast<uintptr_t>(dx), reinterpret_cast<uintptr_t>(dy),
            n};
  l.name = "axpy";
  DeviceGraph graph;
  ASSERT_TRUE(dev->beginCapture(error)) << error;
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(dev->launchCode(l, error)) << error;
  ASSERT_TRUE(dev->endCapture(graph, error)) << error;
  EXPECT_EQ(graph.launches, 3u);
  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_TRUE(dev->fill32(dy, 0x3f800000, n * 4, error)) << error; // 1.0f
    ASSERT_TRUE(dev->launchGraph(graph, error)) << error;
    ASSERT_TRUE(dev->download(back.data(), dy, n * 4, error)) << error;
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(back[i], 6.0f * x[i] + 1.0f) << i;
  }
  dev->releaseGraph(graph);
  EXPECT_TRUE(dev->synchronize(error)) << error;
}

/// PTX nvcc 13 writes (`nvcc -arch=sm_90 -ptx`) for this CUDA source:
///   extern "C" __global__ void strata_test_tma(
///       const __grid_constant__ CUtensorMap map, float *out, int c0,
///       int c1) {
///     __shared__ __align__(128) float box[8 * 16];
///     __shared__ __align__(8) uint64_t bar;
///     thread 0: mbarrier.init bar, 1; fence.mbarrier_init;
///       mbarrier.arrive.expect_tx bar, 512; cp.async.bulk.tensor.2d box <-
///       [&map, {c0, c1}] completing on bar; mbarrier.try_wait.parity 0;
///     __syncthreads(); out[tid] = box[tid];        (128 threads)
///   }
/// i.e. one TMA copy of an 8 x 16 f32 box at (c0, c1) into shared memory.
constexpr const char *kTmaPtx = R"(.version 9.0
.target sm_90
.address_size 64

	// .globl	strata_test_tma

.visible .entry strata_test_tma(
	.param .align 128 .b8 strata_test_tma_param_0[128],
	.param .u64 strata_test_tma_param_1,
	.param .u32 strata_test_tma_param_2,
	.param .u32 strata_test_tma_param_3
)
{
	.reg .pred 	%p<3>;
	.reg .f32 	%f<2>;
	.reg .b32 	%r<16>;
	.reg .b64 	%rd<8>;
	// demoted variable
	.shared .align 128 .b8 _ZZ15strata_test_tmaE3box[512];
	// demoted variable
	.shared .align 8 .u64 _ZZ15strata_test_tmaE3bar;

	mov.b64 	%rd1, strata_test_tma_param_0;
	ld.param.u64 	%rd2, [strata_test_tma_param_1];
	ld.param.u32 	%r2, [strata_test_tma_param_2];
	ld.param.u32 	%r3, [strata_test_tma_param_3];
	mov.u32 	%r1, %tid.x;
	setp.ne.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_3;

	mov.u32 	%r4, _ZZ15strata_test_tmaE3bar;
	// begin inline asm
	mbarrier.init.shared::cta.b64 [%r4], 1;
	// end inline asm
	// begin inline asm
	fence.mbarrier_init.release.cluster;
	// end inline asm
	mov.u32 	%r6, 512;
	// begin inline asm
	mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r4], %r6;
	// end inline asm
	cvta.param.u64 	%rd3, %rd1;
	mov.u32 	%r7, _ZZ15strata_test_tmaE3box;
	// begin inline asm
	cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%r7], [%rd3, {%r2, %r3}], [%r4];
	// end inline asm

$L__BB0_2:
	// begin inline asm
	{
.reg .pred p;
mbarrier.try_wait.parity.shared::cta.b64 p, [%r4], 0;
selp.u32 %r11, 1, 0, p;
}
	// end inline asm
	setp.eq.s32 	%p2, %r11, 0;
	@%p2 bra 	$L__BB0_2;

$L__BB0_3:
	bar.sync 	0;
	shl.b32 	%r13, %r1, 2;
	mov.u32 	%r14, _ZZ15strata_test_tmaE3box;
	add.s32 	%r15, %r14, %r13;
	ld.shared.f32 	%f1, [%r15];
	cvta.to.global.u64 	%rd5, %rd2;
	mul.wide.u32 	%rd6, %r1, 4;
	add.s64 	%rd7, %rd5, %rd6;
	st.global.f32 	[%rd7], %f1;
	ret;

}
)";

/// The runtime's tensor maps on the GPU: a map of a [20 x 40] f32 tensor
/// (rows 160 bytes apart) encoded by Device::encodeTensorMap, passed by
/// value to a TMA copy of an 8 x 16 box; inside, the box is the tensor's
/// elements (dims innermost first, the stride, the box as the plan gives
/// them); across the edge, the elements outside read as 0.
TEST(GpuRealCuda, TensorMapFeedsATmaCopy) {
  std::string error;
  std::unique_ptr<Device> dev = realCuda(error);
  if (!dev)
    GTEST_SKIP() << error;
  TempDir dir;
  std::string path = dir.write("tma.ptx", kTmaPtx);
  DeviceFunction fn;
  ASSERT_TRUE(dev->loadFunction(path, "strata_test_tma", fn, error)) << error;
  constexpr int kRows = 20, kCols = 40;
  std::vector<float> host(kRows * kCols);
  for (int i = 0; i < kRows * kCols; ++i)
    host[i] = static_cast<float>(i) + 0.5f;
  void *t = dev->alloc(host.size() * 4, error);
  void *out = dev->alloc(128 * 4, error);
  ASSERT_TRUE(t && out) << error;
  ASSERT_TRUE(dev->upload(t, host.data(), host.size() * 4, error)) << error;
  TensorMapRequest req;
  req.base = t;
  req.dtype = format::PlanDType::F32;
  req.rank = 2;
  req.dims[0] = kCols, req.dims[1] = kRows;
  req.strides[0] = kCols * 4;
  req.box[0] = 16, req.box[1] = 8;
  CodeLaunch l;
  l.function = &fn;
  l.block[0] = 128;
  l.maps.resize(1);
  ASSERT_TRUE(dev->encodeTensorMap(req, l.maps[0], error)) << error;
  l.argMaps = {0, -1, -1, -1};
  for (auto [c0, c1] : {std::pair{8, 4}, std::pair{32, 16}}) {
    l.args = {0, reinterpret_cast<uintptr_t>(out), uint64_t(c0), uint64_t(c1)};
    l.name = "tma";
    ASSERT_TRUE(dev->fill32(out, 0x7fc00000u, 128 * 4, error)) << error;
    ASSERT_TRUE(dev->launchCode(l, error)) << error;
    std::vector<float> back(128);
    ASSERT_TRUE(dev->download(back.data(), out, 128 * 4, error)) << error;
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 16; ++c) {
        const int row = c1 + r, col = c0 + c;
        const float want =
            row < kRows && col < kCols ? host[row * kCols + col] : 0.0f;
        ASSERT_EQ(back[r * 16 + c], want)
            << "box (" << c0 << ", " << c1 << ") element " << r << ", " << c;
      }
  }
  ASSERT_TRUE(dev->synchronize(error)) << error;
}

} // namespace
