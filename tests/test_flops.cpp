// The FLOP count of a training step (engine/flops.h) against the parameter layout: every matrix
// product is a weight matrix applied to every token, so the forward's linear FLOPs must be
// 2 x tokens x (the elements of the 2-D weights the layout holds, embeddings aside), whatever
// the per-op formulas say; attention adds 4 C per (query, key) pair the mask allows.
#include <gtest/gtest.h>

#include "engine/flops.h"
#include "engine/lora.h"
#include "engine/param_layout.h"

namespace tt {
namespace {

// Elements of the weight matrices that multiply activations: every 2-D parameter but the
// token and position embeddings (lookups, not products; the Llama block's table by its name).
double matmul_weights(const ModelConfig& config) {
  double n = 0;
  const ParamLayout layout(config);
  for (const ParamInfo& p : layout.params())
    if (p.shape.rank == 2 && p.name != "embed.weight" && p.name != "model.embed_tokens.weight" &&
        p.name != "pos_embed.weight")
      n += p.shape.numel();
  return n;
}

TEST(Flops, LinearWorkIsTwoFlopsPerWeightPerTokenAndAttentionCountsTheMaskedPairs) {
  ModelConfig seed;  // the seed workload: 2 layers, C 128, F 2048, V 512, bidirectional
  ModelConfig lm = seed;
  lm.causal = true;
  lm.norm_first = true;
  lm.pos_embedding = PosEmbedding::Learned;
  lm.vocab_size = 4096;
  lm.n_layer = 4;
  lm.d_ff = 512;
  for (const ModelConfig& m : {seed, lm}) {
    for (int64_t B : {1, 16}) {
      const int64_t T = 64;
      const ForwardFlops f = forward_flops(m, B, T);
      const double tokens = static_cast<double>(B * T);
      EXPECT_DOUBLE_EQ(f.qkv + f.out_proj + f.ffn + f.head, 2 * tokens * matmul_weights(m));
      const double pairs = m.causal ? T * (T + 1) / 2.0 : static_cast<double>(T * T);
      EXPECT_DOUBLE_EQ(f.attention, m.n_layer * B * pairs * 4 * m.d_model);
      const StepFlops step = training_step_flops(m, B, T, Recompute::None);
      EXPECT_DOUBLE_EQ(step.forward, f.total());
      EXPECT_DOUBLE_EQ(step.model(), 3 * f.total());
      EXPECT_DOUBLE_EQ(step.recompute, 0);
      // Recomputation is hardware work, not model work.
      const StepFlops ffn = training_step_flops(m, B, T, Recompute::Ffn);
      EXPECT_DOUBLE_EQ(ffn.model(), step.model());
      EXPECT_DOUBLE_EQ(ffn.recompute, m.n_layer * 2 * tokens * m.d_model * m.d_ff);  // linear1 again
      const StepFlops layer = training_step_flops(m, B, T, Recompute::Layer);
      EXPECT_DOUBLE_EQ(layer.recompute, f.total() - f.head);  // every layer's forward again
      EXPECT_DOUBLE_EQ(layer.hardware(), layer.model() + layer.recompute);
    }
  }
}

// LoRA: the frozen linears' weight gradients drop out of the backward (their forward's worth:
// 2 N per weight of every linear), and the adapters' products add 2 N per adapter parameter
// (A's and B's: lora_layout's total) forward and twice that backward.
TEST(Flops, LoraDropsTheFrozenWeightGradientsAndAddsTheAdapters) {
  ModelConfig m = arch_preset("llama");
  m.d_model = 64;
  m.n_head = 4;
  m.n_kv_head = 2;
  m.d_ff = 96;
  m.n_layer = 3;
  const int64_t B = 4, T = 32;
  const double tokens = static_cast<double>(B * T);
  LoraConfig lora;
  lora.rank = 8;
  lora.targets = lora_module_names(m);
  const ForwardFlops f = forward_flops(m, B, T);
  const double linears = 2 * tokens * matmul_weights(m), adapters = 2 * tokens * lora_layout(m, lora).total();
  const StepFlops step = training_step_flops(m, B, T, Recompute::None, lora);
  EXPECT_DOUBLE_EQ(step.forward, f.total() + adapters);
  EXPECT_DOUBLE_EQ(step.backward, 2 * f.total() - linears + 2 * adapters);
  EXPECT_DOUBLE_EQ(training_step_flops(m, B, T, Recompute::Layer, lora).recompute, f.total() - f.head + adapters);
}

}  // namespace
}  // namespace tt
