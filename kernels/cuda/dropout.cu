// Inverted dropout with Philox masks, forward and backward (CUDA). The mask is never
// stored: both directions recompute it from (seed, step, layer, site, index) with the shared
// kernels/common/philox.h, so it is the CPU backend's mask bit for bit. Views of any float
// storage type S (kernels/cuda/storage.cuh): x * scale in fp32, rounded once on store.
#include "kernels/common/half.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dropout_factor.cuh"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

// inp (n) -> out (n) = inp * (kept ? 1/(1-p) : 0); out may alias inp
// Decomposition: for_each_dropout_element (dropout_factor.cuh), one thread per group of 4
// consecutive mask elements, grid-stride: one Philox call per group.
template <typename S>
__global__ void dropout_kernel(S* out, const S* inp, int64_t n, DropoutMask mask) {
  for_each_dropout_element(n, mask,
                           [&](int64_t i, float factor) { out[i] = from_float<S>(to_float(inp[i]) * factor); });
}

}  // namespace

// inp (n) -> out (n), may alias; identity when p == 0
void CudaBackend::dropout_forward(Tensor out, Tensor inp, const DropoutMask& dropout) {
  const int64_t n = inp.numel();
  const DType dtype = shared_storage_dtype("dropout_forward", {out, inp});
  if (n == 0) return;
  if (dropout.p == 0.0f) {  // the identity: a copy of the stored values (one dtype, so exact)
    if (out.data != inp.data)
      CUDA_CHECK(cudaMemcpyAsync(out.data, inp.data, inp.bytes(), cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    dropout_kernel<S><<<grid_stride_blocks((n + 3) / 4), kThreadsPerBlock, 0, stream_>>>(out.as<S>(), inp.as<S>(),
                                                                                         n, dropout);
  });
  CUDA_CHECK(cudaGetLastError());
}

// dout (n) -> dinp (n), may alias: the same mask and scale as the forward
void CudaBackend::dropout_backward(Tensor dinp, Tensor dout, const DropoutMask& dropout) {
  dropout_forward(dinp, dout, dropout);
}

}  // namespace tt
