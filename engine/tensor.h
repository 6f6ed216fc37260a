// Tensor views: a pointer into backend-owned memory, its storage dtype and its shape.
// Views never own memory; the backend allocates and frees (see kernels/backend.h).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace tt {

enum class DType { F32, I32 };  // bf16 and f16 storage are added by mixed precision

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // safetensors spelling: "F32", "I32"

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
};

}  // namespace tt
