// Training step orchestration: one step's forward, backward, collectives and optimizer.
#include "engine/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/token_batch.h"

namespace tt {

void check_grad_accum(int batch, int grad_accum) {
  if (grad_accum <= 0 || batch % grad_accum != 0)
    throw InputError("invalid config: --grad-accum (" + std::to_string(grad_accum) +
                     ") must be positive and divide --batch (" + std::to_string(batch) + ")");
}

void check_world_size(int batch, int world_size) {
  if (batch % world_size != 0)
    throw InputError("invalid config: --batch (" + std::to_string(batch) + ") must be divisible by the " +
                     std::to_string(world_size) + " ranks: each rank takes batch / ranks rows");
}

void check_data_parallel(const DataParallelOptions& dp) {
  if (dp.zero_stage != 0 && dp.zero_stage != 1)
    throw InputError("invalid config: --zero must be 0 or 1 (ZeRO-1: the optimizer state sharded), got " +
                     std::to_string(dp.zero_stage));
  if (!(std::isfinite(dp.bucket_mib) && dp.bucket_mib >= 0))
    throw InputError("invalid config: --bucket-mb must be a size in MiB, 0 or more");
}

namespace {

// The rows of one rank: its share of the global batch (checked first, as it sizes everything).
int rows_per_rank(int B, const Communicator& comm) {
  check_world_size(B, comm.world_size());
  return B / comm.world_size();
}

}  // namespace

ArenaPlan Trainer::plan_grad_shard(int64_t shard_elements) {
  ArenaPlan plan;
  plan.add("grad_shard", DType::F32, {shard_elements});
  return plan;
}

int64_t Trainer::optimizer_elements(const ParamLayout& layout, int world_size, int zero_stage) {
  return zero_stage == 1 ? layout.shard_elements(world_size) : layout.total();
}

ArenaPlan Trainer::plan_batch(int B, int T) {
  ArenaPlan plan;
  plan.add("x", DType::I32, {B, T});
  plan.add("y", DType::I32, {B, T});
  plan.add("step", DType::I32, {1});
  plan.add("losses", DType::F32, {B, T});
  plan.add("loss_sum", DType::F32, {1});  // several NCCL ranks: the logged loss's sum over ranks
  return plan;
}

Trainer::Trainer(Backend& backend, const TrainOptions& o, Communicator* comm)
    : backend_(backend),
      own_comm_(comm ? nullptr : make_single_rank_communicator()),
      comm_(comm ? comm : own_comm_.get()),
      // (one rank has nothing to shard: ZeRO-1 is plain AdamW there)
      data_parallel_(comm_->world_size() > 1 ? o.data_parallel : DataParallelOptions{0, 0}),
      // (the world size and grad_accum are checked first: B / W / grad_accum sizes everything
      // the model plans)
      model_((check_data_parallel(o.data_parallel), check_grad_accum(rows_per_rank(o.run.batch, *comm_), o.grad_accum),
              backend),
             o.model, rows_per_rank(o.run.batch, *comm_) / o.grad_accum, o.run.seq, activation_dtype(o.precision),
             o.recompute, data_parallel_.zero_stage == 1 ? comm_->world_size() : 1, o.lora),
      optimizer_(backend, o.optimizer,
                 optimizer_elements(model_.layout(), comm_->world_size(), data_parallel_.zero_stage)),
      scaler_(backend, loss_scaler_for(o.precision, o.loss_scaler)),
      batch_(backend, plan_batch(rows_per_rank(o.run.batch, *comm_), o.run.seq)),
      seed_(o.run.seed),
      global_B_(o.run.batch),
      B_(rows_per_rank(o.run.batch, *comm_)),
      T_(o.run.seq),
      first_row_(comm_->rank() * rows_per_rank(o.run.batch, *comm_)),
      grad_accum_(o.grad_accum) {
  if (comm_->world_size() == 1) return;
  if (data_parallel_.zero_stage == 1) {
    grad_shard_ = std::make_unique<Arena>(backend, plan_grad_shard(model_.layout().shard_elements(comm_->world_size())));
  } else {
    const auto bucket = static_cast<int64_t>(data_parallel_.bucket_mib * 1048576.0 / sizeof(float));
    buckets_ = std::make_unique<GradientBuckets>(*comm_, model_.grads(), bucket);
  }
}

template <typename Collective>
void Trainer::collective(Collective&& call) {
  if (comm_->on_backend_stream()) {  // enqueued behind the backend's ops: no wait, no timing here
    call();
    return;
  }
  backend_.synchronize();  // the host transport reads backend memory now
  const auto start = std::chrono::steady_clock::now();
  call();
  host_comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void Trainer::load_params(const float* host) {
  backend_.copy_to_device(model_.params().data, host, model_.params().bytes());
  model_.refresh_working_weights();
}

TrainingState Trainer::read_state() {
  const int64_t P = model_.layout().total();
  const AdamWState adamw = optimizer_.state();
  TrainingState state;
  state.params = read_floats(model_.params());
  if (grad_shard_) {
    // ZeRO-1: rank r holds the moments of [r S, (r+1) S). all_gather lays the W shards out
    // end to end, which is the flat buffer padded to W S elements: its first P are the moments.
    const int64_t shard = model_.layout().shard_elements(comm_->world_size());
    const Tensor gathered = model_.grads_padded();
    auto gather = [&](Tensor moment) {
      if (!comm_->on_backend_stream()) backend_.synchronize();  // the host transport reads backend memory now
      comm_->all_gather(moment.data, gathered.data, shard, DType::F32);
      return read_floats(Tensor{gathered.data, DType::F32, Shape{P}});
    };
    state.exp_avg = gather(adamw.exp_avg);
    state.exp_avg_sq = gather(adamw.exp_avg_sq);
  } else {
    state.exp_avg = read_floats(adamw.exp_avg);
    state.exp_avg_sq = read_floats(adamw.exp_avg_sq);
  }
  backend_.copy_to_host(&state.adamw_step, adamw.step_count.data, sizeof(int32_t));
  const LossScalerStatus scaler = scaler_.read();
  state.loss_scale = scaler.scale;
  state.growth_tracker = scaler.growth_tracker;
  state.skipped_steps = scaler.skipped_steps;
  state.first_skipped_step = scaler.first_skipped_step;
  return state;
}

void Trainer::load_state(const TrainingState& state) {
  load_params(state.params.data());
  const AdamWState adamw = optimizer_.state();
  // This rank's elements of the moments: all P, or under ZeRO-1 the part below P of its shard
  // [r S, (r+1) S). The shard's padding past P was zero-filled by the allocation, and AdamW
  // keeps zeros at zero.
  const int64_t P = model_.layout().total(), n = adamw.exp_avg.numel();
  const int64_t first = grad_shard_ ? comm_->rank() * n : 0;
  const int64_t count = std::max<int64_t>(0, std::min(n, P - first));
  auto load_moment = [&](Tensor moment, const std::vector<float>& all) {
    if (count > 0) backend_.copy_to_device(moment.data, all.data() + first, count * sizeof(float));
  };
  load_moment(adamw.exp_avg, state.exp_avg);
  load_moment(adamw.exp_avg_sq, state.exp_avg_sq);
  backend_.copy_to_device(adamw.step_count.data, &state.adamw_step, sizeof(int32_t));
  const LossScalerState& s = scaler_.state();
  backend_.copy_to_device(s.scale.data, &state.loss_scale, sizeof(float));
  backend_.copy_to_device(s.growth_tracker.data, &state.growth_tracker, sizeof(int32_t));
  backend_.copy_to_device(s.skipped_steps.data, &state.skipped_steps, sizeof(int32_t));
  backend_.copy_to_device(s.first_skipped_step.data, &state.first_skipped_step, sizeof(int32_t));
}

std::vector<float> Trainer::read_floats(Tensor t) const {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  backend_.copy_to_host(host.data(), t.data, t.bytes());
  return host;
}

void Trainer::load_batch(const int32_t* x, const int32_t* y, uint32_t step) {
  const int64_t n = static_cast<int64_t>(B_) * T_;
  const int vocab = model_.config().vocab_size;
  check_token_ids(x, static_cast<int64_t>(global_B_) * T_, vocab, "input batch");
  check_token_ids(y, static_cast<int64_t>(global_B_) * T_, vocab, "target batch");
  x += static_cast<int64_t>(first_row_) * T_;  // this rank's rows
  y += static_cast<int64_t>(first_row_) * T_;
  // x, y and step are consecutive in the batch arena (plan_batch): one host image of them, one
  // copy. The CUDA backend stages copies through one pinned buffer, each waiting for the one
  // before; with a single copy per step, staging the next batch waits only for the previous
  // batch's copy, not for the previous step's kernels, so the host stays a step ahead.
  char* base = static_cast<char*>(batch_.get("x").data);
  const size_t y_at = static_cast<size_t>(static_cast<char*>(batch_.get("y").data) - base);
  const size_t step_at = static_cast<size_t>(static_cast<char*>(batch_.get("step").data) - base);
  batch_image_.assign(step_at + sizeof(step), 0);
  std::memcpy(batch_image_.data(), x, n * sizeof(int32_t));
  std::memcpy(batch_image_.data() + y_at, y, n * sizeof(int32_t));
  std::memcpy(batch_image_.data() + step_at, &step, sizeof(step));
  backend_.copy_to_device(base, batch_image_.data(), batch_image_.size());
}

DropoutContext Trainer::dropout_context(int micro_batch, bool training) const {
  return DropoutContext{seed_, static_cast<const uint32_t*>(batch_.get("step").data),
                        first_row_ + micro_batch * (B_ / grad_accum_), training};
}

// Sequences [m B/K, (m+1) B/K) of a (B,T) batch tensor: contiguous rows.
Tensor Trainer::micro_batch_rows(const char* name, int micro_batch) const {
  const Tensor whole = batch_.get(name);
  const int rows = B_ / grad_accum_;
  const size_t offset = static_cast<size_t>(micro_batch) * rows * T_ * dtype_size(whole.dtype);
  return Tensor{static_cast<char*>(whole.data) + offset, whole.dtype, Shape{rows, T_}};
}

void Trainer::forward() { model_.forward(micro_batch_rows("x", 0), dropout_context(0)); }

double Trainer::evaluate(const int32_t* x, const int32_t* y) {
  load_batch(x, y, 0);  // (the step only keys dropout masks, and there are none here)
  const Tensor no_gradient{nullptr, DType::F32, Shape{0}};
  for (int m = 0; m < grad_accum_; ++m) {  // the activations are planned for one micro-batch
    model_.forward(micro_batch_rows("x", m), dropout_context(m, /*training=*/false));
    backend_.cross_entropy_forward_backward(micro_batch_rows("losses", m), no_gradient, model_.logits(),
                                            micro_batch_rows("y", m), scaler_.scale(), 1);
  }
  return read_loss();
}

void Trainer::forward_backward() {
  const int64_t batch_tokens = static_cast<int64_t>(global_B_) * T_;
  // The sum over ranks of each rank's rows' gradients is the global batch's. Buckets of it are
  // sent as the last micro-batch's backward finishes them; the gradient check after it
  // (inf/NaN, norm) then sees the same numbers on every rank, so every rank takes the same
  // skip decision and the same step. (ZeRO-1 sums in optimizer_step instead.)
  std::function<void(int64_t)> grads_ready;
  if (buckets_) {
    buckets_->start();
    grads_ready = [this](int64_t first) { collective([&] { buckets_->ready_from(first); }); };
  }
  for (int m = 0; m < grad_accum_; ++m) {
    const Tensor x = micro_batch_rows("x", m);
    model_.forward(x, dropout_context(m));
    model_.backward(x, micro_batch_rows("y", m), micro_batch_rows("losses", m), scaler_.scale(), batch_tokens,
                    dropout_context(m), m == 0 ? ParamGrads::Write : ParamGrads::Add,
                    m == grad_accum_ - 1 ? grads_ready : nullptr);
  }
  if (buckets_) collective([&] { buckets_->finish(); });
}

void Trainer::zero_optimizer_step() {
  const int64_t shard = model_.layout().shard_elements(comm_->world_size());
  const int64_t first = shard * comm_->rank();
  const Tensor grad_shard = grad_shard_->get("grad_shard");
  const Tensor param_shard{static_cast<float*>(model_.params_padded().data) + first, DType::F32, Shape{shard}};
  collective([&] { comm_->reduce_scatter_sum(model_.grads_padded().data, grad_shard.data, shard, DType::F32); });
  // Each rank's share of the squared norm and of the inf/NaN count, summed: the global ones.
  const LossScalerState& s = scaler_.state();
  backend_.grad_norm_check(grad_shard, s);
  collective([&] {
    comm_->all_reduce_sum(s.grad_norm_sq.data, 1, DType::F32);
    comm_->all_reduce_sum(s.found_inf.data, 1, DType::I32);
  });
  // The shard's padding past P holds zeros (parameters, gradients, moments), which AdamW
  // keeps at zero: 0 - lr * (0 / (sqrt(0) + eps) + wd * 0).
  optimizer_.step(param_shard, grad_shard, batch_.get("step"), s);
  collective([&] { comm_->all_gather(param_shard.data, model_.params_padded().data, shard, DType::F32); });
  backend_.loss_scaler_update(s, scaler_.config(), batch_.get("step"));
  model_.refresh_working_weights();
}

void Trainer::optimizer_step() {
  const BackendRange scope(backend_, "optimizer");  // a named scope for profiles (Backend::range_push)
  if (grad_shard_) {
    zero_optimizer_step();
    return;
  }
  backend_.grad_norm_check(model_.grads(), scaler_.state());
  optimizer_.step_and_update_scaler(model_.params(), model_.grads(), batch_.get("step"), scaler_.state(),
                                    scaler_.config());
  model_.refresh_working_weights();
}

void Trainer::train_step(bool use_graph) {
  const bool graph = use_graph && backend_.supports_graphs() && steps_run_ > 0;
  ++steps_run_;
  if (!graph) {
    forward_backward();
    optimizer_step();
    return;
  }
  if (!graph_ready_) {
    backend_.begin_capture();
    forward_backward();
    optimizer_step();
    backend_.end_capture();
    graph_ready_ = true;
    graph_nodes_ = backend_.captured_graph_nodes();
  }
  backend_.replay_graph();
  ++graph_replays_;
}

double Trainer::read_loss() {
  const Tensor losses = batch_.get("losses");
  std::vector<float> host(losses.numel());
  backend_.copy_to_host(host.data(), losses.data, losses.bytes());
  double sum = 0.0;
  for (float l : host) sum += l;
  if (comm_->world_size() > 1) {
    // The ranks' sums added in float (~1e-7 of the loss). A host value: the MPI communicator
    // sums it directly; NCCL needs backend memory, so it goes through the batch's loss_sum.
    float total = static_cast<float>(sum);
    if (comm_->on_backend_stream()) {
      const Tensor slot = batch_.get("loss_sum");
      backend_.copy_to_device(slot.data, &total, sizeof(total));
      comm_->all_reduce_sum(slot.data, 1, DType::F32);
      backend_.copy_to_host(&total, slot.data, sizeof(total));
    } else {
      comm_->all_reduce_sum(&total, 1, DType::F32);
    }
    sum = total;
  }
  return sum / (static_cast<double>(global_B_) * T_);
}

std::string graph_nodes_text(const GraphNodeCount& n) {
  std::string text = "CUDA graph " + std::to_string(n.total()) + " nodes (gemm " + std::to_string(n.gemm) +
                     ", attention " + std::to_string(n.attention) + ", elementwise " + std::to_string(n.elementwise) +
                     ", reduction " + std::to_string(n.reduction) + ", optimizer " + std::to_string(n.optimizer) +
                     ", memset/copy " + std::to_string(n.memset_copy);
  if (n.other > 0) text += ", other " + std::to_string(n.other);
  return text + ")";
}

}  // namespace tt
