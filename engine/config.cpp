// Validation and JSON (de)serialisation of the configs.
#include "engine/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/checked_input.h"

namespace tt {

namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw InputError(message);
}

void require_positive(int value, const char* name) {
  require(value > 0, std::string("invalid config: ") + name + " must be positive, got " + std::to_string(value));
}

}  // namespace

void ModelConfig::validate() const {
  require_positive(vocab_size, "vocab_size");
  require_positive(d_model, "d_model");
  require_positive(n_head, "n_head");
  require_positive(n_layer, "n_layer");
  require_positive(d_ff, "d_ff");
  require_positive(max_seq_len, "max_seq_len");
  require(d_model % n_head == 0, "invalid config: n_head (" + std::to_string(n_head) + ") must divide d_model (" +
                                     std::to_string(d_model) + ")");
  require(n_kv_head >= 0 && (n_kv_head == 0 || n_head % n_kv_head == 0),
          "invalid config: n_kv_head (" + std::to_string(n_kv_head) + ") must divide n_head (" +
              std::to_string(n_head) + ")");
  require(std::isfinite(layer_norm_eps) && layer_norm_eps > 0,
          "invalid config: layer_norm_eps must be positive, got " + std::to_string(layer_norm_eps));
  require(std::isfinite(dropout) && dropout >= 0 && dropout < 1,
          "invalid config: dropout must be in [0, 1), got " + std::to_string(dropout));
  if (pos_embedding == PosEmbedding::Rope) {
    require(head_dim() % 2 == 0, "invalid config: --pos-embedding rope turns pairs of a head's channels: the head "
                                 "size d_model / n_head (" + std::to_string(head_dim()) + ") must be even");
    require(std::isfinite(rope_theta) && rope_theta > 1.0f,
            "invalid config: rope_theta must be a number above 1, got " + std::to_string(rope_theta));
  }
  // Far from int64 overflow, and from what any machine holds: 2^40 parameters.
  require(parameter_count() < std::ldexp(1.0, 40), "invalid config: the model has more than 2^40 parameters");
}

double ModelConfig::parameter_count() const {
  const double C = d_model, F = d_ff, V = vocab_size;
  const double QKV = (n_head + 2.0 * kv_heads()) * (d_model / n_head);  // 3C without grouped heads
  const double F1 = activation == Activation::Swiglu ? 2.0 * F : F;      // linear1's outputs
  const double linear_biases = bias ? QKV + 2.0 * C + F1 : 0.0;  // in_proj, out_proj, linear1, linear2
  const double norm_params = norm_bias() ? 2.0 * C : C;           // weight, and bias for a LayerNorm with one
  const double per_layer = QKV * C + C * C + F1 * C + C * F + linear_biases + 2.0 * norm_params;
  return V * C + (pos_embedding == PosEmbedding::Learned ? max_seq_len * C : 0.0) + n_layer * per_layer +
         (norm_first ? norm_params : 0.0) + (tie_embeddings ? 0.0 : V * C) + (lm_head_bias() ? V : 0.0);  // embedding,
                                                                   // positions, layers, encoder.norm, lm_head
}

void AdamWConfig::validate() const {
  require(std::isfinite(lr) && lr >= 0, "invalid config: lr must be finite and >= 0, got " + std::to_string(lr));
  require(beta1 >= 0 && beta1 < 1, "invalid config: beta1 must be in [0, 1), got " + std::to_string(beta1));
  require(beta2 >= 0 && beta2 < 1, "invalid config: beta2 must be in [0, 1), got " + std::to_string(beta2));
  require(std::isfinite(eps) && eps > 0, "invalid config: eps must be positive, got " + std::to_string(eps));
  require(std::isfinite(weight_decay) && weight_decay >= 0,
          "invalid config: weight_decay must be >= 0, got " + std::to_string(weight_decay));
  const LrSchedule& sc = schedule;
  require(sc.warmup_steps >= 0 && sc.warmup_steps <= INT32_MAX,
          "invalid config: warmup_steps must be in [0, 2^31), got " + std::to_string(sc.warmup_steps));
  require(std::isfinite(sc.min_lr) && sc.min_lr >= 0 && sc.min_lr <= lr,
          "invalid config: min_lr must be in [0, lr], got " + std::to_string(sc.min_lr));
  require(std::isfinite(grad_clip) && grad_clip >= 0,
          "invalid config: grad_clip must be finite and >= 0 (0: off), got " + std::to_string(grad_clip));
  require(sc.total_steps >= 0 && sc.total_steps <= INT32_MAX,
          "invalid config: total_steps must be in [0, 2^31), got " + std::to_string(sc.total_steps));
  if (sc.kind != LrScheduleKind::Constant) {
    require(sc.total_steps >= 1, std::string("invalid config: the ") + lr_schedule_name(sc.kind) +
                                     " lr schedule needs total_steps (--steps) >= 1");
    require(sc.warmup_steps <= sc.total_steps, "invalid config: warmup_steps (" + std::to_string(sc.warmup_steps) +
                                                   ") exceeds total_steps (" + std::to_string(sc.total_steps) + ")");
  }
}

