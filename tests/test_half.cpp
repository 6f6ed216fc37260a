// Tests for kernels/common/half.h: the bf16 and fp16 storage types and their conversions.
//
// Every check compares half.h against a reference written here from the formats' definitions,
// not from half.h's bit tricks: values are decoded as (-1)^s * 2^(e-bias) * (1 + m/2^M) (or the
// subnormal / inf / NaN cases), and fp32 -> 16-bit rounding is done in double arithmetic (exact
// for every fp32 input): find the spacing of representable values around |x|, take the two
// multiples of it that bracket |x|, pick the nearer one (ties to the even multiple, which is the
// even mantissa), overflow to infinity past the largest finite value, then encode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/common/half.h"

namespace {

// ---- the formats, from their definitions ----

struct Format {
  const char* name;
  int mant_bits;  // M: stored mantissa bits (fp16 10, bf16 7)
  int exp_bits;   // E: exponent bits (fp16 5, bf16 8)
  uint16_t (*convert)(float);  // half.h's fp32 -> 16-bit conversion, under test
  float (*to_float)(uint16_t);  // half.h's 16-bit -> fp32 conversion, under test

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int emin() const { return 1 - bias(); }                       // smallest normal exponent
  int emax() const { return (1 << exp_bits) - 2 - bias(); }     // largest finite exponent
  int exp_all_ones() const { return (1 << exp_bits) - 1; }      // exponent field of inf / NaN
  uint16_t inf_bits() const { return static_cast<uint16_t>(exp_all_ones() << mant_bits); }
  uint16_t quiet_bit() const { return static_cast<uint16_t>(1u << (mant_bits - 1)); }
  uint16_t mant_mask() const { return static_cast<uint16_t>((1u << mant_bits) - 1); }
  uint16_t max_finite_bits() const { return static_cast<uint16_t>(inf_bits() - 1); }
  double max_finite() const { return std::ldexp(2.0 - std::ldexp(1.0, -mant_bits), emax()); }
};

const Format kF16{"fp16", 10, 5, [](float x) { return tt::float_to_f16(x).bits; },
                  [](uint16_t h) { return tt::to_float(tt::f16{h}); }};
const Format kBF16{"bf16", 7, 8, [](float x) { return tt::float_to_bf16(x).bits; },
                   [](uint16_t h) { return tt::to_float(tt::bf16{h}); }};

uint32_t Bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}
float FromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}
std::string Hex(uint32_t u, int digits) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(digits) << std::setfill('0') << u;
  return out.str();
}
// half.h's conversions as hex strings, so failed expectations print readable bit patterns.
std::string F16Bits(float x) { return Hex(tt::float_to_f16(x).bits, 4); }
std::string BF16Bits(float x) { return Hex(tt::float_to_bf16(x).bits, 4); }

// The value a 16-bit pattern stands for, from the format definition (NaN: a NaN of its sign).
double Decode(const Format& f, uint16_t bits) {
  const int s = bits >> 15, e = (bits >> f.mant_bits) & f.exp_all_ones(), m = bits & f.mant_mask();
  const double sign = s ? -1.0 : 1.0;
  if (e == f.exp_all_ones())
    return m == 0 ? sign * std::numeric_limits<double>::infinity() : std::copysign(std::nan(""), sign);
  if (e == 0) return sign * std::ldexp(m, f.emin() - f.mant_bits);  // subnormal: m x 2^(emin-M)
  return sign * std::ldexp(1.0 + std::ldexp(m, -f.mant_bits), e - f.bias());
}

// The pattern of a representable magnitude v (or infinity) with the given sign.
uint16_t Encode(const Format& f, bool negative, double v) {
  const uint16_t sign = negative ? 0x8000 : 0;
  if (std::isinf(v)) return sign | f.inf_bits();
  if (v == 0) return sign;
  int e;
  std::frexp(v, &e);
  const int exponent = e - 1;  // v in [2^exponent, 2^(exponent+1))
  if (exponent < f.emin())     // subnormal: v = m x 2^(emin-M)
    return sign | static_cast<uint16_t>(std::ldexp(v, f.mant_bits - f.emin()));
  const double m = std::ldexp(v, f.mant_bits - exponent) - std::ldexp(1.0, f.mant_bits);
  return sign | static_cast<uint16_t>((exponent + f.bias()) << f.mant_bits) | static_cast<uint16_t>(m);
}

