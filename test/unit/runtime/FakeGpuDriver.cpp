//===- FakeGpuDriver.cpp - libcuda and libamdhip64 on host memory ---------===//
//
// Every entry point of CudaSymbols.def and HipSymbols.def, declared from
// those tables (so a signature that drifts from the table does not
// compile) and implemented once for both vendors on host memory. It checks
// what a real driver checks where a mistake would otherwise pass unseen:
// initialisation, a current context on the calling thread (cuda), copies
// inside live allocations, known handles, a stream of the backend's own on
// every call (never the legacy one) and no `extra`, and what stream capture
// forbids.
//
//===----------------------------------------------------------------------===//
#include "FakeGpuDriver.h"

#include "runtime/gpu/Driver.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

using namespace strata::runtime::gpu;
using strata::runtime::test::FakeGpuState;
using strata::runtime::test::FakeLaunch;
using strata::runtime::test::FakeTensorMap;
using strata::runtime::test::kFakeLaunchMs;
using strata::runtime::test::kFakeTensorMapMagic;

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
  kIllegalState = 401,
  kNotFound = 500,
  kLaunchFailed = 719,
  kCaptureUnsupported = 900,
  kCaptureInvalidated = 901,
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
    {kIllegalState, "CUDA_ERROR_ILLEGAL_STATE", "hipErrorIllegalState",
     "the operation is not permitted in the current state"},
    {kNotFound, "CUDA_ERROR_NOT_FOUND", "hipErrorNotFound",
     "named symbol not found"},
    {kLaunchFailed, "CUDA_ERROR_LAUNCH_FAILED", "hipErrorLaunchFailure",
     "unspecified launch failure"},
    {kCaptureUnsupported, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "hipErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {kCaptureInvalidated, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "hipErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
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
  /// Each parameter's bytes: 8, or 128 for a tensor map ("<n>" in the
  /// image means n 8-byte parameters; "8,128,8" lists sizes).
  std::vector<int> paramBytes;
  std::string op; ///< "" (records only), "axpy", "rows", "scale",
                  ///< "wsscale", "wscopy"
  uint64_t width = 1;
};

/// A launch as recorded: what the state shows and the function to run.
struct Recorded {
  const FakeFunction *function = nullptr;
  FakeLaunch launch;
};

struct FakeStream {
  FakeGpuState *owner = nullptr;
  bool capturing = false;
  bool invalidated = false; ///< a capture that a forbidden call broke
  std::vector<Recorded> captured;
};

struct FakeGraph {
  FakeGpuState *owner = nullptr;
  std::vector<Recorded> launches;
};

/// Live streams, and graphs and executable graphs, of both vendors.
std::set<FakeStream *> liveStreams;
std::set<FakeGraph *> liveGraphs;

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

/// The live stream \p handle of \p s, or null: the backends use a stream
/// of their own for everything, never the legacy default stream.
FakeStream *findStream(FakeGpuState &s, void *handle) {
  auto *st = static_cast<FakeStream *>(handle);
  if (!liveStreams.count(st) || st->owner != &s)
    return nullptr;
  return st;
}

/// Whether any stream of \p s is capturing.
bool anyCapturing(FakeGpuState &s);

/// A call a capture forbids, on \p st (or, for null, during any capture
/// of \p s): fails and invalidates the capture, as a driver does.
int forbiddenInCapture(FakeGpuState &s, FakeStream *st);

/// For a stream operation: the stream must be live and not capturing.
int streamReady(FakeGpuState &s, void *handle) {
  FakeStream *st = findStream(s, handle);
  if (!st)
    return kInvalidHandle;
  return forbiddenInCapture(s, st);
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
  if (int r = forbiddenInCapture(s, nullptr))
    return r;
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
  if (int r = forbiddenInCapture(s, nullptr))
    return r;
  auto it = s.allocations.find(address);
  if (it == s.allocations.end())
    return kInvalidValue;
  std::free(reinterpret_cast<void *>(it->first));
  s.allocations.erase(it);
  return kSuccess;
}

