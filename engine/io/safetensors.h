// Reading and writing safetensors files: the format PyTorch (via the `safetensors` package)
// uses for named tensors, and therefore tinytrain's format for references (and, later,
// checkpoints).
//
// Layout of a file:
//   8 bytes    N, the header length, unsigned 64-bit little-endian
//   N bytes    UTF-8 JSON object: name -> {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}
//              plus an optional "__metadata__": {string: string}
//   the rest   the data section; each tensor's bytes are [b, e) relative to its start,
//              row-major, little-endian.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace tt {

// One tensor as the header describes it. The dtype keeps the file's spelling ("BF16", "I64",
// ...) so a file is fully described even when tinytrain has no DType for it.
struct SafetensorsEntry {
  std::string dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets within the data section
};

// A whole safetensors file held in memory and validated once on open, so every later access
// can trust the header: offsets are in range and sizes match dtype and shape.
class SafetensorsFile {
 public:
  // Reads the whole file and validates it; throws InputError "<path>: <problem>" and nothing
  // else (but std::bad_alloc), whatever the file holds.
  static SafetensorsFile open(const std::string& path);
  // The same for bytes already in memory (a fuzzer's input); `path` names them in messages.
  static SafetensorsFile parse(const std::string& path, std::vector<char> bytes);

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Throws InputError "<path>: missing metadata '<key>'".
  const std::string& metadata_value(const std::string& key) const;

  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  // Throws InputError "<path>: missing tensor '<name>'".
  const SafetensorsEntry& entry(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted

  // Checks the named tensor has exactly this dtype and shape: throws InputError on a missing
  // tensor or a dtype/shape mismatch. Call it before allocating what read() fills.
  void check(const std::string& name, DType dtype, const Shape& shape) const;
  // check(), then copies the tensor's bytes to the host memory at dst.
  void read(const std::string& name, DType dtype, const Shape& shape, void* dst) const;

  const std::string& path() const { return path_; }
  uint64_t size() const { return bytes_.size(); }  // of the whole file, in bytes

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::vector<char> bytes_;   // the whole file
  uint64_t data_start_ = 0;   // offset of the data section within bytes_ (8 + N)
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsEntry> entries_;
};

// A tensor to write: a name and a view of host memory.
struct SafetensorsTensorRef {
  std::string name;
  DType dtype;
  Shape shape;
  const void* data;
};

// Writes the tensors in the given order, contiguous, after a header padded with spaces to a
// multiple of 8 bytes. Writes "<path>.tmp" and renames it over path, so a failure never
// leaves a half-written file behind. Throws InputError when the file cannot be written, or a
// name or metadata string is not valid UTF-8; std::invalid_argument on a programming error
// (duplicate or reserved name, negative dimension, null data).
void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::vector<SafetensorsTensorRef>& tensors);

}  // namespace tt
