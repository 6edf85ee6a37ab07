//===- CudaApi.h - the CUDA driver as GpuDevice uses it ---------*- C++ -*-===//
//
// The traits of GpuDevice<CudaApi>: the library, the symbol table from
// CudaSymbols.def and one small function per device operation. Only what
// differs between the vendors lives here (a primary context to retain and
// make current on each thread, CUdeviceptr integers, an opt-in for more
// than 48 KiB of dynamic shared memory, error names through out-params).
// Every operation takes the device's stream: one non-blocking stream per
// device, since stream capture is illegal on the legacy default stream.
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/Device.h"
#include "runtime/gpu/Driver.h"

#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace strata::runtime::gpu {

struct CudaApi {
  static constexpr const char *kName = "cuda";
  static constexpr const char *kTarget = "sm_90";
  static constexpr const char *kLibrary = "libcuda.so.1";
  static constexpr const char *kLibraryEnv = "STRATA_CUDA_LIBRARY";
  static constexpr const char *kMissingHint = "no NVIDIA driver here?";
  /// Dynamic shared memory a launch may use without cuFuncSetAttribute.
  static constexpr uint32_t kSharedWithoutOptIn = 48 * 1024;
  /// Tensor maps for the TMA (cuTensorMapEncodeTiled).
  static constexpr bool kTensorMaps = true;

  using Module = CUmodule;
  using Function = CUfunction;
  using Event = CUevent;
  using Stream = CUstream;
  using Graph = CUgraph;
  using GraphExec = CUgraphExec;

  /// Every entry point of CudaSymbols.def, null until loaded.
  struct Symbols {
#define CUDA_FN(Name, Ret, Params) Ret(*Name) Params = nullptr;
#include "runtime/gpu/CudaSymbols.def"
  };

  /// Calls \p f(name, slot) for every entry point, in table order.
  template <class F> static void forEachSymbol(Symbols &s, F &&f) {
#define CUDA_FN(Name, Ret, Params) f(#Name, s.Name);
#include "runtime/gpu/CudaSymbols.def"
  }

  /// What an open device holds.
  struct Context {
    CUdevice device = 0;
    CUcontext context = nullptr;
  };

  static Status init(const Symbols &s) { return STRATA_GPU_CALL(s, cuInit, 0); }

  /// Takes device 0's primary context (the one the runtime API shares) and
  /// makes it current on this thread.
  static Status open(const Symbols &s, Context &c) {
    if (Status st = STRATA_GPU_CALL(s, cuDeviceGet, &c.device, 0); !st.ok())
      return st;
    if (Status st =
            STRATA_GPU_CALL(s, cuDevicePrimaryCtxRetain, &c.context, c.device);
        !st.ok())
      return st;
    Status st = bind(s, c);
    if (!st.ok())
      close(s, c);
    return st;
  }

  /// Gives the primary context back (after everything on it was freed).
  static void close(const Symbols &s, Context &c) {
    if (c.context)
      s.cuDevicePrimaryCtxRelease_v2(c.device);
    c.context = nullptr;
  }

  /// Makes the context current on the calling thread: the driver keeps the
  /// current context per thread, and a device may be driven from another
  /// thread than the one that created it.
  static Status bind(const Symbols &s, const Context &c) {
    return STRATA_GPU_CALL(s, cuCtxSetCurrent, c.context);
  }

  static Status deviceName(const Symbols &s, const Context &c, char *out,
                           int len) {
    return STRATA_GPU_CALL(s, cuDeviceGetName, out, len, c.device);
  }

  /// "12.4" from 12040.
  static Status driverVersion(const Symbols &s, std::string &out) {
    int v = 0;
    Status st = STRATA_GPU_CALL(s, cuDriverGetVersion, &v);
    out = fmt::format("{}.{}", v / 1000, v % 1000 / 10);
    return st;
  }

  static Status alloc(const Symbols &s, uint64_t bytes, uint64_t &ptr) {
    CUdeviceptr p = 0;
    Status st = STRATA_GPU_CALL(s, cuMemAlloc_v2, &p, bytes);
    ptr = p;
    return st;
  }

  static Status release(const Symbols &s, uint64_t ptr) {
    return STRATA_GPU_CALL(s, cuMemFree_v2, ptr);
  }

