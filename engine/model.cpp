// Forward and backward of the model family, op by op, over the backend.
//
// One encoder layer, as nn.TransformerEncoderLayer (x is the layer input):
//   post-norm:  x1 = norm1(x + dropout1(SA(x)));      out = norm2(x1 + dropout2(FF(x1)))
//   pre-norm:   r1 = x + dropout1(SA(norm1(x)));      out = r1 + dropout2(FF(norm2(r1)))
// with SA = out_proj(attention(in_proj(.))) and FF = linear2(dropout(act(linear1(.)))).
// Pre-norm stacks end with encoder.norm. The backward walks the same lines in reverse.
// Where a branch joins the residual stream next to a norm, one fused op does the dropout, the
// add and the norm (and, backward, the norm, the adds of gradients that meet there and the
// branch's dropout): kernels/backend.h, docs/kernels.md "Fusions".
#include "engine/model.h"

#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>
#include <vector>

#include "engine/nf4_weight.h"
#include "kernels/common/half.h"
#include "kernels/common/nf4.h"

namespace tt {

namespace {

std::string layer_name(int l, const char* what) { return "layers." + std::to_string(l) + "." + what; }

// Names of one layer's activation buffers, in the order forward writes them.
const char* const kLayerBuffers[] = {"ln1", "ln1_mean", "ln1_rstd", "qkv", "lse", "att", "res1",
                                     "ln2", "ln2_mean", "ln2_rstd", "h_pre", "h", "res2"};

// The layer's output, which the next layer reads: norm2's output (post-norm) or the second
// residual sum (pre-norm). Recompute never drops it.
// The buffer that holds a layer's output, kept per layer by every recompute mode; it must be
// the one Model::layer_output returns.
const char* layer_output_buffer(const ModelConfig& c) { return c.norm_first ? "res2" : "ln2"; }

// The arena entry a layer's buffer lives in. Buffers that backward recomputes are shared by
// all layers ("shared.*"): each layer recomputes them just before its own backward.
std::string buffer_name(const ModelConfig& c, Recompute recompute, int l, const std::string& what) {
  const bool shared = (recompute == Recompute::Ffn && (what == "h_pre" || what == "h")) ||
                      (recompute == Recompute::Layer && what != layer_output_buffer(c));
  return shared ? "shared." + what : layer_name(l, what.c_str());
}

}  // namespace

// The trainable parameters' masters and gradients (padded to whole ZeRO-1 shards) and their
// working copy; under LoRA those are the adapters', and the frozen base adds its working
// weights ("base") and the (C) scratch its norms' backward writes ("frozen_norm_grads").
ArenaPlan Model::plan_weights(const ModelConfig& config, DType act, int shards, const LoraConfig& lora) {
  const ParamLayout layout = lora.enabled() ? lora_layout(config, lora) : ParamLayout(config);
  const int64_t padded = layout.shard_elements(shards) * std::max(shards, 1);
  ArenaPlan plan;
  plan.add("params", DType::F32, {padded});
  plan.add("grads", DType::F32, {padded});
  if (act != DType::F32) plan.add("working", act, {layout.total()});
  if (lora.enabled() && !lora.nf4_base) plan.add("base", act, {ParamLayout(config).total()});
  if (lora.enabled() && lora.nf4_base) {
    // QLoRA: the blocks' linear weights as NF4 images (kernels/nf4_tensor.h), end to end in four
    // buffers; everything else of the base in the working dtype; and the tile each linear's
    // weight is decoded into before its GEMM, as large as the largest (one layer's site)
    int64_t kept = 0, codes = 0, absmax = 0, absmax2 = 0, tensors = 0;
    const ParamLayout base(config);
    for (const ParamInfo& p : base.params()) {
      const int64_t n = p.shape.numel();
      if (!is_quantised_base_weight(p.name)) {
        kept += n;
        continue;
      }
      codes += n / 2;
      absmax += nf4::absmax_count(n);
      absmax2 += nf4::absmax2_count(n);
      ++tensors;
    }
    const int64_t C = config.d_model;
    const int64_t tile = std::max({config.qkv_width() * C, C * C, config.ffn_in_width() * C, C * config.d_ff});
    plan.add("base", act, {kept});
    plan.add("nf4.codes", DType::U8, {codes});
    plan.add("nf4.absmax_codes", DType::U8, {absmax});
    plan.add("nf4.absmax2", DType::F32, {absmax2});
    plan.add("nf4.offsets", DType::F32, {tensors});
    plan.add("nf4.tile", act, {tile});
  }
  // a norm's weight and bias gradient, which nothing reads
  if (lora.enabled()) plan.add("frozen_norm_grads", DType::F32, {2 * int64_t{config.d_model}});
  return plan;
}

namespace {

// Which of a layer's linears a quantised base weight belongs to (is_quantised_base_weight's).
LoraSite site_of_weight(const std::string& name) {
  for (const char* part : {"q_proj", "k_proj", "v_proj", "in_proj"})
    if (name.find(part) != std::string::npos) return LoraSite::InProj;
  for (const char* part : {"o_proj", "out_proj"})
    if (name.find(part) != std::string::npos) return LoraSite::OutProj;
  for (const char* part : {"gate_proj", "up_proj", "linear1"})
    if (name.find(part) != std::string::npos) return LoraSite::Linear1;
  return LoraSite::Linear2;
}

// "model.layers.12.mlp.up_proj.weight" -> 12
int layer_of_weight(const std::string& name) {
  const size_t at = name.find(".layers.") + 8;
  return std::stoi(name.substr(at, name.find('.', at) - at));
}

}  // namespace

// Every activation buffer one training step needs, named, in the order they are written.
ArenaPlan Model::plan_activations(const ModelConfig& c, int B, int T, DType act, Recompute recompute,
                                  const LoraConfig& lora) {
  const int64_t N = static_cast<int64_t>(B) * T, C = c.d_model, F = c.d_ff, V = c.vocab_size, NH = c.n_head;
  auto shape_of = [&](const std::string& what) -> std::pair<DType, Shape> {
    if (what == "ln1_mean" || what == "ln1_rstd" || what == "ln2_mean" || what == "ln2_rstd")
      return {DType::F32, Shape{N}};
    if (what == "lse") return {DType::F32, Shape{B, NH, T}};  // attention's row statistics, not (B,NH,T,T)
    if (what == "qkv") return {act, Shape{N, c.qkv_width()}};  // 3C, less with grouped key/value heads
    if (what == "h_pre") return {act, Shape{N, c.ffn_in_width()}};  // SwiGLU: gate and up, 2F
    if (what == "h") return {act, Shape{N, F}};
    return {act, Shape{N, C}};
  };
  ArenaPlan plan;
  plan.add("embedded", act, {N, C});
  // RMSNorm keeps no mean (kernels/backend.h): those buffers are not planned, and the model
  // passes views with null data in their place.
  const bool keeps_mean = c.norm == Norm::LayerNorm;
  for (int l = 0; l < c.n_layer; ++l) {
    for (const char* what : kLayerBuffers) {
      if (!keeps_mean && (std::string(what) == "ln1_mean" || std::string(what) == "ln2_mean")) continue;
      const std::string name = buffer_name(c, recompute, l, what);
      if (plan.has(name)) continue;
      const auto [dtype, shape] = shape_of(what);
      plan.add(name, dtype, shape);
    }
  }
  if (c.norm_first) {
    plan.add("final_norm", act, {N, C});
    if (keeps_mean) plan.add("final_mean", DType::F32, {N});
    plan.add("final_rstd", DType::F32, {N});
  }
  plan.add("logits", act, {N, V});
  for (const char* name : {"d_scratch1", "d_scratch2", "d_scratch3", "d_residual"}) plan.add(name, act, {N, C});
  plan.add("d_qkv", act, {N, c.qkv_width()});
  plan.add("dout_dot_out", DType::F32, {B, NH, T});  // attention backward's D = rowsum(dout * out)
  plan.add("d_h", act, {N, F});
  if (lora.enabled()) LoraAdapters::plan_activations(plan, c, lora, B, T, act);
  return plan;
}

namespace {

// Gradient views for a frozen base: null data everywhere (linear_backward then makes no weight
// gradient, the embedding's backward is not run), except the norms' weights and biases, whose
// fused backward kernels always write theirs: all into one (2C) scratch nothing reads.
ModelParams frozen_base_grads(const ModelParams& working, Tensor norm_scratch) {
  const int64_t C = norm_scratch.numel() / 2;
  const Tensor weight{norm_scratch.data, DType::F32, Shape{C}};
  const Tensor bias{static_cast<float*>(norm_scratch.data) + C, DType::F32, Shape{C}};
  auto null = [](Tensor t) { return Tensor{nullptr, DType::F32, t.shape}; };
  auto norm = [&](Tensor t, Tensor scratch) { return t.data ? scratch : null(t); };
  ModelParams g;
  g.embed = null(working.embed);
  g.pos_embed = null(working.pos_embed);
  for (const LayerParams& w : working.layers) {
    LayerParams L;
    L.in_proj_weight = null(w.in_proj_weight);
    L.in_proj_bias = null(w.in_proj_bias);
    L.out_proj_weight = null(w.out_proj_weight);
    L.out_proj_bias = null(w.out_proj_bias);
    L.linear1_weight = null(w.linear1_weight);
    L.linear1_bias = null(w.linear1_bias);
    L.linear2_weight = null(w.linear2_weight);
    L.linear2_bias = null(w.linear2_bias);
    L.norm1_weight = norm(w.norm1_weight, weight);
    L.norm1_bias = norm(w.norm1_bias, bias);
    L.norm2_weight = norm(w.norm2_weight, weight);
    L.norm2_bias = norm(w.norm2_bias, bias);
    g.layers.push_back(L);
  }
  g.norm_weight = norm(working.norm_weight, weight);
  g.norm_bias = norm(working.norm_bias, bias);
  g.lm_head_weight = null(working.lm_head_weight);
  g.lm_head_bias = null(working.lm_head_bias);
  return g;
}

}  // namespace

Model::Model(Backend& backend, const ModelConfig& config, int B, int T, DType act_dtype, Recompute recompute,
             int shards, const LoraConfig& lora)
    : backend_(backend),
      config_(config),
      B_(B),
      T_(T),
      act_dtype_(act_dtype),
      recompute_(recompute),
      lora_(lora),
      base_layout_(config),
      layout_(lora.enabled() ? lora_layout(config, lora) : base_layout_),
      weights_(backend, plan_weights(config, act_dtype, shards, lora)),
      activations_(backend, plan_activations(config, B, T, act_dtype, recompute, lora)) {
  params_padded_ = weights_.get("params");
  grads_padded_ = weights_.get("grads");
  params_flat_ = Tensor{params_padded_.data, DType::F32, Shape{layout_.total()}};
  grads_flat_ = Tensor{grads_padded_.data, DType::F32, Shape{layout_.total()}};
  working_flat_ = act_dtype == DType::F32 ? params_flat_ : weights_.get("working");
  if (lora.enabled() && lora.nf4_base) {
    bind_quantised_base();
  } else if (lora.enabled()) {
    p_ = bind_params(base_layout_, config_, weights_.get("base").data, act_dtype);
  }
  if (lora.enabled()) {
    g_ = frozen_base_grads(p_, weights_.get("frozen_norm_grads"));
    adapters_ = std::make_unique<LoraAdapters>(backend, config, lora, B, T, act_dtype, working_flat_.data,
                                               grads_flat_.data, activations_);
  } else {
    p_ = bind_params(layout_, config_, working_flat_.data, act_dtype);
    g_ = bind_params(layout_, config_, grads_flat_.data, DType::F32);
  }
  auto a = [&](const std::string& name) { return activations_.get(name); };
  // a buffer the plan leaves out (RMSNorm's means): a view with null data
  auto maybe = [&](const std::string& name) { return activations_.has(name) ? a(name) : Tensor{}; };
  embedded_ = a("embedded");
  for (int l = 0; l < config_.n_layer; ++l) {
    auto al = [&](const char* what) { return maybe(buffer_name(config_, recompute_, l, what)); };
    layers_.push_back({al("ln1"), al("ln1_mean"), al("ln1_rstd"), al("qkv"), al("lse"), al("att"), al("res1"),
                       al("ln2"), al("ln2_mean"), al("ln2_rstd"), al("h_pre"), al("h"), al("res2")});
  }
  if (config_.norm_first) {
    final_norm_ = a("final_norm");
    final_mean_ = maybe("final_mean");
    final_rstd_ = a("final_rstd");
  }
  logits_ = a("logits");
  d_scratch1_ = a("d_scratch1");
  d_scratch2_ = a("d_scratch2");
  d_scratch3_ = a("d_scratch3");
  d_residual_ = a("d_residual");
  d_qkv_ = a("d_qkv");
  dout_dot_out_ = a("dout_dot_out");
  d_h_ = a("d_h");
  attention_note_ = backend_.use_library_attention(attention_shape(), act_dtype_, config_.dropout);
}

void Model::refresh_working_weights() {
  if (working_flat_.data != params_flat_.data) backend_.cast(working_flat_, params_flat_);
}

// QLoRA's views: every quantised weight in the tile (frozen_weight decodes it there first), the
// rest packed in "base" in layout order; and each quantised tensor's NF4 views, by layer and site.
void Model::bind_quantised_base() {
  const Tensor kept = weights_.get("base"), tile = weights_.get("nf4.tile");
  const Tensor codes = weights_.get("nf4.codes"), absmax = weights_.get("nf4.absmax_codes"),
               absmax2 = weights_.get("nf4.absmax2"), offsets = weights_.get("nf4.offsets");
  std::map<std::string, int64_t> kept_offset;
  int64_t next_kept = 0, next_code = 0, next_absmax = 0, next_absmax2 = 0, next_tensor = 0;
  nf4_sites_.assign(config_.n_layer, {});
  std::vector<std::array<int64_t, 4>> tile_used(config_.n_layer, {0, 0, 0, 0});
  for (const ParamInfo& p : base_layout_.params()) {
    const int64_t n = p.shape.numel();
    if (!is_quantised_base_weight(p.name)) {
      kept_offset[p.name] = next_kept;
      next_kept += n;
      continue;
    }
    Nf4Part part;
    part.name = p.name;
    part.weight.codes = Tensor{static_cast<uint8_t*>(codes.data) + next_code, DType::U8, Shape{n / 2}};
    part.weight.absmax_codes = Tensor{static_cast<uint8_t*>(absmax.data) + next_absmax, DType::U8,
                                      Shape{nf4::absmax_count(n)}};
    part.weight.absmax2 = Tensor{static_cast<float*>(absmax2.data) + next_absmax2, DType::F32,
                                 Shape{nf4::absmax2_count(n)}};
    part.weight.offset = Tensor{static_cast<float*>(offsets.data) + next_tensor, DType::F32, Shape{1}};
    const int l = layer_of_weight(p.name), site = static_cast<int>(site_of_weight(p.name));
    char* in_tile = static_cast<char*>(tile.data) + tile_used[l][site] * dtype_size(act_dtype_);
    part.tile = Tensor{in_tile, act_dtype_, Shape{n}};
    tile_used[l][site] += n;  // (the Llama block's q, k, v and gate, up: side by side, as one span)
    nf4_sites_[l][site].push_back(part);
    next_code += n / 2;
    next_absmax += nf4::absmax_count(n);
    next_absmax2 += nf4::absmax2_count(n);
    ++next_tensor;
  }
  p_ = bind_params(base_layout_, config_, act_dtype_, [&](const ParamInfo& info) -> void* {
    if (is_quantised_base_weight(info.name)) return tile.data;
    return static_cast<char*>(kept.data) + kept_offset.at(info.name) * dtype_size(act_dtype_);
  });
}

Tensor Model::frozen_weight(int l, LoraSite site, Tensor weight) {
  if (nf4_sites_.empty()) return weight;  // stored as it is used
  for (const Nf4Part& part : nf4_sites_[l][static_cast<int>(site)]) backend_.nf4_dequantize(part.tile, part.weight);
  return weight;  // (its view is the tile's start)
}

void Model::load_base(const float* host) {
  if (!adapters_) throw std::logic_error("load_base: the model has no LoRA adapters; its parameters are params()");
  // a range of the base in the working dtype: rounded on the host with the function the
  // backends' cast uses (kernels/common/half.h)
  auto upload = [&](void* dst, const float* values, int64_t n) {
    if (act_dtype_ == DType::F32) {
      backend_.copy_to_device(dst, values, n * sizeof(float));
      return;
    }
    std::vector<uint16_t> rounded(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      rounded[i] = act_dtype_ == DType::BF16 ? float_to_bf16(values[i]).bits : float_to_f16(values[i]).bits;
    backend_.copy_to_device(dst, rounded.data(), n * sizeof(uint16_t));
  };
  const Tensor base = weights_.get("base");
  if (nf4_sites_.empty()) {
    upload(base.data, host, base.numel());
    return;
  }
  // QLoRA: each quantised weight to its NF4 image, the rest packed in layout order
  int64_t next_kept = 0;
  std::map<std::string, const Nf4Part*> parts;
  for (const auto& sites : nf4_sites_)
    for (const auto& site : sites)
      for (const Nf4Part& part : site) parts[part.name] = &part;
  for (const ParamInfo& p : base_layout_.params()) {
    const float* values = host + p.offset;
    const int64_t n = p.shape.numel();
    if (!is_quantised_base_weight(p.name)) {
      upload(static_cast<char*>(base.data) + next_kept * dtype_size(act_dtype_), values, n);
      next_kept += n;
      continue;
    }
    const Nf4Weight q = quantize_nf4(values, n);
    const Nf4Tensor& w = parts.at(p.name)->weight;
    backend_.copy_to_device(w.codes.data, q.codes.data(), q.codes.size());
    backend_.copy_to_device(w.absmax_codes.data, q.absmax_codes.data(), q.absmax_codes.size());
    backend_.copy_to_device(w.absmax2.data, q.absmax2.data(), q.absmax2.size() * sizeof(float));
    backend_.copy_to_device(w.offset.data, &q.offset, sizeof(float));
  }
}

void Model::adapters_forward(int l, LoraSite site, Tensor x, Tensor out, const DropoutContext& ctx) {
  if (adapters_) adapters_->forward(l, site, x, out, ctx);
}

void Model::adapters_backward(int l, LoraSite site, Tensor dout, Tensor x, Tensor dx, const DropoutContext& ctx,
                              ParamGrads grads) {
  if (adapters_) adapters_->backward(l, site, dout, x, dx, ctx, grads);
}

DropoutMask Model::dropout(const DropoutContext& ctx, int layer, DropoutSite site) const {
  // Elements of one sequence under each site's mask: a micro-batch starting at sequence
  // first_row starts that many sequences into the full batch's mask.
  const int64_t per_sequence = site == DropoutSite::AttentionWeights ? static_cast<int64_t>(config_.n_head) * T_ * T_
                               : site == DropoutSite::FfnHidden      ? static_cast<int64_t>(T_) * config_.d_ff
                                                                     : static_cast<int64_t>(T_) * config_.d_model;
  return DropoutMask{ctx.training ? config_.dropout : 0.0f, ctx.seed, ctx.step, static_cast<uint32_t>(layer), site,
                     static_cast<uint64_t>(ctx.first_row * per_sequence)};
}

// An (N, X) view as (B, T, X): the per-token layout the position-aware ops take.
Tensor Model::by_token(Tensor rows) const {
  return Tensor{rows.data, rows.dtype, Shape{B_, T_, rows.shape[1]}};
}

AttentionShape Model::attention_shape() const {
  return AttentionShape{B_, T_, config_.n_head, config_.head_dim(), config_.causal, config_.kv_heads()};
}

// The buffer layer_output_buffer names (never shared under --recompute layer).
Tensor Model::layer_output(int l) const { return config_.norm_first ? layers_[l].res2 : layers_[l].ln2; }

Tensor Model::layer_input(int l) const { return l == 0 ? embedded_ : layer_output(l - 1); }

Tensor Model::head_input() const { return config_.norm_first ? final_norm_ : layer_output(config_.n_layer - 1); }

// Named scopes (Backend::range_push): "forward" around the whole pass, "layer l" around each
// layer, so a profile (engine/profile/profiler.h) shows where the time of a pass goes.
void Model::forward(Tensor tokens, const DropoutContext& ctx) {
  const BackendRange scope(backend_, "forward");
  backend_.embedding_forward(embedded_, tokens, p_.embed, p_.pos_embed);
  for (int l = 0; l < config_.n_layer; ++l) {
    const BackendRange layer(backend_, "layer " + std::to_string(l));
    layer_forward(l, ctx);
  }
  if (config_.norm_first) {
    const Tensor last = layer_output(config_.n_layer - 1);
    backend_.layernorm_forward(final_norm_, final_mean_, final_rstd_, last, p_.norm_weight, p_.norm_bias,
                               config_.layer_norm_eps);
  }
  backend_.linear_forward(logits_, head_input(), p_.lm_head_weight, p_.lm_head_bias);
}

void Model::layer_forward(int l, const DropoutContext& ctx) {
  const LayerParams& w = p_.layers[l];
  LayerActs& a = layers_[l];
  const float eps = config_.layer_norm_eps;
  const Tensor x = layer_input(l);
  Tensor branch = d_scratch1_;  // attention / FFN branch output before its residual add (not saved)

  // self-attention block
  Tensor sa_in = x;
  if (config_.norm_first) {
    backend_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.norm1_weight, w.norm1_bias, eps);
    sa_in = a.ln1;
  }
  const Tensor w_in = frozen_weight(l, LoraSite::InProj, w.in_proj_weight);  // (QLoRA: decoded)
  backend_.linear_forward(a.qkv, sa_in, w_in, w.in_proj_bias);
  adapters_forward(l, LoraSite::InProj, sa_in, a.qkv, ctx);
  if (config_.pos_embedding == PosEmbedding::Rope)  // q and k turned by position, in place (kept turned)
    backend_.rope_forward(by_token(a.qkv), config_.n_head, config_.kv_heads(), 0, config_.rope_theta);
  backend_.attention_forward(a.att, a.lse, a.qkv, attention_shape(), dropout(ctx, l, DropoutSite::AttentionWeights));
  const Tensor w_out = frozen_weight(l, LoraSite::OutProj, w.out_proj_weight);  // (QLoRA: decoded)
  backend_.linear_forward(branch, a.att, w_out, w.out_proj_bias);
  adapters_forward(l, LoraSite::OutProj, a.att, branch, ctx);

  // res1 = x + dropout(branch), then the norm between the blocks (norm1 post-norm, norm2 pre-norm)
  const DropoutMask attention_out = dropout(ctx, l, DropoutSite::AttentionOutput);
  Tensor ff_residual;
  if (config_.norm_first) {
    backend_.dropout_residual_layernorm_forward(a.res1, a.ln2, a.ln2_mean, a.ln2_rstd, x, branch, w.norm2_weight,
                                                w.norm2_bias, eps, attention_out);
    ff_residual = a.res1;
  } else {
    backend_.dropout_residual_layernorm_forward(a.res1, a.ln1, a.ln1_mean, a.ln1_rstd, x, branch, w.norm1_weight,
                                                w.norm1_bias, eps, attention_out);
    ff_residual = a.ln1;
  }

  // feed-forward block on the norm's output, then res2 = ff_residual + dropout(branch) and,
  // post-norm, norm2 (pre-norm: no norm here; the next block's comes first)
  ffn_hidden_forward(l, ctx);
  const Tensor w_2 = frozen_weight(l, LoraSite::Linear2, w.linear2_weight);  // (QLoRA: decoded)
  backend_.linear_forward(branch, a.h, w_2, w.linear2_bias);
  adapters_forward(l, LoraSite::Linear2, a.h, branch, ctx);
  const DropoutMask ffn_out = dropout(ctx, l, DropoutSite::FfnOutput);
  const Tensor no_norm{nullptr, a.ln2.dtype, a.ln2.shape};
  const Tensor norm_out = config_.norm_first ? no_norm : a.ln2;
  backend_.dropout_residual_layernorm_forward(a.res2, norm_out, a.ln2_mean, a.ln2_rstd, ff_residual, branch,
                                              w.norm2_weight, w.norm2_bias, eps, ffn_out);
}

void Model::ffn_hidden_forward(int l, const DropoutContext& ctx) {
  const LayerParams& w = p_.layers[l];
  const LayerActs& a = layers_[l];
  const Tensor ff_in = config_.norm_first ? a.ln2 : a.ln1;
  const Tensor w_1 = frozen_weight(l, LoraSite::Linear1, w.linear1_weight);  // (QLoRA: decoded)
  backend_.linear_forward(a.h_pre, ff_in, w_1, w.linear1_bias);
  adapters_forward(l, LoraSite::Linear1, ff_in, a.h_pre, ctx);
  backend_.activation_dropout_forward(a.h, a.h_pre, config_.activation, dropout(ctx, l, DropoutSite::FfnHidden));
}

void Model::backward(Tensor tokens, Tensor targets, Tensor losses, Tensor dloss_scale, int64_t mean_over,
                     const DropoutContext& ctx, ParamGrads grads,
                     const std::function<void(int64_t)>& grads_ready) {
  // every gradient from this one's first element on is final (null data: none was finished)
  auto ready_from = [&](const Tensor& first_grad) {
    if (grads_ready && first_grad.data)
      grads_ready((static_cast<const char*>(first_grad.data) - static_cast<const char*>(grads_flat_.data)) /
                  static_cast<int64_t>(sizeof(float)));
  };
  // logits -> dlogits in place; losses per token for the log
  {
    const BackendRange scope(backend_, "loss");
    backend_.cross_entropy_forward_backward(losses, logits_, logits_, targets, dloss_scale, mean_over);
  }
  const BackendRange scope(backend_, "backward");  // with a "layer l" scope per layer, as forward
  Tensor d = d_residual_;  // (N,C) the gradient flowing down the residual stream
  backend_.linear_backward(d, g_.lm_head_weight, g_.lm_head_bias, logits_, head_input(), p_.lm_head_weight, grads,
                           InputGrad::Write);
  if (config_.norm_first) {
    const Tensor last = layer_output(config_.n_layer - 1);
    backend_.layernorm_backward(d, g_.norm_weight, g_.norm_bias, d, last, p_.norm_weight, final_mean_, final_rstd_,
                                grads);
  }
  // finished now: the final norm and the head's parameters after it; with tied embeddings the
  // head's weight is embed.weight, which the embedding's backward adds to last
  const Tensor head_params = config_.tie_embeddings ? g_.lm_head_bias : g_.lm_head_weight;
  ready_from(config_.norm_first ? g_.norm_weight : head_params);
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    {
      const BackendRange layer(backend_, "layer " + std::to_string(l));
      layer_backward(l, d, ctx, grads);
    }
    if (adapters_ && grads_ready) grads_ready(adapters_->first_grad_of_layer(l));
    ready_from(g_.layers[l].in_proj_weight);  // (null data under LoRA: the base has no gradients)
  }
  if (adapters_) return;  // a frozen embedding: nothing below the first layer needs a gradient
  ParamGrads embedding_grads = grads;
  if (config_.tie_embeddings) {
    // The head's backward wrote (or added) its part of the shared table's gradient: the
    // embedding's adds to it. Its positions' table takes the same mode, so on the first
    // micro-batch it starts from zero.
    if (grads == ParamGrads::Write && g_.pos_embed.data) backend_.fill_zero(g_.pos_embed);
    embedding_grads = ParamGrads::Add;
  }
  backend_.embedding_backward(g_.embed, g_.pos_embed, d, tokens, embedding_grads);
  ready_from(g_.embed);
}

