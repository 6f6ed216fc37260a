// CPU helper (kernels/cpu/dropout_mask.cpp): the dropout factors of a contiguous index range,
// with one Philox call per four elements (the per-element dropout_scale would call Philox four
// times as often), and, where the CPU has AVX2 or AVX-512F (chosen at run time), many Philox
// calls at once in vector registers.
//
// Why it matters: the seed workload draws ~10M mask elements per step (forward and backward
// recompute the mask instead of storing it). One Philox4x32-10 call is 20 32x32->64-bit
// multiplies; done one call at a time that was a fifth of a 1-thread CPU step. The vector
// versions give the same bits (tests/test_dropout.cpp compares them element by element).
#pragma once
#include <cstdint>

#include "kernels/common/philox.h"
#include "kernels/cpu/cpu_simd.h"

namespace tt {

// out[i] = dropout_scale(key, start + i, p) for i in [0, count), with vector code up to `simd`
void dropout_scales(const DropoutKey& key, uint64_t start, int64_t count, float p, float* out,
                    CpuSimd simd = best_cpu_simd());

}  // namespace tt
