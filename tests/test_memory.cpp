// The memory features on the CPU backend: recompute none|ffn|layer gives the same bits;
// gradient accumulation gives the single batch's gradients, loss and (on the scale of lr)
// parameters, with dropout and with fp16 loss scaling; the activation plan shrinks with
// recompute and with accumulation by exactly what is no longer kept. The checks live in
// memory_checks.h; test_cuda_memory runs them on the CUDA backend.
#include <gtest/gtest.h>

#include "engine/backend_select.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/memory_checks.h"

namespace tt {
namespace {

using namespace tt::test;

// These models are tiny: one CPU thread runs them fastest, and keeps them clear of OpenMP
// spin-waits on a loaded machine (seen with 2 threads under load: 70 s instead of 0.1 s for one
// test). Every check also passes with 2 threads (OpenBLAS then rounds a little differently).
class OneCpuThread : public ::testing::Environment {
 public:
  void SetUp() override { set_cpu_threads(1); }
};
::testing::Environment* const kOneCpuThread = ::testing::AddGlobalTestEnvironment(new OneCpuThread);

// ---- recompute ----

TEST(Recompute, Fp32GivesTheSameBitsAsKeepingActivations) {
  auto cpu = make_cpu_backend();
  check_recompute_is_bitwise(*cpu, Precision::FP32);
}

TEST(Recompute, Bf16GivesTheSameBitsAsKeepingActivations) {
  auto cpu = make_cpu_backend();
  check_recompute_is_bitwise(*cpu, Precision::BF16);
}

TEST(Recompute, Fp16WithLossScalingGivesTheSameBitsAsKeepingActivations) {
  auto cpu = make_cpu_backend();
  check_recompute_is_bitwise(*cpu, Precision::FP16);
}

// ---- gradient accumulation ----

TEST(GradAccumulation, Fp32WithoutDropoutMatchesTheSingleBatch) {
  auto cpu = make_cpu_backend();
  AccumulationStats stats;
  check_accumulation(*cpu, 0.0f, Precision::FP32, stats);
  print_accumulation_stats("fp32, dropout 0", stats);
}

TEST(GradAccumulation, Fp32WithDropoutMatchesTheSingleBatch) {
  auto cpu = make_cpu_backend();
  AccumulationStats stats;
  check_accumulation(*cpu, 0.1f, Precision::FP32, stats);
  print_accumulation_stats("fp32, dropout 0.1", stats);
}

// fp16 with dynamic loss scaling: no step is skipped, and the (scaled) gradients agree with
// the single batch's within the 16-bit bounds of memory_checks.h (accumulation_tolerances:
// an activation rounded to the neighbouring 16-bit value shows at ~u in few-term sums).
TEST(GradAccumulation, Fp16WithLossScalingMatchesTheSingleBatch) {
  auto cpu = make_cpu_backend();
  AccumulationStats stats;
  check_accumulation(*cpu, 0.1f, Precision::FP16, stats);
  print_accumulation_stats("fp16 + loss scaling, dropout 0.1", stats);
}

TEST(GradAccumulation, Bf16MatchesTheSingleBatch) {
  auto cpu = make_cpu_backend();
  AccumulationStats stats;
  check_accumulation(*cpu, 0.1f, Precision::BF16, stats);
  print_accumulation_stats("bf16, dropout 0.1", stats);
}

TEST(GradAccumulation, TheCheckTellsFullBatchMasksFromWrongOnes) {
  auto cpu = make_cpu_backend();
  check_accumulation_detects_wrong_masks(*cpu);
}

// train_step (no graphs on the CPU: every step eager) with micro-batches and recompute gives
// the bits of forward_backward + optimizer_step without recompute.
TEST(GradAccumulation, TrainStepWithMicroBatchesAndRecomputeGivesTheSameBits) {
  auto cpu = make_cpu_backend();
  for (Precision precision : {Precision::FP32, Precision::BF16, Precision::FP16})
    check_graph_replay_with_accumulation_and_recompute(*cpu, precision);
}

// Trainer's contract says K must divide B. The CLI checks it (--grad-accum), but the Trainer
// itself takes B = 8, K = 3 silently: micro-batches of 8/3 = 2 rows, 3 of them, so rows 6 and 7
// never run while the loss is still divided by all 8 rows' tokens: quietly wrong gradients
// for any caller of the class. It should refuse.
TEST(GradAccumulation, TrainerRefusesAGradAccumThatDoesNotDivideTheBatch) {
  auto cpu = make_cpu_backend();
  const MemoryCase mc = memory_cases()[0];
  TrainOptions o = test::trainer_options(mc.config, AdamWConfig{}, 8, mc.T, 1);
  o.grad_accum = 3;
  EXPECT_ANY_THROW(Trainer(*cpu, o));
}

// ---- the activation plan ----

TEST(ActivationPlan, SeedConfigShrinksFromNoneToFfnToLayerByWhatIsNotKept) {
  check_seed_plan(DType::F32);
  check_seed_plan(DType::BF16);
}

TEST(ActivationPlan, RecomputeLayerGrowsByOneLayerOutputPerLayer) { check_plan_growth_with_depth(); }

TEST(ActivationPlan, TrainerBytesShrinkByTheActivationsOfBOverK) {
  auto cpu = make_cpu_backend();
  check_trainer_bytes_with_accumulation(*cpu);
}

}  // namespace
}  // namespace tt
