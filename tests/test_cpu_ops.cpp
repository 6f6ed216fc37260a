// CPU backend ops against independent double-precision references written here as plain
// loops: every forward against the reference, every backward against central finite
// differences of L = sum(out * R) (so the backward runs with dout = R), plus the contract's
// accumulate/overwrite and aliasing rules. Dropout itself and AdamW have their own suites.
//
// Tolerances: kEps32 = 2^-23 times the length K of the longest fp32 reduction in the op's
// chain. A K-term fp32 sum is off by at most ~K/2 eps of its terms' scale, and the measured
// errors (printed as [ rel err ]) sit one to two decades under these bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/philox.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vector_exp.h"
#include "tests/op_test_util.h"

namespace tt {
namespace {

using test::central_diff;
using test::dot;
using test::expect_abs_close;
using test::expect_bitwise_equal;
using test::expect_rel_close;
using test::f32_view;
using test::i32_view;
using test::kEps32;
using test::mask_of;
using test::scalar_f32;
using test::null_f32;
using test::random_floats;
using test::random_ints;
using test::to_double;
// A buffer the op must overwrite entirely: any read or += of it leaves a NaN behind.
using test::nan_filled;

// 2 v, exactly (a power of two): what a gradient accumulated twice from the same terms is.
std::vector<float> doubled(std::vector<float> v) {
  for (float& x : v) x *= 2.0f;
  return v;
}

// ======================= double-precision references =======================

// tokens (B,T), wte (V,C), wpe (maxT,C) or empty -> out (B,T,C)
std::vector<double> embedding_ref(const std::vector<int32_t>& tokens, const std::vector<double>& wte,
                                  const std::vector<double>& wpe, int B, int T, int C) {
  std::vector<double> out(static_cast<size_t>(B) * T * C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        const int id = tokens[b * T + t];
        out[(b * T + t) * C + c] = wte[id * C + c] + (wpe.empty() ? 0.0 : wpe[t * C + c]);
      }
  return out;
}

// inp (N,I), weight (O,I), bias (O) or empty -> out (N,O)
std::vector<double> linear_ref(const std::vector<double>& inp, const std::vector<double>& weight,
                               const std::vector<double>& bias, int N, int I, int O) {
  std::vector<double> out(static_cast<size_t>(N) * O);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      double sum = bias.empty() ? 0.0 : bias[o];
      for (int i = 0; i < I; ++i) sum += inp[n * I + i] * weight[o * I + i];
      out[n * O + o] = sum;
    }
  return out;
}

// The mask factor of attention weight `index` (B,NH,T,T order), from the shared Philox mask
// but with the kept scale 1/(1-p) taken in double.
double attention_mask_ref(const DropoutKey& key, int64_t index, float p) {
  if (p == 0.0f) return 1.0;
  return dropout_scale(key, static_cast<uint64_t>(index), p) == 0.0f ? 0.0 : 1.0 / (1.0 - static_cast<double>(p));
}

// qkv (B,T,3C) packed [q|k|v], heads of HS channels -> out (B,T,C); lse (B,NH,T) each row's
// log-sum-exp of its scaled scores, when asked for.
std::vector<double> attention_ref(const std::vector<double>& qkv, const AttentionShape& s, float p,
                                  const DropoutKey& key, std::vector<double>* lse = nullptr) {
  const int B = s.B, T = s.T, NH = s.NH, HS = s.HS, C = NH * HS;
  auto q = [&](int b, int t, int h, int d) { return qkv[(b * T + t) * 3 * C + h * HS + d]; };
  auto k = [&](int b, int t, int h, int d) { return qkv[(b * T + t) * 3 * C + C + h * HS + d]; };
  auto v = [&](int b, int t, int h, int d) { return qkv[(b * T + t) * 3 * C + 2 * C + h * HS + d]; };
  std::vector<double> out(static_cast<size_t>(B) * T * C, 0.0);
  if (lse) lse->assign(static_cast<size_t>(B) * NH * T, 0.0);
  std::vector<double> w(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const int visible = s.causal ? t + 1 : T;
        double max_score = -INFINITY;
        for (int t2 = 0; t2 < visible; ++t2) {
          double score = 0.0;
          for (int d = 0; d < HS; ++d) score += q(b, t, h, d) * k(b, t2, h, d);
          w[t2] = score / std::sqrt(static_cast<double>(HS));
          max_score = std::max(max_score, w[t2]);
        }
        double sum = 0.0;
        for (int t2 = 0; t2 < visible; ++t2) sum += (w[t2] = std::exp(w[t2] - max_score));
        const int64_t row = ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
        if (lse) (*lse)[row / T] = max_score + std::log(sum);
        for (int t2 = 0; t2 < visible; ++t2) {
          w[t2] /= sum;
          const double weight = w[t2] * attention_mask_ref(key, row + t2, p);
          for (int d = 0; d < HS; ++d) out[(b * T + t) * C + h * HS + d] += weight * v(b, t2, h, d);
        }
      }
  return out;
}

struct LayerNormRef {
  std::vector<double> out, mean, rstd;
};

// inp (N,C), weight (C), bias (C) -> out (N,C), mean (N), rstd (N); biased variance
LayerNormRef layernorm_ref(const std::vector<double>& inp, const std::vector<double>& weight,
                           const std::vector<double>& bias, int N, int C, double eps) {
  LayerNormRef r{std::vector<double>(static_cast<size_t>(N) * C), std::vector<double>(N), std::vector<double>(N)};
  for (int n = 0; n < N; ++n) {
    double mean = 0.0, var = 0.0;
    for (int c = 0; c < C; ++c) mean += inp[n * C + c];
    mean /= C;
    for (int c = 0; c < C; ++c) var += (inp[n * C + c] - mean) * (inp[n * C + c] - mean);
    const double rstd = 1.0 / std::sqrt(var / C + eps);
    for (int c = 0; c < C; ++c) r.out[n * C + c] = (inp[n * C + c] - mean) * rstd * weight[c] + bias[c];
    r.mean[n] = mean;
    r.rstd[n] = rstd;
  }
  return r;
}

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

// logits (N,V), targets (N) -> per-token loss (N)
std::vector<double> cross_entropy_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets, int N,
                                      int V) {
  std::vector<double> losses(N);
  for (int n = 0; n < N; ++n) {
    double max_logit = -INFINITY, sum = 0.0;
    for (int v = 0; v < V; ++v) max_logit = std::max(max_logit, logits[n * V + v]);
    for (int v = 0; v < V; ++v) sum += std::exp(logits[n * V + v] - max_logit);
    losses[n] = std::log(sum) + max_logit - logits[n * V + targets[n]];
  }
  return losses;
}

// dlogits (N,V) = (softmax - onehot(target)) * dloss_scale / N, written out analytically
std::vector<double> cross_entropy_grad_ref(const std::vector<double>& logits, const std::vector<int32_t>& targets,
                                           int N, int V, double dloss_scale) {
  std::vector<double> grad(static_cast<size_t>(N) * V);
  for (int n = 0; n < N; ++n) {
    double max_logit = -INFINITY, sum = 0.0;
    for (int v = 0; v < V; ++v) max_logit = std::max(max_logit, logits[n * V + v]);
    for (int v = 0; v < V; ++v) sum += std::exp(logits[n * V + v] - max_logit);
    for (int v = 0; v < V; ++v) {
      const double prob = std::exp(logits[n * V + v] - max_logit) / sum;
      grad[n * V + v] = (prob - (v == targets[n] ? 1.0 : 0.0)) * dloss_scale / N;
    }
  }
  return grad;
}

class CpuOps : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend = make_cpu_backend();
};

// ============================== embedding ==============================

