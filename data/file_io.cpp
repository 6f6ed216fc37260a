// Whole-file reads of regular files and atomic writes (see file_io.h).
#include "data/file_io.h"

#include <fcntl.h>     // open
#include <sys/stat.h>  // fstat
#include <unistd.h>    // read, write, fsync, close, getpid

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/input_error.h"

namespace tt {

RegularFile::RegularFile(const std::string& path) : path_(path) {
  // Non-blocking, so that opening a FIFO does not wait for a writer before fstat refuses it.
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) throw InputError(path + ": cannot open: " + std::strerror(errno));
  struct stat info;
  if (fstat(fd_, &info) != 0) {
    const int err = errno;
    ::close(fd_);
    throw InputError(path + ": cannot read: " + std::strerror(err));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd_);
    throw InputError(path + (S_ISDIR(info.st_mode) ? ": is a directory, not a file" : ": not a regular file"));
  }
  size_ = static_cast<uint64_t>(info.st_size);
}

RegularFile::~RegularFile() { ::close(fd_); }

void RegularFile::read_exactly(void* dst, size_t n) {
  char* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::read(fd_, out + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputError(path_ + ": cannot read: " + std::strerror(errno));
    if (got == 0)
      throw InputError(path_ + ": the file ended after " + std::to_string(done) + " of " + std::to_string(n) +
                       " bytes (it changed while being read)");
    done += static_cast<size_t>(got);
  }
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes) {
  RegularFile file(path);
  if (file.size() > max_bytes)
    throw InputError(path + ": the file has " + std::to_string(file.size()) + " bytes, more than the " +
                     std::to_string(max_bytes) + " this reader accepts");
  std::string bytes(static_cast<size_t>(file.size()), '\0');
  file.read_exactly(bytes.data(), bytes.size());
  return bytes;
}

namespace {

// fsync of the directory holding `path`: makes a rename into it durable.
bool sync_parent_directory(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& bytes) {
  // The pid in the name keeps two processes writing the same file from sharing a temporary.
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw InputError(path + ": cannot write " + tmp + ": " + std::strerror(errno));
  int err = 0;  // errno of the first step that failed; 0 while all is well
  size_t done = 0;
  while (err == 0 && done < bytes.size()) {
    const ssize_t put = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0) err = errno;
    else done += static_cast<size_t>(put);
  }
  if (err == 0 && fsync(fd) != 0) err = errno;  // the data on disk before the rename
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    std::remove(tmp.c_str());  // never leave a half-written file behind
    throw InputError(path + ": cannot write: " + std::strerror(err));
  }
  if (!sync_parent_directory(path)) throw InputError(path + ": cannot sync its directory: " + std::strerror(errno));
}

}  // namespace tt