int doUpload(FakeGpuState &s, uint64_t dst, const void *src, size_t bytes,
             void *stream) {
  if (int r = streamReady(s, stream))
    return r;
  if (!inside(s, dst, bytes) || !src)
    return kInvalidValue;
  std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
  ++s.uploads;
  return kSuccess;
}

int doDownload(FakeGpuState &s, void *dst, uint64_t src, size_t bytes,
               void *stream) {
  if (int r = streamReady(s, stream))
    return r;
  if (!inside(s, src, bytes) || !dst)
    return kInvalidValue;
  std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  return kSuccess;
}

int doCopy(FakeGpuState &s, uint64_t dst, uint64_t src, size_t bytes,
           void *stream) {
  if (int r = streamReady(s, stream))
    return r;
  if (!inside(s, dst, bytes) || !inside(s, src, bytes) ||
      (dst < src + bytes && src < dst + bytes))
    return kInvalidValue;
  std::memcpy(reinterpret_cast<void *>(dst), reinterpret_cast<void *>(src),
              bytes);
  ++s.copies;
  return kSuccess;
}

int doFill32(FakeGpuState &s, uint64_t dst, uint32_t value, size_t words,
             void *stream) {
  if (int r = streamReady(s, stream))
    return r;
  if (dst % 4 != 0 || !inside(s, dst, words * 4))
    return kInvalidValue;
  for (size_t i = 0; i < words; ++i)
    std::memcpy(reinterpret_cast<char *>(dst) + 4 * i, &value, 4);
  ++s.fills;
  return kSuccess;
}

/// Parses an image: a line starting "FAKE", then "<symbol> <parameters>
/// [<op> [<width>]]" lines. The image is read up to its NUL, as a driver
/// reads PTX.
int doLoadModule(FakeGpuState &s, void **out, const void *image) {
  if (!out || !image)
    return kInvalidValue;
  std::string text(static_cast<const char *>(image));
  std::istringstream in(text);
  std::string first;
  if (!std::getline(in, first) || first.rfind("FAKE", 0) != 0)
    return kInvalidImage;
  auto *m = new FakeModule;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    FakeFunction f;
    std::string params;
    if (!(fields >> f.name >> params) || params.empty())
      continue;
    if (params.find(',') == std::string::npos &&
        params.find_first_not_of("0123456789") == std::string::npos) {
      f.numParams = std::stoi(params);
      f.paramBytes.assign(f.numParams, 8);
    } else {
      std::istringstream sizes(params);
      std::string size;
      while (std::getline(sizes, size, ','))
        f.paramBytes.push_back(size == "128" ? 128 : 8);
      f.numParams = static_cast<int>(f.paramBytes.size());
    }
    if (fields >> f.op && !(fields >> f.width))
      f.width = 1;
    m->functions[f.name] = f;
  }
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

/// Float32 views of the memory a launch names, checked to lie inside live
/// allocations: a kernel reading out of bounds fails the launch.
float *floats(FakeGpuState &s, uint64_t address, uint64_t count) {
  if (!inside(s, address, count * 4))
    return nullptr;
  return reinterpret_cast<float *>(address);
}

