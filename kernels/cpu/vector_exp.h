// exp over a span of floats, 8 at a time where the CPU has AVX2 (kernels/cpu/vector_exp.cpp) (softmax in attention and
// cross-entropy). glibc's expf is scalar unless the whole program gives up IEEE semantics
// (-ffast-math), and the softmaxes of the seed workload take ~0.8M of them per step.
//
// The method (Cody and Waite's range reduction with a minimax polynomial, as in Cephes'
// expf): exp(x) = 2^n exp(r) with n = round(x / ln 2) and r = x - n ln 2, |r| <= ln 2 / 2,
// where n ln 2 is subtracted in two parts (ln 2 = 0.693359375 - 2.12194440e-4 to fp32
// precision) so that r keeps its low bits; exp(r) = 1 + r + r^2 P(r) with a degree-5 P; 2^n is
// built in the exponent bits. Within 1 ulp of the exact value on the normal range
// (tests/test_cpu_ops.cpp checks it against exp in double: 0.97 ulp at worst there, glibc's
// expf 0.50). Below -87.3 the result is 0 (expf gives denormals there: 4e-39 and less, nothing
// a softmax sum can see); above 88.37 it is inf (expf overflows at 88.72; a softmax only takes
// exp of x - max <= 0); NaN stays NaN.
#pragma once
#include <cstdint>

namespace tt {

// out[i] = exp(in[i] - shift) for i in [0, count); out may alias in.
void exp_shifted(const float* in, float shift, int64_t count, float* out);

}  // namespace tt
