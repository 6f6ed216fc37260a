// Probe kernels for tests/check_rounded_formulas.py: each calls one of the shared host/device
// formulas whose arithmetic is all plain products, sums, square roots and divisions (no library
// call such as erff, expf, pow or cos, whose device code differs from glibc's anyway), on values
// read from memory so that nothing folds at compile time. Compiled to PTX with nvcc's default
// contraction (--fmad=true), they must contain no fused multiply-add: every product that meets
// a sum in these formulas is written with mul_rn/add_rn (kernels/common/host_device.h), so the
// GPU rounds them as the CPU backend does.
#include <cstdint>

#include "kernels/common/adamw_update.h"
#include "kernels/common/loss_scaler.h"
#include "kernels/common/nf4.h"
#include "kernels/common/rope.h"

namespace tt {

__global__ void probe_adamw_update(float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                                   const AdamWStepScalars* s, const float* inv_scale, const float* coef) {
  const int i = threadIdx.x;
  adamw_update(param + i, exp_avg + i, exp_avg_sq + i, unscaled_clipped_grad(grad[i], *inv_scale, true, *coef), *s);
}

__global__ void probe_clip_coefficient(const double* max_norm, const float* grad_norm_sq, const float* inv_scale,
                                       float* coef) {
  *coef = clip_coefficient(*max_norm, *grad_norm_sq, *inv_scale);
}

__global__ void probe_rope_turn(float* a, float* b, const float* c, const float* s, const float* direction) {
  const int i = threadIdx.x;
  rope_turn(a[i], b[i], c[i], s[i], *direction);
}

__global__ void probe_loss_scaler_update(float* scale, int32_t* tracker, int32_t* skipped, int32_t* first_skipped,
                                         const int32_t* found_inf, const LossScalerConfig* config) {
  loss_scaler_update(scale, tracker, skipped, first_skipped, *found_inf, 7, *config);
}

// NF4's decoding: the block's absmax (map value * absmax2 + offset), then level * absmax
__global__ void probe_nf4_decode(float* out, const float* map_value, const float* absmax2, const float* offset,
                                 const float* level) {
  const int i = threadIdx.x;
  out[i] = nf4::dequantize(level[i], nf4::block_absmax(map_value[i], *absmax2, *offset));
}

}  // namespace tt
