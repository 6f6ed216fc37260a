// Chrome trace output of profiled steps (see chrome_trace.h).
#include "engine/profile/chrome_trace.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>

#include "engine/config.h"

namespace tt {

namespace {

// Milliseconds -> whole nanoseconds. Times are written in microseconds (the format's unit) with
// three decimals: each end is rounded on its own and the duration taken between the rounded
// ends, so an event that lies within another before rounding still does after.
int64_t ns(double ms) { return std::llround(ms * 1e6); }

nlohmann::json complete_event(const std::string& name, const char* category, double start_ms, double end_ms,
                              nlohmann::json args) {
  const int64_t start = ns(start_ms), end = ns(end_ms);
  return {{"name", name}, {"cat", category}, {"ph", "X"}, {"ts", start / 1e3}, {"dur", (end - start) / 1e3},
          {"pid", 1},     {"tid", 1},        {"args", std::move(args)}};
}

}  // namespace

nlohmann::json chrome_trace(const std::vector<StepProfile>& steps, int first_step, const std::string& device) {
  nlohmann::json events = nlohmann::json::array();
  // Metadata: what the viewer calls the process and the track.
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "tinytrain profile"}}}});
  events.push_back(
      {{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", device + " ops"}}}});
  int next_id = 0;
  for (size_t k = 0; k < steps.size(); ++k) {
    const StepProfile& step = steps[k];
    const double t0 = step.start_ms;  // the step's start on the trace's timeline
    const std::string step_name = "step " + std::to_string(first_step + static_cast<int>(k));
    const int step_id = next_id++;
    events.push_back(complete_event(step_name, "step", t0, t0 + step.wall_ms, {{"id", step_id}}));
    // Scopes come parent first (profiler.h), so each one's path and id are known to its children.
    std::vector<int> scope_ids;
    std::vector<std::string> paths;
    for (const ProfiledScope& s : step.scopes) {
      const int parent = s.parent < 0 ? step_id : scope_ids[s.parent];
      paths.push_back((s.parent < 0 ? step_name : paths[s.parent]) + "/" + s.name);
      scope_ids.push_back(next_id++);
      events.push_back(complete_event(s.name, "scope", t0 + s.start_ms, t0 + s.end_ms,
                                      {{"id", scope_ids.back()}, {"parent", parent}, {"path", paths.back()}}));
    }
    for (const ProfiledOp& op : step.ops) {
      const int parent = op.scope < 0 ? step_id : scope_ids[op.scope];
      const std::string& path = op.scope < 0 ? step_name : paths[op.scope];
      events.push_back(complete_event(op.name, "op", t0 + op.start_ms, t0 + op.end_ms,
                                      {{"id", next_id++},
                                       {"parent", parent},
                                       {"scope", path},
                                       {"flops", op.cost.flops},
                                       {"bytes", op.cost.bytes}}));
    }
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

void write_chrome_trace(const nlohmann::json& trace, const std::string& path) {
  std::ofstream out(path, std::ios::trunc);
  if (out) out << trace.dump() << '\n';
  if (!out || !out.flush()) throw InputError("cannot write the trace " + path + ": " + std::strerror(errno));
}

}  // namespace tt
