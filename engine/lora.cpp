// LoRA adapters: their modules, layout and initialisation, and their forward and backward
// beside a frozen linear (engine/lora.h).
#include "engine/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "base/checked_input.h"
#include "engine/rng.h"

namespace tt {

namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ",") + name;
  return text;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, ',');) parts.push_back(part);
  return parts;
}

// Every module of one layer, in lora_module_names' order, with where it sits.
std::vector<LoraTarget> all_modules(const ModelConfig& c) {
  const int64_t C = c.d_model, F = c.d_ff, KV = static_cast<int64_t>(c.kv_heads()) * c.head_dim();
  if (c.llama_block())
    return {{"q_proj", LoraSite::InProj, 0, C, C, 0},           {"k_proj", LoraSite::InProj, C, KV, C, 1},
            {"v_proj", LoraSite::InProj, C + KV, KV, C, 2},     {"o_proj", LoraSite::OutProj, 0, C, C, 3},
            {"gate_proj", LoraSite::Linear1, 0, F, C, 4},       {"up_proj", LoraSite::Linear1, F, F, C, 5},
            {"down_proj", LoraSite::Linear2, 0, C, F, 6}};
  return {{"in_proj", LoraSite::InProj, 0, c.qkv_width(), C, 0},
          {"out_proj", LoraSite::OutProj, 0, C, C, 1},
          {"linear1", LoraSite::Linear1, 0, c.ffn_in_width(), C, 2},
          {"linear2", LoraSite::Linear2, 0, C, F, 3}};
}

}  // namespace

std::vector<std::string> lora_module_names(const ModelConfig& model) {
  std::vector<std::string> names;
  for (const LoraTarget& t : all_modules(model)) names.push_back(t.name);
  return names;
}

std::vector<std::string> lora_default_targets(const ModelConfig& model) {
  if (model.llama_block()) return {"q_proj", "v_proj"};
  return {"in_proj"};
}

std::vector<LoraTarget> lora_targets(const ModelConfig& model, const LoraConfig& lora) {
  if (lora.rank < 1)
    throw InputError("invalid config: --lora-rank must be 1 or more, got " + std::to_string(lora.rank));
  if (!(std::isfinite(lora.alpha) && lora.alpha > 0))
    throw InputError("invalid config: --lora-alpha must be a positive number");
  if (!(lora.dropout >= 0.0f && lora.dropout < 1.0f))
    throw InputError("invalid config: --lora-dropout must be in [0, 1)");
  const std::vector<std::string> asked = lora.targets.empty() ? lora_default_targets(model) : lora.targets;
  const std::vector<LoraTarget> modules = all_modules(model);
  for (size_t i = 0; i < asked.size(); ++i) {
    const bool known =
        std::any_of(modules.begin(), modules.end(), [&](const LoraTarget& t) { return t.name == asked[i]; });
    if (!known)
      throw InputError("invalid config: --lora-targets: this model has no module '" + printable(asked[i]) +
                       "' (its modules: " + joined(lora_module_names(model)) + ")");
    if (std::find(asked.begin(), asked.begin() + i, asked[i]) != asked.begin() + i)
      throw InputError("invalid config: --lora-targets names '" + asked[i] + "' twice");
  }
  std::vector<LoraTarget> chosen;
  for (const LoraTarget& t : modules)
    if (std::find(asked.begin(), asked.end(), t.name) != asked.end()) chosen.push_back(t);
  return chosen;
}

std::string lora_targets_text(const ModelConfig& model, const LoraConfig& lora) {
  std::vector<std::string> names;
  for (const LoraTarget& t : lora_targets(model, lora)) names.push_back(t.name);
  return joined(names);
}

std::string lora_module_path(const ModelConfig& model, int layer, const std::string& module) {
  const std::string l = std::to_string(layer);
  if (model.llama_block()) {
    const bool attention = module == "q_proj" || module == "k_proj" || module == "v_proj" || module == "o_proj";
    return "model.layers." + l + (attention ? ".self_attn." : ".mlp.") + module;
  }
  const bool attention = module == "in_proj" || module == "out_proj";
  return "encoder.layers." + l + (attention ? ".self_attn." : ".") + module;
}

ParamLayout lora_layout(const ModelConfig& model, const LoraConfig& lora) {
  ParamLayout layout;
  const std::vector<LoraTarget> targets = lora_targets(model, lora);
  for (int l = 0; l < model.n_layer; ++l)
    for (const LoraTarget& t : targets) {
      const std::string path = lora_module_path(model, l, t.name);
      layout.add(path + ".lora_A.weight", {lora.rank, t.in});
      layout.add(path + ".lora_B.weight", {t.out, lora.rank});
    }
  return layout;
}

