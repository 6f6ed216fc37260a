// CPU helper (kernels/cpu/vector_exp.cpp): exp of a shifted row, out[i] = expf(x[i] - shift),
// eight at a time, for the softmaxes (attention weights, cross-entropy).
//
// It gives glibc's expf bit for bit, not merely within an ulp: it runs the same algorithm with
// the same constants and the same fused multiply-adds as the x86-64 FMA build of glibc's expf
// (glibc >= 2.28, sysdeps/ieee754/flt-32/e_expf.c: x/ln2 split as k/32 + r, a 32-entry table
// of 2^(i/32), a degree-3 polynomial in r, all in double, one rounding to float at the end),
// on four doubles per AVX2 register. Keeping the bits matters: an earlier vector exp that was
// merely accurate to 1 ulp changed the softmaxes by an ulp here and there, which flipped the
// sign of AdamW's first step on noise-level gradients and failed PyTorch parity checks.
// tests/test_cpu_ops.cpp compares it with std::exp on millions of inputs across the range.
#pragma once
#include <cstdint>

#include "kernels/cpu/cpu_simd.h"

namespace tt {

// out[i] = std::exp(x[i] - shift) for i < n, the subtraction rounded in float first; out may
// be x itself (not a partial overlap). Arguments of magnitude 88 or more, infinities and NaNs
// go to std::exp itself, as does everything when simd is Scalar.
void exp_shifted(const float* x, float shift, int64_t n, float* out, CpuSimd simd = best_cpu_simd());

}  // namespace tt
