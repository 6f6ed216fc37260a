// safetensors reader (validate everything once, on open) and atomic writer.
// Files come from users and from other programs, so the reader treats every header field
// as untrusted: each problem becomes one InputError naming the file and the problem, and no
// value from the file is used as a size or offset before it has been checked.
#include "engine/io/safetensors.h"

#include <fcntl.h>     // open
#include <sys/stat.h>  // fstat
#include <unistd.h>    // read, close, fsync

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/checked_input.h"
#include "engine/config.h"

namespace tt {
namespace {

// The dtypes of the safetensors format we recognise, with their element sizes. Knowing more
// than tinytrain computes with lets `open` check the sizes of every tensor in a PyTorch file.
size_t known_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
  };
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// "[0, 16]": how data_offsets are spelled in messages, the same as in the header.
std::string offsets_str(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// A JSON integer that must be >= 0. Negative, fractional and too-big values are refused.
bool json_to_u64(const nlohmann::json& value, uint64_t* out) {
  const std::optional<int64_t> v = json_integer_value(value);
  if (!v || *v < 0) return false;
  *out = static_cast<uint64_t>(*v);
  return true;
}

// Reads the whole file. Regular files only: a FIFO or a device such as /dev/zero has no size
// to check, and reading it could block or never end. Opened non-blocking, so that opening a
// FIFO does not wait for a writer before fstat can refuse it. The file is read to its end
// rather than to the size fstat gave, so a file that changes meanwhile is still read whole.
std::vector<char> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(path + ": cannot open file: " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info;
  if (fstat(fd, &info) != 0) throw InputError(path + ": cannot read file: " + std::strerror(errno));
  if (S_ISDIR(info.st_mode)) throw InputError(path + ": cannot read file: " + std::strerror(EISDIR));
  if (!S_ISREG(info.st_mode)) throw InputError(path + ": cannot read file: not a regular file");
  std::vector<char> bytes;
  bytes.reserve(static_cast<size_t>(info.st_size));
  char chunk[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got == 0) break;
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw InputError(path + ": cannot read file: " + std::strerror(errno));
    bytes.insert(bytes.end(), chunk, chunk + got);
  }
  return bytes;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) { return parse(path, read_file(path)); }

SafetensorsFile SafetensorsFile::parse(const std::string& path, std::vector<char> bytes) {
  SafetensorsFile file;
  file.path_ = path;
  file.bytes_ = std::move(bytes);
  auto fail = [&](const std::string& problem) { return InputError(path + ": " + problem); };

  // --- the header length: 8 bytes, little-endian, assembled byte by byte so this works on
  // any host and reads no byte that is not there.
  const uint64_t size = file.bytes_.size();
  if (size < 8)
    throw fail("truncated: the file has " + std::to_string(size) +
               " bytes, too few for the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(file.bytes_[i]);
  // Compare against what is left rather than computing 8 + header_len, which could wrap.
  if (header_len > size - 8)
    throw fail("header length " + std::to_string(header_len) + " is beyond the end of the file (" +
               std::to_string(size) + " bytes; truncated file?)");
  file.data_start_ = 8 + header_len;
  const uint64_t data_size = size - file.data_start_;

  // --- the header JSON. nlohmann also rejects invalid UTF-8 inside strings.
  const char* header_begin = file.bytes_.data() + 8;
  const nlohmann::json header = parse_json(header_begin, header_begin + header_len, path + ": header");
  if (!header.is_object()) throw fail("header is not a JSON object");

  // --- each entry: the metadata block or one tensor.
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const nlohmann::json& value = item.value();

    if (name == "__metadata__") {
      if (!value.is_object()) throw fail("__metadata__ is not an object of strings");
      for (const auto& kv : value.items()) {
        if (!kv.value().is_string())
          throw fail("__metadata__ value for '" + printable(kv.key()) + "' is not a string");
        file.metadata_[kv.key()] = kv.value().get<std::string>();
      }
      continue;
    }

    const std::string what = "tensor '" + printable(name) + "'";
    if (!value.is_object()) throw fail(what + ": entry is not an object");

    // dtype
    auto dtype_it = value.find("dtype");
    if (dtype_it == value.end()) throw fail(what + ": missing 'dtype'");
    if (!dtype_it->is_string()) throw fail(what + ": 'dtype' is not a string");
    SafetensorsEntry entry;
    entry.dtype = dtype_it->get<std::string>();
    const size_t elem_size = known_dtype_size(entry.dtype);
    if (elem_size == 0) throw fail(what + ": unknown dtype '" + printable(entry.dtype) + "'");

    // shape: at most kMaxDims non-negative integers (Shape holds no more).
    auto shape_it = value.find("shape");
    if (shape_it == value.end()) throw fail(what + ": missing 'shape'");
    if (!shape_it->is_array()) throw fail(what + ": 'shape' is not an array");
    if (shape_it->size() > static_cast<size_t>(kMaxDims))
      throw fail(what + ": shape has rank " + std::to_string(shape_it->size()) + ", at most " +
                 std::to_string(kMaxDims) + " is supported");
    entry.shape.rank = 0;
    for (const nlohmann::json& dim : *shape_it) {
      const std::optional<int64_t> d = json_integer_value(dim);
      if (!d && dim.is_number_unsigned())
        throw fail(what + ": dimension " + std::to_string(dim.get<uint64_t>()) + " is too large");
      if (!d) throw fail(what + ": 'shape' holds a value that is not an integer");
      if (*d < 0) throw fail(what + ": negative dimension " + std::to_string(*d) + " in shape");
      entry.shape.dims[entry.shape.rank++] = *d;
    }

    // data_offsets: [begin, end], begin <= end <= size of the data section.
    auto offsets_it = value.find("data_offsets");
    if (offsets_it == value.end()) throw fail(what + ": missing 'data_offsets'");
    if (!offsets_it->is_array() || offsets_it->size() != 2 || !json_to_u64((*offsets_it)[0], &entry.begin) ||
        !json_to_u64((*offsets_it)[1], &entry.end))
      throw fail(what + ": 'data_offsets' is not [begin, end] with non-negative integers");
    if (entry.begin > entry.end)
      throw fail(what + ": data_offsets " + offsets_str(entry.begin, entry.end) + " has begin after end");
    if (entry.end > data_size)
      throw fail(what + ": data_offsets " + offsets_str(entry.begin, entry.end) +
                 " out of range: the data section holds " + std::to_string(data_size) +
                 " bytes (truncated file?)");

    // The byte count must equal numel * element size. Multiply with overflow checks: a
    // hostile shape like [2^40, 2^40] must not wrap around to a small number that happens to
    // match. Zero dimensions are skipped in the running product so that Shape::numel(), which
    // multiplies left to right, can never overflow on a shape that passed this check.
    uint64_t numel = 1;
    bool has_zero = false;
    for (int i = 0; i < entry.shape.rank; ++i) {
      const uint64_t d = static_cast<uint64_t>(entry.shape.dims[i]);
      if (d == 0) {
        has_zero = true;
        continue;
      }
      if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / d)
        throw fail(what + ": shape " + entry.shape.str() + " has too many elements");
      numel *= d;
    }
    if (has_zero) numel = 0;
    const uint64_t have = entry.end - entry.begin;
    const bool overflows = numel > std::numeric_limits<uint64_t>::max() / elem_size;
    if (overflows || numel * elem_size != have)
      throw fail(what + ": data size does not match dtype and shape: data_offsets " +
                 offsets_str(entry.begin, entry.end) + " hold " + std::to_string(have) + " bytes, " +
                 entry.dtype + " " + entry.shape.str() + " needs " +
                 (overflows ? std::string("more than 2^64") : std::to_string(numel * elem_size)) + " bytes");

    file.entries_.emplace(name, entry);  // JSON object keys are unique, so no clash here
  }

