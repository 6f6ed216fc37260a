// The memory features on the CUDA backend, with the checks of test_memory (memory_checks.h):
// recompute none|ffn|layer gives the same bits; gradient accumulation gives the single batch's
// gradients, loss and (on the scale of lr) parameters, with dropout and with fp16 loss scaling;
// a step with micro-batches and recompute replays as a CUDA graph with the eager bits; the
// trainer's activation arena is the plan for B/K. Without a usable GPU they run on the SIMT
// emulator (tests/cuda_test_util.h).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/device_query.h"
#include "tests/memory_checks.h"
#include "tests/cuda_test_util.h"
#include "tests/reduced_size.h"

namespace tt {
namespace {

using namespace tt::test;


// ---- recompute ----

TEST(CudaRecompute, Fp32GivesTheSameBitsAsKeepingActivations) {
  REQUIRE_CUDA(cuda);
  check_recompute_is_bitwise(*cuda, Precision::FP32);
}

TEST(CudaRecompute, Bf16GivesTheSameBitsAsKeepingActivations) {
  REQUIRE_CUDA(cuda);
  check_recompute_is_bitwise(*cuda, Precision::BF16);
}

TEST(CudaRecompute, Fp16WithLossScalingGivesTheSameBitsAsKeepingActivations) {
  REQUIRE_CUDA(cuda);
  check_recompute_is_bitwise(*cuda, Precision::FP16);
}

// ---- gradient accumulation ----

TEST(CudaGradAccumulation, Fp32WithoutDropoutMatchesTheSingleBatch) {
  REQUIRE_CUDA(cuda);
  AccumulationStats stats;
  check_accumulation(*cuda, 0.0f, Precision::FP32, stats);
  print_accumulation_stats("cuda fp32, dropout 0", stats);
}

TEST(CudaGradAccumulation, Fp32WithDropoutMatchesTheSingleBatch) {
  REQUIRE_CUDA(cuda);
  AccumulationStats stats;
  check_accumulation(*cuda, 0.1f, Precision::FP32, stats);
  print_accumulation_stats("cuda fp32, dropout 0.1", stats);
}

TEST(CudaGradAccumulation, Fp16WithLossScalingMatchesTheSingleBatch) {
  REQUIRE_CUDA(cuda);
  AccumulationStats stats;
  check_accumulation(*cuda, 0.1f, Precision::FP16, stats);
  print_accumulation_stats("cuda fp16 + loss scaling, dropout 0.1", stats);
}

TEST(CudaGradAccumulation, Bf16MatchesTheSingleBatch) {
  REQUIRE_CUDA(cuda);
  AccumulationStats stats;
  check_accumulation(*cuda, 0.1f, Precision::BF16, stats);
  print_accumulation_stats("cuda bf16, dropout 0.1", stats);
}

TEST(CudaGradAccumulation, TheCheckTellsFullBatchMasksFromWrongOnes) {
  REQUIRE_CUDA(cuda);
  check_accumulation_detects_wrong_masks(*cuda);
}

// ---- CUDA graphs ----

// At reduced size (tests/reduced_size.h: under the sanitizers the three precisions take a
// minute and a half or more) fp16 alone, the step that captures the most: 16-bit storage and
// the dynamic loss scaler. The fp32 and bf16 kernels of the same steps run there eagerly, in
// CudaRecompute and CudaGradAccumulation.
TEST(CudaGraphMemory, StepWithMicroBatchesAndRecomputeReplaysWithTheEagerBits) {
  REQUIRE_CUDA(cuda);
  std::vector<Precision> precisions = {Precision::FP32, Precision::BF16, Precision::FP16};
  if (reduced_size()) precisions = {Precision::FP16};
  for (Precision precision : precisions) check_graph_replay_with_accumulation_and_recompute(*cuda, precision);
}

// ---- the activation arena ----

TEST(CudaActivationPlan, TrainerBytesShrinkByTheActivationsOfBOverK) {
  REQUIRE_CUDA(cuda);
  check_trainer_bytes_with_accumulation(*cuda);
}

}  // namespace
}  // namespace tt