void RunConfig::validate(const ModelConfig& model) const {
  require_positive(batch, "batch");
  require_positive(seq, "seq");
  require_positive(steps, "steps");
  require(seed >= 0, "invalid config: seed must be >= 0, got " + std::to_string(seed));
  // The largest activation (B*T*max(V, F or 2F, qkv, T*NH): logits, FFN hidden, qkv, attention
  // weights) must stay far from int64 overflow and from
  // what any machine holds: 2^40 elements.
  const double widest = std::max({static_cast<double>(model.vocab_size), static_cast<double>(model.ffn_in_width()),
                                  3.0 * model.d_model, static_cast<double>(seq) * model.n_head});
  require(static_cast<double>(batch) * seq * widest < std::ldexp(1.0, 40),
          "invalid config: batch x seq x width is beyond 2^40 elements");
  require(seq <= model.max_seq_len, "invalid config: seq (" + std::to_string(seq) + ") exceeds max_seq_len (" +
                                        std::to_string(model.max_seq_len) + ")");
}

const char* activation_name(Activation act) {
  return act == Activation::Relu ? "relu" : act == Activation::Gelu ? "gelu" : "swiglu";
}

const char* norm_name(Norm norm) { return norm == Norm::LayerNorm ? "layernorm" : "rmsnorm"; }

Norm parse_norm(const std::string& name) {
  if (name == "layernorm") return Norm::LayerNorm;
  if (name == "rmsnorm") return Norm::RmsNorm;
  throw InputError("invalid config: unknown norm '" + name + "' (expected layernorm or rmsnorm)");
}

ModelConfig arch_preset(const std::string& name) {
  ModelConfig c;  // the seed workload's block
  if (name == "seed") return c;
  c.norm_first = true;
  c.causal = true;
  if (name == "gpt2") {
    c.activation = Activation::Gelu;
    c.pos_embedding = PosEmbedding::Learned;
    c.tie_embeddings = true;
    c.head_bias = false;
    return c;
  }
  if (name == "llama") {
    c.norm = Norm::RmsNorm;
    c.pos_embedding = PosEmbedding::Rope;
    c.activation = Activation::Swiglu;
    c.bias = false;
    return c;
  }
  throw InputError("invalid config: unknown --arch '" + printable(name) + "' (expected seed, gpt2 or llama)");
}

ModelConfig llama_size_preset(const std::string& size) {
  struct Row {
    const char* name;
    int vocab, d_model, n_layer, n_head, n_kv_head, d_ff, context;
    float rope_theta;
    bool tied;
  };
  // From each model's config.json (vocab_size, hidden_size, num_hidden_layers,
  // num_attention_heads, num_key_value_heads, intermediate_size, max_position_embeddings,
  // rope_theta, tie_word_embeddings) on huggingface.co:
  //   1b  meta-llama/Llama-3.2-1B     3b  meta-llama/Llama-3.2-3B
  //   7b  meta-llama/Llama-2-7b-hf    13b meta-llama/Llama-2-13b-hf
  //   8b  meta-llama/Llama-3.1-8B     70b meta-llama/Llama-3.1-70B
  // (Llama 3.x's rope_scaling, the "llama3" long-context rule, changes no parameter or buffer
  // size, so the memory plan is unaffected; tinytrain does not train with it.)
  static const Row rows[] = {
      {"1b", 128256, 2048, 16, 32, 8, 8192, 131072, 500000.0f, true},
      {"3b", 128256, 3072, 28, 24, 8, 8192, 131072, 500000.0f, true},
      {"7b", 32000, 4096, 32, 32, 32, 11008, 4096, 10000.0f, false},
      {"8b", 128256, 4096, 32, 32, 8, 14336, 131072, 500000.0f, false},
      {"13b", 32000, 5120, 40, 40, 40, 13824, 4096, 10000.0f, false},
      {"70b", 128256, 8192, 80, 64, 8, 28672, 131072, 500000.0f, false},
  };
  for (const Row& r : rows) {
    if (size != r.name) continue;
    ModelConfig c = arch_preset("llama");
    c.vocab_size = r.vocab;
    c.d_model = r.d_model;
    c.n_layer = r.n_layer;
    c.n_head = r.n_head;
    c.n_kv_head = r.n_kv_head;
    c.d_ff = r.d_ff;
    c.max_seq_len = r.context;
    c.rope_theta = r.rope_theta;
    c.tie_embeddings = r.tied;
    c.dropout = 0.0f;  // (Llama trains without dropout)
    return c;
  }
  throw InputError("invalid config: unknown --model-size '" + printable(size) +
                   "' (expected 1b, 3b, 7b, 8b, 13b or 70b)");
}

