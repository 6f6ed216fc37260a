// SwiGLU forward and backward on the GPU, with the FFN's dropout folded in: inp (N,2F) holds
// [gate | up] per row, out (N,F) = dropout(silu(gate) up). The math, and its order, is
// kernels/common/swiglu.h's, as kernels/cpu/swiglu.cpp computes it; storage S (float, bf16,
// fp16) is loaded into fp32 and each output rounded once.
// Decomposition: for_each_dropout_element (dropout_factor.cuh), as the fused activation-dropout
// kernel (activation.cu): one thread per group of 4 consecutive output elements, grid-stride,
// one Philox call per group; output element e is mask element index_offset + e. p == 0 draws
// nothing (factor 1).
#include <cstdint>

#include "kernels/common/philox.h"
#include "kernels/common/swiglu.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dropout_factor.cuh"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

// Forward (dout null): out[e] = (silu(gate) up) factor. Backward: out is dinp (N,2F), written
// at e's gate and up positions, which it may alias in inp (the thread that writes a pair has
// read it).
template <bool kBackward, typename S>
__global__ void swiglu_kernel(S* out, const S* dout, const S* inp, int64_t n, int64_t F, DropoutMask mask) {
  for_each_dropout_element(n, mask, [&](int64_t e, float factor) {
    const int64_t row = e / F, i = e - row * F;
    const int64_t gate_at = 2 * F * row + i, up_at = gate_at + F;
    const float gate = to_float(inp[gate_at]), up = to_float(inp[up_at]);
    if (kBackward) {
      const float d = to_float(dout[e]) * factor;
      out[gate_at] = from_float<S>(d * up * silu_grad(gate));
      out[up_at] = from_float<S>(d * silu(gate));
    } else {
      out[e] = from_float<S>(silu(gate) * up * factor);
    }
  });
}

}  // namespace

// inp (N,2F) [gate | up] -> out (N,F) = dropout(silu(gate) up)
void CudaBackend::swiglu_forward(Tensor out, Tensor inp, const DropoutMask& dropout) {
  const int64_t F = check_swiglu_views("swiglu_forward", out, inp), n = out.numel();
  const DType dtype = shared_storage_dtype("swiglu_forward", {out, inp});
  if (n == 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    swiglu_kernel<false, S><<<grid_stride_blocks((n + 3) / 4), kThreadsPerBlock, 0, stream_>>>(
        out.as<S>(), nullptr, inp.as<S>(), n, F, dropout);
  });
  CUDA_CHECK(cudaGetLastError());
}

// dout (N,F), inp (N,2F) -> dinp (N,2F) [dgate | dup], may alias inp
void CudaBackend::swiglu_backward(Tensor dinp, Tensor dout, Tensor inp, const DropoutMask& dropout) {
  const int64_t F = check_swiglu_views("swiglu_backward", dout, inp), n = dout.numel();
  if (dinp.shape != inp.shape)
    throw std::invalid_argument("swiglu_backward: dinp " + dinp.shape.str() + " is not the input's " +
                                inp.shape.str());
  const DType dtype = shared_storage_dtype("swiglu_backward", {dinp, dout, inp});
  if (n == 0) return;
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    swiglu_kernel<true, S><<<grid_stride_blocks((n + 3) / 4), kThreadsPerBlock, 0, stream_>>>(
        dinp.as<S>(), dout.as<S>(), inp.as<S>(), n, F, dropout);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace tt
