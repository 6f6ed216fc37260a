// Helpers for tests that drive the real tinytrain binary: run a command with stdout, stderr,
// the exit status and the peak memory captured separately and a hard timeout (a hang fails,
// it never blocks the suite), the contract every bad input must meet (expect_user_error), a
// scratch directory per test, and a small raw safetensors reader/writer that
// works on the file's bytes directly (independent of engine/io/safetensors), so a test can
// build exactly the malformed file it wants.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>  // mkdtemp
#include <sys/resource.h>  // wait4
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/text_match.h"

namespace tt::test {

namespace fs = std::filesystem;

// ---- running a command ----

struct CliResult {
  std::string out, err;      // everything written to stdout / stderr
  int exit_code = -1;        // valid when exited
  bool exited = false;       // WIFEXITED
  bool signaled = false;     // WIFSIGNALED (a crash: SIGSEGV, SIGABRT, ...), timeouts excluded
  int signal = 0;
  bool timed_out = false;    // killed by us after the timeout
  long peak_rss_kb = 0;      // the process's largest resident set (getrusage's ru_maxrss)
  std::string command;       // for messages

  std::vector<std::string> out_lines() const { return split_lines(out); }
  std::vector<std::string> err_lines() const { return split_lines(err); }

  static std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) lines.push_back(line);
    return lines;
  }

  // Everything a failure message needs to show what the binary did.
  std::string describe() const {
    std::ostringstream s;
    s << "command: " << command << "\n";
    if (timed_out) s << "TIMED OUT\n";
    if (signaled) s << "killed by signal " << signal << " (" << strsignal(signal) << ")\n";
    if (exited) s << "exit status " << exit_code << "\n";
    s << "--- stdout (" << out.size() << " bytes) ---\n" << out << "\n--- stderr (" << err.size() << " bytes) ---\n"
      << err << "\n---";
    return s.str();
  }
};

inline std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs argv[0] (a path, no PATH lookup) with the given arguments. stdout and stderr go to
// files in scratch_dir (pipes could deadlock on large output while we poll for exit); stdin is
// /dev/null. After timeout_s the process is killed with SIGKILL and timed_out is set.
inline CliResult run_command(const std::vector<std::string>& argv, const std::string& scratch_dir,
                             double timeout_s = 60.0) {
  CliResult r;
  for (const std::string& a : argv) r.command += (r.command.empty() ? "" : " ") + a;
  static int counter = 0;
  const std::string tag = scratch_dir + "/run" + std::to_string(counter++);
  const std::string out_path = tag + ".stdout", err_path = tag + ".stderr";

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const pid_t pid = fork();
  if (pid < 0) {
    ADD_FAILURE() << "fork failed: " << std::strerror(errno);
    return r;
  }
  if (pid == 0) {  // child: only async-signal-safe calls until exec
    const int in = open("/dev/null", O_RDONLY);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) _exit(126);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    struct rusage usage;
    const pid_t done = wait4(pid, &status, WNOHANG, &usage);
    if (done == pid) r.peak_rss_kb = usage.ru_maxrss;
    if (done == pid) break;
    if (done < 0 && errno != EINTR) {
      ADD_FAILURE() << "waitpid failed: " << std::strerror(errno);
      return r;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  r.out = read_whole_file(out_path);
  r.err = read_whole_file(err_path);
  std::error_code ec;
  fs::remove(out_path, ec);
  fs::remove(err_path, ec);
  if (WIFEXITED(status)) {
    r.exited = true;
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status) && !r.timed_out) {
    r.signaled = true;
    r.signal = WTERMSIG(status);
  }
  return r;
}

// ---- the error contract ----

// A training log line without the speed fields every step line ends with (" | 0.012 TFLOP/s
// | MFU 40.0%"): what a run computed, which must not depend on how fast it ran.
inline std::string without_speed_fields(const std::string& line) {
  return regex_replace_all(line, R"( \| [^|]* TFLOP/s.*$)", "");
}

inline bool contains(const std::string& text, const std::string& phrase) {
  return text.find(phrase) != std::string::npos;
}

