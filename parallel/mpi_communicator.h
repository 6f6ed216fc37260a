// The MPI communicator (OpenMPI): MPI_COMM_WORLD over host buffers, for the CPU backend's
// ranks. Launch with `mpirun -np W build/tinytrain ...` (or Slurm's srun, where OpenMPI is
// built with it).
#pragma once
#include <memory>

#include "parallel/communicator.h"

namespace tt {

// Initialises MPI on first use (finalised at exit) and returns MPI_COMM_WORLD as a
// Communicator. Sums support F32 and I32. Throws std::runtime_error with MPI's message when a
// call fails (MPI_ERRORS_RETURN, not MPI's default abort). A collective still waiting after
// timeout_s (<= 0: no limit) ends the process with one line (collective_watchdog.h).
std::unique_ptr<Communicator> make_mpi_communicator(double timeout_s = 300);

}  // namespace tt
