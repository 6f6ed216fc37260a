// nccl_busbw: the all-reduce bandwidth that data parallelism gets, measured through tinytrain's
// own NCCL communicator (in place, float32 sums, on the CUDA backend's stream) and reported in
// nccl-tests' terms, so the numbers compare with theirs:
//   algbw = bytes / time,   busbw = algbw * 2 (W - 1) / W
// (a ring all-reduce moves 2 (W - 1) / W of the buffer through every rank's link, so busbw is
// the link speed achieved, whatever W is). Time is per all-reduce, averaged over the timed
// iterations and then over the ranks, as nccl-tests does by default. Calls are eager, as in an
// uncaptured training step: at small sizes the host's cost of each call (a non-blocking NCCL
// call finishes its launch on a thread of NCCL's) can dominate. Each size is one
// measure_all_reduce (engine/doctor/allreduce_probe.h, what `tinytrain doctor` measures under a launch):
// its first sum checked, then timed with CUDA events on the backend's stream.
//
//   nccl_busbw --ranks 2        forks 2 ranks here. Rank r runs on GPU r % (GPU count); when
//                               ranks share a GPU, each gets its own NCCL_HOSTID (NCCL refuses
//                               two ranks of one host on one GPU), so NCCL treats them as two
//                               hosts and moves data through its network transport (sockets
//                               on the loopback interface): a check of the whole path, not a
//                               measure of NVLink.
//   torchrun-style or mpirun    one process per rank (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
//                               MASTER_PORT, or mpirun's variables): rank r on GPU LOCAL_RANK.
// Options: --min-bytes 1M --max-bytes 256M (doubling) --warmup 5 --iters 20 --timeout 60 (s,
// per collective, as --comm-timeout). Rank 0 prints one row per size, then
// "busbw at <bytes> bytes: <GB/s> GB/s" for the largest. Without a usable GPU: one line on
// stderr, exit status 1.
#include <cuda_runtime.h>
#include <nccl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/doctor/allreduce_probe.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/device_query.h"
#include "parallel/communicator.h"
#include "parallel/rank_launch.h"
#include "parallel/nccl_communicator.h"

