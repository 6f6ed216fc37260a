// Launch detection (rank_launch.h): which launcher started this process (none, mpirun or srun,
// torchrun) and this rank's place in the job, read from the launcher's environment variables.
// Every number is parsed strictly: a typo in a hand-set variable stops the job with one line
// naming it, instead of training with a silently wrong rank.
#include "parallel/rank_launch.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace tt {
namespace {

// Far beyond any job this engine is meant for: a bigger number is more likely a typo.
constexpr long long kMaxWorldSize = 65536;
// A value is quoted in a message up to this many characters (a pasted file must not flood the log).
constexpr size_t kMaxQuoted = 64;

// The variable's value, or nullptr when it is not in the environment.
const char* env(const char* name) { return std::getenv(name); }

// NAME=VALUE for a one-line message: at most kMaxQuoted characters of the value, each
// non-printable one (a newline, an escape) shown as '?', and "..." when it was cut.
std::string setting(const char* name, const std::string& value) {
  std::string out = std::string(name) + "=";
  for (size_t i = 0; i < value.size() && i < kMaxQuoted; ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (value.size() > kMaxQuoted) out += "...";
  return out;
}

// A whole string of decimal digits -> its value. Anything else (empty, a sign, spaces, "0x10",
// "1.0") is refused. The value saturates far above every range checked here, so a long run of
// digits reads as out of range instead of overflowing.
bool parse_decimal(const std::string& text, long long* value) {
  if (text.empty()) return false;
  long long v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v > 1'000'000'000'000LL ? v : v * 10 + (c - '0');
  }
  *value = v;
  return true;
}

// NAME's value as an integer in [lo, hi]; what_in_range completes "NAME=x is not ...".
int read_int(const char* name, const std::string& value, long long lo, long long hi, const char* what_in_range) {
  long long v = 0;
  if (!parse_decimal(value, &v) || v < lo || v > hi)
    throw std::runtime_error(setting(name, value) + " is not " + what_in_range);
  return static_cast<int>(v);
}

// A rank variable's value, below the world size read from size_name.
int read_rank(const char* name, const std::string& value, const char* size_name, int world_size) {
  long long v = 0;
  if (!parse_decimal(value, &v))
    throw std::runtime_error(setting(name, value) + " is not a rank: a whole decimal number below " + size_name + "=" +
                             std::to_string(world_size));
  if (v >= world_size)
    throw std::runtime_error(setting(name, value) + " is not below " + size_name + "=" + std::to_string(world_size));
  return static_cast<int>(v);
}

int read_world_size(const char* name, const std::string& value) {
  return read_int(name, value, 1, kMaxWorldSize, "a world size in [1, 65536]");
}

int read_local_rank(const char* name, const std::string& value) {
  return read_int(name, value, 0, kMaxWorldSize - 1, "a local rank in [0, 65536)");
}

// mpirun / mpiexec / srun. Each launcher family names rank and size its own way; the first
// family whose size variable is set gives both (a missing rank variable beside it reads as 0).
// Where none is set (PMIx alone) the defaults stay: the MPI communicator asks MPI itself
// later, and what matters here is the local rank, which picks the GPU.
Launch mpi_launch() {
  Launch launch;
  launch.kind = Launch::Kind::Mpi;
  static const char* const kFamilies[][2] = {
      {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},  // OpenMPI's mpirun
      {"PMI_SIZE", "PMI_RANK"},                          // MPICH's Hydra, srun --mpi=pmi2
      {"SLURM_NTASKS", "SLURM_PROCID"},                  // srun (here with PMIx)
  };
  for (const auto& family : kFamilies) {
    const char* size = env(family[0]);
    if (!size) continue;
    launch.world_size = read_world_size(family[0], size);
    if (const char* rank = env(family[1])) launch.rank = read_rank(family[1], rank, family[0], launch.world_size);
    break;
  }
  // The local rank: OpenMPI's, else MPICH Hydra's, else Slurm's.
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* local = env(name)) {
      launch.local_rank = read_local_rank(name, local);
      break;
    }
  }
  return launch;
}

// "WORLD_SIZE=2 needs MASTER_ADDR (rank 0's host name or address), as torchrun sets it"
std::runtime_error missing(int world_size, const char* name, const char* meaning) {
  return std::runtime_error("WORLD_SIZE=" + std::to_string(world_size) + " needs " + name + " (" + meaning +
                            "), as torchrun sets it");
}

// torchrun (or any launcher that sets its variables). world_text: WORLD_SIZE's value.
Launch torchrun_launch(const std::string& world_text) {
  Launch launch;
  const int world_size = read_world_size("WORLD_SIZE", world_text);
  const char* rank = env("RANK");
  if (world_size == 1) {
    // One rank: nothing to meet, but a RANK beside it must still agree.
    if (rank) read_rank("RANK", rank, "WORLD_SIZE", 1);
    return launch;
  }
  launch.kind = Launch::Kind::Torchrun;
  launch.world_size = world_size;
  if (!rank) throw missing(world_size, "RANK", "this process's rank, below WORLD_SIZE");
  launch.rank = read_rank("RANK", rank, "WORLD_SIZE", world_size);
  // torchrun always sets LOCAL_RANK; a hand-made launch without it is taken as one rank per
  // node, each using its node's first device.
  if (const char* local = env("LOCAL_RANK")) launch.local_rank = read_local_rank("LOCAL_RANK", local);
  const char* addr = env("MASTER_ADDR");
  if (!addr || !*addr) throw missing(world_size, "MASTER_ADDR", "rank 0's host name or address");
  launch.master_addr = addr;
  const char* port = env("MASTER_PORT");
  if (!port) throw missing(world_size, "MASTER_PORT", "the TCP port rank 0 listens on");
  launch.master_port = read_int("MASTER_PORT", port, 1, 65535, "a port number in [1, 65535]");
  return launch;
}

}  // namespace

const char* Launch::kind_name() const {
  switch (kind) {
    case Kind::Single: return "single";
    case Kind::Mpi: return "mpirun";
    case Kind::Torchrun: return "torchrun";
  }
  return "single";
}

Launch detect_launch() {
  // An MPI launcher first: mpirun may pass the user's RANK or WORLD_SIZE through, but its own
  // variables are the truth.
  if (env("OMPI_COMM_WORLD_SIZE") || env("PMI_SIZE") || env("PMIX_RANK")) return mpi_launch();
  if (const char* world = env("WORLD_SIZE")) return torchrun_launch(world);
  return Launch{};
}

}  // namespace tt
