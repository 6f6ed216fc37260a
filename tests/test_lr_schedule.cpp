// The learning-rate schedule (kernels/common/lr_schedule.h) against values worked out here by
// other routes (closed forms at the warmup boundaries, cos^2 for the cosine, the midpoints),
// and CpuBackend::adamw_step with a schedule and gradient clipping against the first AdamW
// step's closed form: with m = v = 0, p1 = p0 (1 - lr wd) - lr g' / (|g'| + eps), where g' is
// the unscaled gradient times min(1, C / (||g|| + 1e-6)). The CPU-vs-CUDA comparison of the
// same step is in tests/test_cuda_ops.cpp (adamw_schedule_clip_*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/common/adamw_update.h"
#include "kernels/common/lr_schedule.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/op_test_util.h"

namespace tt {
namespace {

using test::f32_view;
using test::i32_view;
using test::kEps32;
using test::random_floats;

constexpr double kPi = 3.14159265358979323846;

LrSchedule schedule(LrScheduleKind kind, int64_t warmup, int64_t total, double min_lr) {
  LrSchedule s;
  s.kind = kind;
  s.warmup_steps = warmup;
  s.total_steps = total;
  s.min_lr = min_lr;
  return s;
}

TEST(LrSchedule, ConstantWithoutWarmupIsThePeakBitForBit) {
  const LrSchedule s;  // the defaults: what every run without the new flags uses
  for (int64_t step : {0, 1, 7, 1000000})
    EXPECT_EQ(scheduled_lr(1e-4, s, step), 1e-4) << "step " << step;
  // total_steps does not matter to the constant schedule
  EXPECT_EQ(scheduled_lr(3e-3, schedule(LrScheduleKind::Constant, 0, 5, 0.0), 9), 3e-3);
}

TEST(LrSchedule, WarmupRampsLinearlyToThePeak) {
  for (LrScheduleKind kind : {LrScheduleKind::Constant, LrScheduleKind::Cosine, LrScheduleKind::Linear}) {
    const LrSchedule s = schedule(kind, 4, 20, 1e-5);
    EXPECT_DOUBLE_EQ(scheduled_lr(1e-3, s, 0), 0.25e-3);  // (0 + 1) / 4 of the peak
    EXPECT_DOUBLE_EQ(scheduled_lr(1e-3, s, 1), 0.5e-3);
    EXPECT_DOUBLE_EQ(scheduled_lr(1e-3, s, 2), 0.75e-3);
    EXPECT_DOUBLE_EQ(scheduled_lr(1e-3, s, 3), 1e-3);  // the last warmup step reaches the peak
    EXPECT_DOUBLE_EQ(scheduled_lr(1e-3, s, 4), 1e-3);  // and the decay starts from it (progress 0)
  }
}

TEST(LrSchedule, CosineFollowsCosSquaredToMinLr) {
  // min + (peak - min) (1 + cos(pi p)) / 2 = min + (peak - min) cos^2(pi p / 2)
  const double peak = 1e-3, min_lr = 1e-5;
  const int64_t warmup = 3, total = 11;  // 8 decay steps
  const LrSchedule s = schedule(LrScheduleKind::Cosine, warmup, total, min_lr);
  for (int64_t step = warmup; step <= total; ++step) {
    const double p = static_cast<double>(step - warmup) / 8.0, c = std::cos(kPi * p / 2);
    EXPECT_NEAR(scheduled_lr(peak, s, step), min_lr + (peak - min_lr) * c * c, 1e-15) << "step " << step;
  }
  EXPECT_NEAR(scheduled_lr(peak, s, warmup + 4), (peak + min_lr) / 2, 1e-18) << "midpoint";
  EXPECT_NEAR(scheduled_lr(peak, s, total), min_lr, 1e-18) << "the end (one past the last step)";
  // the last step taken, total - 1: one decay step before min_lr
  EXPECT_NEAR(scheduled_lr(peak, s, total - 1), min_lr + (peak - min_lr) * std::pow(std::sin(kPi / 16), 2), 1e-18);
}

TEST(LrSchedule, LinearDecaysToMinLr) {
  const double peak = 2e-3, min_lr = 0.0;
  const LrSchedule s = schedule(LrScheduleKind::Linear, 2, 12, min_lr);  // 10 decay steps
  EXPECT_DOUBLE_EQ(scheduled_lr(peak, s, 2), peak);
  EXPECT_DOUBLE_EQ(scheduled_lr(peak, s, 7), 1e-3);      // midpoint: (peak + min) / 2
  // the last step: 1/10 of the way left (peak - 0.9 peak cancels: a few ulps of the peak)
  EXPECT_NEAR(scheduled_lr(peak, s, 11), 0.2e-3, 4 * std::ldexp(peak, -52));
  EXPECT_NEAR(scheduled_lr(peak, s, 12), min_lr, 1e-19);  // the end
  const LrSchedule floor = schedule(LrScheduleKind::Linear, 0, 4, 1e-4);
  EXPECT_DOUBLE_EQ(scheduled_lr(1e-3, floor, 2), 0.55e-3);  // (1e-3 + 1e-4) / 2
}

TEST(LrSchedule, WarmupAsLongAsTheRunDoesNotDivideByZero) {
  // total - warmup = 0: max(1, 0) keeps progress finite
  const LrSchedule s = schedule(LrScheduleKind::Cosine, 5, 5, 0.0);
  EXPECT_DOUBLE_EQ(scheduled_lr(1e-3, s, 4), 1e-3);
  EXPECT_DOUBLE_EQ(scheduled_lr(1e-3, s, 5), 1e-3);
}

// ---- CpuBackend::adamw_step with a schedule and clipping ----

constexpr size_t kN = 1000;
constexpr float kScale = 1024.0f;  // a power of two: unscaling is exact, so g' is known exactly

struct Scaler {  // a LossScalerState in host memory (the CPU backend's)
  float scale = kScale, norm_sq = 0.0f;
  int32_t tracker = 0, found_inf = 0, skipped = 0, first_skipped = -1;
  LossScalerState state() {
    return LossScalerState{Tensor{&scale, DType::F32, Shape{1}},         Tensor{&tracker, DType::I32, Shape{1}},
                           Tensor{&found_inf, DType::I32, Shape{1}},     Tensor{&skipped, DType::I32, Shape{1}},
                           Tensor{&first_skipped, DType::I32, Shape{1}}, Tensor{&norm_sq, DType::F32, Shape{1}}};
  }
};

AdamWHyper scheduled_clipped(double grad_clip) {
  AdamWHyper h;
  h.lr = 1e-2;
  h.eps = 1e-2;  // on the scale of the clipped gradients: the update depends on their size
  h.weight_decay = 0.1;
  h.schedule = schedule(LrScheduleKind::Cosine, 4, 10, 1e-4);
  h.grad_clip = grad_clip;
  return h;
}

// One step from zero moments at training step `train_step`: grad_norm_check, then adamw_step,
// as the trainer runs them. g: the unscaled gradients; the backend sees g x kScale.
void first_step(Backend& backend, std::vector<float>& p, const std::vector<float>& g, const AdamWHyper& h,
                int32_t train_step, Scaler& scaler) {
  std::vector<float> scaled(g), m(kN, 0.0f), v(kN, 0.0f);
  for (float& x : scaled) x *= kScale;
  std::vector<int32_t> count{0}, step{train_step};
  const Shape n{static_cast<int64_t>(kN)};
  backend.grad_norm_check(f32_view(scaled, n), scaler.state());
  backend.adamw_step(f32_view(p, n), f32_view(scaled, n), f32_view(m, n), f32_view(v, n), i32_view(count, {1}),
                     i32_view(step, {1}), h, scaler.state());
  EXPECT_EQ(count[0], scaler.found_inf ? 0 : 1);
}

TEST(AdamWScheduleClip, FirstStepMatchesClosedForm) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const std::vector<float> p0 = random_floats(kN, 160, -2.0f, 2.0f), g = random_floats(kN, 161, -0.05f, 0.05f);
  double norm = 0.0;
  for (float x : g) norm += static_cast<double>(x) * x;
  norm = std::sqrt(norm);  // ~0.9
  for (double clip : {0.0, 0.1, 0.5, 100.0}) {
    for (int32_t train_step : {0, 2, 4, 7}) {
      const AdamWHyper h = scheduled_clipped(clip);
      // the lr by hand: warmup (step + 1) / 4 of the peak, then cos^2 from the peak to 1e-4
      const double c = std::cos(kPi * (train_step - 4) / 6.0 / 2.0);
      const double lr = train_step < 4 ? 1e-2 * (train_step + 1) / 4.0 : 1e-4 + (1e-2 - 1e-4) * c * c;
      const double coef = clip > 0 ? std::min(1.0, clip / (norm + 1e-6)) : 1.0;
      std::vector<float> p = p0;
      Scaler scaler;
      first_step(*backend, p, g, h, train_step, scaler);
      for (size_t i = 0; i < kN; ++i) {
        const double gc = g[i] * coef, decayed = p0[i] * (1.0 - lr * h.weight_decay);
        const double want = decayed - lr * gc / (std::fabs(gc) + h.eps);
        // fp32: the decay rounds ~3 times at |p|, the update ~8 times at lr; the clip factor
        // is rounded to fp32 from a norm whose square was rounded to fp32 (~2 eps on g')
        const double tol = kEps32 * (3.0 * std::fabs(decayed) + 10.0 * lr);
        ASSERT_NEAR(p[i], want, tol) << "clip " << clip << " step " << train_step << " i " << i;
      }
    }
  }
}

TEST(AdamWScheduleClip, ClipAboveTheNormChangesNoBit) {
  // coef = min(1, C / (norm + 1e-6)) = 1 exactly, and x * 1.0f == x: the same bits as no clipping
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const std::vector<float> p0 = random_floats(kN, 170, -2.0f, 2.0f), g = random_floats(kN, 171, -0.05f, 0.05f);
  std::vector<float> clipped = p0, plain = p0;
  Scaler a, b;
  first_step(*backend, clipped, g, scheduled_clipped(100.0), 5, a);
  first_step(*backend, plain, g, scheduled_clipped(0.0), 5, b);
  test::expect_bitwise_equal("params", clipped, plain);
}

TEST(AdamWScheduleClip, SkippedStepChangesNothing) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::vector<float> g = random_floats(kN, 181, -0.05f, 0.05f);
  g[kN / 2] = INFINITY;
  const std::vector<float> p0 = random_floats(kN, 180, -2.0f, 2.0f);
  std::vector<float> p = p0;
  Scaler scaler;
  first_step(*backend, p, g, scheduled_clipped(0.1), 6, scaler);
  EXPECT_EQ(scaler.found_inf, 1);
  test::expect_bitwise_equal("params", p, p0);
}

}  // namespace
}  // namespace tt
