// The NCCL communicator (parallel/nccl_communicator.h) with two ranks on one GPU: every
// collective against closed forms, the overlapped all-reduce and its join, the same captured
// in a CUDA graph and replayed, and a rank that dies, after which the other must end within
// the timeout with one line.
//
// Each rank is a process forked by the test, and the test process itself never calls CUDA: a
// process that has initialised CUDA cannot fork children that use it. Two ranks on one GPU
// need distinct NCCL_HOSTID values (NCCL refuses two ranks of one host on one device); NCCL
// then treats them as two hosts and moves data through its socket transport on the loopback
// interface. A rank reports through its exit status (0 passed, 1 failed, 77 no GPU) and its
// output, which the test shows on failure. Without a usable GPU every test reports SKIPPED
// with the reason: NCCL has no emulated path.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/common/half.h"
#include "kernels/device_query.h"
#include "parallel/nccl_communicator.h"
#include "tests/cuda_test_util.h"

namespace tt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kWorld = 2;
constexpr int kSkipped = 77;          // a rank's exit status when there is no GPU to test on
constexpr double kCommTimeoutS = 60;  // generous: the two ranks time-share one GPU
constexpr double kRanksLimitS = 240;  // the test kills ranks still running after this

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- inside a rank's process ----------------------------------------------------------------

// Why NCCL cannot be tested here ("" when it can). Initialises CUDA: ranks only.
std::string why_no_gpu() {
  if (!test::cuda_is_emulated()) return "";
  const CudaDeviceInfo gpu = query_cuda_device();
  return "NCCL needs a real GPU: " +
         (gpu.usable ? std::string("TINYTRAIN_TEST_CUDA=emulated asks for the emulator") : gpu.reason);
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

// A rank's place and its end of the pipes that carry NCCL's id from rank 0.
struct RankContext {
  int rank = 0;
  int world = 0;
  std::vector<int> id_pipes;  // rank 0: the write end to each rank r >= 1; rank r: its read end at [r]

  // share_from_rank0 for make_nccl_communicator
  void share(void* data, size_t bytes) const {
    if (rank == 0) {
      for (int r = 1; r < world; ++r)
        if (write(id_pipes[r], data, bytes) != static_cast<ssize_t>(bytes))
          throw std::runtime_error("could not hand NCCL's id to rank " + std::to_string(r));
    } else if (!read_exactly(id_pipes[rank], data, bytes, kCommTimeoutS)) {
      throw std::runtime_error("rank 0 did not hand over NCCL's id");
    }
  }

  // The CUDA backend on GPU 0 and an NCCL communicator on its stream.
  std::unique_ptr<Communicator> communicator(Backend& backend, double timeout_s) const {
    return make_nccl_communicator(rank, world, backend.native_stream(), timeout_s,
                                  [this](void* data, size_t bytes) { share(data, bytes); });
  }
};

// A rank's checks: each failure is printed (the test shows the rank's output) and counted.
class Checks {
 public:
  explicit Checks(int rank) : rank_(rank) {}
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++failures_;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank_, what.c_str());
  }
  // got == want elementwise, compared as floats (every expected value here is exact).
  template <typename T>
  void expect_equal(const std::vector<T>& got, const std::vector<float>& want, const std::string& what) {
    if (got.size() != want.size()) return expect(false, what + ": size " + std::to_string(got.size()));
    for (size_t i = 0; i < got.size(); ++i) {
      const float value = to_float(got[i]);
      if (value != want[i]) {
        std::ostringstream text;
        text << what << ": element " << i << " is " << value << ", expected " << want[i];
        return expect(false, text.str());
      }
    }
  }
  int exit_code() const { return failures_ == 0 ? 0 : 1; }

 private:
  static float to_float(float v) { return v; }
  static float to_float(int32_t v) { return static_cast<float>(v); }
  static float to_float(bf16 v) { return tt::to_float(v); }
  static float to_float(f16 v) { return tt::to_float(v); }
  int rank_;
  int failures_ = 0;
};

