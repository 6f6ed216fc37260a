// The torchrun-style rendezvous over TCP (tcp_rendezvous.h). Rank 0 listens on MASTER_PORT;
// every other rank connects, says who it is, and waits. Once all of them are there, rank 0
// answers each with its bytes, so the rendezvous is also a barrier: NCCL starts only when
// every rank is alive. A rank that does not fit (another world size, a rank twice) or one that
// never comes makes rank 0 answer everyone with the same one-line error and throw it too.
// Only POSIX sockets, all non-blocking: every wait is a poll() bounded by a deadline, so a
// missing or dead rank ends in a message, never a hang.
#include "parallel/tcp_rendezvous.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tt {
namespace {

using Clock = std::chrono::steady_clock;

// The hello every rank but 0 sends, big-endian (network byte order) so that any two hosts
// agree: magic, protocol version, rank, world size, and how many bytes it expects back.
constexpr uint32_t kMagic = 0x74747276;  // "ttrv"
constexpr uint32_t kVersion = 1;
constexpr size_t kHelloSize = 4 + 4 + 4 + 4 + 8;
// Rank 0's answer: one status byte, then the bytes, or a 4-byte length and a one-line error.
constexpr unsigned char kStatusData = 0;
constexpr unsigned char kStatusError = 1;
constexpr uint32_t kMaxErrorText = 1024;

// A connected rank sends its hello at once: rank 0 waits this long for it before taking the
// connection for a stranger's (a port scanner's) and dropping it.
constexpr auto kHelloWait = std::chrono::seconds(2);
// Once every rank is there, rank 0 has this long to hand out its answers (a few bytes each).
constexpr auto kAnswerWait = std::chrono::seconds(5);
// A rank retries connecting this often while rank 0 is not up yet, and gives one try at most
// this long (an address that drops packets must not use up the whole timeout).
constexpr auto kRetryEvery = std::chrono::milliseconds(100);
constexpr auto kConnectTry = std::chrono::seconds(1);
// Longer than a week is as good as forever, and would overflow the clock's arithmetic.
constexpr double kMaxTimeout = 7 * 24 * 3600.0;

// A file descriptor closed when it goes out of scope, on every path, exceptions included.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_;
};

std::string errno_text(int err) { return std::strerror(err); }

// "1", "0.5": seconds as the user gave them.
std::string seconds_text(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

// Text from the environment or the network, made fit for one line: at most max_chars
// characters, each non-printable one as '?'.
std::string printable(const std::string& text, size_t max_chars) {
  std::string out;
  for (size_t i = 0; i < text.size() && i < max_chars; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (text.size() > max_chars) out += "...";
  return out;
}

// Milliseconds until the deadline for poll(), rounded up so that a wait never ends early.
int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<decltype(left)>(left, 0, INT_MAX));
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw std::runtime_error("rendezvous: cannot make a socket non-blocking: " + errno_text(errno));
}

// Waits until fd is ready for events (or has an error the next call will report); false
// when the deadline passes first. A signal (EINTR) just resumes the wait.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n == 0 && Clock::now() >= deadline) return false;
    if (n < 0 && errno != EINTR) throw std::runtime_error("rendezvous: poll failed: " + errno_text(errno));
  }
}

// How a send or receive of a whole message ended.
enum class Io { Done, TimedOut, Closed };

// Sends all n bytes before the deadline; a partial send or EINTR just goes on. MSG_NOSIGNAL:
// a peer that hung up is an error here, not a SIGPIPE that kills the process.
Io send_all(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLOUT, deadline)) return Io::TimedOut;
    } else {
      return Io::Closed;  // EPIPE, ECONNRESET: the peer is gone
    }
  }
  return Io::Done;
}

// Receives exactly n bytes before the deadline; Closed when the peer hangs up first.
Io recv_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_ready(fd, POLLIN, deadline)) return Io::TimedOut;
    } else {
      return Io::Closed;  // 0: an orderly hang-up; ECONNRESET: an abrupt one
    }
  }
  return Io::Done;
}

