// The one-rank communicator: the sum over one rank is the buffer itself, and rank 0's chunk
// is the whole send buffer.
#include <cstring>

#include "parallel/communicator.h"

namespace tt {
namespace {

class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const char* transport() const override { return "single"; }
  void all_reduce_sum(void*, int64_t, DType) override {}
  void reduce_scatter_sum(const void* send, void* recv, int64_t n, DType dtype) override { copy(send, recv, n, dtype); }
  void all_gather(const void* send, void* recv, int64_t n, DType dtype) override { copy(send, recv, n, dtype); }
  void broadcast(void*, int64_t, DType, int) override {}
  void barrier() override {}

 private:
  // Host memory: the single rank serves the CPU backend (a CUDA one-rank run needs no
  // collective at all, and the engine skips them when world_size is 1).
  static void copy(const void* send, void* recv, int64_t n, DType dtype) {
    if (send != recv && n > 0) std::memmove(recv, send, static_cast<size_t>(n) * dtype_size(dtype));
  }
};

}  // namespace

std::unique_ptr<Communicator> make_single_rank_communicator() { return std::make_unique<SingleRankCommunicator>(); }

}  // namespace tt
