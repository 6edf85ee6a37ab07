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
#include "runtime/format/OpTable.h"

#include <gtest/gtest.h>

#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace strata::runtime;
using namespace strata::runtime::test;
namespace fs = std::filesystem;

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
    .downloadCall = "cuMemcpyDtoH_v2",
    .syncCall = "cuCtxSynchronize",
    .getFunctionCall = "cuModuleGetFunction",
    .launchCall = "cuLaunchKernel",
    .elapsedCall = "cuEventElapsedTime",
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
    .downloadCall = "hipMemcpyDtoH",
    .syncCall = "hipDeviceSynchronize",
    .getFunctionCall = "hipModuleGetFunction",
    .launchCall = "hipModuleLaunchKernel",
    .elapsedCall = "hipEventElapsedTime",
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
    void *lib = ::dlopen(STRATA_FAKE_GPU_DRIVER, RTLD_NOW | RTLD_LOCAL);
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
  if (GetParam().name == std::string("cuda"))
    EXPECT_EQ(fake->contextRefs, 1);
  std::string error;
  ASSERT_NE(dev->alloc(100, error), nullptr) << error;
  float weight[4] = {1, 2, 3, 4};
  ASSERT_NE(dev->mapWeight(weight, sizeof(weight), error), nullptr) << error;
  TempDir dir;
  load(*dev, dir, "FAKE\nk 0\n", "k");
  ASSERT_TRUE(dev->createEvents(2, error)) << error;
  dev.reset();
  EXPECT_TRUE(fake->allocations.empty());
  EXPECT_EQ(fake->liveEvents, 0);
  EXPECT_EQ(fake->moduleUnloads, 1);
  EXPECT_EQ(fake->contextRefs, 0);
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

TEST(GpuRealCuda, RunsHandWrittenPtx) {
  ::unsetenv("STRATA_CUDA_LIBRARY");
  std::string error;
  std::unique_ptr<Device> dev = createDevice("cuda", error);
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

} // namespace