// Big-endian integers of `width` bytes.
void put_be(unsigned char* p, uint64_t v, int width) {
  for (int i = 0; i < width; ++i) p[i] = static_cast<unsigned char>(v >> (8 * (width - 1 - i)));
}
uint64_t get_be(const unsigned char* p, int width) {
  uint64_t v = 0;
  for (int i = 0; i < width; ++i) v = (v << 8) | p[i];
  return v;
}

struct Hello {
  uint32_t magic, version, rank, world_size;
  uint64_t bytes;
};

void encode(const Hello& h, unsigned char* out) {
  put_be(out, h.magic, 4);
  put_be(out + 4, h.version, 4);
  put_be(out + 8, h.rank, 4);
  put_be(out + 12, h.world_size, 4);
  put_be(out + 16, h.bytes, 8);
}

Hello decode(const unsigned char* in) {
  return Hello{static_cast<uint32_t>(get_be(in, 4)), static_cast<uint32_t>(get_be(in + 4, 4)),
               static_cast<uint32_t>(get_be(in + 8, 4)), static_cast<uint32_t>(get_be(in + 12, 4)),
               get_be(in + 16, 8)};
}

// ---- rank 0 ----

// Rank 0 holds one connection per rank until all are there: raise the soft limit on open
// files towards `needed` where the hard limit allows (the default 1024 is too few for a big
// job). Best effort: accept() reports EMFILE if it is still too low.
void allow_open_files(rlim_t needed) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed) return;
  limit.rlim_cur = limit.rlim_max == RLIM_INFINITY ? needed : std::min(needed, limit.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

// Rank 0's listening socket on the wildcard address of port: IPv6 that also takes IPv4
// connections where the host has IPv6, else IPv4, so MASTER_ADDR may name either.
Fd listen_on(int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = ::getaddrinfo(nullptr, port_text.c_str(), &hints, &found); rc != 0)
    throw std::runtime_error("rank 0 cannot listen on MASTER_PORT=" + port_text + ": " + ::gai_strerror(rc));
  const std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, &::freeaddrinfo);
  std::string failure = "no wildcard address";
  for (const int family : {AF_INET6, AF_INET}) {
    for (const addrinfo* a = list.get(); a; a = a->ai_next) {
      if (a->ai_family != family) continue;
      Fd fd(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
      if (!fd.valid()) {
        failure = errno_text(errno);
        continue;
      }
      // SO_REUSEADDR: a port left in TIME_WAIT by the previous run is free to use at once.
      const int on = 1, off = 0;
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
      if (family == AF_INET6) ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
      if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
        if (errno == EADDRINUSE)
          throw std::runtime_error("MASTER_PORT=" + port_text +
                                   " is in use on this host (rank 0 listens there): pick another port");
        failure = errno_text(errno);  // e.g. IPv6 switched off: the next address may do
        continue;
      }
      if (::listen(fd.get(), SOMAXCONN) != 0) {
        failure = errno_text(errno);
        continue;
      }
      set_nonblocking(fd.get());
      return fd;
    }
  }
  throw std::runtime_error("rank 0 cannot listen on MASTER_PORT=" + port_text + ": " + failure);
}

// Why a hello does not fit this job, or "" when it does. joined: the ranks already there.
std::string check_hello(const Hello& h, const Launch& launch, size_t bytes, const std::vector<Fd>& joined) {
  const std::string rank = std::to_string(h.rank), world = std::to_string(launch.world_size);
  if (h.version != kVersion)
    return "rank " + rank + " speaks rendezvous protocol version " + std::to_string(h.version) +
           ", rank 0 speaks version " + std::to_string(kVersion) + ": every rank must run the same tinytrain build";
  if (h.world_size != static_cast<uint32_t>(launch.world_size))
    return "rank " + rank + " says WORLD_SIZE=" + std::to_string(h.world_size) + ", rank 0 has WORLD_SIZE=" + world +
           ": every rank must be launched with the same world size";
  if (h.rank == 0)
    return "a second process says RANK=0: only one rank may be rank 0 (it listens on MASTER_PORT=" +
           std::to_string(launch.master_port) + ")";
  if (h.rank >= static_cast<uint32_t>(launch.world_size))
    return "a process says RANK=" + rank + ", which is not below WORLD_SIZE=" + world;
  if (joined[h.rank].valid()) return "rank " + rank + " joined twice: two processes were launched with RANK=" + rank;
  if (h.bytes != bytes)
    return "rank " + rank + " expects " + std::to_string(h.bytes) + " bytes, rank 0 sends " + std::to_string(bytes) +
           ": every rank must run the same tinytrain build";
  return "";
}

