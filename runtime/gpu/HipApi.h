//===- HipApi.h - HIP as GpuDevice uses it ----------------------*- C++ -*-===//
//
// The traits of GpuDevice<HipApi>: the library, the symbol table from
// HipSymbols.def and one small function per device operation. HIP has no
// contexts to manage (hipSetDevice per thread), takes device addresses as
// pointers, needs no opt-in for dynamic LDS (a gfx1151 workgroup may use
// all 64 KiB) and returns error strings directly. Every operation takes the
// device's stream (one non-blocking stream per device, as on cuda).
//
//===----------------------------------------------------------------------===//
#pragma once

#include "runtime/gpu/Driver.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <string>

namespace strata::runtime::gpu {

struct HipApi {
  static constexpr const char *kName = "hip";
  static constexpr const char *kTarget = "gfx1151";
  static constexpr const char *kLibrary = "libamdhip64.so";
  static constexpr const char *kLibraryEnv = "STRATA_HIP_LIBRARY";
  static constexpr const char *kMissingHint = "no ROCm/HIP runtime here?";
  /// Any dynamic LDS size goes without an opt-in.
  static constexpr uint32_t kSharedWithoutOptIn =
      std::numeric_limits<uint32_t>::max();
  /// No tensor maps (the TMA is NVIDIA's).
  static constexpr bool kTensorMaps = false;

  using Module = hipModule_t;
  using Function = hipFunction_t;
  using Event = hipEvent_t;
  using Stream = hipStream_t;
  using Graph = hipGraph_t;
  using GraphExec = hipGraphExec_t;

  /// Every entry point of HipSymbols.def, null until loaded.
  struct Symbols {
#define HIP_FN(Name, Ret, Params) Ret(*Name) Params = nullptr;
#include "runtime/gpu/HipSymbols.def"
  };

  /// Calls \p f(name, slot) for every entry point, in table order.
  template <class F> static void forEachSymbol(Symbols &s, F &&f) {
#define HIP_FN(Name, Ret, Params) f(#Name, s.Name);
#include "runtime/gpu/HipSymbols.def"
  }

  /// What an open device holds.
  struct Context {
    hipDevice_t device = 0;
  };

  static Status init(const Symbols &s) {
    return STRATA_GPU_CALL(s, hipInit, 0);
  }

  static Status open(const Symbols &s, Context &c) {
    if (Status st = bind(s, c); !st.ok())
      return st;
    return STRATA_GPU_CALL(s, hipDeviceGet, &c.device, 0);
  }

  static void close(const Symbols &, Context &) {}

  /// Selects device 0 on the calling thread (HIP's current device is per
  /// thread, like CUDA's context).
  static Status bind(const Symbols &s, const Context &) {
    return STRATA_GPU_CALL(s, hipSetDevice, 0);
  }

  static Status deviceName(const Symbols &s, const Context &c, char *out,
                           int len) {
    return STRATA_GPU_CALL(s, hipDeviceGetName, out, len, c.device);
  }

  /// The number as HIP reports it (its encoding changed between releases).
  static Status driverVersion(const Symbols &s, std::string &out) {
    int v = 0;
    Status st = STRATA_GPU_CALL(s, hipDriverGetVersion, &v);
    out = std::to_string(v);
    return st;
  }

  static Status alloc(const Symbols &s, uint64_t bytes, uint64_t &ptr) {
    void *p = nullptr;
    Status st = STRATA_GPU_CALL(s, hipMalloc, &p, bytes);
    ptr = reinterpret_cast<uintptr_t>(p);
    return st;
  }

  static Status release(const Symbols &s, uint64_t ptr) {
    return STRATA_GPU_CALL(s, hipFree, address(ptr));
  }

  /// A stream that does not synchronise with the null stream
  /// (hipStreamNonBlocking).
  static Status createStream(const Symbols &s, Stream &stream) {
    constexpr unsigned kNonBlocking = 0x1; // hipStreamNonBlocking
    return STRATA_GPU_CALL(s, hipStreamCreateWithFlags, &stream, kNonBlocking);
  }

  static Status destroyStream(const Symbols &s, Stream stream) {
    return STRATA_GPU_CALL(s, hipStreamDestroy, stream);
  }

  /// Enqueues a copy on \p stream (GpuDevice waits for it). HIP declares
  /// the source non-const; it only reads it.
  static Status upload(const Symbols &s, Stream stream, uint64_t dst,
                       const void *src, uint64_t bytes) {
    return STRATA_GPU_CALL(s, hipMemcpyHtoDAsync, address(dst),
                           const_cast<void *>(src), bytes, stream);
  }

