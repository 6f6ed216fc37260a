// The AdamW element update (kernels/common/adamw_update.h) and CpuBackend::adamw_step against
// torch.optim.AdamW's update written out by hand in double:
//   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// over five steps, for PyTorch's defaults, a large lr and weight decay (0.5, 0.5) and other
// betas; with zero, tiny (below eps) and ordinary gradients; plus the first step's closed
// form. The hyper-parameters are doubles (Python floats) and reach the kernel as the fp32
// scalars that optim/adamw.cpp rounds them to, exactly where PyTorch rounds them.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/adamw_update.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/op_test_util.h"

namespace tt {
namespace {

using test::expect_bitwise_equal;
using test::f32_view;
using test::i32_view;
using test::kEps32;
using test::random_floats;

struct Hyper {
  const char* name;
  double lr, beta1, beta2, eps, weight_decay;
};

const Hyper kTorchDefaults{"torch defaults", 1e-3, 0.9, 0.999, 1e-8, 1e-2};
const Hyper kLargeLrAndDecay{"lr 0.5 wd 0.5", 0.5, 0.9, 0.999, 1e-8, 0.5};
const Hyper kOtherBetas{"betas 0.8/0.95 eps 1e-6", 3e-2, 0.8, 0.95, 1e-6, 0.1};

AdamWHyper hyper(const Hyper& h) {
  AdamWHyper c;
  c.lr = h.lr;
  c.beta1 = h.beta1;
  c.beta2 = h.beta2;
  c.eps = h.eps;
  c.weight_decay = h.weight_decay;
  return c;
}

// The step-t scalars exactly as the backends build them.
AdamWStepScalars scalars(const Hyper& h, int t) { return adamw_step_scalars(hyper(h), h.lr, t); }

// CpuBackend::adamw_step for step t: the step count it reads holds the t - 1 steps taken.
void backend_step(Backend& backend, std::vector<float>& p, std::vector<float>& g, std::vector<float>& m,
                  std::vector<float>& v, const Hyper& h, int t) {
  std::vector<int32_t> step_count{t - 1}, train_step{t - 1};
  const Shape n{static_cast<int64_t>(p.size())};
  backend.adamw_step(f32_view(p, n), f32_view(g, n), f32_view(m, n), f32_view(v, n), i32_view(step_count, {1}),
                     i32_view(train_step, {1}), hyper(h), test::unit_scaler());
  ASSERT_EQ(step_count[0], t) << "adamw_step advances the step count";
}

// torch.optim.AdamW in double, with an error budget for what fp32 arithmetic may add.
struct AdamWReference {
  std::vector<double> p, m, v;
  // m_abs is the same moving average over |g|: m's roundings are on that scale even when the
  // gradients' signs make m itself small. p_tol accumulates the fp32 error budget of p.
  std::vector<double> m_abs, p_tol;
  int t = 0;

  explicit AdamWReference(const std::vector<float>& p0)
      : p(p0.begin(), p0.end()), m(p0.size()), v(p0.size()), m_abs(p0.size()), p_tol(p0.size()) {}

