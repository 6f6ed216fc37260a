// PEFT's LoRA adapter directories both ways, and merging adapters into their base
// (engine/io/peft_adapter.h).
#include "engine/io/peft_adapter.h"

#include <cmath>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "base/checked_input.h"
#include "data/file_io.h"
#include "engine/io/safetensors.h"
#include "engine/param_layout.h"

namespace tt {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* const kPrefix = "base_model.model.";  // PeftModel -> LoraModel -> the wrapped model

void require_llama(const ModelConfig& model, const std::string& what) {
  if (!model.llama_block())
    throw InputError(what + ": PEFT adapters map onto the Llama block (--arch llama) only: PEFT adapts "
                            "transformers' modules, which the GPT-style block's fused in_proj is not");
}

// The flat offset of the frozen weight an adapter at `site` of layer l adapts: the first row of
// the matrix the model multiplies by (the Llama block's q, k, v and gate, up lie side by side).
int64_t site_weight_offset(const ParamLayout& layout, const ModelConfig& model, int l, LoraSite site) {
  const std::string p = (model.llama_block() ? "model.layers." : "encoder.layers.") + std::to_string(l) + ".";
  const bool llama = model.llama_block();
  const char* name = nullptr;
  switch (site) {
    case LoraSite::InProj: name = llama ? "self_attn.q_proj.weight" : "self_attn.in_proj_weight"; break;
    case LoraSite::OutProj: name = llama ? "self_attn.o_proj.weight" : "self_attn.out_proj.weight"; break;
    case LoraSite::Linear1: name = llama ? "mlp.gate_proj.weight" : "linear1.weight"; break;
    case LoraSite::Linear2: name = llama ? "mlp.down_proj.weight" : "linear2.weight"; break;
  }
  return layout.find(p + name).offset;
}

}  // namespace

bool is_peft_adapter_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "adapter_config.json", ec);
}

void write_peft_adapter(const std::string& dir, const ModelConfig& model, const LoraConfig& lora,
                        const std::vector<float>& adapters, const std::string& base_name) {
  require_llama(model, "cannot export to PEFT");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(dir + ": cannot create the directory: " + ec.message());
  json config = {{"peft_type", "LORA"},
                 {"task_type", "CAUSAL_LM"},
                 {"r", lora.rank},
                 {"lora_alpha", lora.alpha},
                 {"lora_dropout", lora.dropout},
                 {"target_modules", json::array()},
                 {"bias", "none"},
                 {"fan_in_fan_out", false},
                 {"use_rslora", false},
                 {"use_dora", false},
                 {"inference_mode", true},
                 {"base_model_name_or_path", base_name}};
  for (const LoraTarget& t : lora_targets(model, lora)) config["target_modules"].push_back(t.name);
  const ParamLayout layout = lora_layout(model, lora);
  std::vector<SafetensorsTensorRef> tensors;
  for (const ParamInfo& p : layout.params())
    tensors.push_back({kPrefix + p.name, DType::F32, p.shape, adapters.data() + p.offset});
  write_safetensors((fs::path(dir) / "adapter_model.safetensors").string(), {{"format", "pt"}}, tensors);
  write_file_atomically((fs::path(dir) / "adapter_config.json").string(), config.dump(2) + "\n");
}

