// NF4, the 4-bit NormalFloat of QLoRA (Dettmers et al., "QLoRA: Efficient Finetuning of
// Quantized LLMs", 2023), stored as bitsandbytes stores a frozen weight with
// quantize_4bit(quant_type="nf4", blocksize=64, compress_statistics=True). The math both
// backends share bit for bit: the 16 levels, the 4-bit decision, the 8-bit "dynamic" map of
// the double quantisation, its decision, and the order of the fp32 operations that decode.
// File and function names below are bitsandbytes' (github.com/bitsandbytes-foundation/
// bitsandbytes, release 0.50.2); docs/nf4.md has the format whole.
//
// A weight of n elements (n even) is cut into blocks of kBlockSize = 64 (the last may be
// shorter). For block b, absmax[b] = max |w| over it; each element is stored as the 4-bit code
// of w * (1 / absmax[b]) (encode below), two codes per byte: element 2i in the HIGH nibble of
// byte i, element 2i + 1 in the low one (csrc/kernels.cu kQuantizeBlockwise: qvals[j] =
// dQuantizeNF4(vals[2j]) << 4 | dQuantizeNF4(vals[2j+1]); backends/default/ops.py packs
// (q[::2] << 4) | q[1::2]).
//
// Double quantisation (functional.py quantize_4bit, compress_statistics=True): offset =
// mean(absmax); absmax - offset is cut into blocks of kAbsmaxBlockSize = 256, and for block g
// absmax2[g] = max |absmax - offset| over it (fp32), and each absmax is stored as the 8-bit code
// of (absmax - offset) * (1 / absmax2[g]) in the dynamic map (dynamic_encode below).
//
// Decoding, in this order of fp32 operations, each rounded to nearest even, none fused:
//   absmax' = map[code] * absmax2 + offset       (the product rounded, then the sum: two roundings)
//   w'      = level[nibble] * absmax'            (one rounding; a 16-bit output rounds w' once more)
// as bitsandbytes' dequantize_4bit does: dequantize_blockwise (code[q] * absmax2), then
// `absmax += offset`, then dDequantizeNF4(q) * local_abs_max.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/common/host_device.h"