/// Runs one launch: its op on host memory, the clock, the record.
int execute(FakeGpuState &s, const Recorded &r) {
  const FakeFunction &f = *r.function;
  const std::vector<uint64_t> &a = r.launch.args;
  if (f.op == "axpy" && a.size() == 3) {
    uint64_t n = a[2] * f.width;
    float *x = floats(s, a[0], n), *y = floats(s, a[1], n);
    if (!x || !y)
      return kLaunchFailed;
    for (uint64_t i = 0; i < n; ++i)
      y[i] = 2 * x[i] + y[i];
  } else if (f.op == "rows" && a.size() == 4) {
    const auto *ids = reinterpret_cast<const int32_t *>(a[1]);
    float *out = floats(s, a[2], a[3] * f.width);
    if (!inside(s, a[1], a[3] * 4) || !out)
      return kLaunchFailed;
    for (uint64_t r = 0; r < a[3]; ++r) {
      const float *row =
          floats(s, a[0] + uint64_t(ids[r]) * f.width * 4, f.width);
      if (ids[r] < 0 || !row)
        return kLaunchFailed;
      std::memcpy(out + r * f.width, row, f.width * 4);
    }
  } else if (f.op == "scale" && (a.size() == 3 || a.size() == 3 + 16)) {
    uint64_t n = a[2] * f.width;
    float *in = floats(s, a[0], n), *out = floats(s, a[1], n);
    if (!in || !out)
      return kLaunchFailed;
    for (uint64_t i = 0; i < n; ++i)
      out[i] = 2 * in[i] + 1;
  } else if ((f.op == "wsscale" || f.op == "wscopy") &&
             (a.size() == 4 || a.size() == 4 + 16)) {
    // A pre-launch and its kernel: in -> 2 in + 1 in the workspace, then
    // the workspace -> out.
    uint64_t n = a[3] * f.width;
    float *in = floats(s, a[0], n), *out = floats(s, a[1], n),
          *ws = floats(s, a[2], n);
    if (!in || !out || !ws)
      return kLaunchFailed;
    for (uint64_t i = 0; i < n; ++i) {
      if (f.op == "wsscale")
        ws[i] = 2 * in[i] + 1;
      else
        out[i] = ws[i];
    }
  } else if (!f.op.empty()) {
    return kLaunchFailed;
  }
  s.launches.push_back(r.launch);
  s.clockMs += kFakeLaunchMs;
  return kSuccess;
}

int doLaunch(FakeGpuState &s, void *function, unsigned gx, unsigned gy,
             unsigned gz, unsigned bx, unsigned by, unsigned bz,
             unsigned shared, void *stream, void **params, void **extra,
             bool overlap = false) {
  if (!function)
    return kInvalidHandle;
  FakeStream *st = findStream(s, stream);
  if (!st)
    return kInvalidHandle;
  // The backends pass no `extra`.
  if (extra || gx * gy * gz == 0 || bx * by * bz == 0)
    return kInvalidValue;
  const auto *f = static_cast<const FakeFunction *>(function);
  if (f->numParams > 0 && !params)
    return kInvalidValue;
  FakeLaunch l;
  l.function = f->name;
  l.grid[0] = gx, l.grid[1] = gy, l.grid[2] = gz;
  l.block[0] = bx, l.block[1] = by, l.block[2] = bz;
  l.sharedBytes = shared;
  l.overlap = overlap;
  for (int i = 0; i < f->numParams; ++i) {
    // A tensor map is 128 bytes: its 16 words in order.
    for (int w = 0; w < f->paramBytes[i] / 8; ++w) {
      uint64_t v;
      std::memcpy(&v, static_cast<const char *>(params[i]) + 8 * w, sizeof(v));
      l.args.push_back(v);
    }
  }
  // Captured, a launch runs only when its graph does.
  if (st->capturing) {
    st->captured.push_back({f, std::move(l)});
    return kSuccess;
  }
  return execute(s, {f, std::move(l)});
}

bool anyCapturing(FakeGpuState &s) {
  for (const FakeStream *st : liveStreams)
    if (st->owner == &s && st->capturing)
      return true;
  return false;
}

int forbiddenInCapture(FakeGpuState &s, FakeStream *st) {
  if (st ? !st->capturing : !anyCapturing(s))
    return kSuccess;
  for (FakeStream *other : liveStreams)
    if (other->owner == &s && other->capturing && (!st || other == st))
      other->invalidated = true;
  return kCaptureUnsupported;
}

int doCreateStream(FakeGpuState &s, void **out, unsigned flags) {
  if (!out || flags > 1)
    return kInvalidValue;
  auto *st = new FakeStream;
  st->owner = &s;
  liveStreams.insert(st);
  ++s.liveStreams;
  s.streamFlags.push_back(flags);
  *out = st;
  return kSuccess;
}

