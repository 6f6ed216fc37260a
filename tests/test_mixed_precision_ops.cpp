// CPU ops on bf16 and fp16 storage against the same ops in fp32 on the same inputs. Every input
// is first rounded to the 16-bit type, so both runs see identical values; the 16-bit run keeps
// its activations, activation gradients and working weights in 16 bits, while parameter
// gradients, LayerNorm mean/rstd and the per-token losses stay F32 (kernels/backend.h).
//
// Tolerances, from the type's unit roundoff u = 2^-8 (bf16, 8 significant bits) or 2^-11
// (fp16, 11 bits); see tests/mixed_precision_util.h:
// - An output stored in 16 bits is rounded once from the fp32 result: |y - x| <= u |y|. (The
//   worst case is u, not u/2: a tie such as 1 + 2^-p rounds to 1 and is off by exactly u.)
//   Because the inputs are identical and the backend runs the fp32 op on exact fp32 copies,
//   every op without a stored intermediate (embedding, linear, layernorm, relu/gelu, dropout,
//   residual, cross-entropy, attention forward) must give exactly round(fp32 result), bit
//   for bit. That is checked; the printed "max |y-x|/|y|" is the measured rounding (<= u).
// - F32 results (parameter gradients, mean/rstd, losses) are computed by the same fp32 code
//   on the same values in the same order, so they must equal the fp32 op's bit for bit (the
//   widening of 16-bit inputs is exact).
// - Attention backward reads the softmax weights the forward stored: in 16 bits they carry one
//   rounding, P' = P (1 + d), |d| <= u. Propagated to first order through
//     dv_t2 = sum_t m P dO_t,  dS = P (dP - sum P dP),  dq = s sum dS k,  dk = s sum dS q
//   (m the dropout factor, s = 1/sqrt(HS)) the error of each dqkv element is at most u times
//     e(dv) = sum_t m P |dO_t|,  e(dS) = P (|dP - sum P dP| + sum P |dP|),
//     e(dq) = s sum e(dS) |k|,   e(dk) = s sum e(dS) |q|,
//   plus the final rounding u |y| and the two runs' independent fp32 reduction noise (twice
//   the CPU attention test's budget). That bound is checked element by element, and with P'
//   handed to the fp32 backward the 16-bit backward must again be its exact rounding.
// - Aliasing (dropout in place, dinp over dout, dlogits over logits, residual out over an
//   input) on 16-bit storage gives the same bits as separate buffers.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/common/philox.h"
#include "kernels/cpu/cpu_backend.h"
#include "tests/mixed_precision_util.h"
#include "tests/op_test_util.h"