// PEFT's reset_lora_parameters: nn.init.kaiming_uniform_(lora_A.weight, a=math.sqrt(5)), whose
// bound is gain * sqrt(3 / fan_in) with gain = sqrt(2 / (1 + a^2)) = sqrt(1/3): 1/sqrt(fan_in)
// (the default nn.Linear init); nn.init.zeros_(lora_B.weight).
std::vector<float> lora_init(const ParamLayout& adapters, uint64_t seed) {
  std::vector<float> host(adapters.total(), 0.0f);
  uint32_t id = 0x10A0;  // the Init stream's ids past the model's own (their names' hashes differ)
  for (const ParamInfo& p : adapters.params()) {
    ++id;
    if (p.name.find(".lora_A.") == std::string::npos) continue;  // B: zeros
    const float bound = 1.0f / std::sqrt(static_cast<float>(p.shape[1]));
    float* dst = host.data() + p.offset;
    for (int64_t i = 0; i < p.shape.numel(); ++i)
      dst[i] = (2.0f * rng_uniform(seed, RngStream::Init, id, static_cast<uint64_t>(i)) - 1.0f) * bound;
  }
  return host;
}

bool is_quantised_base_weight(const std::string& name) {
  if (name.find(".layers.") == std::string::npos) return false;  // embedding, head, final norm
  for (const char* linear : {"_proj.weight", "in_proj_weight", "linear1.weight", "linear2.weight"}) {
    const size_t n = std::strlen(linear);
    if (name.size() >= n && name.compare(name.size() - n, n, linear) == 0) return true;
  }
  return false;
}

std::string lora_config_to_json(const LoraConfig& lora) {
  nlohmann::json j;
  j["rank"] = lora.rank;
  j["alpha"] = lora.alpha;
  j["dropout"] = lora.dropout;
  j["targets"] = joined(lora.targets);
  if (lora.nf4_base) j["base_quant"] = "nf4";  // (absent: the base in the working dtype)
  return j.dump();
}

LoraConfig lora_config_from_json(const std::string& json, const std::string& where) {
  nlohmann::json object = parse_json(json, where);
  const bool quantised = object.is_object() && object.contains("base_quant");
  JsonFields f(std::move(object), where);
  LoraConfig lora;
  lora.rank = f.positive_int("rank");
  lora.alpha = f.number_f32("alpha");
  lora.dropout = f.number_f32("dropout");
  if (quantised) {
    if (f.string("base_quant") != "nf4") throw InputError(where + ": base_quant must be \"nf4\"");
    lora.nf4_base = true;
  }
  const std::string targets = f.string("targets");
  lora.targets = targets.empty() ? std::vector<std::string>{} : split_commas(targets);
  f.finish();
  return lora;
}

void LoraAdapters::plan_activations(ArenaPlan& plan, const ModelConfig& model, const LoraConfig& lora, int B, int T,
                                    DType act) {
  const int64_t N = static_cast<int64_t>(B) * T;
  int64_t widest_out = 0, widest_in = 0;
  const std::vector<LoraTarget> targets = lora_targets(model, lora);
  for (int l = 0; l < model.n_layer; ++l)
    for (const LoraTarget& t : targets)
      plan.add("layers." + std::to_string(l) + ".lora." + t.name + ".u", act, {N, lora.rank});
  for (const LoraTarget& t : targets) {
    widest_out = std::max(widest_out, t.out);
    widest_in = std::max(widest_in, t.in);
  }
  plan.add("lora.delta", act, {N, widest_out});
  plan.add("lora.du", act, {N, lora.rank});
  if (lora.dropout > 0) plan.add("lora.dropped", act, {N, widest_in});
}

