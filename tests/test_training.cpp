// End-to-end training on the CPU backend: a learnable task is learned, and the same seed
// gives the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/token_batch.h"
#include "engine/init.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/test_models.h"

namespace tt {
namespace {

ModelConfig small_config() { return test::small_model(/*max_seq_len=*/16, /*dropout=*/0.0f); }

// Copy task: the target at each position is the input token there. The model must route
// each token's identity through the encoder to the head; loss starts near ln(V) = 3.47.
TEST(Training, CopyTaskLossFallsFarBelowLnVocab) {
  auto backend = make_cpu_backend();
  const ModelConfig c = small_config();
  AdamWConfig opt;
  opt.lr = 3e-3;
  const int B = 8, T = 16, steps = 300;
  Trainer trainer(*backend, test::trainer_options(c, opt, B, T, /*seed=*/3));
  trainer.load_params(init_params(trainer.model().layout(), 3).data());
  std::vector<int32_t> x(B * T), y(B * T);
  double first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    random_batch(3, s, B, T, c.vocab_size, x.data(), y.data());
    trainer.load_batch(x.data(), x.data(), s);  // targets = inputs
    trainer.forward_backward();
    if (s == 0) first = trainer.read_loss();
    if (s == steps - 1) last = trainer.read_loss();
    trainer.optimizer_step();
  }
  const double ln_vocab = std::log(static_cast<double>(c.vocab_size));
  std::printf("[ loss     ] copy task: step 0 %.4f, step %d %.4f, ln(V) %.4f\n", first, steps - 1, last, ln_vocab);
  EXPECT_GT(first, 0.8 * ln_vocab);
  EXPECT_LT(last, 0.1 * ln_vocab);
}

// Two runs with the same seed (dropout on) give bit-identical losses and parameters; another
// dropout seed, with the same initial weights and batches, does not.
TEST(Training, SameSeedSameBits) {
  auto run = [](uint64_t dropout_seed) {
    const uint64_t seed = 11;  // weights and batches
    auto backend = make_cpu_backend();
    ModelConfig c = small_config();
    c.dropout = 0.1f;
    AdamWConfig opt;
    const int B = 4, T = 16;
    Trainer trainer(*backend, test::trainer_options(c, opt, B, T, static_cast<int64_t>(dropout_seed)));
    trainer.load_params(init_params(trainer.model().layout(), seed).data());
    std::vector<int32_t> x(B * T), y(B * T);
    std::vector<double> losses;
    for (int s = 0; s < 5; ++s) {
      random_batch(seed, s, B, T, c.vocab_size, x.data(), y.data());
      trainer.load_batch(x.data(), y.data(), s);
      trainer.forward_backward();
      losses.push_back(trainer.read_loss());
      trainer.optimizer_step();
    }
    std::vector<float> params(trainer.model().params().numel());
    backend->copy_to_host(params.data(), trainer.model().params().data, trainer.model().params().bytes());
    return std::make_pair(losses, params);
  };
  const auto a = run(11), b = run(11), other = run(12);
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
  EXPECT_NE(a.first, other.first);
}

// Dropout is really applied in training: the same weights and batch give another loss with
// p = 0.1 than with p = 0, and another mask (step) gives another loss.
TEST(Training, DropoutChangesTheLossAndFollowsTheStep) {
  auto loss_of = [](float p, uint32_t step) {
    auto backend = make_cpu_backend();
    ModelConfig c = small_config();
    c.dropout = p;
    const int B = 4, T = 16;
    Trainer trainer(*backend, test::trainer_options(c, AdamWConfig{}, B, T, 5));
    trainer.load_params(init_params(trainer.model().layout(), 5).data());
    std::vector<int32_t> x(B * T), y(B * T);
    random_batch(5, 0, B, T, c.vocab_size, x.data(), y.data());
    trainer.load_batch(x.data(), y.data(), step);
    trainer.forward_backward();
    return trainer.read_loss();
  };
  EXPECT_NE(loss_of(0.1f, 0), loss_of(0.0f, 0));
  EXPECT_NE(loss_of(0.1f, 0), loss_of(0.1f, 1));
  EXPECT_EQ(loss_of(0.1f, 1), loss_of(0.1f, 1));
  EXPECT_EQ(loss_of(0.0f, 0), loss_of(0.0f, 1));
}

}  // namespace
}  // namespace tt
