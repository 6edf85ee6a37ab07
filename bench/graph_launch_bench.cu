// The cost of a kernel boundary inside a CUDA graph on this GPU: what a
// decode step of N small kernels pays before any kernel does work.
//
// A chain of N dependent kernels (each reads the previous one's output and
// writes its own), captured into one graph and replayed, at grid sizes from
// 1 block to several waves; with and without programmatic dependent launch
// (the kernels then begin with griddepcontrol.launch_dependents and
// griddepcontrol.wait, as strata's sm_90 kernels do). Prints microseconds a
// kernel (the replay's time / N, median of 20 replays).
//   nvcc -O3 -arch=sm_90 -o graph_launch_bench bench/graph_launch_bench.cu
//   ./graph_launch_bench [N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#include <vector>

#define CHECK(x)                                                              \
  do {                                                                        \
    cudaError_t e_ = (x);                                                     \
    if (e_ != cudaSuccess) {                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,         \
                   cudaGetErrorString(e_));                                   \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

/// One link of the chain: out[i] = in[i] + 1 over `n` floats (a grid-stride
/// loop), waiting for the previous kernel first when \p pdl.
template <bool pdl>
__global__ void link(const float *in, float *out, int n) {
  if (pdl) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x)
    out[i] = in[i] + 1.0f;
}

/// Microseconds a kernel of a replayed graph of \p chain links of \p blocks
/// blocks of 256 threads over \p n floats.
static double perKernelUs(int chain, int blocks, int n, bool pdl) {
  float *buf[2];
  CHECK(cudaMalloc(&buf[0], n * sizeof(float)));
  CHECK(cudaMalloc(&buf[1], n * sizeof(float)));
  CHECK(cudaMemset(buf[0], 0, n * sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < chain; ++k) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(256);
    cfg.stream = s;
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = pdl ? 1 : 0;
    const float *in = buf[k & 1];
    float *out = buf[(k + 1) & 1];
    if (pdl)
      CHECK(cudaLaunchKernelEx(&cfg, link<true>, in, out, n));
    else
      CHECK(cudaLaunchKernelEx(&cfg, link<false>, in, out, n));
  }
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  CHECK(cudaGraphInstantiateWithFlags(&ge, g, 0));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int r = 0; r < 23; ++r) {
    CHECK(cudaEventRecord(a, s));
    CHECK(cudaGraphLaunch(ge, s));
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    if (r >= 3) // the first replays upload the graph
      ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  // The chain must have run: every element counts the links.
  float first = 0;
  CHECK(cudaMemcpy(&first, buf[chain & 1], sizeof(float),
                   cudaMemcpyDeviceToHost));
  if (first < chain) {
    std::fprintf(stderr, "error: the chain did not run (%g < %d)\n", first,
                 chain);
    std::exit(1);
  }
  CHECK(cudaGraphExecDestroy(ge));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(buf[0]));
  CHECK(cudaFree(buf[1]));
  return 1e3 * ms[ms.size() / 2] / chain;
}

int main(int argc, char **argv) {
  const int chain = argc > 1 ? std::atoi(argv[1]) : 1000;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("# kernel boundaries in a replayed CUDA graph: %d dependent "
              "kernels of 256 threads, median of 20 replays; %s, %d SMs\n",
              chain, prop.name, sms);
  std::printf("%-10s %-12s %12s %12s\n", "blocks", "floats", "us/kernel",
              "us/kernel+pdl");
  const int grids[] = {1, sms, 2 * sms, 8 * sms};
  for (int blocks : grids) {
    // A float a thread: the work is a load and a store, the cost the
    // boundary's.
    const int n = blocks * 256;
    const double plain = perKernelUs(chain, blocks, n, false);
    const double pdl = perKernelUs(chain, blocks, n, true);
    std::printf("%-10d %-12d %12.2f %12.2f\n", blocks, n, plain, pdl);
  }
  return 0;
}