  static Status download(const Symbols &s, Stream stream, void *dst,
                         uint64_t src, uint64_t bytes) {
    return STRATA_GPU_CALL(s, hipMemcpyDtoHAsync, dst, address(src), bytes,
                           stream);
  }

  /// Enqueues a device-to-device copy on \p stream.
  static Status copy(const Symbols &s, Stream stream, uint64_t dst,
                     uint64_t src, uint64_t bytes) {
    return STRATA_GPU_CALL(s, hipMemcpyDtoDAsync, address(dst), address(src),
                           bytes, stream);
  }

  static Status fill32(const Symbols &s, Stream stream, uint64_t dst,
                       uint32_t pattern, uint64_t words) {
    return STRATA_GPU_CALL(s, hipMemsetD32Async, address(dst),
                           static_cast<int>(pattern), words, stream);
  }

  static Status synchronize(const Symbols &s, Stream stream) {
    return STRATA_GPU_CALL(s, hipStreamSynchronize, stream);
  }

  static Status loadModule(const Symbols &s, Module &m, const void *image) {
    return STRATA_GPU_CALL(s, hipModuleLoadData, &m, image);
  }

  static Status unloadModule(const Symbols &s, Module m) {
    return STRATA_GPU_CALL(s, hipModuleUnload, m);
  }

  static Status getFunction(const Symbols &s, Function &f, Module m,
                            const char *symbol) {
    return STRATA_GPU_CALL(s, hipModuleGetFunction, &f, m, symbol);
  }

  /// Never called (kSharedWithoutOptIn admits every size).
  static Status allowShared(const Symbols &, Function, uint32_t) { return {}; }

  /// Enqueues \p f on \p stream.
  /// Enqueues \p f on \p stream (\p overlap: HIP has no programmatic
  /// dependent launch; kernels follow each other).
  static Status launch(const Symbols &s, Stream stream, Function f,
                       const uint32_t grid[3], const uint32_t block[3],
                       uint32_t sharedBytes, void **params, bool overlap) {
    (void)overlap;
    return STRATA_GPU_CALL(s, hipModuleLaunchKernel, f, grid[0], grid[1],
                           grid[2], block[0], block[1], block[2], sharedBytes,
                           stream, params, nullptr);
  }

  static Status createEvent(const Symbols &s, Event &e) {
    return STRATA_GPU_CALL(s, hipEventCreate, &e);
  }

  static Status recordEvent(const Symbols &s, Stream stream, Event e) {
    return STRATA_GPU_CALL(s, hipEventRecord, e, stream);
  }

  static Status elapsedMs(const Symbols &s, float &ms, Event from, Event to) {
    return STRATA_GPU_CALL(s, hipEventElapsedTime, &ms, from, to);
  }

  static Status destroyEvent(const Symbols &s, Event e) {
    return STRATA_GPU_CALL(s, hipEventDestroy, e);
  }

  /// As CudaApi::beginCapture (thread-local mode).
  static Status beginCapture(const Symbols &s, Stream stream) {
    constexpr hipStreamCaptureMode kThreadLocal =
        1; // hipStreamCaptureModeThreadLocal
    return STRATA_GPU_CALL(s, hipStreamBeginCapture, stream, kThreadLocal);
  }

  static Status endCapture(const Symbols &s, Stream stream, Graph &graph) {
    return STRATA_GPU_CALL(s, hipStreamEndCapture, stream, &graph);
  }

  static Status instantiate(const Symbols &s, GraphExec &exec, Graph graph) {
    return STRATA_GPU_CALL(s, hipGraphInstantiate, &exec, graph, nullptr,
                           nullptr, 0);
  }

  static Status launchGraph(const Symbols &s, Stream stream, GraphExec exec) {
    return STRATA_GPU_CALL(s, hipGraphLaunch, exec, stream);
  }

  static Status destroyGraphExec(const Symbols &s, GraphExec exec) {
    return STRATA_GPU_CALL(s, hipGraphExecDestroy, exec);
  }

  static Status destroyGraph(const Symbols &s, Graph graph) {
    return STRATA_GPU_CALL(s, hipGraphDestroy, graph);
  }

  /// "out of memory (hipErrorOutOfMemory = 2)".
  static std::string errorString(const Symbols &s, int code) {
    const char *name = s.hipGetErrorName(code);
    const char *text = s.hipGetErrorString(code);
    return fmt::format("{} ({} = {})", text ? text : "unknown error",
                       name ? name : "unknown hipError_t", code);
  }

private:
  static hipDeviceptr_t address(uint64_t p) {
    return reinterpret_cast<hipDeviceptr_t>(static_cast<uintptr_t>(p));
  }
};

} // namespace strata::runtime::gpu
