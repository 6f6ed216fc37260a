// One AdamW element update with torch.optim.AdamW's semantics and order of operations
// (decoupled weight decay first, then the moments, then the bias-corrected step).
#pragma once
#include <cmath>

#include "kernels/common/host_device.h"

namespace tt {

struct AdamWStepScalars {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1;       // 1 - beta1^t
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

TT_HD void adamw_update(float* param, float* exp_avg, float* exp_avg_sq, float grad, const AdamWStepScalars& s) {
  float p = *param * (1.0f - s.lr * s.weight_decay);
  float m = *exp_avg * s.beta1 + grad * (1.0f - s.beta1);
  float v = *exp_avg_sq * s.beta2 + grad * grad * (1.0f - s.beta2);
  float step_size = s.lr / s.bias_correction1;
  float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
  *param = p - step_size * (m / denom);
  *exp_avg = m;
  *exp_avg_sq = v;
}

}  // namespace tt
