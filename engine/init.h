// Parameter initialisation from a seed, in one of two schemes (--init): PyTorch's module
// defaults, or Hugging Face transformers' _init_weights.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/param_layout.h"

namespace tt {

// --init: which distributions the initial parameters follow.
//  PyTorch: each module's default (what the seed workload was written against): nn.Embedding
//    N(0,1); nn.Linear weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (kaiming_uniform with
//    a=sqrt(5)); MHA in_proj_weight xavier_uniform, MHA biases zero, out_proj.weight as an
//    nn.Linear; LayerNorm ones and zeros. Every encoder layer gets the same values, as
//    PyTorch's TransformerEncoder deep-copies one layer.
//  HuggingFace: every weight matrix and embedding N(0, 0.02), biases 0, norm weights 1; outside
//    the Llama block (GPT-2's scheme) the residual projections, out_proj.weight and
//    linear2.weight, N(0, 0.02 / sqrt(2 n_layer)). Every layer draws its own values.
// A language model's logits are the last hidden state (RMS about 1 after the final norm) times
// the head's weight: with N(0,1) tied embeddings they are huge and the first loss is far above
// ln V; with N(0, 0.02) they are near 0 and it starts at ln V (docs/toy-lm.md).
enum class InitScheme { PyTorch, HuggingFace };

InitScheme parse_init_scheme(const std::string& name);  // "pytorch" | "hf"; throws InputError naming --init

// Returns the flat parameter buffer (host) for `layout` (the layout of `config`), initialised
// from `seed` in `scheme`. Value i of a parameter is a function of (seed, its name, i) alone.
std::vector<float> init_params(const ParamLayout& layout, const ModelConfig& config, uint64_t seed,
                               InitScheme scheme);
// The PyTorch scheme, which needs nothing of the config beyond the layout: the seed workload's,
// and the start of the tests that reproduce it.
std::vector<float> init_params(const ParamLayout& layout, uint64_t seed);

}  // namespace tt
