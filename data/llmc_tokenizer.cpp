// Reading llm.c's GPT-2 tokenizer file (llmc_tokenizer.h).
#include "data/llmc_tokenizer.h"

#include <cstring>

#include "base/input_error.h"
#include "data/file_io.h"

namespace tt {

namespace {

constexpr size_t kHeaderBytes = 256 * sizeof(int32_t);
// 65536 ids of at most 255 bytes and their length bytes, and the header: no valid file is larger.
constexpr uint64_t kMaxFileBytes = kHeaderBytes + 65536ull * 256;

int32_t header_field(const std::string& bytes, int i) {
  uint32_t v = 0;
  for (int b = 3; b >= 0; --b) v = (v << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(4 * i + b)]);
  return static_cast<int32_t>(v);
}

}  // namespace

LlmcTokenizer::LlmcTokenizer(const std::string& path) : LlmcTokenizer(parse(path, read_regular_file(path, kMaxFileBytes))) {}

LlmcTokenizer LlmcTokenizer::parse(const std::string& where, const std::string& bytes) {
  auto fail = [&](const std::string& problem) { return InputError(where + ": " + problem); };
  if (bytes.size() < kHeaderBytes)
    throw fail("not an llm.c tokenizer file: " + std::to_string(bytes.size()) + " bytes, shorter than its " +
               std::to_string(kHeaderBytes) + "-byte header");
  if (header_field(bytes, 0) != kLlmcTokenizerMagic)
    throw fail("not an llm.c tokenizer file: magic " + std::to_string(header_field(bytes, 0)) + ", expected " +
               std::to_string(kLlmcTokenizerMagic));
  const int32_t version = header_field(bytes, 1), count = header_field(bytes, 2);
  if (version != 1 && version != 2)
    throw fail("llm.c tokenizer version " + std::to_string(version) + " is not supported (1 or 2)");
  if (count < 1 || count > 65536)
    throw fail("it says it holds " + std::to_string(count) + " ids, outside [1, 65536]");
  LlmcTokenizer t;
  t.path_ = where;
  t.end_of_text_ = version == 2 ? header_field(bytes, 3) : count - 1;
  if (t.end_of_text_ < 0 || t.end_of_text_ >= count)
    throw fail("its end-of-text id " + std::to_string(t.end_of_text_) + " is outside its " + std::to_string(count) +
               " ids");
  t.pieces_.reserve(static_cast<size_t>(count));
  size_t at = kHeaderBytes;
  for (int32_t id = 0; id < count; ++id) {
    if (at >= bytes.size())
      throw fail("it ends after " + std::to_string(id) + " of its " + std::to_string(count) + " ids");
    const size_t length = static_cast<unsigned char>(bytes[at++]);
    if (length == 0) throw fail("id " + std::to_string(id) + " has an empty byte string");
    if (length > bytes.size() - at)
      throw fail("id " + std::to_string(id) + " needs " + std::to_string(length) + " bytes, " +
                 std::to_string(bytes.size() - at) + " are left");
    t.pieces_.emplace_back(bytes, at, length);
    at += length;
  }
  if (at != bytes.size())
    throw fail(std::to_string(bytes.size() - at) + " bytes follow its last id: not an llm.c tokenizer file");
  return t;
}

std::vector<int32_t> LlmcTokenizer::encode(const std::string& /*text*/) const {
  throw InputError(path_ + ": llm.c's tokenizer file holds no merges and cannot encode text: give the prompt as " +
                   "ids with --prompt-ids");
}

std::string LlmcTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size())
      throw InputError(path_ + ": cannot decode id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                       ", outside the vocabulary [0, " + std::to_string(vocab_size()) + ")");
    text += pieces_[static_cast<size_t>(ids[i])];
  }
  return text;
}

}  // namespace tt
