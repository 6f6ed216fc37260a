// `tinytrain verify REF`: replays a PyTorch reference (tools/make_reference.py) on a backend and
// compares, one row per tensor (cli/verify.h, docs/reference-format.md); exit 1 when a row fails.
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/verify.h"

namespace tt {

namespace {

class VerifyCommand final : public Command {
 public:
  const char* name() const override { return "verify"; }
  const char* summary() const override { return "replay a PyTorch reference and compare, one row per tensor"; }

  void add_flags(CLI::App& cmd) override {
    cmd.add_option("reference", reference_, "reference .safetensors written by tools/make_reference.py")->required();
    add_backend_option(cmd, backend_);
    add_threads_option(cmd, threads_);
    gpu_.add_to(cmd);
    add_precision_option(cmd, precision_);
  }

  int run() override {
    set_cpu_threads(threads_);
    const Precision precision = parse_precision(precision_);
    auto backend = select_backend(backend_, gpu_.options(), std::cout);
    gpu_.note_attention(*backend, std::cout);
    return run_verify(*backend, reference_, std::cout, precision) ? 0 : 1;
  }

 private:
  std::string reference_;
  BackendChoice backend_ = BackendChoice::Auto;
  int threads_ = 0;
  GpuFlags gpu_;
  std::string precision_ = "fp32";
};

}  // namespace

std::unique_ptr<Command> make_verify_command() { return std::make_unique<VerifyCommand>(); }

}  // namespace tt
