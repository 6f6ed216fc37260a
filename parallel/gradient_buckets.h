// Gradient buckets: the all-reduce of the flat gradient buffer, cut into pieces that start
// while the backward is still running (as PyTorch DDP's buckets do). The backward finishes
// the gradients from the end of the flat buffer toward its start (the layout is in forward
// order, the backward in reverse), so what is ready is always a suffix [first, n). Each time
// the ready part not yet sent reaches the bucket size, that piece is all-reduced
// asynchronously (Communicator::all_reduce_sum_async): on NCCL it runs on a second stream
// beside the rest of the backward; on host transports (MPI) it runs at once, the CPU
// backend having already finished it. The same cuts serve both, so the bucketing is shared.
#pragma once
#include <cstdint>

#include "kernels/tensor.h"
#include "parallel/communicator.h"

namespace tt {

class GradientBuckets {
 public:
  // grads: the flat F32 gradient buffer (n elements). bucket_elements: the smallest piece
  // sent while the backward runs; 0 sends the whole buffer once, in finish().
  GradientBuckets(Communicator& comm, Tensor grads, int64_t bucket_elements);

  // Before each backward: nothing of it has been sent.
  void start();
  // grads[first, n) now hold their final values (first only decreases within one backward):
  // sends the unsent ready part as one bucket once it holds at least bucket_elements.
  void ready_from(int64_t first);
  // After the backward: sends what is left, then orders everything that follows after every
  // bucket (Communicator::join_async), so the optimizer sees the summed gradients.
  void finish();
  int buckets_sent() const { return buckets_sent_; }  // in the last backward

 private:
  void send(int64_t first, int64_t end);

  Communicator& comm_;
  Tensor grads_;
  int64_t bucket_elements_;
  int64_t unsent_end_ = 0;  // [0, unsent_end_) has not been sent yet
  int buckets_sent_ = 0;
};

}  // namespace tt