// tokens (2,5) over V=6 (ids repeat), wte (6,7), wpe (8,7) with maxT=8 > T
constexpr int kEmbB = 2, kEmbT = 5, kEmbC = 7, kEmbV = 6, kEmbMaxT = 8;

TEST_F(CpuOps, EmbeddingForwardWithAndWithoutPositional) {
  std::vector<int32_t> tokens = random_ints(kEmbB * kEmbT, 1, 0, kEmbV);
  std::vector<float> wte = random_floats(kEmbV * kEmbC, 2), wpe = random_floats(kEmbMaxT * kEmbC, 3);
  std::vector<float> out = nan_filled(kEmbB * kEmbT * kEmbC);
  const Shape out_shape{kEmbB, kEmbT, kEmbC};

  backend->embedding_forward(f32_view(out, out_shape), i32_view(tokens, {kEmbB, kEmbT}),
                             f32_view(wte, {kEmbV, kEmbC}), f32_view(wpe, {kEmbMaxT, kEmbC}));
  // one fp32 add per element: at most half an ulp from the exact sum
  expect_rel_close("embedding fwd (wte + wpe)", out,
                   embedding_ref(tokens, to_double(wte), to_double(wpe), kEmbB, kEmbT, kEmbC), kEps32);

  out = nan_filled(out.size());
  backend->embedding_forward(f32_view(out, out_shape), i32_view(tokens, {kEmbB, kEmbT}),
                             f32_view(wte, {kEmbV, kEmbC}), null_f32());
  // no arithmetic: a row copy, exact
  expect_rel_close("embedding fwd (wte only)", out, embedding_ref(tokens, to_double(wte), {}, kEmbB, kEmbT, kEmbC),
                   0.0);
}

TEST_F(CpuOps, EmbeddingBackwardMatchesFiniteDifferences) {
  std::vector<int32_t> tokens = random_ints(kEmbB * kEmbT, 4, 0, kEmbV);
  tokens[3] = tokens[0];  // make sure some id repeats within a sequence and across the batch
  tokens[kEmbT] = tokens[0];
  std::vector<float> wte = random_floats(kEmbV * kEmbC, 5), wpe = random_floats(kEmbMaxT * kEmbC, 6);
  std::vector<float> R = random_floats(kEmbB * kEmbT * kEmbC, 7);
  std::vector<double> wte_d = to_double(wte), wpe_d = to_double(wpe), R_d = to_double(R);

  std::vector<float> dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  backend->embedding_backward(f32_view(dwte, {kEmbV, kEmbC}), f32_view(dwpe, {kEmbMaxT, kEmbC}),
                              f32_view(R, {kEmbB, kEmbT, kEmbC}), i32_view(tokens, {kEmbB, kEmbT}), ParamGrads::Add);

  auto dwte_fd = central_diff(
      [&](const std::vector<double>& w) { return dot(embedding_ref(tokens, w, wpe_d, kEmbB, kEmbT, kEmbC), R_d); },
      wte_d);
  auto dwpe_fd = central_diff(
      [&](const std::vector<double>& w) { return dot(embedding_ref(tokens, wte_d, w, kEmbB, kEmbT, kEmbC), R_d); },
      wpe_d);
  // a row of dwte sums up to B*T rows of dout, a row of dwpe B rows (with a floor of 16 eps
  // for so short a sum, as in test_cuda_ops: the finite differences carry their own error)
  expect_rel_close("embedding bwd dwte", dwte, dwte_fd, kEps32 * kEmbB * kEmbT);
  expect_rel_close("embedding bwd dwpe", dwpe, dwpe_fd, kEps32 * std::max(kEmbB, 16));
  // rows of positions >= T get nothing
  for (int i = kEmbT * kEmbC; i < kEmbMaxT * kEmbC; ++i) EXPECT_EQ(dwpe[i], 0.0f) << i;

  // without the positional table only dwte is written, and it is the same
  std::vector<float> dwte2(wte.size(), 0.0f);
  backend->embedding_backward(f32_view(dwte2, {kEmbV, kEmbC}), null_f32(), f32_view(R, {kEmbB, kEmbT, kEmbC}),
                              i32_view(tokens, {kEmbB, kEmbT}), ParamGrads::Add);
  expect_bitwise_equal("embedding bwd dwte without wpe", dwte2, dwte);
}

TEST_F(CpuOps, EmbeddingBackwardAccumulatesParameterGradients) {
  // B=1 and distinct ids: each gradient element receives exactly one term per call, so two
  // calls give exactly 2x (g + g is exact in fp32).
  const int T = 5, C = 4, V = 9, maxT = 6;
  std::vector<int32_t> tokens = {3, 0, 8, 5, 1};
  std::vector<float> R = random_floats(T * C, 8);
  std::vector<float> dwte(V * C, 0.0f), dwpe(maxT * C, 0.0f);
  auto run = [&] {
    backend->embedding_backward(f32_view(dwte, {V, C}), f32_view(dwpe, {maxT, C}), f32_view(R, {1, T, C}),
                                i32_view(tokens, {1, T}), ParamGrads::Add);
  };
  run();
  const std::vector<float> twice_wte = doubled(dwte), twice_wpe = doubled(dwpe);
  run();
  expect_bitwise_equal("embedding dwte after two calls", dwte, twice_wte);
  expect_bitwise_equal("embedding dwpe after two calls", dwpe, twice_wpe);

  // With repeated ids the second call adds its terms one by one to the first call's sum, so
  // the result is 2x up to the rounding of a B*T-term sum.
  std::vector<int32_t> rep = random_ints(kEmbB * kEmbT, 9, 0, 3);
  std::vector<float> R2 = random_floats(kEmbB * kEmbT * kEmbC, 10);
  std::vector<float> g(3 * kEmbC, 0.0f);
  auto run2 = [&] {
    backend->embedding_backward(f32_view(g, {3, kEmbC}), null_f32(), f32_view(R2, {kEmbB, kEmbT, kEmbC}),
                                i32_view(rep, {kEmbB, kEmbT}), ParamGrads::Add);
  };
  run2();
  std::vector<double> twice = to_double(g);
  for (double& x : twice) x *= 2.0;
  run2();
  expect_rel_close("embedding dwte two calls, repeated ids", g, twice, kEps32 * kEmbB * kEmbT);
}

// ============================== linear ==============================

// inp (9,17), weight (11,17), bias (11) -> out (9,11); odd sizes hit the GEMM's edge paths
constexpr int kLinN = 9, kLinI = 17, kLinO = 11;

TEST_F(CpuOps, LinearForwardWithAndWithoutBias) {
  for (auto [N, I, O] : {std::array<int, 3>{kLinN, kLinI, kLinO}, std::array<int, 3>{64, 300, 70}}) {
    std::vector<float> x = random_floats(N * I, 11), w = random_floats(O * I, 12), b = random_floats(O, 13);
    std::vector<float> out = nan_filled(N * O);
    const std::string shape = " N" + std::to_string(N) + " I" + std::to_string(I) + " O" + std::to_string(O);
    backend->linear_forward(f32_view(out, {N, O}), f32_view(x, {N, I}), f32_view(w, {O, I}), f32_view(b, {O}));
    // each output is an I-term dot product plus the bias
    expect_rel_close("linear fwd with bias" + shape, out, linear_ref(to_double(x), to_double(w), to_double(b), N, I, O),
                     kEps32 * (I + 1));
    out = nan_filled(N * O);
    backend->linear_forward(f32_view(out, {N, O}), f32_view(x, {N, I}), f32_view(w, {O, I}), null_f32());
    expect_rel_close("linear fwd without bias" + shape, out, linear_ref(to_double(x), to_double(w), {}, N, I, O),
                     kEps32 * I);
  }
}