  /// A stream that does not synchronise with the legacy default stream
  /// (CU_STREAM_NON_BLOCKING): the device's only stream, so it can be
  /// captured.
  static Status createStream(const Symbols &s, Stream &stream) {
    constexpr unsigned kNonBlocking = 0x1; // CU_STREAM_NON_BLOCKING
    return STRATA_GPU_CALL(s, cuStreamCreate, &stream, kNonBlocking);
  }

  static Status destroyStream(const Symbols &s, Stream stream) {
    return STRATA_GPU_CALL(s, cuStreamDestroy_v2, stream);
  }

  /// Enqueues a copy on \p stream (GpuDevice waits for it).
  static Status upload(const Symbols &s, Stream stream, uint64_t dst,
                       const void *src, uint64_t bytes) {
    return STRATA_GPU_CALL(s, cuMemcpyHtoDAsync_v2, dst, src, bytes, stream);
  }

  static Status download(const Symbols &s, Stream stream, void *dst,
                         uint64_t src, uint64_t bytes) {
    return STRATA_GPU_CALL(s, cuMemcpyDtoHAsync_v2, dst, src, bytes, stream);
  }

  /// Enqueues a device-to-device copy on \p stream.
  static Status copy(const Symbols &s, Stream stream, uint64_t dst,
                     uint64_t src, uint64_t bytes) {
    return STRATA_GPU_CALL(s, cuMemcpyDtoDAsync_v2, dst, src, bytes, stream);
  }

  static Status fill32(const Symbols &s, Stream stream, uint64_t dst,
                       uint32_t pattern, uint64_t words) {
    return STRATA_GPU_CALL(s, cuMemsetD32Async, dst, pattern, words, stream);
  }

  static Status synchronize(const Symbols &s, Stream stream) {
    return STRATA_GPU_CALL(s, cuStreamSynchronize, stream);
  }

  static Status loadModule(const Symbols &s, Module &m, const void *image) {
    return STRATA_GPU_CALL(s, cuModuleLoadData, &m, image);
  }

  static Status unloadModule(const Symbols &s, Module m) {
    return STRATA_GPU_CALL(s, cuModuleUnload, m);
  }

  static Status getFunction(const Symbols &s, Function &f, Module m,
                            const char *symbol) {
    return STRATA_GPU_CALL(s, cuModuleGetFunction, &f, m, symbol);
  }

  /// Lets \p f take \p bytes of dynamic shared memory (above 48 KiB a
  /// kernel must opt in, up to the device's per-block limit).
  static Status allowShared(const Symbols &s, Function f, uint32_t bytes) {
    // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    constexpr CUfunction_attribute kMaxDynamicShared = 8;
    return STRATA_GPU_CALL(s, cuFuncSetAttribute, f, kMaxDynamicShared,
                           static_cast<int>(bytes));
  }

  /// Encodes \p r as a tiled tensor map: no interleave, every element
  /// stride 1, L2 promotion by 128 bytes, elements out of bounds read as 0.
  static Status encodeTensorMap(const Symbols &s, const TensorMapRequest &r,
                                TensorMapBytes &out) {
    static_assert(sizeof(CUtensorMap) == sizeof(TensorMapBytes) &&
                  alignof(CUtensorMap) == alignof(TensorMapBytes));
    // CUtensorMapDataType values (cuda.h): INT32 3, FLOAT16 6, FLOAT32 7,
    // BFLOAT16 9. The plan's validator admits only these four.
    int type = 9;
    switch (r.dtype) {
    case format::PlanDType::I32:
      type = 3;
      break;
    case format::PlanDType::F16:
      type = 6;
      break;
    case format::PlanDType::F32:
      type = 7;
      break;
    default:
      break;
    }
    // CUtensorMapSwizzle: NONE 0, 32B 1, 64B 2, 128B 3.
    const int swizzle = r.swizzle == 128  ? 3
                        : r.swizzle == 64 ? 2
                        : r.swizzle == 32 ? 1
                                          : 0;
    unsigned long long dims[5] = {}, strides[4] = {};
    unsigned int box[5] = {}, elementStrides[5] = {1, 1, 1, 1, 1};
    for (uint32_t d = 0; d < r.rank && d < 5; ++d) {
      dims[d] = r.dims[d];
      box[d] = r.box[d];
      if (d + 1 < r.rank)
        strides[d] = r.strides[d];
    }
    constexpr int kNoInterleave = 0, kL2Promote128 = 2, kOobZero = 0;
    return STRATA_GPU_CALL(
        s, cuTensorMapEncodeTiled, reinterpret_cast<CUtensorMap *>(out.words),
        type, r.rank, const_cast<void *>(r.base), dims, strides, box,
        elementStrides, kNoInterleave, swizzle, kL2Promote128, kOobZero);
  }

