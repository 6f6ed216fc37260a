// Tests for parallel/tcp_rendezvous (tcp_share_from_rank0): ranks are real processes on this
// host, forked from the test, meeting over TCP on a free port. Each child exits 0 when it got
// exactly rank 0's bytes and 1 otherwise, writing its error to a pipe for the test to check:
// the bytes arrive whole; late, misconfigured and missing ranks fail on every side with the
// same one line; and nothing waits past its timeout.
#include "parallel/tcp_rendezvous.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tt {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// A port nobody listens on now: bind port 0, read the one the kernel chose, close it.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error("test: no free port");
  close(fd);
  return ntohs(addr.sin_port);
}

Launch torchrun(int rank, int world_size, int port, const std::string& addr = "127.0.0.1") {
  Launch launch;
  launch.kind = Launch::Kind::Torchrun;
  launch.rank = rank;
  launch.world_size = world_size;
  launch.local_rank = rank;
  launch.master_addr = addr;
  launch.master_port = port;
  return launch;
}

// Rank 0's 128 random bytes (a stand-in for NCCL's unique id).
std::vector<unsigned char> random_bytes() {
  std::random_device seed;
  std::mt19937 gen(seed());
  std::vector<unsigned char> bytes(128);
  for (unsigned char& b : bytes) b = static_cast<unsigned char>(gen());
  return bytes;
}

struct RankProcess {
  pid_t pid;
  int message_fd;  // the read end of the child's pipe
};

struct RankResult {
  int exit_code;        // 0: got rank 0's bytes; 1: failed (message says why); -1: killed as overdue
  std::string message;  // the child's error, "" on success
};

