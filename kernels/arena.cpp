// Planned single-allocation tensor storage.
#include "kernels/arena.h"

#include <stdexcept>

namespace tt {

void ArenaPlan::add(const std::string& name, DType dtype, Shape shape) {
  const size_t alignment = 64;
  size_t offset = (bytes_ + alignment - 1) / alignment * alignment;
  entries_.push_back({name, dtype, shape, offset});
  bytes_ = offset + static_cast<size_t>(shape.numel()) * dtype_size(dtype);
}

bool ArenaPlan::has(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return true;
  return false;
}

Arena::Arena(Backend& backend, ArenaPlan plan) : backend_(backend), plan_(std::move(plan)) {
  base_ = backend_.allocate(plan_.bytes());
}

Arena::~Arena() { backend_.release(base_); }

Tensor Arena::get(const std::string& name) const {
  for (const ArenaPlan::Entry& e : plan_.entries())
    if (e.name == name) return Tensor{static_cast<char*>(base_) + e.offset, e.dtype, e.shape};
  throw std::out_of_range("no planned tensor named " + name);
}

}  // namespace tt