TEST_F(CpuOps, LinearBackwardMatchesFiniteDifferences) {
  const int N = kLinN, I = kLinI, O = kLinO;
  std::vector<float> x = random_floats(N * I, 14), w = random_floats(O * I, 15), b = random_floats(O, 16);
  std::vector<float> R = random_floats(N * O, 17);
  std::vector<double> x_d = to_double(x), w_d = to_double(w), b_d = to_double(b), R_d = to_double(R);

  std::vector<float> dx = nan_filled(N * I), dw(O * I, 0.0f), db(O, 0.0f);
  backend->linear_backward(f32_view(dx, {N, I}), f32_view(dw, {O, I}), f32_view(db, {O}), f32_view(R, {N, O}),
                           f32_view(x, {N, I}), f32_view(w, {O, I}), ParamGrads::Add, InputGrad::Write);

  auto loss = [&](const std::vector<double>& x_, const std::vector<double>& w_, const std::vector<double>& b_) {
    return dot(linear_ref(x_, w_, b_, N, I, O), R_d);
  };
  auto dx_fd = central_diff([&](const std::vector<double>& v) { return loss(v, w_d, b_d); }, x_d);
  auto dw_fd = central_diff([&](const std::vector<double>& v) { return loss(x_d, v, b_d); }, w_d);
  auto db_fd = central_diff([&](const std::vector<double>& v) { return loss(x_d, w_d, v); }, b_d);
  // dinp sums over O outputs, dweight and dbias over the N rows
  expect_rel_close("linear bwd dinp", dx, dx_fd, kEps32 * O);
  expect_rel_close("linear bwd dweight", dw, dw_fd, kEps32 * N);
  expect_rel_close("linear bwd dbias", db, db_fd, kEps32 * N);

  // Without a bias and without an input gradient (both null): dweight is the same, bit for bit.
  std::vector<float> dw2(O * I, 0.0f);
  backend->linear_backward(null_f32(), f32_view(dw2, {O, I}), null_f32(), f32_view(R, {N, O}), f32_view(x, {N, I}),
                           f32_view(w, {O, I}), ParamGrads::Add, InputGrad::Write);
  expect_bitwise_equal("linear bwd dweight (no bias, no dinp)", dw2, dw);
}

TEST_F(CpuOps, LinearBackwardLargerShapeMatchesDoubleFormulas) {
  // inp (64,300), weight (70,300), dout (64,70): analytic gradients in double
  // (FD would cost a forward per weight): dinp = dout W, dW = dout^T inp, db = colsum dout.
  const int N = 64, I = 300, O = 70;
  std::vector<float> x = random_floats(N * I, 18), w = random_floats(O * I, 19), R = random_floats(N * O, 20);
  std::vector<float> dx = nan_filled(N * I), dw(O * I, 0.0f), db(O, 0.0f);
  backend->linear_backward(f32_view(dx, {N, I}), f32_view(dw, {O, I}), f32_view(db, {O}), f32_view(R, {N, O}),
                           f32_view(x, {N, I}), f32_view(w, {O, I}), ParamGrads::Add, InputGrad::Write);
  std::vector<double> dx_ref(N * I, 0.0), dw_ref(O * I, 0.0), db_ref(O, 0.0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o) {
      const double g = R[n * O + o];
      db_ref[o] += g;
      for (int i = 0; i < I; ++i) {
        dx_ref[n * I + i] += g * w[o * I + i];
        dw_ref[o * I + i] += g * x[n * I + i];
      }
    }
  expect_rel_close("linear bwd dinp 64x300x70", dx, dx_ref, kEps32 * O);
  expect_rel_close("linear bwd dweight 64x300x70", dw, dw_ref, kEps32 * N);
  expect_rel_close("linear bwd dbias 64x300x70", db, db_ref, kEps32 * N);
}

TEST_F(CpuOps, LinearBackwardAccumulatesParamsAndOverwritesInput) {
  const int N = kLinN, I = kLinI, O = kLinO;
  std::vector<float> x = random_floats(N * I, 21), w = random_floats(O * I, 22), R = random_floats(N * O, 23);
  std::vector<float> dx = nan_filled(N * I), dw(O * I, 0.0f), db(O, 0.0f);
  auto run = [&] {
    backend->linear_backward(f32_view(dx, {N, I}), f32_view(dw, {O, I}), f32_view(db, {O}), f32_view(R, {N, O}),
                             f32_view(x, {N, I}), f32_view(w, {O, I}), ParamGrads::Add, InputGrad::Write);
  };
  run();
  const std::vector<float> dx_once = dx, dw_twice = doubled(dw), db_twice = doubled(db);
  run();
  // The second call adds the same fp32 sums (N=9 rows fit one GEMM block) once more: exactly 2x.
  expect_bitwise_equal("linear dweight after two calls", dw, dw_twice);
  expect_bitwise_equal("linear dbias after two calls", db, db_twice);
  expect_bitwise_equal("linear dinp after two calls (overwritten)", dx, dx_once);
}

// ============================== attention ==============================

struct AttentionCase {
  int B, T, NH, HS;
  bool causal;
  float p;
};

std::string attention_case_name(const ::testing::TestParamInfo<AttentionCase>& info) {
  const AttentionCase& c = info.param;
  return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_NH" + std::to_string(c.NH) + "_HS" +
         std::to_string(c.HS) + (c.causal ? "_causal" : "_full") + "_p" + std::to_string(static_cast<int>(c.p * 100));
}

class CpuAttention : public ::testing::TestWithParam<AttentionCase> {
 protected:
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const DropoutKey key{0x1234abcd5678ull, 7, 2, DropoutSite::AttentionWeights};

  AttentionShape shape() const {
    const AttentionCase& c = GetParam();
    return AttentionShape{c.B, c.T, c.NH, c.HS, c.causal};
  }
  // Scores are HS-term dot products, the softmax sums T exps, each output sums T weighted
  // values (and the dropout scale adds one rounding): K = HS + 2T + 1.
  double forward_tol() const { return kEps32 * (GetParam().HS + 2 * GetParam().T + 1); }
  // The backward starts from the forward's fp32 probs (carrying forward_tol) and runs its own
  // HS-term (dP) and T-term (sum P dP, dq, dk, dv) reductions: twice the forward budget.
  double backward_tol() const { return 2.0 * forward_tol(); }
};

TEST_P(CpuAttention, ForwardMatchesDoubleReference) {
  const AttentionShape s = shape();
  const float p = GetParam().p;
  const int C = s.NH * s.HS;
  // qkv (B,T,3C) in [-1.5,1.5]: scores up to ~HS/sqrt(HS), softmaxes that are not flat
  std::vector<float> qkv = random_floats(s.B * s.T * 3 * C, 31, -1.5f, 1.5f);
  std::vector<float> out = nan_filled(s.B * s.T * C), lse = nan_filled(s.B * s.NH * s.T);
  backend->attention_forward(f32_view(out, {s.B, s.T, C}), f32_view(lse, {s.B, s.NH, s.T}),
                             f32_view(qkv, {s.B, s.T, 3 * C}), s, mask_of(key, p));

  std::vector<double> lse_ref;
  std::vector<double> out_ref = attention_ref(to_double(qkv), s, p, key, &lse_ref);
  expect_rel_close("attention fwd out " + attention_case_name({GetParam(), 0}), out, out_ref, forward_tol());
  // lse = max + log(sum): the HS-term score and the T-term sum of exps, one more rounding each
  // for the log and the add; the causal rows' lse covers only the keys they see (the reference's)
  expect_rel_close("attention fwd lse " + attention_case_name({GetParam(), 0}), lse, lse_ref, forward_tol());
}