LoraAdapters::LoraAdapters(Backend& backend, const ModelConfig& model, const LoraConfig& lora, int B, int T,
                           DType act, void* working, void* grads, const Arena& activations)
    : backend_(backend), lora_(lora), B_(B), T_(T) {
  const ParamLayout layout = lora_layout(model, lora);
  const std::vector<LoraTarget> targets = lora_targets(model, lora);
  for (int l = 0; l < model.n_layer; ++l) {
    std::vector<Adapter> adapters;
    for (const LoraTarget& t : targets) {
      const std::string path = lora_module_path(model, l, t.name);
      const ParamInfo& a = layout.find(path + ".lora_A.weight");
      const ParamInfo& b = layout.find(path + ".lora_B.weight");
      const Tensor u = activations.get("layers." + std::to_string(l) + ".lora." + t.name + ".u");
      adapters.push_back({t, layout.view(working, a, act), layout.view(working, b, act), layout.view(grads, a),
                          layout.view(grads, b), u});
    }
    first_grad_.push_back(layout.find(lora_module_path(model, l, targets.front().name) + ".lora_A.weight").offset);
    layers_.push_back(std::move(adapters));
  }
  delta_ = activations.get("lora.delta");
  du_ = activations.get("lora.du");
  if (lora.dropout > 0) dropped_ = activations.get("lora.dropped");
}

int64_t LoraAdapters::first_grad_of_layer(int l) const { return first_grad_[l]; }

// One mask per adapter and layer, over its input (N, in): a micro-batch starting at sequence
// first_row starts that many sequences in, as the model's own masks do.
DropoutMask LoraAdapters::input_dropout(const DropoutContext& ctx, int layer, const LoraTarget& t) const {
  const auto site = static_cast<DropoutSite>(static_cast<uint32_t>(DropoutSite::LoraInput) + t.index);
  const uint64_t per_sequence = static_cast<uint64_t>(T_) * t.in;
  return DropoutMask{ctx.training ? lora_.dropout : 0.0f, ctx.seed, ctx.step, static_cast<uint32_t>(layer), site,
                     ctx.first_row * per_sequence};
}

// A view of the first rows x cols of a scratch buffer.
static Tensor rows_of(Tensor scratch, int64_t rows, int64_t cols) {
  return Tensor{scratch.data, scratch.dtype, Shape{rows, cols}};
}

void LoraAdapters::forward(int layer, LoraSite site, Tensor x, Tensor out, const DropoutContext& ctx) {
  const int64_t N = x.shape[0];
  for (const Adapter& ad : layers_[layer]) {
    if (ad.target.site != site) continue;
    Tensor dropped = x;  // drop(x) (N, in): x itself without dropout
    if (lora_.dropout > 0) {
      dropped = rows_of(dropped_, N, ad.target.in);
      backend_.dropout_forward(dropped, x, input_dropout(ctx, layer, ad.target));
    }
    const Tensor none{nullptr, x.dtype, {}};
    const Tensor delta = rows_of(delta_, N, ad.target.out);
    backend_.linear_forward(ad.u, dropped, ad.a, none);   // u (N,r) = drop(x) A^T
    backend_.linear_forward(delta, ad.u, ad.b, none);     // delta (N,out) = u B^T
    backend_.add_scaled_columns(out, ad.target.first_out, delta, lora_.scale());  // out window += s delta
  }
}

// With d = s dout_window: dB = d^T u, du = d B, dA = du^T drop(x), dx += drop'(du A).
void LoraAdapters::backward(int layer, LoraSite site, Tensor dout, Tensor x, Tensor dx, const DropoutContext& ctx,
                            ParamGrads grads) {
  const int64_t N = x.shape[0];
  const Tensor none{nullptr, x.dtype, {}};
  for (const Adapter& ad : layers_[layer]) {
    if (ad.target.site != site) continue;
    const Tensor d = rows_of(delta_, N, ad.target.out);
    backend_.copy_scaled_columns(d, dout, ad.target.first_out, lora_.scale());
    backend_.linear_backward(du_, ad.db, none, d, ad.u, ad.b, grads, InputGrad::Write);
    if (lora_.dropout == 0) {  // dA from x itself; its input gradient added to dx in the same op
      backend_.linear_backward(dx, ad.da, none, du_, x, ad.a, grads, InputGrad::Add);
      continue;
    }
    // drop(x) again (the same mask), dA from it; then the buffer takes du A, dropped the same way
    const DropoutMask mask = input_dropout(ctx, layer, ad.target);
    const Tensor dropped = rows_of(dropped_, N, ad.target.in);
    backend_.dropout_forward(dropped, x, mask);
    backend_.linear_backward(none, ad.da, none, du_, dropped, ad.a, grads, InputGrad::Write);
    backend_.linear_backward(dropped, Tensor{nullptr, DType::F32, {}}, none, du_, x, ad.a, grads, InputGrad::Write);
    backend_.dropout_backward(dropped, dropped, mask);
    backend_.residual_forward(dx, dx, dropped);
  }
}

}  // namespace tt
