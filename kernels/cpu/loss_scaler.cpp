// The once-per-step gradient check and loss-scaler update (CPU).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"

namespace tt {

// grads (n) F32 -> s.grad_norm_sq (sum of squares), s.found_inf (any inf or NaN), in one pass.
// Fixed chunks summed in double, then the chunk sums in order: the same bits for any thread count.
void CpuBackend::grad_norm_check(Tensor grads, const LossScalerState& s) {
  const int64_t n = grads.numel(), chunk = 1 << 16;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const float* g = grads.f32();
  std::vector<double> sums(chunks);
  std::vector<int> bad(chunks);
#pragma omp parallel for
  for (int64_t c = 0; c < chunks; ++c) {
    double sum = 0.0;
    int nonfinite = 0;
    for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) {
      sum += static_cast<double>(g[i]) * g[i];
      nonfinite |= !std::isfinite(g[i]);
    }
    sums[c] = sum;
    bad[c] = nonfinite;
  }
  double total = 0.0;
  int found = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    total += sums[c];
    found |= bad[c];
  }
  *s.grad_norm_sq.f32() = static_cast<float>(total);
  *s.found_inf.i32() = found;
}

void CpuBackend::loss_scaler_update(const LossScalerState& s, const LossScalerConfig& config, Tensor step) {
  tt::loss_scaler_update(s.scale.f32(), s.growth_tracker.i32(), s.skipped_steps.i32(), s.first_skipped_step.i32(),
                         *s.found_inf.i32(), *step.i32(), config);
}

}  // namespace tt
