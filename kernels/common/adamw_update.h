// One AdamW element update with torch.optim.AdamW's semantics and order of operations
// (decoupled weight decay first, then the moments, then the bias-corrected step).
#pragma once
#include <cmath>

#include "kernels/common/host_device.h"

namespace tt {

// The per-step scalars, computed on the host in double and rounded to fp32 exactly where
// PyTorch rounds them (see adamw_step_scalars in optim/adamw.h).
struct AdamWStepScalars {
  float decay;                  // 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float step_size;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  float eps;
};

TT_HD void adamw_update(float* param, float* exp_avg, float* exp_avg_sq, float grad, const AdamWStepScalars& s) {
  const float p = *param * s.decay;
  const float m = *exp_avg * s.beta1 + grad * s.one_minus_beta1;
  const float v = *exp_avg_sq * s.beta2 + grad * grad * s.one_minus_beta2;
  const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
  *param = p - s.step_size * (m / denom);
  *exp_avg = m;
  *exp_avg_sq = v;
}

}  // namespace tt
