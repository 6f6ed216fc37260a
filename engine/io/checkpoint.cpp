// Checkpoints: saving the training state (rank 0 writes, atomically), and loading it back after
// checking every field of the file against the run (docs/hostile-input.md: a checkpoint is a
// file from outside like any other).
#include "engine/io/checkpoint.h"

#include <fcntl.h>   // open
#include <unistd.h>  // fsync, close, getpid

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/checked_input.h"
#include "engine/io/checksum.h"
#include "engine/io/safetensors.h"

namespace tt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormat = "tinytrain-checkpoint";
constexpr const char* kVersion = "1";

// One tensor of the file and where its values live in a TrainingState: the same list serves
// the writer (what to write, in this order) and the reader (what must be there, and where it goes).
struct Slot {
  std::string name;
  DType dtype;
  Shape shape;
  void* data;
};

std::vector<Slot> slots(const ParamLayout& layout, TrainingState& s) {
  std::vector<Slot> out;
  for (const ParamInfo& p : layout.params()) out.push_back({p.name, DType::F32, p.shape, s.params.data() + p.offset});
  for (const ParamInfo& p : layout.params())
    out.push_back({"optimizer.exp_avg." + p.name, DType::F32, p.shape, s.exp_avg.data() + p.offset});
  for (const ParamInfo& p : layout.params())
    out.push_back({"optimizer.exp_avg_sq." + p.name, DType::F32, p.shape, s.exp_avg_sq.data() + p.offset});
  out.push_back({"state.adamw_step", DType::I32, Shape{1}, &s.adamw_step});
  out.push_back({"state.loss_scale", DType::F32, Shape{1}, &s.loss_scale});
  out.push_back({"state.growth_tracker", DType::I32, Shape{1}, &s.growth_tracker});
  out.push_back({"state.skipped_steps", DType::I32, Shape{1}, &s.skipped_steps});
  out.push_back({"state.first_skipped_step", DType::I32, Shape{1}, &s.first_skipped_step});
  return out;
}

size_t slot_bytes(const Slot& s) { return static_cast<size_t>(s.shape.numel()) * dtype_size(s.dtype); }

// The checksum of a checkpoint: every metadata entry but "checksum" (key and value, in key
// order, each ended by a 0 byte), then every tensor's bytes in file order. With the metadata
// in it, a changed setting the loader does not compare (loss scaling in an fp32 run) is caught
// too, so any byte changed in the file is refused.
std::string checksum_of(const std::map<std::string, std::string>& metadata, const std::vector<Slot>& all) {
  Checksum sum;
  const char end = '\0';
  for (const auto& [key, value] : metadata) {
    if (key == "checksum") continue;
    sum.add(key.data(), key.size());
    sum.add(&end, 1);
    sum.add(value.data(), value.size());
    sum.add(&end, 1);
  }
  for (const Slot& s : all) sum.add(s.data, slot_bytes(s));
  return sum.hex();
}

// The metadata entries that are JSON objects, built the same way for the run and for what a
// file says, so that the two compare field by field.
json run_json(int64_t seed, int batch, int seq) { return {{"seed", seed}, {"batch", batch}, {"seq", seq}}; }

json loss_scaler_json(float init_scale, float growth_factor, float backoff_factor, int growth_interval) {
  return {{"init_scale", init_scale},
          {"growth_factor", growth_factor},
          {"backoff_factor", backoff_factor},
          {"growth_interval", growth_interval}};
}

// Two different values as text: strings as they are (printable), numbers with just enough
// significant digits to tell them apart (1e-05 against 1e-06, not 9.99999974737875e-06).
std::pair<std::string, std::string> shown(const json& a, const json& b) {
  if (a.is_string() && b.is_string()) return {printable(a.get<std::string>()), printable(b.get<std::string>())};
  if (a.is_number_float() && b.is_number_float()) {
    char ta[32], tb[32];
    for (int digits = 6; digits <= 17; ++digits) {
      std::snprintf(ta, sizeof ta, "%.*g", digits, a.get<double>());
      std::snprintf(tb, sizeof tb, "%.*g", digits, b.get<double>());
      if (std::strcmp(ta, tb) != 0) break;
    }
    return {ta, tb};
  }
  return {a.dump(), b.dump()};
}

