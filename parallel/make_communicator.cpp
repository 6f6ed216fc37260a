// Which communicator a run gets, from how its process was launched (communicator.h).
#include <stdexcept>
#include <string>

#include "parallel/communicator.h"
#ifdef TINYTRAIN_HAVE_MPI
#include "parallel/mpi_communicator.h"
#endif
#ifdef TINYTRAIN_HAVE_NCCL
#include "parallel/nccl_communicator.h"
#include "parallel/tcp_rendezvous.h"
#endif

namespace tt {
namespace {

#ifdef TINYTRAIN_HAVE_NCCL
// NCCL ranks need rank 0's unique id: under mpirun MPI broadcasts it (MPI then stays up only
// for that), under torchrun-style variables rank 0 sends it over TCP.
std::unique_ptr<Communicator> nccl_ranks(const Launch& launch, void* stream, double timeout_s) {
  if (launch.kind == Launch::Kind::Torchrun)
    return make_nccl_communicator(launch.rank, launch.world_size, stream, timeout_s,
                                  [&](void* data, size_t bytes) { tcp_share_from_rank0(launch, data, bytes, timeout_s); });
#ifdef TINYTRAIN_HAVE_MPI
  std::unique_ptr<Communicator> mpi = make_mpi_communicator(timeout_s);
  return make_nccl_communicator(mpi->rank(), mpi->world_size(), stream, timeout_s, [&](void* data, size_t bytes) {
    mpi->broadcast(data, static_cast<int64_t>(bytes / sizeof(int32_t)), DType::I32, 0);  // the id: 128 bytes
  });
#else
  (void)stream;
  throw std::runtime_error("launched by mpirun, but this build has no MPI: launch NCCL ranks torchrun-style "
                           "(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)");
#endif
}
#endif

}  // namespace

std::unique_ptr<Communicator> make_communicator(const Launch& launch, const std::string& backend,
                                                void* backend_stream, double timeout_s) {
  if (launch.kind == Launch::Kind::Single) return make_single_rank_communicator();
  if (backend == "cuda") {
#ifdef TINYTRAIN_HAVE_NCCL
    return nccl_ranks(launch, backend_stream, timeout_s);
#else
    (void)backend_stream;
    throw std::runtime_error("several ranks on the CUDA backend need NCCL, and this build has none "
                             "(install NCCL or set NCCL_ROOT, then rebuild)");
#endif
  }
  if (backend != "cpu")
    throw std::runtime_error("data parallelism runs on the cpu (MPI) and cuda (NCCL) backends, not on " + backend);
  if (launch.kind == Launch::Kind::Torchrun)
    throw std::runtime_error("WORLD_SIZE=" + std::to_string(launch.world_size) +
                             " without mpirun on the CPU backend: CPU ranks are launched with mpirun -np N "
                             "(torchrun-style variables start NCCL ranks, on the CUDA backend)");
#ifdef TINYTRAIN_HAVE_MPI
  return make_mpi_communicator(timeout_s);
#else
  throw std::runtime_error("launched by mpirun, but this build has no MPI (install libopenmpi-dev and rebuild)");
#endif
}

}  // namespace tt
