// The learning-rate schedule, shared by host and device: linear warmup, then constant, cosine
// or linear decay to min_lr. The CUDA backend evaluates it inside the AdamW kernel from the
// training step in device memory, so one captured CUDA graph serves every step; the host
// calls the same function only to print the lr. All in double, as Python floats in the
// PyTorch reference (tools/make_reference.py mirrors the formula).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/host_device.h"

namespace tt {

enum class LrScheduleKind { Constant, Cosine, Linear };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  int64_t warmup_steps = 0;  // steps 0..warmup-1 ramp up to peak: peak * (step + 1) / warmup
  int64_t total_steps = 0;   // --steps: the decay reaches min_lr there (unused by Constant)
  double min_lr = 0.0;       // where cosine and linear decay end
};

// The lr of the 0-based training step `step` for the peak lr `peak` (--lr):
//   step < warmup:  peak * (step + 1) / warmup
//   constant:       peak
//   else, with progress = (step - warmup) / max(1, total - warmup):
//     cosine:  min_lr + 0.5 (peak - min_lr) (1 + cos(pi progress))
//     linear:  peak - (peak - min_lr) progress
// With no warmup and Constant it is `peak` itself, bit for bit.
TT_HD double scheduled_lr(double peak, const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) return peak * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  if (s.kind == LrScheduleKind::Constant) return peak;
  const int64_t span = s.total_steps - s.warmup_steps > 1 ? s.total_steps - s.warmup_steps : 1;
  const double progress = static_cast<double>(step - s.warmup_steps) / static_cast<double>(span);
  if (s.kind == LrScheduleKind::Cosine) {
    const double pi = 3.141592653589793;  // Python's math.pi
    return add_rn(s.min_lr, mul_rn(0.5 * (peak - s.min_lr), 1.0 + cos(pi * progress)));
  }
  return sub_rn(peak, mul_rn(peak - s.min_lr, progress));
}

}  // namespace tt
