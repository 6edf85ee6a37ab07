//===- FakeGpuDriver.cpp - libcuda and libamdhip64 on host memory ---------===//
//
// Every entry point of CudaSymbols.def and HipSymbols.def, declared from
// those tables (so a signature that drifts from the table does not
// compile) and implemented once for both vendors on host memory. It checks
// what a real driver checks where a mistake would otherwise pass unseen:
// initialisation, a current context on the calling thread (cuda), copies
// inside live allocations, known handles, no stream and no `extra`.
//
//===----------------------------------------------------------------------===//
#include "FakeGpuDriver.h"

#include "runtime/gpu/Driver.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

using namespace strata::runtime::gpu;
using strata::runtime::test::FakeGpuState;
using strata::runtime::test::FakeLaunch;
using strata::runtime::test::kFakeLaunchMs;

extern "C" {
#define CUDA_FN(Name, Ret, Params) Ret Name Params;
#include "runtime/gpu/CudaSymbols.def"
#define HIP_FN(Name, Ret, Params) Ret Name Params;
#include "runtime/gpu/HipSymbols.def"
}

namespace {

/// Result codes (the same numbers for both vendors).
enum Code : int {
  kSuccess = 0,
  kInvalidValue = 1,
  kOutOfMemory = 2,
  kNotInitialized = 3,
  kNoDevice = 100,
  kInvalidDevice = 101,
  kInvalidImage = 200,
  kInvalidContext = 201,
  kInvalidHandle = 400,
  kNotFound = 500,
  kLaunchFailed = 719,
};

struct ErrorText {
  int code;
  const char *cudaName;
  const char *hipName;
  const char *text;
};

constexpr ErrorText kErrors[] = {
    {kSuccess, "CUDA_SUCCESS", "hipSuccess", "no error"},
    {kInvalidValue, "CUDA_ERROR_INVALID_VALUE", "hipErrorInvalidValue",
     "invalid argument"},
    {kOutOfMemory, "CUDA_ERROR_OUT_OF_MEMORY", "hipErrorOutOfMemory",
     "out of memory"},
    {kNotInitialized, "CUDA_ERROR_NOT_INITIALIZED", "hipErrorNotInitialized",
     "initialization error"},
    {kNoDevice, "CUDA_ERROR_NO_DEVICE", "hipErrorNoDevice",
     "no GPU device is detected"},
    {kInvalidDevice, "CUDA_ERROR_INVALID_DEVICE", "hipErrorInvalidDevice",
     "invalid device ordinal"},
    {kInvalidImage, "CUDA_ERROR_INVALID_IMAGE", "hipErrorInvalidImage",
     "device kernel image is invalid"},
    {kInvalidContext, "CUDA_ERROR_INVALID_CONTEXT", "hipErrorInvalidContext",
     "invalid device context"},
    {kInvalidHandle, "CUDA_ERROR_INVALID_HANDLE", "hipErrorInvalidHandle",
     "invalid resource handle"},
    {kNotFound, "CUDA_ERROR_NOT_FOUND", "hipErrorNotFound",
     "named symbol not found"},
    {kLaunchFailed, "CUDA_ERROR_LAUNCH_FAILED", "hipErrorLaunchFailure",
     "unspecified launch failure"},
};

const ErrorText *findError(int code) {
  for (const ErrorText &e : kErrors)
    if (e.code == code)
      return &e;
  return nullptr;
}

FakeGpuState cudaState;
FakeGpuState hipState;
/// The cuda primary context (one device, one context).
int primaryContext;
/// Whether the cuda primary context is current on this thread.
thread_local bool cudaCurrent = false;

struct FakeFunction {
  std::string name;
  int numParams = 0;
};

struct FakeModule {
  std::map<std::string, FakeFunction> functions;
};

struct FakeEvent {
  double ms = -1; ///< the clock when recorded; negative: never recorded
};

/// Returns the requested failure code if \p call is the one to fail.
int failing(FakeGpuState &s, const char *call) {
  if (s.failCall != call)
    return kSuccess;
  s.failCall.clear();
  return s.failCode;
}

/// Calls on a cuda device need cuInit and a current context.
int cudaReady(const char *call) {
  if (int r = failing(cudaState, call))
    return r;
  if (!cudaState.initialized)
    return kNotInitialized;
  if (!cudaCurrent || cudaState.contextRefs <= 0)
    return kInvalidContext;
  return kSuccess;
}

int hipReady(const char *call) {
  if (int r = failing(hipState, call))
    return r;
  return hipState.initialized ? kSuccess : kNotInitialized;
}

/// True if [address, address + bytes) lies in one live allocation.
bool inside(const FakeGpuState &s, uint64_t address, uint64_t bytes) {
  auto it = s.allocations.upper_bound(address);
  if (it == s.allocations.begin())
    return false;
  --it;
  return address + bytes <= it->first + it->second;
}

int doAlloc(FakeGpuState &s, uint64_t &out, size_t bytes) {
  if (bytes == 0)
    return kInvalidValue;
  void *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!p)
    return kOutOfMemory;
  out = reinterpret_cast<uintptr_t>(p);
  s.allocations[out] = bytes;
  return kSuccess;
}

