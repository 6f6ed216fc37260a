// Memory plan: the trainer's arenas listed buffer by buffer, plus backend workspaces.
#include "engine/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "kernels/device_query.h"
#include "kernels/workspace.h"

namespace tt {

namespace {

// Each entry's slot: its bytes up to the next entry's offset (alignment padding included),
// so the items of one arena add up to exactly what the arena allocates.
void add_arena(MemoryPlan& plan, const std::string& group, const ArenaPlan& arena) {
  const auto& entries = arena.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    const size_t end = i + 1 < entries.size() ? entries[i + 1].offset : arena.bytes();
    plan.items.push_back({group, entries[i].name, end - entries[i].offset, true});
  }
}

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

bool fits(const TrainOptions& o, const std::string& backend, size_t available) {
  return plan_training(o, backend).device_bytes() <= available;
}

}  // namespace

size_t MemoryPlan::device_bytes() const {
  size_t total = 0;
  for (const PlanItem& item : items)
    if (item.on_device) total += item.bytes;
  return total;
}

size_t MemoryPlan::group_bytes(const std::string& group) const {
  size_t total = 0;
  for (const PlanItem& item : items)
    if (item.group == group) total += item.bytes;
  return total;
}

MemoryPlan plan_training(const TrainOptions& o, const std::string& backend) {
  const ModelConfig& c = o.model;
  // Per rank: each of W ranks holds B/W rows (run as grad_accum micro-batches); ZeRO-1 pads
  // the flat buffers to W shards and keeps the AdamW state of one shard, plus its gradients.
  const int W = std::max(o.ranks, 1), zero = W > 1 ? o.data_parallel.zero_stage : 0;
  const int rows = o.run.batch / W, T = o.run.seq, micro = rows / o.grad_accum;
  const DType act = activation_dtype(o.precision);
  // what trains: every parameter, or the LoRA adapters (the frozen base is in plan_weights too)
  const ParamLayout layout = o.lora.enabled() ? lora_layout(c, o.lora) : ParamLayout(c);
  MemoryPlan plan;
  // The same plans, in the same order, as the Trainer's members allocate them.
  add_arena(plan, "weights", Model::plan_weights(c, act, zero == 1 ? W : 1, o.lora));
  // plan_weights' first entry, "params": the fp32 parameters, or the masters of 16-bit working weights
  plan.items.front().name = act == DType::F32 ? "params (fp32)" : "master params (fp32)";
  add_arena(plan, "activations", Model::plan_activations(c, micro, T, act, o.recompute, o.lora));
  add_arena(plan, "optimizer", AdamW::plan_state(Trainer::optimizer_elements(layout, W, zero)));
  add_arena(plan, "loss scaler", LossScaler::plan_state());
  if (zero == 1) add_arena(plan, "weights", Trainer::plan_grad_shard(layout.shard_elements(W)));
  add_arena(plan, "batch", Trainer::plan_batch(rows, T));
  if (backend == "cuda") {
    for (const WorkspaceItem& w : cuda_workspaces(layout.total() * sizeof(float)))
      plan.items.push_back({"workspace", w.name, w.bytes, w.on_device});
  }
  return plan;
}

int largest_micro_batch(TrainOptions o, Recompute recompute, size_t available, const std::string& backend) {
  o.recompute = recompute;
  o.grad_accum = 1;
  const int W = std::max(o.ranks, 1);  // b rows on each of W ranks
  auto fits_batch = [&](int b) {
    o.run.batch = b * W;
    return fits(o, backend, available);
  };
  if (!fits_batch(1)) return 0;
  int lo = 1, hi = 2;  // lo fits; grow hi until it does not (or a generous cap), then bisect
  while (hi < (1 << 24) / W && fits_batch(hi)) lo = hi, hi *= 2;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits_batch(mid) ? lo : hi) = mid;
  }
  return lo;
}

