// One AdamW element update with torch.optim.AdamW's semantics and order of operations
// (decoupled weight decay first, then the moments, then the bias-corrected step).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/host_device.h"
#include "kernels/common/lr_schedule.h"

namespace tt {

// torch.optim.AdamW hyper-parameters (PyTorch's defaults), in double like Python floats, with
// the learning-rate schedule (lr is its peak) and global-norm gradient clipping.
struct AdamWHyper {
  double lr = 1e-3;  // the peak lr: the schedule's (kernels/common/lr_schedule.h)
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  LrSchedule schedule;    // default: constant lr, no warmup
  double grad_clip = 0;   // max global gradient norm (torch.nn.utils.clip_grad_norm_); 0: off
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

// Scalars for AdamW step t (t >= 1, the count including this step; skipped steps do not
// count) at the learning rate lr (scheduled_lr of the training step, kernels/common/lr_schedule.h;
// PyTorch: group['lr'] = lr before optimizer.step()).
TT_HD AdamWStepScalars adamw_step_scalars(const AdamWHyper& h, double lr, int64_t t) {
  const double steps = static_cast<double>(t);
  AdamWStepScalars s;
  s.decay = static_cast<float>(sub_rn(1.0, mul_rn(lr, h.weight_decay)));
  s.beta1 = static_cast<float>(h.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  s.step_size = static_cast<float>(lr / (1.0 - pow(h.beta1, steps)));
  s.bias_correction2_sqrt = static_cast<float>(sqrt(1.0 - pow(h.beta2, steps)));
  s.eps = static_cast<float>(h.eps);
  return s;
}

// torch.nn.utils.clip_grad_norm_(params, max_norm) after GradScaler.unscale_: the factor the
// unscaled gradients are multiplied by. grad_norm_sq is the sum of squares of the SCALED
// gradients (grad_norm_check), inv_scale the fp32 reciprocal of the loss scale, so the
// unscaled global norm is sqrt(grad_norm_sq) * inv_scale (in double; PyTorch 1.13 takes it
// in fp32 as the norm of the per-parameter norms: the two agree to a few fp32 ulps, and the
// factor is rounded to fp32 once). coef = max_norm / (norm + 1e-6), at most 1.
TT_HD float clip_coefficient(double max_norm, float grad_norm_sq, float inv_scale) {
  const double total_norm = mul_rn(sqrt(static_cast<double>(grad_norm_sq)), static_cast<double>(inv_scale));
  const double coef = max_norm / add_rn(total_norm, 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

// The gradient one element update uses: (g * inv_scale) * coef, two fp32 multiplies as
// PyTorch (unscale_ multiplies, then clip_grad_norm_ multiplies); clip = false: no clipping.
TT_HD float unscaled_clipped_grad(float g, float inv_scale, bool clip, float coef) {
  const float unscaled = g * inv_scale;
  return clip ? unscaled * coef : unscaled;
}

// Every product that meets a sum is rounded as written (mul_rn, add_rn: host_device.h), so
// the CPU and a GPU that contracts multiply-adds give the same bits; sqrtf and / are correctly
// rounded on both (nvcc's defaults -prec-sqrt=true, -prec-div=true).
TT_HD void adamw_update(float* param, float* exp_avg, float* exp_avg_sq, float grad, const AdamWStepScalars& s) {
  const float p = mul_rn(*param, s.decay);
  const float m = add_rn(mul_rn(*exp_avg, s.beta1), mul_rn(grad, s.one_minus_beta1));
  const float v = add_rn(mul_rn(*exp_avg_sq, s.beta2), mul_rn(grad * grad, s.one_minus_beta2));
  const float denom = sqrtf(v) / s.bias_correction2_sqrt + s.eps;
  *param = sub_rn(p, mul_rn(s.step_size, m / denom));
  *exp_avg = m;
  *exp_avg_sq = v;
}

}  // namespace tt
