// One AdamW element update with torch.optim.AdamW's semantics and order of operations
// (decoupled weight decay first, then the moments, then the bias-corrected step).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/host_device.h"

namespace tt {

// torch.optim.AdamW hyper-parameters (PyTorch's defaults), in double like Python floats.
struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// The per-step scalars, computed in double and rounded to fp32 exactly where PyTorch rounds
// them (PyTorch computes them on Python floats).
struct AdamWStepScalars {
  float decay;                  // 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float step_size;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  float eps;
};

// Scalars for step t (t >= 1, the count including this step).
TT_HD AdamWStepScalars adamw_step_scalars(const AdamWHyper& h, int64_t t) {
  const double steps = static_cast<double>(t);
  AdamWStepScalars s;
  s.decay = static_cast<float>(1.0 - h.lr * h.weight_decay);
  s.beta1 = static_cast<float>(h.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  s.step_size = static_cast<float>(h.lr / (1.0 - pow(h.beta1, steps)));
  s.bias_correction2_sqrt = static_cast<float>(sqrt(1.0 - pow(h.beta2, steps)));
  s.eps = static_cast<float>(h.eps);
  return s;
}

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
