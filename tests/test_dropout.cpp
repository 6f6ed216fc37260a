// Dropout: the Philox4x32-10 generator against Random123's known-answer vectors, the
// uniforms and masks built on it (kernels/common/philox.h), and the CPU backend's
// dropout_forward / dropout_backward: drop rate, scale, determinism per (seed, step,
// layer, site), independence across keys, identity at p = 0, aliasing.
//
// Statistical checks use 5 sigma of a binomial count: with fixed seeds they are
// deterministic, and a correct generator lands outside them with probability ~6e-7.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/common/philox.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/dropout_mask.h"
#include "tests/op_test_util.h"

namespace tt {
namespace {

using test::central_diff;
using test::expect_bitwise_equal;
using test::expect_rel_close;
using test::f32_view;
using test::kEps32;
using test::mask_of;
using test::random_floats;
using test::to_double;

// ---- Philox4x32-10 known answers (Random123 tests/kat_vectors, "philox4x32 10") ----

void expect_philox(Philox4 ctr, uint32_t key0, uint32_t key1, Philox4 want) {
  const Philox4 got = philox4x32_10(ctr, key0, key1);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(got.v[i], want.v[i]) << "word " << i << std::hex << ": got 0x" << got.v[i] << " want 0x" << want.v[i];
}

TEST(Philox, KnownAnswerZeros) {
  expect_philox(Philox4{{0, 0, 0, 0}}, 0, 0, Philox4{{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}});
}

TEST(Philox, KnownAnswerAllOnes) {
  expect_philox(Philox4{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
                Philox4{{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}});
}

TEST(Philox, KnownAnswerPi) {
  expect_philox(Philox4{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
                Philox4{{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}});
}

// ---- uniforms ----

// |count - n q| < 5 sigma for a Binomial(n, q) count
void expect_binomial(const std::string& what, int64_t count, int64_t n, double q) {
  const double rate = static_cast<double>(count) / n, sigma = std::sqrt(q * (1.0 - q) / n);
  std::printf("[ rate     ] %-52s %.5f  (want %.5f +- %.5f)\n", what.c_str(), rate, q, 5 * sigma);
  EXPECT_LT(std::fabs(rate - q), 5.0 * sigma) << what << ": rate " << rate << ", expected " << q;
}

TEST(DropoutUniform, InUnitIntervalWith24BitsAndMeanOneHalf) {
  const DropoutKey key{42, 3, 1, DropoutSite::FfnHidden};
  const int64_t n = 1 << 20;
  double sum = 0.0;
  int64_t below_half = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float u = dropout_uniform(key, static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0f) << i;
    ASSERT_LT(u, 1.0f) << i;
    const float scaled = u * 16777216.0f;  // a multiple of 2^-24: an integer after scaling
    ASSERT_EQ(scaled, std::floor(scaled)) << i;
    sum += u;
    below_half += u < 0.5f;
  }
  // mean of n U[0,1): sigma = sqrt(1/12 / n)
  EXPECT_LT(std::fabs(sum / n - 0.5), 5.0 * std::sqrt(1.0 / 12.0 / n));
  expect_binomial("uniform < 0.5", below_half, n, 0.5);
  // the largest word still maps below 1 (only its top 24 bits count), the smallest to 0
  EXPECT_LT(uniform_from_bits(0xffffffffu), 1.0f);
  EXPECT_EQ(uniform_from_bits(0xffu), 0.0f);
}

TEST(DropoutUniform, HighIndexBitsAndSeedBitsMatter) {
  // index >> 34 and seed >> 32 feed the counter and key: the upper halves must change the stream
  const DropoutKey key{7, 0, 0, DropoutSite::AttentionWeights};
  DropoutKey high_seed = key;
  high_seed.seed |= uint64_t{1} << 40;
  int same_index = 0, same_seed = 0;
  for (uint64_t i = 0; i < 64; ++i) {
    same_index += dropout_uniform(key, i) == dropout_uniform(key, i + (uint64_t{1} << 36));
    same_seed += dropout_uniform(key, i) == dropout_uniform(high_seed, i);
  }
  EXPECT_LE(same_index, 1);  // a 24-bit collision is possible, not a pattern of them
  EXPECT_LE(same_seed, 1);
}

// ---- the CPU's batched mask (kernels/cpu/dropout_mask.h) against the definition ----

// dropout_scales (one Philox call per 4 elements, many calls at once in AVX2 or AVX-512F
// registers) gives exactly dropout_scale of every element, on each vector width this CPU has:
// for ranges starting inside a group, shorter than a vector call, ending mid-call, and around
// 2^32 groups, where the counter's low word carries into its high word.
TEST(DropoutScales, EqualsThePerElementDefinitionOnEveryRange) {
  const DropoutKey key{0x9e3779b97f4a7c15ull, 7, 2, DropoutSite::AttentionWeights};
  for (CpuSimd simd : test::simd_widths()) {
    for (float p : {0.1f, 0.5f}) {
      for (uint64_t start : {uint64_t{0}, uint64_t{1}, uint64_t{3}, uint64_t{37}, (uint64_t{1} << 34) - 70,
                             (uint64_t{1} << 34) - 2}) {
        for (int64_t count : {0, 1, 3, 31, 32, 33, 47, 48, 49, 63, 64, 65, 70, 127, 128, 129, 176, 1000}) {
          std::vector<float> batched(count);
          dropout_scales(key, start, count, p, batched.data(), simd);
          for (int64_t i = 0; i < count; ++i)
            ASSERT_EQ(batched[i], dropout_scale(key, start + i, p))
                << "simd " << static_cast<int>(simd) << ", p " << p << ", start " << start << ", element " << i;
        }
      }
    }
  }
}

// ---- the CPU backend's dropout ----

class CpuDropout : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> backend = make_cpu_backend();
  const DropoutKey key{0x9e3779b97f4a7c15ull, 11, 3, DropoutSite::FfnHidden};

  // the mask scale of every element: dropout applied to ones
  std::vector<float> mask(int64_t n, float p, const DropoutKey& k) {
    std::vector<float> ones(n, 1.0f), out(n);
    backend->dropout_forward(f32_view(out, {n}), f32_view(ones, {n}), mask_of(k, p));
    return out;
  }
};

TEST_F(CpuDropout, DropRateWithinBinomialBoundsPerLane) {
  const int64_t n = 1000000;
  for (float p : {0.1f, 0.5f}) {
    std::vector<float> m = mask(n, p, key);
    int64_t dropped = 0, lane_dropped[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n; ++i)
      if (m[i] == 0.0f) ++dropped, ++lane_dropped[i & 3];
    expect_binomial("drop rate p=" + std::to_string(p), dropped, n, p);
    // the four lanes of one Philox call each drop at rate p
    for (int lane = 0; lane < 4; ++lane)
      expect_binomial("drop rate p=" + std::to_string(p) + " lane " + std::to_string(lane), lane_dropped[lane], n / 4,
                      p);
  }
}

TEST_F(CpuDropout, KeptValuesAreScaledByInverseKeepProbability) {
  const int64_t n = 100000;
  std::vector<float> x = random_floats(n, 81, -3.0f, 3.0f);
  for (float p : {0.1f, 0.25f, 0.5f, 0.9f}) {
    std::vector<float> y(n);
    backend->dropout_forward(f32_view(y, {n}), f32_view(x, {n}), mask_of(key, p));
    const float scale = 1.0f / (1.0f - p);  // the contract's factor, in fp32
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (y[i] == 0.0f) continue;
      ++kept;
      ASSERT_EQ(y[i], x[i] * scale) << "p " << p << " i " << i;
      // and x / (1 - p) up to the roundings of 1 - p, 1 / (1 - p) and the product
      ASSERT_NEAR(y[i], x[i] / (1.0 - static_cast<double>(p)), 2.0 * kEps32 * std::fabs(y[i])) << "p " << p;
    }
    EXPECT_GT(kept, 0);
  }
}

TEST_F(CpuDropout, SameKeySameMaskForwardTwiceBackwardAndInPlace) {
  const int64_t n = 50000;
  const float p = 0.3f;
  std::vector<float> x = random_floats(n, 82), y1(n), y2(n);
  backend->dropout_forward(f32_view(y1, {n}), f32_view(x, {n}), mask_of(key, p));
  backend->dropout_forward(f32_view(y2, {n}), f32_view(x, {n}), mask_of(key, p));
  expect_bitwise_equal("dropout forward twice", y2, y1);

  // backward with the same key: dinp = dout * the forward's mask scale
  std::vector<float> m = mask(n, p, key), dout = random_floats(n, 83), dinp(n), want(n);
  backend->dropout_backward(f32_view(dinp, {n}), f32_view(dout, {n}), mask_of(key, p));
  for (int64_t i = 0; i < n; ++i) want[i] = dout[i] * m[i];
  expect_bitwise_equal("dropout backward vs forward mask", dinp, want);
  // the mask applied to x is that same mask
  for (int64_t i = 0; i < n; ++i) want[i] = x[i] * m[i];
  expect_bitwise_equal("dropout forward vs mask of ones", y1, want);
  // in place (out over inp), forward and backward: the same bits
  std::vector<float> fwd = x, bwd = dout;
  backend->dropout_forward(f32_view(fwd, {n}), f32_view(fwd, {n}), mask_of(key, p));
  backend->dropout_backward(f32_view(bwd, {n}), f32_view(bwd, {n}), mask_of(key, p));
  expect_bitwise_equal("dropout forward in place", fwd, y1);
  expect_bitwise_equal("dropout backward in place", bwd, dinp);
}

TEST_F(CpuDropout, ChangingAnyKeyFieldGivesAnIndependentMask) {
  const int64_t n = 1000000;
  for (float p : {0.1f, 0.5f}) {
    const std::vector<float> base = mask(n, p, key);
    std::vector<std::pair<std::string, DropoutKey>> variants;
    DropoutKey k = key;
    k.seed += 1, variants.push_back({"seed+1", k});
    k = key, k.seed ^= uint64_t{1} << 32, variants.push_back({"seed high word", k});
    k = key, k.step += 1, variants.push_back({"step+1", k});
    k = key, k.layer += 1, variants.push_back({"layer+1", k});
    k = key, k.site = DropoutSite::FfnOutput, variants.push_back({"site", k});
    // layer and site share one counter word (layer << 8 | site): moving both must not collide
    k = key, k.layer = 4, k.site = DropoutSite::AttentionWeights, variants.push_back({"layer 4 site 0", k});
    for (const auto& [what, other] : variants) {
      const std::vector<float> m = mask(n, p, other);
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) differ += (m[i] == 0.0f) != (base[i] == 0.0f);
      // two independent masks disagree where exactly one drops: probability 2p(1-p)
      expect_binomial("masks differ, " + what + ", p=" + std::to_string(p), differ, n, 2.0 * p * (1.0 - p));
    }
  }
}

