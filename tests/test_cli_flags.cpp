// The flags of `tinytrain train` and `plan` whose effect shows only in what a run computes, run
// as a user runs them: each test could fail if the flag were ignored. --beta1/--beta2/--eps
// reach AdamW with their value (the losses equal a run configured in-process, and change from
// the step the update rule says); the loss-scale flags give the scale the scaler's rule
// predicts; --grad-accum gives the full batch's losses with the activations of a micro-batch;
// --recompute gives the same bits with fewer activations; --tf32 moves the emulated GEMMs by
// TF32's rounding and nothing else does; --cuda-graph on replays a graph (the done: line counts
// the replays) and gives the bits of --cuda-graph off, which replays none; plan
// --ranks shrinks the ZeRO-1 optimizer state to a rank's shard; --init's default follows --arch.
// The losses come from the metrics file (--metrics: every double in full), not from the log's
// four decimals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend_select.h"
#include "engine/config.h"
#include "engine/init.h"
#include "engine/token_batch.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/cli_test_util.h"
#include "tests/text_match.h"
#include "tests/test_models.h"

namespace tt::test {
namespace {

const std::string kBin = TINYTRAIN_BIN;
constexpr double kFp32Eps = 1.0 / (1 << 23);

// A model of 21k parameters: a step takes about a millisecond on the CPU and 0.3 s emulated.
// lr 1e-3 so that one update moves the loss measurably.
using Flags = std::vector<std::pair<std::string, std::string>>;
const Flags kSmallRun = {{"--vocab-size", "64"}, {"--d-model", "32"}, {"--n-head", "4"}, {"--d-ff", "64"},
                         {"--seq", "16"},        {"--batch", "4"},    {"--max-seq-len", "16"}, {"--lr", "1e-3"},
                         {"--steps", "4"},       {"--backend", "cpu"}, {"--threads", "1"}};

// kSmallRun with `overrides` replacing or adding entries, as arguments after the command.
// A value "" stands for a flag that takes none.
std::vector<std::string> with(const Flags& overrides, const Flags& base = kSmallRun) {
  Flags flags = base;
  for (const auto& flag : overrides) {
    auto it = std::find_if(flags.begin(), flags.end(), [&](const auto& f) { return f.first == flag.first; });
    if (it != flags.end())
      it->second = flag.second;
    else
      flags.push_back(flag);
  }
  std::vector<std::string> args;
  for (const auto& [name, value] : flags) {
    args.push_back(name);
    if (!value.empty()) args.push_back(value);  // "": a flag without a value (--tf32)
  }
  return args;
}

struct TrainedRun {
  std::vector<double> losses, scales, alloc_mb;  // per step, from the metrics file
  std::vector<nlohmann::json> graph_nodes;        // per step: the captured graph's nodes by kind, or null
  std::string log;
};

// `tinytrain train` with kSmallRun and the overrides, every step logged to a metrics file.
TrainedRun train(const Flags& overrides, double timeout_s = 60.0) {
  ScratchDir dir;
  std::vector<std::string> argv = {kBin, "train", "--log-every", "1", "--metrics", dir.file("metrics.jsonl")};
  for (const std::string& a : with(overrides)) argv.push_back(a);
  const CliResult r = run_command(argv, dir.path(), timeout_s);
  TrainedRun run;
  run.log = r.describe();
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  std::ifstream in(dir.file("metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    run.losses.push_back(j.at("loss").get<double>());
    run.scales.push_back(j.at("loss_scale").get<double>());
    run.alloc_mb.push_back(j.at("alloc_mb").get<double>());
    run.graph_nodes.push_back(j.at("graph_nodes"));
  }
  return run;
}

// The same run configured in-process (what --beta1 etc. must amount to): the options `train`
// builds from kSmallRun, then `configure`, trained as cli/train_loop.cpp trains (same
// initialisation, batches and step order) on one CPU thread.
template <typename Configure>
std::vector<double> train_in_process(Configure configure) {
  ModelConfig model;
  model.vocab_size = 64;
  model.d_model = 32;
  model.n_head = 4;
  model.d_ff = 64;
  model.max_seq_len = 16;
  AdamWConfig optimizer;
  optimizer.lr = 1e-3;
  TrainOptions o = trainer_options(model, optimizer, 4, 16, RunConfig{}.seed);
  o.run.steps = 4;
  configure(o);
  set_cpu_threads(1);
  std::unique_ptr<Backend> backend = make_cpu_backend();
  Trainer trainer(*backend, o);
  trainer.load_params(init_params(trainer.model().layout(), o.model, o.run.seed, o.init).data());
  std::vector<int32_t> x(4 * 16), y(4 * 16);
  std::vector<double> losses;
  for (int step = 0; step < o.run.steps; ++step) {
    random_batch(o.run.seed, static_cast<uint32_t>(step), 4, 16, model.vocab_size, x.data(), y.data());
    trainer.load_batch(x.data(), y.data(), static_cast<uint32_t>(step));
    trainer.train_step(false);
    losses.push_back(trainer.read_loss());
  }
  return losses;
}

double rel(double a, double b) { return std::fabs(a - b) / std::fabs(b); }

// ---- AdamW's hyper-parameters ----

// AdamW's first update is lr * m1^ / (sqrt(v1^) + eps) with m1^ = g and v1^ = g^2 whatever the
// betas (the bias corrections undo the (1 - beta) factors): step 1's loss (after one update)
// moves only by the fp32 rounding of those scalars, a few ulp of updates of lr = 1e-3, so
// 1e-7 relative bounds it (measured 5e-9 for --beta1 0.5, 0 for --beta2 0.9). From the second
// update on, beta1 weighs g1 against g2 and beta2 the size of the step: the losses of steps 2
// and 3 move by more than 1e-6 relative (measured 2.6e-6 and 2.6e-4 for --beta1 0.5, 2.2e-6
// and 1.5e-5 for --beta2 0.9). eps enters the first update already: 1e-3 is the size of many
// gradient elements here (measured 1.6e-5 at step 1).
void expect_adamw_flag(const std::string& flag, const std::string& value, int first_changed_step,
                       void (*set)(AdamWConfig&, double)) {
  const TrainedRun with_flag = train({{flag, value}}), plain = train({});
  ASSERT_EQ(with_flag.losses.size(), 4u) << with_flag.log;
  ASSERT_EQ(plain.losses.size(), 4u) << plain.log;
  for (int s = 0; s < 4; ++s) {
    if (s < first_changed_step)
      EXPECT_LE(rel(with_flag.losses[s], plain.losses[s]), 1e-7) << flag << " step " << s;
    else
      EXPECT_GT(rel(with_flag.losses[s], plain.losses[s]), 1e-6) << flag << " step " << s << ": no effect";
  }
  const double v = std::stod(value);
  EXPECT_EQ(with_flag.losses, train_in_process([&](TrainOptions& o) { set(o.optimizer, v); }))
      << flag << " " << value << " is not the run configured in-process with that value";
}

TEST(CliFlags, Beta1ReachesAdamWAndChangesTheLossFromStepTwo) {
  expect_adamw_flag("--beta1", "0.5", 2, [](AdamWConfig& a, double v) { a.beta1 = v; });
}

TEST(CliFlags, Beta2ReachesAdamWAndChangesTheLossFromStepTwo) {
  expect_adamw_flag("--beta2", "0.9", 2, [](AdamWConfig& a, double v) { a.beta2 = v; });
}

TEST(CliFlags, EpsReachesAdamWAndChangesTheFirstUpdate) {
  expect_adamw_flag("--eps", "1e-3", 1, [](AdamWConfig& a, double v) { a.eps = v; });
}

// ---- the fp16 loss scaler ----

// After step s the scaler has seen s + 1 steps: without inf/NaN it multiplies the scale by the
// growth factor after every `interval` clean steps (GradScaler's rule), so the logged scale is
// init x growth^floor((s + 1) / interval); the defaults (65536, x2 every 2000) keep 65536 here.
TEST(CliFlags, LossScaleInitGrowthAndIntervalSetTheScale) {
  const TrainedRun plain = train({{"--precision", "fp16"}, {"--steps", "5"}});
  const TrainedRun run = train({{"--precision", "fp16"}, {"--steps", "5"}, {"--loss-scale-init", "1024"},
                         {"--loss-scale-growth", "4"}, {"--loss-scale-interval", "2"}});
  ASSERT_EQ(run.scales.size(), 5u) << run.log;
  ASSERT_EQ(plain.scales.size(), 5u) << plain.log;
  for (int s = 0; s < 5; ++s) {
    EXPECT_EQ(plain.scales[s], 65536.0) << "step " << s;
    EXPECT_EQ(run.scales[s], 1024.0 * std::pow(4.0, (s + 1) / 2)) << "step " << s;
  }
}

// A scale of 1e30 overflows fp16 gradients on every step (fp16 ends at 65504): each step is
// skipped and the scale backs off by the factor given, 1e30 x 0.125^(s + 1) after step s
// (powers of two: exact in fp32).
TEST(CliFlags, LossScaleBackoffSetsTheScaleAfterAnOverflow) {
  const TrainedRun run = train({{"--precision", "fp16"}, {"--steps", "3"}, {"--loss-scale-init", "1e30"},
                         {"--loss-scale-backoff", "0.125"}});
  ASSERT_EQ(run.scales.size(), 3u) << run.log;
  float expect = 1e30f;
  for (int s = 0; s < 3; ++s) {
    expect *= 0.125f;
    EXPECT_EQ(run.scales[s], static_cast<double>(expect)) << "step " << s;
  }
  EXPECT_TRUE(contains(run.log, "skipped 3")) << run.log;
}

// ---- memory for compute: the same training, less memory ----

// Batch 4 as 2 micro-batches of 2 (the same dropout masks: they follow the global row) against
// batch 4 at once: the gradients are the same terms summed in another order, and the logged
// loss averages per-token losses computed row by row, so the losses agree to 16 eps relative,
// the bound tests/memory_checks.h justifies and measures (<= 1.4e-8) for accumulation in
// process. The activations are those of 2 rows instead of 4.
TEST(CliFlags, GradAccumTrainsTheFullBatchWithAMicroBatchsActivations) {
  const TrainedRun full = train({}), accumulated = train({{"--grad-accum", "2"}});
  ASSERT_EQ(full.losses.size(), 4u) << full.log;
  ASSERT_EQ(accumulated.losses.size(), 4u) << accumulated.log;
  for (int s = 0; s < 4; ++s)
    EXPECT_LE(rel(accumulated.losses[s], full.losses[s]), 16 * kFp32Eps) << "step " << s;
  EXPECT_LT(accumulated.alloc_mb[0], full.alloc_mb[0]) << "--grad-accum 2 kept the activations of the full batch";
}

// Recomputing activations in the backward runs the same kernels on the same inputs (dropout
// masks included): the same bits, with less activation memory kept.
TEST(CliFlags, RecomputeGivesTheSameBitsWithLessMemory) {
  const TrainedRun none = train({});
  ASSERT_EQ(none.losses.size(), 4u) << none.log;
  double alloc = none.alloc_mb[0];
  for (const char* mode : {"ffn", "layer"}) {
    const TrainedRun r = train({{"--recompute", mode}});
    EXPECT_EQ(r.losses, none.losses) << "--recompute " << mode;
    ASSERT_FALSE(r.alloc_mb.empty());
    EXPECT_LT(r.alloc_mb[0], alloc) << "--recompute " << mode << " keeps no fewer activations";
    alloc = r.alloc_mb[0];
  }
}

// ---- the CUDA backend's flags, on the SIMT emulator ----

// --tf32 rounds the emulated cuBLASLt's fp32 operands to TF32's 10 mantissa bits (simt/
// cublaslt.cpp), so the first step's loss (the initial parameters: forward only) moves by TF32's
// rounding: each product by at most 2^-10 relative, a few GEMMs in sequence, so well under 1e-2;
// and by far more than the fp32 noise separating the emulated run without it from the CPU
// backend's (reductions in other orders: 1e-6 relative bounds it). Measured: 3.9e-6 with
// --tf32, 6.7e-9 without.
TEST(CliFlags, Tf32ChangesTheEmulatedGemmsByTf32RoundingAndOnlyWhenAsked) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (-DTINYTRAIN_SIMT=OFF)";
#else
  const Flags one_step = {{"--steps", "1"}};
  Flags emu = one_step, tf32 = one_step;
  emu.emplace_back("--backend", "cuda-emu");
  tf32.emplace_back("--backend", "cuda-emu");
  tf32.emplace_back("--tf32", "");
  const TrainedRun cpu = train(one_step), plain = train(emu, 120.0), rounded = train(tf32, 120.0);
  ASSERT_EQ(cpu.losses.size(), 1u) << cpu.log;
  ASSERT_EQ(plain.losses.size(), 1u) << plain.log;
  ASSERT_EQ(rounded.losses.size(), 1u) << rounded.log;
  const double fp32_noise = rel(plain.losses[0], cpu.losses[0]), tf32_change = rel(rounded.losses[0], plain.losses[0]);
  EXPECT_LE(fp32_noise, 1e-6);
  EXPECT_GT(tf32_change, 10 * std::max(fp32_noise, 1e-7)) << "--tf32 made no difference";
  EXPECT_LT(tf32_change, 1e-2);
  std::printf("[ tf32     ] step-0 loss: |emu - cpu| %.2e relative, |emu --tf32 - emu| %.2e\n", fp32_noise,
              tf32_change);
#endif
}

// A step replayed as one CUDA graph runs the same kernels with the same arguments as eager
// launches: on runs of 3 steps (eager, captured, replayed) the same bits.
TEST(CliFlags, CudaGraphOnAndOffGiveTheSameBits) {
#ifndef TINYTRAIN_HAVE_SIMT
  GTEST_SKIP() << "this build has no SIMT emulator (-DTINYTRAIN_SIMT=OFF)";
#else
  const TrainedRun on = train({{"--backend", "cuda-emu"}, {"--steps", "3"}, {"--cuda-graph", "on"}}, 120.0);
  const TrainedRun off = train({{"--backend", "cuda-emu"}, {"--steps", "3"}, {"--cuda-graph", "off"}}, 120.0);
  ASSERT_EQ(on.losses.size(), 3u) << on.log;
  EXPECT_EQ(on.losses, off.losses);
  // step 1 eager, step 2 captured and replayed, step 3 replayed
  EXPECT_NE(on.log.find(" | 2 steps replayed a CUDA graph"), std::string::npos) << on.log;
  EXPECT_EQ(off.log.find("replayed a CUDA graph"), std::string::npos) << off.log;
  // The done line says what the captured graph holds; the metrics file has the same numbers
  // from the step that captured it on, null before (and always null without graphs).
  const auto found = regex_search_groups(on.log, " \\| CUDA graph (\\d+) nodes \\(gemm (\\d+), attention (\\d+), "
                                                 "elementwise (\\d+), reduction (\\d+), optimizer (\\d+), "
                                                 "memset/copy (\\d+)\\)");
  ASSERT_TRUE(found) << on.log;
  const std::vector<std::string>& m = *found;
  EXPECT_EQ(off.log.find("CUDA graph "), std::string::npos) << off.log;
  const char* kinds[] = {"gemm", "attention", "elementwise", "reduction", "optimizer", "memset_copy"};
  int sum = 0;
  ASSERT_EQ(on.graph_nodes.size(), 3u);
  EXPECT_TRUE(on.graph_nodes[0].is_null());
  for (int i = 0; i < 6; ++i) {
    sum += std::stoi(m[i + 2]);
    for (int step : {1, 2}) EXPECT_EQ(on.graph_nodes[step].at(kinds[i]).get<int>(), std::stoi(m[i + 2])) << kinds[i];
  }
  EXPECT_EQ(sum, std::stoi(m[1]));
  EXPECT_EQ(on.graph_nodes[2].at("total").get<int>(), sum);
  EXPECT_EQ(on.graph_nodes[2].at("other").get<int>(), 0);
  for (const nlohmann::json& nodes : off.graph_nodes) EXPECT_TRUE(nodes.is_null());
#endif
}

// ---- --init ----

// --init's default follows --arch: hf (transformers' initialisation) for gpt2 and llama, pytorch
// (the modules' defaults) without --arch or with seed; --init given beside --arch wins. The two
// schemes give other first losses (the initial parameters' loss, before any update), and one
// scheme the same bits, so each default shows as the scheme whose first loss it has.
TEST(CliFlags, InitDefaultsToTheArchsSchemeAndTheFlagOverridesIt) {
  const std::pair<std::string, std::string> defaults[] = {{"", "pytorch"}, {"seed", "pytorch"}, {"gpt2", "hf"},
                                                          {"llama", "hf"}};
  for (const auto& [arch, scheme] : defaults) {
    Flags flags = {{"--steps", "1"}};
    if (!arch.empty()) flags.emplace_back("--arch", arch);
    auto with_init = [&](const std::string& init) {
      Flags given = flags;
      given.emplace_back("--init", init);
      return train(given);
    };
    const TrainedRun plain = train(flags), hf = with_init("hf"), pytorch = with_init("pytorch");
    ASSERT_EQ(plain.losses.size(), 1u) << plain.log;
    ASSERT_EQ(hf.losses.size(), 1u) << hf.log;
    ASSERT_EQ(pytorch.losses.size(), 1u) << pytorch.log;
    EXPECT_NE(hf.losses[0], pytorch.losses[0]) << "--arch '" << arch << "': --init made no difference";
    EXPECT_EQ(plain.losses[0], scheme == "hf" ? hf.losses[0] : pytorch.losses[0])
        << "--arch '" << arch << "' does not default to --init " << scheme;
  }
}

TEST(CliFlags, InitRefusesAnUnknownSchemeInOneLine) {
  ScratchDir dir;
  std::vector<std::string> argv = {kBin, "train"};
  for (const std::string& a : with({{"--init", "xavier"}})) argv.push_back(a);
  expect_user_error(run_command(argv, dir.path()), {"--init", "xavier", "pytorch or hf"});
}

// ---- plan --ranks ----

// The bytes of one buffer in `plan`'s table ("optimizer    exp_avg    21248    0.02").
int64_t planned_bytes(const std::string& out, const std::string& group, const std::string& buffer) {
  const auto m = regex_search_groups(out, "(^|\n)" + group + " +" + buffer + " +([0-9]+) ");
  return m ? std::stoll((*m)[2]) : -1;
}

// ZeRO-1 keeps AdamW's two moments for a rank's shard only: ceil(P / W) elements rounded up to
// 64 (each shard starts 256-byte aligned), where one rank (or --zero 0) keeps all P.
TEST(CliFlags, PlanRanksShrinksTheZeroOneOptimizerStateToAShard) {
  ScratchDir dir;
  auto plan = [&](const Flags& overrides) {
    Flags base = kSmallRun;  // (plan takes the model, run and data-parallel flags, not --threads)
    base.erase(std::remove_if(base.begin(), base.end(), [](const auto& f) { return f.first == "--threads"; }),
               base.end());
    std::vector<std::string> argv = {kBin, "plan", "--device-memory", "1GiB"};
    for (const std::string& a : with(overrides, base)) argv.push_back(a);
    const CliResult r = run_command(argv, dir.path());
    EXPECT_TRUE(r.exited && r.exit_code == 0) << r.describe();
    return r.out;
  };
  const std::string one = plan({}), four = plan({{"--ranks", "4"}, {"--zero", "1"}}),
                    four_unsharded = plan({{"--ranks", "4"}, {"--zero", "0"}});
  const int64_t P = planned_bytes(one, "optimizer", "exp_avg") / 4;
  ASSERT_GT(P, 20000) << one;
  const int64_t shard = ((P + 3) / 4 + 63) / 64 * 64;
  EXPECT_EQ(planned_bytes(four, "optimizer", "exp_avg"), 4 * shard) << four;
  EXPECT_EQ(planned_bytes(four, "optimizer", "exp_avg_sq"), 4 * shard) << four;
  EXPECT_EQ(planned_bytes(four_unsharded, "optimizer", "exp_avg"), 4 * P) << four_unsharded;
  EXPECT_TRUE(contains(four, "per rank of 4")) << four;
}

}  // namespace
}  // namespace tt::test
