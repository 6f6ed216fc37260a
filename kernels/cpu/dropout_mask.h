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

// Calls block(start, count, factor) for the blocks [start, start + count) of an n-element mask,
// factor holding their dropout factors (dropout_scales); OpenMP threads over blocks. Blocks hold
// a multiple of 4 elements so each Philox group stays in one block. The CPU's dropout and fused
// activation-dropout ops are each one such loop.
template <typename Block>
void for_each_mask_block(int64_t n, const DropoutMask& dropout, CpuSimd simd, Block block) {
  constexpr int64_t kBlock = 256;
  const DropoutKey key = dropout.key();
#pragma omp parallel for
  for (int64_t start = 0; start < n; start += kBlock) {
    float factor[kBlock];
    const int64_t count = start + kBlock <= n ? kBlock : n - start;
    dropout_scales(key, dropout.index_offset + static_cast<uint64_t>(start), count, dropout.p, factor, simd);
    block(start, count, factor);
  }
}

}  // namespace tt