int doDestroyStream(FakeGpuState &s, void *stream) {
  FakeStream *st = findStream(s, stream);
  if (!st)
    return kInvalidHandle;
  liveStreams.erase(st);
  delete st;
  --s.liveStreams;
  return kSuccess;
}

int doBeginCapture(FakeGpuState &s, void *stream, int mode) {
  FakeStream *st = findStream(s, stream);
  if (!st)
    return kInvalidHandle;
  if (mode < 0 || mode > 2)
    return kInvalidValue;
  if (st->capturing)
    return kIllegalState;
  st->capturing = true;
  st->invalidated = false;
  st->captured.clear();
  ++s.captures;
  s.captureMode = mode;
  return kSuccess;
}

int doEndCapture(FakeGpuState &s, void *stream, void **graph) {
  FakeStream *st = findStream(s, stream);
  if (!st || !graph)
    return kInvalidValue;
  if (!st->capturing)
    return kIllegalState;
  st->capturing = false;
  *graph = nullptr;
  if (st->invalidated)
    return kCaptureInvalidated;
  auto *g = new FakeGraph{&s, std::move(st->captured)};
  st->captured.clear();
  liveGraphs.insert(g);
  ++s.liveGraphs;
  *graph = g;
  return kSuccess;
}

/// The live graph (or executable graph) \p handle of \p s, or null.
FakeGraph *findGraph(FakeGpuState &s, void *handle) {
  auto *g = static_cast<FakeGraph *>(handle);
  if (!liveGraphs.count(g) || g->owner != &s)
    return nullptr;
  return g;
}

int doInstantiate(FakeGpuState &s, void **exec, void *graph) {
  FakeGraph *g = findGraph(s, graph);
  if (!exec)
    return kInvalidValue;
  if (!g)
    return kInvalidHandle;
  auto *e = new FakeGraph{&s, g->launches};
  liveGraphs.insert(e);
  ++s.liveGraphExecs;
  *exec = e;
  return kSuccess;
}

int doGraphLaunch(FakeGpuState &s, void *exec, void *stream) {
  FakeGraph *e = findGraph(s, exec);
  if (!e)
    return kInvalidHandle;
  if (int r = streamReady(s, stream))
    return r;
  ++s.graphLaunches;
  for (const Recorded &r : e->launches)
    if (int code = execute(s, r))
      return code;
  return kSuccess;
}

int doDestroyGraph(FakeGpuState &s, void *handle, int &live) {
  FakeGraph *g = findGraph(s, handle);
  if (!g)
    return kInvalidHandle;
  liveGraphs.erase(g);
  delete g;
  --live;
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
  if (int r = streamReady(s, stream))
    return r;
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

CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
  if (int r = cudaReady(__func__))
    return r;
  return doCreateStream(cudaState, reinterpret_cast<void **>(stream), flags);
}

CUresult cuStreamDestroy_v2(CUstream stream) {
  if (int r = cudaReady(__func__))
    return r;
  return doDestroyStream(cudaState, stream);
}

CUresult cuStreamSynchronize(CUstream stream) {
  if (int r = cudaReady(__func__))
    return r;
  return streamReady(cudaState, stream);
}

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

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes,
                              CUstream stream) {
  if (int r = cudaReady(__func__))
    return r;
  return doUpload(cudaState, dst, src, bytes, stream);
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes,
                              CUstream stream) {
  if (int r = cudaReady(__func__))
    return r;
  return doDownload(cudaState, dst, src, bytes, stream);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                              CUstream stream) {
  if (int r = cudaReady(__func__))
    return r;
  return doCopy(cudaState, dst, src, bytes, stream);
}

CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t words,
                          CUstream stream) {
  if (int r = cudaReady(__func__))
    return r;
  return doFill32(cudaState, dst, value, words, stream);
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

/// cuLaunchKernel and cuLaunchKernelEx (\p overlap: programmatic stream
/// serialisation allowed).
static CUresult fakeCudaLaunch(CUfunction f, unsigned int gx, unsigned int gy,
                               unsigned int gz, unsigned int bx,
                               unsigned int by, unsigned int bz,
                               unsigned int shared, CUstream stream,
                               void **params, void **extra, bool overlap) {
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
                  extra, overlap);
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy,
                        unsigned int gz, unsigned int bx, unsigned int by,
                        unsigned int bz, unsigned int shared, CUstream stream,
                        void **params, void **extra) {
  if (int r = cudaReady(__func__))
    return r;
  return fakeCudaLaunch(f, gx, gy, gz, bx, by, bz, shared, stream, params,
                        extra, false);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                          void **params, void **extra) {
  if (int r = cudaReady(__func__))
    return r;
  // The one attribute the runtime sets: programmatic stream serialisation
  // (id 6), allowed.
  if (!config || (config->numAttrs > 0 && !config->attrs))
    return kInvalidValue;
  bool overlap = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id != 6)
      return kInvalidValue;
    overlap = config->attrs[i].value.programmaticStreamSerializationAllowed;
  }
  return fakeCudaLaunch(f, config->gridDimX, config->gridDimY, config->gridDimZ,
                        config->blockDimX, config->blockDimY, config->blockDimZ,
                        config->sharedMemBytes, config->hStream, params, extra,
                        overlap);
}

CUresult cuTensorMapEncodeTiled(CUtensorMap *map, int type, unsigned int rank,
                                void *address, const unsigned long long *dims,
                                const unsigned long long *strides,
                                const unsigned int *box,
                                const unsigned int *elementStrides,
                                int interleave, int swizzle, int l2Promotion,
                                int oobFill) {
  if (int r = cudaReady(__func__))
    return r;
  // The driver's rules (cuda.h) for the data types the runtime uses: INT32
  // 3, FLOAT16 6, FLOAT32 7, BFLOAT16 9.
  const int elem = type == 6 || type == 9 ? 2 : type == 3 || type == 7 ? 4 : 0;
  if (!map || !address || elem == 0 || rank < 1 || rank > 5 || !dims ||
      (rank > 1 && !strides) || !box || !elementStrides || interleave != 0 ||
      swizzle < 0 || swizzle > 3 || l2Promotion < 0 || l2Promotion > 3 ||
      oobFill < 0 || oobFill > 1 ||
      reinterpret_cast<uintptr_t>(address) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(map) % 64 != 0)
    return kInvalidValue;
  for (unsigned d = 0; d < rank; ++d) {
    if (dims[d] == 0 || dims[d] > (1ull << 32) || box[d] == 0 || box[d] > 256 ||
        elementStrides[d] == 0 || elementStrides[d] > 8)
      return kInvalidValue;
    if (d + 1 < rank && (strides[d] % 16 != 0 || strides[d] >= (1ull << 40)))
      return kInvalidValue;
  }
  const unsigned inner = box[0] * elem;
  if (inner % 16 != 0 || (swizzle > 0 && inner > (16u << swizzle)))
    return kInvalidValue;
  // The fake's encoding: a readable record the tests decode.
  FakeTensorMap m;
  m.type = type;
  m.rank = rank;
  m.address = reinterpret_cast<uint64_t>(address);
  for (unsigned d = 0; d < rank; ++d) {
    m.dims[d] = dims[d];
    m.box[d] = box[d];
    if (d + 1 < rank)
      m.strides[d] = strides[d];
  }
  m.swizzle = swizzle;
  m.l2Promotion = l2Promotion;
  m.oobFill = oobFill;
  cudaState.tensorMaps.push_back(m);
  std::memset(map, 0, sizeof(*map));
  map->opaque[0] = kFakeTensorMapMagic;
  map->opaque[1] = cudaState.tensorMaps.size() - 1;
  map->opaque[2] = m.address;
  return kSuccess;
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

CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  if (int r = cudaReady(__func__))
    return r;
  return doBeginCapture(cudaState, stream, mode);
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph) {
  if (int r = cudaReady(__func__))
    return r;
  return doEndCapture(cudaState, stream, reinterpret_cast<void **>(graph));
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph,
                                     unsigned long long flags) {
  if (int r = cudaReady(__func__))
    return r;
  if (flags != 0)
    return kInvalidValue;
  return doInstantiate(cudaState, reinterpret_cast<void **>(exec), graph);
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  if (int r = cudaReady(__func__))
    return r;
  return doGraphLaunch(cudaState, exec, stream);
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  if (int r = cudaReady(__func__))
    return r;
  return doDestroyGraph(cudaState, exec, cudaState.liveGraphExecs);
}

