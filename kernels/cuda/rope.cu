// Rotary position embedding on q and k on the GPU, forward and backward: kernels/common/
// rope.h's turn of each pair (i, i + HS/2), in place on the packed qkv (B,T,3C), as
// kernels/cpu/rope.cpp turns it (the same cos and sin, the same two products per value).
// One thread per pair of q or k of one head of one token: B*T*2*NH*HS/2 threads, grid-stride.
#include <cstdint>

#include "kernels/common/rope.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grid_size.h"
#include "kernels/cuda/storage.cuh"

namespace tt {

namespace {

template <typename S>
__global__ void rope_kernel(S* qkv, int64_t pairs, int T, int NH, int HS, int first_pos, float theta,
                            float direction) {
  const int half = HS / 2, C = NH * HS;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // p = ((token * 2 + part) * NH + h) * half + i, token = b * T + t
    const int i = static_cast<int>(p % half);
    const int64_t head_index = p / half;
    const int h = static_cast<int>(head_index % NH);
    const int64_t part_index = head_index / NH;
    const int part = static_cast<int>(part_index % 2);  // 0: q, 1: k
    const int64_t token = part_index / 2;
    const int t = static_cast<int>(token % T);
    S* head = qkv + token * 3 * C + part * C + h * HS;
    float c, s;
    rope_cos_sin(first_pos + t, i, HS, theta, &c, &s);
    float a = to_float(head[i]), b = to_float(head[i + half]);
    rope_turn(a, b, c, s, direction);
    head[i] = from_float<S>(a);
    head[i + half] = from_float<S>(b);
  }
}

void launch_rope(Tensor qkv, int NH, int first_pos, float theta, float direction, cudaStream_t stream) {
  const int B = static_cast<int>(qkv.shape[0]), T = static_cast<int>(qkv.shape[1]);
  const int C = static_cast<int>(qkv.shape[2] / 3), HS = C / NH;
  const int64_t pairs = static_cast<int64_t>(B) * T * 2 * NH * (HS / 2);
  if (pairs <= 0) return;
  const DType dtype = shared_storage_dtype("rope", {qkv});
  dispatch_storage(dtype, [&](auto storage) {
    using S = decltype(storage);
    rope_kernel<S><<<grid_stride_blocks(pairs), kThreadsPerBlock, 0, stream>>>(qkv.as<S>(), pairs, T, NH, HS,
                                                                                first_pos, theta, direction);
  });
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void CudaBackend::rope_forward(Tensor qkv, int NH, int first_pos, float theta) {
  launch_rope(qkv, NH, first_pos, theta, 1.0f, stream_);
}

void CudaBackend::rope_backward(Tensor dqkv, int NH, int first_pos, float theta) {
  launch_rope(dqkv, NH, first_pos, theta, -1.0f, stream_);
}

}  // namespace tt