TEST_P(CpuAttention, BackwardMatchesFiniteDifferences) {
  const AttentionShape s = shape();
  const float p = GetParam().p;
  const int C = s.NH * s.HS;
  std::vector<float> qkv = random_floats(s.B * s.T * 3 * C, 32, -1.5f, 1.5f);
  std::vector<float> R = random_floats(s.B * s.T * C, 33);
  // dqkv is overwritten, dprobs is scratch: NaN in either must not leak into the result
  const std::vector<float> dqkv = test::attention_f32(*backend, s, qkv, R, mask_of(key, p)).dqkv;

  const std::vector<double> R_d = to_double(R);
  auto dqkv_fd = central_diff([&](const std::vector<double>& x) { return dot(attention_ref(x, s, p, key), R_d); },
                              to_double(qkv));
  expect_rel_close("attention bwd dqkv " + attention_case_name({GetParam(), 0}), dqkv, dqkv_fd, backward_tol());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuAttention,
    ::testing::Values(AttentionCase{1, 1, 1, 8, false, 0.0f}, AttentionCase{1, 1, 1, 8, true, 0.0f},
                      AttentionCase{2, 13, 3, 6, false, 0.0f}, AttentionCase{2, 13, 3, 6, true, 0.0f},
                      AttentionCase{1, 13, 4, 8, false, 0.0f}, AttentionCase{1, 13, 4, 8, true, 0.0f},
                      AttentionCase{2, 7, 1, 32, false, 0.0f}, AttentionCase{2, 7, 1, 32, true, 0.0f},
                      AttentionCase{2, 13, 4, 32, false, 0.0f}, AttentionCase{2, 13, 4, 32, true, 0.0f},
                      // dropout on the weights, the mask fixed by the key
                      AttentionCase{2, 13, 3, 6, false, 0.25f}, AttentionCase{2, 13, 3, 6, true, 0.25f},
                      AttentionCase{1, 13, 4, 8, false, 0.5f}, AttentionCase{1, 13, 4, 8, true, 0.1f}),
    attention_case_name);

// ---- the same bits as the plain loops ----
// The CPU kernel computes its five products per head in register blocks (ordered_matmul in
// kernels/cpu/attention.cpp) and its exps eight at a time (kernels/cpu/vector_exp.h), and
// claims the bits of the plain float loops: every sum from +0, one term at a time, in index
// order, exps from std::exp. Those loops are written out here and must agree exactly, on shapes
// that exercise full register blocks, ragged edges and the causal band.
struct PlainAttention {
  std::vector<float> out, probs, lse, dqkv;  // probs: the weights, which the backward recomputes
};
PlainAttention attention_plain_loops(const std::vector<float>& qkv, const std::vector<float>& dout,
                                     const AttentionShape& s, float p, const DropoutKey& key) {
  const int B = s.B, T = s.T, NH = s.NH, HS = s.HS, C = NH * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  PlainAttention r{std::vector<float>(B * T * C, 0.0f), std::vector<float>(B * NH * T * T, 0.0f),
                   std::vector<float>(B * NH * T, 0.0f), std::vector<float>(B * T * 3 * C, 0.0f)};
  auto q = [&](int b, int t, int h) { return (static_cast<size_t>(b) * T + t) * 3 * C + h * HS; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const size_t row = ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        const int visible = s.causal ? t + 1 : T;
        float* prow = &r.probs[row];
        float max_score = -INFINITY;
        for (int t2 = 0; t2 < visible; ++t2) {
          float dot = 0.0f;
          for (int d = 0; d < HS; ++d) dot += (qkv[q(b, t, h) + d] * scale) * qkv[q(b, t2, h) + C + d];
          prow[t2] = dot;
          max_score = std::fmax(max_score, dot);
        }
        float sum = 0.0f;
        for (int t2 = 0; t2 < visible; ++t2) sum += (prow[t2] = std::exp(prow[t2] - max_score));
        r.lse[row / T] = max_score + std::log(sum);
        const float inv_sum = 1.0f / sum;
        for (int t2 = 0; t2 < visible; ++t2) prow[t2] *= inv_sum;
        for (int d = 0; d < HS; ++d) {
          float acc = 0.0f;
          for (int t2 = 0; t2 < visible; ++t2)
            acc += (prow[t2] * (p > 0.0f ? dropout_scale(key, row + t2, p) : 1.0f)) * qkv[q(b, t2, h) + 2 * C + d];
          r.out[(static_cast<size_t>(b) * T + t) * C + h * HS + d] = acc;
        }
      }
  // backward: dscore (T,T) per head first, then dv, dq, dk as sums in index order
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      std::vector<float> g(static_cast<size_t>(T) * T, 0.0f), w(static_cast<size_t>(T) * T, 0.0f);
      for (int t = 0; t < T; ++t) {
        const size_t row = ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        const int visible = s.causal ? t + 1 : T;
        std::vector<float> ds(T);
        float dot_pdp = 0.0f;
        for (int t2 = 0; t2 < visible; ++t2) {
          const float m = p > 0.0f ? dropout_scale(key, row + t2, p) : 1.0f;
          float dp = 0.0f;
          for (int d = 0; d < HS; ++d) dp += dout[(static_cast<size_t>(b) * T + t) * C + h * HS + d] * qkv[q(b, t2, h) + 2 * C + d];
          ds[t2] = m * dp;
          w[t * T + t2] = m * r.probs[row + t2];
          dot_pdp += r.probs[row + t2] * ds[t2];
        }
        for (int t2 = 0; t2 < visible; ++t2) g[t * T + t2] = (r.probs[row + t2] * (ds[t2] - dot_pdp)) * scale;
      }
      for (int i = 0; i < T; ++i)
        for (int d = 0; d < HS; ++d) {
          float dv = 0.0f, dk = 0.0f, dq = 0.0f;
          for (int t = s.causal ? i : 0; t < T; ++t) {  // key/value i is seen by queries t >= i
            dv += w[t * T + i] * dout[(static_cast<size_t>(b) * T + t) * C + h * HS + d];
            dk += g[t * T + i] * qkv[q(b, t, h) + d];
          }
          for (int t2 = 0; t2 < (s.causal ? i + 1 : T); ++t2) dq += g[i * T + t2] * qkv[q(b, t2, h) + C + d];
          r.dqkv[q(b, i, h) + d] = dq;
          r.dqkv[q(b, i, h) + C + d] = dk;
          r.dqkv[q(b, i, h) + 2 * C + d] = dv;
        }
    }
  return r;
}

class CpuAttentionBits : public CpuAttention {};

