// FLOPs and bytes of each backend op from its views (see op_cost.h for what is counted).
#include "engine/profile/op_cost.h"

namespace tt {

namespace {

// The bytes of a view, 0 when it has no data (an absent bias, a skipped gradient).
double bytes_of(const Tensor& t) { return t.data ? static_cast<double>(t.bytes()) : 0.0; }

// A view accumulated into (+=): read, then written.
double accumulated(const Tensor& t) { return 2 * bytes_of(t); }

// A parameter gradient written (the first micro-batch) or added to (the others).
double param_grad(const Tensor& t, ParamGrads grads) {
  return grads == ParamGrads::Add ? accumulated(t) : bytes_of(t);
}

// The scalars of the loss scaler's state: 4 bytes each.
double scaler_state_bytes(const LossScalerState& s) {
  return bytes_of(s.scale) + bytes_of(s.growth_tracker) + bytes_of(s.found_inf) + bytes_of(s.skipped_steps) +
         bytes_of(s.first_skipped_step) + bytes_of(s.grad_norm_sq);
}

// (query, key) pairs of one head of one sequence that the mask allows.
double attention_pairs(const AttentionShape& s) {
  const double T = s.T;
  return s.causal ? T * (T + 1) / 2 : T * T;
}

}  // namespace

// tokens (N) -> out (N,C): each token reads its row of wte (and of wpe) and writes a row.
OpCost embedding_forward_cost(Tensor out, Tensor tokens, Tensor wte, Tensor wpe) {
  const double N = static_cast<double>(tokens.numel()), row = static_cast<double>(wte.shape[1]);
  const double wpe_rows = wpe.data ? N * row * dtype_size(wpe.dtype) : 0;
  return {0, bytes_of(tokens) + N * row * dtype_size(wte.dtype) + wpe_rows + bytes_of(out)};
}

// dout (N,C) -> each token adds its row into dwte (and dwpe): rows read and written. Written
// (ParamGrads::Write), the rows no token uses are written too (zeros).
OpCost embedding_backward_cost(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads) {
  const double N = static_cast<double>(tokens.numel()), row = static_cast<double>(dwte.shape[1]);
  const double dwpe_rows = dwpe.data ? 2 * N * row * dtype_size(dwpe.dtype) : 0;
  const double zeroed = grads == ParamGrads::Write ? bytes_of(dwte) + bytes_of(dwpe) : 0;
  return {0, bytes_of(dout) + bytes_of(tokens) + 2 * N * row * dtype_size(dwte.dtype) + dwpe_rows + zeroed};
}

// inp (N,I), weight (O,I), bias (O) -> out (N,O): N x O dot products of length I.
OpCost linear_forward_cost(Tensor out, Tensor inp, Tensor weight, Tensor bias) {
  const double O = static_cast<double>(weight.shape[0]), I = static_cast<double>(weight.shape[1]);
  const double N = static_cast<double>(inp.numel()) / I;
  return {2 * N * I * O, bytes_of(inp) + bytes_of(weight) + bytes_of(bias) + bytes_of(out)};
}

// dout (N,O): dweight (O,I) = dout^T inp, and dinp (N,I) = dout weight when asked for (added
// to dinp: read too); each a product the size of the forward's. dbias (O) = the column sums
// of dout (not a product). The parameter gradients are written or added (grads).
OpCost linear_backward_cost(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                            ParamGrads grads, InputGrad input) {
  const double O = static_cast<double>(weight.shape[0]), I = static_cast<double>(weight.shape[1]);
  const double N = static_cast<double>(inp.numel()) / I;
  const bool input_gradient = dinp.data != nullptr, weight_gradient = dweight.data != nullptr;  // (frozen: none)
  OpCost c;
  c.flops = 2 * N * I * O * ((input_gradient ? 1 : 0) + (weight_gradient ? 1 : 0));
  c.bytes = bytes_of(dout);
  if (weight_gradient) c.bytes += bytes_of(inp) + param_grad(dweight, grads) + param_grad(dbias, grads);
  if (input_gradient) c.bytes += bytes_of(weight) + (input == InputGrad::Add ? accumulated(dinp) : bytes_of(dinp));
  return c;
}

// qkv (B,T,W) -> out (B,T,C), lse (B,NH,T) written: nothing of size T x T (the weights live
// in registers and shared memory, docs/attention.md).
OpCost attention_forward_cost(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s) {
  const double flops = static_cast<double>(s.B) * s.NH * attention_pairs(s) * 4 * s.HS;
  return {flops, bytes_of(qkv) + bytes_of(out) + bytes_of(lse)};
}

// dout (B,T,C), qkv, out, lse read -> dqkv (B,T,W) written; dout_dot_out (B,NH,T) written
// and read back. FLOPs as engine/flops.h counts them: the recomputed scores are not counted
// (as a recomputed layer's are not in MFU).
OpCost attention_backward_cost(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                               const AttentionShape& s) {
  const double flops = static_cast<double>(s.B) * s.NH * attention_pairs(s) * 8 * s.HS;
  return {flops, bytes_of(dout) + bytes_of(qkv) + bytes_of(out) + bytes_of(lse) + bytes_of(dqkv) +
                     2 * bytes_of(dout_dot_out)};
}

// qkv (B,T,W), W = (NH + 2 KVH) HS: its NH + KVH query and key heads read and written in
// place; no FLOPs counted
OpCost rope_cost(Tensor qkv, int NH, int KVH) {
  return {0, 2 * bytes_of(qkv) * (NH + KVH) / static_cast<double>(NH + 2 * KVH)};
}

// qkv (B,C+2KC): its k and v parts read -> row pos of each cache (B,maxT,KC) written. The
// caches hold qkv's dtype (check_decode_views): 2 B KC elements read, 2 B KC written.
OpCost kv_cache_append_cost(Tensor k_cache, Tensor qkv) {
  const double k_and_v_bytes = 2.0 * static_cast<double>(qkv.shape[0] * k_cache.shape[2]) * dtype_size(qkv.dtype);
  return {0, 2 * k_and_v_bytes};
}

// qkv's q part (B,C) and positions 0..pos of both caches read -> out (B,C) written. Per head
// and sequence, pos + 1 (query, key) pairs of 4 HS FLOPs, as a row of attention_forward.
OpCost attention_decode_cost(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, int pos, int NH) {
  const double B = static_cast<double>(out.shape[0]), C = static_cast<double>(out.shape[1]), keys = pos + 1.0;
  const double HS = C / NH;
  const double q_bytes = B * C * dtype_size(qkv.dtype);
  const double KC = static_cast<double>(k_cache.shape[2]);  // C, or fewer with grouped key/value heads
  const double cached_bytes = B * keys * KC * (dtype_size(k_cache.dtype) + dtype_size(v_cache.dtype));
  return {B * NH * keys * 4 * HS, q_bytes + cached_bytes + bytes_of(out)};
}

// inp (N,C), weight, bias (C) -> out (N,C), mean, rstd (N)
OpCost layernorm_forward_cost(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias) {
  return {0, bytes_of(inp) + bytes_of(weight) + bytes_of(bias) + bytes_of(out) + bytes_of(mean) + bytes_of(rstd)};
}

// dout, inp (N,C), weight (C), mean, rstd (N) -> dinp (N,C); dweight, dbias (C) written or added
OpCost layernorm_backward_cost(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                               Tensor mean, Tensor rstd, ParamGrads grads) {
  return {0, bytes_of(dout) + bytes_of(inp) + bytes_of(weight) + bytes_of(mean) + bytes_of(rstd) + bytes_of(dinp) +
                 param_grad(dweight, grads) + param_grad(dbias, grads)};
}

// residual, branch (N,C), weight, bias (C) -> res_out (N,C), and ln_out (N,C), mean, rstd (N)
// when ln_out has data: each read or written once, res_out never read back (one pass).
OpCost dropout_residual_layernorm_forward_cost(Tensor res_out, Tensor ln_out, Tensor mean, Tensor rstd,
                                               Tensor residual, Tensor branch, Tensor weight, Tensor bias) {
  double bytes = bytes_of(residual) + bytes_of(branch) + bytes_of(res_out);
  if (ln_out.data) bytes += bytes_of(weight) + bytes_of(bias) + bytes_of(ln_out) + bytes_of(mean) + bytes_of(rstd);
  return {0, bytes};
}

// dout, dout2, dskip, inp (N,C), weight (C), mean, rstd (N) read once -> dinp, dbranch (N,C)
// written once; dweight, dbias (C) written or added.
OpCost layernorm_residual_dropout_backward_cost(Tensor dinp, Tensor dbranch, Tensor dweight, Tensor dbias,
                                                Tensor dout, Tensor dout2, Tensor dskip, Tensor inp, Tensor weight,
                                                Tensor mean, Tensor rstd, ParamGrads grads) {
  return {0, bytes_of(dout) + bytes_of(dout2) + bytes_of(dskip) + bytes_of(inp) + bytes_of(weight) + bytes_of(mean) +
                 bytes_of(rstd) + bytes_of(dinp) + bytes_of(dbranch) + param_grad(dweight, grads) +
                 param_grad(dbias, grads)};
}

OpCost elementwise_cost(std::initializer_list<Tensor> reads, Tensor write) {
  OpCost c{0, bytes_of(write)};
  for (const Tensor& t : reads) c.bytes += bytes_of(t);
  return c;
}

// inp (n) -> out (n). With p = 0 it is a copy, or nothing at all in place.
OpCost dropout_cost(Tensor out, Tensor inp, const DropoutMask& dropout) {
  if (dropout.p == 0.0f && out.data == inp.data) return {};
  return {0, bytes_of(inp) + bytes_of(out)};
}

// logits (N,V), targets (N), dloss_scale (1) -> losses (N), dlogits (N,V) when asked for
OpCost cross_entropy_cost(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets, Tensor dloss_scale) {
  return {0, bytes_of(logits) + bytes_of(targets) + bytes_of(dloss_scale) + bytes_of(losses) + bytes_of(dlogits)};
}

// grads (n) read -> the squared norm and the inf/NaN flag written
OpCost grad_norm_check_cost(Tensor grads, const LossScalerState& s) {
  return {0, bytes_of(grads) + bytes_of(s.grad_norm_sq) + bytes_of(s.found_inf)};
}

// params, exp_avg, exp_avg_sq (n) read and written, grads (n) read; the counters and the
// scaler's scale, flag and norm read (step_count written too)
OpCost adamw_step_cost(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                       Tensor train_step, const LossScalerState& s) {
  return {0, accumulated(params) + bytes_of(grads) + accumulated(exp_avg) + accumulated(exp_avg_sq) +
                 accumulated(step_count) + bytes_of(train_step) + bytes_of(s.scale) + bytes_of(s.found_inf) +
                 bytes_of(s.grad_norm_sq)};
}

// the scaler's scalars read and written, the step read
OpCost loss_scaler_update_cost(const LossScalerState& s, Tensor step) {
  return {0, 2 * scaler_state_bytes(s) + bytes_of(step)};
}

OpCost adamw_step_and_scaler_update_cost(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq,
                                         Tensor step_count, Tensor train_step, const LossScalerState& s) {
  // The scaler's scalars are read by the update anyway; the update writes them once more.
  const OpCost update = adamw_step_cost(params, grads, exp_avg, exp_avg_sq, step_count, train_step, s);
  return {0, update.bytes + scaler_state_bytes(s)};
}

OpCost fill_zero_cost(Tensor t) { return {0, bytes_of(t)}; }

}  // namespace tt