namespace tt {
namespace {

struct Options {
  int ranks = 2;  // forked ranks (ignored under a launcher)
  size_t min_bytes = size_t{1} << 20;
  size_t max_bytes = size_t{256} << 20;
  int warmup = 5;
  int iters = 20;
  double timeout_s = 60;
};

// "4096", "64K", "1M", "2G" -> bytes
size_t parse_bytes(const std::string& text) {
  size_t used = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    throw std::runtime_error("'" + text + "' is not a size (e.g. 4096, 64K, 1M, 2G)");
  }
  const std::string unit = text.substr(used);
  if (unit == "K") value <<= 10;
  else if (unit == "M") value <<= 20;
  else if (unit == "G") value <<= 30;
  else if (!unit.empty()) throw std::runtime_error("'" + text + "' is not a size (e.g. 4096, 64K, 1M, 2G)");
  return static_cast<size_t>(value);
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("usage: nccl_busbw [--ranks N] [--min-bytes 1M] [--max-bytes 256M] [--warmup 5] [--iters 20] "
                  "[--timeout 60]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::runtime_error(flag + " needs a value (--help)");
    const std::string value = argv[++i];
    try {
      if (flag == "--ranks") o.ranks = std::stoi(value);
      else if (flag == "--min-bytes") o.min_bytes = parse_bytes(value);
      else if (flag == "--max-bytes") o.max_bytes = parse_bytes(value);
      else if (flag == "--warmup") o.warmup = std::stoi(value);
      else if (flag == "--iters") o.iters = std::stoi(value);
      else if (flag == "--timeout") o.timeout_s = std::stod(value);
      else throw std::runtime_error("unknown option " + flag + " (--help)");
    } catch (const std::logic_error&) {  // stoi / stod: not a number
      throw std::runtime_error(flag + " " + value + ": not a number");
    }
  }
  if (o.ranks < 1) throw std::runtime_error("--ranks must be at least 1");
  if (o.min_bytes < sizeof(float) || o.min_bytes > o.max_bytes)
    throw std::runtime_error("need 4 <= --min-bytes <= --max-bytes");
  if (o.warmup < 0 || o.iters < 1) throw std::runtime_error("need --warmup >= 0 and --iters >= 1");
  return o;
}

// One rank's measurement. `how` describes the launch for rank 0's header line.
void measure(Communicator& comm, Backend& backend, const Options& o, const std::string& how) {
  const int world = comm.world_size();
  const bool printing = comm.rank() == 0;
  int version = 0;  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch
  ncclGetVersion(&version);
  if (printing) {
    std::printf("nccl_busbw: %d rank(s), %s; NCCL %d.%d.%d; float32 sum in place, %d iterations after %d warm-up\n",
                world, how.c_str(), version / 10000, version / 100 % 100, version % 100, o.iters, o.warmup);
    std::printf("%14s %12s %12s %12s\n", "bytes", "time_us", "algbw_GB/s", "busbw_GB/s");
    std::fflush(stdout);
  }
  double last_bytes = 0, last_busbw = 0;
  for (size_t size = o.min_bytes;; size *= 2) {
    const AllReduceMeasure m = measure_all_reduce(comm, backend, static_cast<int64_t>(size), o.warmup, o.iters);
    if (!m.sums_right)
      throw std::runtime_error("the all-reduce of " + std::to_string(m.bytes) + " bytes gave wrong sums");
    if (printing) {
      std::printf("%14lld %12.2f %12.2f %12.2f\n", static_cast<long long>(m.bytes), m.seconds * 1e6, m.algbw_gbps(),
                  m.busbw_gbps(world));
      std::fflush(stdout);
    }
    last_bytes = static_cast<double>(m.bytes);
    last_busbw = m.busbw_gbps(world);
    if (size > o.max_bytes / 2) break;  // the next size is past --max-bytes (tested so, it cannot overflow)
  }
  if (printing) std::printf("busbw at %.0f bytes: %.2f GB/s\n", last_bytes, last_busbw);
}

// Under torchrun-style variables or mpirun: this process is one rank.
int run_launched(const Launch& launch, const Options& o) {
  const CudaDeviceInfo gpu = query_cuda_device();
  if (!gpu.usable) throw std::runtime_error(gpu.reason);
  CudaOptions cuda;
  cuda.device = launch.local_rank;
  std::unique_ptr<Backend> backend = make_cuda_backend(cuda);
  std::unique_ptr<Communicator> comm = make_communicator(launch, "cuda", backend->native_stream(), o.timeout_s);
  measure(*comm, *backend, o, std::string("launched by ") + launch.kind_name() + ", rank r on GPU LOCAL_RANK");
  return 0;
}

// ---- forked ranks ----
// CUDA must not be initialised in a process that forks afterwards (the children could not
// use it), so the parent never calls CUDA: a first child says whether there is a GPU and how
// many, then one child per rank runs the measurement.

// Runs in a child: writes "<count>" or "0 <why>" to fd.
void probe_gpus(int fd) {
  const CudaDeviceInfo gpu = query_cuda_device();
  int count = 0;
  if (gpu.usable && cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  const std::string answer = gpu.usable ? std::to_string(count) : "0 " + gpu.reason;
  if (write(fd, answer.data(), answer.size()) < 0) std::_Exit(1);
  std::_Exit(0);
}

// The probe's answer: the GPU count, or 0 and the reason in `why`.
int count_gpus(std::string& why) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    probe_gpus(fds[1]);
  }
  close(fds[1]);
  std::string answer;
  char chunk[256];
  ssize_t got = 0;
  while ((got = read(fds[0], chunk, sizeof chunk)) > 0) answer.append(chunk, static_cast<size_t>(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const int count = std::atoi(answer.c_str());
  if (count == 0) why = answer.size() > 2 ? answer.substr(2) : "the GPU probe failed";
  return count;
}

// Reads exactly `bytes` from fd within timeout_s; false when the writer went away or is late.
bool read_exactly(int fd, void* data, size_t bytes, double timeout_s) {
  char* out = static_cast<char*>(data);
  size_t done = 0;
  while (done < bytes) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout_s * 1000)) <= 0) return false;
    const ssize_t got = read(fd, out + done, bytes - done);
    if (got <= 0) return false;
    done += static_cast<size_t>(got);
  }
  return true;
}