int doFree(FakeGpuState &s, uint64_t address) {
  auto it = s.allocations.find(address);
  if (it == s.allocations.end())
    return kInvalidValue;
  std::free(reinterpret_cast<void *>(it->first));
  s.allocations.erase(it);
  return kSuccess;
}

int doUpload(FakeGpuState &s, uint64_t dst, const void *src, size_t bytes) {
  if (!inside(s, dst, bytes) || !src)
    return kInvalidValue;
  std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
  ++s.uploads;
  return kSuccess;
}

int doDownload(FakeGpuState &s, void *dst, uint64_t src, size_t bytes) {
  if (!inside(s, src, bytes) || !dst)
    return kInvalidValue;
  std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  return kSuccess;
}

int doFill32(FakeGpuState &s, uint64_t dst, uint32_t value, size_t words) {
  if (dst % 4 != 0 || !inside(s, dst, words * 4))
    return kInvalidValue;
  for (size_t i = 0; i < words; ++i)
    std::memcpy(reinterpret_cast<char *>(dst) + 4 * i, &value, 4);
  return kSuccess;
}

/// Parses an image: a line starting "FAKE", then "<symbol> <parameters>"
/// lines. The image
/// is read up to its NUL, as a driver reads PTX.
int doLoadModule(FakeGpuState &s, void **out, const void *image) {
  if (!out || !image)
    return kInvalidValue;
  std::string text(static_cast<const char *>(image));
  std::istringstream in(text);
  std::string first;
  if (!std::getline(in, first) || first.rfind("FAKE", 0) != 0)
    return kInvalidImage;
  auto *m = new FakeModule;
  std::string name;
  int params = 0;
  while (in >> name >> params)
    m->functions[name] = FakeFunction{name, params};
  s.modules.push_back(text);
  *out = m;
  return kSuccess;
}

int doUnloadModule(FakeGpuState &s, void *module) {
  if (!module)
    return kInvalidHandle;
  delete static_cast<FakeModule *>(module);
  ++s.moduleUnloads;
  return kSuccess;
}

int doGetFunction(void **out, void *module, const char *name) {
  if (!out || !module || !name)
    return kInvalidValue;
  auto &functions = static_cast<FakeModule *>(module)->functions;
  auto it = functions.find(name);
  if (it == functions.end())
    return kNotFound;
  *out = &it->second;
  return kSuccess;
}

