// Tests for NF4 (docs/nf4.md): the format's shared math (kernels/common/nf4.h), the host
// quantiser and its reference decoding (engine/nf4_weight.h), and the CPU backend's
// nf4_dequantize. Elsewhere: bitsandbytes itself, bit for bit (tests/nf4_bitsandbytes.sh); the
// CUDA kernel against the CPU one (the Nf4 cases of tests/test_cuda_ops.cpp).
//
// The round-trip bound. Take a weight w of a block with absmax A and of a group (256 blocks)
// with absmax2 s, and write u = 2^-24 (fp32's unit roundoff). Its decoded value is
// w' = fl(L A'), L the level of its code, A' the decoded absmax; so
//   |w - w'| <= |w - L A| + |L| |A - A'| + |L A' - fl(L A')|.
//  - w = x A with x in [-1, 1]. The code is the level nearest to fl(w fl(1/A)), which is x to
//    within 2u, so |x - L| <= G/2 + 2u, G the largest gap between neighbouring levels (between
//    -1 and -0.696: G/2 = 0.152). First term: (G/2 + 2u) A.
//  - |L| <= 1. A - offset is rounded once, scaled by fl(1/s) (two more roundings: y within 2u
//    of (A - offset) / s), and coded as the dynamic-map value m nearest to y, |y - m| <= D/2,
//    D the largest gap between neighbouring map values (0.9/64, in the top decade; y in
//    [-1, 1] is also within 0.007 of the map's ends). Decoding rounds m s, then the sum with
//    the offset. Second term: (D/2 + 2u) s + u (|A - offset| + |m s| + |A'|).
//  - Third term: u |w'|.
// The test bound is (G/2) A + (D/2) s + 8u (A + s + |offset| + |w'|): every rounding term
// above, widened to whole multiples of the magnitudes in play.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/input_error.h"
#include "engine/nf4_weight.h"
#include "kernels/common/half.h"
#include "kernels/common/nf4.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/nf4_tensor.h"