// "checkpoint DIR/ckpt_00000050.safetensors was saved with d_model 128, this run has 64"
void require_same(const std::string& path, const std::string& field, const json& saved, const json& run) {
  if (saved == run) return;
  const auto [s, r] = shown(saved, run);
  throw InputError("checkpoint " + path + " was saved with " + field + " " + s + ", this run has " + r);
}

// Field by field, in the order of the run's JSON (our own writers'), then the fields only the
// checkpoint has. A field one side lacks is one a writer leaves out at its default (the
// Llama-style block's, engine/config.cpp), and the message says so.
void require_same_fields(const std::string& path, const std::string& prefix, const json& saved, const json& run) {
  auto differs = [&](const std::string& key, const std::string& saved_text, const std::string& run_text) {
    return InputError("checkpoint " + path + " was saved with " + prefix + key + " " + saved_text + ", this run has " +
                      run_text);
  };
  for (const auto& [key, value] : run.items()) {
    if (!saved.contains(key)) throw differs(key, "at its default", shown(value, value).second);
    require_same(path, prefix + key, saved.at(key), value);
  }
  for (const auto& [key, value] : saved.items())
    if (!run.contains(key)) throw differs(key, shown(value, value).first, "it at its default");
}

// Throws InputError "<path>: <problem>" at the first element of `values` (a parameter-shaped
// group of the file, named by `group`) that `bad` refuses.
template <typename Bad>
void check_elements(const std::string& path, const ParamLayout& layout, const std::string& group,
                    const std::vector<float>& values, const char* rule, Bad bad) {
  for (const ParamInfo& p : layout.params())
    for (int64_t i = 0; i < p.shape.numel(); ++i)
      if (bad(values[p.offset + i]))
        throw InputError(path + ": tensor '" + group + p.name + "' element " + std::to_string(i) + " is " +
                         std::to_string(values[p.offset + i]) + ": " + rule);
}

// The ranges of the state's values, and their consistency with the step: every step either
// updated the parameters (AdamW counted it) or was skipped (the scaler counted it).
void check_values(const std::string& path, const ParamLayout& layout, const TrainingState& s, int step,
                  const LossScalerConfig& scaler) {
  auto not_finite = [](float v) { return !std::isfinite(v); };
  check_elements(path, layout, "", s.params, "parameters must be finite", not_finite);
  check_elements(path, layout, "optimizer.exp_avg.", s.exp_avg, "AdamW's first moment must be finite", not_finite);
  check_elements(path, layout, "optimizer.exp_avg_sq.", s.exp_avg_sq,
                 "AdamW's second moment must be finite and not negative",
                 [](float v) { return !(std::isfinite(v) && v >= 0.0f); });
  auto fail = [&](const std::string& problem) { return InputError(path + ": " + problem); };
  if (s.adamw_step < 0 || s.skipped_steps < 0 ||
      static_cast<int64_t>(s.adamw_step) + s.skipped_steps != static_cast<int64_t>(step))
    throw fail("state.adamw_step (" + std::to_string(s.adamw_step) + ") and state.skipped_steps (" +
               std::to_string(s.skipped_steps) + ") must add up to the step (" + std::to_string(step) + ")");
  const bool first_ok =
      s.skipped_steps == 0 ? s.first_skipped_step == -1 : s.first_skipped_step >= 0 && s.first_skipped_step < step;
  if (!first_ok)
    throw fail("state.first_skipped_step " + std::to_string(s.first_skipped_step) + " does not fit " +
               std::to_string(s.skipped_steps) + " skipped steps before step " + std::to_string(step));
  if (scaler.dynamic ? !(std::isfinite(s.loss_scale) && s.loss_scale > 0.0f) : s.loss_scale != 1.0f)
    throw fail("state.loss_scale " + std::to_string(s.loss_scale) + " must be " +
               (scaler.dynamic ? "positive and finite" : "1 without dynamic loss scaling"));
  const int32_t tracker_end = scaler.dynamic ? scaler.growth_interval : 1;
  if (s.growth_tracker < 0 || s.growth_tracker >= tracker_end)
    throw fail("state.growth_tracker " + std::to_string(s.growth_tracker) + " must be in [0, " +
               std::to_string(tracker_end) + ")");
}

// Flushes a directory's entries (a rename into it) to disk.
void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const bool ok = fd >= 0 && fsync(fd) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok) throw InputError(dir + ": cannot flush the directory to disk: " + std::strerror(err));
}