namespace tt {
namespace {

using test::expect_bitwise_equal;
using test::expect_stored_rounding;
using test::f32_view;
using test::half_nan;
using test::half_of;
using test::HalfBuffer;
using test::HalfType;
using test::i32_view;
using test::kBf16;
using test::kFp16;
using test::mask_of;
using test::null_f32;
using test::random_floats;
using test::random_ints;
using test::rounded;
using test::scalar_f32;

using test::nan_filled;

std::string half_name(const ::testing::TestParamInfo<HalfType>& info) { return info.param.name; }

class MixedPrecisionOps : public ::testing::TestWithParam<HalfType> {
 protected:
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const HalfType& h() const { return GetParam(); }
  DType dt() const { return GetParam().dtype; }
  // n random values in [lo, hi), rounded to the 16-bit type (exact in both runs)
  std::vector<float> input(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) const {
    return rounded(dt(), random_floats(n, seed, lo, hi));
  }
};

// ============================== embedding ==============================

TEST_P(MixedPrecisionOps, EmbeddingForwardIsRoundedFp32) {
  const int B = 2, T = 5, C = 7, V = 6, maxT = 8;
  std::vector<int32_t> tokens = random_ints(B * T, 1, 0, V);
  std::vector<float> wte = input(V * C, 2), wpe = input(maxT * C, 3);
  HalfBuffer wte16 = half_of(dt(), wte), wpe16 = half_of(dt(), wpe);
  const Shape out_shape{B, T, C};

  std::vector<float> out32 = nan_filled(B * T * C);
  HalfBuffer out16 = half_nan(dt(), B * T * C);
  backend->embedding_forward(f32_view(out32, out_shape), i32_view(tokens, {B, T}), f32_view(wte, {V, C}),
                             f32_view(wpe, {maxT, C}));
  backend->embedding_forward(out16.view(out_shape), i32_view(tokens, {B, T}), wte16.view({V, C}),
                             wpe16.view({maxT, C}));
  expect_stored_rounding("embedding fwd (wte + wpe)", out16, out32, h());

  out32 = nan_filled(out32.size());
  out16 = half_nan(dt(), out32.size());
  backend->embedding_forward(f32_view(out32, out_shape), i32_view(tokens, {B, T}), f32_view(wte, {V, C}), null_f32());
  backend->embedding_forward(out16.view(out_shape), i32_view(tokens, {B, T}), wte16.view({V, C}), null_f32());
  expect_stored_rounding("embedding fwd (wte only, a copy)", out16, out32, h());
}

TEST_P(MixedPrecisionOps, EmbeddingBackwardParamGradsEqualFp32) {
  const int B = 2, T = 5, C = 7, V = 6, maxT = 8;
  std::vector<int32_t> tokens = random_ints(B * T, 4, 0, V);
  tokens[3] = tokens[0];
  tokens[T] = tokens[0];  // repeated ids: rows accumulate several tokens
  std::vector<float> dout = input(B * T * C, 5);
  HalfBuffer dout16 = half_of(dt(), dout);
  // F32 parameter gradients already holding something: the op accumulates
  const std::vector<float> dwte0 = random_floats(V * C, 6), dwpe0 = random_floats(maxT * C, 7);
  std::vector<float> dwte32 = dwte0, dwpe32 = dwpe0, dwte16 = dwte0, dwpe16 = dwpe0;
  backend->embedding_backward(f32_view(dwte32, {V, C}), f32_view(dwpe32, {maxT, C}), f32_view(dout, {B, T, C}),
                              i32_view(tokens, {B, T}), ParamGrads::Add);
  backend->embedding_backward(f32_view(dwte16, {V, C}), f32_view(dwpe16, {maxT, C}), dout16.view({B, T, C}),
                              i32_view(tokens, {B, T}), ParamGrads::Add);
  expect_bitwise_equal(std::string(h().name) + " embedding bwd dwte", dwte16, dwte32);
  expect_bitwise_equal(std::string(h().name) + " embedding bwd dwpe", dwpe16, dwpe32);
}

// ============================== linear ==============================

TEST_P(MixedPrecisionOps, LinearForwardIsRoundedFp32) {
  for (auto [N, I, O] : {std::array<int, 3>{9, 17, 11}, std::array<int, 3>{64, 300, 70}}) {
    const std::string shape = " N" + std::to_string(N) + " I" + std::to_string(I) + " O" + std::to_string(O);
    std::vector<float> x = input(N * I, 11), w = input(O * I, 12), b = input(O, 13);
    HalfBuffer x16 = half_of(dt(), x), w16 = half_of(dt(), w), b16 = half_of(dt(), b);
    for (bool bias : {true, false}) {
      std::vector<float> out32 = nan_filled(N * O);
      HalfBuffer out16 = half_nan(dt(), N * O);
      backend->linear_forward(f32_view(out32, {N, O}), f32_view(x, {N, I}), f32_view(w, {O, I}),
                              bias ? f32_view(b, {O}) : null_f32());
      backend->linear_forward(out16.view({N, O}), x16.view({N, I}), w16.view({O, I}),
                              bias ? b16.view({O}) : null_f32());
      expect_stored_rounding(std::string("linear fwd ") + (bias ? "with" : "without") + " bias" + shape, out16, out32,
                             h());
    }
  }
}

TEST_P(MixedPrecisionOps, LinearBackwardRoundsDinpAndParamGradsEqualFp32) {
  for (auto [N, I, O] : {std::array<int, 3>{9, 17, 11}, std::array<int, 3>{64, 300, 70}}) {
    const std::string shape = " N" + std::to_string(N) + " I" + std::to_string(I) + " O" + std::to_string(O);
    std::vector<float> x = input(N * I, 14), w = input(O * I, 15), dout = input(N * O, 16);
    HalfBuffer x16 = half_of(dt(), x), w16 = half_of(dt(), w), dout16 = half_of(dt(), dout);
    const std::vector<float> dw0 = random_floats(O * I, 17), db0 = random_floats(O, 18);

    std::vector<float> dx32 = nan_filled(N * I), dw32 = dw0, db32 = db0, dw16 = dw0, db16 = db0;
    HalfBuffer dx16 = half_nan(dt(), N * I);
    backend->linear_backward(f32_view(dx32, {N, I}), f32_view(dw32, {O, I}), f32_view(db32, {O}),
                             f32_view(dout, {N, O}), f32_view(x, {N, I}), f32_view(w, {O, I}), ParamGrads::Add, InputGrad::Write);
    backend->linear_backward(dx16.view({N, I}), f32_view(dw16, {O, I}), f32_view(db16, {O}), dout16.view({N, O}),
                             x16.view({N, I}), w16.view({O, I}), ParamGrads::Add, InputGrad::Write);
    expect_stored_rounding("linear bwd dinp" + shape, dx16, dx32, h());
    expect_bitwise_equal(std::string(h().name) + " linear bwd dweight" + shape, dw16, dw32);
    expect_bitwise_equal(std::string(h().name) + " linear bwd dbias" + shape, db16, db32);

    // no input gradient, no bias gradient (the embedding-facing and bias-free cases)
    std::vector<float> dw16b = dw0, dw32b = dw0;
    backend->linear_backward(null_f32(), f32_view(dw32b, {O, I}), null_f32(), f32_view(dout, {N, O}),
                             f32_view(x, {N, I}), f32_view(w, {O, I}), ParamGrads::Add, InputGrad::Write);
    backend->linear_backward(null_f32(), f32_view(dw16b, {O, I}), null_f32(), dout16.view({N, O}), x16.view({N, I}),
                             w16.view({O, I}), ParamGrads::Add, InputGrad::Write);
    expect_bitwise_equal(std::string(h().name) + " linear bwd dweight (no dinp, no bias)" + shape, dw16b, dw32b);
  }
}

// ============================== attention ==============================

struct AttentionCase {
  int B, T, NH, HS;
  bool causal;
  float p;
};

void PrintTo(const AttentionCase& c, std::ostream* os);  // below: gtest's parameter names

using AttentionParam = std::tuple<HalfType, AttentionCase>;

std::string attention_name(const AttentionCase& c) {
  return "B" + std::to_string(c.B) + "_T" + std::to_string(c.T) + "_NH" + std::to_string(c.NH) + "_HS" +
         std::to_string(c.HS) + (c.causal ? "_causal" : "_full") + "_p" + std::to_string(static_cast<int>(c.p * 100));
}
void PrintTo(const AttentionCase& c, std::ostream* os) { *os << attention_name(c); }
std::string attention_param_name(const ::testing::TestParamInfo<AttentionParam>& info) {
  return std::string(std::get<0>(info.param).name) + "_" + attention_name(std::get<1>(info.param));
}

class MixedPrecisionAttention : public ::testing::TestWithParam<AttentionParam> {
 protected:
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const DropoutKey key{0x1234abcd5678ull, 7, 2, DropoutSite::AttentionWeights};
  const HalfType& h() const { return std::get<0>(GetParam()); }
  const AttentionCase& c() const { return std::get<1>(GetParam()); }
  AttentionShape shape() const { return AttentionShape{c().B, c().T, c().NH, c().HS, c().causal}; }
  std::string label(const char* what) const { return std::string(what) + " " + attention_name(c()); }
};

TEST_P(MixedPrecisionAttention, ForwardOutIsRoundedFp32AndLseIsFp32) {
  const AttentionShape s = shape();
  const int C = s.NH * s.HS;
  const Shape qkv_shape{s.B, s.T, 3 * C}, out_shape{s.B, s.T, C}, rows_shape{s.B, s.NH, s.T};
  std::vector<float> qkv = rounded(h().dtype, random_floats(s.B * s.T * 3 * C, 31, -1.5f, 1.5f));
  HalfBuffer qkv16 = half_of(h().dtype, qkv);
  std::vector<float> out32 = nan_filled(out_shape.numel()), lse32 = nan_filled(rows_shape.numel());
  std::vector<float> lse_of_16 = nan_filled(rows_shape.numel());  // lse is fp32 whatever the storage
  HalfBuffer out16 = half_nan(h().dtype, out32.size());
  backend->attention_forward(f32_view(out32, out_shape), f32_view(lse32, rows_shape), f32_view(qkv, qkv_shape), s,
                             mask_of(key, c().p));
  backend->attention_forward(out16.view(out_shape), f32_view(lse_of_16, rows_shape), qkv16.view(qkv_shape), s,
                             mask_of(key, c().p));
  // The output is computed in fp32 inside the op; only what is stored rounds.
  expect_stored_rounding(label("attention fwd out"), out16, out32, h());
  for (size_t i = 0; i < lse32.size(); ++i) ASSERT_EQ(lse_of_16[i], lse32[i]) << label("attention fwd lse") << " " << i;
}

// Nothing (T,T) is stored between the passes any more (kernels/backend.h): the 16-bit backward
// is the fp32 backward on the same stored inputs (qkv, dout and the stored out), rounded once.
TEST_P(MixedPrecisionAttention, BackwardIsRoundedFp32OnTheStoredInputs) {
  const AttentionShape s = shape();
  const int B = s.B, T = s.T, NH = s.NH, HS = s.HS, C = NH * HS;
  const float p = c().p;
  const Shape qkv_shape{B, T, 3 * C}, out_shape{B, T, C}, rows_shape{B, NH, T};
  std::vector<float> qkv = rounded(h().dtype, random_floats(B * T * 3 * C, 32, -1.5f, 1.5f));
  std::vector<float> dout = rounded(h().dtype, random_floats(B * T * C, 33));
  HalfBuffer qkv16 = half_of(h().dtype, qkv), dout16 = half_of(h().dtype, dout);

  // 16-bit forward + backward
  HalfBuffer out16 = half_nan(h().dtype, static_cast<size_t>(out_shape.numel()));
  std::vector<float> lse = nan_filled(rows_shape.numel()), scratch = nan_filled(rows_shape.numel());
  backend->attention_forward(out16.view(out_shape), f32_view(lse, rows_shape), qkv16.view(qkv_shape), s,
                             mask_of(key, p));
  HalfBuffer dqkv16 = half_nan(h().dtype, qkv.size());
  backend->attention_backward(dqkv16.view(qkv_shape), f32_view(scratch, rows_shape), dout16.view(out_shape),
                              qkv16.view(qkv_shape), out16.view(out_shape), f32_view(lse, rows_shape), s,
                              mask_of(key, p));
  // fp32 backward on the same values
  std::vector<float> out_stored = out16.values(), dqkv32 = nan_filled(qkv.size()),
                     scratch32 = nan_filled(rows_shape.numel());
  backend->attention_backward(f32_view(dqkv32, qkv_shape), f32_view(scratch32, rows_shape), f32_view(dout, out_shape),
                              f32_view(qkv, qkv_shape), f32_view(out_stored, out_shape), f32_view(lse, rows_shape),
                              s, mask_of(key, p));
  expect_stored_rounding(label("attention bwd dqkv (fp32 bwd on the stored inputs)"), dqkv16, dqkv32, h());
}

// Two shapes, full and causal, with and without dropout on the weights.
const AttentionCase kAttentionCases[] = {
    {2, 13, 3, 6, false, 0.0f},  {2, 13, 3, 6, true, 0.0f},   {2, 13, 3, 6, false, 0.25f},
    {2, 13, 3, 6, true, 0.25f},  {2, 16, 4, 32, false, 0.0f}, {2, 16, 4, 32, true, 0.0f},
    {2, 16, 4, 32, false, 0.1f}, {2, 16, 4, 32, true, 0.1f},  {1, 1, 1, 8, true, 0.0f},
};
INSTANTIATE_TEST_SUITE_P(Half, MixedPrecisionAttention,
                         ::testing::Combine(::testing::Values(kBf16, kFp16), ::testing::ValuesIn(kAttentionCases)),
                         attention_param_name);

// ============================== layernorm ==============================

TEST_P(MixedPrecisionOps, LayerNormForwardRoundsOutAndKeepsStatisticsFp32) {
  const float eps = 1e-5f;
  for (auto [N, C] : {std::array<int, 2>{6, 24}, std::array<int, 2>{3, 128}}) {
    const std::string shape = " N" + std::to_string(N) + " C" + std::to_string(C);
    // mean ~2: the statistics must not lose digits to the offset
    std::vector<float> x = input(N * C, 41, 0.5f, 3.5f), w = input(C, 42, 0.5f, 1.5f), b = input(C, 43, -0.5f, 0.5f);
    HalfBuffer x16 = half_of(dt(), x), w16 = half_of(dt(), w), b16 = half_of(dt(), b);
    std::vector<float> out32 = nan_filled(N * C), mean32 = nan_filled(N), rstd32 = nan_filled(N);
    std::vector<float> mean16 = nan_filled(N), rstd16 = nan_filled(N);
    HalfBuffer out16 = half_nan(dt(), N * C);
    backend->layernorm_forward(f32_view(out32, {N, C}), f32_view(mean32, {N}), f32_view(rstd32, {N}),
                               f32_view(x, {N, C}), f32_view(w, {C}), f32_view(b, {C}), eps);
    backend->layernorm_forward(out16.view({N, C}), f32_view(mean16, {N}), f32_view(rstd16, {N}), x16.view({N, C}),
                               w16.view({C}), b16.view({C}), eps);
    expect_stored_rounding("layernorm fwd out" + shape, out16, out32, h());
    expect_bitwise_equal(std::string(h().name) + " layernorm fwd mean (F32)" + shape, mean16, mean32);
    expect_bitwise_equal(std::string(h().name) + " layernorm fwd rstd (F32)" + shape, rstd16, rstd32);
  }
}

TEST_P(MixedPrecisionOps, LayerNormBackwardRoundsDinpParamGradsEqualFp32AndMayAlias) {
  const int N = 6, C = 24;
  const float eps = 1e-5f;
  std::vector<float> x = input(N * C, 44, 0.5f, 3.5f), w = input(C, 45, 0.5f, 1.5f), b = input(C, 46, -0.5f, 0.5f);
  std::vector<float> dout = input(N * C, 47);
  HalfBuffer x16 = half_of(dt(), x), w16 = half_of(dt(), w), dout16 = half_of(dt(), dout);
  // statistics from the fp32 forward (the 16-bit forward gives the same bits, checked above)
  std::vector<float> out(N * C), mean(N), rstd(N);
  backend->layernorm_forward(f32_view(out, {N, C}), f32_view(mean, {N}), f32_view(rstd, {N}), f32_view(x, {N, C}),
                             f32_view(w, {C}), f32_view(b, {C}), eps);
  const std::vector<float> dw0 = random_floats(C, 48), db0 = random_floats(C, 49);

  std::vector<float> dx32 = nan_filled(N * C), dw32 = dw0, db32 = db0, dw16 = dw0, db16 = db0;
  HalfBuffer dx16 = half_nan(dt(), N * C);
  backend->layernorm_backward(f32_view(dx32, {N, C}), f32_view(dw32, {C}), f32_view(db32, {C}),
                              f32_view(dout, {N, C}), f32_view(x, {N, C}), f32_view(w, {C}), f32_view(mean, {N}),
                              f32_view(rstd, {N}), ParamGrads::Add);
  backend->layernorm_backward(dx16.view({N, C}), f32_view(dw16, {C}), f32_view(db16, {C}), dout16.view({N, C}),
                              x16.view({N, C}), w16.view({C}), f32_view(mean, {N}), f32_view(rstd, {N}), ParamGrads::Add);
  expect_stored_rounding("layernorm bwd dinp", dx16, dx32, h());
  expect_bitwise_equal(std::string(h().name) + " layernorm bwd dweight", dw16, dw32);
  expect_bitwise_equal(std::string(h().name) + " layernorm bwd dbias", db16, db32);

  // dinp over dout in 16-bit storage: the same bits
  HalfBuffer alias = dout16;
  std::vector<float> dw16a = dw0, db16a = db0;
  backend->layernorm_backward(alias.view({N, C}), f32_view(dw16a, {C}), f32_view(db16a, {C}), alias.view({N, C}),
                              x16.view({N, C}), w16.view({C}), f32_view(mean, {N}), f32_view(rstd, {N}), ParamGrads::Add);
  EXPECT_EQ(alias.bits, dx16.bits) << h().name << " layernorm bwd dinp aliasing dout";
  expect_bitwise_equal(std::string(h().name) + " layernorm bwd dweight (aliased call)", dw16a, dw32);
  expect_bitwise_equal(std::string(h().name) + " layernorm bwd dbias (aliased call)", db16a, db32);
}

// ============================== activations ==============================

TEST_P(MixedPrecisionOps, ActivationsForwardAndBackwardAreRoundedFp32AndMayAlias) {
  const int n = 2003;
  std::vector<float> x = input(n, 51, -6.0f, 6.0f), dout = input(n, 52);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1e-3f;  // tiny GELU inputs: results near fp16's subnormals
  x = rounded(dt(), x);
  HalfBuffer x16 = half_of(dt(), x), dout16 = half_of(dt(), dout);
  for (Activation act : {Activation::Relu, Activation::Gelu}) {
    const std::string name = act == Activation::Relu ? "relu" : "gelu";
    std::vector<float> y32 = nan_filled(n);
    HalfBuffer y16 = half_nan(dt(), n);
    backend->activation_forward(f32_view(y32, {n}), f32_view(x, {n}), act);
    backend->activation_forward(y16.view({n}), x16.view({n}), act);
    expect_stored_rounding(name + " fwd", y16, y32, h());

    std::vector<float> dx32 = nan_filled(n);
    HalfBuffer dx16 = half_nan(dt(), n);
    backend->activation_backward(f32_view(dx32, {n}), f32_view(dout, {n}), f32_view(x, {n}), act);
    backend->activation_backward(dx16.view({n}), dout16.view({n}), x16.view({n}), act);
    expect_stored_rounding(name + " bwd dinp", dx16, dx32, h());

    HalfBuffer alias = dout16;  // dinp over dout, as the model calls it
    backend->activation_backward(alias.view({n}), alias.view({n}), x16.view({n}), act);
    EXPECT_EQ(alias.bits, dx16.bits) << h().name << " " << name << " bwd dinp aliasing dout";
  }
}

// ============================== dropout ==============================

TEST_P(MixedPrecisionOps, DropoutIsRoundedFp32AndWorksInPlace) {
  const int n = 1003;  // not a multiple of the CPU block or of a Philox group
  const DropoutKey key{0xfeedull, 3, 1, DropoutSite::FfnHidden};
  std::vector<float> x = input(n, 61, -3.0f, 3.0f);
  HalfBuffer x16 = half_of(dt(), x);
  for (float p : {0.0f, 0.1f, 0.25f}) {
    const std::string name = "dropout p " + std::to_string(p).substr(0, 4);
    std::vector<float> y32 = nan_filled(n);
    HalfBuffer y16 = half_nan(dt(), n);
    backend->dropout_forward(f32_view(y32, {n}), f32_view(x, {n}), mask_of(key, p));
    backend->dropout_forward(y16.view({n}), x16.view({n}), mask_of(key, p));
    expect_stored_rounding(name + " fwd", y16, y32, h());
    if (p == 0.0f) {
      EXPECT_EQ(y16.bits, x16.bits) << "p = 0 is the identity";
    }

    HalfBuffer inplace = x16;  // as the model runs it: out over inp
    backend->dropout_forward(inplace.view({n}), inplace.view({n}), mask_of(key, p));
    EXPECT_EQ(inplace.bits, y16.bits) << h().name << " " << name << " fwd in place";

    std::vector<float> dx32 = nan_filled(n);
    HalfBuffer dx16 = half_nan(dt(), n);
    backend->dropout_backward(f32_view(dx32, {n}), f32_view(x, {n}), mask_of(key, p));
    backend->dropout_backward(dx16.view({n}), x16.view({n}), mask_of(key, p));
    expect_stored_rounding(name + " bwd", dx16, dx32, h());
    HalfBuffer dinplace = x16;
    backend->dropout_backward(dinplace.view({n}), dinplace.view({n}), mask_of(key, p));
    EXPECT_EQ(dinplace.bits, dx16.bits) << h().name << " " << name << " bwd in place";
  }
}

// The fused FFN ops with bf16/fp16 storage: the two ops round to the storage type between them,
// and so must the fused op (the CPU runs the two ops there): the same bits either way.
TEST_P(MixedPrecisionOps, ActivationDropoutFusedEqualsTheTwoOps) {
  const int n = 1003;
  const DropoutKey key{0xbeefull, 4, 0, DropoutSite::FfnHidden};
  HalfBuffer x16 = half_of(dt(), input(n, 62, -3.0f, 3.0f)), dout16 = half_of(dt(), input(n, 63, -1.0f, 1.0f));
  for (Activation act : {Activation::Relu, Activation::Gelu}) {
    const std::string name = act == Activation::Relu ? "relu" : "gelu";
    HalfBuffer two_ops = half_nan(dt(), n), fused = half_nan(dt(), n);
    backend->activation_forward(two_ops.view({n}), x16.view({n}), act);
    backend->dropout_forward(two_ops.view({n}), two_ops.view({n}), mask_of(key, 0.1f));
    backend->activation_dropout_forward(fused.view({n}), x16.view({n}), act, mask_of(key, 0.1f));
    EXPECT_EQ(fused.bits, two_ops.bits) << h().name << " " << name << " forward";

    HalfBuffer dtwo_ops = dout16, dfused = dout16;
    backend->dropout_backward(dtwo_ops.view({n}), dtwo_ops.view({n}), mask_of(key, 0.1f));
    backend->activation_backward(dtwo_ops.view({n}), dtwo_ops.view({n}), x16.view({n}), act);
    backend->activation_dropout_backward(dfused.view({n}), dfused.view({n}), x16.view({n}), act, mask_of(key, 0.1f));
    EXPECT_EQ(dfused.bits, dtwo_ops.bits) << h().name << " " << name << " backward";
  }
}

// ============================== residual ==============================

TEST_P(MixedPrecisionOps, ResidualIsRoundedFp32AndMayAlias) {
  const int n = 1003;
  std::vector<float> a = input(n, 71, -10.0f, 10.0f), b = input(n, 72, -1e-2f, 1e-2f);
  HalfBuffer a16 = half_of(dt(), a), b16 = half_of(dt(), b);
  std::vector<float> out32 = nan_filled(n);
  HalfBuffer out16 = half_nan(dt(), n);
  backend->residual_forward(f32_view(out32, {n}), f32_view(a, {n}), f32_view(b, {n}));
  backend->residual_forward(out16.view({n}), a16.view({n}), b16.view({n}));
  // a small branch added to a large stream: most of b rounds away in 16 bits, once
  expect_stored_rounding("residual fwd", out16, out32, h());

  HalfBuffer over_a = a16, over_b = b16;
  backend->residual_forward(over_a.view({n}), over_a.view({n}), b16.view({n}));
  EXPECT_EQ(over_a.bits, out16.bits) << h().name << " residual, out aliasing a";
  backend->residual_forward(over_b.view({n}), a16.view({n}), over_b.view({n}));
  EXPECT_EQ(over_b.bits, out16.bits) << h().name << " residual, out aliasing b";
  HalfBuffer both = a16;  // d = d + d (the engine's residual backward reuses views)
  std::vector<float> twice32 = nan_filled(n);
  backend->residual_forward(f32_view(twice32, {n}), f32_view(a, {n}), f32_view(a, {n}));
  backend->residual_forward(both.view({n}), both.view({n}), both.view({n}));
  expect_stored_rounding("residual fwd, out = a + a in place", both, twice32, h());
}

// ============================== cross-entropy ==============================

TEST_P(MixedPrecisionOps, CrossEntropyLossesEqualFp32AndDlogitsAreRounded) {
  struct Case {
    int N, V;
    float dloss_scale;
  };
  // scale 65536: fp16's default initial loss scale, the gradients of a mean over N tokens
  for (Case k : {Case{7, 19, 1.0f}, Case{16, 257, 1.0f}, Case{16, 257, 65536.0f}, Case{7, 19, 0.37f}}) {
    const int N = k.N, V = k.V;
    char label[64];
    std::snprintf(label, sizeof label, " N%d V%d scale %g", N, V, k.dloss_scale);
    std::vector<float> z = input(N * V, 81, -4.0f, 4.0f);
    std::vector<int32_t> y = random_ints(N, 82, 0, V);
    HalfBuffer z16 = half_of(dt(), z);
    std::vector<float> losses32 = nan_filled(N), losses16 = nan_filled(N), dz32 = nan_filled(N * V);
    HalfBuffer dz16 = half_nan(dt(), N * V);
    backend->cross_entropy_forward_backward(f32_view(losses32, {N}), f32_view(dz32, {N, V}), f32_view(z, {N, V}),
                                            i32_view(y, {N}), scalar_f32(k.dloss_scale), N);
    backend->cross_entropy_forward_backward(f32_view(losses16, {N}), dz16.view({N, V}), z16.view({N, V}),
                                            i32_view(y, {N}), scalar_f32(k.dloss_scale), N);
    expect_bitwise_equal(std::string(h().name) + " cross-entropy losses (F32)" + label, losses16, losses32);
    expect_stored_rounding(std::string("cross-entropy dlogits") + label, dz16, dz32, h());

    // dlogits over logits (the model's call): the same bits
    HalfBuffer alias = z16;
    std::vector<float> losses_alias = nan_filled(N);
    backend->cross_entropy_forward_backward(f32_view(losses_alias, {N}), alias.view({N, V}), alias.view({N, V}),
                                            i32_view(y, {N}), scalar_f32(k.dloss_scale), N);
    EXPECT_EQ(alias.bits, dz16.bits) << h().name << " cross-entropy dlogits aliasing logits" << label;
    expect_bitwise_equal(std::string(h().name) + " cross-entropy losses, aliased call" + label, losses_alias,
                         losses32);
  }
}

// ============================== cast ==============================

TEST_P(MixedPrecisionOps, CastRoundsToNearestEvenAndWidensExactly) {
  // working weights: fp32 masters -> 16 bits; values with ties, overflow and tiny magnitudes
  std::vector<float> x = random_floats(997, 91, -4.0f, 4.0f);
  x[0] = 1.0f + 0x1p-8f;   // bf16 tie: rounds to 1
  x[1] = 1.0f + 0x1p-11f;  // fp16 tie: rounds to 1
  x[2] = 1e5f;             // fp16: past 65504, infinity
  x[3] = 3e-6f;            // fp16: subnormal
  x[4] = -0.0f;
  HalfBuffer y16 = half_nan(dt(), x.size());
  backend->cast(y16.view({997}), f32_view(x, {997}));
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(y16.bits[i], test::half_bits(dt(), x[i])) << h().name << " cast element " << i << " (" << x[i] << ")";
  std::vector<float> back = nan_filled(x.size());
  backend->cast(f32_view(back, {997}), y16.view({997}));
  expect_bitwise_equal(std::string(h().name) + " cast 16 -> F32 widens exactly", back, y16.values());
  HalfBuffer same = half_nan(dt(), x.size());
  backend->cast(same.view({997}), y16.view({997}));
  EXPECT_EQ(same.bits, y16.bits) << h().name << " cast 16 -> 16 is a copy";
}

INSTANTIATE_TEST_SUITE_P(Half, MixedPrecisionOps, ::testing::Values(kBf16, kFp16), half_name);

}  // namespace
}  // namespace tt
