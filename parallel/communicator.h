// The collectives data parallelism needs, over flat buffers: one small interface, with an
// implementation per transport (parallel/README.md):
//   single  one rank: every collective is a copy or nothing (the default, no launcher);
//   mpi     OpenMPI, host buffers: the CPU backend's ranks, launched by mpirun (or srun);
//   nccl    NCCL, device buffers on the CUDA backend's stream (parallel/nccl_communicator.h).
// The engine asks for a communicator and never names a transport. Every rank calls every
// collective in the same order with the same sizes (as with MPI and NCCL themselves).
// Sums are elementwise over ranks; the order in which ranks' values are added is the
// transport's, so a sum of more than two floats may differ in the last bit between
// transports (never between runs of one transport with the same world size).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/tensor.h"
#include "parallel/rank_launch.h"

namespace tt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const char* transport() const = 0;  // "single", "mpi", "nccl"

  // buf (n elements): replaced, on every rank, by the sum over ranks.
  virtual void all_reduce_sum(void* buf, int64_t n, DType dtype) = 0;
  // send (world_size * n elements) -> recv (n): rank r gets the sum over ranks of chunk r,
  // send[r*n, (r+1)*n). ZeRO-1's gradient step: each rank keeps the sum of its shard.
  virtual void reduce_scatter_sum(const void* send, void* recv, int64_t n, DType dtype) = 0;
  // send (n elements) -> recv (world_size * n): rank r's send lands at recv[r*n, (r+1)*n).
  // ZeRO-1's parameter step: every rank gets every shard back.
  virtual void all_gather(const void* send, void* recv, int64_t n, DType dtype) = 0;
  // buf (n elements): root's values, on every rank.
  virtual void broadcast(void* buf, int64_t n, DType dtype, int root) = 0;
  virtual void barrier() = 0;

  // ---- overlap: collectives on the backend's stream ----
  // True when collectives are enqueued on the backend's stream (NCCL): they are then ordered
  // with the backend's ops, never wait on the host, and are captured in its CUDA graph. False
  // (single, mpi): a call runs the collective on host memory before it returns, so the caller
  // synchronises the backend first and keeps it out of graphs.
  virtual bool on_backend_stream() const { return false; }
  // A sum all-reduce that may overlap what the backend runs next (gradient buckets during the
  // backward): ordered after everything enqueued so far, it runs on a second stream beside
  // what is enqueued after it, until join_async() orders the backend's stream after every
  // such call. Host transports run it at once.
  virtual void all_reduce_sum_async(void* buf, int64_t n, DType dtype) { all_reduce_sum(buf, n, dtype); }
  virtual void join_async() {}
  // Brackets host work that may wait behind collectives already enqueued on the backend's
  // stream (NCCL: a training step's copies and loss reads wait for its all-reduces, which wait
  // for every other rank): lasting longer than the timeout ends the process with one line, as
  // a blocking collective does (collective_watchdog.h). Host transports time each call already.
  virtual void begin_host_wait(const char* /*what*/) {}
  virtual void end_host_wait() {}
};

// RAII: Communicator::begin_host_wait for a scope (nothing for a null communicator).
class HostWait {
 public:
  HostWait(Communicator* comm, const char* what) : comm_(comm) {
    if (comm_) comm_->begin_host_wait(what);
  }
  ~HostWait() {
    if (comm_) comm_->end_host_wait();
  }
  HostWait(const HostWait&) = delete;
  HostWait& operator=(const HostWait&) = delete;

 private:
  Communicator* comm_;
};

// One rank, no transport: what a run without a launcher uses.
std::unique_ptr<Communicator> make_single_rank_communicator();

// The communicator for a run on the backend named `backend` ("cpu", "cuda"), from how the
// process was launched (parallel/rank_launch.h): one rank without a launcher; MPI ranks under
// mpirun on the CPU backend; NCCL ranks on the CUDA backend, bootstrapped by MPI under mpirun
// or by rank 0 over TCP under torchrun-style variables. `backend_stream` is the CUDA backend's
// stream (Backend::native_stream()). A collective that waits longer than timeout_s for the
// other ranks ends the process with one line (a rank died or hangs): never a hang.
// Throws std::runtime_error, one line, for a launch it cannot serve: torchrun-style variables
// on the CPU backend (CPU ranks are launched with mpirun), mpirun with a build without MPI,
// several ranks on the CUDA backend of a build without NCCL.
std::unique_ptr<Communicator> make_communicator(const Launch& launch, const std::string& backend,
                                                void* backend_stream, double timeout_s);

}  // namespace tt