  // --- no two tensors may share bytes: writing one would silently change the other.
  // Sorted by begin, any overlap shows up between neighbours. Empty tensors hold no bytes and
  // cannot overlap anything.
  std::vector<std::pair<std::string, const SafetensorsEntry*>> by_begin;
  for (const auto& [name, entry] : file.entries_)
    if (entry.begin < entry.end) by_begin.emplace_back(name, &entry);
  std::sort(by_begin.begin(), by_begin.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const auto& [prev_name, prev] = by_begin[i - 1];
    const auto& [name, cur] = by_begin[i];
    if (cur->begin < prev->end)
      throw fail("tensors '" + printable(prev_name) + "' " + offsets_str(prev->begin, prev->end) + " and '" + printable(name) +
                 "' " + offsets_str(cur->begin, cur->end) + " overlap");
  }
  return file;
}

const std::string& SafetensorsFile::metadata_value(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) throw InputError(path_ + ": missing metadata '" + key + "'");
  return it->second;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw InputError(path_ + ": missing tensor '" + name + "'");
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& kv : entries_) out.push_back(kv.first);
  return out;
}

void SafetensorsFile::check(const std::string& name, DType dtype, const Shape& shape) const {
  const SafetensorsEntry& e = entry(name);
  if (e.dtype != dtype_name(dtype))
    throw InputError(path_ + ": tensor '" + name + "' has dtype " + e.dtype + ", expected " + dtype_name(dtype));
  if (e.shape != shape)
    throw InputError(path_ + ": tensor '" + name + "' has shape " + e.shape.str() + ", expected " + shape.str());
}

