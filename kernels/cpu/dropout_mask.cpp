// The batched dropout mask of kernels/cpu/dropout_mask.h. In a .cpp of the CPU backend so that
// it is compiled with the backend's AVX2 flags wherever it is called from, tests included.
#include "kernels/cpu/dropout_mask.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace tt {

namespace {

// The factors of the elements of one Philox group (index >> 2) from `index` up to the group's
// end or `end`, whichever is first; advances index.
void scales_of_group(const DropoutKey& key, uint64_t& index, uint64_t end, float p, float keep_scale,
                            float* out_at_index) {
  const Philox4 bits = dropout_bits4(key, index >> 2);
  for (uint64_t lane = index & 3; lane < 4 && index < end; ++lane, ++index, ++out_at_index)
    *out_at_index = dropout_factor(bits.v[lane], p, keep_scale);
}

#if defined(__AVX2__)
// For 8 lanes of 32 bits: hi and lo words of a * m (philox_mulhilo, 8 at a time). AVX2 only
// multiplies the even 32-bit lanes into 64-bit products, so the odd lanes are shifted down and
// multiplied separately, then the halves are blended back into place.
void mulhilo8(__m256i a, __m256i m, __m256i* hi, __m256i* lo) {
  const __m256i even = _mm256_mul_epu32(a, m);                        // lanes 0,2,4,6: 64-bit products
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);  // lanes 1,3,5,7
  *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// The factors of the 32 elements of Philox groups g .. g+7 (g's low word must not wrap within
// them): philox4x32_10 on 8 counters side by side, then dropout_factor on each word.
void scales_of_8_groups(const DropoutKey& key, uint64_t g, float p, float keep_scale, float* out) {
  const __m256i mul0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i mul1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  // counter words as dropout_bits4 lays them out: (group lo, group hi, layer|site, step)
  __m256i c0 = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(g))),
                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m256i c1 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(g >> 32)));
  __m256i c2 = _mm256_set1_epi32(static_cast<int>((key.layer << 8) | static_cast<uint32_t>(key.site)));
  __m256i c3 = _mm256_set1_epi32(static_cast<int>(key.step));
  uint32_t key0 = static_cast<uint32_t>(key.seed), key1 = static_cast<uint32_t>(key.seed >> 32);
  for (int round = 0; round < 10; ++round) {  // the rounds of philox4x32_10
    if (round > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    __m256i hi0, lo0, hi1, lo1;
    mulhilo8(c0, mul0, &hi0, &lo0);
    mulhilo8(c2, mul1, &hi1, &lo1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(static_cast<int>(key0)));
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(static_cast<int>(key1)));
    c1 = lo1;
    c3 = lo0;
  }
  // dropout_factor on every word: uniform = (bits >> 8) * 2^-24 (exact in fp32), 0 below p.
  const __m256 drop_below = _mm256_set1_ps(p), scale = _mm256_set1_ps(keep_scale);
  const __m256 to_unit = _mm256_set1_ps(1.0f / 16777216.0f);
  const __m256i words[4] = {c0, c1, c2, c3};
  alignas(32) float factors[4][8];  // [word][group]
  for (int w = 0; w < 4; ++w) {
    const __m256 uniform = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(words[w], 8)), to_unit);
    _mm256_store_ps(factors[w], _mm256_andnot_ps(_mm256_cmp_ps(uniform, drop_below, _CMP_LT_OQ), scale));
  }
  for (int j = 0; j < 8; ++j)  // element 4j + w is word w of group g + j
    for (int w = 0; w < 4; ++w) out[4 * j + w] = factors[w][j];
}

// The AVX-512 twin of scales_of_8_groups, 16 groups (64 elements) at once: the same integer
// steps on twice the lanes, so the same bits. Compiled for AVX-512F whatever the build's flags
// and called only where the CPU has it (cpu_has_avx512f). (GCC 12's avx512fintrin.h trips its
// own -Wuninitialized when inlined here, GCC bug 105593: silenced for these functions only.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
__attribute__((target("avx512f"))) void mulhilo16(__m512i a, __m512i m, __m512i* hi, __m512i* lo) {
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  *lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
}

__attribute__((target("avx512f"))) void scales_of_16_groups(const DropoutKey& key, uint64_t g, float p,
                                                            float keep_scale, float* out) {
  const __m512i mul0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i mul1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(g))),
                                _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  __m512i c1 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(g >> 32)));
  __m512i c2 = _mm512_set1_epi32(static_cast<int>((key.layer << 8) | static_cast<uint32_t>(key.site)));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(key.step));
  uint32_t key0 = static_cast<uint32_t>(key.seed), key1 = static_cast<uint32_t>(key.seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    __m512i hi0, lo0, hi1, lo1;
    mulhilo16(c0, mul0, &hi0, &lo0);
    mulhilo16(c2, mul1, &hi1, &lo1);
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), _mm512_set1_epi32(static_cast<int>(key0)));
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), _mm512_set1_epi32(static_cast<int>(key1)));
    c1 = lo1;
    c3 = lo0;
  }
  const __m512 drop_below = _mm512_set1_ps(p), scale = _mm512_set1_ps(keep_scale);
  const __m512 to_unit = _mm512_set1_ps(1.0f / 16777216.0f);
  const __m512i words[4] = {c0, c1, c2, c3};
  alignas(64) float factors[4][16];  // [word][group]
  for (int w = 0; w < 4; ++w) {
    const __m512 uniform = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(words[w], 8)), to_unit);
    const __mmask16 dropped = _mm512_cmp_ps_mask(uniform, drop_below, _CMP_LT_OQ);
    _mm512_store_ps(factors[w], _mm512_maskz_mov_ps(static_cast<__mmask16>(~dropped), scale));
  }
  for (int j = 0; j < 16; ++j)
    for (int w = 0; w < 4; ++w) out[4 * j + w] = factors[w][j];
}

#pragma GCC diagnostic pop

bool cpu_has_avx512f() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}
#endif

}  // namespace

void dropout_scales(const DropoutKey& key, uint64_t start, int64_t count, float p, float* out) {
  const float keep_scale = 1.0f / (1.0f - p);
  uint64_t index = start;
  const uint64_t end = start + static_cast<uint64_t>(count);
#if defined(__AVX2__)
  if (index & 3) scales_of_group(key, index, end, p, keep_scale, out);  // to a group boundary
  if (cpu_has_avx512f()) {
    // 64 elements at a time while the counter's low word does not wrap inside them; the AVX2
    // and single-group loops below take the rest
    while (end - index >= 64 && static_cast<uint32_t>(index >> 2) <= 0xFFFFFFF0u) {
      scales_of_16_groups(key, index >> 2, p, keep_scale, out + (index - start));
      index += 64;
    }
  }
  while (end - index >= 32) {
    const uint64_t g = index >> 2;
    if (static_cast<uint32_t>(g) > 0xFFFFFFF8u) {  // the counter's low word wraps inside: one group at a time
      for (const uint64_t stop = index + 32; index < stop;)
        scales_of_group(key, index, end, p, keep_scale, out + (index - start));
      continue;
    }
    scales_of_8_groups(key, g, p, keep_scale, out + (index - start));
    index += 32;
  }
#endif
  while (index < end) scales_of_group(key, index, end, p, keep_scale, out + (index - start));
}

}  // namespace tt