int doLaunch(FakeGpuState &s, void *function, unsigned gx, unsigned gy,
             unsigned gz, unsigned bx, unsigned by, unsigned bz,
             unsigned shared, void *stream, void **params, void **extra) {
  if (!function)
    return kInvalidHandle;
  // The backends launch on the default stream and pass no `extra`.
  if (stream || extra || gx * gy * gz == 0 || bx * by * bz == 0)
    return kInvalidValue;
  const auto *f = static_cast<const FakeFunction *>(function);
  if (f->numParams > 0 && !params)
    return kInvalidValue;
  FakeLaunch l;
  l.function = f->name;
  l.grid[0] = gx, l.grid[1] = gy, l.grid[2] = gz;
  l.block[0] = bx, l.block[1] = by, l.block[2] = bz;
  l.sharedBytes = shared;
  for (int i = 0; i < f->numParams; ++i) {
    uint64_t v;
    std::memcpy(&v, params[i], sizeof(v));
    l.args.push_back(v);
  }
  s.launches.push_back(std::move(l));
  s.clockMs += kFakeLaunchMs;
  return kSuccess;
}

int doCreateEvent(FakeGpuState &s, void **out) {
  if (!out)
    return kInvalidValue;
  *out = new FakeEvent;
  ++s.liveEvents;
  return kSuccess;
}

int doRecordEvent(FakeGpuState &s, void *event, void *stream) {
  if (!event)
    return kInvalidHandle;
  if (stream)
    return kInvalidValue;
  static_cast<FakeEvent *>(event)->ms = s.clockMs;
  return kSuccess;
}

int doElapsed(float *ms, void *from, void *to) {
  if (!ms || !from || !to)
    return kInvalidValue;
  const auto *a = static_cast<const FakeEvent *>(from);
  const auto *b = static_cast<const FakeEvent *>(to);
  if (a->ms < 0 || b->ms < 0)
    return kInvalidHandle;
  *ms = static_cast<float>(b->ms - a->ms);
  return kSuccess;
}

int doDestroyEvent(FakeGpuState &s, void *event) {
  if (!event)
    return kInvalidHandle;
  delete static_cast<FakeEvent *>(event);
  --s.liveEvents;
  return kSuccess;
}

} // namespace

// ---- inspection ------------------------------------------------------------

FakeGpuState *fakeCudaState() { return &cudaState; }
FakeGpuState *fakeHipState() { return &hipState; }

// ---- CUDA ------------------------------------------------------------------

CUresult cuInit(unsigned int flags) {
  if (int r = failing(cudaState, __func__))
    return r;
  if (flags != 0)
    return kInvalidValue;
  cudaState.initialized = true;
  return kSuccess;
}

CUresult cuDriverGetVersion(int *version) {
  if (int r = failing(cudaState, __func__))
    return r;
  *version = 12040;
  return kSuccess;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
  if (int r = failing(cudaState, __func__))
    return r;
  if (!cudaState.initialized)
    return kNotInitialized;
  if (ordinal != 0)
    return kInvalidDevice;
  *device = 0;
  return kSuccess;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice device) {
  if (int r = failing(cudaState, __func__))
    return r;
  if (device != 0 || len <= 0)
    return kInvalidValue;
  std::snprintf(name, len, "Fake CUDA GPU");
  return kSuccess;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice device) {
  if (int r = failing(cudaState, __func__))
    return r;
  if (!cudaState.initialized)
    return kNotInitialized;
  if (device != 0)
    return kInvalidDevice;
  ++cudaState.contextRefs;
  *context = reinterpret_cast<CUcontext>(&primaryContext);
  return kSuccess;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device) {
  if (device != 0 || cudaState.contextRefs <= 0)
    return kInvalidContext;
  --cudaState.contextRefs;
  return kSuccess;
}

CUresult cuCtxSetCurrent(CUcontext context) {
  if (int r = failing(cudaState, __func__))
    return r;
  if (context && context != reinterpret_cast<CUcontext>(&primaryContext))
    return kInvalidContext;
  ++cudaState.binds;
  cudaCurrent = context != nullptr;
  return kSuccess;
}

CUresult cuCtxSynchronize() { return cudaReady(__func__); }

CUresult cuMemAlloc_v2(CUdeviceptr *out, size_t bytes) {
  if (int r = cudaReady(__func__))
    return r;
  uint64_t p = 0;
  int r = doAlloc(cudaState, p, bytes);
  *out = p;
  return r;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  if (int r = cudaReady(__func__))
    return r;
  return doFree(cudaState, p);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
  if (int r = cudaReady(__func__))
    return r;
  return doUpload(cudaState, dst, src, bytes);
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
  if (int r = cudaReady(__func__))
    return r;
  return doDownload(cudaState, dst, src, bytes);
}

CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t words) {
  if (int r = cudaReady(__func__))
    return r;
  return doFill32(cudaState, dst, value, words);
}

CUresult cuModuleLoadData(CUmodule *module, const void *image) {
  if (int r = cudaReady(__func__))
    return r;
  return doLoadModule(cudaState, reinterpret_cast<void **>(module), image);
}

CUresult cuModuleUnload(CUmodule module) {
  if (int r = cudaReady(__func__))
    return r;
  return doUnloadModule(cudaState, module);
}

CUresult cuModuleGetFunction(CUfunction *function, CUmodule module,
                             const char *name) {
  if (int r = cudaReady(__func__))
    return r;
  return doGetFunction(reinterpret_cast<void **>(function), module, name);
}

CUresult cuFuncSetAttribute(CUfunction function, CUfunction_attribute attr,
                            int value) {
  if (int r = cudaReady(__func__))
    return r;
  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES; an H100/H200 block
  // takes at most 227 KiB.
  if (!function || attr != 8 || value < 0 || value > 227 * 1024)
    return kInvalidValue;
  const auto *f = reinterpret_cast<const FakeFunction *>(function);
  cudaState.sharedOptIns.emplace_back(f->name, value);
  return kSuccess;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy,
                        unsigned int gz, unsigned int bx, unsigned int by,
                        unsigned int bz, unsigned int shared, CUstream stream,
                        void **params, void **extra) {
  if (int r = cudaReady(__func__))
    return r;
  if (f && shared > 48 * 1024) {
    // Above 48 KiB a launch needs the function's opt-in, as on hardware.
    const auto *fn = reinterpret_cast<const FakeFunction *>(f);
    int allowed = 0;
    for (const auto &[name, bytes] : cudaState.sharedOptIns)
      if (name == fn->name)
        allowed = bytes;
    if (shared > static_cast<unsigned>(allowed))
      return kInvalidValue;
  }
  return doLaunch(cudaState, f, gx, gy, gz, bx, by, bz, shared, stream, params,
                  extra);
}

CUresult cuEventCreate(CUevent *event, unsigned int flags) {
  if (int r = cudaReady(__func__))
    return r;
  if (flags != 0)
    return kInvalidValue;
  return doCreateEvent(cudaState, reinterpret_cast<void **>(event));
}

CUresult cuEventRecord(CUevent event, CUstream stream) {
  if (int r = cudaReady(__func__))
    return r;
  return doRecordEvent(cudaState, event, stream);
}

CUresult cuEventElapsedTime(float *ms, CUevent from, CUevent to) {
  if (int r = cudaReady(__func__))
    return r;
  return doElapsed(ms, from, to);
}

CUresult cuEventDestroy_v2(CUevent event) {
  if (int r = cudaReady(__func__))
    return r;
  return doDestroyEvent(cudaState, event);
}

CUresult cuGetErrorName(CUresult code, const char **out) {
  const ErrorText *e = findError(code);
  if (!e)
    return kInvalidValue;
  *out = e->cudaName;
  return kSuccess;
}

CUresult cuGetErrorString(CUresult code, const char **out) {
  const ErrorText *e = findError(code);
  if (!e)
    return kInvalidValue;
  *out = e->text;
  return kSuccess;
}

// ---- HIP -------------------------------------------------------------------

hipError_t hipInit(unsigned int flags) {
  if (int r = failing(hipState, __func__))
    return r;
  if (flags != 0)
    return kInvalidValue;
  hipState.initialized = true;
  return kSuccess;
}

hipError_t hipDriverGetVersion(int *version) {
  if (int r = failing(hipState, __func__))
    return r;
  *version = 60342134;
  return kSuccess;
}

hipError_t hipSetDevice(int device) {
  if (int r = hipReady(__func__))
    return r;
  if (device != 0)
    return kInvalidDevice;
  ++hipState.binds;
  return kSuccess;
}

