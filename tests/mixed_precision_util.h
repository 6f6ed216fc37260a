// Helpers for the bf16/fp16 tests (test_mixed_precision_ops, test_loss_scaler): the two
// 16-bit storage types with their unit roundoff, host buffers of 16-bit values and views over
// them (the CPU backend's memory is host memory), and the check that a stored 16-bit output
// is exactly the fp32 result rounded once.
//
// Unit roundoff u = 2^-p for p significant bits: bf16 p = 8, u = 2^-8; fp16 p = 11, u = 2^-11.
// Rounding to nearest moves a value x to y with |y - x| <= u |y| (and <= u |x| / (1 + u)); the
// bound is attained at ties (x = 1 + 2^-p rounds to 1, off by exactly u). So "half an ulp" is
// u relative in the worst case, not u/2. For fp16 it holds in the normal range |y| >= 2^-14;
// below it (subnormals) the error is at most 2^-25 absolute.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "kernels/common/half.h"

namespace tt::test {

struct HalfType {
  DType dtype;
  const char* name;
  double u;  // unit roundoff 2^-p
};
inline void PrintTo(const HalfType& h, std::ostream* os) { *os << h.name; }  // gtest's parameter names
inline const HalfType kBf16{DType::BF16, "bf16", 0.00390625};          // 2^-8
inline const HalfType kFp16{DType::F16, "fp16", 0.00048828125};        // 2^-11
constexpr double kFp16MinNormal = 6.103515625e-05;                     // 2^-14

inline uint16_t half_bits(DType dtype, float x) {
  return dtype == DType::BF16 ? float_to_bf16(x).bits : float_to_f16(x).bits;
}
inline float half_value(DType dtype, uint16_t bits) {
  return dtype == DType::BF16 ? to_float(bf16{bits}) : to_float(f16{bits});
}
inline float round_to(DType dtype, float x) { return half_value(dtype, half_bits(dtype, x)); }
// The values rounded to the 16-bit type, as fp32: inputs both paths of a test can hold exactly.
inline std::vector<float> rounded(DType dtype, std::vector<float> v) {
  for (float& x : v) x = round_to(dtype, x);
  return v;
}

// A host buffer of 16-bit values of one dtype.
struct HalfBuffer {
  DType dtype = DType::BF16;
  std::vector<uint16_t> bits;

  Tensor view(Shape shape) {
    EXPECT_EQ(static_cast<int64_t>(bits.size()), shape.numel()) << "view " << shape.str();
    return Tensor{bits.data(), dtype, shape};
  }
  std::vector<float> values() const {
    std::vector<float> v(bits.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = half_value(dtype, bits[i]);
    return v;
  }
};
// `values` stored in 16 bits (rounded; exact for values from rounded()).
inline HalfBuffer half_of(DType dtype, const std::vector<float>& values) {
  HalfBuffer h{dtype, std::vector<uint16_t>(values.size())};
  for (size_t i = 0; i < values.size(); ++i) h.bits[i] = half_bits(dtype, values[i]);
  return h;
}
// A 16-bit output buffer the op must overwrite entirely: NaN everywhere.
inline HalfBuffer half_nan(DType dtype, size_t n) {
  return half_of(dtype, std::vector<float>(n, std::nanf("")));
}

// What a stored-output check measured: mismatching elements against round(fp32), and the
// largest deviation of the stored value from the fp32 value, relative to the stored value
// (normal range; subnormal fp16 results are measured on the 2^-25 absolute scale).
struct RoundingCheck {
  size_t mismatches = 0;
  double max_rel = 0.0;
};

// The 16-bit output `got` must be the fp32 result `want` rounded once, bit for bit; and so
// |got - want| <= u |got|. Prints the measured deviation.
inline RoundingCheck expect_stored_rounding(const std::string& what, const HalfBuffer& got,
                                            const std::vector<float>& want, const HalfType& h) {
  RoundingCheck r;
  EXPECT_EQ(got.bits.size(), want.size()) << what;
  if (got.bits.size() != want.size()) return r;
  size_t first = 0;
  double worst_abs_subnormal = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got.bits[i] != half_bits(h.dtype, want[i]) && r.mismatches++ == 0) first = i;
    const double y = half_value(h.dtype, got.bits[i]), x = want[i];
    const double d = std::fabs(y - x);
    if (std::isnan(d)) {
      r.max_rel = INFINITY;
    } else if (h.dtype == DType::F16 && std::fabs(y) < kFp16MinNormal) {
      worst_abs_subnormal = std::max(worst_abs_subnormal, d);
    } else if (y != 0.0) {
      r.max_rel = std::max(r.max_rel, d / std::fabs(y));
    }
  }
  std::printf("[ %-4s     ] %-46s bitwise round(fp32): %s  max |y-x|/|y| %.3e (u %.3e = %.2f u)\n", h.name,
              what.c_str(), r.mismatches ? "NO" : "yes", r.max_rel, h.u, r.max_rel / h.u);
  EXPECT_EQ(r.mismatches, 0u) << what << " (" << h.name << "): " << r.mismatches << " of " << want.size()
                              << " stored values are not the fp32 result rounded; first at " << first << ": got "
                              << half_value(h.dtype, got.bits[first]) << " want round(" << want[first] << ") = "
                              << round_to(h.dtype, want[first]);
  EXPECT_LE(r.max_rel, h.u) << what << " (" << h.name << ")";
  EXPECT_LE(worst_abs_subnormal, 2.98023223876953125e-08) << what << ": fp16 subnormal error above 2^-25";
  return r;
}

}  // namespace tt::test
