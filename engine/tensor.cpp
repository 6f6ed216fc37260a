// Shape and dtype helpers for tensor views.
#include "engine/tensor.h"

#include <stdexcept>

namespace tt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::I32: return 4;
  }
  throw std::logic_error("unknown dtype");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::I32: return "I32";
  }
  throw std::logic_error("unknown dtype");
}

Shape::Shape(std::initializer_list<int64_t> list) {
  if (list.size() > static_cast<size_t>(kMaxDims)) throw std::logic_error("shape rank above 4");
  for (int64_t d : list) dims[rank++] = d;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank != other.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[i] != other.dims[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

float* Tensor::f32() const {
  if (dtype != DType::F32) throw std::logic_error(std::string("expected an F32 tensor, got ") + dtype_name(dtype));
  return static_cast<float*>(data);
}

int32_t* Tensor::i32() const {
  if (dtype != DType::I32) throw std::logic_error(std::string("expected an I32 tensor, got ") + dtype_name(dtype));
  return static_cast<int32_t*>(data);
}

}  // namespace tt
