// FLOPs of a training step from the model's shapes (see flops.h for what is counted).
#include "engine/flops.h"

namespace tt {

ForwardFlops forward_flops(const ModelConfig& m, int64_t B, int64_t T) {
  const double N = static_cast<double>(B) * T, C = m.d_model, F = m.d_ff, V = m.vocab_size, L = m.n_layer;
  // (query, key) pairs per sequence the mask allows, over every head: each costs 2 HS for the
  // score and 2 HS for the weighted sum, and NH heads of HS channels make C.
  const double pairs = m.causal ? T * (T + 1) / 2.0 : static_cast<double>(T) * T;
  ForwardFlops f;
  // in_proj makes q (C) and the key and value heads (C each, fewer with grouped heads); the
  // attention itself runs per query head, so grouping does not change its count
  f.qkv = L * 2 * N * C * static_cast<double>(m.qkv_width());
  f.attention = L * B * pairs * 4 * C;
  f.out_proj = L * 2 * N * C * C;
  // linear1 makes F outputs (SwiGLU: gate and up, 2F), linear2 takes F back to C
  f.ffn = L * (2 * N * C * static_cast<double>(m.ffn_in_width()) + 2 * N * F * C);
  f.head = 2 * N * C * V;
  return f;
}

StepFlops training_step_flops(const ModelConfig& m, int64_t B, int64_t T, Recompute recompute,
                              const LoraConfig& lora) {
  const ForwardFlops f = forward_flops(m, B, T);
  StepFlops s;
  s.forward = f.total();
  s.backward = 2 * s.forward;
  // --recompute ffn repeats linear1 (half the FFN's products, two thirds with SwiGLU); layer
  // repeats each layer's whole forward (the head's is never repeated: its input is kept).
  const double F1 = static_cast<double>(m.ffn_in_width()), F = m.d_ff;
  const double linear1 = f.ffn * F1 / (F1 + F);
  if (recompute == Recompute::Ffn) s.recompute = linear1;
  if (recompute == Recompute::Layer) s.recompute = f.qkv + f.attention + f.out_proj + f.ffn;
  if (!lora.enabled()) return s;
  // LoRA: every frozen linear (the head's too) drops its weight gradient, the forward's worth
  const double linears = f.qkv + f.out_proj + f.ffn + f.head;
  s.backward -= linears;
  const double N = static_cast<double>(B) * T, r = lora.rank;
  for (const LoraTarget& t : lora_targets(m, lora)) {
    const double adapter = m.n_layer * 2 * N * r * static_cast<double>(t.in + t.out);  // drop(x) A^T, u B^T
    s.forward += adapter;
    s.backward += 2 * adapter;
    if (recompute == Recompute::Layer || (recompute == Recompute::Ffn && t.site == LoraSite::Linear1))
      s.recompute += adapter;
  }
  return s;
}

}  // namespace tt
