// The seed workload's training loop for tests that compare whole runs (test_cuda_training,
// test_cudnn_attention): random tokens, dropout as configured, losses of every step and the
// parameters after the last one.
#pragma once
#include <string>
#include <vector>

#include "engine/config.h"
#include "engine/token_batch.h"
#include "engine/init.h"
#include "engine/trainer.h"
#include "kernels/backend.h"
#include "tests/test_models.h"

namespace tt::test {

struct TrainingRun {
  std::vector<double> losses;   // every step's loss
  std::vector<float> params;    // after the last step
  std::string attention_note;   // the model's line on library attention ("" when not asked)
  LossScalerStatus scaler;      // after the last step (skipped steps, scale)
  int graph_replays = 0;        // steps that replayed the captured CUDA graph (Trainer::graph_replays)
};

// `steps` steps of batch 16 x seq 64 on `backend`, AdamW lr 1e-4, seed 1337.
inline TrainingRun train_seed_workload(Backend& backend, int steps, bool use_graph,
                                       const ModelConfig& config = ModelConfig{},
                                       Precision precision = Precision::FP32) {
  const int B = 16, T = 64;
  const int64_t seed = 1337;
  AdamWConfig opt;
  opt.lr = 1e-4;
  TrainOptions o = trainer_options(config, opt, B, T, seed);
  o.precision = precision;
  Trainer trainer(backend, o);
  trainer.load_params(init_params(trainer.model().layout(), seed).data());
  TrainingRun run;
  run.attention_note = trainer.model().attention_note();
  std::vector<int32_t> x(B * T), y(B * T);
  for (int s = 0; s < steps; ++s) {
    random_batch(seed, s, B, T, config.vocab_size, x.data(), y.data());
    trainer.load_batch(x.data(), y.data(), s);
    trainer.train_step(use_graph);
    run.losses.push_back(trainer.read_loss());
  }
  run.scaler = trainer.scaler().read();
  run.graph_replays = trainer.graph_replays();
  run.params.resize(trainer.model().params().numel());
  backend.copy_to_host(run.params.data(), trainer.model().params().data, trainer.model().params().bytes());
  return run;
}

}  // namespace tt::test