// Answers one peer with an error line; best effort, as the peer may be gone already.
void send_error(int fd, const std::string& message, Clock::time_point deadline) {
  const std::string text = message.substr(0, kMaxErrorText);
  unsigned char head[5];
  head[0] = kStatusError;
  put_be(head + 1, text.size(), 4);
  if (send_all(fd, head, sizeof head, deadline) == Io::Done) send_all(fd, text.data(), text.size(), deadline);
}

// Answers every rank already there with the error, then throws it on rank 0.
[[noreturn]] void fail_everyone(const std::vector<Fd>& joined, const std::string& message) {
  const auto deadline = Clock::now() + kAnswerWait;
  for (const Fd& peer : joined)
    if (peer.valid()) send_error(peer.get(), message, deadline);
  throw std::runtime_error(message);
}

// "only 1 of 3 ranks joined within 2 s (missing: 2, 3)", naming up to 8 missing ranks.
std::string joined_too_few(const std::vector<Fd>& joined, int count, double timeout_s) {
  std::string message = "only " + std::to_string(count) + " of " + std::to_string(joined.size() - 1) +
                        " ranks joined within " + seconds_text(timeout_s) + " s (missing: ";
  int listed = 0;
  for (size_t r = 1; r < joined.size(); ++r) {
    if (joined[r].valid()) continue;
    if (listed == 8) {
      message += ", ...";
      break;
    }
    message += (listed++ ? ", " : "") + std::to_string(r);
  }
  return message + ")";
}

void serve_as_rank0(const Launch& launch, const void* data, size_t bytes, double timeout_s, Clock::time_point deadline) {
  allow_open_files(static_cast<rlim_t>(launch.world_size) + 64);
  const Fd listener = listen_on(launch.master_port);
  std::vector<Fd> joined(launch.world_size);  // joined[r]: rank r's connection, held until all are there
  int count = 0;
  while (count < launch.world_size - 1) {
    if (!wait_ready(listener.get(), POLLIN, deadline)) fail_everyone(joined, joined_too_few(joined, count, timeout_s));
    Fd peer(::accept(listener.get(), nullptr, nullptr));
    if (!peer.valid()) {
      if (errno == EMFILE || errno == ENFILE)
        fail_everyone(joined, "rank 0 ran out of open files holding " + std::to_string(count) +
                                  " connections: WORLD_SIZE=" + std::to_string(launch.world_size) +
                                  " needs a higher limit (ulimit -n)");
      continue;  // EINTR, or a peer that gave up before it was accepted
    }
    set_nonblocking(peer.get());
    unsigned char raw[kHelloSize];
    if (recv_all(peer.get(), raw, kHelloSize, std::min(deadline, Clock::now() + kHelloWait)) != Io::Done) continue;
    const Hello hello = decode(raw);
    if (hello.magic != kMagic) continue;  // not a tinytrain rank (a port scanner, a health check): drop it
    const std::string problem = check_hello(hello, launch, bytes, joined);
    if (!problem.empty()) {
      send_error(peer.get(), problem, Clock::now() + kAnswerWait);
      fail_everyone(joined, problem);
    }
    joined[hello.rank] = std::move(peer);
    ++count;
  }
  // Everyone is here: hand out the bytes. A rank gone meanwhile is reported once the others
  // have theirs.
  const auto answer_deadline = Clock::now() + kAnswerWait;
  std::string failure;
  for (int r = 1; r < launch.world_size; ++r) {
    const unsigned char status = kStatusData;
    if (send_all(joined[r].get(), &status, 1, answer_deadline) != Io::Done ||
        send_all(joined[r].get(), data, bytes, answer_deadline) != Io::Done) {
      if (failure.empty()) failure = "rank " + std::to_string(r) + " hung up before rank 0 could send it the bytes";
    }
  }
  if (!failure.empty()) throw std::runtime_error(failure);
}

