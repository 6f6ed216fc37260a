// Initialisation of the flat parameter buffer: PyTorch's module defaults or Hugging Face's
// _init_weights (engine/init.h).
#include "engine/init.h"

#include <algorithm>
#include <cmath>
#include <regex>
#include <stdexcept>
#include <string>

#include "base/checked_input.h"
#include "engine/rng.h"

namespace tt {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// FNV-1a: a fixed hash, so inits agree across compilers.
uint32_t name_hash(const std::string& name) {
  uint32_t hash = 2166136261u;
  for (unsigned char ch : name) hash = (hash ^ ch) * 16777619u;
  return hash;
}

// The PyTorch scheme's stream id per parameter: it ignores the layer index, so all layers draw
// the same values.
uint32_t shared_layers_stream_id(const std::string& name) {
  static const std::regex layer_index(R"(^(encoder|model)\.layers\.\d+\.)");
  return name_hash(std::regex_replace(name, layer_index, "$1.layers.*."));
}

bool is_norm(const std::string& name) { return name.find("norm") != std::string::npos; }

// The fan_in of the layer a bias belongs to: its weight's input width. A tied head
// (--tie-embeddings) has no lm_head.weight: its weight is the embedding table (V,C), the
// layout's first parameter, whose rows are C wide as the head's input is.
int64_t bias_fan_in(const ParamLayout& layout, const std::string& bias) {
  const std::string weight = bias.substr(0, bias.size() - 4) + "weight";
  for (const ParamInfo& p : layout.params())
    if (p.name == weight) return p.shape[1];
  if (bias == "lm_head.bias") return layout.params().front().shape[1];
  throw std::out_of_range("no weight for the bias " + bias);
}

// transformers' _init_weights: nn.Linear and nn.Embedding weights N(0, initializer_range =
// 0.02), biases 0, LayerNorm/RMSNorm weight 1 and bias 0. GPT2PreTrainedModel then redraws the
// residual projections (attn.c_proj, mlp.c_proj; ours out_proj and linear2) with std 0.02 /
// sqrt(2 n_layer), so that the 2 n_layer branches added to the residual stream sum to a
// variance that does not grow with depth. LlamaPreTrainedModel scales nothing.
std::vector<float> init_huggingface(const ParamLayout& layout, const ModelConfig& config, uint64_t seed) {
  const float std_weight = 0.02f;
  const float std_residual = config.llama_block() ? std_weight : std_weight / std::sqrt(2.0f * config.n_layer);
  std::vector<float> host(layout.total());
  for (const ParamInfo& p : layout.params()) {
    float* dst = host.data() + p.offset;
    const int64_t n = p.shape.numel();
    const uint32_t id = name_hash(p.name);  // the whole name: each layer draws its own values
    auto normal = [&](float stddev) {
      for (int64_t i = 0; i < n; ++i) dst[i] = stddev * rng_normal(seed, RngStream::Init, id, i);
    };
    const bool is_weight = ends_with(p.name, "weight");  // ".weight" and MHA's "in_proj_weight"
    if (is_norm(p.name)) {
      std::fill(dst, dst + n, is_weight ? 1.0f : 0.0f);
    } else if (!is_weight) {
      std::fill(dst, dst + n, 0.0f);  // every bias
    } else if (ends_with(p.name, "self_attn.out_proj.weight") || ends_with(p.name, "linear2.weight")) {
      normal(std_residual);
    } else {  // the embeddings, in_proj (q, k, v), o_proj, linear1 (gate, up), down_proj, lm_head
      normal(std_weight);
    }
  }
  return host;
}

}  // namespace

InitScheme parse_init_scheme(const std::string& name) {
  if (name == "pytorch") return InitScheme::PyTorch;
  if (name == "hf") return InitScheme::HuggingFace;
  throw InputError("invalid config: unknown --init '" + printable(name) + "' (expected pytorch or hf)");
}

std::vector<float> init_params(const ParamLayout& layout, const ModelConfig& config, uint64_t seed,
                               InitScheme scheme) {
  return scheme == InitScheme::HuggingFace ? init_huggingface(layout, config, seed) : init_params(layout, seed);
}

std::vector<float> init_params(const ParamLayout& layout, uint64_t seed) {
  std::vector<float> host(layout.total());
  for (const ParamInfo& p : layout.params()) {
    float* dst = host.data() + p.offset;
    const int64_t n = p.shape.numel();
    const uint32_t id = shared_layers_stream_id(p.name);
    auto uniform = [&](float bound) {
      for (int64_t i = 0; i < n; ++i) dst[i] = (2.0f * rng_uniform(seed, RngStream::Init, id, i) - 1.0f) * bound;
    };
    auto fill = [&](float value) {
      for (int64_t i = 0; i < n; ++i) dst[i] = value;
    };
    if (p.name == "embed.weight" || p.name == "model.embed_tokens.weight" || p.name == "pos_embed.weight") {
      for (int64_t i = 0; i < n; ++i) dst[i] = rng_normal(seed, RngStream::Init, id, i);
    } else if (is_norm(p.name)) {
      fill(ends_with(p.name, ".weight") ? 1.0f : 0.0f);
    } else if (ends_with(p.name, "in_proj_weight")) {
      const float fan_out = static_cast<float>(p.shape[0]), fan_in = static_cast<float>(p.shape[1]);
      uniform(std::sqrt(6.0f / (fan_in + fan_out)));
    } else if (ends_with(p.name, "in_proj_bias") || ends_with(p.name, "out_proj.bias")) {
      fill(0.0f);
    } else if (ends_with(p.name, ".weight")) {  // nn.Linear weight (out, in), out_proj included
      uniform(1.0f / std::sqrt(static_cast<float>(p.shape[1])));
    } else {  // nn.Linear bias: the bound uses the layer's fan_in
      uniform(1.0f / std::sqrt(static_cast<float>(bias_fan_in(layout, p.name))));
    }
  }
  return host;
}

}  // namespace tt
