// Opening and checking a PyTorch reference (see reference.h).
#include "engine/io/reference.h"

#include <climits>
#include <utility>

#include "base/checked_input.h"
#include "engine/param_layout.h"

namespace tt {

Reference Reference::open(const std::string& path) { return check(SafetensorsFile::open(path)); }

Reference Reference::check(SafetensorsFile file) {
  const std::string& path = file.path();
  auto metadata_where = [&](const std::string& key) { return path + ": metadata '" + key + "'"; };

  // --- 1. the metadata
  const std::string& format = file.metadata_value("format");
  if (format != "tinytrain-reference")
    throw InputError(path + ": metadata 'format' is '" + printable(format) + "', expected 'tinytrain-reference'");
  const std::string& version = file.metadata_value("version");
  if (version != "1") throw InputError(path + ": unsupported reference version '" + printable(version) + "'");
  const ModelConfig config = model_config_from_json(file.metadata_value("config"), metadata_where("config"));
  const AdamWConfig optimizer =
      adamw_config_from_json(file.metadata_value("optimizer"), metadata_where("optimizer"));
  RunConfig run;
  for (auto [key, count] : {std::pair<const char*, int*>{"batch", &run.batch}, {"seq", &run.seq}, {"steps", &run.steps}})
    *count = static_cast<int>(parse_integer(file.metadata_value(key), 1, INT_MAX, metadata_where(key)));
  try {
    run.validate(config);
  } catch (const InputError& e) {
    throw InputError(path + ": " + e.what());
  }
  if (config.dropout != 0.0f)
    throw InputError(path + ": reference has dropout " + std::to_string(config.dropout) +
                     "; verify needs dropout 0 (PyTorch's dropout masks cannot be reproduced)");

  // --- 2. the parameter count against the file's size, before ParamLayout lists the
  // parameters (its size grows with n_layer): a config claiming a million layers in a small
  // file stops here.
  const double params = config.parameter_count(), needed = 4 * params * sizeof(float);
  if (needed > static_cast<double>(file.size()))
    throw InputError(path + ": metadata 'config' describes a model of " + std::to_string(static_cast<int64_t>(params)) +
                     " parameters, whose 4 copies in F32 (params., grads., step1., final.) need " +
                     std::to_string(static_cast<int64_t>(needed)) + " bytes; the file has " +
                     std::to_string(file.size()));

  // --- 3. every tensor's dtype and shape
  const ParamLayout layout(config);
  for (const char* prefix : {"params.", "grads.", "step1.", "final."})
    for (const ParamInfo& p : layout.params()) file.check(prefix + p.name, DType::F32, p.shape);
  const int B = run.batch, T = run.seq, S = run.steps, V = config.vocab_size;
  file.check("x", DType::I32, {S, B, T});
  file.check("y", DType::I32, {S, B, T});
  file.check("logits0", DType::F32, {B, T, V});
  file.check("loss", DType::F32, {S});
  if (file.contains("grad_norm")) file.check("grad_norm", DType::F32, {S});  // optional (newer references)
  return Reference{std::move(file), config, optimizer, run};
}

}  // namespace tt
