// Rotary position embedding on q and k, forward and backward (CPU): kernels/common/rope.h's
// turn of each pair (i, i + HS/2) of each head, in place on the packed qkv (B,T,3C).
#include <vector>

#include "kernels/common/rope.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/storage.h"

namespace tt {

namespace {

// Turns q and k of every head of every token by its position (direction +1), or back (-1).
void rope_turn_all(Tensor qkv, int NH, int first_pos, float theta, float direction) {
  Fp32Scope fp32({&qkv});  // bf16/fp16 storage: see storage.h
  const int B = static_cast<int>(qkv.shape[0]), T = static_cast<int>(qkv.shape[1]);
  const int C = static_cast<int>(qkv.shape[2] / 3), HS = C / NH, half = HS / 2;
  float* x = qkv.f32();
#pragma omp parallel
  {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));  // this position's angles
#pragma omp for
    for (int t = 0; t < T; ++t) {
      for (int i = 0; i < half; ++i) rope_cos_sin(first_pos + t, i, HS, theta, &cs[i], &sn[i]);
      for (int b = 0; b < B; ++b) {
        float* row = x + (static_cast<int64_t>(b) * T + t) * 3 * C;
        for (int part = 0; part < 2; ++part)  // q, then k
          for (int h = 0; h < NH; ++h) {
            float* head = row + part * C + h * HS;
            for (int i = 0; i < half; ++i) rope_turn(head[i], head[i + half], cs[i], sn[i], direction);
          }
      }
    }
  }
}

}  // namespace

// qkv (B,T,3C): q and k turned by position first_pos + t
void CpuBackend::rope_forward(Tensor qkv, int NH, int first_pos, float theta) {
  rope_turn_all(qkv, NH, first_pos, theta, 1.0f);
}

// dqkv (B,T,3C): the q and k gradients turned back
void CpuBackend::rope_backward(Tensor dqkv, int NH, int first_pos, float theta) {
  rope_turn_all(dqkv, NH, first_pos, theta, -1.0f);
}

}  // namespace tt
