// The metrics file of `train --metrics`.
#include "engine/io/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <sstream>
#include <vector>

#include "engine/config.h"

namespace tt {

namespace {

// The lines of the file at `path` (if any) that record steps before `resume_step`, in order,
// up to the first line that is not one of ours.
std::vector<std::string> lines_before(const std::string& path, int resume_step) {
  std::vector<std::string> kept;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object() || !record.contains("step") || !record["step"].is_number_integer()) break;
    if (record["step"].get<int64_t>() >= resume_step) break;
    kept.push_back(line);
  }
  return kept;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, int resume_step) : path_(path) {
  if (path.empty()) return;
  const std::vector<std::string> kept = resume_step > 0 ? lines_before(path, resume_step) : std::vector<std::string>{};
  out_.open(path, std::ios::out | std::ios::trunc);
  if (!out_) throw InputError("--metrics " + path + ": cannot write: " + std::strerror(errno));
  for (const std::string& line : kept) out_ << line << '\n';
  out_.flush();
}

void MetricsLog::write(const nlohmann::json& record) {
  if (path_.empty()) return;
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) throw InputError("--metrics " + path_ + ": write failed (disk full?)");
}

}  // namespace tt
