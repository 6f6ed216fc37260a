// A Backend that hands every call to another backend: the base of tests' wrappers that watch
// or replace one op (test_loss_scaler's recording backend, test_debug_sync's trapping one).
// A wrapper derives from it and overrides only the ops it is about.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "kernels/backend.h"

namespace tt::test {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  std::string name() const override { return inner_->name(); }
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void release(void* ptr) override { inner_->release(ptr); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override { inner_->copy_to_device(dst, src, bytes); }
  void copy_to_host(void* dst, const void* src, size_t bytes) override { inner_->copy_to_host(dst, src, bytes); }
  void fill_zero(Tensor t) override { inner_->fill_zero(t); }
  void synchronize() override { inner_->synchronize(); }
  void* native_stream() override { return inner_->native_stream(); }
  bool supports_graphs() const override { return inner_->supports_graphs(); }
  void begin_capture() override { inner_->begin_capture(); }
  void end_capture() override { inner_->end_capture(); }
  void replay_graph() override { inner_->replay_graph(); }
  void range_push(const char* name) override { inner_->range_push(name); }
  void range_pop() override { inner_->range_pop(); }
  std::unique_ptr<StreamClock> make_stream_clock() override { return inner_->make_stream_clock(); }

  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) override {
    inner_->embedding_forward(out, tokens, wte, wpe);
  }
  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads) override {
    inner_->embedding_backward(dwte, dwpe, dout, tokens, grads);
  }
  void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override {
    inner_->linear_forward(out, inp, weight, bias);
  }
  void linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                       ParamGrads grads, InputGrad input) override {
    inner_->linear_backward(dinp, dweight, dbias, dout, inp, weight, grads, input);
  }
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                         const DropoutMask& dropout) override {
    inner_->attention_forward(out, lse, qkv, s, dropout);
  }
  std::string use_library_attention(const AttentionShape& s, DType storage, float dropout_p) override {
    return inner_->use_library_attention(s, storage, dropout_p);
  }
  void attention_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                          const AttentionShape& s, const DropoutMask& dropout) override {
    inner_->attention_backward(dqkv, dout_dot_out, dout, qkv, out, lse, s, dropout);
  }
  void kv_cache_append(Tensor k_cache, Tensor v_cache, Tensor qkv, int pos) override {
    inner_->kv_cache_append(k_cache, v_cache, qkv, pos);
  }
  void attention_decode(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, int pos, int NH) override {
    inner_->attention_decode(out, qkv, k_cache, v_cache, pos, NH);
  }
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                         float eps) override {
    inner_->layernorm_forward(out, mean, rstd, inp, weight, bias, eps);
  }
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                          Tensor mean, Tensor rstd, ParamGrads grads) override {
    inner_->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, grads);
  }
  void dropout_residual_layernorm_forward(Tensor res_out, Tensor ln_out, Tensor mean, Tensor rstd, Tensor residual,
                                          Tensor branch, Tensor weight, Tensor bias, float eps,
                                          const DropoutMask& d) override {
    inner_->dropout_residual_layernorm_forward(res_out, ln_out, mean, rstd, residual, branch, weight, bias, eps, d);
  }
  void layernorm_residual_dropout_backward(Tensor dinp, Tensor dbranch, Tensor dweight, Tensor dbias, Tensor dout,
                                           Tensor dout2, Tensor dskip, Tensor inp, Tensor weight, Tensor mean,
                                           Tensor rstd, const DropoutMask& d, ParamGrads grads) override {
    inner_->layernorm_residual_dropout_backward(dinp, dbranch, dweight, dbias, dout, dout2, dskip, inp, weight, mean,
                                                rstd, d, grads);
  }
  void activation_forward(Tensor out, Tensor inp, Activation act) override { inner_->activation_forward(out, inp, act); }
  void activation_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act) override {
    inner_->activation_backward(dinp, dout, inp, act);
  }
  void dropout_forward(Tensor out, Tensor inp, const DropoutMask& d) override { inner_->dropout_forward(out, inp, d); }
  void dropout_backward(Tensor dinp, Tensor dout, const DropoutMask& d) override { inner_->dropout_backward(dinp, dout, d); }
  void activation_dropout_forward(Tensor out, Tensor inp, Activation act, const DropoutMask& d) override {
    inner_->activation_dropout_forward(out, inp, act, d);
  }
  void activation_dropout_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act, const DropoutMask& d) override {
    inner_->activation_dropout_backward(dinp, dout, inp, act, d);
  }
  void residual_forward(Tensor out, Tensor a, Tensor b) override { inner_->residual_forward(out, a, b); }
  void add_scaled_columns(Tensor out, int64_t first, Tensor delta, float scale) override {
    inner_->add_scaled_columns(out, first, delta, scale);
  }
  void copy_scaled_columns(Tensor out, Tensor inp, int64_t first, float scale) override {
    inner_->copy_scaled_columns(out, inp, first, scale);
  }
  void rope_forward(Tensor qkv, int NH, int KVH, int first_pos, float theta) override {
    inner_->rope_forward(qkv, NH, KVH, first_pos, theta);
  }
  void rope_backward(Tensor dqkv, int NH, int KVH, int first_pos, float theta) override {
    inner_->rope_backward(dqkv, NH, KVH, first_pos, theta);
  }
  void cross_entropy_forward_backward(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                                      Tensor dloss_scale, int64_t mean_over) override {
    inner_->cross_entropy_forward_backward(losses, dlogits, logits, targets, dloss_scale, mean_over);
  }
  void cast(Tensor dst, Tensor src) override { inner_->cast(dst, src); }
  void grad_norm_check(Tensor grads, const LossScalerState& s) override { inner_->grad_norm_check(grads, s); }
  void adamw_step(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                  Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s) override {
    inner_->adamw_step(params, grads, exp_avg, exp_avg_sq, step_count, train_step, hyper, s);
  }
  void loss_scaler_update(const LossScalerState& s, const LossScalerConfig& config, Tensor step) override {
    inner_->loss_scaler_update(s, config, step);
  }
  void adamw_step_and_scaler_update(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                                    Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s,
                                    const LossScalerConfig& scaler) override {
    inner_->adamw_step_and_scaler_update(params, grads, exp_avg, exp_avg_sq, step_count, train_step, hyper, s, scaler);
  }
  void nf4_dequantize(Tensor out, const Nf4Tensor& w) override { inner_->nf4_dequantize(out, w); }

 protected:
  Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace tt::test
