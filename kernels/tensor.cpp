// Shape and dtype helpers for tensor views.
#include "kernels/tensor.h"

#include "kernels/common/half.h"

#include <stdexcept>

namespace tt {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::U8: return 1;
  }
  throw std::logic_error("unknown dtype");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::U8: return "U8";
  }
  throw std::logic_error("unknown dtype");
}

bool is_float(DType dtype) { return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16; }

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

uint8_t* Tensor::u8() const {
  if (dtype != DType::U8) throw std::logic_error(std::string("expected a U8 tensor, got ") + dtype_name(dtype));
  return static_cast<uint8_t*>(data);
}

namespace {

template <typename S>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<bf16>() {
  return DType::BF16;
}
template <>
constexpr DType dtype_of<f16>() {
  return DType::F16;
}

}  // namespace

template <typename S>
S* Tensor::as() const {
  if (dtype != dtype_of<S>())
    throw std::logic_error(std::string("expected a ") + dtype_name(dtype_of<S>()) + " tensor, got " + dtype_name(dtype));
  return static_cast<S*>(data);
}
template float* Tensor::as<float>() const;
template bf16* Tensor::as<bf16>() const;
template f16* Tensor::as<f16>() const;

}  // namespace tt
