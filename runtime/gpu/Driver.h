//===- Driver.h - what the vendor driver tables share -----------*- C++ -*-===//
//
// The GPU backends call the CUDA driver (libcuda.so.1) and HIP
// (libamdhip64.so) through function pointers loaded with dlopen, so the
// build needs no vendor SDK. The few types those tables use are declared
// here: handles are opaque pointers, device addresses 64-bit, results and
// the capture-mode enums ints (both vendors' enums are int-sized).
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstddef>

namespace strata::runtime::gpu {

// CUDA driver API (cuda.h).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUfunction_attribute = int;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUgraph = struct CUgraph_st *;
using CUgraphExec = struct CUgraphExec_st *;
using CUstreamCaptureMode = int;
using CUlaunchAttributeID = int;
/// cuda.h's CUlaunchAttributeValue: a 64-byte union (8-byte aligned: one
/// member holds a pointer); the one member strata sets.
union CUlaunchAttributeValue {
  char pad[64];
  void *alignment;
  int programmaticStreamSerializationAllowed;
};
/// cuda.h's CUlaunchAttribute: the id, padding to 8 bytes, the value.
struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
};
/// cuda.h's CUlaunchConfig (cuLaunchKernelEx).
struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned int numAttrs;
};
static_assert(sizeof(CUlaunchAttribute) == 72, "cuda.h's layout");
/// cuda.h's CUtensorMap: 128 opaque bytes, 128-byte aligned (CUDA 13).
struct alignas(128) CUtensorMap {
  unsigned long long opaque[16];
};

// HIP module API (hip_runtime_api.h).
using hipError_t = int;
using hipDevice_t = int;
using hipDeviceptr_t = void *;
using hipModule_t = struct ihipModule_t *;
using hipFunction_t = struct ihipModuleSymbol_t *;
using hipStream_t = struct ihipStream_t *;
using hipEvent_t = struct ihipEvent_t *;
using hipGraph_t = struct ihipGraph *;
using hipGraphExec_t = struct hipGraphExec *;
using hipGraphNode_t = struct hipGraphNode *;
using hipStreamCaptureMode = int;

/// The result of one driver call: the vendor's result code (0 = success)
/// and the entry point that returned it, for the message.
struct [[nodiscard]] Status {
  int code = 0;
  const char *call = "";

  bool ok() const { return code == 0; }
};

} // namespace strata::runtime::gpu

/// Calls entry point \p Fn of symbol table \p Syms and names it in the
/// Status, so the name in a message is always the symbol that failed.
#define STRATA_GPU_CALL(Syms, Fn, ...)                                         \
  ::strata::runtime::gpu::Status {                                             \
    static_cast<int>((Syms).Fn(__VA_ARGS__)), #Fn                              \
  }
