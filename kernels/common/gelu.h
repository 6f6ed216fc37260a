// Exact (erf) GELU, as torch.nn.functional.gelu(approximate='none'), and its derivative.
#pragma once
#include <cmath>

#include "kernels/common/host_device.h"

namespace tt {

TT_HD float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

// d/dx [x * Phi(x)] = Phi(x) + x * phi(x)
TT_HD float gelu_grad(float x) {
  float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
  float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
  return add_rn(cdf, mul_rn(x, pdf));
}

}  // namespace tt