TEST_P(CpuAttentionBits, EqualsThePlainLoopsBitForBit) {
  const AttentionShape s = shape();
  const float p = GetParam().p;
  const int C = s.NH * s.HS;
  // scores of a few units: the exps cover a wide range, none underflows to a special case
  const std::vector<float> qkv = random_floats(s.B * s.T * 3 * C, 41, -2.0f, 2.0f);
  const std::vector<float> dout = random_floats(s.B * s.T * C, 42);
  const PlainAttention want = attention_plain_loops(qkv, dout, s, p, key);
  for (CpuSimd simd : test::simd_widths()) {  // each vector width the machine has
    const std::unique_ptr<Backend> pinned = make_cpu_backend(simd);
    const test::AttentionF32 got = test::attention_f32(*pinned, s, qkv, dout, mask_of(key, p));
    const std::string name = attention_case_name({GetParam(), 0}) + " simd " + std::to_string(static_cast<int>(simd));
    for (size_t i = 0; i < want.lse.size(); ++i) ASSERT_EQ(got.lse[i], want.lse[i]) << name << " lse " << i;
    for (size_t i = 0; i < want.out.size(); ++i) ASSERT_EQ(got.out[i], want.out[i]) << name << " out " << i;
    for (size_t i = 0; i < want.dqkv.size(); ++i) ASSERT_EQ(got.dqkv[i], want.dqkv[i]) << name << " dqkv " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CpuAttentionBits,
    ::testing::Values(AttentionCase{2, 64, 4, 32, false, 0.1f}, AttentionCase{2, 64, 4, 32, true, 0.1f},
                      AttentionCase{1, 37, 3, 24, true, 0.2f}, AttentionCase{1, 37, 2, 20, false, 0.0f},
                      AttentionCase{2, 13, 3, 6, true, 0.25f}, AttentionCase{1, 130, 2, 16, true, 0.1f}),
    attention_case_name);

// ============================== layernorm ==============================

// inp (N,C) with mean ~2: the statistics must not lose digits to the offset
struct LayerNormInputs {
  int N, C;
  std::vector<float> x, w, b;
};
LayerNormInputs layernorm_inputs(int N, int C, uint32_t seed) {
  LayerNormInputs in{N, C, random_floats(N * C, seed, 0.5f, 3.5f), random_floats(C, seed + 1, 0.5f, 1.5f),
                     random_floats(C, seed + 2, -0.5f, 0.5f)};
  return in;
}
constexpr float kLnEps = 1e-5f;

TEST_F(CpuOps, LayerNormForwardMatchesDoubleReference) {
  for (auto [N, C] : {std::array<int, 2>{6, 24}, std::array<int, 2>{3, 64}}) {
    LayerNormInputs in = layernorm_inputs(N, C, 41);
    std::vector<float> out = nan_filled(N * C), mean = nan_filled(N), rstd = nan_filled(N);
    backend->layernorm_forward(f32_view(out, {N, C}), f32_view(mean, {N}), f32_view(rstd, {N}), f32_view(in.x, {N, C}),
                               f32_view(in.w, {C}), f32_view(in.b, {C}), kLnEps);
    LayerNormRef ref = layernorm_ref(to_double(in.x), to_double(in.w), to_double(in.b), N, C, kLnEps);
    // mean and variance are C-term sums; out rounds a few more times on top
    const std::string shape = " N" + std::to_string(N) + " C" + std::to_string(C);
    expect_rel_close("layernorm fwd out" + shape, out, ref.out, kEps32 * (C + 4));
    expect_rel_close("layernorm fwd mean" + shape, mean, ref.mean, kEps32 * C);
    expect_rel_close("layernorm fwd rstd" + shape, rstd, ref.rstd, kEps32 * (C + 4));
  }
}

TEST_F(CpuOps, LayerNormBackwardMatchesFiniteDifferences) {
  const int N = 6, C = 24;
  LayerNormInputs in = layernorm_inputs(N, C, 42);
  std::vector<float> R = random_floats(N * C, 45);
  std::vector<float> out(N * C), mean(N), rstd(N);
  backend->layernorm_forward(f32_view(out, {N, C}), f32_view(mean, {N}), f32_view(rstd, {N}), f32_view(in.x, {N, C}),
                             f32_view(in.w, {C}), f32_view(in.b, {C}), kLnEps);
  std::vector<float> dx = nan_filled(N * C), dw(C, 0.0f), db(C, 0.0f);
  backend->layernorm_backward(f32_view(dx, {N, C}), f32_view(dw, {C}), f32_view(db, {C}), f32_view(R, {N, C}),
                              f32_view(in.x, {N, C}), f32_view(in.w, {C}), f32_view(mean, {N}), f32_view(rstd, {N}), ParamGrads::Add);

  const std::vector<double> x_d = to_double(in.x), w_d = to_double(in.w), b_d = to_double(in.b), R_d = to_double(R);
  auto loss = [&](const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b) {
    return dot(layernorm_ref(x, w, b, N, C, kLnEps).out, R_d);
  };
  auto dx_fd = central_diff([&](const std::vector<double>& v) { return loss(v, w_d, b_d); }, x_d);
  auto dw_fd = central_diff([&](const std::vector<double>& v) { return loss(x_d, v, b_d); }, w_d);
  auto db_fd = central_diff([&](const std::vector<double>& v) { return loss(x_d, w_d, v); }, b_d);
  // dinp: the forward's statistics (C eps) and two C-term means of the backward (2C eps)
  expect_rel_close("layernorm bwd dinp", dx, dx_fd, kEps32 * 3 * C);
  // dweight: N-term sums of dout * xhat, xhat carrying the statistics' C eps
  expect_rel_close("layernorm bwd dweight", dw, dw_fd, kEps32 * (N + C));
  expect_rel_close("layernorm bwd dbias", db, db_fd, kEps32 * N);

  // dinp may alias dout: same bits as the separate buffer
  std::vector<float> alias = R, dw2(C, 0.0f), db2(C, 0.0f);
  backend->layernorm_backward(f32_view(alias, {N, C}), f32_view(dw2, {C}), f32_view(db2, {C}), f32_view(alias, {N, C}),
                              f32_view(in.x, {N, C}), f32_view(in.w, {C}), f32_view(mean, {N}), f32_view(rstd, {N}), ParamGrads::Add);
  expect_bitwise_equal("layernorm bwd dinp aliasing dout", alias, dx);
  expect_bitwise_equal("layernorm bwd dweight (aliased call)", dw2, dw);
  expect_bitwise_equal("layernorm bwd dbias (aliased call)", db2, db);
}

// RMSNorm (mean and bias absent, kernels/backend.h): out = x / sqrt(mean(x^2) + eps) * w,
// forward against double, backward against finite differences in double.
std::vector<double> rmsnorm_ref(const std::vector<double>& inp, const std::vector<double>& weight, int N, int C,
                                double eps, std::vector<double>* rstd = nullptr) {
  std::vector<double> out(static_cast<size_t>(N) * C);
  if (rstd) rstd->assign(N, 0.0);
  for (int n = 0; n < N; ++n) {
    double sq = 0.0;
    for (int c = 0; c < C; ++c) sq += inp[n * C + c] * inp[n * C + c];
    const double r = 1.0 / std::sqrt(sq / C + eps);
    for (int c = 0; c < C; ++c) out[n * C + c] = inp[n * C + c] * r * weight[c];
    if (rstd) (*rstd)[n] = r;
  }
  return out;
}

TEST_F(CpuOps, RmsNormMatchesDoubleReferenceAndFiniteDifferences) {
  const int N = 6, C = 24;
  // inputs of either sign, mean away from 0: a norm that subtracted the mean would show
  LayerNormInputs in = layernorm_inputs(N, C, 43);
  for (float& x : in.x) x -= 1.0f;
  const Tensor no_mean{}, no_bias{};
  std::vector<float> out = nan_filled(N * C), rstd = nan_filled(N);
  backend->layernorm_forward(f32_view(out, {N, C}), no_mean, f32_view(rstd, {N}), f32_view(in.x, {N, C}),
                             f32_view(in.w, {C}), no_bias, kLnEps);
  std::vector<double> rstd_ref;
  const std::vector<double> out_ref = rmsnorm_ref(to_double(in.x), to_double(in.w), N, C, kLnEps, &rstd_ref);
  // a C-term sum of squares, then rstd and the scale (as LayerNorm's variance)
  expect_rel_close("rmsnorm fwd out", out, out_ref, kEps32 * (C + 4));
  expect_rel_close("rmsnorm fwd rstd", rstd, rstd_ref, kEps32 * (C + 4));

  std::vector<float> R = random_floats(N * C, 46);
  std::vector<float> dx = nan_filled(N * C), dw(C, 0.0f);
  backend->layernorm_backward(f32_view(dx, {N, C}), f32_view(dw, {C}), no_bias, f32_view(R, {N, C}),
                              f32_view(in.x, {N, C}), f32_view(in.w, {C}), no_mean, f32_view(rstd, {N}),
                              ParamGrads::Add);
  const std::vector<double> x_d = to_double(in.x), w_d = to_double(in.w), R_d = to_double(R);
  auto loss = [&](const std::vector<double>& x, const std::vector<double>& w) {
    return dot(rmsnorm_ref(x, w, N, C, kLnEps), R_d);
  };
  // dinp: the forward's statistic (C eps) and the backward's C-term mean (C eps), and more
  expect_rel_close("rmsnorm bwd dinp", dx, central_diff([&](const std::vector<double>& v) { return loss(v, w_d); }, x_d),
                   kEps32 * 3 * C);
  expect_rel_close("rmsnorm bwd dweight", dw,
                   central_diff([&](const std::vector<double>& v) { return loss(x_d, v); }, w_d), kEps32 * (N + C));
}

// RoPE against a double reference of Hugging Face's rotate-half, and its backward as the
// forward's transpose: <R q, g> = <q, R^T g> for random q and g (the op is linear). With a
// key/value head per query head, and with the 3 query heads sharing one (only 4 heads turn).
TEST_F(CpuOps, RopeTurnsPairsByPositionAndItsBackwardIsTheTranspose) {
  const int B = 2, T = 5, NH = 3, HS = 8, first_pos = 3;
  const float theta = 10000.0f;
  for (int KVH : {NH, 1}) {
    SCOPED_TRACE("KVH " + std::to_string(KVH));
    const int W = (NH + 2 * KVH) * HS;
    const std::vector<float> x = random_floats(B * T * W, 51), g = random_floats(B * T * W, 52);
    std::vector<float> turned = x, back = g;
    backend->rope_forward(f32_view(turned, {B, T, W}), NH, KVH, first_pos, theta);
    backend->rope_backward(f32_view(back, {B, T, W}), NH, KVH, first_pos, theta);
    std::vector<double> want(x.begin(), x.end());
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t)
        for (int h = 0; h < NH + KVH; ++h)  // the q heads, then the k heads; v stays
          for (int i = 0; i < HS / 2; ++i) {
            const size_t at = (static_cast<size_t>(b) * T + t) * W + h * HS + i;
            const double angle = (first_pos + t) * std::pow(10000.0, -2.0 * i / HS);
            const double a = x[at], c = x[at + HS / 2];
            want[at] = a * std::cos(angle) - c * std::sin(angle);
            want[at + HS / 2] = c * std::cos(angle) + a * std::sin(angle);
          }
    // two products and a sum, cos and sin rounded once to fp32: a few u
    expect_rel_close("rope fwd", turned, want, 4 * kEps32);
    double lhs = 0.0, rhs = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
      lhs += static_cast<double>(turned[i]) * g[i];
      rhs += static_cast<double>(x[i]) * back[i];
    }
    EXPECT_NEAR(lhs, rhs, 1e-5 * std::fabs(lhs) + 1e-5) << "the backward is not the forward's transpose";
  }
}

