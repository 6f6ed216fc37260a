// Launch-size helpers shared by the elementwise and reduction kernels of the CUDA backend.
#pragma once
#include <algorithm>
#include <cstdint>

namespace tt {

constexpr int kThreadsPerBlock = 256;

// ceil(a / b) for positive b
constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over `work` items with kThreadsPerBlock per block: enough to cover the
// work in one pass when it is small, capped so a huge buffer does not launch millions of
// blocks (the loop strides over the rest). Always at least one block.
inline unsigned int grid_stride_blocks(int64_t work) {
  const int64_t max_blocks = int64_t{1} << 16;
  return static_cast<unsigned int>(std::max<int64_t>(1, std::min(ceil_div(work, kThreadsPerBlock), max_blocks)));
}

}  // namespace tt
