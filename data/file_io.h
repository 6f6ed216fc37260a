// Reading and writing whole files for data/: the text prepare reads from users, the token
// shards and tokenizer files it writes, and those files read back by later runs.
// Reads take regular files only (a FIFO or /dev/zero would block or never end) and know the
// size before they allocate; writes are atomic (a reader sees the old file or the whole new
// one, even after a crash), the way engine/io/safetensors writes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace tt {

// An open regular file and its size. Errors are InputError "<path>: <problem>".
class RegularFile {
 public:
  explicit RegularFile(const std::string& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  uint64_t size() const { return size_; }
  // Reads exactly n bytes from the current position. A file that ends sooner (it shrank
  // since it was opened) is an InputError, never a short buffer.
  void read_exactly(void* dst, size_t n);

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole of a regular file of at most max_bytes (refused, before reading, when larger).
std::string read_regular_file(const std::string& path, uint64_t max_bytes);

// Writes `bytes` to `path`: into path.tmp.<pid>, fsync, rename over path, fsync the
// directory (so the rename itself is on disk). The temporary file never outlives a failure.
void write_file_atomically(const std::string& path, const std::string& bytes);

}  // namespace tt
