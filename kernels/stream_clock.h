// Timestamps on a backend's own timeline: how `tinytrain profile` (engine/profile/profiler.h) times
// ops that may run asynchronously. A mark taken after an op is the moment the op finished,
// whenever the host gets to read it.
//
// The host's steady clock is that timeline for a backend whose ops have finished when their
// call returns (the CPU backend; the CUDA backend on the SIMT emulator, which runs each op as
// it is enqueued). The CUDA backend on a GPU records events on its stream instead
// (kernels/instruments/stream_clock.cu): reading the host clock there would time the launches, not
// the kernels.
#pragma once
#include <chrono>
#include <cstddef>
#include <vector>

namespace tt {

class StreamClock {
 public:
  virtual ~StreamClock() = default;
  // Takes a timestamp behind all the work enqueued so far; returns its index, counting from 0
  // since the last read().
  virtual size_t mark() = 0;
  // Waits until every mark is reached; returns their times in ms after mark 0, in index order,
  // and forgets them (the next mark is index 0 again).
  virtual std::vector<double> read() = 0;
};

// For backends whose ops are done when their call returns: a mark is the host clock's now.
class HostClock final : public StreamClock {
 public:
  size_t mark() override {
    marks_.push_back(std::chrono::steady_clock::now());
    return marks_.size() - 1;
  }
  std::vector<double> read() override {
    std::vector<double> ms;
    ms.reserve(marks_.size());
    for (const auto& t : marks_) ms.push_back(std::chrono::duration<double, std::milli>(t - marks_.front()).count());
    marks_.clear();
    return ms;
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

}  // namespace tt
