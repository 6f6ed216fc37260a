// The batched dropout mask of kernels/cpu/dropout_mask.h. In a .cpp of the CPU backend so that
// it is compiled with the backend's AVX2 flags wherever it is called from, tests included.
//
// The vector versions run philox4x32_10 on many counters side by side, one counter per 64-bit
// lane: the multiply that Philox needs (32 x 32 -> 64 bits, vpmuludq) reads the low half of
// each 64-bit lane and writes the whole product there, so the low word is `lo` and a shift
// gives `hi`, with no shuffling between rounds. The high halves of the lanes hold garbage that
// nothing reads. Several independent batches are interleaved so the multiplies of one batch
// overlap the latency of another's. At the end, each batch's words are transposed into
// element order (element 4j + w is word w of group j) and turned into factors.
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
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;  // philox4x32_10's multipliers
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // and key increments
constexpr float kToUnit = 1.0f / 16777216.0f;                  // uniform_from_bits' 2^-24

// ---- AVX2: 4 counters per register ----

// Registers of counters in flight: 4 (0.63 ns per element on an AVX-512 EPYC capped at AVX2;
// 3: 0.92 ns, 2: 0.88 ns). Each round's key is xored into the counter word first, off the
// multiply's path, so that a round's chain is multiply, shift, xor.
constexpr int kAvx2Batches = 4;
constexpr int kAvx2Elements = 4 * 4 * kAvx2Batches;  // elements per call: 4 per group

// dropout_factor on 8 words at once: uniform = (bits >> 8) * 2^-24 (exact in fp32), 0 below p
void store_factors8(__m256i words, float p, float keep_scale, float* out) {
  const __m256 uniform = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(words, 8)), _mm256_set1_ps(kToUnit));
  const __m256 dropped = _mm256_cmp_ps(uniform, _mm256_set1_ps(p), _CMP_LT_OQ);
  _mm256_storeu_ps(out, _mm256_andnot_ps(dropped, _mm256_set1_ps(keep_scale)));
}

// The factors of the kAvx2Elements elements of Philox groups g, g+1, ...
void scales_avx2(const DropoutKey& key, uint64_t g, float p, float keep_scale, float* out) {
  const __m256i mul0 = _mm256_set1_epi64x(kMul0), mul1 = _mm256_set1_epi64x(kMul1);
  // counter words as dropout_bits4 lays them out: (group lo, group hi, layer|site, step)
  __m256i c0[kAvx2Batches], c1[kAvx2Batches], c2[kAvx2Batches], c3[kAvx2Batches];
#pragma GCC unroll 8
  for (int b = 0; b < kAvx2Batches; ++b) {
    const __m256i group = _mm256_add_epi64(_mm256_set1_epi64x(static_cast<int64_t>(g + 4 * b)),
                                           _mm256_setr_epi64x(0, 1, 2, 3));
    c0[b] = group;  // the low word is read
    c1[b] = _mm256_srli_epi64(group, 32);
    c2[b] = _mm256_set1_epi64x((key.layer << 8) | static_cast<uint32_t>(key.site));
    c3[b] = _mm256_set1_epi64x(key.step);
  }
  uint32_t key0 = static_cast<uint32_t>(key.seed), key1 = static_cast<uint32_t>(key.seed >> 32);
#pragma GCC unroll 10
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const __m256i k0 = _mm256_set1_epi64x(key0), k1 = _mm256_set1_epi64x(key1);
#pragma GCC unroll 8
    for (int b = 0; b < kAvx2Batches; ++b) {
      const __m256i product0 = _mm256_mul_epu32(c0[b], mul0), product1 = _mm256_mul_epu32(c2[b], mul1);
      c0[b] = _mm256_xor_si256(_mm256_srli_epi64(product1, 32), _mm256_xor_si256(c1[b], k0));  // hi1 ^ c1 ^ key0
      c2[b] = _mm256_xor_si256(_mm256_srli_epi64(product0, 32), _mm256_xor_si256(c3[b], k1));  // hi0 ^ c3 ^ key1
      c1[b] = product1;  // lo1
      c3[b] = product0;  // lo0
    }
  }
#pragma GCC unroll 8
  for (int b = 0; b < kAvx2Batches; ++b) {
    // 64-bit lane j: words (0,1) of group j, then words (2,3)
    const __m256i w01 = _mm256_blend_epi32(c0[b], _mm256_slli_epi64(c1[b], 32), 0xAA);
    const __m256i w23 = _mm256_blend_epi32(c2[b], _mm256_slli_epi64(c3[b], 32), 0xAA);
    const __m256i groups02 = _mm256_unpacklo_epi64(w01, w23);  // group 0's 4 words, then group 2's
    const __m256i groups13 = _mm256_unpackhi_epi64(w01, w23);
    store_factors8(_mm256_permute2x128_si256(groups02, groups13, 0x20), p, keep_scale, out + 16 * b);
    store_factors8(_mm256_permute2x128_si256(groups02, groups13, 0x31), p, keep_scale, out + 16 * b + 8);
  }
}

