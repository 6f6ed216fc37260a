// The parameter layout of the model family, in PyTorch state_dict order.
#include "engine/param_layout.h"

#include <stdexcept>

namespace tt {

ParamLayout::ParamLayout(const ModelConfig& c) {
  const int64_t C = c.d_model, F = c.d_ff, V = c.vocab_size;
  add("embed.weight", {V, C});
  if (c.pos_embedding == PosEmbedding::Learned) add("pos_embed.weight", {c.max_seq_len, C});
  // biases only where the config has them (--bias, --norm: kernels/backend.h's null data)
  auto add_bias = [&](const std::string& name, int64_t n, bool present) {
    if (present) add(name, {n});
  };
  const bool lb = c.bias, nb = c.norm_bias();
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "encoder.layers." + std::to_string(l) + ".";
    add(p + "self_attn.in_proj_weight", {3 * C, C});
    add_bias(p + "self_attn.in_proj_bias", 3 * C, lb);
    add(p + "self_attn.out_proj.weight", {C, C});
    add_bias(p + "self_attn.out_proj.bias", C, lb);
    add(p + "linear1.weight", {F, C});
    add_bias(p + "linear1.bias", F, lb);
    add(p + "linear2.weight", {C, F});
    add_bias(p + "linear2.bias", C, lb);
    add(p + "norm1.weight", {C});
    add_bias(p + "norm1.bias", C, nb);
    add(p + "norm2.weight", {C});
    add_bias(p + "norm2.bias", C, nb);
  }
  if (c.norm_first) {
    add("encoder.norm.weight", {C});
    add_bias("encoder.norm.bias", C, nb);
  }
  if (!c.tie_embeddings) add("lm_head.weight", {V, C});  // tied: the head reads embed.weight
  add_bias("lm_head.bias", V, lb);
}

int64_t ParamLayout::shard_elements(int shards) const {
  if (shards <= 1) return total_;
  const int64_t per_rank = (total_ + shards - 1) / shards;
  return (per_rank + 63) / 64 * 64;
}

void ParamLayout::add(const std::string& name, Shape shape) {
  params_.push_back({name, shape, total_});
  total_ += shape.numel();
}

const ParamInfo& ParamLayout::find(const std::string& name) const {
  for (const ParamInfo& p : params_)
    if (p.name == name) return p;
  throw std::out_of_range("no parameter named " + name);
}

Tensor ParamLayout::view(void* base, const ParamInfo& info, DType dtype) const {
  return Tensor{static_cast<char*>(base) + info.offset * dtype_size(dtype), dtype, info.shape};
}

ModelParams bind_params(const ParamLayout& layout, const ModelConfig& c, void* base, DType dtype) {
  auto get = [&](const std::string& name) { return layout.view(base, layout.find(name), dtype); };
  // a bias the config does not have: a view with null data, which every op skips
  auto bias = [&](const std::string& name, bool present) { return present ? get(name) : Tensor{nullptr, dtype, {}}; };
  const bool lb = c.bias, nb = c.norm_bias();
  ModelParams m;
  m.embed = get("embed.weight");
  if (c.pos_embedding == PosEmbedding::Learned) m.pos_embed = get("pos_embed.weight");
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "encoder.layers." + std::to_string(l) + ".";
    LayerParams L;
    L.in_proj_weight = get(p + "self_attn.in_proj_weight");
    L.in_proj_bias = bias(p + "self_attn.in_proj_bias", lb);
    L.out_proj_weight = get(p + "self_attn.out_proj.weight");
    L.out_proj_bias = bias(p + "self_attn.out_proj.bias", lb);
    L.linear1_weight = get(p + "linear1.weight");
    L.linear1_bias = bias(p + "linear1.bias", lb);
    L.linear2_weight = get(p + "linear2.weight");
    L.linear2_bias = bias(p + "linear2.bias", lb);
    L.norm1_weight = get(p + "norm1.weight");
    L.norm1_bias = bias(p + "norm1.bias", nb);
    L.norm2_weight = get(p + "norm2.weight");
    L.norm2_bias = bias(p + "norm2.bias", nb);
    m.layers.push_back(L);
  }
  if (c.norm_first) {
    m.norm_weight = get("encoder.norm.weight");
    m.norm_bias = bias("encoder.norm.bias", nb);
  }
  m.lm_head_weight = c.tie_embeddings ? m.embed : get("lm_head.weight");
  m.lm_head_bias = bias("lm_head.bias", lb);
  return m;
}

}  // namespace tt