// The file appears whole or not at all. write_safetensors writes a temporary file of its own
// and renames it when complete; writing to a name of this process first (<path>.tmp.<pid>)
// keeps two processes saving the same path apart, and the last rename puts the finished file
// in place at once. The directory is then flushed so that the rename itself survives a power
// loss. A kill at any moment leaves the previous file at `path` (or none) and maybe a
// temporary file, which list_checkpoints never counts.
void write_atomically(const std::string& path, const std::map<std::string, std::string>& metadata,
                      const std::vector<SafetensorsTensorRef>& tensors) {
  const fs::path target(path);
  const std::string dir = target.parent_path().empty() ? "." : target.parent_path().string();
  create_checkpoint_dir(dir);
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  write_safetensors(tmp, metadata, tensors);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw InputError(path + ": cannot write: " + std::strerror(err));
  }
  sync_directory(dir);
}

// "ckpt_00000050.safetensors" -> 50; -1 for any other name.
int step_of_name(const std::string& name) {
  const std::string prefix = "ckpt_", suffix = ".safetensors";
  if (name.size() < prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() < 8 || digits.size() > 10 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  const long long step = std::stoll(digits);
  return step <= INT_MAX ? static_cast<int>(step) : -1;
}

// What every reader of a checkpoint checks before it trusts anything in it: a tinytrain
// checkpoint of our version; the tensors of the model the file describes, exactly these, with
// their dtypes and shapes (so the file holds every byte allocated here); the checksum; the step.
struct CheckedCheckpoint {
  ModelConfig model;
  LoraConfig lora;  // rank 0: the file holds the model's parameters; else its LoRA adapters
  ParamLayout layout;  // of what the file holds: ParamLayout(model) or lora_layout(model, lora)
  TrainingState state;
  int step = 0;
};

CheckedCheckpoint read_checked(const std::string& path, const SafetensorsFile& file) {
  auto fail = [&](const std::string& problem) { return InputError(path + ": " + problem); };
  auto meta = [&](const std::string& key) -> const std::string& { return file.metadata_value(key); };
  auto where = [&](const std::string& key) { return path + ": metadata '" + key + "'"; };

  // --- what the file is
  if (meta("format") != kFormat)
    throw fail("not a tinytrain checkpoint: metadata 'format' is '" + printable(meta("format")) + "', not '" +
               kFormat + "'");
  if (meta("version") != kVersion)
    throw fail("checkpoint version '" + printable(meta("version")) + "' is not supported (this build reads " +
               kVersion + ")");

  // --- whole and uncorrupted. Only then may a caller compare its settings with a run's: a
  // corrupted digit in the config is reported as corruption, not as a setting of another run.
  CheckedCheckpoint c;
  c.model = model_config_from_json(meta("config"), where("config"));
  if (file.metadata().count("lora")) c.lora = lora_config_from_json(meta("lora"), where("lora"));
  c.layout = c.lora.enabled() ? lora_layout(c.model, c.lora) : ParamLayout(c.model);
  const ParamLayout& layout = c.layout;
  const size_t P = static_cast<size_t>(layout.total());
  c.state.params.resize(P);
  c.state.exp_avg.resize(P);
  c.state.exp_avg_sq.resize(P);
  const std::vector<Slot> all = slots(layout, c.state);
  std::set<std::string> expected;
  for (const Slot& s : all) {
    file.check(s.name, s.dtype, s.shape);
    expected.insert(s.name);
  }
  for (const std::string& name : file.names())
    if (!expected.count(name)) throw fail("unexpected tensor '" + printable(name) + "' (not part of a checkpoint)");
  for (const Slot& s : all) file.read(s.name, s.dtype, s.shape, s.data);
  const std::string& checksum = meta("checksum");
  if (checksum != checksum_of(file.metadata(), all))
    throw fail("the file does not match its checksum " + printable(checksum) + " (corrupted?)");
  c.step = static_cast<int>(parse_integer(meta("step"), 0, INT_MAX, where("step")));
  return c;
}

}  // namespace

void create_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError(dir + ": cannot create the checkpoint directory: " + ec.message());
}

std::string checkpoint_path(const std::string& dir, int step) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt_%08d.safetensors", step);
  return (fs::path(dir) / name).string();
}