void apply_block_preset(const ModelConfig& preset, const std::vector<std::string>& given, ModelConfig& model) {
  auto free = [&given](const char* flag) { return std::find(given.begin(), given.end(), flag) == given.end(); };
  if (free("--activation")) model.activation = preset.activation;
  if (free("--norm-first")) model.norm_first = preset.norm_first;
  if (free("--causal")) model.causal = preset.causal;
  if (free("--pos-embedding")) model.pos_embedding = preset.pos_embedding;
  if (free("--norm")) model.norm = preset.norm;
  if (free("--bias")) model.bias = preset.bias;
  if (free("--head-bias")) model.head_bias = preset.head_bias;
  if (free("--tie-embeddings")) model.tie_embeddings = preset.tie_embeddings;
}

const char* pos_embedding_name(PosEmbedding pos) {
  return pos == PosEmbedding::None ? "none" : pos == PosEmbedding::Learned ? "learned" : "rope";
}

const char* recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::None: return "none";
    case Recompute::Ffn: return "ffn";
    case Recompute::Layer: return "layer";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::None;
  if (name == "ffn") return Recompute::Ffn;
  if (name == "layer") return Recompute::Layer;
  throw InputError("invalid config: unknown recompute mode '" + name + "' (expected none, ffn or layer)");
}

const char* backend_choice_name(BackendChoice choice) {
  switch (choice) {
    case BackendChoice::Auto: return "auto";
    case BackendChoice::Cpu: return "cpu";
    case BackendChoice::Cuda: return "cuda";
    case BackendChoice::CudaEmu: return "cuda-emu";
  }
  return "?";
}

BackendChoice parse_backend_choice(const std::string& name) {
  for (BackendChoice choice : {BackendChoice::Auto, BackendChoice::Cpu, BackendChoice::Cuda, BackendChoice::CudaEmu})
    if (name == backend_choice_name(choice)) return choice;
  throw InputError("unknown backend '" + name + "' (expected auto, cpu, cuda or cuda-emu)");
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::FP32: return "fp32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
  }
  return "?";
}

DType activation_dtype(Precision precision) {
  switch (precision) {
    case Precision::FP32: return DType::F32;
    case Precision::BF16: return DType::BF16;
    case Precision::FP16: return DType::F16;
  }
  return DType::F32;
}

LossScalerConfig loss_scaler_for(Precision precision, LossScalerConfig base) {
  base.dynamic = precision == Precision::FP16;
  return base;
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::FP32;
  if (name == "bf16") return Precision::BF16;
  if (name == "fp16") return Precision::FP16;
  throw InputError("invalid config: unknown precision '" + name + "' (expected fp32, bf16 or fp16)");
}

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::Relu;
  if (name == "gelu") return Activation::Gelu;
  if (name == "swiglu") return Activation::Swiglu;
  throw InputError("invalid config: unknown activation '" + name + "' (expected relu, gelu or swiglu)");
}

const char* lr_schedule_name(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::Constant: return "constant";
    case LrScheduleKind::Cosine: return "cosine";
    case LrScheduleKind::Linear: return "linear";
  }
  return "?";
}

LrScheduleKind parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrScheduleKind::Constant;
  if (name == "cosine") return LrScheduleKind::Cosine;
  if (name == "linear") return LrScheduleKind::Linear;
  throw InputError("invalid config: unknown lr schedule '" + printable(name) +
                   "' (expected constant, cosine or linear)");
}

PosEmbedding parse_pos_embedding(const std::string& name) {
  if (name == "none") return PosEmbedding::None;
  if (name == "learned") return PosEmbedding::Learned;
  if (name == "rope") return PosEmbedding::Rope;
  throw InputError("invalid config: unknown pos_embedding '" + name + "' (expected none, learned or rope)");
}

namespace {

using nlohmann::json;

// validate() with `where` in front of its message: which file and which field the config came from.
template <typename Config>
void validate_from(const Config& c, const std::string& where) {
  try {
    c.validate();
  } catch (const InputError& e) {
    throw InputError(where + ": " + e.what());
  }
}

}  // namespace

