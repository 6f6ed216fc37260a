// The profiling backend: each op passed on between two marks of the backend's clock.
#include "engine/profile/profiler.h"

#include <stdexcept>
#include <utility>

namespace tt {

ProfilingBackend::ProfilingBackend(Backend& inner) : inner_(inner), clock_(inner.make_stream_clock()) {}

void ProfilingBackend::begin_step(bool count_nodes) {
  if (recording_) throw std::logic_error("ProfilingBackend::begin_step: a step is already being recorded");
  if (count_nodes && !inner_.supports_graphs())
    throw std::logic_error("ProfilingBackend: counting graph nodes needs a backend with graphs, not " + inner_.name());
  count_nodes_ = count_nodes;
  scopes_.clear();
  ops_.clear();
  clock_->read();  // forget any marks left over; the step's first mark is index 0
  recording_ = true;
  step_start_ = std::chrono::steady_clock::now();
  clock_->mark();  // mark 0: the step's start on the backend's timeline
}

StepProfile ProfilingBackend::end_step() {
  if (!recording_) throw std::logic_error("ProfilingBackend::end_step without begin_step");
  const size_t end = clock_->mark();
  inner_.synchronize();
  const std::vector<double> ms = clock_->read();  // waits for the last mark
  StepProfile step;
  step.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - step_start_).count();
  step.start_ms = std::chrono::duration<double, std::milli>(step_start_ - created_).count();
  for (const PendingScope& s : scopes_)
    step.scopes.push_back({s.name, s.parent, ms[s.start_mark], ms[s.end_mark == kOpen ? end : s.end_mark]});
  for (const PendingOp& op : ops_)
    step.ops.push_back({op.name, op.scope, ms[op.start_mark], ms[op.end_mark], op.cost, op.nodes, op.launches});
  recording_ = false;
  count_nodes_ = false;
  for (int& open : open_) open = -1;  // (their records are this step's; later pops just match)
  return step;
}

void ProfilingBackend::range_push(const char* name) {
  int index = -1;
  if (recording_) {
    index = static_cast<int>(scopes_.size());
    const int parent = open_.empty() ? -1 : open_.back();
    scopes_.push_back({name, parent, clock_->mark(), kOpen});
  }
  open_.push_back(index);
  inner_.range_push(name);
}

// BackendRange calls this from its destructor, also while an exception unwinds the step, so it
// must not throw. A clock that fails here (a CUDA error) fails again at the next op or in
// end_step, which report it; the scope is then left open and ends with the step.
void ProfilingBackend::range_pop() noexcept {
  inner_.range_pop();
  if (open_.empty()) return;  // (a pop without its push: nothing to close)
  const int index = open_.back();
  open_.pop_back();
  if (!recording_ || index < 0) return;
  try {
    scopes_[index].end_mark = clock_->mark();
  } catch (...) {
    // left open: end_step ends it with the step
  }
}

template <typename Call>
void ProfilingBackend::timed(const char* op, const OpCost& cost, Call&& call) {
  if (!recording_) {
    call();
    return;
  }
  const size_t start = clock_->mark();
  int nodes = -1;
  std::vector<simt::LaunchRecord> launches;
  if (count_nodes_) {
    inner_.begin_capture();
    call();
    inner_.end_capture();
    nodes = inner_.captured_graph_nodes().total();
#ifdef TINYTRAIN_HAVE_SIMT
    simt::take_launch_records();  // what ran before (nothing of this op: it was only captured)
    inner_.replay_graph();
    inner_.synchronize();
    launches = simt::take_launch_records();  // empty unless the emulator counts
#else
    inner_.replay_graph();
#endif
  } else {
    call();
  }
  const size_t end = clock_->mark();
  ops_.push_back({op, open_.empty() ? -1 : open_.back(), start, end, cost, nodes, std::move(launches)});
}

// ---- ops: the cost from the views, then the inner backend's op between two marks ----

void ProfilingBackend::fill_zero(Tensor t) {
  timed("fill_zero", fill_zero_cost(t), [&] { inner_.fill_zero(t); });
}

void ProfilingBackend::embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) {
  timed("embedding_forward", embedding_forward_cost(out, tokens, wte, wpe),
        [&] { inner_.embedding_forward(out, tokens, wte, wpe); });
}

void ProfilingBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads) {
  timed("embedding_backward", embedding_backward_cost(dwte, dwpe, dout, tokens, grads),
        [&] { inner_.embedding_backward(dwte, dwpe, dout, tokens, grads); });
}

void ProfilingBackend::linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  timed("linear_forward", linear_forward_cost(out, inp, weight, bias),
        [&] { inner_.linear_forward(out, inp, weight, bias); });
}

void ProfilingBackend::linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                       Tensor weight, ParamGrads grads, InputGrad input) {
  timed("linear_backward", linear_backward_cost(dinp, dweight, dbias, dout, inp, weight, grads, input),
        [&] { inner_.linear_backward(dinp, dweight, dbias, dout, inp, weight, grads, input); });
}

void ProfilingBackend::attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                                         const DropoutMask& dropout) {
  timed("attention_forward", attention_forward_cost(out, lse, qkv, s),
        [&] { inner_.attention_forward(out, lse, qkv, s, dropout); });
}

void ProfilingBackend::attention_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out,
                                          Tensor lse, const AttentionShape& s, const DropoutMask& dropout) {
  timed("attention_backward", attention_backward_cost(dqkv, dout_dot_out, dout, qkv, out, lse, s),
        [&] { inner_.attention_backward(dqkv, dout_dot_out, dout, qkv, out, lse, s, dropout); });
}

void ProfilingBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                         Tensor bias, float eps) {
  timed("layernorm_forward", layernorm_forward_cost(out, mean, rstd, inp, weight, bias),
        [&] { inner_.layernorm_forward(out, mean, rstd, inp, weight, bias, eps); });
}

void ProfilingBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                          Tensor weight, Tensor mean, Tensor rstd, ParamGrads grads) {
  timed("layernorm_backward", layernorm_backward_cost(dinp, dweight, dbias, dout, inp, weight, mean, rstd, grads),
        [&] { inner_.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, grads); });
}

void ProfilingBackend::dropout_residual_layernorm_forward(Tensor res_out, Tensor ln_out, Tensor mean, Tensor rstd,
                                                          Tensor residual, Tensor branch, Tensor weight, Tensor bias,
                                                          float eps, const DropoutMask& dropout) {
  timed("dropout_residual_layernorm_forward",
        dropout_residual_layernorm_forward_cost(res_out, ln_out, mean, rstd, residual, branch, weight, bias), [&] {
          inner_.dropout_residual_layernorm_forward(res_out, ln_out, mean, rstd, residual, branch, weight, bias, eps,
                                                    dropout);
        });
}

void ProfilingBackend::layernorm_residual_dropout_backward(Tensor dinp, Tensor dbranch, Tensor dweight, Tensor dbias,
                                                           Tensor dout, Tensor dout2, Tensor dskip, Tensor inp,
                                                           Tensor weight, Tensor mean, Tensor rstd,
                                                           const DropoutMask& branch_dropout, ParamGrads grads) {
  timed("layernorm_residual_dropout_backward",
        layernorm_residual_dropout_backward_cost(dinp, dbranch, dweight, dbias, dout, dout2, dskip, inp, weight, mean,
                                                 rstd, grads),
        [&] {
          inner_.layernorm_residual_dropout_backward(dinp, dbranch, dweight, dbias, dout, dout2, dskip, inp, weight,
                                                     mean, rstd, branch_dropout, grads);
        });
}

void ProfilingBackend::activation_forward(Tensor out, Tensor inp, Activation act) {
  timed("activation_forward", elementwise_cost({inp}, out), [&] { inner_.activation_forward(out, inp, act); });
}

void ProfilingBackend::activation_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act) {
  timed("activation_backward", elementwise_cost({dout, inp}, dinp),
        [&] { inner_.activation_backward(dinp, dout, inp, act); });
}

void ProfilingBackend::dropout_forward(Tensor out, Tensor inp, const DropoutMask& dropout) {
  timed("dropout_forward", dropout_cost(out, inp, dropout), [&] { inner_.dropout_forward(out, inp, dropout); });
}

void ProfilingBackend::dropout_backward(Tensor dinp, Tensor dout, const DropoutMask& dropout) {
  timed("dropout_backward", dropout_cost(dinp, dout, dropout), [&] { inner_.dropout_backward(dinp, dout, dropout); });
}