// d (N,C): in, the gradient of the layer output; out, the gradient of the layer input.
void Model::layer_backward(int l, Tensor d, const DropoutContext& ctx, ParamGrads grads) {
  // Recompute what forward did not keep: the same ops on the same inputs with the same
  // dropout masks, so the values (and the gradients below) are bit-identical to keeping them.
  if (recompute_ != Recompute::None) {
    const BackendRange scope(backend_, "recompute");
    if (recompute_ == Recompute::Layer) layer_forward(l, ctx);
    if (recompute_ == Recompute::Ffn) ffn_hidden_forward(l, ctx);
  }
  const LayerParams& w = p_.layers[l];
  const LayerParams& g = g_.layers[l];
  const LayerActs& a = layers_[l];
  const Tensor x = layer_input(l);
  const Tensor none{nullptr, d.dtype, d.shape};  // an optional tensor left out
  Tensor s1 = d_scratch1_, s2 = d_scratch2_, s3 = d_scratch3_;
  const DropoutMask ffn_out = dropout(ctx, l, DropoutSite::FfnOutput);
  const DropoutMask attention_out = dropout(ctx, l, DropoutSite::AttentionOutput);
  const Tensor sa_in = config_.norm_first ? a.ln1 : x;

  if (!config_.norm_first) {
    // post-norm. norm2, then the FFN branch's dropout: s1 = d res2, s2 = d branch
    backend_.layernorm_residual_dropout_backward(s1, s2, g.norm2_weight, g.norm2_bias, d, none, none, a.res2,
                                                 w.norm2_weight, a.ln2_mean, a.ln2_rstd, ffn_out, grads);
    ffn_backward(l, s2, ctx, grads);  // s2 = d ff_in
    // ff_in = x1 = norm1(res1) feeds the FFN and its residual: norm1's gradient is the sum
    // d res2 + d ff_in. d = d res1, s3 = d branch (the attention block's, after its dropout)
    backend_.layernorm_residual_dropout_backward(d, s3, g.norm1_weight, g.norm1_bias, s1, s2, none, a.res1,
                                                 w.norm1_weight, a.ln1_mean, a.ln1_rstd, attention_out, grads);
  } else {
    // pre-norm. d = d res2 = d res1 + the FFN branch's: its dropout, the FFN (s2 = d ln2)
    backend_.dropout_backward(s2, d, ffn_out);
    ffn_backward(l, s2, ctx, grads);
    // norm2, plus the residual around the FFN: s1 = d res1 = d + norm2'(s2); s3 = d branch
    backend_.layernorm_residual_dropout_backward(s1, s3, g.norm2_weight, g.norm2_bias, s2, none, d, a.res1,
                                                 w.norm2_weight, a.ln2_mean, a.ln2_rstd, attention_out, grads);
  }

  // self-attention block, from s3 = d of its output projection's output
  Tensor d_att = config_.norm_first ? s2 : s1;  // free here
  const Tensor w_out = frozen_weight(l, LoraSite::OutProj, w.out_proj_weight);  // (QLoRA: decoded)
  backend_.linear_backward(d_att, g.out_proj_weight, g.out_proj_bias, s3, a.att, w_out, grads,
                           InputGrad::Write);
  adapters_backward(l, LoraSite::OutProj, s3, a.att, d_att, ctx, grads);
  backend_.attention_backward(d_qkv_, dout_dot_out_, d_att, a.qkv, a.att, a.lse, attention_shape(),
                              dropout(ctx, l, DropoutSite::AttentionWeights));
  if (config_.pos_embedding == PosEmbedding::Rope)  // the gradients of the unturned q and k
    backend_.rope_backward(by_token(d_qkv_), config_.n_head, config_.kv_heads(), 0, config_.rope_theta);
  if (!config_.norm_first) {
    // x feeds in_proj and the residual: d = d res1 (in d already) + in_proj's input gradient
    const Tensor w_in = frozen_weight(l, LoraSite::InProj, w.in_proj_weight);  // (QLoRA: decoded)
    backend_.linear_backward(d, g.in_proj_weight, g.in_proj_bias, d_qkv_, sa_in, w_in, grads,
                             InputGrad::Add);
    adapters_backward(l, LoraSite::InProj, d_qkv_, sa_in, d, ctx, grads);
  } else {
    // s3 = d ln1; then norm1 plus the residual around the block: d = s1 + norm1'(s3)
    const Tensor w_in = frozen_weight(l, LoraSite::InProj, w.in_proj_weight);  // (QLoRA: decoded)
    backend_.linear_backward(s3, g.in_proj_weight, g.in_proj_bias, d_qkv_, sa_in, w_in, grads,
                             InputGrad::Write);
    adapters_backward(l, LoraSite::InProj, d_qkv_, sa_in, s3, ctx, grads);
    backend_.layernorm_residual_dropout_backward(d, none, g.norm1_weight, g.norm1_bias, s3, none, s1, x,
                                                 w.norm1_weight, a.ln1_mean, a.ln1_rstd, attention_out, grads);
  }
}