// ---- every other rank ----

// MASTER_ADDR's addresses. A temporary failure (EAI_AGAIN: a cluster's DNS that does not
// know rank 0's host yet) is retried until the deadline; any other failure is final.
std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> resolve(const Launch& launch, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  const std::string port = std::to_string(launch.master_port);
  for (;;) {
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(launch.master_addr.c_str(), port.c_str(), &hints, &found);
    if (rc == 0) return {found, &::freeaddrinfo};
    if (rc == EAI_AGAIN && Clock::now() + kRetryEvery < deadline) {
      std::this_thread::sleep_for(kRetryEvery);
      continue;
    }
    throw std::runtime_error("MASTER_ADDR=" + printable(launch.master_addr, 64) +
                             " does not resolve: " + (rc == EAI_SYSTEM ? errno_text(errno) : ::gai_strerror(rc)));
  }
}

// True when a socket got connected to itself: a client connecting to a free port on its own
// host can be given that very port as its own and meet itself (TCP "simultaneous open").
bool connected_to_itself(int fd) {
  sockaddr_storage mine{}, peer{};
  socklen_t mine_len = sizeof mine, peer_len = sizeof peer;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &mine_len) != 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0)
    return false;
  return mine_len == peer_len && std::memcmp(&mine, &peer, mine_len) == 0;
}

// One try at connecting to one address: the connected socket, or why not in *failure.
Fd try_connect(const addrinfo& a, Clock::time_point deadline, std::string* failure) {
  Fd fd(::socket(a.ai_family, a.ai_socktype, a.ai_protocol));
  if (!fd.valid()) {
    *failure = errno_text(errno);
    return Fd();
  }
  set_nonblocking(fd.get());
  // A non-blocking connect goes on in the background (EINPROGRESS, or EINTR if a signal
  // came): wait until the socket is writable, then SO_ERROR says how it went.
  if (::connect(fd.get(), a.ai_addr, a.ai_addrlen) != 0) {
    if (errno != EINPROGRESS && errno != EINTR) {
      *failure = errno_text(errno);
      return Fd();
    }
    if (!wait_ready(fd.get(), POLLOUT, std::min(deadline, Clock::now() + kConnectTry))) {
      *failure = "no answer";
      return Fd();
    }
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      *failure = errno_text(err);
      return Fd();
    }
  }
  if (connected_to_itself(fd.get())) {
    *failure = errno_text(ECONNREFUSED);  // nobody listens there yet
    return Fd();
  }
  return fd;
}

// Connects to rank 0, trying each of MASTER_ADDR's addresses every kRetryEvery until one
// answers: rank 0 may start after the others.
Fd connect_to_rank0(const addrinfo* list, Clock::time_point deadline, const std::string& where, double timeout_s) {
  std::string failure = "no address";
  for (;;) {
    for (const addrinfo* a = list; a; a = a->ai_next) {
      Fd fd = try_connect(*a, deadline, &failure);
      if (fd.valid()) return fd;
    }
    const auto now = Clock::now();
    if (now >= deadline)
      throw std::runtime_error("rank 0 at " + where + " did not answer within " + seconds_text(timeout_s) +
                               " s (last try: " + failure + ")");
    std::this_thread::sleep_for(std::min<Clock::duration>(kRetryEvery, deadline - now));
  }
}

