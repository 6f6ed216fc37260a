// The loss scaler's once-per-step update, with torch.cuda.amp.GradScaler's semantics, shared
// by host and device: on inf/NaN gradients the step is skipped and the scale backs off; after
// growth_interval clean steps in a row it grows. With dynamic scaling off (fp32, bf16) the
// scale stays 1 and only skipped steps are counted (a NaN there cannot be scaled away).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/host_device.h"

namespace tt {

struct LossScalerConfig {
  bool dynamic = false;          // fp16: true
  float init_scale = 65536.0f;   // 2^16
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int32_t growth_interval = 2000;
};

// found_inf: this step's gradients held an inf or NaN (so the optimizer skipped the step).
TT_HD void loss_scaler_update(float* scale, int32_t* growth_tracker, int32_t* skipped_steps,
                              int32_t* first_skipped_step, int32_t found_inf, int32_t step,
                              const LossScalerConfig& c) {
  if (found_inf) {
    *skipped_steps += 1;
    if (*first_skipped_step < 0) *first_skipped_step = step;
    if (c.dynamic) {
      *scale *= c.backoff_factor;
      *growth_tracker = 0;
    }
    return;
  }
  if (!c.dynamic) return;
  const int32_t successful = *growth_tracker + 1;
  if (successful == c.growth_interval) {
    const float grown = *scale * c.growth_factor;
    if (grown < INFINITY) *scale = grown;  // as PyTorch: never grow into infinity
    *growth_tracker = 0;
  } else {
    *growth_tracker = successful;
  }
}

}  // namespace tt