// d_branch (N,C) in: the gradient of linear2's output; out: the gradient of the FFN's input.
void Model::ffn_backward(int l, Tensor d_branch, const DropoutContext& ctx, ParamGrads grads) {
  const LayerParams& w = p_.layers[l];
  const LayerParams& g = g_.layers[l];
  const LayerActs& a = layers_[l];
  const Tensor ff_in = config_.norm_first ? a.ln2 : a.ln1;
  const Tensor w_2 = frozen_weight(l, LoraSite::Linear2, w.linear2_weight);  // (QLoRA: decoded)
  backend_.linear_backward(d_h_, g.linear2_weight, g.linear2_bias, d_branch, a.h, w_2, grads,
                           InputGrad::Write);
  adapters_backward(l, LoraSite::Linear2, d_branch, a.h, d_h_, ctx, grads);
  // the pre-activation's gradient: in place over d_h (n to n), or, for SwiGLU (N,F) to (N,2F),
  // over h_pre itself, which nothing reads after this
  const Tensor d_h_pre = config_.activation == Activation::Swiglu ? a.h_pre : d_h_;
  backend_.activation_dropout_backward(d_h_pre, d_h_, a.h_pre, config_.activation,
                                       dropout(ctx, l, DropoutSite::FfnHidden));
  const Tensor w_1 = frozen_weight(l, LoraSite::Linear1, w.linear1_weight);  // (QLoRA: decoded)
  backend_.linear_backward(d_branch, g.linear1_weight, g.linear1_bias, d_h_pre, ff_in, w_1, grads,
                           InputGrad::Write);
  adapters_backward(l, LoraSite::Linear1, d_h_pre, ff_in, d_branch, ctx, grads);
}

}  // namespace tt