  /// Enqueues \p f on \p stream; with \p overlap (a kernel that waits for
  /// the grid before it itself) under programmatic stream serialisation,
  /// so it may start while that grid drains (a graph keeps the edge).
  static Status launch(const Symbols &s, Stream stream, Function f,
                       const uint32_t grid[3], const uint32_t block[3],
                       uint32_t sharedBytes, void **params, bool overlap) {
    if (!overlap)
      return STRATA_GPU_CALL(s, cuLaunchKernel, f, grid[0], grid[1], grid[2],
                             block[0], block[1], block[2], sharedBytes, stream,
                             params, nullptr);
    constexpr CUlaunchAttributeID kProgrammaticStreamSerialization = 6;
    CUlaunchAttribute attr{};
    attr.id = kProgrammaticStreamSerialization;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig config{};
    config.gridDimX = grid[0];
    config.gridDimY = grid[1];
    config.gridDimZ = grid[2];
    config.blockDimX = block[0];
    config.blockDimY = block[1];
    config.blockDimZ = block[2];
    config.sharedMemBytes = sharedBytes;
    config.hStream = stream;
    config.attrs = &attr;
    config.numAttrs = 1;
    return STRATA_GPU_CALL(s, cuLaunchKernelEx, &config, f, params, nullptr);
  }

  static Status createEvent(const Symbols &s, Event &e) {
    return STRATA_GPU_CALL(s, cuEventCreate, &e, 0);
  }

  static Status recordEvent(const Symbols &s, Stream stream, Event e) {
    return STRATA_GPU_CALL(s, cuEventRecord, e, stream);
  }

  static Status elapsedMs(const Symbols &s, float &ms, Event from, Event to) {
    return STRATA_GPU_CALL(s, cuEventElapsedTime, &ms, from, to);
  }

  static Status destroyEvent(const Symbols &s, Event e) {
    return STRATA_GPU_CALL(s, cuEventDestroy_v2, e);
  }

  /// Records what is enqueued on \p stream into a graph instead of running
  /// it. Thread-local mode: only this thread is barred from calls that
  /// would break the capture (allocations, synchronous copies); other
  /// threads' devices go on.
  static Status beginCapture(const Symbols &s, Stream stream) {
    constexpr CUstreamCaptureMode kThreadLocal =
        1; // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    return STRATA_GPU_CALL(s, cuStreamBeginCapture_v2, stream, kThreadLocal);
  }

  /// Ends the capture; \p graph is null if the capture was invalidated.
  static Status endCapture(const Symbols &s, Stream stream, Graph &graph) {
    return STRATA_GPU_CALL(s, cuStreamEndCapture, stream, &graph);
  }

  static Status instantiate(const Symbols &s, GraphExec &exec, Graph graph) {
    return STRATA_GPU_CALL(s, cuGraphInstantiateWithFlags, &exec, graph, 0);
  }

  static Status launchGraph(const Symbols &s, Stream stream, GraphExec exec) {
    return STRATA_GPU_CALL(s, cuGraphLaunch, exec, stream);
  }

  static Status destroyGraphExec(const Symbols &s, GraphExec exec) {
    return STRATA_GPU_CALL(s, cuGraphExecDestroy, exec);
  }

  static Status destroyGraph(const Symbols &s, Graph graph) {
    return STRATA_GPU_CALL(s, cuGraphDestroy, graph);
  }

  /// "out of memory (CUDA_ERROR_OUT_OF_MEMORY = 2)".
  static std::string errorString(const Symbols &s, int code) {
    const char *name = nullptr;
    const char *text = nullptr;
    if (s.cuGetErrorName(code, &name) != 0 || !name)
      name = "unknown CUresult";
    if (s.cuGetErrorString(code, &text) != 0 || !text)
      text = "unknown error";
    return fmt::format("{} ({} = {})", text, name, code);
  }
};

} // namespace strata::runtime::gpu