// Reference rounding of a non-NaN fp32 value to the format: nearest, ties to even, overflow
// to infinity. Works on values in double, where every step below is exact.
uint16_t ReferenceRound(const Format& f, float x) {
  const bool negative = std::signbit(x);
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a) || a == 0) return Encode(f, negative, a);
  int e;
  std::frexp(a, &e);
  // Representable values near a are spaced 2^(exponent - M); subnormals share the spacing of
  // the smallest normal binade. No upper exponent limit here: overflow is decided after rounding.
  const int quantum = std::max(e - 1, f.emin()) - f.mant_bits;
  const double n = std::ldexp(a, -quantum);  // a in units of the spacing
  double k = std::floor(n);                  // the lower neighbour is k units, the upper k + 1
  const double rest = n - k;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(k, 2.0) != 0)) k += 1;  // k's parity is the mantissa's
  const double rounded = std::ldexp(k, quantum);
  return Encode(f, negative, rounded > f.max_finite() ? std::numeric_limits<double>::infinity() : rounded);
}

bool IsNaNPattern(const Format& f, uint16_t h) {
  return ((h >> f.mant_bits) & f.exp_all_ones()) == f.exp_all_ones() && (h & f.mant_mask()) != 0;
}

// Checks half.h's conversion of x: the reference rounding for numbers, a quiet NaN of x's sign
// for NaNs. Returns false (and reports the first few mismatches) on disagreement.
bool CheckConversion(const Format& f, float x, int* reported) {
  const uint16_t got = f.convert(x);
  const bool nan = std::isnan(x);
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const uint16_t expected = nan ? 0 : ReferenceRound(f, x);
  const bool ok = nan ? IsNaNPattern(f, got) && (got & 0x8000) == sign && (got & f.quiet_bit()) != 0
                      : got == expected;
  if (!ok && (*reported)++ < 10)
    ADD_FAILURE() << f.name << ": input " << Hex(Bits(x), 8) << " (" << std::setprecision(9) << x
                  << ") converts to " << Hex(got, 4) << ", reference "
                  << (nan ? std::string("a quiet NaN with sign ") + (sign ? "-" : "+") : Hex(expected, 4));
  return ok;
}

// Converts `count` floats drawn by `draw` and expects all of them to match the reference.
template <typename Draw>
void ExpectRandomMatch(const Format& f, uint64_t seed, int count, Draw draw) {
  std::mt19937_64 rng(seed);
  int mismatches = 0, reported = 0;
  for (int i = 0; i < count; ++i) mismatches += !CheckConversion(f, draw(rng), &reported);
  EXPECT_EQ(mismatches, 0) << f.name << ", seed " << seed;
}

// A float with a random sign and magnitude bits uniform in [lo, hi].
float RandomInRange(std::mt19937_64& rng, uint32_t lo, uint32_t hi) {
  const uint64_t r = rng();
  const uint32_t magnitude = lo + static_cast<uint32_t>((r >> 1) % (uint64_t{hi} - lo + 1));
  return FromBits(magnitude | (static_cast<uint32_t>(r & 1) << 31));
}

// ---- the reference itself ----

// The reference's encoder must invert its decoder on every non-NaN pattern, and its rounding
// must leave representable values alone; otherwise the tests below would check nothing.
TEST(HalfReference, EncodeInvertsDecodeAndRoundingFixesRepresentableValues) {
  for (const Format* f : {&kF16, &kBF16}) {
    for (uint32_t h = 0; h <= 0xffff; ++h) {
      if (IsNaNPattern(*f, static_cast<uint16_t>(h))) continue;
      const double v = Decode(*f, static_cast<uint16_t>(h));
      ASSERT_EQ(Encode(*f, std::signbit(v), std::fabs(v)), h) << f->name << " " << Hex(h, 4);
      ASSERT_EQ(ReferenceRound(*f, static_cast<float>(v)), h) << f->name << " " << Hex(h, 4);
    }
  }
  EXPECT_EQ(kF16.max_finite(), 65504.0);
  EXPECT_EQ(Decode(kF16, 0x0001), std::ldexp(1.0, -24));   // fp16 subnormal spacing
  EXPECT_EQ(Decode(kBF16, 0x0001), std::ldexp(1.0, -133)); // bf16 subnormal spacing
}

// ---- 1. every 16-bit pattern ----

