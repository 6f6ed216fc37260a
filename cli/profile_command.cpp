// `tinytrain profile`: `train`'s model, run and optimizer flags, a few steps in one process,
// every op timed (engine/profile/profile_run.h): the per-op table, its roofline, a Chrome trace.
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/train_flags.h"
#include "engine/profile/profile_run.h"
#include "parallel/rank_launch.h"

namespace tt {

namespace {

class ProfileCommand final : public Command {
 public:
  const char* name() const override { return "profile"; }
  const char* summary() const override {
    return "time every op of a few training steps (train's model, run and optimizer flags): per-op table, roofline, "
           "Chrome trace";
  }

  void add_flags(CLI::App& cmd) override {
    flags_.options.run.steps = 3;
    flags_.add_to(cmd);
    cmd.get_option("--steps")->description("steps to run; the first is a warm-up, not counted");
    add_threads_option(cmd, threads_);
    gpu_.add_to(cmd);
    cmd.add_option("--trace", trace_path_,
                   "write a Chrome trace of the counted steps to FILE.json (ui.perfetto.dev, chrome://tracing)");
    cmd.add_option("--estimate", estimate_,
                   "model the step on this GPU (h200): each op's FLOPs, bytes and CUDA graph nodes against the "
                   "datasheet's peaks and a node latency, and on cuda-emu each kernel from the emulator's counts of it; "
                   "a model, not a measurement (needs --backend cuda or cuda-emu)");
    cmd.add_option("--sample-blocks", sample_blocks_,
                   "with --backend cuda-emu --estimate: run at most N blocks of each kernel launch and scale the counts "
                   "(a step too long to emulate whole; its results are wrong, its estimate is not)")
        ->check(CLI::PositiveNumber);
    cmd.add_option("--kernel-json", kernel_json_,
                   "with --backend cuda-emu --estimate: write the kernel model to FILE.json (tools/kernel_times.py "
                   "sets a GPU's measured times beside it)");
  }

  int run() override {
    set_cpu_threads(threads_);
    flags_.finish();
    const Launch launch = detect_launch();
    if (launch.world_size > 1)
      throw InputError("profile runs in one process: start it without mpirun or torchrun's variables");
    flags_.set_ranks(1);
    flags_.check_fits(place_run(flags_.backend, /*device_memory=*/"", /*must_measure=*/false, launch.local_rank));
    ProfileOptions profile;
    profile.train = flags_.options;
    profile.trace_path = trace_path_;
    profile.backend = flags_.backend;
    profile.tf32 = gpu_.gpu.tf32;
    profile.estimate_device = estimate_;
    profile.sample_blocks = sample_blocks_;
    profile.kernel_json_path = kernel_json_;
    check_profile_options(profile);
    auto backend = select_backend(flags_.backend, gpu_.options(), std::cout);
    gpu_.note_attention(*backend, std::cout);
    run_profile(*backend, profile, std::cout);
    return 0;
  }

 private:
  TrainFlags flags_;
  int threads_ = 0;
  GpuFlags gpu_;
  std::string trace_path_;
  std::string estimate_;
  uint64_t sample_blocks_ = 0;
  std::string kernel_json_;
};

}  // namespace

std::unique_ptr<Command> make_profile_command() { return std::make_unique<ProfileCommand>(); }

}  // namespace tt
