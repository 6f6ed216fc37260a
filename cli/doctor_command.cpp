// `tinytrain doctor`: the hardware and software chain training depends on, probed link by link,
// its peaks measured and saved (engine/doctor/doctor.h, docs/doctor.md).
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "engine/doctor/doctor.h"

namespace tt {

namespace {

class DoctorCommand final : public Command {
 public:
  const char* name() const override { return "doctor"; }
  const char* summary() const override {
    return "probe the CPU, GPU, driver and libraries, measure their peaks (exit 1: a link training needs is broken)";
  }

  void add_flags(CLI::App& cmd) override {
    cmd.add_flag("--json", options_.json, "one JSON document with every probe instead of lines");
    cmd.add_flag("--save-under-load", options_.save_under_load,
                 "save the CPU's peaks even when other processes kept the CPUs busy during the measurement "
                 "(otherwise such peaks are not saved: MFU against them would read high)");
    add_backend_option(cmd, options_.backend)
        ->description("the backend training would use: auto | cpu | cuda | cuda-emu");
    add_threads_option(cmd, threads_)->description("CPU threads for the CPU probes and backend (0: all cores)");
  }

  int run() override {
    set_cpu_threads(threads_);
    return run_doctor(options_, std::cout);
  }

 private:
  DoctorOptions options_;
  int threads_ = 0;
};

}  // namespace

std::unique_ptr<Command> make_doctor_command() { return std::make_unique<DoctorCommand>(); }

}  // namespace tt
