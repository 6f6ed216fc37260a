// How this process was launched: which rank of how many, and which local device is its own.
// Read from the launcher's environment variables before anything is initialised, so that the
// CUDA backend can pick its GPU (LOCAL_RANK) before NCCL or MPI start.
#pragma once
#include <string>

namespace tt {

struct Launch {
  enum class Kind {
    Single,    // no launcher: one rank
    Mpi,       // mpirun / mpiexec (OMPI_COMM_WORLD_*), or srun with PMI/PMIx
    Torchrun,  // RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT without an MPI launcher
  };
  Kind kind = Kind::Single;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;         // this rank's index among the ranks of its node: its GPU
  std::string master_addr;    // Torchrun: rank 0's host
  int master_port = 0;        // Torchrun: the TCP port rank 0 listens on
  const char* kind_name() const;  // "single", "mpirun", "torchrun"
};

// Reads the launch from the environment. Throws std::runtime_error, one line naming the
// variable, for a malformed or inconsistent one: a non-integer or out-of-range RANK,
// WORLD_SIZE, LOCAL_RANK or MASTER_PORT; RANK >= WORLD_SIZE; WORLD_SIZE > 1 without
// MASTER_ADDR or MASTER_PORT. WORLD_SIZE=1 (or unset) without MPI is a single rank.
Launch detect_launch();

}  // namespace tt