hipError_t hipDeviceGet(hipDevice_t *device, int ordinal) {
  if (int r = hipReady(__func__))
    return r;
  if (ordinal != 0)
    return kInvalidDevice;
  *device = 0;
  return kSuccess;
}

hipError_t hipDeviceGetName(char *name, int len, hipDevice_t device) {
  if (int r = hipReady(__func__))
    return r;
  if (device != 0 || len <= 0)
    return kInvalidValue;
  std::snprintf(name, len, "Fake HIP GPU");
  return kSuccess;
}

hipError_t hipDeviceSynchronize() { return hipReady(__func__); }

hipError_t hipMalloc(void **out, size_t bytes) {
  if (int r = hipReady(__func__))
    return r;
  uint64_t p = 0;
  int r = doAlloc(hipState, p, bytes);
  *out = reinterpret_cast<void *>(p);
  return r;
}

hipError_t hipFree(void *p) {
  if (int r = hipReady(__func__))
    return r;
  return doFree(hipState, reinterpret_cast<uintptr_t>(p));
}

hipError_t hipMemcpyHtoD(hipDeviceptr_t dst, const void *src, size_t bytes) {
  if (int r = hipReady(__func__))
    return r;
  return doUpload(hipState, reinterpret_cast<uintptr_t>(dst), src, bytes);
}

hipError_t hipMemcpyDtoH(void *dst, hipDeviceptr_t src, size_t bytes) {
  if (int r = hipReady(__func__))
    return r;
  return doDownload(hipState, dst, reinterpret_cast<uintptr_t>(src), bytes);
}

hipError_t hipMemsetD32(hipDeviceptr_t dst, int value, size_t words) {
  if (int r = hipReady(__func__))
    return r;
  return doFill32(hipState, reinterpret_cast<uintptr_t>(dst),
                  static_cast<uint32_t>(value), words);
}

hipError_t hipModuleLoadData(hipModule_t *module, const void *image) {
  if (int r = hipReady(__func__))
    return r;
  return doLoadModule(hipState, reinterpret_cast<void **>(module), image);
}

hipError_t hipModuleUnload(hipModule_t module) {
  if (int r = hipReady(__func__))
    return r;
  return doUnloadModule(hipState, module);
}

hipError_t hipModuleGetFunction(hipFunction_t *function, hipModule_t module,
                                const char *name) {
  if (int r = hipReady(__func__))
    return r;
  return doGetFunction(reinterpret_cast<void **>(function), module, name);
}

hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gx,
                                 unsigned int gy, unsigned int gz,
                                 unsigned int bx, unsigned int by,
                                 unsigned int bz, unsigned int shared,
                                 hipStream_t stream, void **params,
                                 void **extra) {
  if (int r = hipReady(__func__))
    return r;
  // gfx1151: 64 KiB of LDS per workgroup, no opt-in.
  if (shared > 64 * 1024)
    return kInvalidValue;
  return doLaunch(hipState, f, gx, gy, gz, bx, by, bz, shared, stream, params,
                  extra);
}

hipError_t hipEventCreate(hipEvent_t *event) {
  if (int r = hipReady(__func__))
    return r;
  return doCreateEvent(hipState, reinterpret_cast<void **>(event));
}

hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream) {
  if (int r = hipReady(__func__))
    return r;
  return doRecordEvent(hipState, event, stream);
}

hipError_t hipEventElapsedTime(float *ms, hipEvent_t from, hipEvent_t to) {
  if (int r = hipReady(__func__))
    return r;
  return doElapsed(ms, from, to);
}

hipError_t hipEventDestroy(hipEvent_t event) {
  if (int r = hipReady(__func__))
    return r;
  return doDestroyEvent(hipState, event);
}

const char *hipGetErrorName(hipError_t code) {
  const ErrorText *e = findError(code);
  return e ? e->hipName : "hipErrorUnknown";
}

const char *hipGetErrorString(hipError_t code) {
  const ErrorText *e = findError(code);
  return e ? e->text : "unknown error";
}
