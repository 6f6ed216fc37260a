// Gradient buckets (gradient_buckets.h): a suffix that grows, cut into pieces as it grows.
#include "parallel/gradient_buckets.h"

#include <stdexcept>

namespace tt {

GradientBuckets::GradientBuckets(Communicator& comm, Tensor grads, int64_t bucket_elements)
    : comm_(comm), grads_(grads), bucket_elements_(bucket_elements), unsent_end_(grads.numel()) {
  if (grads.dtype != DType::F32) throw std::invalid_argument("gradient buckets: the gradients must be F32");
}

void GradientBuckets::start() {
  unsent_end_ = grads_.numel();
  buckets_sent_ = 0;
}

void GradientBuckets::ready_from(int64_t first) {
  if (bucket_elements_ > 0 && unsent_end_ - first >= bucket_elements_) send(first, unsent_end_);
}

void GradientBuckets::finish() {
  if (unsent_end_ > 0) send(0, unsent_end_);
  comm_.join_async();
}

void GradientBuckets::send(int64_t first, int64_t end) {
  comm_.all_reduce_sum_async(static_cast<float*>(grads_.data) + first, end - first, DType::F32);
  unsent_end_ = first;
  ++buckets_sent_;
}

}  // namespace tt
