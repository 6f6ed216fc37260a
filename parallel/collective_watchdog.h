// The guard that keeps a dead or hung rank from hanging the others. A host-side collective
// (MPI's) blocks until every rank has joined it, and so does a host wait behind collectives
// on a GPU stream (NCCL's: a copy of the loss after the step's all-reduces). When a rank is
// killed, the launcher usually ends the job, but a rank that hangs (stopped, stuck in a
// kernel, a lost node) would leave the others waiting forever. The watchdog is a thread that
// wakes when such a wait has lasted longer than the timeout (--comm-timeout) and ends the
// process with one line: the wait itself cannot be cancelled, and a rank that exits non-zero
// makes the launcher (mpirun, torchrun) stop the rest of the job.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace tt {

class CollectiveWatchdog {
 public:
  // timeout_s <= 0: no limit (the thread is not started). rank: for the message.
  CollectiveWatchdog(double timeout_s, int rank);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Brackets one blocking wait; `call` (a string literal) names it in the message.
  void begin(const char* call);
  void end();

 private:
  void watch();

  using Clock = std::chrono::steady_clock;
  double timeout_s_;
  int rank_;
  std::mutex mutex_;
  std::condition_variable wake_;
  const char* call_ = nullptr;  // the collective waiting now; nullptr: none
  Clock::time_point deadline_;
  bool stopping_ = false;
  std::thread thread_;
};

// RAII: begin() at construction, end() at scope exit (also when the call throws).
class WatchedCall {
 public:
  WatchedCall(CollectiveWatchdog& dog, const char* call) : dog_(dog) { dog_.begin(call); }
  ~WatchedCall() { dog_.end(); }
  WatchedCall(const WatchedCall&) = delete;
  WatchedCall& operator=(const WatchedCall&) = delete;

 private:
  CollectiveWatchdog& dog_;
};

}  // namespace tt