std::vector<CheckpointFile> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointFile> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int step = step_of_name(it->path().filename().string());
    std::error_code gone;  // (an entry deleted meanwhile is simply not a checkpoint)
    if (step >= 0 && it->is_regular_file(gone)) found.push_back({step, it->path().string()});
  }
  if (ec) throw InputError(dir + ": cannot list the checkpoints: " + ec.message());
  std::sort(found.begin(), found.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return a.step != b.step ? a.step < b.step : a.path < b.path;
  });
  return found;
}

std::string find_resume_checkpoint(const std::string& dir_or_file) {
  std::error_code ec;
  if (!fs::is_directory(dir_or_file, ec)) return dir_or_file;  // a file: opening it says what is wrong
  const std::vector<CheckpointFile> found = list_checkpoints(dir_or_file);
  if (found.empty())
    throw InputError(dir_or_file + ": no checkpoint (ckpt_<step>.safetensors) to resume from");
  return found.back().path;
}

void check_checkpoint_options(const CheckpointOptions& c) {
  if (c.save_every < 0 || c.keep < 0)
    throw InputError("invalid config: --save-every and --keep must be 0 or more");
  if (c.save_dir.empty() && (c.save_every > 0 || c.keep > 0))
    throw InputError("invalid config: --save-every and --keep need --save-dir, the directory to save in");
}

void save_checkpoint(const std::string& path, Trainer& trainer, int step, const TrainOptions& o,
                     const std::map<std::string, std::string>& extra, const std::map<std::string, std::string>& notes) {
  TrainingState state = trainer.read_state();  // (every rank: ZeRO-1 gathers)
  if (trainer.rank() != 0) return;
  const std::vector<Slot> all = slots(trainer.model().layout(), state);
  const LossScalerConfig& s = o.loss_scaler;
  std::map<std::string, std::string> metadata = {
      {"format", kFormat},
      {"version", kVersion},
      {"config", model_config_to_json(o.model)},
      {"optimizer", adamw_config_to_json(o.optimizer)},
      {"precision", precision_name(o.precision)},
      {"run", run_json(o.run.seed, o.run.batch, o.run.seq).dump()},
      {"loss_scaler", loss_scaler_json(s.init_scale, s.growth_factor, s.backoff_factor, s.growth_interval).dump()},
      {"step", std::to_string(step)},
  };
  if (o.lora.enabled()) metadata["lora"] = lora_config_to_json(o.lora);
  for (const auto& [key, value] : extra)
    if (key == "checksum" || !metadata.emplace(key, value).second)
      throw std::invalid_argument("save_checkpoint: extra metadata '" + key + "' is a checkpoint field");
  for (const auto& [key, value] : notes)
    if (key == "checksum" || !metadata.emplace(key, value).second)
      throw std::invalid_argument("save_checkpoint: note '" + key + "' is a checkpoint field or an extra entry");
  metadata["checksum"] = checksum_of(metadata, all);
  std::vector<SafetensorsTensorRef> tensors;
  for (const Slot& slot : all) tensors.push_back({slot.name, slot.dtype, slot.shape, slot.data});
  write_atomically(path, metadata, tensors);
}

