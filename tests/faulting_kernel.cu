// A kernel that faults on purpose (tests/faulting_kernel.h): an embedding lookup whose range
// check traps. CUDA, built for the SIMT emulator (simt/rewrite_cu.py, then g++ with simt/simt.h).
#include "tests/faulting_kernel.h"

namespace tt::test {

namespace {

// tokens (N) int32, wte (V,C) -> out (N,C); one thread per output element
__global__ void checked_embedding_kernel(float* out, const int* tokens, const float* wte, int N, int C, int V) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= N * C) return;
  const int token = tokens[i / C];
  if (token < 0 || token >= V) __trap();  // never read outside wte
  out[i] = wte[token * C + i % C];
}

}  // namespace

void launch_checked_embedding(void* stream, float* out, const int* tokens, const float* wte, int N, int C, int V) {
  constexpr int kThreads = 64;
  const int blocks = (N * C + kThreads - 1) / kThreads;
  checked_embedding_kernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(out, tokens, wte, N, C, V);
}

void reset_emulated_device() { cudaDeviceReset(); }

}  // namespace tt::test
