// The parameter layout of the model family, in PyTorch state_dict order.
#include "engine/param_layout.h"

#include <stdexcept>

namespace tt {

ParamLayout::ParamLayout(const ModelConfig& c) {
  const int64_t C = c.d_model, F = c.d_ff, V = c.vocab_size;
  add("embed.weight", {V, C});
  if (c.pos_embedding == PosEmbedding::Learned) add("pos_embed.weight", {c.max_seq_len, C});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "encoder.layers." + std::to_string(l) + ".";
    add(p + "self_attn.in_proj_weight", {3 * C, C});
    add(p + "self_attn.in_proj_bias", {3 * C});
    add(p + "self_attn.out_proj.weight", {C, C});
    add(p + "self_attn.out_proj.bias", {C});
    add(p + "linear1.weight", {F, C});
    add(p + "linear1.bias", {F});
    add(p + "linear2.weight", {C, F});
    add(p + "linear2.bias", {C});
    add(p + "norm1.weight", {C});
    add(p + "norm1.bias", {C});
    add(p + "norm2.weight", {C});
    add(p + "norm2.bias", {C});
  }
  if (c.norm_first) {
    add("encoder.norm.weight", {C});
    add("encoder.norm.bias", {C});
  }
  add("lm_head.weight", {V, C});
  add("lm_head.bias", {V});
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
  ModelParams m;
  m.embed = get("embed.weight");
  if (c.pos_embedding == PosEmbedding::Learned) m.pos_embed = get("pos_embed.weight");
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "encoder.layers." + std::to_string(l) + ".";
    LayerParams L;
    L.in_proj_weight = get(p + "self_attn.in_proj_weight");
    L.in_proj_bias = get(p + "self_attn.in_proj_bias");
    L.out_proj_weight = get(p + "self_attn.out_proj.weight");
    L.out_proj_bias = get(p + "self_attn.out_proj.bias");
    L.linear1_weight = get(p + "linear1.weight");
    L.linear1_bias = get(p + "linear1.bias");
    L.linear2_weight = get(p + "linear2.weight");
    L.linear2_bias = get(p + "linear2.bias");
    L.norm1_weight = get(p + "norm1.weight");
    L.norm1_bias = get(p + "norm1.bias");
    L.norm2_weight = get(p + "norm2.weight");
    L.norm2_bias = get(p + "norm2.bias");
    m.layers.push_back(L);
  }
  if (c.norm_first) {
    m.norm_weight = get("encoder.norm.weight");
    m.norm_bias = get("encoder.norm.bias");
  }
  m.lm_head_weight = get("lm_head.weight");
  m.lm_head_bias = get("lm_head.bias");
  return m;
}

}  // namespace tt