// One forked rank: its GPU, its host id when GPUs are shared, the id from rank 0 through
// the pipes (rank 0 writes to id_pipes[r] for every other rank r; rank r reads its own).
int run_forked_rank(int rank, const Options& o, int gpus, const std::vector<int>& id_pipes) {
  if (gpus < o.ranks) {
    const std::string host = "nccl_busbw-" + std::to_string(getppid()) + "-rank" + std::to_string(rank);
    setenv("NCCL_HOSTID", host.c_str(), 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);  // the "hosts" are this machine: loopback, unless set
    setenv("NCCL_IB_DISABLE", "1", 0);
  }
  CudaOptions cuda;
  cuda.device = rank % gpus;
  std::unique_ptr<Backend> backend = make_cuda_backend(cuda);
  const auto share = [&](void* data, size_t bytes) {
    if (rank == 0) {
      for (int r = 1; r < o.ranks; ++r)
        if (write(id_pipes[r], data, bytes) != static_cast<ssize_t>(bytes))
          throw std::runtime_error("could not hand NCCL's id to rank " + std::to_string(r));
    } else if (!read_exactly(id_pipes[rank], data, bytes, o.timeout_s)) {
      throw std::runtime_error("rank 0 did not hand over NCCL's id");
    }
  };
  std::unique_ptr<Communicator> comm =
      make_nccl_communicator(rank, o.ranks, backend->native_stream(), o.timeout_s, share);
  const std::string how = gpus < o.ranks
                              ? "forked, sharing " + std::to_string(gpus) + " GPU(s): NCCL_HOSTID per rank, so NCCL's "
                                "network transport"
                              : "forked, one GPU each";
  measure(*comm, *backend, o, how);
  return 0;
}

int run_forked(const Options& o) {
  std::string why;
  const int gpus = count_gpus(why);
  if (gpus == 0) throw std::runtime_error(why);
  // id_pipes[r]: rank 0 -> rank r (r >= 1); both ends stay open in every child until it
  // closes the ones it does not use.
  std::vector<int> read_end(o.ranks, -1), write_end(o.ranks, -1);
  for (int r = 1; r < o.ranks; ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
    read_end[r] = fds[0];
    write_end[r] = fds[1];
  }
  std::vector<pid_t> pids;
  for (int rank = 0; rank < o.ranks; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
      std::vector<int> mine(o.ranks, -1);
      for (int r = 1; r < o.ranks; ++r) {
        if (rank == 0) {
          close(read_end[r]);
          mine[r] = write_end[r];
        } else {
          close(write_end[r]);
          if (r == rank) mine[r] = read_end[r];
          else close(read_end[r]);
        }
      }
      int code = 1;
      try {
        code = run_forked_rank(rank, o, gpus, mine);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "nccl_busbw: rank %d: %s\n", rank, e.what());
      }
      std::fflush(stdout);
      std::_Exit(code);  // no atexit handlers: they belong to the parent
    }
    pids.push_back(pid);
  }
  for (int r = 1; r < o.ranks; ++r) {
    close(read_end[r]);
    close(write_end[r]);
  }
  // The first rank to fail ends the others: they would only wait for it until the timeout.
  int result = 0;
  for (size_t left = pids.size(); left > 0; --left) {
    int status = 0;
    const pid_t pid = wait(&status);
    if (pid < 0) break;
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok && result == 0) {
      result = 1;
      for (pid_t other : pids)
        if (other != pid) kill(other, SIGKILL);
    }
  }
  return result;
}

}  // namespace
}  // namespace tt

int main(int argc, char** argv) {
  try {
    const tt::Options options = tt::parse_options(argc, argv);
    const tt::Launch launch = tt::detect_launch();
    if (launch.kind != tt::Launch::Kind::Single) return tt::run_launched(launch, options);
    return tt::run_forked(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_busbw: %s\n", e.what());
    return 1;
  }
}
