// What every command of the tinytrain CLI is: a name, a one-line summary, its flags (declared on
// the CLI11 subcommand main() makes for it) and what it runs once they are parsed. Each command
// is one file, cli/<name>_command.cpp, with its flags beside its run(); main.cpp lists them and
// dispatches. Adding a command is adding such a file and its line in main.cpp's list.
//
// Also here: the flags several commands share, each declared by one function, and the checked
// integer flags every command uses. A command declares only the flags it uses: any other flag
// is refused by CLI11 as an unknown option.
#pragma once
#include <CLI/CLI.hpp>
#include <climits>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "engine/backend_select.h"
#include "engine/config.h"

namespace tt {

class Command {
 public:
  virtual ~Command() = default;
  virtual const char* name() const = 0;
  virtual const char* summary() const = 0;  // the line `tinytrain --help` and `<name> --help` print
  // Declares the command's flags on `cmd`; each writes into the command's own fields.
  virtual void add_flags(CLI::App& cmd) = 0;
  // Runs the command once its flags are parsed; returns the exit status (0: success). Bad input
  // throws InputError, which main() prints as one line.
  virtual int run() = 0;
};

// The commands, in the order `tinytrain --help` lists them.
std::unique_ptr<Command> make_train_command();    // cli/train_command.cpp
std::unique_ptr<Command> make_plan_command();     // cli/plan_command.cpp
std::unique_ptr<Command> make_profile_command();  // cli/profile_command.cpp
std::unique_ptr<Command> make_verify_command();   // cli/verify_command.cpp
std::unique_ptr<Command> make_prepare_command();  // cli/prepare_command.cpp
std::unique_ptr<Command> make_sample_command();   // cli/sample_command.cpp
std::unique_ptr<Command> make_export_command();   // cli/export_command.cpp
std::unique_ptr<Command> make_merge_command();    // cli/merge_command.cpp
std::unique_ptr<Command> make_doctor_command();   // cli/doctor_command.cpp
std::unique_ptr<Command> make_ops_command();      // cli/ops_command.cpp

// ---- checked numbers ----

// A CLI11 check that runs the engine's one integer parser (base/checked_input.h) before CLI11
// converts the text: "64.9", "1e2", "0x10" and values beyond [lo, hi] are refused naming the
// flag, never truncated or wrapped. Positivity and consistency are left to the configs'
// validate(), which names the field.
CLI::Validator integer_in(int64_t lo, int64_t hi);
CLI::Option* add_int_option(CLI::App& cmd, const std::string& name, int& value, const std::string& help,
                            int64_t lo = INT_MIN, int64_t hi = INT_MAX);
// A seed flag: kept as text and parsed by parse_seed, so that the whole range [0, 2^63) passes
// and anything else is one error naming the flag (`what`: "invalid config: --seed").
CLI::Option* add_seed_option(CLI::App& cmd, std::string& text, int64_t default_seed, const std::string& help);
int64_t parse_seed(const std::string& text, const std::string& what);

// --precision fp32|bf16|fp16, kept as text for parse_precision (`train`, `plan`, `profile`, `verify`).
CLI::Option* add_precision_option(CLI::App& cmd, std::string& precision);

// ---- the backend ----

// --backend auto|cpu|cuda|cuda-emu (engine/backend_select.h), parsed as the flags are read: an
// unknown name is an InputError.
CLI::Option* add_backend_option(CLI::App& cmd, BackendChoice& choice);
// --threads N: the CPU threads of the CPU backend (0: all cores); the command passes them to
// set_cpu_threads before it runs anything.
CLI::Option* add_threads_option(CLI::App& cmd, int& threads);

// --debug-sync: wait for the backend after every op and name the op that fails
// (kernels/debug_sync_backend.h; TINYTRAIN_DEBUG_SYNC=1 does the same). GpuFlags declares it;
// `sample` and `ops`, which take no other flag of GpuFlags but --gemm, declare it alone.
CLI::Option* add_debug_sync_flag(CLI::App& cmd, bool& debug_sync);

// --gemm cublaslt|naive|tiled|regblock|mma: what runs the CUDA backend's GEMMs (GpuFlags; `ops` on its own).
CLI::Option* add_gemm_option(CLI::App& cmd, GemmKernel& gemm);
// --attention flash|simt|naive|cudnn: the CUDA backend's attention kernels (the CPU has one).
CLI::Option* add_attention_option(CLI::App& cmd, AttentionKernel& attention);

// --tf32, --gemm, --attention and --debug-sync: how the CUDA backend runs the model (`train`, `profile`, `verify`).
struct GpuFlags {
  GpuOptions gpu;

  void add_to(CLI::App& cmd);
  // The options the CUDA backend is made with (gpu.device is the caller's).
  GpuOptions options() const;
  // `--attention cudnn` on a backend without cuDNN: one line saying that our attention kernel
  // runs. (On the CUDA backend, the model says once it is planned whether cuDNN serves it.)
  void note_attention(const Backend& backend, std::ostream& out) const;
};

}  // namespace tt
