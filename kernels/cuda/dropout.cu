// Inverted dropout with Philox masks, forward and backward (CUDA). The mask is never
// stored: both directions recompute it from (seed, step, layer, site, index) with the shared
// kernels/common/philox.h, so it is the CPU backend's mask bit for bit. Views of any float
// storage type S (kernels/cuda/storage.cuh): x * scale in fp32, rounded once on store.
#include "kernels/common/half.h"
#include "kernels/common/philox.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

// inp (n) -> out (n) = inp * (kept ? 1/(1-p) : 0); out may alias inp
// Decomposition: one thread per group of 4 consecutive mask elements (grid-stride over groups):
// one Philox call gives the 4 uniforms of a group, one 32-bit lane per element, exactly as
// dropout_uniform defines them. Element i of the tensor is mask element index_offset + i, so
// the groups are those of the mask, whatever the offset. The training step is read from device memory here, when the
// kernel runs (DropoutMask::key() dereferences mask.step), so a captured graph sees the
// step the trainer wrote for this step.
template <typename S>
__global__ void dropout_kernel(S* out, const S* inp, int64_t n, DropoutMask mask) {
  const DropoutKey key = mask.key();
  const float p = mask.p;
  const float keep_scale = 1.0f / (1.0f - p);
  const uint64_t first = mask.index_offset;
  const int64_t first_group = static_cast<int64_t>(first >> 2);
  const int64_t groups = static_cast<int64_t>((first + n + 3) >> 2) - first_group;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Philox4 bits = dropout_bits4(key, static_cast<uint64_t>(first_group + g));
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = 4 * (first_group + g) + lane - static_cast<int64_t>(first);
      if (i >= 0 && i < n) {
        const float scale = dropout_factor(bits.v[lane], p, keep_scale);
        out[i] = from_float<S>(to_float(inp[i]) * scale);
      }
    }
  }
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