void print_plan(const MemoryPlan& plan, const TrainOptions& o, const std::string& backend, std::ostream& out) {
  const int W = std::max(o.ranks, 1), rows = o.run.batch / W;
  out << "memory plan (" << backend << (W > 1 ? ", per rank of " + std::to_string(W) : "") << "): batch "
      << o.run.batch << (W > 1 ? " as " + std::to_string(W) + " ranks x " + std::to_string(rows) : "") << " as "
      << o.grad_accum << " x " << rows / o.grad_accum << ", seq " << o.run.seq << ", "
      << precision_name(o.precision) << ", recompute " << recompute_name(o.recompute)
      << (W > 1 ? ", zero " + std::to_string(o.data_parallel.zero_stage) : "") << "\n";
  char line[160];
  std::snprintf(line, sizeof line, "%-12s %-34s %14s %12s\n", "group", "buffer", "bytes", "MiB");
  out << line;
  for (const PlanItem& item : plan.items) {
    std::snprintf(line, sizeof line, "%-12s %-34s %14zu %12.2f%s\n", item.group.c_str(), item.name.c_str(),
                  item.bytes, item.bytes / 1048576.0, item.on_device ? "" : "  (pinned host)");
    out << line;
  }
  for (const char* group : {"weights", "optimizer", "loss scaler", "batch", "activations", "workspace"}) {
    const size_t bytes = plan.group_bytes(group);
    if (bytes == 0) continue;
    std::snprintf(line, sizeof line, "%-12s %-34s %14zu %12.2f\n", "total", group, bytes, bytes / 1048576.0);
    out << line;
  }
  std::snprintf(line, sizeof line, "%-12s %-34s %14zu %12.2f\n", "peak", "(everything lives for the whole run)",
                plan.device_bytes(), plan.device_bytes() / 1048576.0);
  out << line;
  if (W > 1) {  // what ZeRO-1 changes, side by side
    out << "per rank of " << W << ":";
    for (int zero : {0, 1}) {
      TrainOptions t = o;
      t.data_parallel.zero_stage = zero;
      const MemoryPlan p = plan_training(t, backend);
      std::snprintf(line, sizeof line, "%s --zero %d: optimizer %.2f MiB, peak %.2f MiB", zero ? ";" : "", zero,
                    p.group_bytes("optimizer") / 1048576.0, p.device_bytes() / 1048576.0);
      out << line;
    }
    out << "\n";
  }
}

std::string out_of_memory_message(const TrainOptions& o, const std::string& backend, size_t available,
                                  const std::string& what_failed) {
  const MemoryPlan plan = plan_training(o, backend);
  std::vector<PlanItem> items = plan.items;
  std::sort(items.begin(), items.end(), [](const PlanItem& a, const PlanItem& b) { return a.bytes > b.bytes; });
  std::ostringstream msg;
  msg << "out of memory" << (what_failed.empty() ? "" : " (" + what_failed + ")") << ": the plan needs "
      << mib(plan.device_bytes()) << " but " << mib(available) << " are free; biggest:";
  for (size_t i = 0; i < std::min<size_t>(3, items.size()); ++i)
    msg << (i ? "," : "") << " " << items[i].name << " " << mib(items[i].bytes);
  std::vector<std::string> remedies;
  // "<flags> (<MiB the plan needs>)" when t fits
  auto remedy_if_fits = [&](const TrainOptions& t, const std::string& flags) {
    const size_t need = plan_training(t, backend).device_bytes();
    if (need > available) return false;
    remedies.push_back(flags + " (" + mib(need) + ")");
    return true;
  };
  for (Recompute r : {Recompute::Ffn, Recompute::Layer}) {
    if (static_cast<int>(r) <= static_cast<int>(o.recompute)) continue;
    TrainOptions t = o;
    t.recompute = r;
    remedy_if_fits(t, std::string("--recompute ") + recompute_name(r));
  }
  const int W = std::max(o.ranks, 1), rows = o.run.batch / W;  // rows per rank
  for (int k = o.grad_accum + 1; k <= rows; ++k) {
    if (rows % k) continue;
    TrainOptions t = o;
    t.grad_accum = k;
    if (remedy_if_fits(t, "--grad-accum " + std::to_string(k))) break;
  }
  // a smaller batch (one micro-batch): with this recompute mode, else with --recompute layer
  for (Recompute r : {o.recompute, Recompute::Layer}) {
    const int b = std::min(largest_micro_batch(o, r, available, backend), rows - 1);
    if (b < 1) continue;
    TrainOptions t = o;
    t.run.batch = b * W;
    t.grad_accum = 1;
    t.recompute = r;
    remedy_if_fits(t, "--batch " + std::to_string(b * W) + (r == o.recompute ? "" : " --recompute layer"));
    break;
  }
  if (remedies.empty()) {
    msg << "; nothing fits: even one sequence with --recompute layer needs more (a smaller model or more memory)";
  } else {
    msg << "; would fit:";
    for (size_t i = 0; i < remedies.size(); ++i) msg << (i ? " or " : " ") << remedies[i];
  }
  return msg.str();
}

size_t parse_bytes(const std::string& text) {
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "K" || unit == "KB" || unit == "KIB") scale = 1024.0;
  if (unit == "M" || unit == "MB" || unit == "MIB") scale = 1048576.0;
  if (unit == "G" || unit == "GB" || unit == "GIB") scale = 1073741824.0;
  if (used == 0 || scale == 0 || !(value > 0) || value * scale > 1e18)
    throw InputError("invalid --device-memory '" + text + "' (expected bytes, e.g. 512MiB or 80GiB)");
  return static_cast<size_t>(value * scale);
}

size_t available_memory(const std::string& backend, int device) {
  if (backend == "cuda") return query_cuda_device(device).free_bytes;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return SIZE_MAX;  // unknown: do not refuse
}

}  // namespace tt
