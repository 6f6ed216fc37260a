// FNV-1a over 8-byte words (the last few bytes one at a time), written as 16 hex digits: the
// checksum of a checkpoint's bytes and the identity of a token shard. It catches a corrupted
// byte, which no other check would: each step maps the running value one-to-one (xor, then a
// multiplication by an odd number), so one changed word always changes the result. Word by word
// it runs at several GB/s, far faster than the disk.
#pragma once
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace tt {

class Checksum {
 public:
  void add(const void* data, size_t bytes) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
      uint64_t word;
      std::memcpy(&word, p + i, 8);
      h_ = (h_ ^ word) * kPrime;
    }
    for (; i < bytes; ++i) h_ = (h_ ^ p[i]) * kPrime;
  }
  std::string hex() const {
    char text[17];
    std::snprintf(text, sizeof text, "%016" PRIx64, h_);
    return text;
  }

 private:
  static constexpr uint64_t kPrime = 1099511628211ull;
  uint64_t h_ = 14695981039346656037ull;
};

}  // namespace tt
