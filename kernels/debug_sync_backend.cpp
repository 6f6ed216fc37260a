// The debug-sync backend: each op passed on, then a wait for the backend, so a fault is
// reported by the op that caused it.
#include "kernels/debug_sync_backend.h"

#include <stdexcept>

#include "base/input_error.h"

namespace tt {

std::string describe_view(const char* name, const Tensor& t) {
  if (!t.data) return std::string(name) + " none";
  return std::string(name) + " " + dtype_name(t.dtype) + " " + t.shape.str();
}

DebugSyncBackend::DebugSyncBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {
  if (!inner_) throw std::logic_error("DebugSyncBackend: no backend to wrap");
}

template <typename Call>
void DebugSyncBackend::checked(const char* op, std::initializer_list<NamedView> views, Call&& call) {
  try {
    call();
    inner_->synchronize();
  } catch (const InputError&) {
    throw;
  } catch (const std::runtime_error& e) {
    std::string what = std::string("debug-sync: ") + op + "(";
    const char* separator = "";
    for (const NamedView& v : views) {
      what += separator + describe_view(v.first, v.second);
      separator = ", ";
    }
    what += std::string(") failed: ") + e.what();
    // A CUDA error after a kernel is most often a bad access: the tool that finds it.
    if (std::string(e.what()).rfind("CUDA error: ", 0) == 0)
      what += "; run it under compute-sanitizer --tool memcheck to find the faulting access";
    throw std::runtime_error(what);
  }
}

void DebugSyncBackend::fill_zero(Tensor t) {
  checked("fill_zero", {{"t", t}}, [&] { inner_->fill_zero(t); });
}

void DebugSyncBackend::embedding_forward(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) {
  checked("embedding_forward", {{"out", out}, {"tokens", tokens}, {"wte", wte}, {"wpe", wpe}},
          [&] { inner_->embedding_forward(out, tokens, wte, wpe); });
}

void DebugSyncBackend::embedding_backward(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads) {
  checked("embedding_backward", {{"dwte", dwte}, {"dwpe", dwpe}, {"dout", dout}, {"tokens", tokens}},
          [&] { inner_->embedding_backward(dwte, dwpe, dout, tokens, grads); });
}

void DebugSyncBackend::linear_forward(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  checked("linear_forward", {{"out", out}, {"inp", inp}, {"weight", weight}, {"bias", bias}},
          [&] { inner_->linear_forward(out, inp, weight, bias); });
}

void DebugSyncBackend::linear_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                       Tensor weight, ParamGrads grads, InputGrad input) {
  checked("linear_backward",
          {{"dinp", dinp}, {"dweight", dweight}, {"dbias", dbias}, {"dout", dout}, {"inp", inp}, {"weight", weight}},
          [&] { inner_->linear_backward(dinp, dweight, dbias, dout, inp, weight, grads, input); });
}

void DebugSyncBackend::attention_forward(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s,
                                         const DropoutMask& dropout) {
  checked("attention_forward", {{"out", out}, {"lse", lse}, {"qkv", qkv}},
          [&] { inner_->attention_forward(out, lse, qkv, s, dropout); });
}

void DebugSyncBackend::attention_backward(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out,
                                          Tensor lse, const AttentionShape& s, const DropoutMask& dropout) {
  checked("attention_backward",
          {{"dqkv", dqkv}, {"dout_dot_out", dout_dot_out}, {"dout", dout}, {"qkv", qkv}, {"out", out}, {"lse", lse}},
          [&] { inner_->attention_backward(dqkv, dout_dot_out, dout, qkv, out, lse, s, dropout); });
}

void DebugSyncBackend::kv_cache_append(Tensor k_cache, Tensor v_cache, Tensor qkv, int pos) {
  checked("kv_cache_append", {{"k_cache", k_cache}, {"v_cache", v_cache}, {"qkv", qkv}},
          [&] { inner_->kv_cache_append(k_cache, v_cache, qkv, pos); });
}

void DebugSyncBackend::attention_decode(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, int pos, int NH) {
  checked("attention_decode", {{"out", out}, {"qkv", qkv}, {"k_cache", k_cache}, {"v_cache", v_cache}},
          [&] { inner_->attention_decode(out, qkv, k_cache, v_cache, pos, NH); });
}

void DebugSyncBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight,
                                         Tensor bias, float eps) {
  checked("layernorm_forward",
          {{"out", out}, {"mean", mean}, {"rstd", rstd}, {"inp", inp}, {"weight", weight}, {"bias", bias}},
          [&] { inner_->layernorm_forward(out, mean, rstd, inp, weight, bias, eps); });
}

void DebugSyncBackend::layernorm_backward(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp,
                                          Tensor weight, Tensor mean, Tensor rstd, ParamGrads grads) {
  checked("layernorm_backward",
          {{"dinp", dinp}, {"dweight", dweight}, {"dbias", dbias}, {"dout", dout}, {"inp", inp}, {"weight", weight},
           {"mean", mean}, {"rstd", rstd}},
          [&] { inner_->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, grads); });
}

void DebugSyncBackend::dropout_residual_layernorm_forward(Tensor res_out, Tensor ln_out, Tensor mean, Tensor rstd,
                                                          Tensor residual, Tensor branch, Tensor weight, Tensor bias,
                                                          float eps, const DropoutMask& dropout) {
  checked("dropout_residual_layernorm_forward",
          {{"res_out", res_out}, {"ln_out", ln_out}, {"mean", mean}, {"rstd", rstd}, {"residual", residual},
           {"branch", branch}, {"weight", weight}, {"bias", bias}},
          [&] {
            inner_->dropout_residual_layernorm_forward(res_out, ln_out, mean, rstd, residual, branch, weight, bias,
                                                       eps, dropout);
          });
}

void DebugSyncBackend::layernorm_residual_dropout_backward(Tensor dinp, Tensor dbranch, Tensor dweight, Tensor dbias,
                                                           Tensor dout, Tensor dout2, Tensor dskip, Tensor inp,
                                                           Tensor weight, Tensor mean, Tensor rstd,
                                                           const DropoutMask& branch_dropout, ParamGrads grads) {
  checked("layernorm_residual_dropout_backward",
          {{"dinp", dinp}, {"dbranch", dbranch}, {"dweight", dweight}, {"dbias", dbias}, {"dout", dout},
           {"dout2", dout2}, {"dskip", dskip}, {"inp", inp}, {"weight", weight}, {"mean", mean}, {"rstd", rstd}},
          [&] {
            inner_->layernorm_residual_dropout_backward(dinp, dbranch, dweight, dbias, dout, dout2, dskip, inp, weight,
                                                        mean, rstd, branch_dropout, grads);
          });
}

void DebugSyncBackend::activation_forward(Tensor out, Tensor inp, Activation act) {
  checked("activation_forward", {{"out", out}, {"inp", inp}}, [&] { inner_->activation_forward(out, inp, act); });
}

void DebugSyncBackend::activation_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act) {
  checked("activation_backward", {{"dinp", dinp}, {"dout", dout}, {"inp", inp}},
          [&] { inner_->activation_backward(dinp, dout, inp, act); });
}

void DebugSyncBackend::dropout_forward(Tensor out, Tensor inp, const DropoutMask& dropout) {
  checked("dropout_forward", {{"out", out}, {"inp", inp}}, [&] { inner_->dropout_forward(out, inp, dropout); });
}

void DebugSyncBackend::dropout_backward(Tensor dinp, Tensor dout, const DropoutMask& dropout) {
  checked("dropout_backward", {{"dinp", dinp}, {"dout", dout}}, [&] { inner_->dropout_backward(dinp, dout, dropout); });
}

void DebugSyncBackend::activation_dropout_forward(Tensor out, Tensor inp, Activation act, const DropoutMask& dropout) {
  checked("activation_dropout_forward", {{"out", out}, {"inp", inp}},
          [&] { inner_->activation_dropout_forward(out, inp, act, dropout); });
}

void DebugSyncBackend::activation_dropout_backward(Tensor dinp, Tensor dout, Tensor inp, Activation act,
                                                   const DropoutMask& dropout) {
  checked("activation_dropout_backward", {{"dinp", dinp}, {"dout", dout}, {"inp", inp}},
          [&] { inner_->activation_dropout_backward(dinp, dout, inp, act, dropout); });
}

