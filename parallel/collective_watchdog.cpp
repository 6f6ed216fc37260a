// The collective watchdog (collective_watchdog.h): one thread, asleep unless a collective runs.
#include "parallel/collective_watchdog.h"

#include <cstdio>
#include <cstdlib>

namespace tt {

CollectiveWatchdog::CollectiveWatchdog(double timeout_s, int rank) : timeout_s_(timeout_s), rank_(rank) {
  if (timeout_s_ > 0) thread_ = std::thread([this] { watch(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

void CollectiveWatchdog::begin(const char* call) {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    call_ = call;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  }
  wake_.notify_one();
}

void CollectiveWatchdog::end() {
  if (!thread_.joinable()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  call_ = nullptr;
}

void CollectiveWatchdog::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (call_ == nullptr) {
      wake_.wait(lock);
      continue;
    }
    const Clock::time_point deadline = deadline_;
    wake_.wait_until(lock, deadline);
    if (call_ != nullptr && deadline_ == deadline && Clock::now() >= deadline) {
      // The same call is still waiting past its deadline: no rank can finish it now.
      std::fprintf(stderr,
                   "error: rank %d: %s waited more than %g s for the other ranks (--comm-timeout): a rank died or "
                   "hangs; stopping\n",
                   rank_, call_, timeout_s_);
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
}

}  // namespace tt
