// ReLU and exact (erf) GELU, forward and backward (CUDA). The GELU math is the shared
// host/device definition in kernels/common/gelu.h, so both backends evaluate the same formula.
#include "kernels/common/gelu.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/launch.h"

namespace tt {

namespace {

// inp (n) -> out (n) = act(inp)
// Decomposition: one thread per element, grid-stride. The pointers may alias (no __restrict__).
template <Activation kAct>
__global__ void activation_forward_kernel(float* out, const float* inp, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    out[i] = kAct == Activation::Relu ? (x > 0.0f ? x : 0.0f) : gelu(x);
  }
}

// dout (n), inp (n) the pre-activation -> dinp (n) = dout * act'(inp); dinp may alias dout
// Decomposition: one thread per element, grid-stride; each element is read before it is written.
template <Activation kAct>
__global__ void activation_backward_kernel(float* dinp, const float* dout, const float* inp, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = inp[i];
    const float d = dout[i];
    dinp[i] = kAct == Activation::Relu ? (x > 0.0f ? d : 0.0f) : d * gelu_grad(x);
  }
}

}  // namespace

// inp (n) -> out (n)
void CudaBackend::activation_forward(Tensor out, Tensor inp, Activation act) {
  const int64_t n = inp.numel();
  if (n == 0) return;
  const unsigned int blocks = grid_stride_blocks(n);
  if (act == Activation::Relu)
    activation_forward_kernel<Activation::Relu><<<blocks, kThreadsPerBlock, 0, stream_>>>(out.f32(), inp.f32(), n);
  else
    activation_forward_kernel<Activation::Gelu><<<blocks, kThreadsPerBlock, 0, stream_>>>(out.f32(), inp.f32(), n);
  CUDA_CHECK(cudaGetLastError());
}

// dout (n), inp (n) the pre-activation -> dinp (n); dinp may alias dout
void CudaBackend::activation_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act) {
  const int64_t n = inp.numel();
  if (n == 0) return;
  const unsigned int blocks = grid_stride_blocks(n);
  if (act == Activation::Relu)
    activation_backward_kernel<Activation::Relu>
        <<<blocks, kThreadsPerBlock, 0, stream_>>>(dinp.f32(), dout.f32(), inp.f32(), n);
  else
    activation_backward_kernel<Activation::Gelu>
        <<<blocks, kThreadsPerBlock, 0, stream_>>>(dinp.f32(), dout.f32(), inp.f32(), n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