void DebugSyncBackend::rope_forward(Tensor qkv, int NH, int KVH, int first_pos, float theta) {
  checked("rope_forward", {{"qkv", qkv}}, [&] { inner_->rope_forward(qkv, NH, KVH, first_pos, theta); });
}

void DebugSyncBackend::rope_backward(Tensor dqkv, int NH, int KVH, int first_pos, float theta) {
  checked("rope_backward", {{"dqkv", dqkv}}, [&] { inner_->rope_backward(dqkv, NH, KVH, first_pos, theta); });
}

void DebugSyncBackend::residual_forward(Tensor out, Tensor a, Tensor b) {
  checked("residual_forward", {{"out", out}, {"a", a}, {"b", b}}, [&] { inner_->residual_forward(out, a, b); });
}

void DebugSyncBackend::add_scaled_columns(Tensor out, int64_t first, Tensor delta, float scale) {
  checked("add_scaled_columns", {{"out", out}, {"delta", delta}},
          [&] { inner_->add_scaled_columns(out, first, delta, scale); });
}

void DebugSyncBackend::copy_scaled_columns(Tensor out, Tensor inp, int64_t first, float scale) {
  checked("copy_scaled_columns", {{"out", out}, {"inp", inp}},
          [&] { inner_->copy_scaled_columns(out, inp, first, scale); });
}

void DebugSyncBackend::cross_entropy_forward_backward(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets,
                                                      Tensor dloss_scale, int64_t mean_over) {
  checked("cross_entropy_forward_backward",
          {{"losses", losses}, {"dlogits", dlogits}, {"logits", logits}, {"targets", targets},
           {"dloss_scale", dloss_scale}},
          [&] { inner_->cross_entropy_forward_backward(losses, dlogits, logits, targets, dloss_scale, mean_over); });
}

void DebugSyncBackend::cast(Tensor dst, Tensor src) {
  checked("cast", {{"dst", dst}, {"src", src}}, [&] { inner_->cast(dst, src); });
}

void DebugSyncBackend::grad_norm_check(Tensor grads, const LossScalerState& s) {
  checked("grad_norm_check", {{"grads", grads}, {"grad_norm_sq", s.grad_norm_sq}, {"found_inf", s.found_inf}},
          [&] { inner_->grad_norm_check(grads, s); });
}

void DebugSyncBackend::adamw_step(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                                  Tensor train_step, const AdamWHyper& hyper, const LossScalerState& s) {
  checked("adamw_step",
          {{"params", params}, {"grads", grads}, {"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq},
           {"step_count", step_count}, {"train_step", train_step}},
          [&] { inner_->adamw_step(params, grads, exp_avg, exp_avg_sq, step_count, train_step, hyper, s); });
}

void DebugSyncBackend::loss_scaler_update(const LossScalerState& s, const LossScalerConfig& config, Tensor step) {
  checked("loss_scaler_update", {{"scale", s.scale}, {"found_inf", s.found_inf}, {"step", step}},
          [&] { inner_->loss_scaler_update(s, config, step); });
}

void DebugSyncBackend::adamw_step_and_scaler_update(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq,
                                                    Tensor step_count, Tensor train_step, const AdamWHyper& hyper,
                                                    const LossScalerState& s, const LossScalerConfig& scaler) {
  checked("adamw_step_and_scaler_update",
          {{"params", params}, {"grads", grads}, {"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq},
           {"step_count", step_count}, {"train_step", train_step}, {"scale", s.scale}, {"found_inf", s.found_inf}},
          [&] {
            inner_->adamw_step_and_scaler_update(params, grads, exp_avg, exp_avg_sq, step_count, train_step, hyper, s,
                                                 scaler);
          });
}

void DebugSyncBackend::nf4_dequantize(Tensor out, const Nf4Tensor& w) {
  checked("nf4_dequantize",
          {{"out", out}, {"codes", w.codes}, {"absmax_codes", w.absmax_codes}, {"absmax2", w.absmax2},
           {"offset", w.offset}},
          [&] { inner_->nf4_dequantize(out, w); });
}

}  // namespace tt
