// `tinytrain plan`: the memory plan of `train` with the same model, run and data-parallel flags
// (engine/memory_plan.h), allocating nothing: every buffer, the largest batch per recompute
// mode, and whether the run fits in the memory given or free (exit 1: it does not, with the
// remedies that would fit).
#include <cstdio>
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "cli/train_flags.h"
#include "engine/memory_plan.h"
#include "parallel/rank_launch.h"

namespace tt {

namespace {

class PlanCommand final : public Command {
 public:
  const char* name() const override { return "plan"; }
  const char* summary() const override {
    return "print the memory plan of `train` with the same flags, allocating nothing, and whether it fits (exit 1: "
           "no)";
  }

  void add_flags(CLI::App& cmd) override {
    flags_.add_to(cmd);
    flags_.add_data_parallel_to(cmd);
    add_int_option(cmd, "--ranks", ranks_, "plan per rank for this many data-parallel ranks (0: the launch's)", 0,
                   65536);
    cmd.add_option("--device-memory", device_memory_,
                   "memory to plan for, e.g. 80GiB (default: the device's free memory; on the CPU MemAvailable)");
  }

  int run() override {
    flags_.finish();
    const Launch launch = detect_launch();
    flags_.set_ranks(ranks_ > 0 ? ranks_ : launch.world_size);
    const Placement where = place_run(flags_.backend, device_memory_, /*must_measure=*/true, launch.local_rank);
    const TrainOptions& train = flags_.options;
    const MemoryPlan plan = plan_training(train, where.kind);
    print_plan(plan, train, where.kind, std::cout);
    std::cout << "largest batch that fits in " << where.available / 1048576 << " MiB (grad-accum 1):";
    for (Recompute r : {Recompute::None, Recompute::Ffn, Recompute::Layer})
      std::cout << " recompute " << recompute_name(r) << ": "
                << largest_micro_batch(train, r, where.available, where.kind) << (r == Recompute::Layer ? "" : ",");
    std::cout << std::endl;
    const size_t need = plan.device_bytes();
    if (need > where.available) {
      std::cout << "does not fit: " << out_of_memory_message(train, where.kind, where.available, "") << std::endl;
      return 1;
    }
    char line[160];
    std::snprintf(line, sizeof(line), "fits: the plan needs %.1f MiB of the %.1f MiB %s (%.1f MiB to spare)",
                  need / 1048576.0, where.available / 1048576.0, where.measured ? "free" : "given",
                  (where.available - need) / 1048576.0);
    std::cout << line << std::endl;
    return 0;
  }

 private:
  TrainFlags flags_;
  int ranks_ = 0;
  std::string device_memory_;
};

}  // namespace

std::unique_ptr<Command> make_plan_command() { return std::make_unique<PlanCommand>(); }

}  // namespace tt