// to_float gives exactly the value the format defines for all 65536 patterns (sign of zero
// included), and NaN patterns decode to NaNs of the same sign.
void ExpectAllPatternsDecode(const Format& f) {
  int mismatches = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const double expected = Decode(f, static_cast<uint16_t>(h));
    const float got = f.to_float(static_cast<uint16_t>(h));
    const bool ok = std::isnan(expected)
                        ? std::isnan(got) && std::signbit(got) == std::signbit(expected)
                        : static_cast<double>(got) == expected && std::signbit(got) == std::signbit(expected);
    if (!ok && mismatches++ < 10)
      ADD_FAILURE() << f.name << " " << Hex(h, 4) << ": to_float " << Hex(Bits(got), 8) << " (" << got
                    << "), expected " << expected;
  }
  EXPECT_EQ(mismatches, 0);
}
TEST(Half, F16AllPatternsDecodeToTheFormatValue) { ExpectAllPatternsDecode(kF16); }
TEST(Half, BF16AllPatternsDecodeToTheFormatValue) { ExpectAllPatternsDecode(kBF16); }

// Converting a decoded pattern back returns the same pattern for every non-NaN pattern (the
// conversion must not disturb representable values); NaN patterns come back as quiet NaNs of
// the same sign.
void ExpectAllPatternsRoundTrip(const Format& f) {
  int mismatches = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t back = f.convert(f.to_float(static_cast<uint16_t>(h)));
    const bool ok = IsNaNPattern(f, static_cast<uint16_t>(h))
                        ? IsNaNPattern(f, back) && (back & 0x8000) == (h & 0x8000) && (back & f.quiet_bit())
                        : back == h;
    if (!ok && mismatches++ < 10) ADD_FAILURE() << f.name << " " << Hex(h, 4) << " round-trips to " << Hex(back, 4);
  }
  EXPECT_EQ(mismatches, 0);
}
TEST(Half, F16AllPatternsRoundTrip) { ExpectAllPatternsRoundTrip(kF16); }
TEST(Half, BF16AllPatternsRoundTrip) { ExpectAllPatternsRoundTrip(kBF16); }

// ---- 2. random floats against the reference rounding ----

// 4M floats uniform over all 2^32 bit patterns (every exponent, NaNs and infinities included).
TEST(Half, F16UniformRandomBitsMatchReference) {
  ExpectRandomMatch(kF16, 1, 4'000'000, [](std::mt19937_64& rng) { return FromBits(static_cast<uint32_t>(rng())); });
}
TEST(Half, BF16UniformRandomBitsMatchReference) {
  ExpectRandomMatch(kBF16, 2, 4'000'000, [](std::mt19937_64& rng) { return FromBits(static_cast<uint32_t>(rng())); });
}

// fp16's delicate ranges, 1M each: around 1 (0.25..4), around the top (65280..66048, spanning
// 65504 and the 65520 overflow point), the subnormal range and its edges (2^-26..2^-14 and a
// little above), fp32 subnormals (all flush to zero), and the whole finite range 2^-30..2^17.
TEST(Half, F16RandomNearInterestingRangesMatchReference) {
  const struct {
    uint32_t lo, hi;
  } ranges[] = {{0x3e800000u, 0x40800000u}, {0x477f0000u, 0x47810000u}, {0x32800000u, 0x38900000u},
                {0x00000000u, 0x00800000u}, {0x30800000u, 0x48000000u}};
  uint64_t seed = 10;
  for (const auto& r : ranges)
    ExpectRandomMatch(kF16, seed++, 1'000'000, [&](std::mt19937_64& rng) { return RandomInRange(rng, r.lo, r.hi); });
}

// bf16's delicate ranges, 1M each: around 1, near FLT_MAX (up to and including infinity), fp32
// subnormals (which bf16 keeps, to 7 mantissa bits), and around the smallest normal 2^-126.
TEST(Half, BF16RandomNearInterestingRangesMatchReference) {
  const struct {
    uint32_t lo, hi;
  } ranges[] = {{0x3e800000u, 0x40800000u}, {0x7f700000u, 0x7f800000u}, {0x00000000u, 0x00800000u},
                {0x00700000u, 0x00900000u}};
  uint64_t seed = 20;
  for (const auto& r : ranges)
    ExpectRandomMatch(kBF16, seed++, 1'000'000, [&](std::mt19937_64& rng) { return RandomInRange(rng, r.lo, r.hi); });
}

// ---- 3. ties ----