std::string model_config_to_json(const ModelConfig& c) {
  json j = {{"vocab_size", c.vocab_size},   {"d_model", c.d_model},
            {"n_head", c.n_head},           {"n_layer", c.n_layer},
            {"d_ff", c.d_ff},               {"activation", activation_name(c.activation)},
            {"norm_first", c.norm_first},   {"causal", c.causal},
            {"pos_embedding", pos_embedding_name(c.pos_embedding)},
            {"max_seq_len", c.max_seq_len}, {"layer_norm_eps", c.layer_norm_eps},
            {"dropout", c.dropout}};
  // The Llama-style block's fields, only where they differ from the original family's, so the
  // files of that family keep their bytes (and older readers their files).
  if (c.norm != Norm::LayerNorm) j["norm"] = norm_name(c.norm);
  if (!c.bias) j["bias"] = false;
  if (c.tie_embeddings) j["tie_embeddings"] = true;
  if (c.bias && !c.head_bias) j["head_bias"] = false;
  if (c.pos_embedding == PosEmbedding::Rope) j["rope_theta"] = c.rope_theta;
  if (c.kv_heads() != c.n_head) j["n_kv_head"] = c.n_kv_head;
  return j.dump();
}

ModelConfig model_config_from_json(const std::string& text, const std::string& where) {
  json object = parse_json(text, where);
  // Fields that came later (the Llama-style block's): absent means the original family's value.
  auto has = [&object](const char* key) { return object.is_object() && object.contains(key); };
  const bool has_norm = has("norm"), has_bias = has("bias"), has_tie = has("tie_embeddings"),
             has_head_bias = has("head_bias"),
             has_theta = has("rope_theta"), has_kv = has("n_kv_head");
  JsonFields f(std::move(object), where);
  ModelConfig c;
  c.vocab_size = f.positive_int("vocab_size");
  c.d_model = f.positive_int("d_model");
  c.n_head = f.positive_int("n_head");
  c.n_layer = f.positive_int("n_layer");
  c.d_ff = f.positive_int("d_ff");
  c.activation = parse_activation(f.string("activation"));
  c.norm_first = f.boolean("norm_first");
  c.causal = f.boolean("causal");
  c.pos_embedding = parse_pos_embedding(f.string("pos_embedding"));
  c.max_seq_len = f.positive_int("max_seq_len");
  c.layer_norm_eps = f.number_f32("layer_norm_eps");
  c.dropout = f.number_f32("dropout");
  if (has_norm) c.norm = parse_norm(f.string("norm"));
  if (has_bias) c.bias = f.boolean("bias");
  if (has_tie) c.tie_embeddings = f.boolean("tie_embeddings");
  if (has_head_bias) c.head_bias = f.boolean("head_bias");
  if (has_theta) c.rope_theta = f.number_f32("rope_theta");
  if (has_kv) c.n_kv_head = f.positive_int("n_kv_head");
  f.finish();
  validate_from(c, where);
  return c;
}

std::string adamw_config_to_json(const AdamWConfig& c) {
  json j = {{"lr", c.lr},
            {"beta1", c.beta1},
            {"beta2", c.beta2},
            {"eps", c.eps},
            {"weight_decay", c.weight_decay},
            {"lr_schedule", lr_schedule_name(c.schedule.kind)},
            {"warmup_steps", c.schedule.warmup_steps},
            {"total_steps", c.schedule.total_steps},
            {"min_lr", c.schedule.min_lr},
            {"grad_clip", c.grad_clip}};
  return j.dump();
}

AdamWConfig adamw_config_from_json(const std::string& text, const std::string& where) {
  json object = parse_json(text, where);
  // The schedule and clipping fields came later: files without them (older references and
  // checkpoints) mean a constant lr and no clipping, the defaults.
  auto has = [&object](const char* key) { return object.is_object() && object.contains(key); };
  const bool has_schedule = has("lr_schedule"), has_warmup = has("warmup_steps"), has_total = has("total_steps"),
             has_min_lr = has("min_lr"), has_clip = has("grad_clip");
  JsonFields f(std::move(object), where);
  AdamWConfig c;
  c.lr = f.number("lr");
  c.beta1 = f.number("beta1");
  c.beta2 = f.number("beta2");
  c.eps = f.number("eps");
  c.weight_decay = f.number("weight_decay");
  if (has_schedule) {
    try {
      c.schedule.kind = parse_lr_schedule(f.string("lr_schedule"));
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
  }
  if (has_warmup) c.schedule.warmup_steps = f.integer("warmup_steps", 0, INT32_MAX);
  if (has_total) c.schedule.total_steps = f.integer("total_steps", 0, INT32_MAX);
  if (has_min_lr) c.schedule.min_lr = f.number("min_lr");
  if (has_clip) c.grad_clip = f.number("grad_clip");
  f.finish();
  validate_from(c, where);
  return c;
}

}  // namespace tt