void ProfilingBackend::activation_dropout_forward(Tensor out, Tensor inp, Activation act, const DropoutMask& dropout) {
  timed("activation_dropout_forward", elementwise_cost({inp}, out),
        [&] { inner_.activation_dropout_forward(out, inp, act, dropout); });
}

void ProfilingBackend::activation_dropout_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act,
                                                   const DropoutMask& dropout) {
  timed("activation_dropout_backward", elementwise_cost({dout, inp}, dinp),
        [&] { inner_.activation_dropout_backward(dinp, dout, inp, act, dropout); });
}

// q and k read and written in place: two thirds of qkv, twice
void ProfilingBackend::rope_forward(Tensor qkv, int NH, int KVH, int first_pos, float theta) {
  timed("rope_forward", rope_cost(qkv, NH, KVH), [&] { inner_.rope_forward(qkv, NH, KVH, first_pos, theta); });
}

void ProfilingBackend::rope_backward(Tensor dqkv, int NH, int KVH, int first_pos, float theta) {
  timed("rope_backward", rope_cost(dqkv, NH, KVH), [&] { inner_.rope_backward(dqkv, NH, KVH, first_pos, theta); });
}

void ProfilingBackend::residual_forward(Tensor out, Tensor a, Tensor b) {
  timed("residual_forward", elementwise_cost({a, b}, out), [&] { inner_.residual_forward(out, a, b); });
}

// out's window read and written, delta read: three window-sized passes (delta's size each)
void ProfilingBackend::add_scaled_columns(Tensor out, int64_t first, Tensor delta, float scale) {
  timed("add_scaled_columns", elementwise_cost({delta, delta}, delta),
        [&] { inner_.add_scaled_columns(out, first, delta, scale); });
}

// inp's window read, out written: out's size each
void ProfilingBackend::copy_scaled_columns(Tensor out, Tensor inp, int64_t first, float scale) {
  timed("copy_scaled_columns", elementwise_cost({out}, out), [&] { inner_.copy_scaled_columns(out, inp, first, scale); });
}

void ProfilingBackend::cross_entropy_forward_backward(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                                                      Tensor dloss_scale, int64_t mean_over) {
  timed("cross_entropy", cross_entropy_cost(losses, dlogits, logits, targets, dloss_scale),
        [&] { inner_.cross_entropy_forward_backward(losses, dlogits, logits, targets, dloss_scale, mean_over); });
}

void ProfilingBackend::cast(Tensor dst, Tensor src) {
  timed("cast", elementwise_cost({src}, dst), [&] { inner_.cast(dst, src); });
}

void ProfilingBackend::grad_norm_check(Tensor grads, const LossScalerState& s) {
  timed("grad_norm_check", grad_norm_check_cost(grads, s), [&] { inner_.grad_norm_check(grads, s); });
}

void ProfilingBackend::adamw_step(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                                  Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s) {
  timed("adamw_step", adamw_step_cost(params, grads, exp_avg, exp_avg_sq, step_count, train_step, s),
        [&] { inner_.adamw_step(params, grads, exp_avg, exp_avg_sq, step_count, train_step, hyper, s); });
}

void ProfilingBackend::loss_scaler_update(const LossScalerState& s, const LossScalerConfig& config, Tensor step) {
  timed("loss_scaler_update", loss_scaler_update_cost(s, step), [&] { inner_.loss_scaler_update(s, config, step); });
}

void ProfilingBackend::adamw_step_and_scaler_update(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq,
                                                    Tensor step_count, Tensor train_step, const AdamWHyper& hyper,
                                                    const LossScalerState& s, const LossScalerConfig& scaler) {
  timed("adamw_step_and_scaler_update",
        adamw_step_and_scaler_update_cost(params, grads, exp_avg, exp_avg_sq, step_count, train_step, s), [&] {
          inner_.adamw_step_and_scaler_update(params, grads, exp_avg, exp_avg_sq, step_count, train_step, hyper, s,
                                              scaler);
        });
}

// the four parts of the NF4 weight read, out written
void ProfilingBackend::nf4_dequantize(Tensor out, const Nf4Tensor& w) {
  timed("nf4_dequantize", elementwise_cost({w.codes, w.absmax_codes, w.absmax2, w.offset}, out),
        [&] { inner_.nf4_dequantize(out, w); });
}

}  // namespace tt
