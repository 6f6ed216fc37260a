// The NCCL communicator (nccl_communicator.h): one ncclComm_t per rank, collectives enqueued on
// the CUDA backend's stream, and a second stream of our own for the all-reduces that overlap
// the backward.
//
// Non-blocking NCCL. The communicator is made with ncclConfig_t::blocking = 0: no NCCL call
// then waits inside NCCL for the other ranks. A call returns ncclInProgress while NCCL finishes
// it on a thread of its own, and ncclCommGetAsyncError says when it is done (ncclSuccess) or
// failed. We poll it against a deadline (timeout_s, --comm-timeout), so a rank that died or
// hangs is noticed by the others instead of leaving them blocked forever. NCCL's rule, kept by
// settle(): after a call returned ncclInProgress, nothing else may be issued on the
// communicator, nor any CUDA work on that stream, before the state is ncclSuccess again.
//
// "Done" for a collective's call means enqueued: the transfer itself runs later on the GPU.
// Waits for the GPU (barrier(), the destructor) poll the stream with the same deadline.
//
// Failure ends the process (fail()): after a timeout or an NCCL error the other ranks'
// collectives can no longer complete, and what this rank's CUDA streams still hold is unknown
// (a kernel waiting for a peer that is gone never finishes), so there is nothing an exception
// handler could clean up or retry. ncclCommAbort stops our NCCL kernels and threads, one line
// on stderr says what happened, and the process exits with status 1, which makes a launcher
// (mpirun, torchrun) stop the remaining ranks.
//
// CUDA graphs: every collective may be captured (NCCL supports stream capture), including the
// fork/join of the overlap stream: events recorded in a capturing stream and waited on by
// another stream pull that stream into the same capture. NCCL keeps a communicator alive while
// a graph that captured it exists: its shutdown (the destructor) waits for such graphs to be
// destroyed, so destroy a backend that captured collectives before its communicator (the
// destructor never touches the backend's stream, so the backend may go first).
#include "parallel/nccl_communicator.h"

#include "parallel/collective_watchdog.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace tt {
namespace {

using Clock = std::chrono::steady_clock;

// The end of one wait: timeout_s from its start; never, for timeout_s <= 0 (or beyond a
// year, which the clock's arithmetic could not hold everywhere).
class Deadline {
 public:
  explicit Deadline(double timeout_s)
      : unlimited_(!(timeout_s > 0) || timeout_s > 3.2e7),
        start_(Clock::now()),
        end_(start_ + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(unlimited_ ? 0.0 : timeout_s))) {}
  bool passed() const { return !unlimited_ && Clock::now() >= end_; }
  // Between two polls: yield for the first 2 ms (most waits are short: an enqueue, a barrier
  // between ranks in step), then sleep, so that a long wait does not keep a core busy.
  void pause() const {
    if (Clock::now() - start_ < std::chrono::milliseconds(2))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }

 private:
  bool unlimited_;
  Clock::time_point start_, end_;
};

// How long ncclCommAbort may take before the process ends without it. Abort sets a flag that
// NCCL's kernels and threads poll, so it normally returns at once; it can block, though, on a
// CUDA graph that captured the communicator and still exists.
constexpr auto kAbortGrace = std::chrono::seconds(10);

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::U8: return ncclUint8;
  }
  throw std::invalid_argument("NCCL communicator: unknown dtype");
}

