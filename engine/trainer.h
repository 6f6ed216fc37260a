// The trainer owns one training step: batch in, forward, backward, optimizer. It holds the
// model, the optimizer and the device-side token buffers, and reads the loss only when asked.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/arena.h"
#include "engine/config.h"
#include "engine/model.h"
#include "engine/train_options.h"
#include "optim/adamw.h"
#include "optim/loss_scaler.h"
#include "parallel/communicator.h"
#include "parallel/gradient_buckets.h"

namespace tt {

// Everything a training step reads that earlier steps wrote, on the host and unsharded:
// what a checkpoint holds besides the step (engine/io/checkpoint.h). The data and the dropout
// masks are not here: they are pure functions of (seed, step).
struct TrainingState {
  std::vector<float> params;               // (P) master weights, ParamLayout order
  std::vector<float> exp_avg, exp_avg_sq;  // (P) AdamW's moments, all of them even under ZeRO-1
  int32_t adamw_step = 0;                  // AdamW's step count (skipped steps do not count)
  float loss_scale = 1.0f;                 // the loss scaler (kernels/common/loss_scaler.h)
  int32_t growth_tracker = 0;
  int32_t skipped_steps = 0;
  int32_t first_skipped_step = -1;
};

class Trainer {
 public:
  // B = options.run.batch is the global batch of one optimizer step. With a communicator of W
  // ranks (nullptr: one rank), this rank takes rows [rank B/W, (rank+1) B/W) (W must divide B);
  // with options.grad_accum K it runs them as K micro-batches (K must divide B/W), and
  // activations are planned for B/(W K) rows. Every row keeps its global index: its tokens and
  // dropout masks are those of the single-process run. Reads the options' first group
  // (engine/train_options.h); the loss scaler is dynamic exactly for fp16 (loss_scaler_for).
  Trainer(Backend& backend, const TrainOptions& options, Communicator* comm = nullptr);

  // What the trainer's own arena holds (x, y, step, losses, loss_sum) for B rows, before
  // anything is allocated.
  static ArenaPlan plan_batch(int B, int T);
  // ZeRO-1's arena: this rank's shard of the summed gradients (shard elements, F32).
  static ArenaPlan plan_grad_shard(int64_t shard_elements);
  // The elements AdamW's state covers on each rank: all P, or one ZeRO-1 shard.
  static int64_t optimizer_elements(const ParamLayout& layout, int world_size, int zero_stage);

  Model& model() { return model_; }
  LossScaler& scaler() { return scaler_; }
  size_t bytes() const {
    return model_.bytes() + optimizer_.bytes() + scaler_.bytes() + batch_.bytes() + (grad_shard_ ? grad_shard_->bytes() : 0);
  }

