// The measured-peaks file (engine/profile/peaks.h).
#include "engine/profile/peaks.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "kernels/cpu/cpu_simd.h"

namespace tt {

namespace {

constexpr int kPeaksVersion = 1;

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

// The whole file as JSON, or an empty object when it is missing or not ours.
nlohmann::json read_file_json() {
  std::ifstream in(peaks_file());
  if (!in) return nlohmann::json::object();
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || doc.value("version", 0) != kPeaksVersion || !doc.contains("devices") ||
      !doc["devices"].is_object())
    return nlohmann::json::object();
  return doc;
}

}  // namespace

std::string peaks_file() {
  std::string dir = env_or_empty("TINYTRAIN_CACHE_DIR");
  if (dir.empty()) {
    const std::string xdg = env_or_empty("XDG_CACHE_HOME");
    const std::string home = env_or_empty("HOME");
    dir = !xdg.empty() ? xdg + "/tinytrain" : (!home.empty() ? home + "/.cache/tinytrain" : ".tinytrain-cache");
  }
  return dir + "/peaks.json";
}

std::string cpu_device_key(int threads) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) model = line.substr(line.find_first_not_of(" \t", colon + 1));
    break;
  }
  // Capped below the CPU's widest vectors (TINYTRAIN_CPU_SIMD), the same CPU has other peaks.
  const bool capped = best_cpu_simd() != detected_cpu_simd();
  return "cpu " + model + " threads " + std::to_string(threads) + (capped ? std::string(" ") + cpu_simd_name(best_cpu_simd()) : "");
}

std::string cuda_device_key(const std::string& name, int major, int minor) {
  return "cuda " + name + " sm_" + std::to_string(major) + std::to_string(minor);
}

std::optional<Peaks> load_peaks(const std::string& device) {
  const nlohmann::json doc = read_file_json();
  if (!doc.contains("devices") || !doc["devices"].contains(device)) return std::nullopt;
  const nlohmann::json& entry = doc["devices"][device];
  if (!entry.is_object()) return std::nullopt;
  Peaks peaks;
  peaks.device = device;
  if (entry.contains("tflops") && entry["tflops"].is_object())
    for (const auto& [precision, value] : entry["tflops"].items())
      if (value.is_number() && value.get<double>() > 0) peaks.tflops[precision] = value.get<double>();
  if (entry.contains("memory_gbps") && entry["memory_gbps"].is_number())
    peaks.memory_gbps = entry["memory_gbps"].get<double>();
  if (entry.contains("measured") && entry["measured"].is_string()) peaks.measured = entry["measured"].get<std::string>();
  return peaks;
}

void save_peaks(const Peaks& peaks) {
  const std::string path = peaks_file();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  nlohmann::json doc = read_file_json();
  if (doc.empty()) doc = {{"version", kPeaksVersion}, {"devices", nlohmann::json::object()}};
  nlohmann::json entry = {{"tflops", peaks.tflops}, {"memory_gbps", peaks.memory_gbps}, {"measured", peaks.measured}};
  doc["devices"][peaks.device] = entry;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << doc.dump(2) << '\n';
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + why);
  }
}

double peak_tflops(const Peaks& peaks, const std::string& precision) {
  const auto it = peaks.tflops.find(precision);
  return it == peaks.tflops.end() ? 0.0 : it->second;
}

}  // namespace tt
