// One token per sequence through a causal model, with a KV cache per layer (see decoder.h).
//
// A step is Model::forward for one position, op for op, without dropout:
//   x = embed(token) [+ pos_embed(position)]
//   each layer, as Model::layer_forward (x is the layer input):
//     post-norm:  x1 = norm1(x + SA(x));       out = norm2(x1 + FF(x1))
//     pre-norm:   r1 = x + SA(norm1(x));       out = r1 + FF(norm2(r1))
//   [encoder.norm when pre-norm], lm_head.
// Only SA differs: in_proj runs on the new token alone, its k and v join the layer's cache at
// `position`, and its q attends over the cached positions 0..position (attention_decode).
// Every other op works on each token independently, so running it on one token gives that
// token's row of the full forward. The causal mask is what makes the cache valid: no earlier
// position ever sees a later one, so what was computed for it never changes.
#include "engine/decoder.h"

#include <stdexcept>
#include <string>

namespace tt {

namespace {

std::string layer_name(int l, const char* what) { return "layers." + std::to_string(l) + "." + what; }

// The constructor's checks, run before anything is planned or allocated.
const ModelConfig& causal_only(const ModelConfig& c) {
  if (!c.causal) throw InputError("sampling needs a causal model (--causal true): this one attends both ways");
  return c;
}
int positive_batch(int B) {
  if (B <= 0) throw std::invalid_argument("Decoder: B must be positive, got " + std::to_string(B));
  return B;
}

}  // namespace

ArenaPlan Decoder::plan(const ModelConfig& c, int B) {
  const int64_t C = c.d_model, F = c.d_ff, V = c.vocab_size;
  const int64_t KC = static_cast<int64_t>(c.kv_heads()) * c.head_dim();  // a cache row: the k (or v) heads
  ArenaPlan plan;
  plan.add("params", DType::F32, {ParamLayout(c).total()});
  for (int l = 0; l < c.n_layer; ++l) {
    plan.add(layer_name(l, "k_cache"), DType::F32, {B, c.max_seq_len, KC});
    plan.add(layer_name(l, "v_cache"), DType::F32, {B, c.max_seq_len, KC});
  }
  plan.add("tokens", DType::I32, {B, 1});
  for (const char* name : {"x", "ln", "att", "branch", "res"}) plan.add(name, DType::F32, {B, C});
  if (c.norm == Norm::LayerNorm) plan.add("ln_mean", DType::F32, {B});  // RMSNorm keeps no mean
  plan.add("ln_rstd", DType::F32, {B});
  plan.add("qkv", DType::F32, {B, c.qkv_width()});
  plan.add("h_pre", DType::F32, {B, c.ffn_in_width()});
  plan.add("h", DType::F32, {B, F});
  plan.add("logits", DType::F32, {B, V});
  return plan;
}

Decoder::Decoder(Backend& backend, const ModelConfig& config, int B)
    : backend_(backend),
      config_(causal_only(config)),
      B_(positive_batch(B)),
      layout_(config_),
      arena_(backend, plan(config_, B)) {
  params_ = arena_.get("params");
  p_ = bind_params(layout_, config_, params_.data, DType::F32);
  for (int l = 0; l < config_.n_layer; ++l)
    caches_.push_back({arena_.get(layer_name(l, "k_cache")), arena_.get(layer_name(l, "v_cache"))});
  tokens_ = arena_.get("tokens");
  x_ = arena_.get("x");
  ln_ = arena_.get("ln");
  ln_mean_ = arena_.has("ln_mean") ? arena_.get("ln_mean") : Tensor{};  // null: RMSNorm
  ln_rstd_ = arena_.get("ln_rstd");
  qkv_ = arena_.get("qkv");
  att_ = arena_.get("att");
  branch_ = arena_.get("branch");
  res_ = arena_.get("res");
  h_pre_ = arena_.get("h_pre");
  h_ = arena_.get("h");
  logits_ = arena_.get("logits");
}

void Decoder::load_params(const std::vector<float>& host) {
  if (static_cast<int64_t>(host.size()) != layout_.total())
    throw std::invalid_argument("Decoder::load_params: got " + std::to_string(host.size()) +
                                " floats, the model has " + std::to_string(layout_.total()) + " parameters");
  backend_.copy_to_device(params_.data, host.data(), params_.bytes());
}

void Decoder::reset() { length_ = 0; }

Tensor Decoder::step(const int32_t* tokens, int position) {
  const int maxT = config_.max_seq_len;
  if (position < 0 || position >= maxT)
    throw InputError("position " + std::to_string(position) + " is outside the model's context: positions run from 0 to " +
                     std::to_string(maxT - 1) + " (max_seq_len " + std::to_string(maxT) + ")");
  if (position > length_)
    throw InputError("position " + std::to_string(position) + " skips ahead: the cache holds positions before " +
                     std::to_string(length_) + " only; step positions in order from 0 (reset() starts over)");
  for (int b = 0; b < B_; ++b)
    if (tokens[b] < 0 || tokens[b] >= config_.vocab_size)
      throw InputError("token id " + std::to_string(tokens[b]) + " of sequence " + std::to_string(b) +
                       " is outside the vocabulary [0, " + std::to_string(config_.vocab_size) + ")");
  backend_.copy_to_device(tokens_.data, tokens, tokens_.bytes());

  // The learned position embedding of `position`: the table from that row on, so that the
  // one-token "sequence" of embedding_forward reads row `position` as its position 0.
  Tensor wpe = p_.pos_embed;
  if (wpe.data) {
    const int64_t C = config_.d_model;
    wpe = Tensor{static_cast<float*>(wpe.data) + position * C, DType::F32, Shape{maxT - position, C}};
  }
  backend_.embedding_forward(x_, tokens_, p_.embed, wpe);
  for (int l = 0; l < config_.n_layer; ++l) layer_step(l, position);
  Tensor head_in = x_;
  if (config_.norm_first) {
    backend_.layernorm_forward(ln_, ln_mean_, ln_rstd_, x_, p_.norm_weight, p_.norm_bias, config_.layer_norm_eps);
    head_in = ln_;
  }
  backend_.linear_forward(logits_, head_in, p_.lm_head_weight, p_.lm_head_bias);
  length_ = position + 1;
  return logits_;
}

// x_ (B,C): in, the layer's input; out, its output. The lines of Model::layer_forward with
// dropout left out (identity at inference) and the attention over the cache.
void Decoder::layer_step(int l, int position) {
  const LayerParams& w = p_.layers[l];
  const float eps = config_.layer_norm_eps;

  // self-attention block: res = x + SA(x or norm1(x))
  Tensor sa_in = x_;
  if (config_.norm_first) {
    backend_.layernorm_forward(ln_, ln_mean_, ln_rstd_, x_, w.norm1_weight, w.norm1_bias, eps);
    sa_in = ln_;
  }
  backend_.linear_forward(qkv_, sa_in, w.in_proj_weight, w.in_proj_bias);
  if (config_.pos_embedding == PosEmbedding::Rope)  // the new token's q and k turned by its position
    backend_.rope_forward(Tensor{qkv_.data, qkv_.dtype, Shape{B_, 1, qkv_.shape[1]}}, config_.n_head,
                          config_.kv_heads(), position, config_.rope_theta);
  backend_.kv_cache_append(caches_[l].k, caches_[l].v, qkv_, position);
  backend_.attention_decode(att_, qkv_, caches_[l].k, caches_[l].v, position, config_.n_head);
  backend_.linear_forward(branch_, att_, w.out_proj_weight, w.out_proj_bias);
  backend_.residual_forward(res_, x_, branch_);

  // feed-forward block. pre-norm: out = res + FF(norm2(res)); post-norm: x1 = norm1(res),
  // out = norm2(x1 + FF(x1))
  if (config_.norm_first)
    backend_.layernorm_forward(ln_, ln_mean_, ln_rstd_, res_, w.norm2_weight, w.norm2_bias, eps);
  else
    backend_.layernorm_forward(ln_, ln_mean_, ln_rstd_, res_, w.norm1_weight, w.norm1_bias, eps);
  backend_.linear_forward(h_pre_, ln_, w.linear1_weight, w.linear1_bias);
  backend_.activation_forward(h_, h_pre_, config_.activation);
  backend_.linear_forward(branch_, h_, w.linear2_weight, w.linear2_bias);
  if (config_.norm_first) {
    backend_.residual_forward(x_, res_, branch_);
  } else {
    backend_.residual_forward(res_, ln_, branch_);
    backend_.layernorm_forward(x_, ln_mean_, ln_rstd_, res_, w.norm2_weight, w.norm2_bias, eps);
  }
}

}  // namespace tt
