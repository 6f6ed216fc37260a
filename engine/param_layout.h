// Where every parameter lives in the flat parameter buffer, named and ordered exactly as
// PyTorch's state_dict, and typed views into a flat buffer (parameters or gradients).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "engine/config.h"
#include "kernels/tensor.h"

namespace tt {

struct ParamInfo {
  std::string name;  // PyTorch state_dict name, e.g. "encoder.layers.0.linear1.weight" (the Llama
                     // block: Hugging Face's, "model.layers.0.mlp.gate_proj.weight")
  Shape shape;
  int64_t offset;    // in elements from the start of the flat buffer
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);
  // An empty layout, filled with add: the LoRA adapters' (engine/lora.h).
  ParamLayout() = default;
  // The next parameter, after the ones added so far.
  void add(const std::string& name, Shape shape);
  const std::vector<ParamInfo>& params() const { return params_; }
  int64_t total() const { return total_; }  // number of elements
  // ZeRO-1's shard of the flat buffer for `shards` ranks: ceil(total / shards) rounded up to
  // 64 elements (256 bytes), so that every shard starts aligned; total() when shards is 1.
  // The flat buffers hold shards * shard_elements(shards) elements, zeros past total().
  int64_t shard_elements(int shards) const;
  const ParamInfo& find(const std::string& name) const;  // throws std::out_of_range
  // A view of one parameter in a flat buffer of `dtype` elements (masters and gradients are
  // F32; working weights have the activations' dtype).
  Tensor view(void* base, const ParamInfo& info, DType dtype = DType::F32) const;

 private:
  std::vector<ParamInfo> params_;
  int64_t total_ = 0;
};

// Typed views of one flat buffer, by role: used for the parameters and for their gradients.
struct LayerParams {
  Tensor in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias;  // self_attn
  Tensor linear1_weight, linear1_bias, linear2_weight, linear2_bias;
  Tensor norm1_weight, norm1_bias, norm2_weight, norm2_bias;
};

struct ModelParams {
  Tensor embed, pos_embed;  // pos_embed has null data when pos_embedding is none
  std::vector<LayerParams> layers;
  Tensor norm_weight, norm_bias;  // encoder.norm, null data unless norm_first
  Tensor lm_head_weight, lm_head_bias;
};

ModelParams bind_params(const ParamLayout& layout, const ModelConfig& config, void* base, DType dtype);
// The same views, each parameter's data wherever `address` says (QLoRA: the frozen linears' in
// a shared tile, the rest packed in another buffer: engine/model.cpp).
ModelParams bind_params(const ParamLayout& layout, const ModelConfig& config, DType dtype,
                        const std::function<void*(const ParamInfo&)>& address);

}  // namespace tt
