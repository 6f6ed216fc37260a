// PyTorch-distribution initialisation of the flat parameter buffer.
#include "engine/init.h"

#include <cmath>
#include <regex>
#include <stdexcept>
#include <string>

#include "engine/rng.h"

namespace tt {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A stream id per parameter that ignores the layer index, so all layers draw the same values.
uint32_t init_stream_id(const std::string& name) {
  static const std::regex layer_index(R"(^(encoder|model)\.layers\.\d+\.)");
  const std::string shared = std::regex_replace(name, layer_index, "$1.layers.*.");
  uint32_t hash = 2166136261u;  // FNV-1a: a fixed hash, so inits agree across compilers
  for (unsigned char ch : shared) hash = (hash ^ ch) * 16777619u;
  return hash;
}

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

}  // namespace

std::vector<float> init_params(const ParamLayout& layout, uint64_t seed) {
  std::vector<float> host(layout.total());
  for (const ParamInfo& p : layout.params()) {
    float* dst = host.data() + p.offset;
    const int64_t n = p.shape.numel();
    const uint32_t id = init_stream_id(p.name);
    auto uniform = [&](float bound) {
      for (int64_t i = 0; i < n; ++i) dst[i] = (2.0f * rng_uniform(seed, RngStream::Init, id, i) - 1.0f) * bound;
    };
    auto fill = [&](float value) {
      for (int64_t i = 0; i < n; ++i) dst[i] = value;
    };
    const bool is_layernorm = p.name.find("norm") != std::string::npos;
    if (p.name == "embed.weight" || p.name == "model.embed_tokens.weight" || p.name == "pos_embed.weight") {
      for (int64_t i = 0; i < n; ++i) dst[i] = rng_normal(seed, RngStream::Init, id, i);
    } else if (is_layernorm) {
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
