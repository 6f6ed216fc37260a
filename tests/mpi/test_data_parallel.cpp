// Data parallelism on the CPU backend: W MPI ranks (ctest: mpirun -np 2 and -np 4,
// oversubscribed on 2 cores) each train their B/W rows of every global batch, and must
// match the single-process run of the same global batch, which every rank also runs itself:
// the first step's gradients, every loss, and the final parameters (fp32) or each tensor's
// update (bf16, fp16), within the tolerances of gradient accumulation (tests/memory_checks.h),
// which splits the batch the same way (by rows, keeping each row's global dropout masks).
#include <gtest/gtest.h>

#include <memory>

#include "engine/backend_select.h"
#include "kernels/cpu/cpu_backend.h"
#include "parallel/communicator.h"
#include "tests/memory_checks.h"

namespace tt {
namespace {

using namespace test;

Communicator& comm() {
  static std::unique_ptr<Communicator> c = make_communicator("cpu");
  return *c;
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
    for (int K : {1, 2}) {  // and with gradient accumulation inside each rank
      if (o.B / comm().world_size() % K != 0) continue;
      o.grad_accum = K;
      SCOPED_TRACE(std::string(mc.name) + ", " + std::to_string(comm().world_size()) + " ranks, grad_accum " +
                   std::to_string(K));
      const RunResult ranks = run_steps(*cpu, mc, o);
      expect_same_training(layout, init, single, ranks, tol, o, std::string(mc.name) + " K=" + std::to_string(K),
                           stats);
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

// The batch must split evenly: one line naming both numbers.
TEST(DataParallel, BatchNotDivisibleByTheRanksIsRefused) {
  auto cpu = make_cpu_backend();
  const int B = comm().world_size() + 1;
  try {
    Trainer(*cpu, test::small_model(8, 0.0f), AdamWConfig{}, B, 8, 1, Precision::FP32, LossScalerConfig{},
            Recompute::None, 1, &comm());
    ADD_FAILURE() << "a batch of " << B << " rows was split across " << comm().world_size() << " ranks";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--batch (" + std::to_string(B) + ")"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(comm().world_size()) + " ranks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tt
