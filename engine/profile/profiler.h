// ProfilingBackend: a Backend that wraps another and records, for each op of a training step,
// its name, the named scope it ran in ("forward" > "layer 0"), when it started and ended on the
// backend's own timeline (kernels/stream_clock.h: the host clock on the CPU, CUDA events on a
// GPU) and what it costs (engine/profile/op_cost.h). Every call is passed on unchanged, so the step
// computes exactly what it computes unprofiled; only graphs are refused (supports_graphs()
// false), so that every op is a separate call the profiler can time.
//
//   ProfilingBackend profiler(backend);
//   Trainer trainer(profiler, ...);
//   profiler.begin_step();
//   trainer.train_step(false);
//   StepProfile step = profiler.end_step();  // waits for the backend
//
// Ops outside begin_step/end_step (loading parameters, say) run untimed. Memory calls
// (allocate, copies, synchronize) are never timed: they are not ops of the step. fill_zero is
// timed when an op sequence calls it (a training step does not: its first backward writes the
// gradients).
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/profile/op_cost.h"
#include "kernels/backend.h"
#include "simt/launch_counters.h"

namespace tt {

// A named scope of the step (Backend::range_push .. range_pop).
struct ProfiledScope {
  std::string name;       // "forward", "layer 0", ...
  int parent;             // index of the enclosing scope in StepProfile::scopes; -1: the step itself
  double start_ms, end_ms;  // from the step's start, on the backend's timeline
};

// One op call.
struct ProfiledOp {
  const char* name;       // the Backend method: "linear_forward", ...
  int scope;              // index of the innermost scope it ran in; -1: directly in the step
  double start_ms, end_ms;  // from the step's start, on the backend's timeline
  OpCost cost;
  int nodes = -1;         // counting mode: the graph nodes the op enqueued; -1 not counted
  // Counting mode on the emulator (simt::counting()): what each of its kernel launches did.
  std::vector<simt::LaunchRecord> launches;
};

struct StepProfile {
  double start_ms = 0;  // host clock: when begin_step was called, from the profiler's creation
  double wall_ms = 0;   // host clock: from begin_step until the backend had finished the step
  std::vector<ProfiledScope> scopes;  // in the order they were opened (a parent before its children)
  std::vector<ProfiledOp> ops;        // in the order they were called
};

class ProfilingBackend final : public Backend {
 public:
  // `inner` must outlive this profiler.
  explicit ProfilingBackend(Backend& inner);

  // Starts recording a step: from now on every op and scope is recorded. With count_nodes
  // (profile --estimate; needs an inner backend with graphs), each op is captured alone into a
  // graph, its nodes counted (Backend::captured_graph_nodes), and the graph replayed, so the op
  // still runs: its times then include the capture's and mean nothing. When the emulator counts
  // (simt::set_counting), each op also keeps the counts of the launches its replay made.
  void begin_step(bool count_nodes = false);
  // Waits for the backend to finish the step, stops recording and returns what it recorded.
  // Scopes still open end with the step.
  StepProfile end_step();

  std::string name() const override { return inner_.name(); }

