// Small members of the model family that tests train in milliseconds on the CPU.
#pragma once
#include "engine/config.h"
#include "engine/train_options.h"

namespace tt::test {

// The seed's kind (post-norm, relu, no positions, bidirectional) at vocab 32, d_model 32,
// 4 heads, 2 layers, d_ff 64.
inline ModelConfig small_model(int max_seq_len, float dropout) {
  ModelConfig c;
  c.vocab_size = 32;
  c.d_model = 32;
  c.n_head = 4;
  c.n_layer = 2;
  c.d_ff = 64;
  c.max_seq_len = max_seq_len;
  c.dropout = dropout;
  return c;
}

// The Llama block (engine/config.h's preset) at vocab 64, d_model 32, 4 query heads sharing 2
// key/value heads, 2 layers, SwiGLU of d_ff 48: every kind of column window LoRA adapts.
inline ModelConfig small_llama(int max_seq_len, float dropout) {
  ModelConfig c = arch_preset("llama");
  c.vocab_size = 64;
  c.d_model = 32;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_layer = 2;
  c.d_ff = 48;
  c.max_seq_len = max_seq_len;
  c.dropout = dropout;
  return c;
}

// A Trainer's options for a test: the model, the optimizer, batch x seq and the seed; the rest
// as `train`'s defaults (fp32, no recompute, one micro-batch).
inline TrainOptions trainer_options(const ModelConfig& model, const AdamWConfig& optimizer, int batch, int seq,
                                    int64_t seed) {
  TrainOptions o;
  o.model = model;
  o.optimizer = optimizer;
  o.run.batch = batch;
  o.run.seq = seq;
  o.run.seed = seed;
  return o;
}

}  // namespace tt::test
