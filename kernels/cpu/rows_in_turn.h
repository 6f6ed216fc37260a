// CPU helper: reductions along rows that must stay in order (a sum, a max: the result depends on
// the order), run for several rows at once.
//
// A sum over a row is a chain: each add waits for the one before (4 cycles on current cores),
// so one row at a time leaves the adders idle most of the time. Here the rows take turns: at
// each index j every row does its step j, so the chains of kRows rows are in flight together.
// Each row still runs its steps in increasing j, exactly as it would alone: the same bits.
#pragma once
#include <algorithm>

namespace tt {

// Rows per group for the CPU kernels' row reductions (softmaxes, cross-entropy, LayerNorm):
// enough chains to keep the adders busy, few enough accumulators for the registers.
constexpr int kRowsInTurn = 8;

// step(r, j) for r < kRows and j < length(r), in increasing j within each row.
template <int kRows, typename Length, typename Step>
inline void rows_in_turn(Length length, Step step) {
  int common = length(0);
  for (int r = 1; r < kRows; ++r) common = std::min(common, length(r));
  for (int j = 0; j < common; ++j)
    for (int r = 0; r < kRows; ++r) step(r, j);
  for (int r = 0; r < kRows; ++r)
    for (int j = common; j < length(r); ++j) step(r, j);
}

}  // namespace tt
