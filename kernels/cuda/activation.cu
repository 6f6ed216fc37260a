// ReLU and exact (erf) GELU, forward and backward (CUDA); SwiGLU runs as its own kernel (swiglu.cu). The GELU math is the shared
// host/device definition in kernels/common/gelu.h, so both backends evaluate the same formula.
// Views of any float storage type S (kernels/cuda/storage.cuh): loaded into fp32, rounded on store.
#include "kernels/common/gelu.h"
#include "kernels/common/half.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dropout_factor.cuh"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

// act(x), and dout * act'(x), as the CPU backend writes them
template <Activation kAct>
__device__ __forceinline__ float activation_value(float x) {
  return kAct == Activation::Relu ? (x > 0.0f ? x : 0.0f) : gelu(x);
}
template <Activation kAct>
__device__ __forceinline__ float activation_grad(float d, float x) {
  return kAct == Activation::Relu ? (x > 0.0f ? d : 0.0f) : d * gelu_grad(x);
}

// inp (n) -> out (n) = act(inp)
// Decomposition: one thread per element, grid-stride. The pointers may alias (no __restrict__).
template <Activation kAct, typename S>
__global__ void activation_forward_kernel(S* out, const S* inp, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = from_float<S>(activation_value<kAct>(to_float(inp[i])));
  }
}

// dout (n), inp (n) the pre-activation -> dinp (n) = dout * act'(inp); dinp may alias dout
// Decomposition: one thread per element, grid-stride; each element is read before it is written.
template <Activation kAct, typename S>
__global__ void activation_backward_kernel(S* dinp, const S* dout, const S* inp, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dinp[i] = from_float<S>(activation_grad<kAct>(to_float(dout[i]), to_float(inp[i])));
  }
}

// The FFN's hidden layer, activation then dropout, in one pass (kernels/backend.h):
//   forward:  out  = dropout(act(inp)):          act rounded to S, times the factor, rounded again
//   backward: dinp = act'(inp) dropout(dout):    dout times the factor rounded to S, then act'
// as activation_forward + dropout_forward (resp. dropout_backward + activation_backward) round.
// inp, out, dout, dinp (n); out may alias inp, dinp may alias dout (each element is read
// before it is written, by the thread that writes it).
// Decomposition: for_each_dropout_element (dropout_factor.cuh), as dropout_kernel: one thread
// per group of 4 consecutive mask elements, grid-stride, one Philox call per group; p == 0 is
// the identity: no Philox, the factor is 1 (exact).
template <Activation kAct, bool kBackward, typename S>
__global__ void activation_dropout_kernel(S* out, const S* dout, const S* inp, int64_t n, DropoutMask mask) {
  for_each_dropout_element(n, mask, [&](int64_t i, float factor) {
    const float x = to_float(inp[i]);
    if (kBackward) {
      const float dropped = to_float(from_float<S>(to_float(dout[i]) * factor));  // dropout_backward
      out[i] = from_float<S>(activation_grad<kAct>(dropped, x));                  // activation_backward
    } else {
      const float activated = to_float(from_float<S>(activation_value<kAct>(x)));  // activation_forward
      out[i] = from_float<S>(activated * factor);                                   // dropout_forward
    }
  });
}

// The launch of activation_dropout_kernel for a runtime activation; dout is null in the forward.
template <bool kBackward, typename S>
void launch_activation_dropout(S* out, const S* dout, const S* inp, int64_t n, Activation act,
                               const DropoutMask& dropout, cudaStream_t stream) {
  const unsigned int blocks = grid_stride_blocks((n + 3) / 4);
  if (act == Activation::Relu)
    activation_dropout_kernel<Activation::Relu, kBackward, S><<<blocks, kThreadsPerBlock, 0, stream>>>(
        out, dout, inp, n, dropout);
  else
    activation_dropout_kernel<Activation::Gelu, kBackward, S><<<blocks, kThreadsPerBlock, 0, stream>>>(
        out, dout, inp, n, dropout);
}

}  // namespace

// inp (n) -> out (n)
void CudaBackend::activation_forward(Tensor out, Tensor inp, Activation act) {
  if (act == Activation::Swiglu) return swiglu_forward(out, inp, kNoDropout);
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
  if (act == Activation::Swiglu) return swiglu_backward(dinp, dout, inp, kNoDropout);
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

// inp (n) the pre-activation -> out (n) = dropout(act(inp)), may alias inp. One kernel.
void CudaBackend::activation_dropout_forward(Tensor out, Tensor inp, Activation act, const DropoutMask& dropout) {
  if (act == Activation::Swiglu) return swiglu_forward(out, inp, dropout);
  const int64_t n = inp.numel();
  const DType dtype = shared_storage_dtype("activation_dropout_forward", {out, inp});
  if (n == 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    launch_activation_dropout<false, S>(out.as<S>(), nullptr, inp.as<S>(), n, act, dropout, stream_);
  });
  CUDA_CHECK(cudaGetLastError());
}

// dout (n), inp (n) the pre-activation -> dinp (n) = act'(inp) dropout(dout), may alias dout. One kernel.
void CudaBackend::activation_dropout_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act,
                                              const DropoutMask& dropout) {
  if (act == Activation::Swiglu) return swiglu_backward(dinp, dout, inp, dropout);
  const int64_t n = inp.numel();
  const DType dtype = shared_storage_dtype("activation_dropout_backward", {dinp, dout, inp});
  if (n == 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    launch_activation_dropout<true, S>(dinp.as<S>(), dout.as<S>(), inp.as<S>(), n, act, dropout, stream_);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