CUresult cuGraphDestroy(CUgraph graph) {
  if (int r = cudaReady(__func__))
    return r;
  return doDestroyGraph(cudaState, graph, cudaState.liveGraphs);
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

hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags) {
  if (int r = hipReady(__func__))
    return r;
  return doCreateStream(hipState, reinterpret_cast<void **>(stream), flags);
}

hipError_t hipStreamDestroy(hipStream_t stream) {
  if (int r = hipReady(__func__))
    return r;
  return doDestroyStream(hipState, stream);
}

hipError_t hipStreamSynchronize(hipStream_t stream) {
  if (int r = hipReady(__func__))
    return r;
  return streamReady(hipState, stream);
}

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

hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void *src, size_t bytes,
                              hipStream_t stream) {
  if (int r = hipReady(__func__))
    return r;
  return doUpload(hipState, reinterpret_cast<uintptr_t>(dst), src, bytes,
                  stream);
}

hipError_t hipMemcpyDtoHAsync(void *dst, hipDeviceptr_t src, size_t bytes,
                              hipStream_t stream) {
  if (int r = hipReady(__func__))
    return r;
  return doDownload(hipState, dst, reinterpret_cast<uintptr_t>(src), bytes,
                    stream);
}

hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src,
                              size_t bytes, hipStream_t stream) {
  if (int r = hipReady(__func__))
    return r;
  return doCopy(hipState, reinterpret_cast<uintptr_t>(dst),
                reinterpret_cast<uintptr_t>(src), bytes, stream);
}

hipError_t hipMemsetD32Async(hipDeviceptr_t dst, int value, size_t words,
                             hipStream_t stream) {
  if (int r = hipReady(__func__))
    return r;
  return doFill32(hipState, reinterpret_cast<uintptr_t>(dst),
                  static_cast<uint32_t>(value), words, stream);
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

hipError_t hipStreamBeginCapture(hipStream_t stream,
                                 hipStreamCaptureMode mode) {
  if (int r = hipReady(__func__))
    return r;
  return doBeginCapture(hipState, stream, mode);
}

hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *graph) {
  if (int r = hipReady(__func__))
    return r;
  return doEndCapture(hipState, stream, reinterpret_cast<void **>(graph));
}

hipError_t hipGraphInstantiate(hipGraphExec_t *exec, hipGraph_t graph,
                               hipGraphNode_t *errorNode, char *log,
                               size_t logBytes) {
  if (int r = hipReady(__func__))
    return r;
  // The backend asks for no diagnostics buffer.
  if (errorNode || log || logBytes)
    return kInvalidValue;
  return doInstantiate(hipState, reinterpret_cast<void **>(exec), graph);
}

hipError_t hipGraphLaunch(hipGraphExec_t exec, hipStream_t stream) {
  if (int r = hipReady(__func__))
    return r;
  return doGraphLaunch(hipState, exec, stream);
}

hipError_t hipGraphExecDestroy(hipGraphExec_t exec) {
  if (int r = hipReady(__func__))
    return r;
  return doDestroyGraph(hipState, exec, hipState.liveGraphExecs);
}

hipError_t hipGraphDestroy(hipGraph_t graph) {
  if (int r = hipReady(__func__))
    return r;
  return doDestroyGraph(hipState, graph, hipState.liveGraphs);
}

const char *hipGetErrorName(hipError_t code) {
  const ErrorText *e = findError(code);
  return e ? e->hipName : "hipErrorUnknown";
}

const char *hipGetErrorString(hipError_t code) {
  const ErrorText *e = findError(code);
  return e ? e->text : "unknown error";
}
