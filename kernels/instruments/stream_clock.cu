// The CUDA backend's observability hooks (kernels/backend.h): named scopes as NVTX ranges, and
// a StreamClock (kernels/stream_clock.h) of CUDA events on the backend's stream, which is what
// `tinytrain profile` times kernels with.
//
// This file is also built for the SIMT emulator (--backend cuda-emu), by the host compiler
// rather than nvcc (__CUDACC__ undefined). The emulator runs each op when it is enqueued, so
// the host clock times it exactly, and its runtime has no cudaEventElapsedTime or NVTX: there
// the scopes are ignored and the clock is Backend's default, the host clock.
#include "kernels/cuda/cuda_backend.h"

#if defined(__CUDACC__)
#include <nvtx3/nvToolsExt.h>  // header-only (NVTX 3); costs nothing unless a profiler listens

#include "kernels/cuda/cuda_check.h"
#endif

namespace tt {

#if defined(__CUDACC__)

namespace {

// Marks are events recorded on the stream: an event's time is when the GPU reached it, that is
// when every kernel enqueued before it had finished. The events are kept and reused from one
// read() to the next, so a profiled step creates none after the first.
class CudaEventClock final : public StreamClock {
 public:
  explicit CudaEventClock(cudaStream_t stream) : stream_(stream) {}
  ~CudaEventClock() override {
    if (used_ > 0) cudaEventSynchronize(events_[used_ - 1]);  // none may be pending when destroyed
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    cudaGetLastError();  // (a destructor reports nothing; leave no error behind)
  }

  size_t mark() override {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));  // timing enabled (the default flags)
      events_.push_back(e);
    }
    CUDA_CHECK(cudaEventRecord(events_[used_], stream_));
    return used_++;
  }

  std::vector<double> read() override {
    std::vector<double> ms;
    if (used_ == 0) return ms;
    CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));  // the last mark, so every earlier one too
    ms.reserve(used_);
    for (size_t i = 0; i < used_; ++i) {
      float elapsed = 0;  // resolution about 0.5 us
      CUDA_CHECK(cudaEventElapsedTime(&elapsed, events_[0], events_[i]));
      ms.push_back(elapsed);
    }
    used_ = 0;
    return ms;
  }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0;  // events recorded since the last read()
};

}  // namespace

void CudaBackend::range_push(const char* name) { nvtxRangePushA(name); }
void CudaBackend::range_pop() { nvtxRangePop(); }

std::unique_ptr<StreamClock> CudaBackend::make_stream_clock() { return std::make_unique<CudaEventClock>(stream_); }

#else  // the SIMT emulator

void CudaBackend::range_push(const char*) {}
void CudaBackend::range_pop() {}
std::unique_ptr<StreamClock> CudaBackend::make_stream_clock() { return Backend::make_stream_clock(); }

#endif

}  // namespace tt
