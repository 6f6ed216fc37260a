// Data parallelism on the CPU backend: W MPI ranks (ctest: mpirun -np 2 and -np 4,
// oversubscribed on 2 cores) each train their B/W rows of every global batch, and must
// match the single-process run of the same global batch, which every rank also runs itself:
// the first step's gradients, every loss, and the final parameters (fp32) or each tensor's
// update (bf16, fp16), within the tolerances of gradient accumulation (tests/memory_checks.h),
// which splits the batch the same way (by rows, keeping each row's global dropout masks).
// Every case runs with the gradients all-reduced once after the backward, in small buckets
// during it, and with ZeRO-1 (reduce-scatter, a shard's AdamW, all-gather): the same sums in
// another order, so the same tolerances.
#include <gtest/gtest.h>

#include <memory>

#include "engine/backend_select.h"
#include "kernels/cpu/cpu_backend.h"
#include "engine/init.h"
#include "engine/lora.h"
#include "engine/memory_plan.h"
#include "engine/token_batch.h"
#include "parallel/communicator.h"
#include "tests/memory_checks.h"
#include "tests/mpi/world.h"

namespace tt {
namespace {

using namespace test;

Communicator& comm() { return world(); }

// One all-reduce after the backward; buckets of 1 KiB (256 floats: one per finished layer,
// so the all-reduces really interleave with the backward); ZeRO-1.
std::vector<DataParallelOptions> data_parallel_variants() {
  return {DataParallelOptions{0, 0.0}, DataParallelOptions{0, 1.0 / 1024}, DataParallelOptions{1, 0.0}};
}

std::string variant_name(const DataParallelOptions& dp) {
  if (dp.zero_stage == 1) return "zero 1";
  return dp.bucket_mib > 0 ? "buckets" : "one all-reduce";
}

void check_data_parallel(float dropout, Precision precision) {
  set_cpu_threads(1);  // the ranks share 2 cores
  auto cpu = make_cpu_backend();
  AccumulationStats stats;
  for (MemoryCase mc : memory_cases()) {
    mc.config.dropout = dropout;
    const ParamLayout layout(mc.config);
    const std::vector<float> init = init_params(layout, RunOptions{}.seed);
    RunOptions o;
    o.precision = precision;
    o.B = 8;  // divisible by 2 and 4 ranks
    const AccumulationTolerances tol =
        accumulation_tolerances(precision, static_cast<int64_t>(o.B) * mc.T, o.lr, o.steps);
    stats.tol = tol;
    const RunResult single = run_steps(*cpu, mc, o);
    o.comm = &comm();
    for (const DataParallelOptions& dp : data_parallel_variants()) {
      for (int K : {1, 2}) {  // and with gradient accumulation inside each rank
        if (o.B / comm().world_size() % K != 0) continue;
        o.grad_accum = K;
        o.data_parallel = dp;
        const std::string what = std::string(mc.name) + ", " + std::to_string(comm().world_size()) + " ranks, " +
                                 variant_name(dp) + ", grad_accum " + std::to_string(K);
        SCOPED_TRACE(what);
        const RunResult ranks = run_steps(*cpu, mc, o);
        expect_same_training(layout, init, single, ranks, tol, o, what, stats);
      }
    }
  }
  if (comm().rank() == 0) print_accumulation_stats(precision_name(precision), stats);
}

TEST(DataParallel, RunsOnSeveralRanks) {
  EXPECT_GT(comm().world_size(), 1) << "run under mpirun -np W, W > 1 (ctest does)";
}
TEST(DataParallel, Fp32WithDropoutMatchesTheSingleProcess) { check_data_parallel(0.1f, Precision::FP32); }
TEST(DataParallel, Fp32WithoutDropoutMatchesTheSingleProcess) { check_data_parallel(0.0f, Precision::FP32); }
TEST(DataParallel, Bf16MatchesTheSingleProcess) { check_data_parallel(0.1f, Precision::BF16); }
TEST(DataParallel, Fp16WithLossScalingMatchesTheSingleProcess) { check_data_parallel(0.1f, Precision::FP16); }

// The bucket cuts: with 1 KiB buckets every finished layer (and the head) starts its own
// all-reduce during the backward; with 0, one all-reduce after it.
TEST(DataParallel, SmallBucketsAreSentDuringTheBackward) {
  set_cpu_threads(1);
  auto cpu = make_cpu_backend();
  const ModelConfig config = test::small_model(8, 0.0f);
  for (double bucket_mib : {0.0, 1.0 / 1024}) {
    TrainOptions o = test::trainer_options(config, AdamWConfig{}, 4 * comm().world_size(), 8, 1);
    o.data_parallel = DataParallelOptions{0, bucket_mib};
    Trainer trainer(*cpu, o, &comm());
    trainer.load_params(init_params(trainer.model().layout(), 1).data());
    std::vector<int32_t> x(static_cast<size_t>(4) * comm().world_size() * 8, 1), y(x.size(), 2);
    trainer.load_batch(x.data(), y.data(), 0);
    trainer.forward_backward();
    // head (+ final norm), n_layer layers, embedding: each at least 256 floats in small_model
    EXPECT_EQ(trainer.buckets_per_step(), bucket_mib > 0 ? config.n_layer + 2 : 1) << bucket_mib << " MiB";
  }
}

// ZeRO-1 keeps 1/W of AdamW's state per rank: what the plan says is what the trainer holds,
// and the optimizer group shrinks by (W-1)/W (the shard's summed gradients count as weights).
TEST(DataParallel, ZeroOneHoldsWhatThePlanSays) {
  auto cpu = make_cpu_backend();
  TrainOptions o;
  o.model = test::small_model(8, 0.0f);
  o.run.batch = 2 * comm().world_size();
  o.run.seq = 8;
  o.ranks = comm().world_size();
  size_t optimizer_bytes[2];
  for (int zero : {0, 1}) {
    o.data_parallel.zero_stage = zero;
    const MemoryPlan plan = plan_training(o, "cpu");
    Trainer trainer(*cpu, o, &comm());
    EXPECT_EQ(trainer.bytes(), plan.device_bytes()) << "zero " << zero;
    optimizer_bytes[zero] = plan.group_bytes("optimizer");
  }
  // zero 0: exp_avg + exp_avg_sq (2P floats); zero 1: the same for one shard (2 P/W, the
  // shard rounded up to 64 floats), each arena rounded up to its alignment
  const double P = static_cast<double>(ParamLayout(o.model).total()), W = comm().world_size();
  EXPECT_NEAR(static_cast<double>(optimizer_bytes[0]), 2 * 4 * P, 1024.0);
  EXPECT_NEAR(static_cast<double>(optimizer_bytes[1]), 2 * 4 * P / W, 2 * 4 * 64 + 1024.0);
}

// The batch must split evenly: one line naming both numbers.
// LoRA (engine/lora.h): the trainable buffers are the adapters, so they alone are reduced (the
// all-reduce, buckets and ZeRO-1 see only them); W ranks match the single process with the
// fp32 accumulation tolerances above, dropout on the model and the adapters' inputs: the first
// step's adapter gradients (summed in grads() without ZeRO), every loss, and the adapters after
// the last step.
TEST(DataParallel, LoraReducesOnlyTheAdaptersAndMatchesTheSingleProcess) {
  set_cpu_threads(1);
  auto cpu = make_cpu_backend();
  const ModelConfig c = small_llama(16, 0.1f);
  const int B = 8, T = 16, steps = 3;
  const double lr = 1e-3;
  AdamWConfig opt;
  opt.lr = lr;
  const std::vector<float> base = init_params(ParamLayout(c), c, 3, InitScheme::HuggingFace);
  auto run = [&](Communicator* ranks, const DataParallelOptions& dp, std::vector<float>& first_grads) {
    TrainOptions o = test::trainer_options(c, opt, B, T, 21);
    o.lora.rank = 4;
    o.lora.dropout = 0.1f;
    o.lora.targets = lora_module_names(c);
    o.data_parallel = dp;
    Trainer trainer(*cpu, o, ranks);
    trainer.model().load_base(base.data());
    trainer.load_params(lora_init(trainer.model().layout(), 21).data());
    EXPECT_EQ(trainer.model().grads().numel(), lora_layout(c, o.lora).total());  // all that is reduced
    std::vector<int32_t> x(B * T), y(B * T);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      random_batch(21, s, B, T, c.vocab_size, x.data(), y.data());
      trainer.load_batch(x.data(), y.data(), s);
      trainer.forward_backward();
      if (s == 0) first_grads = read_floats(*cpu, trainer.model().grads());
      trainer.optimizer_step();
      losses.push_back(trainer.read_loss());
    }
    std::vector<float> adapters = read_floats(*cpu, trainer.model().params());
    adapters.insert(adapters.end(), losses.begin(), losses.end());  // (losses last, for one return)
    return adapters;
  };
  const AccumulationTolerances tol = accumulation_tolerances(Precision::FP32, int64_t{B} * T, lr, steps);
  std::vector<float> single_grads, ranks_grads;
  const std::vector<float> single = run(nullptr, {}, single_grads);
  for (const DataParallelOptions& dp : data_parallel_variants()) {
    SCOPED_TRACE(variant_name(dp));
    const std::vector<float> ranks = run(&comm(), dp, ranks_grads);
    ASSERT_EQ(ranks.size(), single.size());
    float grad_scale = 0.0f;
    for (float g : single_grads) grad_scale = std::max(grad_scale, std::fabs(g));
    // (ZeRO-1 sums the gradients into each rank's shard, not into grads(): compared through the adapters)
    for (size_t i = 0; dp.zero_stage == 0 && i < single_grads.size(); ++i)
      ASSERT_LE(std::fabs(ranks_grads[i] - single_grads[i]), tol.grad_rel * grad_scale) << "gradient " << i;
    const size_t adapters = single.size() - steps;
    for (size_t i = 0; i < adapters; ++i) ASSERT_NEAR(ranks[i], single[i], tol.param_abs) << "adapter " << i;
    for (int s = 0; s < steps; ++s)
      EXPECT_NEAR(ranks[adapters + s], single[adapters + s], tol.loss_rel * single[adapters + s]) << "step " << s;
  }
}

TEST(DataParallel, BatchNotDivisibleByTheRanksIsRefused) {
  auto cpu = make_cpu_backend();
  const int B = comm().world_size() + 1;
  try {
    Trainer(*cpu, test::trainer_options(test::small_model(8, 0.0f), AdamWConfig{}, B, 8, 1), &comm());
    ADD_FAILURE() << "a batch of " << B << " rows was split across " << comm().world_size() << " ranks";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--batch (" + std::to_string(B) + ")"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(comm().world_size()) + " ranks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tt
