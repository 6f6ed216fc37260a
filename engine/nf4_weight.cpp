// NF4 quantisation on the host (see nf4_weight.h): bitsandbytes' quantize_4bit with
// compress_statistics, step by step, with nf4.h's decisions.
#include "engine/nf4_weight.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "base/input_error.h"
#include "kernels/common/nf4.h"

namespace tt {

namespace {

// The dynamic map's 256 values in code order.
std::array<float, nf4::kDynamicCodes> dynamic_map() {
  std::array<float, nf4::kDynamicCodes> map;
  for (int c = 0; c < nf4::kDynamicCodes; ++c) map[c] = nf4::dynamic_map_value(c);
  return map;
}

// The scale of a block is 1 / absmax, with absmax at least 1e-38: a block of zeros then codes
// its weights as 0 * 1e38 = 0, the level 0.0 (code 7), and decodes to exact zeros whatever its
// decoded absmax. bitsandbytes' CPU path does the same (backends/default/ops.py quantize_4bit:
// absmax.clamp(min=1e-38)); its CUDA kernel forms 0 * (1 / 0) = NaN, which its decision tree
// sends to code 0, the level -1, so a zero block there decodes to minus its decoded absmax.
constexpr float kSmallestAbsmax = 1e-38f;

void check_weights(const float* w, int64_t n) {
  if (n < 0 || n % 2 != 0)
    throw InputError("NF4 quantisation: " + std::to_string(n) +
                     " weights: NF4 packs two weights a byte, so it needs an even count");
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(w[i]))
      throw InputError("NF4 quantisation: weight " + std::to_string(i) + " is " + (std::isnan(w[i]) ? "NaN" : "inf") +
                       ": only finite weights can be quantised");
}

}  // namespace

Nf4Weight quantize_nf4(const float* w, int64_t n) {
  check_weights(w, n);
  Nf4Weight q;
  q.n = n;
  const int64_t blocks = nf4::absmax_count(n), groups = nf4::absmax2_count(n);

  // Each 64-weight block: its absmax, then each weight's 4-bit code of w * (1 / absmax).
  std::vector<float> absmax(blocks);
  q.codes.assign(n / 2, 0);
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t first = b * nf4::kBlockSize, end = std::min(n, first + nf4::kBlockSize);
    float m = 0.0f;
    for (int64_t i = first; i < end; ++i) m = std::max(m, std::fabs(w[i]));
    absmax[b] = m;
    const float scale = 1.0f / std::max(m, kSmallestAbsmax);
    for (int64_t i = first; i < end; ++i) {
      const int code = nf4::encode(w[i] * scale);
      q.codes[i / 2] |= static_cast<uint8_t>(i % 2 == 0 ? code << 4 : code);  // element 2j: the high nibble
    }
  }

  // The offset: the mean absmax, summed in double in index order and rounded to fp32 once, so
  // every machine gets the same bits. bitsandbytes takes torch's fp32 mean (_absmax.mean()),
  // whose bits depend on torch's vectorised summation (the CPU's vector width, its threads);
  // the two agree to a few fp32 ulps (tests/nf4_bitsandbytes.sh measures it).
  double sum = 0.0;
  for (float m : absmax) sum += m;
  q.offset = blocks > 0 ? static_cast<float>(sum / static_cast<double>(blocks)) : 0.0f;

  // Each group of 256 absmax values: absmax2 = max |absmax - offset|, then each value's 8-bit
  // code of (absmax - offset) * (1 / absmax2). A group whose values all equal the offset
  // (absmax2 = 0) gets code 0, bitsandbytes' answer there (its CPU kernel writes 0; its CUDA
  // kernel's 0 * (1 / 0) is NaN, which its search also ends at 0): any code decodes to the
  // offset exactly, since map[code] * 0 = 0.
  const std::array<float, nf4::kDynamicCodes> map = dynamic_map();
  q.absmax_codes.assign(blocks, 0);
  q.absmax2.assign(groups, 0.0f);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t first = g * nf4::kAbsmaxBlockSize, end = std::min(blocks, first + nf4::kAbsmaxBlockSize);
    float m = 0.0f;
    for (int64_t b = first; b < end; ++b) m = std::max(m, std::fabs(absmax[b] - q.offset));
    q.absmax2[g] = m;
    if (m == 0.0f) continue;
    const float scale = 1.0f / m;
    for (int64_t b = first; b < end; ++b)
      q.absmax_codes[b] = static_cast<uint8_t>(nf4::dynamic_encode((absmax[b] - q.offset) * scale, map.data()));
  }
  return q;
}

std::vector<float> dequantize_nf4(const Nf4Weight& q) {
  const std::array<float, nf4::kDynamicCodes> map = dynamic_map();
  std::vector<float> w(q.n);
  for (int64_t b = 0; b < nf4::absmax_count(q.n); ++b) {
    const float absmax = nf4::block_absmax(map[q.absmax_codes[b]], q.absmax2[b / nf4::kAbsmaxBlockSize], q.offset);
    const int64_t end = std::min(q.n, (b + 1) * nf4::kBlockSize);
    for (int64_t i = b * nf4::kBlockSize; i < end; ++i) {
      const uint8_t byte = q.codes[i / 2];
      w[i] = nf4::dequantize(nf4::level(i % 2 == 0 ? byte >> 4 : byte & 0x0F), absmax);
    }
  }
  return w;
}

}  // namespace tt
