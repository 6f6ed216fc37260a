// fp32 working copies of bf16/fp16 op arguments (see storage.h).
#include "kernels/cpu/storage.h"

namespace tt {

Fp32Scope::Fp32Scope(std::initializer_list<Tensor*> tensors) {
  copies_.reserve(tensors.size());  // no reallocation: tensors point into the copies
  for (Tensor* t : tensors) {
    if (!t->data || t->dtype == DType::F32 || t->dtype == DType::I32) continue;
    Copy* copy = nullptr;
    for (Copy& c : copies_)
      if (c.storage == t->data) copy = &c;
    if (!copy) {
      copies_.push_back(Copy{t->data, t->dtype, std::vector<float>(t->numel())});
      copy = &copies_.back();
      std::vector<float>& v = copy->values;
      dispatch_storage(t->dtype, [&](auto storage_type) {
        const auto* x = t->as<decltype(storage_type)>();
        const int64_t n = static_cast<int64_t>(v.size());
#pragma omp parallel for
        for (int64_t i = 0; i < n; ++i) v[i] = to_float(x[i]);
      });
    }
    t->data = copy->values.data();
    t->dtype = DType::F32;
  }
}

Fp32Scope::~Fp32Scope() {
  for (Copy& c : copies_) {
    const float* v = c.values.data();
    const int64_t n = static_cast<int64_t>(c.values.size());
    dispatch_storage(c.dtype, [&](auto storage_type) {  // BF16 or F16: only those are copied
      using S = decltype(storage_type);
      S* y = static_cast<S*>(c.storage);
#pragma omp parallel for
      for (int64_t i = 0; i < n; ++i) y[i] = from_float<S>(v[i]);
    });
  }
}

}  // namespace tt