// The one-line error for a hello or an answer that did not go through whole. started: whether
// rank 0's answer had begun.
std::runtime_error reply_failure(Io io, const std::string& where, double wait_s, bool started) {
  if (io == Io::TimedOut)
    return std::runtime_error("rank 0 at " + where + " took the connection but did not answer within " +
                              seconds_text(wait_s) + " s");
  return std::runtime_error("rank 0 at " + where + (started ? " hung up mid-message" : " hung up before answering"));
}

void join_rank0(const Launch& launch, void* data, size_t bytes, double timeout_s, Clock::time_point deadline) {
  const std::string addr = printable(launch.master_addr, 64);
  // An IPv6 literal is bracketed, as in a URL: [::1]:29500.
  const std::string where = (addr.find(':') != std::string::npos ? "[" + addr + "]" : addr) + ":" +
                            std::to_string(launch.master_port);
  const auto addresses = resolve(launch, deadline);
  const Fd fd = connect_to_rank0(addresses.get(), deadline, where, timeout_s);

  // Rank 0 answers once every rank is there, within its own timeout (which started no later
  // than this connection), plus the time it takes to answer everyone, plus a second of slack.
  const auto wait = std::chrono::duration<double>(timeout_s) + kAnswerWait + std::chrono::seconds(1);
  const auto reply_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(wait);
  unsigned char hello[kHelloSize];
  encode(Hello{kMagic, kVersion, static_cast<uint32_t>(launch.rank), static_cast<uint32_t>(launch.world_size),
               static_cast<uint64_t>(bytes)},
         hello);
  if (const Io io = send_all(fd.get(), hello, sizeof hello, reply_deadline); io != Io::Done)
    throw reply_failure(io, where, wait.count(), false);
  unsigned char status = 0;
  if (const Io io = recv_all(fd.get(), &status, 1, reply_deadline); io != Io::Done)
    throw reply_failure(io, where, wait.count(), false);
  if (status == kStatusData) {
    if (const Io io = recv_all(fd.get(), data, bytes, reply_deadline); io != Io::Done)
      throw reply_failure(io, where, wait.count(), true);
    return;
  }
  if (status != kStatusError)
    throw std::runtime_error("rank 0 at " + where + " answered with unknown status " + std::to_string(status) +
                             ": is something else listening on MASTER_PORT?");
  // Rank 0's error: thrown here as it is, so that every rank fails with the same line.
  unsigned char length[4];
  if (const Io io = recv_all(fd.get(), length, sizeof length, reply_deadline); io != Io::Done)
    throw reply_failure(io, where, wait.count(), true);
  const uint64_t n = get_be(length, 4);
  if (n > kMaxErrorText)
    throw std::runtime_error("rank 0 at " + where + " sent an error of " + std::to_string(n) + " bytes, more than " +
                             std::to_string(kMaxErrorText) + ": is something else listening on MASTER_PORT?");
  std::string text(n, '\0');
  if (const Io io = recv_all(fd.get(), text.data(), n, reply_deadline); io != Io::Done)
    throw reply_failure(io, where, wait.count(), true);
  throw std::runtime_error(printable(text, kMaxErrorText));
}

}  // namespace

void tcp_share_from_rank0(const Launch& launch, void* data, size_t bytes, double timeout_s) {
  if (launch.world_size <= 1) return;
  if (launch.rank < 0 || launch.rank >= launch.world_size)
    throw std::runtime_error("rendezvous: rank " + std::to_string(launch.rank) + " is not below world size " +
                             std::to_string(launch.world_size));
  if (launch.master_port < 1 || launch.master_port > 65535)
    throw std::runtime_error("MASTER_PORT=" + std::to_string(launch.master_port) +
                             " is not a port number in [1, 65535]");
  if (!(timeout_s > 0))
    throw std::runtime_error("rendezvous: the timeout (" + seconds_text(timeout_s) + " s) must be positive");
  timeout_s = std::min(timeout_s, kMaxTimeout);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  if (launch.rank == 0)
    serve_as_rank0(launch, data, bytes, timeout_s, deadline);
  else
    join_rank0(launch, data, bytes, timeout_s, deadline);
}

}  // namespace tt
