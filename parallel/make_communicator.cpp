// Which communicator a run gets, from how its process was launched (communicator.h).
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "parallel/communicator.h"
#ifdef TINYTRAIN_HAVE_MPI
#include "parallel/mpi_communicator.h"
#endif

namespace tt {

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(var) != nullptr) return true;
  return false;
}

std::unique_ptr<Communicator> make_communicator(const std::string& backend) {
  if (launched_by_mpi()) {
#ifdef TINYTRAIN_HAVE_MPI
    std::unique_ptr<Communicator> comm = make_mpi_communicator();
    if (comm->world_size() > 1 && backend != "cpu")
      throw std::runtime_error("data parallelism on the " + backend +
                               " backend needs NCCL, which is not built yet: run several ranks with --backend cpu");
    return comm;
#else
    throw std::runtime_error("launched by mpirun, but this build has no MPI (install libopenmpi-dev and rebuild)");
#endif
  }
  const char* world = std::getenv("WORLD_SIZE");
  if (world != nullptr && std::string(world) != "1")
    throw std::runtime_error("WORLD_SIZE=" + std::string(world) +
                             " without mpirun: CPU ranks are launched with mpirun -np N (torchrun-style variables are "
                             "for the NCCL path, not built yet)");
  return make_single_rank_communicator();
}

}  // namespace tt
