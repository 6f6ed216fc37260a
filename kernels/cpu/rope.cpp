// Rotary position embedding on q and k, forward and backward (CPU): kernels/common/rope.h's
// turn of each pair (i, i + HS/2) of each query and key head, in place on the packed qkv
// (B,T,W) (kernels/common/qkv_layout.h).
#include <vector>

#include "kernels/common/qkv_layout.h"
#include "kernels/common/rope.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"

namespace tt {

namespace {

// Turns the NH query and KVH key heads of every token by its position (direction +1), or
// back (-1). The key heads follow the query heads in the row, so the turned heads are the
// row's first NH + KVH.
void rope_turn_all(Tensor qkv, int NH, int KVH, int first_pos, float theta, float direction) {
  Fp32Scope fp32({&qkv});  // bf16/fp16 storage: see storage.h
  const int B = static_cast<int>(qkv.shape[0]), T = static_cast<int>(qkv.shape[1]);
  const int HS = static_cast<int>(qkv.shape[2] / (NH + 2 * KVH)), half = HS / 2;
  const int64_t W = qkv.shape[2];
  float* x = qkv.f32();
#pragma omp parallel
  {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));  // this position's angles
#pragma omp for
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < half; ++i) rope_cos_sin(first_pos + t, i, HS, theta, &cs[i], &sn[i]);
      for (int b = 0; b < B; ++b) {
        float* row = x + (static_cast<int64_t>(b) * T + t) * W;
        for (int h = 0; h < NH + KVH; ++h) {  // q heads, then k heads
          float* head = row + static_cast<int64_t>(h) * HS;
          for (int i = 0; i < half; ++i) rope_turn(head[i], head[i + half], cs[i], sn[i], direction);
        }
      }
    }
  }
}

}  // namespace

// qkv (B,T,W): q and k turned by position first_pos + t
void CpuBackend::rope_forward(Tensor qkv, int NH, int KVH, int first_pos, float theta) {
  rope_turn_all(qkv, NH, KVH, first_pos, theta, 1.0f);
}

// dqkv (B,T,W): the q and k gradients turned back
void CpuBackend::rope_backward(Tensor dqkv, int NH, int KVH, int first_pos, float theta) {
  rope_turn_all(dqkv, NH, KVH, first_pos, theta, -1.0f);
}

}  // namespace tt