TEST_F(CpuOps, LayerNormBackwardAccumulatesParamsAndOverwritesInput) {
  const int N = 5, C = 16;
  LayerNormInputs in = layernorm_inputs(N, C, 46);
  std::vector<float> R = random_floats(N * C, 49), out(N * C), mean(N), rstd(N);
  backend->layernorm_forward(f32_view(out, {N, C}), f32_view(mean, {N}), f32_view(rstd, {N}), f32_view(in.x, {N, C}),
                             f32_view(in.w, {C}), f32_view(in.b, {C}), kLnEps);
  std::vector<float> dx = nan_filled(N * C), dw(C, 0.0f), db(C, 0.0f);
  auto run = [&] {
    backend->layernorm_backward(f32_view(dx, {N, C}), f32_view(dw, {C}), f32_view(db, {C}), f32_view(R, {N, C}),
                                f32_view(in.x, {N, C}), f32_view(in.w, {C}), f32_view(mean, {N}), f32_view(rstd, {N}), ParamGrads::Add);
  };
  run();
  const std::vector<float> dx_once = dx, dw_twice = doubled(dw), db_twice = doubled(db);
  run();
  expect_bitwise_equal("layernorm dweight after two calls", dw, dw_twice);
  expect_bitwise_equal("layernorm dbias after two calls", db, db_twice);
  expect_bitwise_equal("layernorm dinp after two calls (overwritten)", dx, dx_once);
}

// ============================== activations ==============================

// n values in [-6,6] kept at least `gap` away from 0 (ReLU's kink)
std::vector<float> activation_inputs(size_t n, uint32_t seed, float gap) {
  std::vector<float> x = random_floats(n, seed, -6.0f, 6.0f);
  for (float& v : x)
    if (std::fabs(v) < gap) v = v < 0 ? v - gap : v + gap;
  return x;
}

TEST_F(CpuOps, ReluForwardIsExact) {
  std::vector<float> x = activation_inputs(1000, 51, 0.0f), y = nan_filled(1000);
  x[0] = 0.0f;
  x[1] = -0.0f;
  backend->activation_forward(f32_view(y, {1000}), f32_view(x, {1000}), Activation::Relu);
  std::vector<double> ref(1000);
  for (int i = 0; i < 1000; ++i) ref[i] = std::max(0.0, static_cast<double>(x[i]));
  expect_rel_close("relu fwd", y, ref, 0.0);  // a selection, no rounding
}

TEST_F(CpuOps, GeluForwardMatchesDoubleErf) {
  const int n = 2001;
  std::vector<float> x(n), y = nan_filled(n);
  for (int i = 0; i < n; ++i) x[i] = -8.0f + 16.0f * i / (n - 1);  // covers both tails and 0
  backend->activation_forward(f32_view(y, {n}), f32_view(x, {n}), Activation::Gelu);
  // 0.5 x (1 + erf(x/sqrt2)) in fp32: erff is good to ~1 ulp, and 1 + erf and the two
  // products round once each, so the error is a few eps of |x| (not of |gelu(x)|: for
  // x << 0, 1 + erf cancels and the relative error of the tiny result grows).
  double worst = 0.0;
  for (int i = 0; i < n; ++i) {
    const double err = std::fabs(y[i] - gelu_ref(x[i]));
    const double bound = 4.0 * kEps32 * std::fabs(x[i]);
    worst = std::max(worst, err / std::max(std::fabs(static_cast<double>(x[i])), 1e-30));
    EXPECT_LE(err, bound) << "x = " << x[i] << " gelu = " << y[i] << " want " << gelu_ref(x[i]);
  }
  std::printf("[ rel err  ] %-40s %.3e  (tol %.1e)\n", "gelu fwd, |err| / |x|", worst, 4.0 * kEps32);
}

TEST_F(CpuOps, ActivationBackwardMatchesFiniteDifferences) {
  const int n = 600;
  // ReLU inputs at least 0.05 from 0, far outside the FD step of 1e-6
  std::vector<float> x = activation_inputs(n, 52, 0.05f), R = random_floats(n, 53);
  const std::vector<double> x_d = to_double(x), R_d = to_double(R);

  for (Activation act : {Activation::Relu, Activation::Gelu}) {
    const bool relu = act == Activation::Relu;
    const char* name = relu ? "relu" : "gelu";
    std::vector<float> dx = nan_filled(n);
    backend->activation_backward(f32_view(dx, {n}), f32_view(R, {n}), f32_view(x, {n}), act);
    auto dx_fd = central_diff(
        [&](const std::vector<double>& v) {
          double L = 0.0;
          for (int i = 0; i < n; ++i) L += (relu ? std::max(0.0, v[i]) : gelu_ref(v[i])) * R_d[i];
          return L;
        },
        x_d);
    // Elementwise, no reduction: GELU's erff, expf and a handful of roundings. ReLU's
    // backward is a selection, checked exactly below; against FD it shows only the double
    // noise of the FD itself (~1e-16 sum|L terms| / h, a few 1e-9 here).
    expect_rel_close(std::string(name) + " bwd dinp", dx, dx_fd, 8 * kEps32);
    if (relu) {
      for (int i = 0; i < n; ++i) EXPECT_EQ(dx[i], x[i] > 0 ? R[i] : 0.0f) << i;  // a selection: exact
    }

    // dinp may alias dout
    std::vector<float> alias = R;
    backend->activation_backward(f32_view(alias, {n}), f32_view(alias, {n}), f32_view(x, {n}), act);
    expect_bitwise_equal(std::string(name) + " bwd dinp aliasing dout", alias, dx);
  }
}

