// The vector exp of kernels/cpu/vector_exp.h. In a .cpp of the CPU backend so that it is
// compiled with the backend's AVX2/FMA flags wherever it is called from, tests included.
#include "kernels/cpu/vector_exp.h"

#include <cmath>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace tt {

namespace {

#if defined(__AVX2__) && defined(__FMA__)
// glibc's constants (e_exp2f_data.c), N = 32 table entries:
constexpr double kInvLn2N = 0x1.71547652b82fep+0 * 32;  // N / ln 2
constexpr double kShift = 0x1.8p+52;                      // adding it rounds to an integer, kept in the low bits
// the polynomial for 2^(r/N) - 1 ~ C0 r^3 + C1 r^2 + C2 r (minimax coefficients for 2^r, scaled by N^-k)
constexpr double kC0 = 0x1.c6af84b912394p-5 / (32.0 * 32.0 * 32.0);
constexpr double kC1 = 0x1.ebfce50fac4f3p-3 / (32.0 * 32.0);
constexpr double kC2 = 0x1.62e42ff0c52d6p-1 / 32.0;

// tab[i] = bits of 2^(i/32), less i << 47, so that adding k << 47 (k the integer with k mod 32
// = i) puts k / 32 into the exponent: s = 2^(k/32) exactly as glibc builds it.
struct Exp2Table {
  int64_t tab[32];
  Exp2Table() {
    for (int i = 0; i < 32; ++i) {
      const double two_to_i_over_n = static_cast<double>(std::exp2(static_cast<long double>(i) / 32));
      std::memcpy(&tab[i], &two_to_i_over_n, sizeof(double));
      tab[i] -= static_cast<int64_t>(i) << 47;
    }
  }
};
const Exp2Table kTable;

// expf of 4 floats, in double as glibc computes it (valid for |x| < 88)
__m128 exp4(__m128 x) {
  const __m256d xd = _mm256_cvtps_pd(x);
  const __m256d inv_ln2_n = _mm256_set1_pd(kInvLn2N), shift = _mm256_set1_pd(kShift);
  const __m256d k_shifted = _mm256_fmadd_pd(inv_ln2_n, xd, shift);  // round(x N / ln 2) + shift
  const __m256i k = _mm256_castpd_si256(k_shifted);                 // its low bits are the integer k
  const __m256d kd = _mm256_sub_pd(k_shifted, shift);
  const __m256d r = _mm256_fmsub_pd(inv_ln2_n, xd, kd);  // x N / ln 2 = k + r, |r| <= 1/2
  const __m256i entry = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kTable.tab),
                                               _mm256_and_si256(k, _mm256_set1_epi64x(31)), 8);
  const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(entry, _mm256_slli_epi64(k, 47)));  // 2^(k/N)
  const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(kC0), r, _mm256_set1_pd(kC1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(kC2), r, _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(z, r2, y);
  return _mm256_cvtpd_ps(_mm256_mul_pd(y, s));  // 2^(k/N) 2^(r/N), rounded once to float
}
#endif

}  // namespace

void exp_shifted(const float* x, float shift, int64_t n, float* out, CpuSimd simd) {
  int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
  const int64_t vector_end = simd == CpuSimd::Scalar ? 0 : n;  // (Scalar: the loop below does it all)
  const __m256 shift8 = _mm256_set1_ps(shift);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), big = _mm256_set1_epi32(0x42afffff);  // |x| >= 88.0f
  for (; i + 8 <= vector_end; i += 8) {
    const __m256 xs = _mm256_sub_ps(_mm256_loadu_ps(x + i), shift8);
    const __m256 e = _mm256_set_m128(exp4(_mm256_extractf128_ps(xs, 1)), exp4(_mm256_castps256_ps128(xs)));
    _mm256_storeu_ps(out + i, e);
    // |x| >= 88, inf and NaN (whose bits compare above as integers) take glibc's special cases
    const __m256i abs_bits = _mm256_and_si256(_mm256_castps_si256(xs), abs_mask);
    const int special = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(abs_bits, big)));
    if (special) {
      alignas(32) float lanes[8];
      _mm256_store_ps(lanes, xs);
      for (int l = 0; l < 8; ++l)
        if (special & (1 << l)) out[i + l] = std::exp(lanes[l]);
    }
  }
#else
  (void)simd;
#endif
  for (; i < n; ++i) out[i] = std::exp(x[i] - shift);
}

}  // namespace tt