// NCCL's messages may end with a newline; our errors are one line.
std::string one_line(std::string text) {
  for (char& c : text)
    if (c == '\n' || c == '\r') c = ' ';
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// "unhandled system error (remote process exited or there was a network error): <detail>"
std::string nccl_error(ncclResult_t result, ncclComm_t comm) {
  std::string text = ncclGetErrorString(result);
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += std::string(": ") + last;
  return one_line(text);
}

// Element counts and byte offsets of the caller's buffers.
size_t count_of(int64_t n, const char* call) {
  if (n < 0) throw std::invalid_argument(std::string(call) + ": negative element count " + std::to_string(n));
  return static_cast<size_t>(n);
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int world_size, cudaStream_t stream, double timeout_s, const ncclUniqueId& id)
      : rank_(rank), size_(world_size), timeout_s_(timeout_s), stream_(stream), host_waits_(timeout_s, rank) {
    try {
      make_cuda_resources();
      make_comm(id);
    } catch (...) {
      release_cuda_resources();  // the destructor does not run for a constructor that throws
      throw;
    }
  }

  // Shutdown never hangs: each wait has the deadline, and a communicator that cannot be
  // finalized in time is left to the process exit (with one line saying so) rather than
  // aborted, since NCCL's abort too waits for graphs that captured it.
  ~NcclCommunicator() override {
    bool clean = wait_for_stream_quietly(comm_stream_);
    if (clean) {
      ncclResult_t state = ncclCommFinalize(comm_);
      const Deadline deadline(timeout_s_);
      while (state == ncclInProgress && !deadline.passed()) {
        deadline.pause();
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
      }
      clean = state == ncclSuccess;
    }
    if (!clean) {
      std::fprintf(stderr,
                   "warning: rank %d: the NCCL communicator could not be shut down cleanly within %g s "
                   "(--comm-timeout); it is left to the process exit\n",
                   rank_, timeout_s_);
      return;  // what it holds may still be in use: freeing it could block
    }
    ncclCommDestroy(comm_);  // local only once finalized
    release_cuda_resources();
  }

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  const char* transport() const override { return "nccl"; }
  bool on_backend_stream() const override { return true; }

  // In place: NCCL's all-reduce allows sendbuff == recvbuff.
  void all_reduce_sum(void* buf, int64_t n, DType dtype) override {
    const size_t count = count_of(n, "all_reduce_sum");
    if (count == 0) return;  // every rank skips it alike: same sizes on every rank
    settle(ncclAllReduce(buf, buf, count, nccl_type(dtype), ncclSum, comm_, stream_), "ncclAllReduce");
  }

  // send (W*n) -> recv (n). NCCL's in-place form is recv == send + rank*n (this rank's own
  // chunk of the input receives its sum); any other overlap of the two is undefined, so refused.
  void reduce_scatter_sum(const void* send, void* recv, int64_t n, DType dtype) override {
    const size_t count = count_of(n, "reduce_scatter_sum");
    if (count == 0) return;
    const size_t chunk = count * dtype_size(dtype);
    const void* own_chunk = static_cast<const char*>(send) + static_cast<size_t>(rank_) * chunk;
    if (recv != own_chunk && overlap(send, chunk * static_cast<size_t>(size_), recv, chunk))
      throw std::invalid_argument(
          "reduce_scatter_sum: recv overlaps send other than in place (recv == send + rank * n)");
    settle(ncclReduceScatter(send, recv, count, nccl_type(dtype), ncclSum, comm_, stream_), "ncclReduceScatter");
  }

  // send (n) -> recv (W*n). NCCL's in-place form is send == recv + rank*n (this rank's shard
  // already sits at its place in the output); any other overlap is refused.
  void all_gather(const void* send, void* recv, int64_t n, DType dtype) override {
    const size_t count = count_of(n, "all_gather");
    if (count == 0) return;
    const size_t chunk = count * dtype_size(dtype);
    const void* own_place = static_cast<const char*>(recv) + static_cast<size_t>(rank_) * chunk;
    if (send != own_place && overlap(send, chunk, recv, chunk * static_cast<size_t>(size_)))
      throw std::invalid_argument("all_gather: send overlaps recv other than in place (send == recv + rank * n)");
    settle(ncclAllGather(send, recv, count, nccl_type(dtype), comm_, stream_), "ncclAllGather");
  }

  // In place (sendbuff == recvbuff): root's buf is sent, every other rank's is overwritten.
  void broadcast(void* buf, int64_t n, DType dtype, int root) override {
    const size_t count = count_of(n, "broadcast");
    if (root < 0 || root >= size_)
      throw std::invalid_argument("broadcast: root " + std::to_string(root) + " is not a rank of " +
                                  std::to_string(size_));
    if (count == 0) return;
    settle(ncclBroadcast(buf, buf, count, nccl_type(dtype), root, comm_, stream_), "ncclBroadcast");
  }

  // An all-reduce of one int that every rank must join, then a wait for the backend's stream
  // (so for everything enqueued before, overlapped all-reduces included): the one collective
  // here that waits on the host, and so the one place a rank that died between two barriers
  // is found even when no NCCL call reports it.
  void barrier() override {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    check_cuda(cudaStreamIsCapturing(stream_, &capture), "cudaStreamIsCapturing");
    if (capture != cudaStreamCaptureStatusNone)
      throw std::logic_error("barrier() during CUDA graph capture: a barrier waits on the host and cannot be captured");
    join_async();
    settle(ncclAllReduce(barrier_word_, barrier_word_, 1, ncclInt32, ncclSum, comm_, stream_),
           "ncclAllReduce (barrier)");
    wait_for_stream(stream_, "barrier");
  }

  // Fork: comm_stream_ waits for what the backend's stream holds so far (the gradients of
  // this bucket are written), then runs the all-reduce while the backend's stream goes on.
  void all_reduce_sum_async(void* buf, int64_t n, DType dtype) override {
    const size_t count = count_of(n, "all_reduce_sum_async");
    if (count == 0) return;
    check_cuda(cudaEventRecord(fork_, stream_), "cudaEventRecord (fork)");
    check_cuda(cudaStreamWaitEvent(comm_stream_, fork_, 0), "cudaStreamWaitEvent (fork)");
    settle(ncclAllReduce(buf, buf, count, nccl_type(dtype), ncclSum, comm_, comm_stream_), "ncclAllReduce (async)");
    async_pending_ = true;
  }

  // Join: the backend's stream waits for everything on comm_stream_ so far. Nothing to join
  // means nothing is recorded (in a capture, waiting on an event recorded outside it is an
  // error).
  void join_async() override {
    if (!async_pending_) return;
    check_cuda(cudaEventRecord(join_, comm_stream_), "cudaEventRecord (join)");
    check_cuda(cudaStreamWaitEvent(stream_, join_, 0), "cudaStreamWaitEvent (join)");
    async_pending_ = false;
  }

  // The backend's own waits (copies, synchronize) cannot poll NCCL: a thread times them.
  void begin_host_wait(const char* what) override { host_waits_.begin(what); }
  void end_host_wait() override { host_waits_.end(); }

 private:
  // The overlap stream, its fork/join events and the barrier's word. Non-blocking stream: it
  // never synchronises with the legacy default stream (the backend's stream is non-blocking
  // too). High priority: when both streams have work ready, the all-reduce's blocks are
  // scheduled first, so communication starts as soon as its bucket is ready. Events without
  // timing: cheaper, and the kind that stream capture turns into graph dependencies.
  void make_cuda_resources() {
#if CUDART_VERSION >= 12080
    // NCCL makes the communicator on the current device: make that the stream's, whatever
    // this thread last selected (older toolkits cannot ask a stream: the caller's device).
    int device = 0;
    check_cuda_setup(cudaStreamGetDevice(stream_, &device), "cudaStreamGetDevice");
    check_cuda_setup(cudaSetDevice(device), "cudaSetDevice");
#endif
    int least = 0, greatest = 0;
    check_cuda_setup(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
    check_cuda_setup(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest),
                     "cudaStreamCreateWithPriority");
    check_cuda_setup(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda_setup(cudaEventCreateWithFlags(&join_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    check_cuda_setup(cudaMalloc(reinterpret_cast<void**>(&barrier_word_), sizeof(int32_t)), "cudaMalloc");
    check_cuda_setup(cudaMemsetAsync(barrier_word_, 0, sizeof(int32_t), stream_), "cudaMemsetAsync");
  }

  void release_cuda_resources() noexcept {
    if (barrier_word_) cudaFree(barrier_word_);
    if (join_) cudaEventDestroy(join_);
    if (fork_) cudaEventDestroy(fork_);
    if (comm_stream_) cudaStreamDestroy(comm_stream_);
    barrier_word_ = nullptr;
    join_ = fork_ = nullptr;
    comm_stream_ = nullptr;
  }

  // ncclCommInitRankConfig on the current device (the backend set it), non-blocking: it
  // returns at once, and the set-up with the other ranks (bootstrap through rank 0's socket,
  // topology, transports) finishes on NCCL's thread. A rank that never arrives or died is a
  // timeout here; nothing is in flight yet, so this throws instead of ending the process.
  void make_comm(const ncclUniqueId& id) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t state = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    const Deadline deadline(timeout_s_);
    while (state == ncclInProgress && comm_) {
      if (deadline.passed()) {
        ncclCommAbort(comm_);
        comm_ = nullptr;
        throw std::runtime_error("NCCL communicator (rank " + std::to_string(rank_) + " of " +
                                 std::to_string(size_) + ") was not set up within " + seconds() +
                                 " s (--comm-timeout): a rank did not start, died, or cannot reach rank 0");
      }
      deadline.pause();
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
    }
    if (state != ncclSuccess) {
      const std::string why = nccl_error(state, comm_);
      if (comm_) ncclCommAbort(comm_);
      comm_ = nullptr;
      throw std::runtime_error("NCCL communicator (rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                               ") could not be set up: " + why);
    }
  }

  // A call's result: waits out ncclInProgress (NCCL finishing the enqueue on its thread; the
  // first collective also connects the ranks) and ends the process on an error or timeout.
  void settle(ncclResult_t state, const char* call) {
    const Deadline deadline(timeout_s_);
    while (state == ncclInProgress) {
      if (deadline.passed()) fail(timed_out(call));
      deadline.pause();
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
    }
    if (state != ncclSuccess) fail(failed(call, nccl_error(state, comm_)));
  }

  // Waits until `stream` has run everything enqueued on it, watching NCCL for errors the
  // while: a transfer whose peer is gone either fails there or never ends (the deadline).
  void wait_for_stream(cudaStream_t stream, const char* call) {
    const Deadline deadline(timeout_s_);
    for (;;) {
      const cudaError_t status = cudaStreamQuery(stream);
      if (status == cudaSuccess) return;
      if (status != cudaErrorNotReady) fail(failed(call, std::string("CUDA: ") + cudaGetErrorString(status)));
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
      if (state != ncclSuccess && state != ncclInProgress) fail(failed(call, nccl_error(state, comm_)));
      if (deadline.passed()) fail(timed_out(call));
      deadline.pause();
    }
  }

  // The destructor's wait: the same, but it reports instead of ending the process.
  bool wait_for_stream_quietly(cudaStream_t stream) const {
    const Deadline deadline(timeout_s_);
    for (;;) {
      const cudaError_t status = cudaStreamQuery(stream);
      if (status == cudaSuccess) return true;
      ncclResult_t state = ncclSuccess;
      if (status != cudaErrorNotReady || ncclCommGetAsyncError(comm_, &state) != ncclSuccess ||
          (state != ncclSuccess && state != ncclInProgress) || deadline.passed())
        return false;
      deadline.pause();
    }
  }

  // A failed CUDA call around a collective: this rank's part of it may be half enqueued, so it
  // ends the process like an NCCL failure.
  void check_cuda(cudaError_t status, const char* call) {
    if (status != cudaSuccess) fail(failed(call, std::string("CUDA: ") + cudaGetErrorString(status)));
  }

  // Before the communicator exists nothing is in flight: a plain exception.
  static void check_cuda_setup(cudaError_t status, const char* call) {
    if (status != cudaSuccess)
      throw std::runtime_error(std::string("NCCL communicator: ") + call + " failed: " + cudaGetErrorString(status));
  }

  std::string seconds() const {
    char text[32];
    std::snprintf(text, sizeof text, "%g", timeout_s_);
    return text;
  }
  std::string timed_out(const char* call) const {
    return "error: rank " + std::to_string(rank_) + ": NCCL " + call + " did not complete within " + seconds() +
           " s (--comm-timeout): a rank died or hangs";
  }
  std::string failed(const char* call, const std::string& why) const {
    return "error: rank " + std::to_string(rank_) + ": NCCL " + call + " failed: " + why;
  }

  // Ends the process: aborts the communicator (its kernels and threads quit), prints `line`
  // and exits with status 1 without running atexit handlers or static destructors: those could
  // wait on the same dead peer (MPI_Finalize) or on this device's hung streams (CUDA's own
  // teardown). Should the abort itself block, a second thread ends the process after
  // kAbortGrace; call_once keeps the line to one.
  [[noreturn]] void fail(const std::string& line) {
    static std::once_flag once;
    const auto finish = [line] {
      std::call_once(once, [&line] {
        std::fflush(stdout);
        std::fprintf(stderr, "%s\n", line.c_str());
        std::fflush(stderr);
        std::_Exit(1);
      });
    };
    std::thread([finish] {
      std::this_thread::sleep_for(kAbortGrace);
      finish();
    }).detach();
    ncclCommAbort(comm_);
    finish();
    std::_Exit(1);  // not reached: call_once ran the exit, or blocks while the other thread runs it
  }

  int rank_, size_;
  double timeout_s_;
  cudaStream_t stream_;                // the backend's: every op and collective
  cudaStream_t comm_stream_ = nullptr; // ours: all_reduce_sum_async
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
  int32_t* barrier_word_ = nullptr;    // barrier()'s one-int all-reduce
  ncclComm_t comm_ = nullptr;
  bool async_pending_ = false;         // all-reduces on comm_stream_ not yet joined
  CollectiveWatchdog host_waits_;      // begin_host_wait / end_host_wait
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(int rank, int world_size, void* backend_stream,
                                                     double timeout_s,
                                                     const std::function<void(void*, size_t)>& share_from_rank0) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("NCCL communicator: rank " + std::to_string(rank) + " of " +
                                std::to_string(world_size));
  if (!backend_stream)
    throw std::invalid_argument("NCCL communicator: needs the CUDA backend's stream (Backend::native_stream())");
  // Rank 0's id names its bootstrap socket: every rank connects there to find the others.
  ncclUniqueId id{};
  if (rank == 0) {
    const ncclResult_t status = ncclGetUniqueId(&id);
    if (status != ncclSuccess)
      throw std::runtime_error("ncclGetUniqueId failed: " + nccl_error(status, nullptr));
  }
  share_from_rank0(&id, sizeof id);
  return std::make_unique<NcclCommunicator>(rank, world_size, static_cast<cudaStream_t>(backend_stream), timeout_s,
                                            id);
}

}  // namespace tt