// For every pair of consecutive finite values a < b of the format (subnormals and normals, both
// signs): the exact midpoint rounds to whichever has the even mantissa (the even bit pattern),
// and the fp32 neighbours of the midpoint round to the nearer one. Then the midpoint between the
// largest finite value and the next power of two (beyond the format) rounds up: to infinity.
void ExpectTiesToEven(const Format& f) {
  int mismatches = 0;
  for (uint32_t h = 0; h < f.max_finite_bits(); ++h) {
    for (uint16_t sign : {0x0000, 0x8000}) {
      const uint16_t lo = static_cast<uint16_t>(sign | h), hi = static_cast<uint16_t>(sign | (h + 1));
      const double mid = (Decode(f, lo) + Decode(f, hi)) / 2;
      const float x = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(x), mid) << f.name << ": midpoint not exact in fp32";
      const uint16_t even = (lo & 1) == 0 ? lo : hi;
      const float toward_lo = std::nextafter(x, static_cast<float>(Decode(f, lo)));
      const float toward_hi = std::nextafter(x, static_cast<float>(Decode(f, hi)));
      const struct {
        float in;
        uint16_t want;
      } cases[] = {{x, even}, {toward_lo, lo}, {toward_hi, hi}};
      for (const auto& c : cases) {
        const uint16_t got = f.convert(c.in);
        if (got != c.want && mismatches++ < 10)
          ADD_FAILURE() << f.name << ": " << Hex(Bits(c.in), 8) << " (" << std::setprecision(9) << c.in
                        << ") converts to " << Hex(got, 4) << ", want " << Hex(c.want, 4);
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
  // Past the largest finite value: the midpoint to 2^(emax+1) is a tie between an odd mantissa
  // and the (even) next power, which does not exist, so the result overflows to infinity.
  const double top_mid = (f.max_finite() + std::ldexp(1.0, f.emax() + 1)) / 2;
  const float top = static_cast<float>(top_mid);
  ASSERT_EQ(static_cast<double>(top), top_mid);
  EXPECT_EQ(Hex(f.convert(top), 4), Hex(f.inf_bits(), 4)) << f.name;
  EXPECT_EQ(Hex(f.convert(-top), 4), Hex(0x8000 | f.inf_bits(), 4)) << f.name;
  EXPECT_EQ(Hex(f.convert(std::nextafter(top, 0.0f)), 4), Hex(f.max_finite_bits(), 4)) << f.name;
  EXPECT_EQ(Hex(f.convert(-std::nextafter(top, 0.0f)), 4), Hex(0x8000 | f.max_finite_bits(), 4)) << f.name;
}
TEST(Half, F16TiesRoundToEven) { ExpectTiesToEven(kF16); }
TEST(Half, BF16TiesRoundToEven) { ExpectTiesToEven(kBF16); }

// A few ties spelled out, so a failure reads plainly.
TEST(Half, TiesSpelledOut) {
  // fp16 near 1 (spacing 2^-10): 1 + 2^-11 ties between 0x3c00 (even) and 0x3c01 -> 0x3c00;
  // 1 + 3*2^-11 ties between 0x3c01 and 0x3c02 (even) -> 0x3c02.
  EXPECT_EQ(F16Bits(1.0f + std::ldexp(1.0f, -11)), "0x3c00");
  EXPECT_EQ(F16Bits(1.0f + 3 * std::ldexp(1.0f, -11)), "0x3c02");
  // 2048 + 1 (fp16 spacing 2 there) -> 2048; 2048 + 3 -> 2052.
  EXPECT_EQ(F16Bits(2049.0f), "0x6800");
  EXPECT_EQ(F16Bits(2051.0f), "0x6802");
  // bf16 near 1 (spacing 2^-7): 1 + 2^-8 -> 1 (0x3f80); 1 + 3*2^-8 -> 0x3f82.
  EXPECT_EQ(BF16Bits(1.0f + std::ldexp(1.0f, -8)), "0x3f80");
  EXPECT_EQ(BF16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), "0x3f82");
  // 257 and 259 in bf16 (spacing 2): 256 and 260.
  EXPECT_EQ(BF16Bits(257.0f), "0x4380");
  EXPECT_EQ(BF16Bits(259.0f), "0x4382");
}

// ---- 4. overflow ----

// fp16's largest finite value is 65504 and the next would be 65536, so everything below the
// midpoint 65520 rounds to 65504 and everything from 65520 up (the tie goes to the even 65536,
// which overflows) is infinity.
TEST(Half, F16Overflow) {
  EXPECT_EQ(F16Bits(65504.0f), "0x7bff");
  EXPECT_EQ(F16Bits(65519.996f), "0x7bff");
  EXPECT_EQ(F16Bits(std::nextafter(65520.0f, 0.0f)), "0x7bff");  // 65519.99609375
  EXPECT_EQ(F16Bits(65520.0f), "0x7c00");
  EXPECT_EQ(F16Bits(-65520.0f), "0xfc00");
  EXPECT_EQ(F16Bits(-65519.996f), "0xfbff");
  EXPECT_EQ(F16Bits(65536.0f), "0x7c00");
  EXPECT_EQ(F16Bits(1e30f), "0x7c00");
  EXPECT_EQ(F16Bits(-1e30f), "0xfc00");
  EXPECT_EQ(F16Bits(FLT_MAX), "0x7c00");
  EXPECT_EQ(F16Bits(std::numeric_limits<float>::infinity()), "0x7c00");
  EXPECT_EQ(F16Bits(-std::numeric_limits<float>::infinity()), "0xfc00");
  EXPECT_TRUE(std::isinf(tt::to_float(tt::f16{0x7c00})));
}

// bf16's largest finite value is (2 - 2^-7) * 2^127 ~ 3.3895e38 (bits 0x7f7f); fp32 values from
// the midpoint 0x7f7f8000 ~ 3.3961e38 up, FLT_MAX included, round to infinity; 0x7f7f7fff is
// the largest that stays finite.
TEST(Half, BF16Overflow) {
  EXPECT_EQ(BF16Bits(FLT_MAX), "0x7f80");
  EXPECT_EQ(BF16Bits(-FLT_MAX), "0xff80");
  EXPECT_EQ(BF16Bits(FromBits(0x7f7f8000u)), "0x7f80");  // exact tie: infinity
  EXPECT_EQ(BF16Bits(FromBits(0x7f7f7fffu)), "0x7f7f");  // just below: finite
  EXPECT_EQ(BF16Bits(FromBits(0xff7f7fffu)), "0xff7f");
  EXPECT_EQ(BF16Bits(FromBits(0x7f7f0000u)), "0x7f7f");  // the largest bf16 itself
  // 3.38e38 = 1.9866 x 2^127 lies between 254/128 and 255/128 x 2^127, nearer 254: 0x7f7e.
  EXPECT_EQ(BF16Bits(3.38e38f), "0x7f7e");
  EXPECT_EQ(BF16Bits(3.38e38f), Hex(ReferenceRound(kBF16, 3.38e38f), 4));
  EXPECT_TRUE(std::isfinite(tt::to_float(tt::float_to_bf16(3.38e38f))));
  EXPECT_EQ(BF16Bits(std::numeric_limits<float>::infinity()), "0x7f80");
  EXPECT_EQ(BF16Bits(-std::numeric_limits<float>::infinity()), "0xff80");
}

// ---- 5. subnormals ----

// fp16 subnormals are multiples of 2^-24 below 2^-14; inputs round to the nearest multiple,
// ties to an even multiple, so 2^-25 (half of the smallest) goes to zero.
TEST(Half, F16Subnormals) {
  const float u = std::ldexp(1.0f, -24);  // the smallest fp16 subnormal
  EXPECT_EQ(F16Bits(u), "0x0001");
  EXPECT_EQ(tt::to_float(tt::f16{0x0001}), u);
  EXPECT_EQ(F16Bits(u / 2), "0x0000");                                // tie -> 0 (even)
  EXPECT_EQ(F16Bits(-u / 2), "0x8000");                               // ... keeping the sign
  EXPECT_EQ(F16Bits(std::nextafter(u / 2, 1.0f)), "0x0001");          // just above the tie
  EXPECT_EQ(F16Bits(3 * u / 2), "0x0002");                            // tie 1|2 -> 2
  EXPECT_EQ(F16Bits(5 * u / 2), "0x0002");                            // tie 2|3 -> 2
  EXPECT_EQ(F16Bits(std::ldexp(1.0f, -14) - u), "0x03ff");            // largest subnormal
  EXPECT_EQ(F16Bits(std::ldexp(1.0f, -14) - u / 2), "0x0400");        // tie 0x3ff|0x400 -> 2^-14
  EXPECT_EQ(F16Bits(std::ldexp(1.0f, -14)), "0x0400");                // smallest normal
  EXPECT_EQ(tt::to_float(tt::f16{0x03ff}), std::ldexp(1.0f, -14) - u);
  EXPECT_EQ(F16Bits(std::ldexp(1.0f, -26)), "0x0000");
  EXPECT_EQ(F16Bits(std::numeric_limits<float>::denorm_min()), "0x0000");  // fp32 subnormal
  EXPECT_EQ(F16Bits(-std::numeric_limits<float>::denorm_min()), "0x8000");
}

// bf16 has fp32's exponent range, so fp32 subnormals stay subnormal, but with 7 mantissa bits:
// multiples of 2^-133; the low 16 bits of an fp32 subnormal round away.
TEST(Half, BF16Subnormals) {
  const float u = std::ldexp(1.0f, -133);  // the smallest bf16 subnormal
  EXPECT_EQ(BF16Bits(u), "0x0001");
  EXPECT_EQ(tt::to_float(tt::bf16{0x0001}), u);
  EXPECT_EQ(BF16Bits(u / 2), "0x0000");                        // tie -> 0 (even)
  EXPECT_EQ(BF16Bits(-u / 2), "0x8000");
  EXPECT_EQ(BF16Bits(std::nextafter(u / 2, 1.0f)), "0x0001");
  EXPECT_EQ(BF16Bits(3 * u / 2), "0x0002");                    // tie 1|2 -> 2
  EXPECT_EQ(BF16Bits(std::numeric_limits<float>::denorm_min()), "0x0000");  // 2^-149
  EXPECT_EQ(BF16Bits(-std::numeric_limits<float>::denorm_min()), "0x8000");
  EXPECT_EQ(BF16Bits(std::ldexp(1.0f, -126) - u), "0x007f");   // largest subnormal
  EXPECT_EQ(BF16Bits(std::ldexp(1.0f, -126) - u / 2), "0x0080");  // tie -> 2^-126
  EXPECT_EQ(BF16Bits(FLT_MIN), "0x0080");
  EXPECT_EQ(tt::to_float(tt::bf16{0x007f}), std::ldexp(1.0f, -126) - u);
  EXPECT_EQ(tt::to_float(tt::bf16{0x8001}), -u);
}

// ---- 6. NaN ----

// Every fp32 NaN (all 2 x (2^23 - 1) patterns, signalling and quiet) converts to a quiet NaN of
// the same sign in both formats: rounding must never turn a NaN payload into infinity.
TEST(Half, EveryNaNInputStaysNaNWithItsSign) {
  for (const Format* f : {&kF16, &kBF16}) {
    int mismatches = 0, reported = 0;
    for (uint32_t sign : {0u, 0x80000000u})
      for (uint32_t m = 1; m < (1u << 23); ++m) mismatches += !CheckConversion(*f, FromBits(sign | 0x7f800000u | m), &reported);
    EXPECT_EQ(mismatches, 0) << f->name;
  }
  // And to_float of NaN patterns is NaN with the pattern's sign (checked for all patterns above).
  EXPECT_TRUE(std::isnan(tt::to_float(tt::f16{0x7e00})));
  EXPECT_TRUE(std::isnan(tt::to_float(tt::f16{0xfc01})));
  EXPECT_TRUE(std::signbit(tt::to_float(tt::f16{0xfc01})));
  EXPECT_TRUE(std::isnan(tt::to_float(tt::bf16{0x7fc0})));
  EXPECT_TRUE(std::isnan(tt::to_float(tt::bf16{0xff81})));
  EXPECT_TRUE(std::signbit(tt::to_float(tt::bf16{0xff81})));
}

// ---- 7. signed zero ----

// -0.0f maps to the negative-zero pattern 0x8000 and back to -0.0f in both formats (and +0 to
// 0x0000), so the sign of zero survives storage.
TEST(Half, SignedZero) {
  EXPECT_EQ(F16Bits(-0.0f), "0x8000");
  EXPECT_EQ(BF16Bits(-0.0f), "0x8000");
  EXPECT_EQ(F16Bits(0.0f), "0x0000");
  EXPECT_EQ(BF16Bits(0.0f), "0x0000");
  EXPECT_TRUE(std::signbit(tt::to_float(tt::f16{0x8000})));
  EXPECT_TRUE(std::signbit(tt::to_float(tt::bf16{0x8000})));
  EXPECT_EQ(tt::to_float(tt::f16{0x8000}), 0.0f);
  EXPECT_EQ(tt::to_float(tt::bf16{0x8000}), 0.0f);
  EXPECT_FALSE(std::signbit(tt::to_float(tt::f16{0x0000})));
  EXPECT_FALSE(std::signbit(tt::to_float(tt::bf16{0x0000})));
}

}  // namespace
