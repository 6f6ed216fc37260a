// Hugging Face model directories' tensors <-> the flat parameter buffer (engine/io/hf_weights.h).
#include "engine/io/hf_weights.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include <nlohmann/json.hpp>

#include "base/checked_input.h"
#include "data/file_io.h"
#include "engine/io/safetensors.h"
#include "kernels/common/half.h"

namespace tt {

namespace {

constexpr uint64_t kMaxIndexBytes = 64ull << 20;  // an index lists names: megabytes at most

// "encoder.layers.3.linear1.weight" -> layer 3, rest "linear1.weight"; false for other names.
bool split_layer(const std::string& name, int& layer, std::string& rest) {
  const std::string prefix = "encoder.layers.";
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t dot = name.find('.', prefix.size());
  layer = std::stoi(name.substr(prefix.size(), dot - prefix.size()));
  rest = name.substr(dot + 1);
  return true;
}

// GPT-2's name for one of our parameters (the table in the header), and whether it is a Conv1D
// weight, stored transposed.
HfTensor gpt2_tensor(const ParamInfo& p) {
  static const std::map<std::string, std::pair<std::string, bool>> in_layer = {
      {"norm1.weight", {"ln_1.weight", false}},
      {"norm1.bias", {"ln_1.bias", false}},
      {"self_attn.in_proj_weight", {"attn.c_attn.weight", true}},
      {"self_attn.in_proj_bias", {"attn.c_attn.bias", false}},
      {"self_attn.out_proj.weight", {"attn.c_proj.weight", true}},
      {"self_attn.out_proj.bias", {"attn.c_proj.bias", false}},
      {"norm2.weight", {"ln_2.weight", false}},
      {"norm2.bias", {"ln_2.bias", false}},
      {"linear1.weight", {"mlp.c_fc.weight", true}},
      {"linear1.bias", {"mlp.c_fc.bias", false}},
      {"linear2.weight", {"mlp.c_proj.weight", true}},
      {"linear2.bias", {"mlp.c_proj.bias", false}}};
  static const std::map<std::string, std::string> outside = {{"embed.weight", "transformer.wte.weight"},
                                                             {"pos_embed.weight", "transformer.wpe.weight"},
                                                             {"encoder.norm.weight", "transformer.ln_f.weight"},
                                                             {"encoder.norm.bias", "transformer.ln_f.bias"},
                                                             {"lm_head.weight", "lm_head.weight"}};
  HfTensor t{p.name, "", p.shape, false};
  int layer = 0;
  std::string rest;
  if (split_layer(p.name, layer, rest)) {
    const auto& [hf, transposed] = in_layer.at(rest);
    t.hf = "transformer.h." + std::to_string(layer) + "." + hf;
    t.transposed = transposed;
    if (transposed) t.hf_shape = Shape{p.shape[1], p.shape[0]};
  } else {
    t.hf = outside.at(p.name);
  }
  return t;
}

// Where each tensor of a directory is: its file (opened once) for each name.
struct WeightFiles {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsFile*> by_tensor;
};

// The shards an index names: {"weight_map": {tensor: file, ...}} with plain file names in dir.
WeightFiles open_sharded(const std::string& dir, const std::string& index_path) {
  const nlohmann::json index = parse_json(read_regular_file(index_path, kMaxIndexBytes), index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object())
    throw InputError(index_path + ": no \"weight_map\" object (tensor name -> shard file)");
  WeightFiles out;
  std::map<std::string, const SafetensorsFile*> opened;
  for (const auto& [tensor, file] : index.at("weight_map").items()) {
    if (!file.is_string())
      throw InputError(index_path + ": weight_map['" + printable(tensor) + "'] is not a file name");
    const std::string name = file.get<std::string>();
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
      throw InputError(index_path + ": weight_map['" + printable(tensor) + "'] names '" + printable(name) +
                       "', not a file of this directory");
    auto it = opened.find(name);
    if (it == opened.end()) {
      const std::string path = dir + "/" + name;
      std::error_code ec;
      if (!std::filesystem::is_regular_file(path, ec))
        throw InputError(index_path + ": names the shard '" + printable(name) + "', which is missing from " + dir);
      out.files.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(path)));
      it = opened.emplace(name, out.files.back().get()).first;
    }
    if (!it->second->contains(tensor))
      throw InputError(index_path + ": puts '" + printable(tensor) + "' in " + printable(name) + ", which lacks it");
    out.by_tensor[tensor] = it->second;
  }
  // every tensor of every shard must be in the index (else it would be silently ignored)
  for (const auto& file : out.files)
    for (const std::string& tensor : file->names())
      if (out.by_tensor.at(tensor) != file.get())
        throw InputError(file->path() + ": holds '" + printable(tensor) + "', which the index puts in another shard");
  return out;
}

WeightFiles open_weights(const std::string& dir) {
  std::error_code ec;
  const std::string index = dir + "/model.safetensors.index.json", single = dir + "/model.safetensors";
  if (std::filesystem::is_regular_file(index, ec)) return open_sharded(dir, index);
  if (!std::filesystem::is_regular_file(single, ec))
    throw InputError(dir + ": no model.safetensors or model.safetensors.index.json (tinytrain reads the safetensors "
                           "format; save_pretrained writes it by default)");
  WeightFiles out;
  out.files.push_back(std::make_unique<SafetensorsFile>(SafetensorsFile::open(single)));
  for (const std::string& tensor : out.files.back()->names()) out.by_tensor[tensor] = out.files.back().get();
  return out;
}