  // ---- passed on, untimed ----
  void* allocate(size_t bytes) override { return inner_.allocate(bytes); }
  void release(void* ptr) override { inner_.release(ptr); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { inner_.copy_to_device(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { inner_.copy_to_host(dst, src, bytes); }
  void synchronize() override { inner_.synchronize(); }
  void* native_stream() override { return inner_.native_stream(); }
  std::string use_library_attention(const AttentionShape& s, DType storage, float dropout_p) override {
    return inner_.use_library_attention(s, storage, dropout_p);
  }
  std::unique_ptr<StreamClock> make_stream_clock() override { return inner_.make_stream_clock(); }
  // Inference only (engine/decoder.h): a training step never calls them.
  void kv_cache_append(Tensor k_cache, Tensor v_cache, Tensor qkv, int pos) override {
    inner_.kv_cache_append(k_cache, v_cache, qkv, pos);
  }
  void attention_decode(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, int pos, int NH) override {
    inner_.attention_decode(out, qkv, k_cache, v_cache, pos, NH);
  }

  // ---- scopes: recorded, and passed on (NVTX on the CUDA backend) ----
  void range_push(const char* name) override;
  void range_pop() noexcept override;

  // ---- ops: timed and costed (profiler.cpp) ----
  void fill_zero(Tensor t) override;
  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) override;
  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads) override;
  void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override;
  void linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                       ParamGrads grads, InputGrad input) override;
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                         const DropoutMask& dropout) override;
  void attention_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                          const AttentionShape& s, const DropoutMask& dropout) override;
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                         float eps) override;
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                          Tensor mean, Tensor rstd, ParamGrads grads) override;
  void dropout_residual_layernorm_forward(Tensor res_out, Tensor ln_out, Tensor mean, Tensor rstd, Tensor residual,
                                          Tensor branch, Tensor weight, Tensor bias, float eps,
                                          const DropoutMask& dropout) override;
  void layernorm_residual_dropout_backward(Tensor dinp, Tensor dbranch, Tensor dweight, Tensor dbias, Tensor dout,
                                           Tensor dout2, Tensor dskip, Tensor inp, Tensor weight, Tensor mean,
                                           Tensor rstd, const DropoutMask& branch_dropout, ParamGrads grads) override;
  void activation_forward(Tensor out, Tensor inp, Activation act) override;
  void activation_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act) override;
  void dropout_forward(Tensor out, Tensor inp, const DropoutMask& dropout) override;
  void dropout_backward(Tensor dinp, Tensor dout, const DropoutMask& dropout) override;
  void activation_dropout_forward(Tensor out, Tensor inp, Activation act, const DropoutMask& dropout) override;
  void activation_dropout_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act,
                                   const DropoutMask& dropout) override;
  void residual_forward(Tensor out, Tensor a, Tensor b) override;
  void add_scaled_columns(Tensor out, int64_t first, Tensor delta, float scale) override;
  void copy_scaled_columns(Tensor out, Tensor inp, int64_t first, float scale) override;
  void rope_forward(Tensor qkv, int NH, int KVH, int first_pos, float theta) override;
  void rope_backward(Tensor dqkv, int NH, int KVH, int first_pos, float theta) override;
  void cross_entropy_forward_backward(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                                      Tensor dloss_scale, int64_t mean_over) override;
  void cast(Tensor dst, Tensor src) override;
  void grad_norm_check(Tensor grads, const LossScalerState& s) override;
  void adamw_step(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                  Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s) override;
  void loss_scaler_update(const LossScalerState& s, const LossScalerConfig& config, Tensor step) override;
  void adamw_step_and_scaler_update(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                                    Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s,
                                    const LossScalerConfig& scaler) override;
  void nf4_dequantize(Tensor out, const Nf4Tensor& w) override;

 private:
  // Runs `call` (the inner backend's op) between two clock marks and records it, when recording.
  // The cost is computed by the caller before: none of that host work falls inside the marks.
  template <typename Call>
  void timed(const char* op, const OpCost& cost, Call&& call);

  // Records as taken, with clock mark indices; end_step turns the marks into times.
  struct PendingScope {
    std::string name;
    int parent;
    size_t start_mark, end_mark;
  };
  struct PendingOp {
    const char* name;
    int scope;
    size_t start_mark, end_mark;
    OpCost cost;
    int nodes;
    std::vector<simt::LaunchRecord> launches;
  };

  Backend& inner_;
  std::unique_ptr<StreamClock> clock_;
  const std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point step_start_;
  bool recording_ = false;
  bool count_nodes_ = false;
  std::vector<PendingScope> scopes_;
  std::vector<PendingOp> ops_;
  // The scopes open now, innermost last: an index into scopes_, or -1 for one opened while not
  // recording (its pop must still match its push).
  std::vector<int> open_;
  static constexpr size_t kOpen = static_cast<size_t>(-1);  // end_mark of a scope not yet closed
};

}  // namespace tt
