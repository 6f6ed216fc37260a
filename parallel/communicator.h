// The collectives data parallelism needs, over flat buffers: one small interface, with an
// implementation per transport (parallel/README.md):
//   single  one rank: every collective is a copy or nothing (the default, no launcher);
//   mpi     OpenMPI, host buffers: the CPU backend's ranks, launched by mpirun (or srun);
//   nccl    NCCL, device buffers on the CUDA backend's stream (a later step).
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
};

// One rank, no transport: what a run without a launcher uses.
std::unique_ptr<Communicator> make_single_rank_communicator();

// True when this process was started by an MPI launcher (mpirun, mpiexec, srun with PMI/PMIx).
bool launched_by_mpi();

// The communicator for a run on the backend named `backend` ("cpu", "cuda"), from how the
// process was launched: MPI ranks under mpirun (CPU backend); one rank without a launcher.
// Throws std::runtime_error, one line, for a launch it cannot serve: torchrun-style
// variables (WORLD_SIZE > 1) without mpirun on the CPU, several ranks on the CUDA backend
// (NCCL: not built yet), mpirun with a build that has no MPI.
std::unique_ptr<Communicator> make_communicator(const std::string& backend);

}  // namespace tt