// Device memory of the backend, freed with this object.
class DeviceBuffer {
 public:
  DeviceBuffer(Backend& backend, size_t bytes) : backend_(backend), data_(backend.allocate(bytes)) {}
  ~DeviceBuffer() { backend_.release(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data_; }
  template <typename T>
  T* at(int64_t element) const {
    return static_cast<T*>(data_) + element;
  }

 private:
  Backend& backend_;
  void* data_;
};

template <typename T>
void upload(Backend& backend, void* device, const std::vector<T>& host) {
  backend.copy_to_device(device, host.data(), host.size() * sizeof(T));
}
template <typename T>
std::vector<T> download(Backend& backend, const void* device, int64_t n) {
  std::vector<T> host(static_cast<size_t>(n));
  backend.copy_to_host(host.data(), device, host.size() * sizeof(T));
  return host;
}

// Host values of element type T from a float formula (exactly representable by construction).
template <typename T>
std::vector<T> values(int64_t n, const std::function<float(int64_t)>& f) {
  std::vector<T> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = from_float<T>(f(i));
  return out;
}
template <>
std::vector<int32_t> values<int32_t>(int64_t n, const std::function<float(int64_t)>& f) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<int32_t>(f(i));
  return out;
}
std::vector<float> expected(int64_t n, const std::function<float(int64_t)>& f) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = f(i);
  return out;
}

Tensor f32_view(void* data, int64_t n) {
  Tensor t;
  t.data = data;
  t.dtype = DType::F32;
  t.shape = Shape{n};
  return t;
}

