// LoRA (engine/lora.h) in the trainer: the adapted model starts as its base, what trains is the
// adapters alone (no base gradient, no base optimizer state), recompute gives the same bits, and
// the CUDA backend (the SIMT emulator without a GPU) follows the CPU's run with dropout on both
// the model and the adapters' inputs. PEFT itself checks the math: tests/lora_interop.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/init.h"
#include "engine/lora.h"
#include "engine/nf4_weight.h"
#include "engine/token_batch.h"
#include "engine/trainer.h"
#include "kernels/cpu/cpu_backend.h"
#include "optim/adamw.h"
#include "tests/cuda_test_util.h"
#include "tests/test_models.h"

namespace tt {
namespace {

// A tiny Llama block (GQA, SwiGLU: every kind of column window) with every module adapted.
ModelConfig tiny_llama(float dropout) { return test::small_llama(16, dropout); }

LoraConfig every_module(float dropout) {
  LoraConfig lora;
  lora.rank = 4;
  lora.alpha = 8;
  lora.dropout = dropout;
  lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return lora;
}

constexpr int kB = 4, kT = 16;
constexpr int64_t kSeed = 21;

struct LoraRun {
  std::vector<double> losses;
  std::vector<float> adapters;  // after the last step
};

// `steps` LoRA steps on random tokens from an hf-initialised base, AdamW lr 1e-2; nf4: QLoRA.
LoraRun train_lora(Backend& backend, int steps, Recompute recompute = Recompute::None, int grad_accum = 1,
                   float dropout = 0.1f, bool nf4 = false, Precision precision = Precision::FP32) {
  AdamWConfig opt;
  opt.lr = 1e-2;
  TrainOptions o = test::trainer_options(tiny_llama(dropout), opt, kB, kT, kSeed);
  o.precision = precision;
  o.lora = every_module(dropout);
  o.lora.nf4_base = nf4;
  o.recompute = recompute;
  o.grad_accum = grad_accum;
  Trainer trainer(backend, o);
  trainer.model().load_base(init_params(ParamLayout(o.model), o.model, 3, InitScheme::HuggingFace).data());
  trainer.load_params(lora_init(trainer.model().layout(), kSeed).data());
  LoraRun run;
  std::vector<int32_t> x(kB * kT), y(x.size());
  for (int s = 0; s < steps; ++s) {
    if (s > 0) EXPECT_EQ(trainer.scaler().read().skipped_steps, 0) << "step " << s - 1 << " skipped";
    random_batch(kSeed, s, kB, kT, o.model.vocab_size, x.data(), y.data());
    trainer.load_batch(x.data(), y.data(), s);
    trainer.train_step(true);
    run.losses.push_back(trainer.read_loss());
  }
  run.adapters.resize(trainer.model().params().numel());
  backend.copy_to_host(run.adapters.data(), trainer.model().params().data, trainer.model().params().bytes());
  return run;
}

// Logits of one forward: the plain model on `base`, or that base with fresh adapters (nf4:
// the base's linear weights stored as NF4).
std::vector<float> logits(Backend& backend, const std::vector<float>& base, bool adapted, bool nf4 = false) {
  TrainOptions o = test::trainer_options(tiny_llama(0.0f), AdamWConfig{}, kB, kT, kSeed);
  if (adapted) o.lora = every_module(0.0f);
  o.lora.nf4_base = nf4;
  Trainer trainer(backend, o);
  if (adapted) {
    trainer.model().load_base(base.data());
    trainer.load_params(lora_init(trainer.model().layout(), kSeed).data());
  } else {
    trainer.load_params(base.data());
  }
  std::vector<int32_t> x(kB * kT), y(x.size());
  random_batch(kSeed, 0, kB, kT, o.model.vocab_size, x.data(), y.data());
  trainer.load_batch(x.data(), y.data(), 0);
  trainer.forward();
  const Tensor out = trainer.model().logits();
  std::vector<float> host(out.numel());
  backend.copy_to_host(host.data(), out.data, out.bytes());
  return host;
}

// B starts at zero, so each adapter adds exactly 0 (s * 0 rounds to 0, and x + 0 is x): the
// adapted model's logits are the base's bit for bit. A B drawn like A would move them by ~1e-1.
TEST(Lora, AdaptersStartAsTheBase) {
  auto cpu = make_cpu_backend();
  const ModelConfig c = tiny_llama(0.0f);
  const std::vector<float> base = init_params(ParamLayout(c), c, 3, InitScheme::HuggingFace);
  EXPECT_EQ(logits(*cpu, base, true), logits(*cpu, base, false));
}

// QLoRA's forward runs on the decoded NF4 weights: the logits are those of the plain model whose
// linear weights went through quantize_nf4 and dequantize_nf4 on the host (engine/nf4_weight.h),
// bit for bit: each tensor is decoded into its place in the tile (q, k, v side by side), and
// everything else of the base is packed apart.
TEST(Lora, QuantisedBaseRunsOnItsDecodedWeights) {
  auto cpu = make_cpu_backend();
  const ModelConfig c = tiny_llama(0.0f);
  const ParamLayout layout(c);
  const std::vector<float> base = init_params(layout, c, 3, InitScheme::HuggingFace);
  std::vector<float> decoded = base;
  int quantised = 0;
  for (const ParamInfo& p : layout.params()) {
    if (!is_quantised_base_weight(p.name)) continue;
    const std::vector<float> w = dequantize_nf4(quantize_nf4(base.data() + p.offset, p.shape.numel()));
    std::copy(w.begin(), w.end(), decoded.begin() + p.offset);
    ++quantised;
  }
  EXPECT_EQ(quantised, 7 * c.n_layer);
  EXPECT_NE(decoded, base);
  EXPECT_EQ(logits(*cpu, base, true, true), logits(*cpu, decoded, false));
}

// What trains is the adapters: the optimizer's state and the gradient buffer cover them alone,
// and the frozen base is held once, as working weights, with no gradient buffer of its size.
TEST(Lora, OnlyTheAdaptersHaveGradientsAndOptimizerState) {
  auto cpu = make_cpu_backend();
  TrainOptions o = test::trainer_options(tiny_llama(0.0f), AdamWConfig{}, kB, kT, kSeed);
  o.lora = every_module(0.0f);
  Trainer trainer(*cpu, o);
  const int64_t adapters = lora_layout(o.model, o.lora).total(), base = ParamLayout(o.model).total();
  EXPECT_EQ(trainer.model().layout().total(), adapters);
  EXPECT_EQ(trainer.model().grads().numel(), adapters);
  EXPECT_EQ(trainer.model().base_layout().total(), base);
  const ArenaPlan weights = Model::plan_weights(o.model, DType::F32, 1, o.lora);
  int64_t base_sized = 0;
  for (const auto& entry : weights.entries()) base_sized += entry.shape.numel() == base;
  EXPECT_EQ(base_sized, 1) << "the base once (its working weights), no gradient or master copy of it";
  EXPECT_EQ(trainer.bytes(), trainer.model().bytes() + AdamW::plan_state(adapters).bytes() + trainer.scaler().bytes() +
                                 Trainer::plan_batch(kB, kT).bytes());
}

// Recompute redoes the forward with the same masks, adapters included: the same bits.
TEST(Lora, RecomputeGivesTheSameBits) {
  auto cpu = make_cpu_backend();
  const LoraRun kept = train_lora(*cpu, 3), layer = train_lora(*cpu, 3, Recompute::Layer),
                ffn = train_lora(*cpu, 3, Recompute::Ffn);
  EXPECT_EQ(layer.losses, kept.losses);
  EXPECT_EQ(layer.adapters, kept.adapters);
  EXPECT_EQ(ffn.adapters, kept.adapters);
}

// Two micro-batches draw the masks of their rows in the whole batch: the same gradients up to
// fp32 summation order (the two halves' sums added), so the losses agree to ~1e-6; AdamW turns
// a rounding-level gradient into a step of up to lr on an element, but such elements are few
// and their moves cancel over steps: as tests/memory_checks.h argues for the whole model,
// 0.1 lr steps bounds every adapter (3e-3 here; a mask of the wrong rows moves adapters by ~lr
// on every element).
TEST(Lora, AccumulationFollowsTheWholeBatch) {
  auto cpu = make_cpu_backend();
  const int steps = 3;
  const double lr = 1e-2;  // train_lora's
  const LoraRun whole = train_lora(*cpu, steps), halves = train_lora(*cpu, steps, Recompute::None, 2);
  for (size_t s = 0; s < whole.losses.size(); ++s) EXPECT_NEAR(halves.losses[s], whole.losses[s], 1e-5) << "step " << s;
  ASSERT_EQ(halves.adapters.size(), whole.adapters.size());
  for (size_t i = 0; i < whole.adapters.size(); ++i)
    ASSERT_NEAR(halves.adapters[i], whole.adapters[i], 0.1 * lr * steps) << "adapter " << i;
}

// bf16 and fp16 (the adapters' working copies, the base and the activations 16-bit; fp16's loss
// scaler on the adapters' gradients) follow fp32: step 0's loss within a quarter u x loss, the
// band tests/test_loss_scaler.cpp derives for the whole model from the per-token rounding (the
// adapters add terms of their own size, as any linear does), and every step trains (no skipped
// step, the loss falling as fp32's does). A 16-bit path that lost the adapters (a window
// written in fp32 into bf16 memory) moves step 0 by the adapters' size, ~1e-1.
TEST(Lora, SixteenBitRunsFollowFp32) {
  auto cpu = make_cpu_backend();
  const LoraRun fp32 = train_lora(*cpu, 4);
  for (Precision precision : {Precision::BF16, Precision::FP16}) {
    SCOPED_TRACE(precision_name(precision));
    const double u = precision == Precision::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const LoraRun low = train_lora(*cpu, 4, Recompute::None, 1, 0.1f, false, precision);
    EXPECT_NEAR(low.losses[0], fp32.losses[0], 0.25 * u * fp32.losses[0]);
    EXPECT_LT(low.losses.back(), low.losses.front());
  }
}

// The CUDA kernels (the column windows, the frozen linears' input-only backward, the rank-r
// GEMMs) against the CPU's, dropout 0.1 on the model and on every adapter's input: the masks
// are the same, so fp32 rounding alone separates the runs. Step 0's loss agrees to ~1e-6 (1e-5
// allows the attention's other summation order); after 4 AdamW steps at lr 1e-2 on adapters,
// rounding-level gradient differences move a few elements by up to ~lr, the loss by < 1e-3,
// while a wrong window or a missing scale moves it by ~1e-1 at step 1.
TEST(Lora, CudaFollowsTheCpuRun) {
  REQUIRE_CUDA(cuda);
  auto cpu = make_cpu_backend();
  const LoraRun on_cuda = train_lora(*cuda, 4), on_cpu = train_lora(*cpu, 4);
  EXPECT_NEAR(on_cuda.losses[0], on_cpu.losses[0], 1e-5);
  for (size_t s = 0; s < on_cpu.losses.size(); ++s)
    EXPECT_NEAR(on_cuda.losses[s], on_cpu.losses[s], 1e-3) << "step " << s;
}

// The same with the base in NF4: both backends decode it to the same bits (nf4_dequantize is
// exact fp32 products, rounded once), so the bounds above hold unchanged.
TEST(Lora, CudaFollowsTheCpuRunWithAQuantisedBase) {
  REQUIRE_CUDA(cuda);
  auto cpu = make_cpu_backend();
  const LoraRun on_cuda = train_lora(*cuda, 4, Recompute::None, 1, 0.1f, true),
                on_cpu = train_lora(*cpu, 4, Recompute::None, 1, 0.1f, true);
  EXPECT_NEAR(on_cuda.losses[0], on_cpu.losses[0], 1e-5);
  for (size_t s = 0; s < on_cpu.losses.size(); ++s)
    EXPECT_NEAR(on_cuda.losses[s], on_cpu.losses[s], 1e-3) << "step " << s;
}

}  // namespace
}  // namespace tt
