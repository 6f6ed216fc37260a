// The all-reduce bandwidth data parallelism gets (`tinytrain doctor` under a launch of several
// ranks): float32 sums in place, through the communicator training uses (MPI ranks on the CPU
// backend, NCCL ranks on the CUDA backend's stream), in nccl-tests' terms so the numbers compare
// with theirs:
//   algbw = bytes / time,   busbw = algbw x 2 (W - 1) / W
// A ring all-reduce moves 2 (W - 1) / W of the buffer through every rank's link, so busbw is the
// link speed achieved, whatever W is. The time is per all-reduce, the mean over the timed calls
// and then over the ranks (nccl-tests' default).
#pragma once
#include <cstdint>

#include "kernels/backend.h"
#include "parallel/communicator.h"

namespace tt {

struct AllReduceMeasure {
  int64_t bytes = 0;
  double seconds = 0;      // per all-reduce: the mean over the timed calls and the ranks
  bool sums_right = true;  // the first all-reduce gave every element the sum over ranks
  double algbw_gbps() const { return static_cast<double>(bytes) / seconds / 1e9; }
  double busbw_gbps(int world_size) const { return algbw_gbps() * 2.0 * (world_size - 1) / world_size; }
};

// Every rank of `comm` calls it with the same arguments. The buffer lives in `backend`'s memory
// (host memory for MPI, the device for NCCL). Rank r fills it with r + 1; the first all-reduce
// must give W (W + 1) / 2 everywhere (small integers: exact in float32). Then, on zeros,
// `warmup` untimed calls, a barrier, and `iters` calls timed on the backend's stream clock.
// `tinytrain doctor` measures one size with it, tools/nccl_busbw.cpp a sweep of sizes.
AllReduceMeasure measure_all_reduce(Communicator& comm, Backend& backend, int64_t bytes, int warmup, int iters);

}  // namespace tt