void SafetensorsFile::read(const std::string& name, DType dtype, const Shape& shape, void* dst) const {
  check(name, dtype, shape);
  const SafetensorsEntry& e = entry(name);
  // parse() checked that [begin, end) lies inside the data section and that its length is
  // numel * dtype size, so equal dtype and shape mean exactly the bytes dst expects.
  const size_t n = static_cast<size_t>(e.end - e.begin);
  if (n > 0) std::memcpy(dst, bytes_.data() + data_start_ + e.begin, n);
}

void write_safetensors(const std::string& path, const std::map<std::string, std::string>& metadata,
                       const std::vector<SafetensorsTensorRef>& tensors) {
  // --- the header. ordered_json keeps __metadata__ first and the tensors in the order given,
  // so the header reads in the same order as the data section.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::vector<size_t> sizes;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const SafetensorsTensorRef& t : tensors) {
    if (t.name == "__metadata__") throw std::invalid_argument("safetensors: '__metadata__' is not a tensor name");
    if (!seen.insert(t.name).second) throw std::invalid_argument("safetensors: duplicate tensor name '" + t.name + "'");
    nlohmann::ordered_json shape = nlohmann::ordered_json::array();
    for (int i = 0; i < t.shape.rank; ++i) {
      if (t.shape.dims[i] < 0)
        throw std::invalid_argument("safetensors: tensor '" + t.name + "' has negative shape " + t.shape.str());
      shape.push_back(t.shape.dims[i]);
    }
    const size_t bytes = static_cast<size_t>(t.shape.numel()) * dtype_size(t.dtype);
    if (bytes > 0 && t.data == nullptr)
      throw std::invalid_argument("safetensors: tensor '" + t.name + "' has no data");
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", std::move(shape)},
                      {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::ordered_json::type_error& e) {  // a name or value that is not UTF-8
    throw InputError(path + ": cannot write: " + e.what());
  }
  // Pad with spaces (valid JSON whitespace) so the data section starts 8-byte aligned, which
  // lets readers that map the file use the tensors in place.
  json.append((8 - json.size() % 8) % 8, ' ');

  // --- the file. Write everything to path.tmp, flush it to disk, then rename: rename within a
  // directory is atomic, so readers see either the old file or the complete new one.
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw InputError(path + ": cannot write " + tmp + ": " + std::strerror(errno));
  int err = 0;  // errno of the first step that failed; 0 while all is well
  auto step = [&](bool ok) {
    if (!ok && err == 0) err = errno ? errno : EIO;
  };
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(json.size()) >> (8 * i));
  errno = 0;
  step(std::fwrite(len, 1, 8, f) == 8);
  step(std::fwrite(json.data(), 1, json.size(), f) == json.size());
  // Host memory is written as is: safetensors data is little-endian, as are the hosts
  // tinytrain runs on (x86-64; copies from the GPU are byte-exact).
  for (size_t i = 0; i < tensors.size() && err == 0; ++i)
    if (sizes[i] > 0) step(std::fwrite(tensors[i].data, 1, sizes[i], f) == sizes[i]);
  if (err == 0) step(std::fflush(f) == 0 && fsync(fileno(f)) == 0);  // on disk before the rename
  step(std::fclose(f) == 0);
  if (err == 0) step(std::rename(tmp.c_str(), path.c_str()) == 0);
  if (err != 0) {
    std::remove(tmp.c_str());  // never leave a half-written file behind
    throw InputError(path + ": cannot write: " + std::strerror(err));
  }
}

}  // namespace tt
