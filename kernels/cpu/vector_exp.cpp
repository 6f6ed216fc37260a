// The vector exp of kernels/cpu/vector_exp.h (the method and its accuracy are described there).
// In a .cpp of the CPU backend so that it is compiled with the backend's AVX2 flags wherever it
// is called from, tests included.
#include "kernels/cpu/vector_exp.h"

#include <cmath>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace tt {

#if defined(__AVX2__)
namespace {

__m256 exp8(__m256 x) {
  const __m256 max_input = _mm256_set1_ps(88.3762626647949f), min_input = _mm256_set1_ps(-87.3365f);
  // (min/max return their second operand when one is NaN: x second keeps a NaN a NaN)
  const __m256 clamped = _mm256_max_ps(_mm256_set1_ps(-88.0f), _mm256_min_ps(max_input, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(clamped, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_sub_ps(clamped, _mm256_mul_ps(n, _mm256_set1_ps(0.693359375f)));
  r = _mm256_sub_ps(r, _mm256_mul_ps(n, _mm256_set1_ps(-2.12194440e-4f)));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
  const __m256 exp_r = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
  // 2^n: n + 127 in the exponent field (n in [-127, 127] after the clamp; -127 only where the result is set to 0 below)
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
  const __m256 two_n = _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
  __m256 result = _mm256_mul_ps(exp_r, two_n);
  result = _mm256_blendv_ps(result, _mm256_setzero_ps(), _mm256_cmp_ps(x, min_input, _CMP_LT_OQ));
  result = _mm256_blendv_ps(result, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, max_input, _CMP_GT_OQ));
  return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN in, NaN out
}
}  // namespace
#endif

void exp_shifted(const float* in, float shift, int64_t count, float* out) {
  int64_t i = 0;
#if defined(__AVX2__)
  const __m256 s = _mm256_set1_ps(shift);
  for (; i + 8 <= count; i += 8) _mm256_storeu_ps(out + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(in + i), s)));
  if (i < count) {  // the tail through a zero-padded register
    float tail[8] = {};
    for (int64_t j = i; j < count; ++j) tail[j - i] = in[j] - shift;
    alignas(32) float result[8];
    _mm256_store_ps(result, exp8(_mm256_loadu_ps(tail)));
    for (int64_t j = i; j < count; ++j) out[j] = result[j - i];
    i = count;
  }
#endif
  for (; i < count; ++i) out[i] = std::exp(in[i] - shift);
}

}  // namespace tt