TEST_F(CpuDropout, BackwardMatchesFiniteDifferencesAndMayAlias) {
  // L = sum(dropout(x) * R) with the mask fixed by the key; the double forward keeps an
  // element by the shared mask and scales it by 1/(1-p) in double.
  const int64_t n = 1000;
  for (float p : {0.1f, 0.3f, 0.5f}) {
    std::vector<float> x = random_floats(n, 86), R = random_floats(n, 87);
    const std::vector<double> R_d = to_double(R);
    auto loss = [&](const std::vector<double>& v) {
      double L = 0.0;
      for (int64_t i = 0; i < n; ++i)
        if (dropout_scale(key, static_cast<uint64_t>(i), p) != 0.0f) L += v[i] / (1.0 - p) * R_d[i];
      return L;
    };
    const std::vector<double> dx_fd = central_diff(loss, to_double(x));
    std::vector<float> dx(n, -1.0f);
    backend->dropout_backward(f32_view(dx, {n}), f32_view(R, {n}), mask_of(key, p));
    // elementwise: the fp32 scale 1/(1-p) and the product round once each
    expect_rel_close("dropout bwd dinp vs FD, p=" + std::to_string(p), dx, dx_fd, 2.0 * kEps32);
    std::vector<float> alias = R;
    backend->dropout_backward(f32_view(alias, {n}), f32_view(alias, {n}), mask_of(key, p));
    expect_bitwise_equal("dropout bwd dinp aliasing dout, p=" + std::to_string(p), alias, dx);
  }
}

TEST_F(CpuDropout, ZeroRateIsTheIdentity) {
  const int64_t n = 10007;
  std::vector<float> x = random_floats(n, 84), y(n, -1.0f);
  backend->dropout_forward(f32_view(y, {n}), f32_view(x, {n}), mask_of(key, 0.0f));
  expect_bitwise_equal("dropout p=0 forward", y, x);
  std::vector<float> dinp(n, -1.0f);
  backend->dropout_backward(f32_view(dinp, {n}), f32_view(x, {n}), mask_of(key, 0.0f));
  expect_bitwise_equal("dropout p=0 backward", dinp, x);
  std::vector<float> in_place = x;
  backend->dropout_forward(f32_view(in_place, {n}), f32_view(in_place, {n}), mask_of(key, 0.0f));
  expect_bitwise_equal("dropout p=0 in place", in_place, x);
}

}  // namespace
}  // namespace tt