// A tensor's values widened to fp32, in the file's (Hugging Face's) layout.
std::vector<float> read_as_f32(const SafetensorsFile& file, const HfTensor& t) {
  const SafetensorsEntry& e = file.entry(t.hf);
  const int64_t n = t.hf_shape.numel();
  std::vector<float> values(static_cast<size_t>(n));
  if (e.dtype == "F32") {
    file.read(t.hf, DType::F32, t.hf_shape, values.data());
  } else if (e.dtype == "BF16" || e.dtype == "F16") {
    std::vector<uint16_t> bits(static_cast<size_t>(n));
    const bool bf = e.dtype == "BF16";
    file.read(t.hf, bf ? DType::BF16 : DType::F16, t.hf_shape, bits.data());
    for (int64_t i = 0; i < n; ++i) values[i] = bf ? to_float(bf16{bits[i]}) : to_float(f16{bits[i]});
  } else {
    throw InputError(file.path() + ": tensor '" + t.hf + "' has dtype " + e.dtype + ", expected F32, BF16 or F16");
  }
  return values;
}

// GPT-2 files from before transformers kept the causal mask as buffers: not parameters.
bool is_mask_buffer(const std::string& name) {
  const auto ends = [&name](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return name.rfind("transformer.h.", 0) == 0 && (ends(".attn.bias") || ends(".attn.masked_bias"));
}

}  // namespace

std::vector<HfTensor> hf_tensors(const ModelConfig& config, HfArchitecture arch) {
  std::vector<HfTensor> out;
  const ParamLayout layout(config);
  for (const ParamInfo& p : layout.params())
    out.push_back(arch == HfArchitecture::Llama ? HfTensor{p.name, p.name, p.shape, false} : gpt2_tensor(p));
  return out;
}

std::vector<float> read_hf_params(const std::string& dir, const HfConfig& config) {
  const WeightFiles weights = open_weights(dir);
  const ParamLayout layout(config.model);
  const std::vector<HfTensor> tensors = hf_tensors(config.model, config.arch);
  std::vector<float> params(static_cast<size_t>(layout.total()));
  std::set<std::string> expected;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const HfTensor& t = tensors[k];
    const ParamInfo& p = layout.params()[k];
    const auto found = weights.by_tensor.find(t.hf);
    if (found == weights.by_tensor.end())
      throw InputError(dir + ": missing tensor '" + t.hf + "' (" + hf_class_name(config.arch) + " of this config.json " +
                       "has it)");
    const SafetensorsFile& file = *found->second;
    if (file.entry(t.hf).shape != t.hf_shape)
      throw InputError(file.path() + ": tensor '" + t.hf + "' has shape " + file.entry(t.hf).shape.str() +
                       ", config.json makes it " + t.hf_shape.str());
    const std::vector<float> values = read_as_f32(file, t);
    float* dst = params.data() + p.offset;
    if (t.transposed) {  // (in, out) -> (out, in)
      const int64_t in = t.hf_shape[0], outs = t.hf_shape[1];
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < outs; ++o) dst[o * in + i] = values[i * outs + o];
    } else {
      std::memcpy(dst, values.data(), values.size() * sizeof(float));
    }
    for (int64_t i = 0; i < p.shape.numel(); ++i)
      if (!std::isfinite(dst[i]))
        throw InputError(file.path() + ": tensor '" + t.hf + "' holds a non-finite value: parameters must be finite");
    expected.insert(t.hf);
  }
  for (const auto& [name, file] : weights.by_tensor) {
    if (expected.count(name) || is_mask_buffer(name)) continue;
    throw InputError(file->path() + ": unexpected tensor '" + printable(name) + "' (not a parameter of the " +
                     hf_class_name(config.arch) + " config.json describes" +
                     (name == "lm_head.weight" ? ", whose head is tied to the embedding)" : ")"));
  }
  return params;
}

void write_hf_model(const std::string& dir, const ModelConfig& config, HfArchitecture arch,
                    const std::vector<float>& params, int end_of_text) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw InputError(dir + ": cannot create the directory: " + ec.message());
  const ParamLayout layout(config);
  const std::vector<HfTensor> tensors = hf_tensors(config, arch);
  std::vector<std::vector<float>> transposed;  // GPT-2's Conv1D weights, (in, out)
  transposed.reserve(tensors.size());
  std::vector<SafetensorsTensorRef> refs;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const HfTensor& t = tensors[k];
    const float* src = params.data() + layout.params()[k].offset;
    if (t.transposed) {
      const int64_t in = t.hf_shape[0], outs = t.hf_shape[1];
      std::vector<float> stored(static_cast<size_t>(in * outs));
      for (int64_t o = 0; o < outs; ++o)
        for (int64_t i = 0; i < in; ++i) stored[i * outs + o] = src[o * in + i];
      transposed.push_back(std::move(stored));
      src = transposed.back().data();
    }
    refs.push_back({t.hf, DType::F32, t.hf_shape, src});
  }
  // "format": "pt" is what transformers asks of a safetensors file before loading it
  write_safetensors(dir + "/model.safetensors", {{"format", "pt"}}, refs);
  write_file_atomically(dir + "/config.json", hf_config_json(config, arch, end_of_text));
  write_file_atomically(dir + "/generation_config.json", hf_generation_config_json(end_of_text));
}

}  // namespace tt