// The contract for a bad input. Each of `phrases` must appear in the error line (each entry
// of a phrase group separated by '|' is an alternative).
// Returns false (after one failure naming what happened) when the command did not even fail.
inline bool expect_user_error(const CliResult& r, std::initializer_list<std::string> phrases) {
  if (r.timed_out || r.signaled || !r.exited || r.exit_code == 0) {
    ADD_FAILURE() << (r.timed_out  ? "the command hung"
                      : r.signaled ? "the command crashed"
                      : r.exited   ? "bad input accepted: exit status 0"
                                   : "the command did not exit normally")
                  << "\n" << r.describe();
    return false;
  }
  SCOPED_TRACE(r.describe());
  EXPECT_NE(r.exit_code, 134) << "looks like an abort";
  EXPECT_NE(r.exit_code, 139) << "looks like a segfault";
  EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << "main.cpp documents exit 1 (2 for bad flags)";

  // Exactly one line, newline-terminated, starting with "error: " and saying something.
  if (r.err.empty()) {
    ADD_FAILURE() << "no error message on stderr";
    return true;
  }
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr must be exactly one line";
  EXPECT_EQ(r.err.back(), '\n') << "the error line must end with a newline";
  const std::string line = r.err.substr(0, r.err.find('\n'));
  EXPECT_EQ(line.rfind("error: ", 0), 0u) << "the line must start with 'error: '";
  EXPECT_GT(line.size(), std::string("error: ").size() + 5) << "the error line says nothing";
  for (const std::string& group : phrases) {
    bool found = false;
    size_t start = 0;
    while (!found) {
      const size_t bar = group.find('|', start);
      const std::string alt = group.substr(start, bar == std::string::npos ? std::string::npos : bar - start);
      found = contains(line, alt);
      if (bar == std::string::npos) break;
      start = bar + 1;
    }
    EXPECT_TRUE(found) << "the error line does not name the problem: expected '" << group << "' in: " << line;
  }
  EXPECT_FALSE(contains(r.out, "(PASS)")) << "a failed command must not report a pass";
  return true;
}

// ---- a scratch directory per test ----

class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/tt_cli_XXXXXX";
    if (mkdtemp(tmpl) == nullptr) ADD_FAILURE() << "mkdtemp failed: " << std::strerror(errno);
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

  // Writes bytes exactly as given; returns the path.
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string p = file(name);
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

 private:
  std::string path_;
};

// ---- raw safetensors ----

// The header length a safetensors file's first 8 bytes hold (little-endian); bytes has >= 8.
inline uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return n;
}

// 8-byte little-endian header length, the header text as given, then the data section.
// header_len defaults to the header's own length; give another to build a lying file.
inline std::string raw_safetensors(const std::string& header, const std::string& data = "",
                                   uint64_t header_len = UINT64_MAX) {
  if (header_len == UINT64_MAX) header_len = header.size();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header_len >> (8 * i)) & 0xff);
  return bytes + header + data;
}

// A safetensors file decoded into editable parts: metadata and tensors (in data order), each
// with its own bytes. write() lays the tensors out contiguously again, so dropping a tensor or
// resizing one never leaves gaps or stale offsets.
struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;

  int32_t get_i32(size_t i) const {
    int32_t v;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    return v;
  }
  void set_i32(size_t i, int32_t v) { std::memcpy(&bytes[4 * i], &v, 4); }
};

struct RawSafetensors {
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
  std::vector<RawTensor> tensors;

  // Parses a well-formed file (the committed references); fails the test otherwise.
  static RawSafetensors load(const std::string& path) {
    RawSafetensors st;
    const std::string bytes = read_whole_file(path);
    if (bytes.size() < 8) {
      ADD_FAILURE() << path << ": too short to be safetensors";
      return st;
    }
    const uint64_t n = header_length(bytes);
    const nlohmann::ordered_json header = nlohmann::ordered_json::parse(bytes.substr(8, n));
    const std::string data = bytes.substr(8 + n);
    for (const auto& item : header.items()) {
      if (item.key() == "__metadata__") {
        st.metadata = item.value();
        continue;
      }
      RawTensor t;
      t.name = item.key();
      t.dtype = item.value().at("dtype").get<std::string>();
      t.shape = item.value().at("shape").get<std::vector<int64_t>>();
      const uint64_t b = item.value().at("data_offsets")[0].get<uint64_t>();
      const uint64_t e = item.value().at("data_offsets")[1].get<uint64_t>();
      t.bytes = data.substr(b, e - b);
      st.tensors.push_back(std::move(t));
    }
    std::stable_sort(st.tensors.begin(), st.tensors.end(),
                     [&](const RawTensor& a, const RawTensor& b) {
                       return header.at(a.name).at("data_offsets")[0].get<uint64_t>() <
                              header.at(b.name).at("data_offsets")[0].get<uint64_t>();
                     });
    return st;
  }

  RawTensor* find(const std::string& name) {
    for (RawTensor& t : tensors)
      if (t.name == name) return &t;
    ADD_FAILURE() << "no tensor '" << name << "' in the reference";
    return nullptr;
  }
  bool erase(const std::string& name) {
    const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const RawTensor& t) { return t.name == name; });
    if (it == tensors.end()) return false;
    tensors.erase(it);
    return true;
  }

  // The metadata 'config' (a JSON string) as JSON, and back.
  nlohmann::ordered_json config() const { return nlohmann::ordered_json::parse(metadata.at("config").get<std::string>()); }
  void set_config(const nlohmann::ordered_json& c) { metadata["config"] = c.dump(); }

  // The bytes of the file: header padded with spaces to a multiple of 8, then the tensors.
  std::string serialize() const {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    std::string data;
    for (const RawTensor& t : tensors) {
      header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
      data += t.bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    return raw_safetensors(text, data);
  }
};

}  // namespace tt::test