// All-reduce of each dtype, reduce-scatter and all-gather (out of place and in place),
// broadcast, barrier, and the overlapped all-reduce with its join. W = world size; sums over
// ranks r of a formula in r have closed forms: sum r = W(W-1)/2, sum (r+1) = W(W+1)/2.
int collectives_rank(const RankContext& ctx) {
  std::unique_ptr<Backend> backend = make_cuda_backend(CudaOptions{});
  std::unique_ptr<Communicator> comm = ctx.communicator(*backend, kCommTimeoutS);
  Checks c(ctx.rank);
  const float r = static_cast<float>(ctx.rank), W = static_cast<float>(ctx.world);
  const float sum_r = W * (W - 1) / 2, sum_r1 = W * (W + 1) / 2;
  c.expect(std::string(comm->transport()) == "nccl", "transport() is nccl");
  c.expect(comm->on_backend_stream(), "on_backend_stream()");
  c.expect(comm->rank() == ctx.rank && comm->world_size() == ctx.world, "rank() and world_size()");

  {  // all-reduce, each dtype; n odd and past NCCL's smallest protocols' sizes
    const int64_t n = 100003;
    DeviceBuffer buf(*backend, static_cast<size_t>(n) * sizeof(float));
    // F32: quarters below 2^19, exact
    upload(*backend, buf.get(), values<float>(n, [&](int64_t i) { return (r + 1) * i + 0.25f * r; }));
    comm->all_reduce_sum(buf.get(), n, DType::F32);
    c.expect_equal(download<float>(*backend, buf.get(), n), expected(n, [&](int64_t i) { return sum_r1 * i + 0.25f * sum_r; }),
                   "all_reduce_sum F32");
    // I32
    upload(*backend, buf.get(), values<int32_t>(n, [&](int64_t i) { return (r + 1) * i - 7 * r; }));
    comm->all_reduce_sum(buf.get(), n, DType::I32);
    c.expect_equal(download<int32_t>(*backend, buf.get(), n), expected(n, [&](int64_t i) { return sum_r1 * i - 7 * sum_r; }),
                   "all_reduce_sum I32");
    // BF16: integers whose sums stay below 256 (bf16 has 8 significant bits)
    upload(*backend, buf.get(), values<bf16>(n, [&](int64_t i) { return static_cast<float>(i % 61) + r; }));
    comm->all_reduce_sum(buf.get(), n, DType::BF16);
    c.expect_equal(download<bf16>(*backend, buf.get(), n),
                   expected(n, [&](int64_t i) { return W * static_cast<float>(i % 61) + sum_r; }), "all_reduce_sum BF16");
    // F16: integers whose sums stay below 2048 (11 significant bits)
    upload(*backend, buf.get(), values<f16>(n, [&](int64_t i) { return static_cast<float>(i % 509) * (r + 1); }));
    comm->all_reduce_sum(buf.get(), n, DType::F16);
    c.expect_equal(download<f16>(*backend, buf.get(), n),
                   expected(n, [&](int64_t i) { return static_cast<float>(i % 509) * sum_r1; }), "all_reduce_sum F16");
  }

  {  // overlapped all-reduces on the second stream, an op on the backend's stream beside them, one join
    const int64_t n = 50021;
    DeviceBuffer a(*backend, n * sizeof(float)), b(*backend, n * sizeof(float)), x(*backend, n * sizeof(float)),
        y(*backend, n * sizeof(float));
    upload(*backend, a.get(), values<float>(n, [&](int64_t i) { return static_cast<float>(i % 1000) + r; }));
    upload(*backend, b.get(), values<float>(n, [&](int64_t i) { return 3 * r - static_cast<float>(i % 17); }));
    upload(*backend, x.get(), values<float>(n, [&](int64_t i) { return static_cast<float>(i); }));
    comm->all_reduce_sum_async(a.get(), n, DType::F32);
    backend->residual_forward(f32_view(y.get(), n), f32_view(x.get(), n), f32_view(x.get(), n));
    comm->all_reduce_sum_async(b.get(), n, DType::F32);
    comm->join_async();
    c.expect_equal(download<float>(*backend, a.get(), n),
                   expected(n, [&](int64_t i) { return W * static_cast<float>(i % 1000) + sum_r; }),
                   "all_reduce_sum_async (first)");
    c.expect_equal(download<float>(*backend, b.get(), n),
                   expected(n, [&](int64_t i) { return 3 * sum_r - W * static_cast<float>(i % 17); }),
                   "all_reduce_sum_async (second)");
    c.expect_equal(download<float>(*backend, y.get(), n), expected(n, [](int64_t i) { return 2.0f * i; }),
                   "the backend's op beside the overlapped all-reduces");
  }

  {  // reduce-scatter: send (W*m), element k = 1000 (k / m) + k % m + r -> rank r gets chunk r summed
    const int64_t m = 4099, total = kWorld * m;
    const auto send_values = values<float>(
        total, [&](int64_t k) { return 1000.0f * static_cast<float>(k / m) + static_cast<float>(k % m) + r; });
    const auto want = expected(m, [&](int64_t j) { return W * (1000.0f * r + static_cast<float>(j)) + sum_r; });
    DeviceBuffer send(*backend, total * sizeof(float)), recv(*backend, m * sizeof(float));
    upload(*backend, send.get(), send_values);
    comm->reduce_scatter_sum(send.get(), recv.get(), m, DType::F32);
    c.expect_equal(download<float>(*backend, recv.get(), m), want, "reduce_scatter_sum");
    // in place: this rank's own chunk of the input receives the sum
    upload(*backend, send.get(), send_values);
    comm->reduce_scatter_sum(send.get(), send.at<float>(ctx.rank * m), m, DType::F32);
    c.expect_equal(download<float>(*backend, send.at<float>(ctx.rank * m), m), want, "reduce_scatter_sum in place");
  }

  {  // all-gather: rank r's shard (m), element j = 10000 r + j, lands at recv[r m, (r+1) m)
    const int64_t m = 3001, total = kWorld * m;
    const auto want = expected(
        total, [&](int64_t k) { return 10000.0f * static_cast<float>(k / m) + static_cast<float>(k % m); });
    DeviceBuffer send(*backend, m * sizeof(float)), recv(*backend, total * sizeof(float));
    upload(*backend, send.get(), values<float>(m, [&](int64_t j) { return 10000.0f * r + static_cast<float>(j); }));
    comm->all_gather(send.get(), recv.get(), m, DType::F32);
    c.expect_equal(download<float>(*backend, recv.get(), total), want, "all_gather");
    // in place: the shard already sits at its place in the output; the rest is overwritten
    upload(*backend, recv.get(), values<float>(total, [&](int64_t k) {
             return k / m == ctx.rank ? 10000.0f * r + static_cast<float>(k % m) : -1.0f;
           }));
    comm->all_gather(recv.at<float>(ctx.rank * m), recv.get(), m, DType::F32);
    c.expect_equal(download<float>(*backend, recv.get(), total), want, "all_gather in place");
  }

  {  // broadcast from the last rank; the others' values are overwritten
    const int64_t n = 777;
    const int root = ctx.world - 1;
    DeviceBuffer buf(*backend, n * sizeof(int32_t));
    upload(*backend, buf.get(),
           values<int32_t>(n, [&](int64_t j) { return ctx.rank == root ? 3.0f * static_cast<float>(j) + 1 : -5.0f; }));
    comm->broadcast(buf.get(), n, DType::I32, root);
    c.expect_equal(download<int32_t>(*backend, buf.get(), n),
                   expected(n, [](int64_t j) { return 3.0f * static_cast<float>(j) + 1; }), "broadcast");
  }

  comm->barrier();
  comm->barrier();
  // The destructor finalizes with the other rank: well within the timeout when both are alive.
  const Clock::time_point start = Clock::now();
  comm.reset();
  c.expect(seconds_since(start) < kCommTimeoutS / 2, "the communicator shuts down before the timeout");
  return c.exit_code();
}

