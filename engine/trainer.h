// The trainer owns one training step: batch in, forward, backward, optimizer. It holds the
// model, the optimizer and the device-side token buffers, and reads the loss only when asked.
#pragma once
#include <cstdint>
#include <ostream>
#include <vector>

#include "kernels/arena.h"
#include "engine/config.h"
#include "engine/model.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"

namespace tt {

class Trainer {
 public:
  // B is the batch of one optimizer step; with grad_accum K it runs as K micro-batches of
  // B/K sequences (K must divide B), and activations are planned for B/K.
  Trainer(Backend& backend, const ModelConfig& model, const AdamWConfig& optimizer, int B, int T, uint64_t seed,
          Precision precision = Precision::FP32, const LossScalerConfig& scaler = LossScalerConfig{},
          Recompute recompute = Recompute::None, int grad_accum = 1);

  // What the trainer's own arena holds (x, y, step, losses), before anything is allocated.
  static ArenaPlan plan_batch(int B, int T);

  Model& model() { return model_; }
  LossScaler& scaler() { return scaler_; }
  size_t bytes() const { return model_.bytes() + optimizer_.bytes() + scaler_.bytes() + batch_.bytes(); }

  // Host parameters in ParamLayout order -> the backend's master weights (and working weights).
  void load_params(const float* host);
  // x, y (B*T each) host token ids, checked against the vocabulary, and the training step
  // whose dropout masks the next passes use: copied in together.
  void load_batch(const int32_t* x, const int32_t* y, uint32_t step);
  // Forward only, on the loaded batch (its first micro-batch): fills model().logits().
  void forward();
  // Zeroes the gradients, then forward and backward of every micro-batch of the loaded batch:
  // each micro-batch's loss gradient is divided by the tokens of the whole batch, so the
  // gradients sum to those of the whole batch's mean loss.
  void forward_backward();
  // Gradient check (global norm, inf/NaN), AdamW (skipped on inf/NaN), loss-scaler update,
  // working weights refreshed from the masters: all enqueued on the backend.
  void optimizer_step();
  // One whole training step on the loaded batch: forward_backward, then optimizer_step. With
  // use_graph on a backend that has graphs, the first call runs eagerly (GEMM plans and
  // anything else created on first use), the second captures the step as one graph and
  // replays it, and later calls only replay: no host work per op, no sync inside the step.
  void train_step(bool use_graph);
  // Mean cross-entropy of the last forward_backward over all micro-batches; waits for the backend.
  double read_loss();

 private:
  DropoutContext dropout_context(int micro_batch) const;
  Tensor micro_batch_rows(const char* name, int micro_batch) const;  // rows of x, y or losses

  Backend& backend_;
  Model model_;
  AdamW optimizer_;
  LossScaler scaler_;
  Arena batch_;  // x (B,T), y (B,T) int32 token ids; step (1): the training step; losses (B,T) F32
  std::vector<char> batch_image_;  // x, y and step laid out as in batch_, for one copy per step
  uint64_t seed_;
  int B_, T_;
  int grad_accum_;  // micro-batches per optimizer step
  int steps_run_ = 0;      // train_step calls so far
  bool graph_ready_ = false;
};

// Throws InputError unless grad_accum is positive and divides the batch.
void check_grad_accum(int batch, int grad_accum);

struct TrainOptions {
  ModelConfig model;
  AdamWConfig optimizer;
  RunConfig run;
  int log_every = 10;
  bool cuda_graph = true;  // replay each step as one CUDA graph where the backend has graphs
  Precision precision = Precision::FP32;
  Recompute recompute = Recompute::None;
  int grad_accum = 1;
  LossScalerConfig loss_scaler;  // .dynamic is set from the precision (fp16 only)
};

// The `tinytrain train` loop on random tokens: logs "step | loss | alloc" and the speed.
void run_training(Backend& backend, const TrainOptions& options, std::ostream& log);

}  // namespace tt