PeftAdapter read_peft_adapter(const std::string& dir, const ModelConfig& model) {
  const std::string config_path = (fs::path(dir) / "adapter_config.json").string();
  require_llama(model, config_path);
  const json c = parse_json(read_regular_file(config_path, 1 << 20), config_path);
  auto fail = [&](const std::string& problem) { return InputError(config_path + ": " + problem); };
  if (!c.is_object()) throw fail("not a JSON object");
  auto field = [&](const char* key) -> const json& {
    if (!c.contains(key)) throw fail(std::string("missing '") + key + "'");
    return c.at(key);
  };
  if (field("peft_type") != "LORA") throw fail("peft_type is " + field("peft_type").dump() + ", not \"LORA\"");
  // PEFT's options that change the math tinytrain runs: each must be off
  auto off = [&](const char* key, const json& expected) {
    if (c.contains(key) && !c.at(key).is_null() && c.at(key) != expected)
      throw fail(std::string("'") + key + "' is " + c.at(key).dump() + ": tinytrain runs plain LoRA (" + key + " " +
                 expected.dump() + ")");
  };
  off("use_rslora", false);
  off("use_dora", false);
  off("fan_in_fan_out", false);
  off("bias", "none");
  off("rank_pattern", json::object());
  off("alpha_pattern", json::object());
  off("modules_to_save", json::array());
  off("layers_to_transform", json::array());
  PeftAdapter out;
  const json& r = field("r");
  const json& alpha = field("lora_alpha");
  const json& dropout = field("lora_dropout");
  if (!r.is_number_integer() || !alpha.is_number() || !dropout.is_number())
    throw fail("r must be an integer, lora_alpha and lora_dropout numbers");
  out.lora.rank = r.get<int>();
  out.lora.alpha = alpha.get<float>();
  out.lora.dropout = dropout.get<float>();
  const json& targets = field("target_modules");
  if (!targets.is_array()) throw fail("target_modules must be a list of module names (a regex is not supported)");
  for (const json& t : targets) {
    if (!t.is_string()) throw fail("target_modules must be a list of module names");
    out.lora.targets.push_back(t.get<std::string>());
  }
  try {
    lora_targets(model, out.lora);  // rank, alpha, dropout in range; every module one the model has
  } catch (const InputError& e) {
    throw fail(e.what());
  }

  const std::string weights_path = (fs::path(dir) / "adapter_model.safetensors").string();
  const SafetensorsFile file = SafetensorsFile::open(weights_path);
  const ParamLayout layout = lora_layout(model, out.lora);
  std::set<std::string> expected;
  out.adapters.resize(static_cast<size_t>(layout.total()));
  for (const ParamInfo& p : layout.params()) {
    const std::string name = kPrefix + p.name;
    file.read(name, DType::F32, p.shape, out.adapters.data() + p.offset);  // missing, dtype, shape: one line
    expected.insert(name);
  }
  for (const std::string& name : file.names())
    if (!expected.count(name))
      throw InputError(weights_path + ": unexpected tensor '" + printable(name) + "' (not an adapter of " +
                       "this config's target_modules on this model)");
  for (const ParamInfo& p : layout.params())
    for (int64_t i = 0; i < p.shape.numel(); ++i)
      if (!std::isfinite(out.adapters[p.offset + i]))
        throw InputError(weights_path + ": tensor '" + kPrefix + p.name + "' element " + std::to_string(i) +
                         " is not finite");
  return out;
}

std::vector<float> merge_lora(const ModelConfig& model, const std::vector<float>& base, const LoraConfig& lora,
                              const std::vector<float>& adapters) {
  const ParamLayout base_layout(model), layout = lora_layout(model, lora);
  std::vector<float> merged = base;
  const float s = lora.scale();
  for (int l = 0; l < model.n_layer; ++l)
    for (const LoraTarget& t : lora_targets(model, lora)) {
      const std::string path = lora_module_path(model, l, t.name);
      const float* A = adapters.data() + layout.find(path + ".lora_A.weight").offset;  // (r, in)
      const float* B = adapters.data() + layout.find(path + ".lora_B.weight").offset;  // (out, r)
      // W's rows [first_out, first_out + out) of the site's (O, in) matrix
      float* W = merged.data() + site_weight_offset(base_layout, model, l, t.site) + t.first_out * t.in;
      for (int64_t o = 0; o < t.out; ++o)
        for (int64_t i = 0; i < t.in; ++i) {
          float ba = 0.0f;
          for (int k = 0; k < lora.rank; ++k) ba += B[o * lora.rank + k] * A[k * t.in + i];
          W[o * t.in + i] += ba * s;
        }
    }
  return merged;
}

}  // namespace tt