namespace tt {
namespace {

constexpr double kUnitRoundoff = 5.9604644775390625e-08;  // 2^-24

std::vector<float> dynamic_map() {
  std::vector<float> map(nf4::kDynamicCodes);
  for (int c = 0; c < nf4::kDynamicCodes; ++c) map[c] = nf4::dynamic_map_value(c);
  return map;
}

// The largest gap between neighbouring values of a sorted table.
double largest_gap(const std::vector<float>& sorted) {
  double gap = 0.0;
  for (size_t i = 0; i + 1 < sorted.size(); ++i) gap = std::max(gap, double{sorted[i + 1]} - sorted[i]);
  return gap;
}

std::vector<float> levels() {
  std::vector<float> l(nf4::kLevels);
  for (int c = 0; c < nf4::kLevels; ++c) l[c] = nf4::level(c);
  return l;
}

// n weights drawn from N(0, sd), as a model's linear layers start (seeded: the same every run).
std::vector<float> normal_weights(int64_t n, float sd, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> w(n);
  for (float& x : w) x = normal(gen);
  return w;
}

// What a round trip measured, against the bound of the file comment.
struct RoundTrip {
  double worst_over_bound = 0;  // max |w - w'| / bound: <= 1 when the bound holds
  double max_error = 0;         // max |w - w'|
  double max_error_over_absmax = 0;  // max |w - w'| / A (A of the element's block)
  double rms_error = 0, rms_weight = 0;
};

RoundTrip round_trip(const std::vector<float>& w, const Nf4Weight& q, const std::vector<float>& back) {
  const double half_level_gap = largest_gap(levels()) / 2, half_map_gap = largest_gap(dynamic_map()) / 2;
  RoundTrip r;
  double sum_error2 = 0, sum_weight2 = 0;
  for (int64_t b = 0; b < nf4::absmax_count(q.n); ++b) {
    const int64_t first = b * nf4::kBlockSize, end = std::min(q.n, first + nf4::kBlockSize);
    double absmax = 0;
    for (int64_t i = first; i < end; ++i) absmax = std::max(absmax, std::fabs(double{w[i]}));
    const double s = q.absmax2[b / nf4::kAbsmaxBlockSize];
    for (int64_t i = first; i < end; ++i) {
      const double error = std::fabs(double{w[i]} - back[i]);
      const double bound = half_level_gap * absmax + half_map_gap * s +
                           8 * kUnitRoundoff * (absmax + s + std::fabs(q.offset) + std::fabs(back[i]));
      r.worst_over_bound = std::max(r.worst_over_bound, error / bound);
      r.max_error = std::max(r.max_error, error);
      if (absmax > 0) r.max_error_over_absmax = std::max(r.max_error_over_absmax, error / absmax);
      sum_error2 += error * error;
      sum_weight2 += double{w[i]} * w[i];
    }
  }
  r.rms_error = std::sqrt(sum_error2 / std::max<int64_t>(q.n, 1));
  r.rms_weight = std::sqrt(sum_weight2 / std::max<int64_t>(q.n, 1));
  return r;
}

// ---- the 4-bit code ----

// bitsandbytes' CUDA quantiser hard-codes its decision as a tree of `x > t` tests on 15
// thresholds (csrc/kernels.cu, dQuantizeNF4, the decimals as written there, compiled to fp32 as
// nvcc compiles them): 11 are the fp32 midpoints of the levels, which its CPU path and
// nf4::encode use; the other 4 are exact midpoints halfway between two fp32 values (the sum of
// the two levels needs 25 bits), where the fp32 sum rounds to even and the decimal to the other
// neighbour, one ulp away (nf4.h, encode).
TEST(Nf4Levels, MidpointsAreBitsandbytesThresholdsButFourTies) {
  const float thresholds[nf4::kLevels - 1] = {
      -0.8480964004993439f,  -0.6106329262256622f, -0.4599952697753906f, -0.33967943489551544f,
      -0.23460740596055984f, -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f,
      0.1202552504837513f,   0.2035212516784668f,  0.2920137718319893f,  0.3893125355243683f,
      0.5016634166240692f,   0.6427869200706482f,  0.8614784181118011f};
  for (int k = 0; k + 1 < nf4::kLevels; ++k) {
    const float mid = nf4::level_midpoint(k);
    const double exact = (double{nf4::level(k)} + nf4::level(k + 1)) / 2;  // exact in double
    const bool tie = static_cast<double>(mid) != exact;  // the exact midpoint is no fp32 value
    const bool off_by_one_ulp =
        thresholds[k] == std::nextafter(mid, 2.0f) || thresholds[k] == std::nextafter(mid, -2.0f);
    if (k == 0 || k == 8 || k == 12 || k == 14) {
      EXPECT_TRUE(tie && off_by_one_ulp) << "midpoint " << k;
      EXPECT_EQ(std::fabs(thresholds[k] - exact), std::fabs(mid - exact)) << "both halfway, on either side";
    } else {
      EXPECT_EQ(mid, thresholds[k]) << "midpoint " << k;
    }
  }
}

TEST(Nf4Levels, EncodeTakesTheNearestLevelAndTheLowerOneOnATie) {
  for (int c = 0; c < nf4::kLevels; ++c) EXPECT_EQ(nf4::encode(nf4::level(c)), c);
  for (int k = 0; k + 1 < nf4::kLevels; ++k) {
    const float mid = nf4::level_midpoint(k);
    EXPECT_EQ(nf4::encode(mid), k) << "a tie takes the lower code";
    EXPECT_EQ(nf4::encode(std::nextafter(mid, 2.0f)), k + 1);
    EXPECT_EQ(nf4::encode(std::nextafter(mid, -2.0f)), k);
  }
  // w * (1 / absmax) may land an ulp past +-1: the end codes
  EXPECT_EQ(nf4::encode(std::nextafter(1.0f, 2.0f)), 15);
  EXPECT_EQ(nf4::encode(std::nextafter(-1.0f, -2.0f)), 0);
  EXPECT_EQ(nf4::encode(0.0f), 7);
  EXPECT_EQ(nf4::encode(-0.0f), 7);
}

// ---- the dynamic map of the double quantisation ----

TEST(Nf4DynamicMap, IsSortedSignedAndEndsAtOne) {
  const std::vector<float> map = dynamic_map();
  for (int c = 0; c + 1 < nf4::kDynamicCodes; ++c) EXPECT_LT(map[c], map[c + 1]) << "code " << c;
  EXPECT_EQ(map[127], 0.0f);
  EXPECT_EQ(map[255], 1.0f);
  for (int k = 0; k < 127; ++k) EXPECT_EQ(map[126 - k], -map[128 + k]) << "the negatives mirror the positives";
  // the smallest magnitude is decade 0's one mean, 1e-6 * (0.1 + 1) / 2; the largest below 1 is
  // decade 6's last, (1 - 0.9/64 + 1) / 2
  EXPECT_NEAR(map[128], 0.55e-6, 1e-12);
  EXPECT_NEAR(map[254], 1.0 - 0.9 / 128, 1e-7);
  EXPECT_NEAR(largest_gap(map), 0.9 / 64, 1e-7);
}

TEST(Nf4DynamicMap, EncodeTakesTheNearestValueAndTheEvenCodeOnATie) {
  const std::vector<float> map = dynamic_map();
  for (int c = 0; c < nf4::kDynamicCodes; ++c) EXPECT_EQ(nf4::dynamic_encode(map[c], map.data()), c);
  for (int c = 0; c + 1 < nf4::kDynamicCodes; ++c) {
    const float mid = (map[c] + map[c + 1]) * 0.5f;
    EXPECT_EQ(nf4::dynamic_encode(mid, map.data()), c % 2 == 0 ? c : c + 1) << "midpoint " << c;
    EXPECT_EQ(nf4::dynamic_encode(std::nextafter(mid, 2.0f), map.data()), c + 1);
    EXPECT_EQ(nf4::dynamic_encode(std::nextafter(mid, -2.0f), map.data()), c);
  }
  EXPECT_EQ(nf4::dynamic_encode(-1.0f, map.data()), 0);
  EXPECT_EQ(nf4::dynamic_encode(std::nextafter(1.0f, 2.0f), map.data()), 255);
}

// bitsandbytes' CUDA search for the nearest dynamic-map value (csrc/kernels.cu, dQuantize<0>),
// as it works: bisect from code 127 in steps of 64, 32, ..., 1, moving up while x > map[p] and
// remembering the last codes passed below and above; then compare x with the fp32 midpoints on
// either side of map[p], strictly. p always ends even (127 plus or minus seven powers of two).
int cuda_dynamic_search(float x, const std::vector<float>& map) {
  int p = 127, below = 0, above = 255;
  for (int step = 64; step > 0; step /= 2) {
    if (x > map[p]) {
      below = p;
      p += step;
    } else {
      above = p;
      p -= step;
    }
  }
  if (x > map[p]) return x > (map[above] + map[p]) * 0.5f ? above : p;
  return x < (map[below] + map[p]) * 0.5f ? below : p;
}

TEST(Nf4DynamicMap, EncodeIsBitsandbytesCudaSearch) {
  const std::vector<float> map = dynamic_map();
  std::vector<float> xs(map);
  for (int c = 0; c + 1 < nf4::kDynamicCodes; ++c) {
    const float mid = (map[c] + map[c + 1]) * 0.5f;
    for (float x : {mid, std::nextafter(mid, 2.0f), std::nextafter(mid, -2.0f)}) xs.push_back(x);
  }
  std::mt19937 gen(8);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = uniform(gen);
    xs.push_back(x);
    xs.push_back(x * 1e-4f);  // the small decades
  }
  for (float x : xs) ASSERT_EQ(nf4::dynamic_encode(x, map.data()), cuda_dynamic_search(x, map)) << "x " << x;
}

// ---- the host quantiser ----

TEST(Nf4Quantize, ImageHasBitsandbytesSizes) {
  for (int64_t n : {int64_t{2}, int64_t{64}, int64_t{100}, int64_t{16384}, int64_t{16384 * 3 + 64 * 5 + 2}}) {
    const std::vector<float> w = normal_weights(n, 0.02f, 1);
    const Nf4Weight q = quantize_nf4(w.data(), n);
    EXPECT_EQ(q.n, n);
    EXPECT_EQ(static_cast<int64_t>(q.codes.size()), n / 2);
    EXPECT_EQ(static_cast<int64_t>(q.absmax_codes.size()), (n + 63) / 64);
    EXPECT_EQ(static_cast<int64_t>(q.absmax2.size()), ((n + 63) / 64 + 255) / 256);
  }
  // 4 + 8/64 + 32/16384 = 4.127 bits a weight, and the offset's 32 bits for the whole weight
  const int64_t n = int64_t{16384} * 64;
  const std::vector<float> w = normal_weights(n, 0.02f, 2);
  const Nf4Weight q = quantize_nf4(w.data(), n);
  const double bits = 8.0 * (q.codes.size() + q.absmax_codes.size() + 4 * q.absmax2.size() + 4);
  EXPECT_NEAR(bits / n, 4.0 + 8.0 / 64 + 32.0 / 16384 + 32.0 / n, 1e-12);
}

TEST(Nf4Quantize, PacksEvenElementsInTheHighNibble) {
  std::vector<float> w(64, 0.0f);
  w[0] = 1.0f;   // code 15
  w[1] = -1.0f;  // code 0
  w[2] = 0.0f;   // code 7
  w[3] = 0.6f;   // nearest level 0.5626: code 13
  const Nf4Weight q = quantize_nf4(w.data(), 64);
  EXPECT_EQ(q.codes[0], 0xF0);
  EXPECT_EQ(q.codes[1], 0x7D);
}

TEST(Nf4Quantize, RoundTripIsWithinTheBound) {
  for (int64_t n : {int64_t{2}, int64_t{64}, int64_t{100}, int64_t{16384}, int64_t{16384 * 3 + 64 * 5 + 2},
                    int64_t{4096} * 256}) {
    const std::vector<float> w = normal_weights(n, 0.02f, 3);
    const Nf4Weight q = quantize_nf4(w.data(), n);
    const RoundTrip r = round_trip(w, q, dequantize_nf4(q));
    EXPECT_LE(r.worst_over_bound, 1.0) << "n " << n;
    if (n == int64_t{4096} * 256)  // the numbers docs/nf4.md quotes
      std::printf("[ measured ] N(0, 0.02), n %lld: max |w - w'| %.3g = %.4f of the block's absmax (bound %.3f + "
                  "double quantisation), rms error %.3g = %.4f of the rms weight, worst error / bound %.3f\n",
                  static_cast<long long>(n), r.max_error, r.max_error_over_absmax, largest_gap(levels()) / 2,
                  r.rms_error, r.rms_error / r.rms_weight, r.worst_over_bound);
  }
}

// All-zero weights: every code the level 0.0 (7), every absmax 0 = the offset, every group's
// absmax2 0 with absmax code 0 (bitsandbytes' answer, nf4_weight.cpp); decoded as +0 exactly.
TEST(Nf4Quantize, ZeroWeightsComeBackAsPositiveZeros) {
  const int64_t n = 16384 * 2 + 64;
  const std::vector<float> w(n, 0.0f);
  const Nf4Weight q = quantize_nf4(w.data(), n);
  for (uint8_t byte : q.codes) ASSERT_EQ(byte, 0x77);
  for (uint8_t code : q.absmax_codes) ASSERT_EQ(code, 0);
  for (float s : q.absmax2) ASSERT_EQ(s, 0.0f);
  EXPECT_EQ(q.offset, 0.0f);
  for (float x : dequantize_nf4(q)) {
    ASSERT_EQ(x, 0.0f);
    ASSERT_FALSE(std::signbit(x));
  }
}

TEST(Nf4Quantize, ABlockOfZerosStaysZero) {
  const int64_t n = 64 * 40;
  std::vector<float> w = normal_weights(n, 0.02f, 4);
  std::fill_n(w.begin() + 64 * 3, 64, 0.0f);
  const Nf4Weight q = quantize_nf4(w.data(), n);
  const std::vector<float> back = dequantize_nf4(q);
  for (int64_t i = 64 * 3; i < 64 * 4; ++i) {
    EXPECT_EQ(q.codes[i / 2], 0x77);
    EXPECT_EQ(back[i], 0.0f) << "element " << i;  // 0 * absmax', whatever absmax' decoded to
  }
  EXPECT_LE(round_trip(w, q, back).worst_over_bound, 1.0);
}

// One weight 5000 standard deviations out: its block's other weights all take the level 0 (they
// are under 0.04 of its absmax), and it sets absmax2 for its group of 256 blocks, where the
// other blocks' absmax then decode with an error up to D/2 of that absmax2. The bound still
// holds; the numbers are docs/nf4.md's.
TEST(Nf4Quantize, OneHugeWeightSpoilsItsGroupWithinTheBound) {
  const int64_t n = 16384 * 2;  // two groups
  std::vector<float> w = normal_weights(n, 0.02f, 5);
  const int64_t huge = 1000;  // in block 15 of group 0
  w[huge] = 100.0f;
  const Nf4Weight q = quantize_nf4(w.data(), n);
  const std::vector<float> back = dequantize_nf4(q);
  const RoundTrip all = round_trip(w, q, back);
  EXPECT_LE(all.worst_over_bound, 1.0);
  const int64_t block = huge / 64;
  for (int64_t i = block * 64; i < block * 64 + 64; ++i)
    if (i != huge) EXPECT_EQ(back[i], 0.0f) << "element " << i;
  // each group's error, over the weights' rms
  const std::vector<float> w0(w.begin(), w.begin() + 16384), w1(w.begin() + 16384, w.end());
  double max0 = 0, max1 = 0;
  for (int64_t i = 0; i < 16384; ++i)
    if (i / 64 != block) max0 = std::max(max0, std::fabs(double{w0[i]} - back[i]));
  for (int64_t i = 0; i < 16384; ++i) max1 = std::max(max1, std::fabs(double{w1[i]} - back[16384 + i]));
  std::printf("[ measured ] one weight of 100 among N(0, 0.02): offset %.4f; max |w - w'| outside its block: %.4f in "
              "its group (absmax2 %.2f), %.4f in the other (absmax2 %.4f)\n",
              q.offset, max0, q.absmax2[0], max1, q.absmax2[1]);
}

TEST(Nf4Quantize, BadInputIsOneLine) {
  auto message = [](const std::vector<float>& w, int64_t n) {
    try {
      quantize_nf4(w.data(), n);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::vector<float> w(64, 0.5f);
  const std::string odd = message(w, 63);
  EXPECT_NE(odd.find("63 weights"), std::string::npos) << odd;
  EXPECT_NE(odd.find("even"), std::string::npos) << odd;
  EXPECT_NE(message(w, -2).find("-2 weights"), std::string::npos);
  w[5] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan = message(w, 64);
  EXPECT_NE(nan.find("weight 5 is NaN"), std::string::npos) << nan;
  w[5] = 0.5f;
  w[17] = -std::numeric_limits<float>::infinity();
  const std::string inf = message(w, 64);
  EXPECT_NE(inf.find("weight 17 is inf"), std::string::npos) << inf;
  for (const std::string& m : {odd, nan, inf}) EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// ---- the CPU backend's op ----

// An NF4 image in a backend's memory, and an output to decode it into.
class DeviceNf4 {
 public:
  DeviceNf4(Backend& backend, const Nf4Weight& q, DType out_dtype) : backend_(backend) {
    w_.codes = upload(DType::U8, q.codes.data(), static_cast<int64_t>(q.codes.size()));
    w_.absmax_codes = upload(DType::U8, q.absmax_codes.data(), static_cast<int64_t>(q.absmax_codes.size()));
    w_.absmax2 = upload(DType::F32, q.absmax2.data(), static_cast<int64_t>(q.absmax2.size()));
    w_.offset = upload(DType::F32, &q.offset, 1);
    out_ = upload(out_dtype, nullptr, q.n);
  }
  ~DeviceNf4() {
    for (void* p : allocations_) backend_.release(p);
  }
  const Nf4Tensor& w() const { return w_; }
  const Tensor& out() const { return out_; }
  std::vector<uint8_t> read_out() const {
    std::vector<uint8_t> bytes(out_.bytes());
    backend_.copy_to_host(bytes.data(), out_.data, bytes.size());
    return bytes;
  }

 private:
  Tensor upload(DType dtype, const void* host, int64_t n) {
    Tensor t{nullptr, dtype, Shape{n}};
    t.data = backend_.allocate(std::max<size_t>(t.bytes(), 1));
    allocations_.push_back(t.data);
    if (host && n > 0) backend_.copy_to_device(t.data, host, t.bytes());
    return t;
  }
  Backend& backend_;
  std::vector<void*> allocations_;
  Nf4Tensor w_;
  Tensor out_;
};

TEST(Nf4Backend, CpuMatchesTheHostReferenceBitForBit) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const int64_t n = 16384 * 2 + 64 * 7 + 30;
  const std::vector<float> w = normal_weights(n, 0.02f, 6);
  const Nf4Weight q = quantize_nf4(w.data(), n);
  const std::vector<float> want = dequantize_nf4(q);
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    DeviceNf4 d(*cpu, q, dtype);
    cpu->nf4_dequantize(d.out(), d.w());
    const std::vector<uint8_t> got = d.read_out();
    for (int64_t i = 0; i < n; ++i) {
      uint32_t want_bits = 0, got_bits = 0;
      if (dtype == DType::F32) {
        std::memcpy(&want_bits, &want[i], 4);
        std::memcpy(&got_bits, got.data() + 4 * i, 4);
      } else {
        want_bits = dtype == DType::BF16 ? float_to_bf16(want[i]).bits : float_to_f16(want[i]).bits;
        uint16_t bits16;
        std::memcpy(&bits16, got.data() + 2 * i, 2);
        got_bits = bits16;
      }
      ASSERT_EQ(got_bits, want_bits) << dtype_name(dtype) << " element " << i;
    }
  }
}

TEST(Nf4Backend, ViewsThatDoNotFitAreRefused) {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  const std::vector<float> w = normal_weights(128, 0.02f, 7);
  const Nf4Weight q = quantize_nf4(w.data(), 128);
  DeviceNf4 d(*cpu, q, DType::F32);
  Tensor short_out = d.out();
  short_out.shape = Shape{126};
  EXPECT_THROW(cpu->nf4_dequantize(short_out, d.w()), std::invalid_argument);
  Nf4Tensor wrong = d.w();
  wrong.absmax_codes.dtype = DType::I32;
  EXPECT_THROW(cpu->nf4_dequantize(d.out(), wrong), std::invalid_argument);
  wrong = d.w();
  wrong.absmax2.shape = Shape{2};
  EXPECT_THROW(cpu->nf4_dequantize(d.out(), wrong), std::invalid_argument);
  Tensor int_out = d.out();
  int_out.dtype = DType::I32;
  EXPECT_THROW(cpu->nf4_dequantize(int_out, d.w()), std::invalid_argument);
}

}  // namespace
}  // namespace tt
