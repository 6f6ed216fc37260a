// AdamW over the flat parameter buffer (CPU); the element math is shared with CUDA.
#include "kernels/cpu/cpu_backend.h"

namespace tt {

// params (n), grads (n) scaled by s.scale, exp_avg (n), exp_avg_sq (n) updated in place;
// step_count (1) += 1. The lr is scheduled from train_step (1); with hyper.grad_clip > 0 the
// unscaled gradients are clipped to that global norm. Nothing changes when s.found_inf is set.
void CpuBackend::adamw_step(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                            Tensor train_step, const AdamWHyper& hyper, const LossScalerState& scaler) {
  if (*scaler.found_inf.i32()) return;  // a skipped step
  int32_t* t = step_count.i32();
  const double lr = scheduled_lr(hyper.lr, hyper.schedule, *train_step.i32());
  const AdamWStepScalars s = adamw_step_scalars(hyper, lr, *t + 1);
  // As GradScaler.unscale_: multiply by the fp32 reciprocal of the scale (computed in double).
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(*scaler.scale.f32()));
  const bool clip = hyper.grad_clip > 0;
  const float coef = clip ? clip_coefficient(hyper.grad_clip, *scaler.grad_norm_sq.f32(), inv_scale) : 1.0f;
  const int64_t n = params.numel();
  float* p = params.f32();
  const float* g = grads.f32();
  float* m = exp_avg.f32();
  float* v = exp_avg_sq.f32();
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i)
    adamw_update(p + i, m + i, v + i, unscaled_clipped_grad(g[i], inv_scale, clip, coef), s);
  *t += 1;
}

}  // namespace tt
