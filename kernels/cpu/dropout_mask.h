// CPU helper (kernels/cpu/dropout_mask.cpp): the dropout factors of a contiguous index range,
// with one Philox call per four elements (the per-element dropout_scale would call Philox four
// times as often), and, where the CPU has AVX2, eight Philox calls at once in vector registers
// (sixteen where it has AVX-512F, chosen at run time).
//
// Why it matters: the seed workload draws ~10.5M mask elements per step (forward and backward
// recompute the mask instead of storing it). One Philox4x32-10 call is 20 32x32->64-bit
// multiplies; done one call at a time that was a fifth of a 1-thread CPU step. The 8-wide
// version gives the same bits (tests/test_dropout.cpp compares them element by element) about
// 3x faster.
#pragma once
#include <cstdint>

#include "kernels/common/philox.h"

namespace tt {

// out[i] = dropout_scale(key, start + i, p) for i in [0, count)
void dropout_scales(const DropoutKey& key, uint64_t start, int64_t count, float p, float* out);

}  // namespace tt
