// Parameter initialisation with PyTorch's default distributions for each module.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/config.h"
#include "engine/param_layout.h"

namespace tt {

// Returns the flat parameter buffer (host) for `layout`, initialised from `seed`:
// nn.Embedding N(0,1); nn.Linear weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))
// (kaiming_uniform with a=sqrt(5)); MHA in_proj_weight xavier_uniform, MHA biases zero,
// out_proj.weight as an nn.Linear; LayerNorm ones and zeros. Every encoder layer gets the
// same values, as PyTorch's TransformerEncoder deep-copies one layer.
std::vector<float> init_params(const ParamLayout& layout, uint64_t seed);

}  // namespace tt
