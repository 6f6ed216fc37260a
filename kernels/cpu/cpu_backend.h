// The CPU backend: the readable reference every other backend is tested against.
// Plain C++ loops parallelised with OpenMP over independent rows, OpenBLAS sgemm for the
// matmuls. Each op family lives in its own file (embedding.cpp, linear.cpp, ...). Where a loop
// is vectorised by hand (dropout masks, attention, exp: cpu_simd.h) it keeps every sum's order,
// so the bits are those of the plain loop at any vector width.
#pragma once
#include <memory>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_simd.h"

namespace tt {

class CpuBackend : public Backend {
 public:
  // simd: the widest vector code the hand-written loops may use (tests pin narrower ones)
  explicit CpuBackend(CpuSimd simd = best_cpu_simd()) : simd_(simd) {}
  std::string name() const override { return "cpu"; }

  void* allocate(size_t bytes) override;
  void release(void* ptr) override;
  void copy_to_device(void* dst, const void* src, size_t bytes) override;
  void copy_to_host(void* dst, const void* src, size_t bytes) override;
  void fill_zero(Tensor t) override;
  void synchronize() override {}

  void embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) override;
  void embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads) override;
  void linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) override;
  void linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                       ParamGrads grads, InputGrad input) override;
  void attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                         const DropoutMask& dropout) override;
  void attention_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out, Tensor lse, const AttentionShape& s,
                          const DropoutMask& dropout) override;
  void kv_cache_append(Tensor k_cache, Tensor v_cache, Tensor qkv, int pos) override;  // attention_decode.cpp
  void attention_decode(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, int pos, int NH) override;
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias,
                         float eps) override;
  void layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                          Tensor mean, Tensor rstd, ParamGrads grads) override;
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
  void rope_forward(Tensor qkv, int NH, int KVH, int first_pos, float theta) override;    // rope.cpp
  void rope_backward(Tensor dqkv, int NH, int KVH, int first_pos, float theta) override;
  void cross_entropy_forward_backward(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                                      Tensor dloss_scale, int64_t mean_over) override;
  void cast(Tensor dst, Tensor src) override;
  void grad_norm_check(Tensor grads, const LossScalerState& s) override;
  void adamw_step(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                  Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s) override;
  void loss_scaler_update(const LossScalerState& s, const LossScalerConfig& config, Tensor step) override;
  void nf4_dequantize(Tensor out, const Nf4Tensor& w) override;  // nf4.cpp

 private:
  // Activation::Swiglu, with the FFN's dropout (swiglu.cpp): the activation ops call these
  void swiglu_forward(Tensor out, Tensor inp, const DropoutMask& dropout);
  void swiglu_backward(Tensor dinp, Tensor dout, Tensor inp, const DropoutMask& dropout);
  CpuSimd simd_;
};

std::unique_ptr<Backend> make_cpu_backend(CpuSimd simd = best_cpu_simd());

}  // namespace tt
