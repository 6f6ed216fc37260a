// DebugSyncBackend (`--debug-sync`, TINYTRAIN_DEBUG_SYNC=1): a Backend that wraps another,
// passes every call on unchanged, and waits for the backend after every op. A kernel that
// faults on a GPU is reported at the next synchronisation, blamed on whatever call comes next;
// here the next synchronisation is the op's own, so the error names the op that faulted:
//
//   debug-sync: residual_forward(out F32 [2, 8], a F32 [2, 8], b F32 [2, 8]) failed: CUDA error:
//   cudaStreamSynchronize(stream_) at ...: cudaErrorIllegalAddress (...); run it under
//   compute-sanitizer --tool memcheck to find the faulting access
//
// Graphs are refused (supports_graphs() false): a stream being captured cannot synchronise,
// so the trainer runs every step eagerly. The cost is one host wait per op (docs/kernels.md).
// Memory calls (allocate, copies) and named scopes are passed on without a wait: they are no
// kernels, and copy_to_host waits anyway.
#pragma once
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>

#include "kernels/backend.h"

namespace tt {

class DebugSyncBackend final : public Backend {
 public:
  explicit DebugSyncBackend(std::unique_ptr<Backend> inner);

  std::string name() const override { return inner_->name(); }

  // ---- passed on, no wait ----
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void release(void* ptr) override { inner_->release(ptr); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { inner_->copy_to_device(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { inner_->copy_to_host(dst, src, bytes); }
  void synchronize() override { inner_->synchronize(); }
  void* native_stream() override { return inner_->native_stream(); }
  void range_push(const char* name) override { inner_->range_push(name); }
  void range_pop() override { inner_->range_pop(); }
  std::unique_ptr<StreamClock> make_stream_clock() override { return inner_->make_stream_clock(); }
  std::string use_library_attention(const AttentionShape& s, DType storage, float dropout_p) override {
    return inner_->use_library_attention(s, storage, dropout_p);
  }

  // ---- ops: passed on, then a wait; a failure names the op and its views ----
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
  void kv_cache_append(Tensor k_cache, Tensor v_cache, Tensor qkv, int pos) override;
  void attention_decode(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, int pos, int NH) override;
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
  using NamedView = std::pair<const char*, Tensor>;
  // Runs `call` (the inner backend's op), then waits for the backend. A std::runtime_error from
  // either (a CUDA or cuBLAS error; not an InputError, which already names its input) becomes one
  // naming `op` and its views, and for a CUDA error, compute-sanitizer. Logic errors (a view that does not fit) pass unchanged: they are
  // thrown before anything runs and name the op already.
  template <typename Call>
  void checked(const char* op, std::initializer_list<NamedView> views, Call&& call);

  std::unique_ptr<Backend> inner_;
};

// What a view is, for an error line: "out F32 [2, 8]", or "bias none" for a view without data.
std::string describe_view(const char* name, const Tensor& t);

}  // namespace tt