// Forks one rank: after delay_ms it runs the rendezvous on its own buffer (rank 0: `expected`;
// the others: zeros, expecting `bytes` of them), then exits 0 if it returned holding exactly
// `expected`, else 1 with its error in the pipe.
RankProcess start_rank(const Launch& launch, const std::vector<unsigned char>& expected, double timeout_s,
                       int delay_ms = 0, size_t bytes = 128) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("test: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("test: fork failed");
  if (pid == 0) {
    close(fds[0]);
    std::string error;
    try {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      std::vector<unsigned char> data = launch.rank == 0 ? expected : std::vector<unsigned char>(bytes, 0);
      tcp_share_from_rank0(launch, data.data(), data.size(), timeout_s);
      if (data != expected) error = "rank " + std::to_string(launch.rank) + " got other bytes than rank 0's";
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "(empty error message)";
    }
    if (!error.empty()) {
      const ssize_t written = write(fds[1], error.data(), error.size());
      (void)written;  // the exit code reports the failure either way
    }
    _exit(error.empty() ? 0 : 1);  // _exit: no gtest or static teardown in the child
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  return RankProcess{pid, fds[0]};
}

// Waits for the rank (killing it after limit_s, so a hang fails the test instead of hanging
// it) and reads its message.
RankResult finish(const RankProcess& rank, double limit_s = 20) {
  const auto start = Clock::now();
  int status = 0;
  RankResult result{-1, ""};
  for (;;) {
    const pid_t done = waitpid(rank.pid, &status, WNOHANG);
    if (done == rank.pid) {
      result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      break;
    }
    if (seconds_since(start) > limit_s) {
      kill(rank.pid, SIGKILL);
      waitpid(rank.pid, &status, 0);
      result.message = "did not finish within " + std::to_string(limit_s) + " s";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  char buffer[4096];
  for (ssize_t n; (n = read(rank.message_fd, buffer, sizeof buffer)) > 0;) result.message.append(buffer, n);
  close(rank.message_fd);
  return result;
}

// Runs `world_size` ranks on a fresh port and expects every one to get rank 0's bytes.
void expect_all_receive(int world_size, const std::string& addr) {
  const int port = free_port();
  const std::vector<unsigned char> bytes = random_bytes();
  std::vector<RankProcess> ranks;
  for (int r = 0; r < world_size; ++r) ranks.push_back(start_rank(torchrun(r, world_size, port, addr), bytes, 10));
  for (int r = 0; r < world_size; ++r) {
    const RankResult result = finish(ranks[r]);
    EXPECT_EQ(result.exit_code, 0) << "rank " << r << ": " << result.message;
  }
}

// How many file descriptors this process has open.
int open_fds() {
  int count = 0;
  for (int fd = 0; fd < 4096; ++fd) count += fcntl(fd, F_GETFD) != -1;
  return count;
}

// A message from tcp_share_from_rank0 called in this process, "" when it returned. Also
// checks that the call closed every socket it opened.
std::string error_of(const Launch& launch, double timeout_s, double* took_s) {
  std::vector<unsigned char> data(128);
  const int fds_before = open_fds();
  const auto start = Clock::now();
  std::string error;
  try {
    tcp_share_from_rank0(launch, data.data(), data.size(), timeout_s);
  } catch (const std::exception& e) {
    error = e.what();
  }
  *took_s = seconds_since(start);
  EXPECT_EQ(open_fds(), fds_before) << "a socket was left open";
  return error;
}

void expect_one_line_with(const std::string& message, const std::string& phrase) {
  EXPECT_NE(message.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
}

TEST(TcpRendezvous, OneRankReturnsAtOnce) {
  std::vector<unsigned char> data(16, 7);
  Launch single;
  tcp_share_from_rank0(single, data.data(), data.size(), 0.001);
  EXPECT_EQ(data, std::vector<unsigned char>(16, 7));
}

TEST(TcpRendezvous, TwoRanksReceiveRank0sBytes) { expect_all_receive(2, "127.0.0.1"); }

TEST(TcpRendezvous, FourRanksReceiveRank0sBytes) {
  // By name: "localhost" may give ::1 as well as 127.0.0.1, and rank 0 listens on both.
  expect_all_receive(4, "localhost");
}

TEST(TcpRendezvous, RanksStartedBeforeRank0RetryUntilItListens) {
  const int port = free_port();
  const std::vector<unsigned char> bytes = random_bytes();
  std::vector<RankProcess> ranks;
  for (int r = 1; r < 3; ++r) ranks.push_back(start_rank(torchrun(r, 3, port), bytes, 10));
  ranks.push_back(start_rank(torchrun(0, 3, port), bytes, 10, /*delay_ms=*/600));
  for (const RankProcess& rank : ranks) {
    const RankResult result = finish(rank);
    EXPECT_EQ(result.exit_code, 0) << result.message;
  }
}

TEST(TcpRendezvous, MismatchedWorldSizeFailsOnBothSidesWithOneLine) {
  const int port = free_port();
  const std::vector<unsigned char> bytes = random_bytes();
  const RankProcess rank0 = start_rank(torchrun(0, 2, port), bytes, 10);
  const RankProcess rank1 = start_rank(torchrun(1, 3, port), bytes, 10);
  const RankResult result0 = finish(rank0), result1 = finish(rank1);
  EXPECT_EQ(result0.exit_code, 1);
  EXPECT_EQ(result1.exit_code, 1);
  const std::string expected =
      "rank 1 says WORLD_SIZE=3, rank 0 has WORLD_SIZE=2: every rank must be launched with the same world size";
  EXPECT_EQ(result0.message, expected);
  EXPECT_EQ(result1.message, expected);
}

TEST(TcpRendezvous, DuplicateRankFailsEveryRankWithOneLine) {
  const int port = free_port();
  const std::vector<unsigned char> bytes = random_bytes();
  const RankProcess rank0 = start_rank(torchrun(0, 3, port), bytes, 10);
  const RankProcess first = start_rank(torchrun(1, 3, port), bytes, 10);
  const RankProcess second = start_rank(torchrun(1, 3, port), bytes, 10, /*delay_ms=*/300);
  const std::string expected = "rank 1 joined twice: two processes were launched with RANK=1";
  for (const RankProcess& rank : {rank0, first, second}) {
    const RankResult result = finish(rank);
    EXPECT_EQ(result.exit_code, 1);
    EXPECT_EQ(result.message, expected);
  }
}

TEST(TcpRendezvous, MismatchedByteCountFailsOnBothSides) {
  const int port = free_port();
  const std::vector<unsigned char> bytes = random_bytes();
  const RankProcess rank0 = start_rank(torchrun(0, 2, port), bytes, 10);
  const RankProcess rank1 = start_rank(torchrun(1, 2, port), bytes, 10, 0, /*bytes=*/64);
  const std::string expected = "rank 1 expects 64 bytes, rank 0 sends 128";
  for (const RankProcess& rank : {rank0, rank1}) {
    const RankResult result = finish(rank);
    EXPECT_EQ(result.exit_code, 1);
    expect_one_line_with(result.message, expected);
  }
}

TEST(TcpRendezvous, AStrangerOnThePortIsIgnored) {
  // A port scanner or health check connects to rank 0 and sends something else: rank 0 drops
  // it and the real rank still gets the bytes.
  const int port = free_port();
  const std::vector<unsigned char> bytes = random_bytes();
  const RankProcess rank0 = start_rank(torchrun(0, 2, port), bytes, 10);
  int stranger = -1;
  for (const auto start = Clock::now(); seconds_since(start) < 5; std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    stranger = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (connect(stranger, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
    close(stranger);
    stranger = -1;
  }
  ASSERT_GE(stranger, 0) << "rank 0 never listened";
  const char request[] = "GET / HTTP/1.1\r\nHost: tinytrain\r\n\r\n";
  EXPECT_EQ(send(stranger, request, sizeof request - 1, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof request - 1));
  close(stranger);
  const RankProcess rank1 = start_rank(torchrun(1, 2, port), bytes, 10);
  for (const RankProcess& rank : {rank0, rank1}) {
    const RankResult result = finish(rank);
    EXPECT_EQ(result.exit_code, 0) << result.message;
  }
}

TEST(TcpRendezvous, PortInUseFailsFastOnRank0) {
  // Someone else listens on the port (bound to port 0: the kernel picks a free one).
  const int holder = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(holder, 1), 0);
  ASSERT_EQ(getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  double took = 0;
  const std::string error = error_of(torchrun(0, 2, port), 10, &took);
  close(holder);
  EXPECT_EQ(error, "MASTER_PORT=" + std::to_string(port) + " is in use on this host (rank 0 listens there): pick another port");
  EXPECT_LT(took, 1.0);
}

TEST(TcpRendezvous, UnresolvableMasterAddrFails) {
  double took = 0;
  const std::string error = error_of(torchrun(1, 2, free_port(), "nohost.invalid"), 2, &took);
  expect_one_line_with(error, "MASTER_ADDR=nohost.invalid does not resolve: ");
  EXPECT_LT(took, 4.0);
}

TEST(TcpRendezvous, TimesOutWhenRank0NeverComes) {
  const int port = free_port();
  double took = 0;
  const std::string error = error_of(torchrun(1, 2, port), 1, &took);
  expect_one_line_with(error, "rank 0 at 127.0.0.1:" + std::to_string(port) + " did not answer within 1 s");
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 3.0);
}

TEST(TcpRendezvous, Rank0TimesOutWhenARankNeverComes) {
  // Ranks 0 and 1 of 3 start; rank 2 never does. Rank 0 gives up after 1 s and tells rank 1,
  // so both fail with the same line.
  const int port = free_port();
  const std::vector<unsigned char> bytes = random_bytes();
  const auto start = Clock::now();
  const RankProcess rank0 = start_rank(torchrun(0, 3, port), bytes, 1);
  const RankProcess rank1 = start_rank(torchrun(1, 3, port), bytes, 1);
  const std::string expected = "only 1 of 2 ranks joined within 1 s (missing: 2)";
  for (const RankProcess& rank : {rank0, rank1}) {
    const RankResult result = finish(rank);
    EXPECT_EQ(result.exit_code, 1);
    EXPECT_EQ(result.message, expected);
  }
  EXPECT_LT(seconds_since(start), 4.0);
}

}  // namespace
}  // namespace tt