// The fused FFN ops (activation then dropout, and their gradient) in one pass give the bits of
// the two ops run one after the other, which the tests above check against references: for
// both activations, several drop rates (p = 0 included), a length that is not a multiple of the
// CPU's 256-element block or of a 4-element Philox group, and dinp over dout as the model runs it.
TEST_F(CpuOps, ActivationDropoutFusedEqualsTheTwoOpsBitForBit) {
  const int n = 2 * 256 + 37;
  const DropoutKey key{0xabcdef12ull, 9, 1, DropoutSite::FfnHidden};
  std::vector<float> x = random_floats(n, 71, -3.0f, 3.0f), dout = random_floats(n, 72);
  x[0] = 0.0f, x[1] = -0.0f;  // ReLU's kink
  for (Activation act : {Activation::Relu, Activation::Gelu}) {
    for (float p : {0.0f, 0.1f, 0.5f}) {
      const std::string name = std::string(act == Activation::Relu ? "relu" : "gelu") + " p " + std::to_string(p);
      std::vector<float> two_ops = nan_filled(n), fused = nan_filled(n);
      backend->activation_forward(f32_view(two_ops, {n}), f32_view(x, {n}), act);
      backend->dropout_forward(f32_view(two_ops, {n}), f32_view(two_ops, {n}), mask_of(key, p));
      backend->activation_dropout_forward(f32_view(fused, {n}), f32_view(x, {n}), act, mask_of(key, p));
      expect_bitwise_equal(name + " forward", fused, two_ops);

      std::vector<float> dtwo_ops = nan_filled(n), dfused = dout;
      backend->dropout_backward(f32_view(dtwo_ops, {n}), f32_view(dout, {n}), mask_of(key, p));
      backend->activation_backward(f32_view(dtwo_ops, {n}), f32_view(dtwo_ops, {n}), f32_view(x, {n}), act);
      backend->activation_dropout_backward(f32_view(dfused, {n}), f32_view(dfused, {n}), f32_view(x, {n}), act,
                                           mask_of(key, p));
      expect_bitwise_equal(name + " backward, dinp over dout", dfused, dtwo_ops);
    }
  }
}

// ============================== residual ==============================

TEST_F(CpuOps, ResidualForwardIsOneRoundingAndMayAlias) {
  const int n = 1003;
  std::vector<float> a = random_floats(n, 61, -10.0f, 10.0f), b = random_floats(n, 62, -1e-3f, 1e-3f);
  std::vector<float> out = nan_filled(n);
  backend->residual_forward(f32_view(out, {n}), f32_view(a, {n}), f32_view(b, {n}));
  std::vector<double> ref(n);
  for (int i = 0; i < n; ++i) ref[i] = static_cast<double>(a[i]) + b[i];
  expect_rel_close("residual fwd", out, ref, kEps32);  // one rounding of the sum
  // fp32 addition is correctly rounded: exactly a + b computed here
  std::vector<float> sum(n);
  for (int i = 0; i < n; ++i) sum[i] = a[i] + b[i];
  expect_bitwise_equal("residual fwd vs fp32 a + b", out, sum);

  std::vector<float> a2 = a, b2 = b;
  backend->residual_forward(f32_view(a2, {n}), f32_view(a2, {n}), f32_view(b, {n}));
  expect_bitwise_equal("residual fwd, out aliasing a", a2, sum);
  backend->residual_forward(f32_view(b2, {n}), f32_view(a, {n}), f32_view(b2, {n}));
  expect_bitwise_equal("residual fwd, out aliasing b", b2, sum);
}

// ============================== vector exp ==============================

// exp_shifted (kernels/cpu/vector_exp.h) claims glibc's expf bit for bit. Checked on every
// 251st float bit pattern (17 million inputs, every exponent and every table slot, both signs,
// infinities, NaNs), with each value landing in every lane position and the tails, and through
// the shift and in place. (All 2^32 inputs agreed when it was written; that takes 20 s.)
bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, sizeof(float)) == 0;
}

// The CPU backend's one GEMM (gemm.h), in the three forms the linear op uses and with beta 0
// and 1, against sums in double, on the library this machine runs (oneDNN, or OpenBLAS for
// A^T under AVX2). Shapes: odd ones (no kernel's block size divides them) and the seed's
// largest. The bound: an fp32 dot product of K terms is off by at most K 2^-24 of the sum of
// |terms| (each add rounds once, however the library orders them); 2x that allows for the
// beta C add and the product roundings.
TEST(CpuGemm, EveryFormAgreesWithADoubleSum) {
  struct Shape { int M, N, K; };
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (const Shape& shape : {Shape{37, 53, 29}, Shape{1, 7, 300}, Shape{1024, 2048, 128}, Shape{128, 128, 1024}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f}) {
          const int M = shape.M, N = shape.N, K = shape.K;
          const int lda = ta ? M : K, ldb = tb ? K : N;
          std::vector<float> A(static_cast<size_t>(M) * K), B(static_cast<size_t>(K) * N), C(static_cast<size_t>(M) * N);
          for (float& x : A) x = uniform(rng);
          for (float& x : B) x = uniform(rng);
          for (float& x : C) x = uniform(rng);
          const std::vector<float> C0 = C;
          gemm_f32(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, C.data(), N);
          double worst = 0.0;  // the largest error as a fraction of its bound
          for (int i = 0; i < M; i += std::max(1, M / 17))
            for (int j = 0; j < N; j += std::max(1, N / 13)) {
              double sum = beta * C0[static_cast<size_t>(i) * N + j], magnitude = std::fabs(sum);
              for (int k = 0; k < K; ++k) {
                const double a = ta ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
                const double b = tb ? B[static_cast<size_t>(j) * ldb + k] : B[static_cast<size_t>(k) * ldb + j];
                sum += a * b;
                magnitude += std::fabs(a * b);
              }
              const double bound = 2.0 * (K + 1) * std::ldexp(1.0, -24) * magnitude;
              worst = std::max(worst, std::fabs(C[static_cast<size_t>(i) * N + j] - sum) / bound);
            }
          EXPECT_LE(worst, 1.0) << M << "x" << N << "x" << K << (ta ? " A^T" : "") << (tb ? " B^T" : "") << " beta "
                                << beta;
        }
}

TEST(VectorExp, EqualsStdExpBitForBitAcrossTheFloats) {
  constexpr int64_t kStride = 251, kBatch = 1 << 16;
  std::vector<float> x(kBatch), y(kBatch);
  int64_t checked = 0;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32);) {
    int64_t n = 0;
    for (; n < kBatch && bits < (uint64_t{1} << 32); ++n, bits += kStride) {
      const uint32_t b = static_cast<uint32_t>(bits);
      std::memcpy(&x[n], &b, sizeof(float));
    }
    exp_shifted(x.data(), 0.0f, n, y.data(), best_cpu_simd());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_TRUE(same_float(y[i], std::exp(x[i]))) << "x " << x[i] << " (" << std::hexfloat << x[i] << ")";
    checked += n;
  }
  EXPECT_GT(checked, 17000000);
}