// all_reduce_sum_async + join_async, with an op of the backend between them, captured in the
// backend's CUDA graph and replayed twice on new inputs.
int graph_rank(const RankContext& ctx) {
  std::unique_ptr<Backend> backend = make_cuda_backend(CudaOptions{});
  std::unique_ptr<Communicator> comm = ctx.communicator(*backend, kCommTimeoutS);
  Checks c(ctx.rank);
  const float r = static_cast<float>(ctx.rank), W = static_cast<float>(ctx.world);
  const float sum_r = W * (W - 1) / 2;
  const int64_t n = 65537;
  {
    DeviceBuffer grads(*backend, n * sizeof(float)), a(*backend, n * sizeof(float)), b(*backend, n * sizeof(float)),
        out(*backend, n * sizeof(float));
    comm->barrier();  // an eager collective first: the ranks connect before the capture, as in training
    backend->begin_capture();
    comm->all_reduce_sum_async(grads.get(), n, DType::F32);
    backend->residual_forward(f32_view(out.get(), n), f32_view(a.get(), n), f32_view(b.get(), n));
    comm->join_async();
    backend->end_capture();
    for (int replay = 1; replay <= 2; ++replay) {
      const float s = static_cast<float>(replay);
      upload(*backend, grads.get(),
             values<float>(n, [&](int64_t j) { return (10 * s + r) * static_cast<float>(j % 100); }));
      upload(*backend, a.get(), values<float>(n, [&](int64_t j) { return s + static_cast<float>(j % 7); }));
      upload(*backend, b.get(), values<float>(n, [&](int64_t) { return r; }));
      backend->replay_graph();
      const std::string which = " (replay " + std::to_string(replay) + ")";
      c.expect_equal(download<float>(*backend, grads.get(), n),
                     expected(n, [&](int64_t j) { return (10 * s * W + sum_r) * static_cast<float>(j % 100); }),
                     "captured all_reduce_sum_async" + which);
      c.expect_equal(download<float>(*backend, out.get(), n),
                     expected(n, [&](int64_t j) { return s + static_cast<float>(j % 7) + r; }),
                     "captured op beside it" + which);
    }
  }
  // NCCL's shutdown waits until every graph that captured the communicator is destroyed: the
  // backend, which holds the graph, goes first.
  backend.reset();
  const Clock::time_point start = Clock::now();
  comm.reset();
  c.expect(seconds_since(start) < kCommTimeoutS / 2, "the communicator shuts down before the timeout");
  return c.exit_code();
}

