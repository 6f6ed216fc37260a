// Checkpoints with data parallelism (ctest: mpirun -np 2, oversubscribed on 2 cores). W ranks
// with ZeRO-1 train 3 steps and save: each rank holds one shard of AdamW's moments, so the
// save all-gathers them and rank 0 writes the unsharded state. The file then resumes
//  - on W ranks with ZeRO-1: the straight W-rank run's steps bit for bit (same sums, same order);
//  - on W ranks without ZeRO-1 and on 1 rank: the straight W-rank run within the tolerances of
//    data parallelism (tests/memory_checks.h: the same training, float sums in another order),
// and the state a single rank loads is exactly the state the W ranks gathered.
#include <gtest/gtest.h>

#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <memory>

#include "engine/backend_select.h"
#include "engine/io/checkpoint.h"
#include "kernels/cpu/cpu_backend.h"
#include "parallel/communicator.h"
#include "tests/memory_checks.h"
#include "tests/mpi/world.h"

namespace tt {
namespace {

using namespace test;

Communicator& comm() { return world(); }

// A scratch directory every rank sees: rank 0 makes it and broadcasts its name.
std::string shared_scratch_dir() {
  std::vector<int32_t> name(64, 0);
  if (comm().rank() == 0) {
    char tmpl[] = "/tmp/tt_ckpt_ranks_XXXXXX";
    EXPECT_NE(mkdtemp(tmpl), nullptr);
    std::copy(tmpl, tmpl + sizeof tmpl, name.begin());
  }
  comm().broadcast(name.data(), static_cast<int64_t>(name.size()), DType::I32, 0);
  std::string dir;
  for (int32_t c : name)
    if (c != 0) dir += static_cast<char>(c);
  return dir;
}

const std::map<std::string, std::string> kData = {{"data", "random"}};

struct Run {
  std::vector<double> losses;  // of the steps it trained
  TrainingState state;         // after its last step
};

// Steps [first, last) of `o` on the ranks of `ranks` (nullptr: one rank), from `resume_from`
// or from init_params; saves after its last step to `save_to` when given.
Run train(const TrainOptions& o, Communicator* ranks, const DataParallelOptions& dp, int first, int last,
          const std::string& resume_from = "", const std::string& save_to = "") {
  auto cpu = make_cpu_backend();
  TrainOptions with = o;
  with.data_parallel = dp;
  Trainer trainer(*cpu, with, ranks);
  if (resume_from.empty())
    trainer.load_params(init_params(trainer.model().layout(), o.run.seed).data());
  else
    EXPECT_EQ(load_checkpoint(resume_from, trainer, o, kData), first);
  Run run;
  std::vector<int32_t> x(static_cast<size_t>(o.run.batch) * o.run.seq), y(x.size());
  for (int s = first; s < last; ++s) {
    random_batch(o.run.seed, static_cast<uint32_t>(s), o.run.batch, o.run.seq, o.model.vocab_size, x.data(), y.data());
    trainer.load_batch(x.data(), y.data(), static_cast<uint32_t>(s));
    trainer.train_step(false);
    run.losses.push_back(trainer.read_loss());
  }
  if (!save_to.empty()) save_checkpoint(save_to, trainer, last, o, kData);
  run.state = trainer.read_state();  // (collective: every rank of `ranks` calls it)
  return run;
}

// `other` against `straight` within data parallelism's tolerances: fp32 every loss and the
// final parameters; 16-bit the first loss and each tensor's update since `init`.
void expect_close(const ParamLayout& layout, const std::vector<float>& init, const Run& straight, const Run& other,
                  const TrainOptions& o) {
  const AccumulationTolerances tol =
      accumulation_tolerances(o.precision, static_cast<int64_t>(o.run.batch) * o.run.seq, o.optimizer.lr, o.run.steps);
  const size_t loss_steps = o.precision == Precision::FP32 ? straight.losses.size() : 1;
  for (size_t s = 0; s < loss_steps; ++s)
    EXPECT_LE(std::fabs(other.losses[s] - straight.losses[s]), tol.loss_rel * std::fabs(straight.losses[s]))
        << "loss " << s << ": " << other.losses[s] << " vs " << straight.losses[s];
  if (tol.param_abs > 0.0) {
    EXPECT_LE(max_abs_difference(other.state.params, straight.state.params), tol.param_abs);
  }
  if (tol.update_l2 > 0.0)
    for (const ParamInfo& p : layout.params()) {
      std::vector<float> ours(p.shape.numel()), theirs(p.shape.numel());
      for (int64_t i = 0; i < p.shape.numel(); ++i) {
        ours[i] = other.state.params[p.offset + i] - init[p.offset + i];
        theirs[i] = straight.state.params[p.offset + i] - init[p.offset + i];
      }
      EXPECT_LT(relative_l2(ours.data(), theirs.data(), p.shape.numel()), tol.update_l2) << p.name << " update";
    }
}

void check_resume_across_world_sizes(Precision precision) {
  set_cpu_threads(1);  // the ranks share 2 cores
  const int k = 3, steps = 6;
  const std::string dir = shared_scratch_dir();
  const DataParallelOptions zero1{1, 0.0}, zero0{0, 0.0};
  for (const MemoryCase& mc : memory_cases()) {  // dropout 0.1 in each
    SCOPED_TRACE(std::string(mc.name) + ", " + precision_name(precision));
    TrainOptions o;
    o.model = mc.config;
    o.optimizer.lr = 1e-3;
    o.run.batch = 8;  // divisible by 2 and 4 ranks
    o.run.seq = mc.T;
    o.run.steps = steps;
    o.run.seed = 21;
    o.precision = precision;
    const ParamLayout layout(mc.config);
    const std::vector<float> init = init_params(layout, o.run.seed);
    const std::string path = checkpoint_path(dir, k);

    const Run straight = train(o, &comm(), zero1, 0, steps);
    const Run saved = train(o, &comm(), zero1, 0, k, "", path);
    comm().barrier();  // rank 0 has written the file
    const std::vector<double> tail(straight.losses.begin() + k, straight.losses.end());

    const Run same_ranks = train(o, &comm(), zero1, k, steps, path);
    EXPECT_EQ(same_ranks.losses, tail) << "resumed on the same ranks with ZeRO-1: bit for bit";
    EXPECT_SAME_BITS(layout, same_ranks.state.params, straight.state.params, "parameters, resumed with ZeRO-1");
    EXPECT_SAME_BITS(layout, same_ranks.state.exp_avg_sq, straight.state.exp_avg_sq, "exp_avg_sq, resumed with ZeRO-1");

    const Run without_zero = train(o, &comm(), zero0, k, steps, path);
    expect_close(layout, init, Run{tail, straight.state}, without_zero, o);

    // One rank, on every rank: the unsharded file, loaded whole.
    {
      auto cpu = make_cpu_backend();
      TrainOptions one_rank = o;
      one_rank.data_parallel = DataParallelOptions{};
      Trainer one(*cpu, one_rank);
      load_checkpoint(path, one, o, kData);
      const TrainingState loaded = one.read_state();
      EXPECT_SAME_BITS(layout, loaded.exp_avg, saved.state.exp_avg, "exp_avg gathered from the shards, loaded on 1 rank");
      EXPECT_SAME_BITS(layout, loaded.exp_avg_sq, saved.state.exp_avg_sq, "exp_avg_sq, loaded on 1 rank");
      EXPECT_EQ(loaded.adamw_step, saved.state.adamw_step);
    }
    const Run one_rank = train(o, nullptr, zero0, k, steps, path);
    expect_close(layout, init, Run{tail, straight.state}, one_rank, o);
    if (comm().rank() == 0)
      std::printf("[ ranks    ] %s, %s: saved on %d ranks with ZeRO-1; resumed there bit for bit; without ZeRO-1 "
                  "max|dp| %.3e, on 1 rank max|dp| %.3e (lr %g)\n",
                  mc.name, precision_name(precision), comm().world_size(),
                  max_abs_difference(without_zero.state.params, straight.state.params),
                  max_abs_difference(one_rank.state.params, straight.state.params), o.optimizer.lr);
    comm().barrier();  // every rank has read the file before the next case overwrites it
  }
  if (comm().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(CheckpointRanks, RunsOnSeveralRanks) {
  EXPECT_GT(comm().world_size(), 1) << "run under mpirun -np W, W > 1 (ctest does)";
}
TEST(CheckpointRanks, Fp32ZeroOneCheckpointResumesOnAnyWorldSize) { check_resume_across_world_sizes(Precision::FP32); }
TEST(CheckpointRanks, Bf16ZeroOneCheckpointResumesOnAnyWorldSize) { check_resume_across_world_sizes(Precision::BF16); }
TEST(CheckpointRanks, Fp16ZeroOneCheckpointResumesOnAnyWorldSize) { check_resume_across_world_sizes(Precision::FP16); }

}  // namespace
}  // namespace tt