TEST(VectorExp, ShiftTailsSpecialsAndInPlace) {
  const float specials[] = {0.0f, -0.0f, 88.0f, 88.7f, 89.0f, -88.0f, -103.5f, -104.0f, -200.0f,
                            INFINITY, -INFINITY, NAN, 1e-30f, -1e-40f};
  for (int n : {1, 7, 8, 9, 16, 23}) {
    for (int lane = 0; lane < n; ++lane) {
      for (float special : specials) {
        std::vector<float> x = random_floats(n, 50 + n, -30.0f, 5.0f);
        x[lane] = special + 2.5f;  // the shift of 2.5 brings it back
        for (CpuSimd simd : test::simd_widths()) {
          std::vector<float> in_place = x, out(n);
          exp_shifted(x.data(), 2.5f, n, out.data(), simd);
          exp_shifted(in_place.data(), 2.5f, n, in_place.data(), simd);
          for (int i = 0; i < n; ++i) {
            const float want = std::exp(x[i] - 2.5f);
            ASSERT_TRUE(same_float(out[i], want)) << "n " << n << " lane " << lane << " x " << x[i];
            ASSERT_TRUE(same_float(in_place[i], want)) << "in place, n " << n << " lane " << lane << " x " << x[i];
          }
        }
      }
    }
  }
}

// ============================== cross-entropy ==============================

struct CrossEntropyInputs {
  int N, V;
  std::vector<float> logits;
  std::vector<int32_t> targets;
};
CrossEntropyInputs cross_entropy_inputs(int N, int V, uint32_t seed, float offset = 0.0f) {
  return {N, V, random_floats(N * V, seed, offset - 4.0f, offset + 4.0f), random_ints(N, seed + 1, 0, V)};
}
// The V-term sum of exps carries up to ~V eps relative error, i.e. V eps absolute in its log;
// exp(z - max) is off by ~eps |z - max| relatively, and the final "+ max - z[target]" rounds
// at the magnitude of the logits.
double cross_entropy_tol(const CrossEntropyInputs& in) {
  double zmax = 0.0;
  for (float z : in.logits) zmax = std::max(zmax, std::fabs(static_cast<double>(z)));
  return kEps32 * (in.V + 2.0 * zmax);
}
// dlogits = softmax - onehot, relative to its largest element: the V-term sum carries ~V eps,
// and exp(z - max) ~eps |z - max| with |z - max| at most a row's range; the offset of the
// logits cancels in z - max and does not count (unlike in the loss).
double cross_entropy_grad_tol(const CrossEntropyInputs& in) {
  double range = 0.0;
  for (int n = 0; n < in.N; ++n) {
    const auto row = in.logits.begin() + static_cast<int64_t>(n) * in.V;
    const auto [lo, hi] = std::minmax_element(row, row + in.V);
    range = std::max(range, static_cast<double>(*hi) - *lo);
  }
  return kEps32 * (in.V + 2.0 * range);
}

TEST_F(CpuOps, CrossEntropyMatchesDoubleReference) {
  struct Case {
    int N, V;
    float offset, dloss_scale;
  };
  // offset 100: exp would overflow without the max subtraction; scale 0.37: not a power of 2
  for (Case c : {Case{7, 19, 0.0f, 1.0f}, Case{16, 257, 0.0f, 1.0f}, Case{5, 19, 100.0f, 1.0f},
                 Case{7, 19, 0.0f, 0.37f}, Case{7, 19, 0.0f, 1024.0f}}) {
    CrossEntropyInputs in = cross_entropy_inputs(c.N, c.V, 71, c.offset);
    const int N = c.N, V = c.V;
    std::vector<float> losses = nan_filled(N), dlogits = nan_filled(N * V);
    backend->cross_entropy_forward_backward(f32_view(losses, {N}), f32_view(dlogits, {N, V}),
                                            f32_view(in.logits, {N, V}), i32_view(in.targets, {N}), scalar_f32(c.dloss_scale), N);
    const std::vector<double> z = to_double(in.logits);
    char label[96];
    std::snprintf(label, sizeof label, "N%d V%d offset %g scale %g", N, V, c.offset, c.dloss_scale);
    expect_abs_close(std::string("cross-entropy losses ") + label, losses, cross_entropy_ref(z, in.targets, N, V),
                     cross_entropy_tol(in));
    expect_rel_close(std::string("cross-entropy dlogits ") + label, dlogits,
                     cross_entropy_grad_ref(z, in.targets, N, V, c.dloss_scale), cross_entropy_grad_tol(in));

    // without dlogits only the losses are written, with the same bits
    std::vector<float> losses2 = nan_filled(N);
    backend->cross_entropy_forward_backward(f32_view(losses2, {N}), null_f32(), f32_view(in.logits, {N, V}),
                                            i32_view(in.targets, {N}), scalar_f32(c.dloss_scale), N);
    expect_bitwise_equal(std::string("cross-entropy losses without dlogits ") + label, losses2, losses);

    // dlogits may alias logits
    std::vector<float> alias = in.logits, losses3 = nan_filled(N);
    backend->cross_entropy_forward_backward(f32_view(losses3, {N}), f32_view(alias, {N, V}), f32_view(alias, {N, V}),
                                            i32_view(in.targets, {N}), scalar_f32(c.dloss_scale), N);
    expect_bitwise_equal(std::string("cross-entropy dlogits aliasing logits ") + label, alias, dlogits);
    expect_bitwise_equal(std::string("cross-entropy losses, aliased call ") + label, losses3, losses);
  }
}

TEST_F(CpuOps, CrossEntropyLossScaleByPowerOfTwoIsExact) {
  CrossEntropyInputs in = cross_entropy_inputs(7, 19, 72);
  std::vector<float> losses(7), d1(7 * 19), d1024(7 * 19);
  backend->cross_entropy_forward_backward(f32_view(losses, {7}), f32_view(d1, {7, 19}), f32_view(in.logits, {7, 19}),
                                          i32_view(in.targets, {7}), scalar_f32(1.0f), 7);
  backend->cross_entropy_forward_backward(f32_view(losses, {7}), f32_view(d1024, {7, 19}),
                                          f32_view(in.logits, {7, 19}), i32_view(in.targets, {7}), scalar_f32(1024.0f), 7);
  for (float& g : d1) g *= 1024.0f;  // scaling by 2^10 commutes with every rounding
  expect_bitwise_equal("cross-entropy dlogits at scale 1024", d1024, d1);
}

TEST_F(CpuOps, CrossEntropyGradientMatchesFiniteDifferencesOfMeanLoss) {
  for (float dloss_scale : {1.0f, 0.37f}) {
    CrossEntropyInputs in = cross_entropy_inputs(7, 19, 73);
    const int N = in.N, V = in.V;
    std::vector<float> losses(N), dlogits = nan_filled(N * V);
    backend->cross_entropy_forward_backward(f32_view(losses, {N}), f32_view(dlogits, {N, V}),
                                            f32_view(in.logits, {N, V}), i32_view(in.targets, {N}), scalar_f32(dloss_scale), N);
    // dlogits is the gradient of dloss_scale * mean_n loss_n
    auto dz_fd = central_diff(
        [&](const std::vector<double>& z) {
          double mean = 0.0;
          for (double l : cross_entropy_ref(z, in.targets, N, V)) mean += l;
          return dloss_scale * mean / N;
        },
        to_double(in.logits));
    expect_rel_close("cross-entropy dlogits vs FD, scale " + std::to_string(dloss_scale), dlogits, dz_fd,
                     cross_entropy_grad_tol(in));
  }
}

}  // namespace
}  // namespace tt
