// Rotary position embedding (RoPE, Su et al. 2021), in Hugging Face Llama's "rotate-half"
// convention: a head's channels i and i + HS/2 (i < HS/2) form a pair that turns by the angle
// pos * theta^(-2i/HS). Both backends rotate with these functions, so they turn by the same
// cos and sin. The angle is computed in double and its cos and sin rounded once to fp32
// (Hugging Face computes the angle in fp32: at position p the two differ by about p x 6e-8
// radians, far below a bf16 or fp16 rounding for the positions a toy model sees).
#pragma once
#include <cmath>

#include "kernels/common/host_device.h"

namespace tt {

// cos and sin of pair i's angle at position pos, head size HS (even), base theta.
TT_HD void rope_cos_sin(int pos, int i, int HS, float theta, float* c, float* s) {
  const double angle = static_cast<double>(pos) * pow(static_cast<double>(theta), -2.0 * i / HS);
  *c = static_cast<float>(cos(angle));
  *s = static_cast<float>(sin(angle));
}

// The pair (a, b) = (x_i, x_{i+HS/2}) turned by the angle (direction +1) or back (-1, the
// transpose: the backward's gradient through the forward's turn).
TT_HD void rope_turn(float& a, float& b, float c, float s, float direction) {
  const float sd = s * direction;
  const float ta = sub_rn(mul_rn(a, c), mul_rn(b, sd));
  const float tb = add_rn(mul_rn(b, c), mul_rn(a, sd));
  a = ta;
  b = tb;
}

}  // namespace tt
