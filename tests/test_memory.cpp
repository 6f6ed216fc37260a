// The memory features on the CPU backend: recompute none|ffn|layer gives the same bits;
// gradient accumulation gives the single batch's gradients, loss and (on the scale of lr)
// parameters, with dropout and with fp16 loss scaling; the activation plan shrinks with
// recompute and with accumulation by exactly what is no longer kept. The checks live in
// memory_checks.h; test_cuda_memory runs them on the CUDA backend.
#include <gtest/gtest.h>

#include "kernels/cpu/cpu_backend.h"
#include "memory_checks.h"

namespace tt {
namespace {

using namespace tt::test;

// ---- recompute ----

TEST(Recompute, Fp32GivesTheSameBitsAsKeepingActivations) {
  auto cpu = make_cpu_backend();
  check_recompute_is_bitwise(*cpu, Precision::FP32);
}

TEST(Recompute, Bf16GivesTheSameBitsAsKeepingActivations) {
  auto cpu = make_cpu_backend();
  check_recompute_is_bitwise(*cpu, Precision::BF16);
}

TEST(Recompute, Fp16WithLossScalingGivesTheSameBitsAsKeepingActivations) {
  auto cpu = make_cpu_backend();
  check_recompute_is_bitwise(*cpu, Precision::FP16);
}

// ---- gradient accumulation ----

TEST(GradAccumulation, Fp32WithoutDropoutMatchesTheSingleBatch) {
  auto cpu = make_cpu_backend();
  AccumulationStats stats;
  check_accumulation(*cpu, 0.0f, Precision::FP32, stats);
  print_accumulation_stats("fp32, dropout 0", stats);
}

TEST(GradAccumulation, Fp32WithDropoutMatchesTheSingleBatch) {
  auto cpu = make_cpu_backend();
  AccumulationStats stats;
  check_accumulation(*cpu, 0.1f, Precision::FP32, stats);
  print_accumulation_stats("fp32, dropout 0.1", stats);
}

// fp16 with dynamic loss scaling: no step is skipped, and the (scaled) gradients agree with
// the single batch's as closely as in fp32, since every activation and activation gradient is
// computed and rounded row by row, the same way whatever the micro-batch: only the fp32
// parameter-gradient sums change order.
TEST(GradAccumulation, Fp16WithLossScalingMatchesTheSingleBatch) {
  auto cpu = make_cpu_backend();
  AccumulationStats stats;
  check_accumulation(*cpu, 0.1f, Precision::FP16, stats);
  print_accumulation_stats("fp16 + loss scaling, dropout 0.1", stats);
}

TEST(GradAccumulation, Bf16MatchesTheSingleBatch) {
  auto cpu = make_cpu_backend();
  AccumulationStats stats;
  check_accumulation(*cpu, 0.1f, Precision::BF16, stats);
  print_accumulation_stats("bf16, dropout 0.1", stats);
}

TEST(GradAccumulation, TheCheckTellsFullBatchMasksFromWrongOnes) {
  auto cpu = make_cpu_backend();
  check_accumulation_detects_wrong_masks(*cpu);
}

// ---- the activation plan ----

TEST(ActivationPlan, SeedConfigShrinksFromNoneToFfnToLayerByWhatIsNotKept) {
  check_seed_plan(DType::F32);
  check_seed_plan(DType::BF16);
}

TEST(ActivationPlan, RecomputeLayerGrowsByOneLayerOutputPerLayer) { check_plan_growth_with_depth(); }

TEST(ActivationPlan, TrainerBytesShrinkByTheActivationsOfBOverK) {
  auto cpu = make_cpu_backend();
  check_trainer_bytes_with_accumulation(*cpu);
}

}  // namespace
}  // namespace tt
namespace tt { namespace {
using namespace tt::test;
TEST(Scratch, RowLogits) {
  auto cpu = make_cpu_backend();
  for (Precision pr : {Precision::FP32, Precision::FP16}) for (const MemoryCase& mc : memory_cases()) {
    std::vector<std::vector<float>> lg;
    for (int K : {1, 8}) {
      Trainer t(*cpu, mc.config, AdamWConfig{}, 8, mc.T, 21, pr, LossScalerConfig{}, Recompute::None, K);
      t.load_params(init_params(t.model().layout(), 21).data());
      std::vector<int32_t> x(8 * mc.T), y(x.size());
      random_batch(21, 0, 8, mc.T, mc.config.vocab_size, x.data(), y.data());
      t.load_batch(x.data(), y.data(), 0);
      t.forward();
      Tensor l = t.model().logits();
      std::vector<uint16_t> h(l.bytes() / 2);
      cpu->copy_to_host(h.data(), l.data, l.bytes());
      std::vector<float> f;
      if (pr == Precision::FP32) { f.resize(l.numel()); memcpy(f.data(), h.data(), l.bytes()); }
      else { for (auto b : h) f.push_back(to_float(f16{b})); }
      f.resize(mc.T * mc.config.vocab_size);
      lg.push_back(f);
    }
    int nd = 0; double md = 0;
    for (size_t i = 0; i < lg[0].size(); ++i) if (lg[0][i] != lg[1][i]) { ++nd; md = std::max(md, (double)std::fabs(lg[0][i]-lg[1][i])); }
    printf("%s %d: row-0 logits differ in %d of %zu, max %.3e\n", mc.name, (int)pr, nd, lg[0].size(), md);
  }
}
}}
namespace tt { namespace {
using namespace tt::test;
TEST(Scratch, ParamDiffs) {
  auto cpu = make_cpu_backend();
  for (Precision pr : {Precision::FP32, Precision::BF16, Precision::FP16}) for (const MemoryCase& mc : memory_cases()) {
    RunOptions o; o.precision = pr; o.B = 8;
    const ParamLayout layout(mc.config);
    RunResult a = run_steps(*cpu, mc, o);
    o.grad_accum = 4;
    RunResult b = run_steps(*cpu, mc, o);
    printf("%s %s loss rel: ", precision_name(pr), mc.name);
    for (int s = 0; s < 3; ++s) printf("%.2e ", std::fabs(a.losses[s]-b.losses[s])/a.losses[s]);
    printf("\n");
    for (const ParamInfo& p : layout.params()) {
      double md = 0, mg = 0; int64_t at = -1;
      for (int64_t i = p.offset; i < p.offset + p.shape.numel(); ++i) { mg = std::max(mg, (double)std::fabs(a.first_grads[i]));
        double d = std::fabs(a.params[i]-b.params[i]); if (d > md) { md = d; at = i; } }
      if (md > 0.1 * o.lr * 3) printf("   %s[%ld]: dp/lr %.3f  g %.3e vs %.3e (max|g| %.3e)\n", p.name.c_str(), (long)(at - p.offset), md / o.lr,
         a.first_grads[at], b.first_grads[at], mg);
    }
  }
}
}}
namespace tt { namespace {
using namespace tt::test;
TEST(Scratch, Seeds) {
  auto cpu = make_cpu_backend();
  for (Precision pr : {Precision::FP32, Precision::BF16, Precision::FP16}) for (float p : {0.0f, 0.1f}) {
    double worst = 0, worst_l2 = 0, worst_loss0 = 0, worst_upd = 0, worst_dp = 0; std::string where;
    for (uint64_t seed = 1; seed <= 8; ++seed) for (MemoryCase mc : memory_cases()) {
      mc.config.dropout = p;
      RunOptions o; o.precision = pr; o.B = 8; o.seed = seed;
      const ParamLayout layout(mc.config);
      RunResult a = run_steps(*cpu, mc, o);
      auto init = init_params(layout, seed);
      for (int K : {2, 4, 8}) {
        o.grad_accum = K;
        RunResult b = run_steps(*cpu, mc, o);
        TensorError e = worst_relative_error(layout, b.first_grads, a.first_grads);
        if (e.rel > worst) { worst = e.rel; where = std::string(mc.name) + " " + e.name + " K=" + std::to_string(K) + " seed " + std::to_string(seed); }
        worst_loss0 = std::max(worst_loss0, std::fabs(a.losses[0]-b.losses[0])/a.losses[0]);
        if (b.scaler.skipped_steps || a.scaler.skipped_steps) printf("SKIPPED\n");
        worst_dp = std::max(worst_dp, max_abs_difference(a.params, b.params) / (o.lr * 3));
        for (const ParamInfo& pi : layout.params()) {
          double n = 0, d = 0, nu = 0, du = 0;
          for (int64_t i = pi.offset; i < pi.offset + pi.shape.numel(); ++i) {
            n += std::pow((double)a.first_grads[i]-b.first_grads[i], 2); d += std::pow((double)a.first_grads[i], 2);
            double ua = a.params[i]-init[i], ub = b.params[i]-init[i];
            nu += (ua-ub)*(ua-ub); du += ua*ua;
          }
          if (d > 0) worst_l2 = std::max(worst_l2, std::sqrt(n/d));
          if (du > 0) worst_upd = std::max(worst_upd, std::sqrt(nu/du));
        }
      }
    }
    printf("%s p=%.1f: worst max-rel %.3e (%s), worst relL2 %.3e, loss0 %.3e, param dp/(lr*3) %.3f, update relL2 %.3e\n", precision_name(pr), p, worst, where.c_str(), worst_l2, worst_loss0, worst_dp, worst_upd);
  }
}
}}
