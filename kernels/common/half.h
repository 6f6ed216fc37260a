// bf16 and fp16 storage types and their conversions to and from fp32, shared by the host and
// the GPU so that a value stored in 16 bits is rounded the same way on both backends: round
// to nearest, ties to even; fp16 overflows to infinity and keeps subnormals; NaN stays NaN
// (quiet, sign kept). Arithmetic always happens in fp32: these types only hold values.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/common/host_device.h"

namespace tt {

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

TT_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

TT_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// ---- bf16: fp32 with the low 16 mantissa bits dropped (8 bits of precision) ----

TT_HD float to_float(bf16 h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }

TT_HD bf16 float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even at bit 16; a carry may reach infinity
  return bf16{static_cast<uint16_t>(u >> 16)};
}

// ---- fp16: 5 exponent bits (max 65504), 11 bits of precision, subnormals down to 2^-24 ----

TT_HD float to_float(f16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exponent = (h.bits >> 10) & 0x1fu, mantissa = h.bits & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in fp32
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return bits_float(float_bits(magnitude) | sign);
  }
  if (exponent == 31) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf or NaN
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

TT_HD f16 float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return f16{static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu))};
  if (magnitude >= 0x477ff000u) return f16{static_cast<uint16_t>(sign | 0x7c00u)};  // >= 65520: infinity
  if (magnitude < 0x38800000u) {  // below 2^-14: a subnormal (or zero) in fp16
    // x 2^24 is exact here; rintf rounds half to even (the default rounding mode), and a
    // result of 1024 is exactly the encoding of the smallest normal, 2^-14.
    const float units = rintf(bits_float(magnitude) * 16777216.0f);
    return f16{static_cast<uint16_t>(sign | static_cast<uint16_t>(units))};
  }
  magnitude += 0xfffu + ((magnitude >> 13) & 1u);  // round to nearest even at bit 13
  magnitude -= 112u << 23;                          // exponent bias 127 -> 15
  return f16{static_cast<uint16_t>(sign | (magnitude >> 13))};
}

// Generic access for code templated on the storage type S (float, bf16 or f16).
TT_HD float to_float(float f) { return f; }

template <typename S>
TT_HD S from_float(float f);
template <>
TT_HD float from_float<float>(float f) {
  return f;
}
template <>
TT_HD bf16 from_float<bf16>(float f) {
  return float_to_bf16(f);
}
template <>
TT_HD f16 from_float<f16>(float f) {
  return float_to_f16(f);
}

}  // namespace tt