  void step(const std::vector<float>& g, const Hyper& h) {
    ++t;
    const double lr = h.lr, b1 = h.beta1, b2 = h.beta2, eps = h.eps, wd = h.weight_decay;
    const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1.0 - lr * wd;
      m[i] = b1 * m[i] + (1.0 - b1) * g[i];
      v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
      m_abs[i] = b1 * m_abs[i] + (1.0 - b1) * std::fabs(g[i]);
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr / bc1 * m[i] / denom;
      // The decay rounds ~3 times at |p|; the update carries m's and v's accumulated errors
      // (tol_m, tol_v below: ~3t eps together) and ~8 roundings of its own (the two
      // corrections, sqrt, divisions, products, the final subtraction), on the scale of the
      // update computed with m_abs.
      p_tol[i] += kEps32 * (4.0 * std::fabs(p[i]) + (3.0 * t + 8.0) * lr / bc1 * m_abs[i] / denom);
    }
  }
  // m: 3 roundings per step on the scale of m_abs; v: 4 per step, all terms positive.
  double tol_m(size_t i) const { return 2.0 * t * kEps32 * m_abs[i]; }
  double tol_v(size_t i) const { return 2.0 * t * kEps32 * v[i]; }
};

// Gradients for step t (1-based): random in [-1,1], with exact zeros, values far below eps and
// one step (t = 4) where every gradient is zero and only momentum moves the parameters.
std::vector<float> gradients(size_t n, int t) {
  std::vector<float> g = random_floats(n, 100 + t);
  if (t == 4) return std::vector<float>(n, 0.0f);
  for (size_t i = 0; i < n; i += 17) g[i] = 0.0f;
  for (size_t i = 5; i < n; i += 23) g[i] *= 1e-10f;
  return g;
}

constexpr size_t kN = 1000;

// Runs five steps with `update` (the header or the backend) and checks p, m, v after each.
template <typename Update>
void check_five_steps(const Hyper& h, Update update) {
  std::vector<float> p = random_floats(kN, 99, -2.0f, 2.0f), m(kN, 0.0f), v(kN, 0.0f);
  AdamWReference ref(p);
  for (int t = 1; t <= 5; ++t) {
    const std::vector<float> g = gradients(kN, t);
    update(p, g, m, v, h, t);
    ref.step(g, h);
    double worst_p = 0.0, worst_m = 0.0, worst_v = 0.0;  // error over tolerance, for the log
    for (size_t i = 0; i < kN; ++i) {
      ASSERT_NEAR(p[i], ref.p[i], ref.p_tol[i]) << h.name << " step " << t << " i " << i << " g " << g[i];
      ASSERT_NEAR(m[i], ref.m[i], ref.tol_m(i)) << h.name << " step " << t << " i " << i;
      ASSERT_NEAR(v[i], ref.v[i], ref.tol_v(i)) << h.name << " step " << t << " i " << i;
      worst_p = std::max(worst_p, std::fabs(p[i] - ref.p[i]) / ref.p_tol[i]);
      if (ref.tol_m(i) > 0) worst_m = std::max(worst_m, std::fabs(m[i] - ref.m[i]) / ref.tol_m(i));
      if (ref.tol_v(i) > 0) worst_v = std::max(worst_v, std::fabs(v[i] - ref.v[i]) / ref.tol_v(i));
    }
    std::printf("[ err/tol  ] %-24s step %d: p %.3f  m %.3f  v %.3f\n", h.name, t, worst_p, worst_m, worst_v);
  }
}

void header_update(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m, std::vector<float>& v,
                   const AdamWStepScalars& s) {
  for (size_t i = 0; i < p.size(); ++i) adamw_update(&p[i], &m[i], &v[i], g[i], s);
}

TEST(AdamWUpdate, FiveStepsMatchTorchFormulaInDouble) {
  for (const Hyper& h : {kTorchDefaults, kLargeLrAndDecay, kOtherBetas})
    check_five_steps(h, [](std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
                           std::vector<float>& v, const Hyper& hp, int t) { header_update(p, g, m, v, scalars(hp, t)); });
}

TEST(AdamWUpdate, BackendStepFiveStepsMatchTorchFormulaInDouble) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  for (const Hyper& h : {kTorchDefaults, kLargeLrAndDecay, kOtherBetas})
    check_five_steps(h, [&](std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
                            std::vector<float>& v, const Hyper& hp, int t) {
      std::vector<float> grads = g;
      backend_step(*backend, p, grads, m, v, hp, t);
    });
}

TEST(AdamWUpdate, FirstStepMovesByLrTimesSignOfGradientAfterDecay) {
  // With m = v = 0, step 1 has m_hat = g and v_hat = g^2 exactly (the corrections undo the
  // (1 - beta) factors), so p1 = p0 (1 - lr wd) - lr g / (|g| + eps) ~ p0 (1 - lr wd) - lr sign(g).
  for (const Hyper& h : {kTorchDefaults, kLargeLrAndDecay, kOtherBetas}) {
    std::vector<float> p0 = random_floats(kN, 120, -2.0f, 2.0f), g = random_floats(kN, 121);
    for (float& x : g)
      if (std::fabs(x) < 1e-3f) x = std::copysign(1e-3f, x);  // keep |g| >> eps
    std::vector<float> p = p0, m(kN, 0.0f), v(kN, 0.0f);
    header_update(p, g, m, v, scalars(h, 1));
    for (size_t i = 0; i < kN; ++i) {
      const double lr = h.lr, decayed = p0[i] * (1.0 - lr * h.weight_decay);
      // eps in the denominator shortens the step by lr eps / |g|; fp32 rounds the decayed p
      // (~3 eps |p|) and the update (~6 eps lr)
      const double tol = lr * h.eps / std::fabs(g[i]) + kEps32 * (3.0 * std::fabs(decayed) + 6.0 * lr);
      ASSERT_NEAR(p[i], decayed - lr * (g[i] > 0 ? 1.0 : -1.0), tol) << h.name << " i " << i << " g " << g[i];
      ASSERT_NEAR(m[i], (1.0 - h.beta1) * g[i], kEps32 * std::fabs(m[i])) << h.name << " i " << i;
      ASSERT_NEAR(v[i], (1.0 - h.beta2) * g[i] * g[i], 2.0 * kEps32 * v[i]) << h.name << " i " << i;
    }
  }
}

