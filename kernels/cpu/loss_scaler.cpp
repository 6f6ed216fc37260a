// The once-per-step gradient check and loss-scaler update (CPU).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace tt {

// grads (n) F32 -> s.grad_norm_sq (sum of squares), s.found_inf (any inf or NaN), in one pass.
// Fixed chunks summed in double, then the chunk sums in order: the same bits for any thread count.
// Within a chunk, element i goes to lane i mod kLanes and the lanes are added at the end in a
// fixed order, so the adds run side by side in vector registers instead of one long chain.
// A chunk holds an inf or NaN exactly when its sum does: squares of finite floats (< 2^256)
// cannot overflow a double sum of 2^16 of them.
void CpuBackend::grad_norm_check(Tensor grads, const LossScalerState& s) {
  const int64_t n = grads.numel(), chunk = 1 << 16;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const float* g = grads.f32();
  std::vector<double> sums(chunks);
#pragma omp parallel for
  for (int64_t c = 0; c < chunks; ++c) {
    constexpr int kLanes = 8;
    double lane[kLanes] = {};
    const int64_t begin = c * chunk, end = std::min(n, (c + 1) * chunk);
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
      for (int l = 0; l < kLanes; ++l) lane[l] += static_cast<double>(g[i + l]) * g[i + l];
    for (; i < end; ++i) lane[0] += static_cast<double>(g[i]) * g[i];
    sums[c] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  }
  double total = 0.0;
  int found = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    total += sums[c];
    found |= !std::isfinite(sums[c]);
  }
  *s.grad_norm_sq.f32() = static_cast<float>(total);
  *s.found_inf.i32() = found;
}

void CpuBackend::loss_scaler_update(const LossScalerState& s, const LossScalerConfig& config, Tensor step) {
  tt::loss_scaler_update(s.scale.f32(), s.growth_tracker.i32(), s.skipped_steps.i32(), s.first_skipped_step.i32(),
                         *s.found_inf.i32(), *step.i32(), config);
}

}  // namespace tt
