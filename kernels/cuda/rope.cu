// Rotary position embedding on q and k on the GPU, forward and backward: kernels/common/
// rope.h's turn of each pair (i, i + HS/2), in place on the packed qkv (B,T,W), as
// kernels/cpu/rope.cpp turns it (the same cos and sin, the same two products per value).
// One thread per pair of one query or key head of one token: B*T*(NH+KVH)*HS/2 threads (the
// key heads follow the query heads in the row), grid-stride.
#include <cstdint>

#include "kernels/common/rope.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

template <typename S>
__global__ void rope_kernel(S* qkv, int64_t pairs, int T, int turned_heads, int HS, int64_t W, int first_pos,
                            float theta, float direction) {
  const int half = HS / 2;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // p = (token * turned_heads + h) * half + i, token = b * T + t, h over q heads then k heads
    const int i = static_cast<int>(p % half);
    const int64_t head_index = p / half;
    const int h = static_cast<int>(head_index % turned_heads);
    const int64_t token = head_index / turned_heads;
    const int t = static_cast<int>(token % T);
    S* head = qkv + token * W + static_cast<int64_t>(h) * HS;
    float c, s;
    rope_cos_sin(first_pos + t, i, HS, theta, &c, &s);
    float a = to_float(head[i]), b = to_float(head[i + half]);
    rope_turn(a, b, c, s, direction);
    head[i] = from_float<S>(a);
    head[i + half] = from_float<S>(b);
  }
}

void launch_rope(Tensor qkv, int NH, int KVH, int first_pos, float theta, float direction, cudaStream_t stream) {
  const int B = static_cast<int>(qkv.shape[0]), T = static_cast<int>(qkv.shape[1]);
  const int64_t W = qkv.shape[2];
  const int HS = static_cast<int>(W / (NH + 2 * KVH));
  const int64_t pairs = static_cast<int64_t>(B) * T * (NH + KVH) * (HS / 2);
  if (pairs <= 0) return;
  const DType dtype = shared_storage_dtype("rope", {qkv});
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    rope_kernel<S><<<grid_stride_blocks(pairs), kThreadsPerBlock, 0, stream>>>(
        qkv.as<S>(), pairs, T, NH + KVH, HS, W, first_pos, theta, direction);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void CudaBackend::rope_forward(Tensor qkv, int NH, int KVH, int first_pos, float theta) {
  launch_rope(qkv, NH, KVH, first_pos, theta, 1.0f, stream_);
}

void CudaBackend::rope_backward(Tensor dqkv, int NH, int KVH, int first_pos, float theta) {
  launch_rope(dqkv, NH, KVH, first_pos, theta, -1.0f, stream_);
}

}  // namespace tt