int load_checkpoint(const std::string& path, Trainer& trainer, const TrainOptions& o,
                    const std::map<std::string, std::string>& extra) {
  const SafetensorsFile file = SafetensorsFile::open(path);  // truncated, malformed: refused here
  auto meta = [&](const std::string& key) -> const std::string& { return file.metadata_value(key); };
  auto where = [&](const std::string& key) { return path + ": metadata '" + key + "'"; };
  CheckedCheckpoint checked = read_checked(path, file);
  const ModelConfig& model = checked.model;
  const ParamLayout& layout = checked.layout;
  const int step = checked.step;
  TrainingState& state = checked.state;

  // --- the run it continues: everything that decides the numbers of the next steps
  require_same_fields(path, "", json::parse(model_config_to_json(model)), json::parse(model_config_to_json(o.model)));
  // LoRA: the same adapters (the base they sit on is compared through `extra`: the train loop's
  // fingerprint of it)
  const std::string none = "none";
  require_same(path, "lora", checked.lora.enabled() ? json::parse(lora_config_to_json(checked.lora)) : json(none),
               o.lora.enabled() ? json::parse(lora_config_to_json(o.lora)) : json(none));
  const AdamWConfig optimizer = adamw_config_from_json(meta("optimizer"), where("optimizer"));
  require_same_fields(path, "", json::parse(adamw_config_to_json(optimizer)),
                      json::parse(adamw_config_to_json(o.optimizer)));
  require_same(path, "precision", meta("precision"), precision_name(o.precision));
  {
    JsonFields f(parse_json(meta("run"), where("run")), where("run"));
    const json saved = run_json(f.integer("seed", 0, INT64_MAX), f.positive_int("batch"), f.positive_int("seq"));
    f.finish();
    require_same_fields(path, "", saved, run_json(o.run.seed, o.run.batch, o.run.seq));
  }
  const LossScalerConfig scaler = loss_scaler_for(o.precision, o.loss_scaler);
  {
    JsonFields f(parse_json(meta("loss_scaler"), where("loss_scaler")), where("loss_scaler"));
    const json saved = loss_scaler_json(f.number_f32("init_scale"), f.number_f32("growth_factor"),
                                        f.number_f32("backoff_factor"), f.positive_int("growth_interval"));
    f.finish();
    if (scaler.dynamic)  // (fixed-scale runs never read these settings)
      require_same_fields(path, "loss_scaler.", saved,
                          loss_scaler_json(scaler.init_scale, scaler.growth_factor, scaler.backoff_factor,
                                           scaler.growth_interval));
  }
  for (const auto& [key, value] : extra) require_same(path, key, meta(key), value);

  // --- the state's values: in range, and consistent with the step
  check_values(path, layout, state, step, scaler);

  trainer.load_state(state);
  return step;
}

namespace {

// A checkpoint's parameters (or adapters), checked finite, with what describes them.
CheckpointModel read_checkpoint_params(const std::string& path, bool adapters) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  CheckedCheckpoint checked = read_checked(path, file);
  if (checked.lora.enabled() && !adapters)
    throw InputError(path + ": holds LoRA adapters, not a whole model: fold them into their base first "
                            "(tinytrain merge --base BASE --adapter " + path + " --out DIR)");
  if (!checked.lora.enabled() && adapters)
    throw InputError(path + ": a checkpoint of a run without LoRA (--lora-rank): it holds no adapters");
  const ParamLayout& layout = checked.layout;
  check_elements(path, layout, "", checked.state.params, "parameters must be finite",
                 [](float v) { return !std::isfinite(v); });
  CheckpointModel out;
  out.config = checked.model;
  out.lora = checked.lora;
  out.params = std::move(checked.state.params);
  out.metadata = file.metadata();
  out.step = checked.step;
  return out;
}

}  // namespace

CheckpointModel read_checkpoint_model(const std::string& path) { return read_checkpoint_params(path, false); }

CheckpointModel read_checkpoint_adapters(const std::string& path) { return read_checkpoint_params(path, true); }

std::vector<float> read_state_dict(const std::string& path, const ModelConfig& config) {
  const SafetensorsFile file = SafetensorsFile::open(path);  // truncated, malformed: refused here
  const ParamLayout layout(config);
  std::set<std::string> expected;
  for (const ParamInfo& p : layout.params()) {
    file.check(p.name, DType::F32, p.shape);  // missing, another dtype or shape: one line naming it
    expected.insert(p.name);
  }
  for (const std::string& name : file.names())
    if (!expected.count(name))
      throw InputError(path + ": unexpected tensor '" + printable(name) + "' (not a parameter of this model: " +
                       "expected exactly the " + std::to_string(expected.size()) + " tensors of its state_dict)");
  std::vector<float> params(static_cast<size_t>(layout.total()));
  for (const ParamInfo& p : layout.params()) file.read(p.name, DType::F32, p.shape, params.data() + p.offset);
  check_elements(path, layout, "", params, "parameters must be finite", [](float v) { return !std::isfinite(v); });
  return params;
}

void prune_checkpoints(const std::string& dir, int keep) {
  if (keep <= 0) return;
  const std::vector<CheckpointFile> found = list_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < found.size(); ++i) {
    std::error_code ec;
    if (!fs::remove(found[i].path, ec) && ec)
      throw InputError(found[i].path + ": cannot delete an old checkpoint (--keep): " + ec.message());
  }
}

}  // namespace tt
