// `tinytrain ops check|perf`: every backend op against the CPU backend, or timed
// (engine/ops/ops_run.h, docs/ops.md).
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "engine/ops/ops_run.h"

namespace tt {

namespace {

class OpsCommand final : public Command {
 public:
  const char* name() const override { return "ops"; }
  const char* summary() const override {
    return "check every backend op against the CPU backend (exit 1: one is beyond tolerance), or time each one";
  }

  void add_flags(CLI::App& cmd) override {
    OpsOptions& o = options_;
    cmd.add_option("mode", o.mode, "check | perf")->required()->check(CLI::IsMember({"check", "perf"}));
    cmd.add_option("--op", o.op, "only this op, or the ops whose names contain it (e.g. linear)");
    add_backend_option(cmd, o.backend);
    cmd.add_option("--dtype", o.dtype, "only this storage dtype: fp32 | bf16 | fp16 (default: all three)")
        ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
    add_threads_option(cmd, threads_);
    add_debug_sync_flag(cmd, o.gpu.debug_sync);
    add_gemm_option(cmd, o.gpu.gemm);
    add_attention_option(cmd, o.gpu.attention);
    cmd.add_flag("--attention-sweep", o.attention_sweep,
                 "the attention ops only, at B 4, 12 causal heads of 64, T = 256 to 4096 (tools/bench_attention.py)");
    cmd.add_flag("--gpt2-gemms", o.gpt2_gemms,
                 "the linear ops only, at GPT-2 small's four GEMMs for 8 x 1024 tokens (the GEMM ladder's shapes, "
                 "docs/gemm.md)")
        ->excludes("--attention-sweep");
    cmd.add_option("--sample-blocks", o.sample_blocks,
                   "perf on cuda-emu: run at most N blocks of each kernel launch and scale its counts (a model of "
                   "shapes too large to emulate whole; the results are not computed)")
        ->check(CLI::PositiveNumber);
  }

  int run() override {
    set_cpu_threads(threads_);
    return run_ops(options_, std::cout);
  }

 private:
  OpsOptions options_;
  int threads_ = 0;
};

}  // namespace

std::unique_ptr<Command> make_ops_command() { return std::make_unique<OpsCommand>(); }

}  // namespace tt