TEST(AdamWUpdate, ZeroGradientFromZeroStateOnlyDecays) {
  // m = v = 0 and g = 0: the update is 0 / (0 + eps) = 0, so p is only multiplied by 1 - lr wd
  // (exactly the fp32 product), and the moments stay exactly zero.
  for (const Hyper& h : {kTorchDefaults, kLargeLrAndDecay, kOtherBetas}) {
    std::vector<float> p0 = random_floats(kN, 130, -2.0f, 2.0f), g(kN, 0.0f);
    std::vector<float> p = p0, m(kN, 0.0f), v(kN, 0.0f);
    header_update(p, g, m, v, scalars(h, 1));
    const float factor = static_cast<float>(1.0 - h.lr * h.weight_decay);  // 0.75 for lr 0.5, wd 0.5
    for (size_t i = 0; i < kN; ++i) {
      ASSERT_EQ(p[i], p0[i] * factor) << h.name << " i " << i;
      ASSERT_NEAR(p[i], p0[i] * (1.0 - h.lr * h.weight_decay), 2.0 * kEps32 * std::fabs(p0[i]));
      ASSERT_EQ(m[i], 0.0f);
      ASSERT_EQ(v[i], 0.0f);
    }
  }
}

// The element math lives once in the header so every backend gets the same bits. The library
// compiles with -ffp-contract=off so the compiler cannot fuse a * b + c into an FMA there and
// not here (before that flag, the last bit differed on up to half the elements).
TEST(AdamWUpdate, BackendStepEqualsHeaderUpdateBitForBit) {
  std::unique_ptr<Backend> backend = make_cpu_backend();
  for (const Hyper& h : {kTorchDefaults, kLargeLrAndDecay, kOtherBetas}) {
    std::vector<float> p = random_floats(kN, 140, -2.0f, 2.0f), m(kN, 0.0f), v(kN, 0.0f);
    std::vector<float> p2 = p, m2 = m, v2 = v;
    for (int t = 1; t <= 5; ++t) {
      std::vector<float> g = gradients(kN, t);
      header_update(p, g, m, v, scalars(h, t));
      backend_step(*backend, p2, g, m2, v2, h, t);
    }
    expect_bitwise_equal(std::string(h.name) + ": params", p2, p);
    expect_bitwise_equal(std::string(h.name) + ": exp_avg", m2, m);
    expect_bitwise_equal(std::string(h.name) + ": exp_avg_sq", v2, v);
  }
}

// torch.optim.AdamW computes 1 - beta2 on Python floats (double) and rounds it to fp32 when it
// meets the tensor: float(0.001). Computing it from an fp32 beta2 would give 0.00099998713 and
// an exp_avg_sq 1.29e-5 relative below torch's.
TEST(AdamWUpdate, FirstStepSecondMomentMatchesTorch) {
  std::vector<float> p = random_floats(kN, 150, -2.0f, 2.0f), g = random_floats(kN, 151), m(kN, 0.0f), v(kN, 0.0f);
  header_update(p, g, m, v, scalars(kTorchDefaults, 1));
  const float torch_one_minus_beta2 = static_cast<float>(1.0 - 0.999);  // Python's 1 - beta2, then fp32
  for (size_t i = 0; i < kN; ++i) {
    const double want = static_cast<double>(torch_one_minus_beta2) * g[i] * g[i];
    // torch rounds g*g and the product by (1 - beta2): two roundings
    ASSERT_NEAR(v[i], want, 2.0 * kEps32 * want) << "i " << i << " g " << g[i] << " relative error "
                                                 << (v[i] - want) / want;
  }
}

}  // namespace
}  // namespace tt
