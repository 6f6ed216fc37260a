// What one backend op costs, counted from the views it is given (kernels/backend.h): the
// floating-point operations it has to do and the bytes it has to move. `tinytrain profile`
// divides them by the op's measured time (TFLOP/s, GB/s) and places the op on the roofline.
//
// FLOPs follow engine/flops.h exactly, so a profiled step's matrix products add up to
// training_step_flops(): only matrix products are counted, 2 FLOPs per multiply-accumulate;
//   linear_forward    inp (N,I), weight (O,I):  2 N I O
//   linear_backward   dweight 2 N I O, plus dinp 2 N I O when it is asked for
//   attention_forward per head: scores and the weighted sum of v, 2 HS each per (query, key)
//                     pair the mask allows: B NH pairs 4 HS, pairs = T^2, T (T + 1) / 2 causal
//   attention_backward twice the forward (dq and dk; dv and the weights' gradients)
//   attention_decode  one query row per sequence against pos + 1 cached keys: B NH (pos+1) 4 HS
// Every other op (bias adds, softmax, LayerNorm, activations, dropout, residual adds,
// cross-entropy, AdamW, casts) counts 0: a few FLOPs per element, never what bounds it. Its
// speed is its bandwidth, and that is how the roofline judges it.
//
// Bytes are the traffic an ideal kernel cannot avoid: every element of every view the op reads,
// read once, and of every view it writes, written once; a view it accumulates into (+=, the
// parameter gradients) is read and written. A gather reads the rows it uses (embedding: one
// row per token). A view with no data (no bias, no dinp) moves nothing, nor does an op that is
// the identity in place (dropout with p = 0). Real kernels move more (a GEMM re-reads its tiles,
// our attention re-reads q, k and v per block): the measured time says how much more.
#pragma once
#include <initializer_list>

#include "kernels/backend.h"

namespace tt {

struct OpCost {
  double flops = 0;  // floating-point operations (engine/flops.h's convention)
  double bytes = 0;  // bytes read + bytes written
};

// One function per Backend op, taking the op's arguments.
OpCost embedding_forward_cost(Tensor out, Tensor tokens, Tensor wte, Tensor wpe);
OpCost embedding_backward_cost(Tensor dwte, Tensor dwpe, Tensor dout, Tensor tokens, ParamGrads grads);
OpCost linear_forward_cost(Tensor out, Tensor inp, Tensor weight, Tensor bias);
OpCost linear_backward_cost(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                            ParamGrads grads, InputGrad input);
OpCost attention_forward_cost(Tensor out, Tensor lse, Tensor qkv, const AttentionShape& s);
OpCost attention_backward_cost(Tensor dqkv, Tensor dout_dot_out, Tensor dout, Tensor qkv, Tensor out, Tensor lse,
                               const AttentionShape& s);
OpCost kv_cache_append_cost(Tensor k_cache, Tensor qkv);
OpCost rope_cost(Tensor qkv, int NH, int KVH);  // rope_forward, rope_backward: the q and k heads read and written
OpCost attention_decode_cost(Tensor out, Tensor qkv, Tensor k_cache, Tensor v_cache, int pos, int NH);
OpCost layernorm_forward_cost(Tensor out, Tensor mean, Tensor rstd, Tensor inp, Tensor weight, Tensor bias);
OpCost layernorm_backward_cost(Tensor dinp, Tensor dweight, Tensor dbias, Tensor dout, Tensor inp, Tensor weight,
                               Tensor mean, Tensor rstd, ParamGrads grads);
OpCost dropout_residual_layernorm_forward_cost(Tensor res_out, Tensor ln_out, Tensor mean, Tensor rstd,
                                               Tensor residual, Tensor branch, Tensor weight, Tensor bias);
OpCost layernorm_residual_dropout_backward_cost(Tensor dinp, Tensor dbranch, Tensor dweight, Tensor dbias,
                                                Tensor dout, Tensor dout2, Tensor dskip, Tensor inp, Tensor weight,
                                                Tensor mean, Tensor rstd, ParamGrads grads);
// activation_forward and activation_dropout_forward (read inp, write out), activation_backward
// and activation_dropout_backward (read dout and inp, write dinp), residual_forward (read a and
// b, write out) and cast (read src, write dst): reads and a write.
OpCost elementwise_cost(std::initializer_list<Tensor> reads, Tensor write);
OpCost dropout_cost(Tensor out, Tensor inp, const DropoutMask& dropout);  // forward and backward alike
OpCost cross_entropy_cost(Tensor losses, Tensor dlogits, Tensor logits, Tensor targets, Tensor dloss_scale);
OpCost grad_norm_check_cost(Tensor grads, const LossScalerState& s);
OpCost adamw_step_cost(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq, Tensor step_count,
                       Tensor train_step, const LossScalerState& s);
OpCost loss_scaler_update_cost(const LossScalerState& s, Tensor step);
// adamw_step_and_scaler_update: the two above in one pass
OpCost adamw_step_and_scaler_update_cost(Tensor params, Tensor grads, Tensor exp_avg, Tensor exp_avg_sq,
                                         Tensor step_count, Tensor train_step, const LossScalerState& s);
OpCost fill_zero_cost(Tensor t);

}  // namespace tt
