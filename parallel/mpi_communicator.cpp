// MPI_COMM_WORLD as a Communicator. MPI counts are int: all-reduce and broadcast work in
// chunks of at most 2^30 elements (elementwise, so chunking changes nothing); reduce-scatter
// and all-gather need each rank's share to fit one call. Every blocking call runs under the
// collective watchdog (collective_watchdog.h): a peer that died or hangs ends this rank too,
// after --comm-timeout, with one line.
#include "parallel/mpi_communicator.h"

#include "parallel/collective_watchdog.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace tt {
namespace {

constexpr int64_t kMaxChunk = int64_t{1} << 30;

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(text, static_cast<size_t>(length)));
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return MPI_FLOAT;
    case DType::I32: return MPI_INT;
    default:
      throw std::invalid_argument(std::string("MPI communicator: no sum for ") + dtype_name(dtype) +
                                  " (reduce in F32)");
  }
}

int count_of(int64_t n, const char* call) {
  if (n < 0 || n > kMaxChunk) throw std::invalid_argument(std::string(call) + ": " + std::to_string(n) + " elements per rank is beyond one MPI call");
  return static_cast<int>(n);
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_s) {
    int initialized = 0;
    check(MPI_Initialized(&initialized), "MPI_Initialized");
    if (!initialized) {
      // FUNNELED: only the thread that initialised MPI calls it (OpenMP threads never do).
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit(finalize_at_exit);
    }
    check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
    watchdog_ = std::make_unique<CollectiveWatchdog>(timeout_s, rank_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  const char* transport() const override { return "mpi"; }

  void all_reduce_sum(void* buf, int64_t n, DType dtype) override {
    const MPI_Datatype type = mpi_type(dtype);
    char* bytes = static_cast<char*>(buf);
    for (int64_t done = 0; done < n; done += kMaxChunk) {
      const int count = static_cast<int>(std::min(kMaxChunk, n - done));
      WatchedCall watched(*watchdog_, "MPI_Allreduce");
      check(MPI_Allreduce(MPI_IN_PLACE, bytes + done * dtype_size(dtype), count, type, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
    }
  }

  void reduce_scatter_sum(const void* send, void* recv, int64_t n, DType dtype) override {
    WatchedCall watched(*watchdog_, "MPI_Reduce_scatter_block");
    check(MPI_Reduce_scatter_block(send, recv, count_of(n, "reduce_scatter_sum"), mpi_type(dtype), MPI_SUM,
                                   MPI_COMM_WORLD),
          "MPI_Reduce_scatter_block");
  }

  void all_gather(const void* send, void* recv, int64_t n, DType dtype) override {
    const int count = count_of(n, "all_gather");
    const MPI_Datatype type = mpi_type(dtype);
    // In place when this rank's chunk already sits at its slot of recv (ZeRO-1's parameters).
    const bool in_place = send == static_cast<const char*>(recv) + static_cast<int64_t>(rank_) * n * dtype_size(dtype);
    WatchedCall watched(*watchdog_, "MPI_Allgather");
    check(MPI_Allgather(in_place ? MPI_IN_PLACE : send, count, type, recv, count, type, MPI_COMM_WORLD),
          "MPI_Allgather");
  }

  void broadcast(void* buf, int64_t n, DType dtype, int root) override {
    const MPI_Datatype type = mpi_type(dtype);
    char* bytes = static_cast<char*>(buf);
    for (int64_t done = 0; done < n; done += kMaxChunk) {
      const int count = static_cast<int>(std::min(kMaxChunk, n - done));
      WatchedCall watched(*watchdog_, "MPI_Bcast");
      check(MPI_Bcast(bytes + done * dtype_size(dtype), count, type, root, MPI_COMM_WORLD), "MPI_Bcast");
    }
  }

  void barrier() override {
    WatchedCall watched(*watchdog_, "MPI_Barrier");
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }

 private:
  int rank_ = 0, size_ = 1;
  std::unique_ptr<CollectiveWatchdog> watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_s) {
  return std::make_unique<MpiCommunicator>(timeout_s);
}

}  // namespace tt