namespace tt::nf4 {

constexpr int kBlockSize = 64;         // weights per absmax
constexpr int kAbsmaxBlockSize = 256;  // absmax values per absmax2 (the double quantisation's block)
constexpr int kLevels = 16;            // 4-bit codes
constexpr int kDynamicCodes = 256;     // 8-bit codes of the dynamic map

// The number of absmax values of an n-element weight, and of absmax2 values.
TT_HD int64_t absmax_count(int64_t n) { return (n + kBlockSize - 1) / kBlockSize; }
TT_HD int64_t absmax2_count(int64_t n) { return (absmax_count(n) + kAbsmaxBlockSize - 1) / kAbsmaxBlockSize; }

// ---- the 4-bit NF4 code ----

// The 16 levels, sorted, in [-1, 1]: code c decodes to level(c). As bitsandbytes has them
// (functional.py get_4bit_type("nf4"), the same numbers as csrc/kernels.cu
// nf4_dequantization_lut), made by create_normal_map(offset=0.9677083, use_extra_value=True):
// quantiles of N(0, 1), 8 negative, zero, 7 positive, scaled to a largest of 1. The decimal
// strings are bitsandbytes'; each is the fp32 value it rounds to (tests/nf4_bitsandbytes.sh
// compares the bits).
TT_HD float level(int code) {
  const float levels[kLevels] = {-1.0f,
                                 -0.6961928009986877f,
                                 -0.5250730514526367f,
                                 -0.39491748809814453f,
                                 -0.28444138169288635f,
                                 -0.18477343022823334f,
                                 -0.09105003625154495f,
                                 0.0f,
                                 0.07958029955625534f,
                                 0.16093020141124725f,
                                 0.24611230194568634f,
                                 0.33791524171829224f,
                                 0.44070982933044434f,
                                 0.5626170039176941f,
                                 0.7229568362236023f,
                                 1.0f};
  return levels[code];
}

// The midpoint between levels k and k + 1, in fp32: the sum rounded, the halving exact.
TT_HD float level_midpoint(int k) { return (level(k) + level(k + 1)) * 0.5f; }

// The 4-bit code of x = w * (1 / absmax): the number of midpoints strictly below x, so a value
// exactly on a midpoint takes the LOWER code, and anything below -1 or above 1 the end codes.
// That is bitsandbytes' CPU decision (backends/default/ops.py quantize_4bit: torch.bucketize(x,
// (code[:-1] + code[1:]) / 2), right=False: the same fp32 midpoints, the same count). Its CUDA
// kernel (csrc/kernels.cu dQuantizeNF4) tests `x > t` on 15 thresholds written as decimals: the
// exact midpoints, printed. Compiled to fp32, 11 are these midpoints; the other 4 (k = 0, 8,
// 12, 14) are exact midpoints that fall halfway between two fp32 values, which the sum's
// rounding sends to the even one and the printed decimal to the other, one ulp away
// (tests/test_nf4.cpp checks all 15). So on bitsandbytes' GPU four single fp32 values of x
// (one per such midpoint) take the neighbouring code; tinytrain keeps the CPU's midpoints.
TT_HD int encode(float x) {
  int code = 0;
  for (int k = 0; k + 1 < kLevels; ++k) code += x > level_midpoint(k) ? 1 : 0;
  return code;
}

// One weight decoded: level * absmax in fp32, one rounding (mul_rn: never fused with a later add).
TT_HD float dequantize(float level_value, float absmax) { return mul_rn(level_value, absmax); }

// ---- the 8-bit dynamic map of the double quantisation ----

// Value `code` of bitsandbytes' signed dynamic map, functional.py create_dynamic_map(signed=True,
// max_exponent_bits=7, total_bits=8), written from its definition: for decade i = 0..6, the
// boundaries linspace(0.1, 1, 2^i + 1) and the 2^i means of neighbouring boundaries, times
// 10^(i - 6), each with its negative; then 0 and 1; 256 values, sorted. So code 127 is 0, 255
// is 1, codes 128..254 the 127 positive values in increasing order (decade 0's one value, then
// decade 1's two, ...), and codes 0..126 their negatives, mirrored (code 126 - k is minus code
// 128 + k).
//
// bitsandbytes computes it with torch in fp32, and these are torch's roundings, step by step:
//   step        = (1.0f - 0.1f) / 2^i                       (fp32 subtraction and division)
//   boundary(j) = 0.1f + step * j            for j <  (2^i + 1) / 2
//               = 1.0f - step * (2^i - j)    for the upper half,
//     each ONE fused multiply-add: torch.linspace's CPU kernel (aten/src/ATen/native/cpu/
//     RangeFactoriesKernel.cpp) writes start + step * idx and end - step * (steps - idx - 1),
//     and its AVX2 and AVX-512 builds contract each into an fma (measured with torch 2.11 in
//     both, ATEN_CPU_CAPABILITY=avx2|avx512). Its build for CPUs without AVX2 (=default)
//     rounds the product and the sum apart, and there bitsandbytes' map has 21 of its 127
//     magnitudes an ulp or two away: tinytrain keeps the fused form, every AVX2 machine's;
//   mean        = (boundary(j) + boundary(j + 1)) / 2.0f     (the sum rounded, the halving exact)
//   value       = fp32(10^(i - 6)) * mean                    (one fp32 product).
// tests/nf4_bitsandbytes.sh compares all 256 with bitsandbytes' own, bit for bit.
TT_HD float dynamic_map_value(int code) {
  if (code == 127) return 0.0f;
  if (code == 255) return 1.0f;
  const bool negative = code < 127;
  const int k = negative ? 126 - code : code - 128;  // the k-th positive value, k in [0, 126]
  int i = 0;                                         // its decade: k + 1 in [2^i, 2^(i+1))
  while (((k + 1) >> (i + 1)) != 0) ++i;
  const int j = k + 1 - (1 << i);  // the j-th mean of decade i
  const int intervals = 1 << i;    // linspace(0.1, 1, intervals + 1)
  const float step = (1.0f - 0.1f) / static_cast<float>(intervals);
  const int halfway = (intervals + 1) / 2;
  const auto boundary = [&](int index) {
    return index < halfway ? fmaf(step, static_cast<float>(index), 0.1f)
                           : fmaf(-step, static_cast<float>(intervals - index), 1.0f);
  };
  const float mean = (boundary(j) + boundary(j + 1)) / 2.0f;
  const float decades[7] = {1e-6f, 1e-5f, 1e-4f, 1e-3f, 1e-2f, 1e-1f, 1.0f};
  const float value = mul_rn(decades[i], mean);
  return negative ? -value : value;
}

// The 8-bit code of x = (absmax - offset) * (1 / absmax2) in the dynamic map `map` (the 256
// values of dynamic_map_value, sorted): the nearest value, by the fp32 midpoints
// (map[c] + map[c + 1]) * 0.5f, and a value exactly on a midpoint takes the EVEN code of the two.
// That is bitsandbytes' CUDA decision (csrc/kernels.cu dQuantize<0>): a binary search from code
// 127 in steps of 64, 32, ..., 1 always ends on an even code p, then x is compared with the
// midpoints on either side of map[p] with strict inequalities, so a tie stays at p
// (tests/test_nf4.cpp runs that search beside this one on every midpoint). Its CPU kernel
// (csrc/cpu_ops.cpp, quantize_cpu_impl, since 0.50.0) looks codes up in a table of 65536 points
// of [-1, 1] instead, and may answer a neighbouring code for a value within one table step
// (2 / 65535) of a midpoint; tests/nf4_bitsandbytes.sh shows every such difference is one.
TT_HD int dynamic_encode(float x, const float* map) {
  // the number of midpoints strictly below x: c in [0, 255], by bisection on c
  int lo = 0, hi = kDynamicCodes - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if ((map[mid] + map[mid + 1]) * 0.5f < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  const bool on_midpoint = lo + 1 < kDynamicCodes && x == (map[lo] + map[lo + 1]) * 0.5f;
  return on_midpoint && lo % 2 == 1 ? lo + 1 : lo;
}

// The absmax of one 64-weight block decoded: map value * absmax2, rounded, then + offset,
// rounded (mul_rn, add_rn: two roundings on every backend, never one fused multiply-add).
TT_HD float block_absmax(float map_value, float absmax2, float offset) {
  return add_rn(mul_rn(map_value, absmax2), offset);
}

}  // namespace tt::nf4
