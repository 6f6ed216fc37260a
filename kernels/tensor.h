// Tensor views: a pointer into backend-owned memory, its storage dtype and its shape.
// Views never own memory; the backend allocates and frees (see kernels/backend.h).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "kernels/common/half.h"

namespace tt {

// Storage types. BF16 and F16 only store values (kernels/common/half.h): ops compute in fp32.
// U8 holds bytes: the packed 4-bit codes and 8-bit absmax codes of an NF4 weight (kernels/nf4_tensor.h).
enum class DType { F32, BF16, F16, I32, U8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // safetensors spelling: "F32", "BF16", "F16", "I32", "U8"
bool is_float(DType dtype);           // F32, BF16 or F16

constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> list);
  int64_t numel() const;
  int64_t operator[](int i) const { return dims[i]; }
  bool operator==(const Shape& other) const;
  bool operator!=(const Shape& other) const { return !(*this == other); }
  std::string str() const;  // "[16, 64, 512]"
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::F32;
  Shape shape;

  int64_t numel() const { return shape.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  float* f32() const;    // checks the dtype, then returns the typed pointer
  int32_t* i32() const;
  uint8_t* u8() const;
  template <typename S>
  S* as() const;  // S = float, bf16 or f16 (kernels/common/half.h); checks the dtype
};

}  // namespace tt
