// SwiGLU (Shazeer 2020; Llama's feed-forward unit): the hidden layer is silu(gate) * up, where
// gate and up are two projections of the same input. silu(x) = x sigmoid(x), as
// torch.nn.functional.silu computes it, x / (1 + exp(-x)), and its derivative
// sigmoid(x) (1 + x (1 - sigmoid(x))). Both backends evaluate these definitions, and one
// element is computed in the same order of operations on each:
//   forward   out   = (silu(gate) up) factor
//   backward  d     = dout factor;  dgate = (d up) silu'(gate);  dup = d silu(gate)
// (factor: the FFN dropout's, 1 without dropout), all in fp32, each output rounded once.
#pragma once
#include <cmath>

#include "kernels/common/host_device.h"

namespace tt {

TT_HD float silu(float x) { return x / (1.0f + expf(-x)); }

TT_HD float silu_grad(float x) {
  const float sigmoid = 1.0f / (1.0f + expf(-x));
  return sigmoid * add_rn(1.0f, mul_rn(x, 1.0f - sigmoid));
}

}  // namespace tt