constexpr double kShortTimeoutS = 5;

// Rank 1 leaves after the first barrier without a word; rank 0's next collectives can never
// complete and must end its process (status 1, one line) within the timeout. Returns 3 if
// they complete, 0 for rank 1.
int dead_rank(const RankContext& ctx) {
  std::unique_ptr<Backend> backend = make_cuda_backend(CudaOptions{});
  std::unique_ptr<Communicator> comm = ctx.communicator(*backend, kShortTimeoutS);
  const int64_t n = 1 << 20;
  DeviceBuffer buf(*backend, n * sizeof(float));
  comm->barrier();  // both ranks are up and connected
  if (ctx.rank == 1) {
    std::fflush(nullptr);
    std::_Exit(0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 1 is gone by now
  comm->all_reduce_sum(buf.get(), n, DType::F32);
  comm->barrier();
  std::fprintf(stderr, "rank 0: the collectives completed without rank 1\n");
  return 3;
}

// ---- in the test process ----------------------------------------------------------------------

struct RankExit {
  int status = -1;      // exit status; -1 when killed by a signal
  bool killed = false;  // still running at the limit (then killed)
  double seconds = 0;   // from the start of the ranks to this rank's exit
  std::string output;   // its stdout and stderr
};

std::string read_file(const std::string& path) {
  std::string text;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char chunk[4096];
    size_t got = 0;
    while ((got = std::fread(chunk, 1, sizeof chunk, f)) > 0) text.append(chunk, got);
    std::fclose(f);
  }
  return text;
}

// Forks kWorld ranks running `body`, each with its own NCCL_HOSTID and its output in a file;
// waits for them up to limit_s, then kills what is left.
std::vector<RankExit> run_ranks(const std::function<int(const RankContext&)>& body, double limit_s) {
  std::vector<int> read_end(kWorld, -1), write_end(kWorld, -1);
  for (int r = 1; r < kWorld; ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    read_end[r] = fds[0];
    write_end[r] = fds[1];
  }
  std::vector<std::string> output_path(kWorld);
  std::vector<pid_t> pids(kWorld, -1);
  std::fflush(nullptr);  // nothing buffered here may be written again by a child
  const Clock::time_point start = Clock::now();
  for (int rank = 0; rank < kWorld; ++rank) {
    char path[] = "/tmp/tinytrain-nccl-test-XXXXXX";
    const int out = mkstemp(path);
    if (out < 0) throw std::runtime_error("mkstemp failed");
    output_path[rank] = path;
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      dup2(out, STDOUT_FILENO);
      dup2(out, STDERR_FILENO);
      close(out);
      RankContext ctx;
      ctx.rank = rank;
      ctx.world = kWorld;
      ctx.id_pipes.assign(kWorld, -1);
      for (int r = 1; r < kWorld; ++r) {
        if (rank == 0) {
          close(read_end[r]);
          ctx.id_pipes[r] = write_end[r];
        } else {
          close(write_end[r]);
          if (r == rank) ctx.id_pipes[r] = read_end[r];
          else close(read_end[r]);
        }
      }
      const std::string host = "tinytrain-test-" + std::to_string(getppid()) + "-rank" + std::to_string(rank);
      setenv("NCCL_HOSTID", host.c_str(), 1);
      setenv("NCCL_SOCKET_IFNAME", "lo", 0);  // the two "hosts" are this machine, unless set otherwise
      setenv("NCCL_IB_DISABLE", "1", 0);
      int code = 1;
      try {
        const std::string why = why_no_gpu();
        if (!why.empty()) {
          std::fprintf(stderr, "%s\n", why.c_str());
          code = kSkipped;
        } else {
          code = body(ctx);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: exception: %s\n", rank, e.what());
      }
      std::fflush(nullptr);
      std::_Exit(code);  // not the test process's atexit handlers
    }
    close(out);
    pids[rank] = pid;
  }
  for (int r = 1; r < kWorld; ++r) {
    close(read_end[r]);
    close(write_end[r]);
  }

  std::vector<RankExit> exits(kWorld);
  int running = kWorld;
  while (running > 0) {
    for (int rank = 0; rank < kWorld; ++rank) {
      if (pids[rank] < 0) continue;
      int status = 0;
      if (waitpid(pids[rank], &status, WNOHANG) != pids[rank]) continue;
      exits[rank].status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      exits[rank].seconds = seconds_since(start);
      pids[rank] = -1;
      --running;
    }
    if (running > 0 && seconds_since(start) > limit_s) {
      for (int rank = 0; rank < kWorld; ++rank) {
        if (pids[rank] < 0) continue;
        kill(pids[rank], SIGKILL);
        waitpid(pids[rank], nullptr, 0);
        exits[rank].killed = true;
        exits[rank].seconds = seconds_since(start);
        pids[rank] = -1;
      }
      running = 0;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    exits[rank].output = read_file(output_path[rank]);
    std::remove(output_path[rank].c_str());
  }
  return exits;
}

// The reason when every rank found no GPU; "" otherwise.
std::string skip_reason(const std::vector<RankExit>& exits) {
  for (const RankExit& e : exits)
    if (e.killed || e.status != kSkipped) return "";
  std::string why = exits[0].output;
  while (!why.empty() && why.back() == '\n') why.pop_back();
  return why.substr(why.rfind('\n') + 1);  // the last line (npos + 1 == 0: the whole text)
}

std::string describe(const RankExit& e, int rank) {
  std::ostringstream text;
  text << "rank " << rank << ": " << (e.killed ? "killed at the test's limit" : "exit status " + std::to_string(e.status))
       << " after " << e.seconds << " s; its output:\n"
       << e.output;
  return text.str();
}

#define SKIP_WITHOUT_GPU(exits)                                        \
  if (const std::string why = skip_reason(exits); !why.empty()) \
  GTEST_SKIP() << why

TEST(NcclCommunicator, CollectivesMatchClosedForms) {
  const std::vector<RankExit> exits = run_ranks(collectives_rank, kRanksLimitS);
  SKIP_WITHOUT_GPU(exits);
  for (int rank = 0; rank < kWorld; ++rank) EXPECT_EQ(exits[rank].status, 0) << describe(exits[rank], rank);
}

TEST(NcclCommunicator, OverlappedAllReduceCapturedInAGraphReplays) {
  const std::vector<RankExit> exits = run_ranks(graph_rank, kRanksLimitS);
  SKIP_WITHOUT_GPU(exits);
  for (int rank = 0; rank < kWorld; ++rank) EXPECT_EQ(exits[rank].status, 0) << describe(exits[rank], rank);
}

TEST(NcclCommunicator, DeadRankEndsTheOtherWithOneLineWithinTheTimeout) {
  const std::vector<RankExit> exits = run_ranks(dead_rank, kRanksLimitS);
  SKIP_WITHOUT_GPU(exits);
  ASSERT_EQ(exits[1].status, 0) << describe(exits[1], 1);
  EXPECT_EQ(exits[0].status, 1) << describe(exits[0], 0);
  // From rank 1's exit: the timeout, then at most the abort's grace (10 s) and slack.
  EXPECT_LT(exits[0].seconds - exits[1].seconds, kShortTimeoutS + 20) << describe(exits[0], 0);
  int error_lines = 0;
  bool explained = false;
  std::istringstream lines(exits[0].output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("error: rank 0: ", 0) != 0) continue;
    ++error_lines;
    explained = line.rfind("error: rank 0: NCCL ", 0) == 0 &&
                (line.find(" did not complete within 5 s (--comm-timeout): a rank died or hangs") != std::string::npos ||
                 line.find(" failed: ") != std::string::npos);
  }
  EXPECT_EQ(error_lines, 1) << describe(exits[0], 0);
  EXPECT_TRUE(explained) << describe(exits[0], 0);
}

}  // namespace
}  // namespace tt