  // Host parameters in ParamLayout order -> the backend's master weights (and working weights).
  void load_params(const float* host);
  // The whole training state, copied to the host, between steps. Collective: every rank
  // calls it. Under ZeRO-1 each rank holds one shard of the moments; the shards are
  // all-gathered through the gradient buffer, which is free between steps (forward_backward
  // zeroes it first), so a save allocates no backend memory beyond the plan.
  TrainingState read_state();
  // The reverse, before the first step: parameters (and working weights), this rank's part of
  // the moments (all of them, or its ZeRO-1 shard), AdamW's step count and the loss scaler.
  // A state read on any number of ranks loads on any other: it is unsharded. The caller has
  // checked it (sizes P, values in range: load_checkpoint).
  void load_state(const TrainingState& state);
  // x, y (B*T each, the global batch) host token ids, checked against the vocabulary, and the
  // training step whose dropout masks the next passes use: this rank's rows copied in together.
  void load_batch(const int32_t* x, const int32_t* y, uint32_t step);
  // Forward only, on the loaded batch (its first micro-batch): fills model().logits().
  void forward();
  // x, y (B*T each, the global batch): the batch's mean cross-entropy in evaluation mode (no
  // dropout, no gradients, nothing updated), summed over ranks like read_loss. Runs eagerly,
  // between steps (the next step loads its own batch); waits for the backend.
  double evaluate(const int32_t* x, const int32_t* y);
  // Zeroes the gradients, then forward and backward of every micro-batch of the loaded batch:
  // each micro-batch's loss gradient is divided by the tokens of the whole global batch, so
  // the gradients sum to those of its mean loss. With several ranks (zero 0), the last
  // micro-batch's backward all-reduces the gradients in buckets as it finishes them
  // (GradientBuckets), so every rank ends with the sum over ranks.
  void forward_backward();
  // Gradient check (global norm, inf/NaN), AdamW (skipped on inf/NaN), loss-scaler update,
  // working weights refreshed from the masters: all enqueued on the backend. ZeRO-1: the
  // gradients are reduce-scattered first, each rank checks and updates its shard (the norm
  // and the inf/NaN flag are summed over ranks, so every rank takes the same decision), and
  // the parameters are all-gathered.
  void optimizer_step();
  // One whole training step on the loaded batch: forward_backward, then optimizer_step. With
  // use_graph on a backend that has graphs, the first call runs eagerly (GEMM plans and
  // anything else created on first use), the second captures the step as one graph and
  // replays it, and later calls only replay: no host work per op, no sync inside the step.
  void train_step(bool use_graph);
  // How many train_step calls replayed the captured graph (0 with graphs off or unsupported).
  int graph_replays() const { return graph_replays_; }
  // The captured step's graph nodes by kind; nullopt until a step has been captured.
  std::optional<GraphNodeCount> graph_nodes() const { return graph_nodes_; }
  // Mean cross-entropy of the last forward_backward over the global batch; waits for the backend.
  double read_loss();
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }
  // Host time spent inside collectives so far, in seconds, with a host transport (MPI: the
  // call returns when the sum is done, so this is the communication time, waiting for the
  // slowest rank included). NCCL's collectives run on the stream: 0 here.
  double host_comm_seconds() const { return host_comm_seconds_; }
  int buckets_per_step() const { return buckets_ ? buckets_->buckets_sent() : 0; }

 private:
  DropoutContext dropout_context(int micro_batch, bool training = true) const;
  void zero_optimizer_step();  // ZeRO-1's optimizer_step
  // Runs one collective: after synchronising the backend when the transport works on host
  // memory, and timing it into host_comm_seconds_.
  template <typename Collective>
  void collective(Collective&& call);
  Tensor micro_batch_rows(const char* name, int micro_batch) const;  // rows of x, y or losses
  std::vector<float> read_floats(Tensor t) const;                      // an F32 tensor, copied to the host

  Backend& backend_;
  // (declared before model_: the rows each rank plans for come from the communicator)
  std::unique_ptr<Communicator> own_comm_;  // the one-rank communicator when none was given
  Communicator* comm_;
  DataParallelOptions data_parallel_;
  Model model_;
  AdamW optimizer_;
  LossScaler scaler_;
  std::unique_ptr<Arena> grad_shard_;  // ZeRO-1: plan_grad_shard
  std::unique_ptr<GradientBuckets> buckets_;  // several ranks, zero 0
  double host_comm_seconds_ = 0;
  Arena batch_;  // x (B,T), y (B,T) int32 token ids; step (1): the training step; losses (B,T) F32; loss_sum (1)
  std::vector<char> batch_image_;  // x, y and step laid out as in batch_, for one copy per step
  uint64_t seed_;
  int global_B_;  // rows of the global batch
  int B_, T_;     // B_: this rank's rows, global rows [first_row_, first_row_ + B_)
  int first_row_;
  int grad_accum_;  // micro-batches per optimizer step
  int steps_run_ = 0;      // train_step calls so far
  int graph_replays_ = 0;  // of which replayed the captured graph
  bool graph_ready_ = false;
  std::optional<GraphNodeCount> graph_nodes_;  // of the captured step
};

// "CUDA graph 50 nodes (gemm 27, attention 4, elementwise 10, reduction 6, optimizer 2,
// memset/copy 0)", with ", other N" when some node is of no named kind: what the train and
// profile commands print.
std::string graph_nodes_text(const GraphNodeCount& nodes);

// Throws InputError unless grad_accum is positive and divides the batch.
void check_grad_accum(int batch, int grad_accum);
// Throws InputError unless the world size divides the global batch.
void check_world_size(int batch, int world_size);
// Throws InputError unless --zero is 0 or 1 and --bucket-mb is finite and not negative.
void check_data_parallel(const DataParallelOptions& data_parallel);

}  // namespace tt
