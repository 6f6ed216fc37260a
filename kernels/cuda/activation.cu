// ReLU and exact (erf) GELU, forward and backward (CUDA). The GELU math is the shared
// host/device definition in kernels/common/gelu.h, so both backends evaluate the same formula.
// Views of any float storage type S (kernels/cuda/storage.cuh): loaded into fp32, rounded on store.
#include "kernels/common/gelu.h"
#include "kernels/common/half.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

// inp (n) -> out (n) = act(inp)
// Decomposition: one thread per element, grid-stride. The pointers may alias (no __restrict__).
template <Activation kAct, typename S>
__global__ void activation_forward_kernel(S* out, const S* inp, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = to_float(inp[i]);
    out[i] = from_float<S>(kAct == Activation::Relu ? (x > 0.0f ? x : 0.0f) : gelu(x));
  }
}

// dout (n), inp (n) the pre-activation -> dinp (n) = dout * act'(inp); dinp may alias dout
// Decomposition: one thread per element, grid-stride; each element is read before it is written.
template <Activation kAct, typename S>
__global__ void activation_backward_kernel(S* dinp, const S* dout, const S* inp, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = to_float(inp[i]);
    const float d = to_float(dout[i]);
    dinp[i] = from_float<S>(kAct == Activation::Relu ? (x > 0.0f ? d : 0.0f) : d * gelu_grad(x));
  }
}

}  // namespace

// inp (n) -> out (n)
void CudaBackend::activation_forward(Tensor out, Tensor inp, Activation act) {
  const int64_t n = inp.numel();
  const DType dtype = shared_storage_dtype("activation_forward", {out, inp});
  if (n == 0) return;
  const unsigned int blocks = grid_stride_blocks(n);
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    if (act == Activation::Relu)
      activation_forward_kernel<Activation::Relu, S>
          <<<blocks, kThreadsPerBlock, 0, stream_>>>(out.as<S>(), inp.as<S>(), n);
    else
      activation_forward_kernel<Activation::Gelu, S>
          <<<blocks, kThreadsPerBlock, 0, stream_>>>(out.as<S>(), inp.as<S>(), n);
  });
  CUDA_CHECK(cudaGetLastError());
}

// dout (n), inp (n) the pre-activation -> dinp (n); dinp may alias dout
void CudaBackend::activation_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act) {
  const int64_t n = inp.numel();
  const DType dtype = shared_storage_dtype("activation_backward", {dinp, dout, inp});
  if (n == 0) return;
  const unsigned int blocks = grid_stride_blocks(n);
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    if (act == Activation::Relu)
      activation_backward_kernel<Activation::Relu, S>
          <<<blocks, kThreadsPerBlock, 0, stream_>>>(dinp.as<S>(), dout.as<S>(), inp.as<S>(), n);
    else
      activation_backward_kernel<Activation::Gelu, S>
          <<<blocks, kThreadsPerBlock, 0, stream_>>>(dinp.as<S>(), dout.as<S>(), inp.as<S>(), n);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt

namespace tt {

void CudaBackend::activation_dropout_forward(Tensor out, Tensor inp, Activation act, const DropoutMask& dropout) {
  Backend::activation_dropout_forward(out, inp, act, dropout);
}

void CudaBackend::activation_dropout_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act,
                                              const DropoutMask& dropout) {
  Backend::activation_dropout_backward(dinp, dout, inp, act, dropout);
}

}  // namespace tt