// ---- AVX-512F: 8 counters per register ----
// Compiled for AVX-512F whatever the build's flags and called only where the CPU has it. (GCC
// 12's avx512fintrin.h trips its own -Wuninitialized when inlined here, GCC bug 105593:
// silenced for these functions only.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"

constexpr int kAvx512Batches = 4;                        // 4 measured fastest (2: 1.3x slower)
constexpr int kAvx512Elements = 8 * 4 * kAvx512Batches;  // elements per call

__attribute__((target("avx512f"))) void store_factors16(__m512i words, float p, float keep_scale, float* out) {
  const __m512 uniform = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(words, 8)), _mm512_set1_ps(kToUnit));
  const __mmask16 dropped = _mm512_cmp_ps_mask(uniform, _mm512_set1_ps(p), _CMP_LT_OQ);
  _mm512_storeu_ps(out, _mm512_maskz_mov_ps(static_cast<__mmask16>(~dropped), _mm512_set1_ps(keep_scale)));
}

__attribute__((target("avx512f"))) void scales_avx512(const DropoutKey& key, uint64_t g, float p,
                                                      float keep_scale, float* out) {
  const __m512i mul0 = _mm512_set1_epi64(kMul0), mul1 = _mm512_set1_epi64(kMul1);
  __m512i c0[kAvx512Batches], c1[kAvx512Batches], c2[kAvx512Batches], c3[kAvx512Batches];
#pragma GCC unroll 8
  for (int b = 0; b < kAvx512Batches; ++b) {
    const __m512i group = _mm512_add_epi64(_mm512_set1_epi64(static_cast<int64_t>(g + 8 * b)),
                                           _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    c0[b] = group;
    c1[b] = _mm512_srli_epi64(group, 32);
    c2[b] = _mm512_set1_epi64((key.layer << 8) | static_cast<uint32_t>(key.site));
    c3[b] = _mm512_set1_epi64(key.step);
  }
  uint32_t key0 = static_cast<uint32_t>(key.seed), key1 = static_cast<uint32_t>(key.seed >> 32);
#pragma GCC unroll 10
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const __m512i k0 = _mm512_set1_epi64(key0), k1 = _mm512_set1_epi64(key1);
#pragma GCC unroll 8
    for (int b = 0; b < kAvx512Batches; ++b) {
      const __m512i product0 = _mm512_mul_epu32(c0[b], mul0), product1 = _mm512_mul_epu32(c2[b], mul1);
      c0[b] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(product1, 32), c1[b], k0, 0x96);  // a ^ b ^ c
      c2[b] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(product0, 32), c3[b], k1, 0x96);
      c1[b] = product1;
      c3[b] = product0;
    }
  }
  // 64-bit qwords: where each group's two halves sit after the unpacks below, in group order
  const __m512i first4 = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
  const __m512i last4 = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
#pragma GCC unroll 8
  for (int b = 0; b < kAvx512Batches; ++b) {
    const __m512i w01 = _mm512_mask_blend_epi32(0xAAAA, c0[b], _mm512_slli_epi64(c1[b], 32));
    const __m512i w23 = _mm512_mask_blend_epi32(0xAAAA, c2[b], _mm512_slli_epi64(c3[b], 32));
    const __m512i even = _mm512_unpacklo_epi64(w01, w23);  // 128-bit lane k: group 2k's 4 words
    const __m512i odd = _mm512_unpackhi_epi64(w01, w23);   // group 2k+1's
    store_factors16(_mm512_permutex2var_epi64(even, first4, odd), p, keep_scale, out + 32 * b);
    store_factors16(_mm512_permutex2var_epi64(even, last4, odd), p, keep_scale, out + 32 * b + 16);
  }
}

#pragma GCC diagnostic pop
#endif

}  // namespace

void dropout_scales(const DropoutKey& key, uint64_t start, int64_t count, float p, float* out, CpuSimd simd) {
  const float keep_scale = 1.0f / (1.0f - p);
  uint64_t index = start;
  const uint64_t end = start + static_cast<uint64_t>(count);
  if (index & 3) scales_of_group(key, index, end, p, keep_scale, out);  // to a group boundary
#if defined(__AVX2__)
  // whole vector calls while they fit, the widest first; single groups take the rest
  if (simd == CpuSimd::Avx512)
    for (; end - index >= kAvx512Elements; index += kAvx512Elements)
      scales_avx512(key, index >> 2, p, keep_scale, out + (index - start));
  if (simd != CpuSimd::Scalar)
    for (; end - index >= kAvx2Elements; index += kAvx2Elements)
      scales_avx2(key, index >> 2, p, keep_scale, out + (index - start));
#else
  (void)simd;
#endif
  while (index < end) scales_of_group(key, index, end, p, keep_scale, out + (index - start));
}

}  // namespace tt
