// An Arena is one backend allocation holding a planned list of named tensors. Sizes are
// fixed up front, so what the engine holds is known before it allocates and is reported
// exactly ("alloc MB" in the log).
#pragma once
#include <string>
#include <vector>

#include "kernels/tensor.h"
#include "kernels/backend.h"

namespace tt {

class ArenaPlan {
 public:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    size_t offset;  // bytes from the start of the allocation, 64-byte aligned
  };
  void add(const std::string& name, DType dtype, Shape shape);
  bool has(const std::string& name) const;
  const std::vector<Entry>& entries() const { return entries_; }
  size_t bytes() const { return bytes_; }

 private:
  std::vector<Entry> entries_;
  size_t bytes_ = 0;
};

class Arena {
 public:
  Arena(Backend& backend, ArenaPlan plan);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  Tensor get(const std::string& name) const;  // throws std::out_of_range for an unplanned name
  bool has(const std::string& name) const { return plan_.has(name); }
  size_t bytes() const { return plan_.bytes(); }

 private:
  Backend& backend_;
  ArenaPlan plan_;
  void* base_ = nullptr;
};

}  // namespace tt
