// Token shards (data/token_shard.h): the writer against an independent reading of the bytes,
// the committed seed shard written by a Python script, and every malformed header refused in
// one line, naming the file, without allocating what the header claims.
#include <gtest/gtest.h>
#include <sys/stat.h>  // mkfifo

#include <atomic>
#include <climits>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/token_shard.h"
#include "engine/config.h"
#include "tests/cli_test_util.h"

// Every allocation of this test binary passes through here, so a test can see the largest
// one a call made: a reader that trusted a header's count would ask for up to 4 GiB.
namespace {
std::atomic<size_t> g_largest_allocation{0};
}

void* operator new(size_t n) {
  size_t seen = g_largest_allocation.load();
  while (n > seen && !g_largest_allocation.compare_exchange_weak(seen, n)) {
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace tt::test {
namespace {

const std::string kSeedShard = std::string(TINYTRAIN_SOURCE_DIR) + "/tests/fuzz/seeds/tiny_shard.bin";

// A shard's bytes built by hand, little-endian, with whatever header values a case wants.
std::string raw_shard(int32_t magic, int32_t version, int32_t count, const std::vector<uint16_t>& tokens) {
  std::string bytes(1024, '\0');
  const int32_t fields[3] = {magic, version, count};
  for (int f = 0; f < 3; ++f)
    for (int b = 0; b < 4; ++b) bytes[4 * f + b] = static_cast<char>((static_cast<uint32_t>(fields[f]) >> (8 * b)) & 0xff);
  for (uint16_t t : tokens) {
    bytes += static_cast<char>(t & 0xff);
    bytes += static_cast<char>(t >> 8);
  }
  return bytes;
}

std::string valid_shard(const std::vector<uint16_t>& tokens) {
  return raw_shard(20240520, 1, static_cast<int32_t>(tokens.size()), tokens);
}

// open() must refuse the file in one line that starts with its path and holds each phrase,
// allocating at most 64 KiB along the way (the messages; never the claimed tokens). parse()
// must say the same about the same bytes.
void expect_refused(const std::string& path, int vocab_size, std::initializer_list<std::string> phrases) {
  SCOPED_TRACE(path);
  g_largest_allocation = 0;
  std::string message;
  try {
    TokenShard::open(path, vocab_size);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    message = e.what();
  }
  EXPECT_LE(g_largest_allocation.load(), 64u << 10) << "open allocated " << g_largest_allocation.load() << " bytes";
  EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  for (const std::string& phrase : phrases) EXPECT_TRUE(contains(message, phrase)) << "'" << phrase << "' in: " << message;

  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return;
  const std::string bytes = read_whole_file(path);
  try {
    TokenShard::parse(path, bytes.data(), bytes.size(), vocab_size);
    ADD_FAILURE() << "parse accepted what open refused";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

// The harness itself: the hook sees an allocation, or the bounds below would hold vacuously.
TEST(TokenShard, TheAllocationHookSeesAllocations) {
  g_largest_allocation = 0;
  const std::vector<char> megabyte(1 << 20);
  EXPECT_GE(g_largest_allocation.load(), megabyte.size());
}

TEST(TokenShard, RoundTripsThroughTheWriter) {
  ScratchDir dir;
  const std::vector<int32_t> tokens = {0, 1, 255, 256, 4095, 12345, 65535, 7};
  const std::string path = dir.file("train.bin");
  write_token_shard(path, tokens);
  // The bytes, read independently of the reader: header, then uint16 little-endian tokens.
  const std::string bytes = read_whole_file(path);
  std::vector<uint16_t> expected(tokens.begin(), tokens.end());
  EXPECT_EQ(bytes, valid_shard(expected));
  const TokenShard shard = TokenShard::open(path, 65536);
  EXPECT_EQ(shard.tokens(), expected);
  EXPECT_EQ(shard.path(), path);
  // The atomic write leaves only the shard behind.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
}

TEST(TokenShard, WriterRefusesTokensOutsideUint16) {
  ScratchDir dir;
  EXPECT_THROW(write_token_shard(dir.file("a.bin"), {1, 65536}), std::invalid_argument);
  EXPECT_THROW(write_token_shard(dir.file("b.bin"), {-1}), std::invalid_argument);
  EXPECT_FALSE(fs::exists(dir.file("a.bin")));
  EXPECT_FALSE(fs::exists(dir.file("b.bin")));
}

// The fuzz seed, written by tests/fuzz/make_token_shard_seed.py without tinytrain: the reader
// reads it, and the writer writes the same bytes for its tokens.
TEST(TokenShard, ReadsTheCommittedSeedWrittenByPython) {
  const TokenShard shard = TokenShard::open(kSeedShard, 256);
  std::string text;
  for (uint16_t t : shard.tokens()) text += static_cast<char>(t);
  EXPECT_EQ(text, std::string("\0A tiny shard.\n\0Two documents, bytes as ids.\n", 45));
  ScratchDir dir;
  write_token_shard(dir.file("again.bin"), std::vector<int32_t>(shard.tokens().begin(), shard.tokens().end()));
  EXPECT_EQ(read_whole_file(dir.file("again.bin")), read_whole_file(kSeedShard));
}

TEST(TokenShard, RefusesEachMalformedHeaderInOneLine) {
  ScratchDir dir;
  const std::vector<uint16_t> five = {1, 2, 3, 4, 5};
  expect_refused(dir.write("empty.bin", ""), 256, {"truncated", "0 bytes", "1024-byte header"});
  expect_refused(dir.write("short.bin", valid_shard(five).substr(0, 1000)), 256, {"truncated", "1000 bytes"});
  expect_refused(dir.write("magic.bin", raw_shard(20240521, 1, 5, five)), 256,
                 {"not a token shard", "magic 20240521", "expected 20240520"});
  expect_refused(dir.write("safetensors.bin", read_whole_file(std::string(TINYTRAIN_SOURCE_DIR) +
                                                             "/tests/fuzz/seeds/tiny_reference.safetensors")),
                 256, {"not a token shard", "magic"});
  expect_refused(dir.write("version.bin", raw_shard(20240520, 2, 5, five)), 256, {"version 2", "expected 1"});
  expect_refused(dir.write("zero.bin", raw_shard(20240520, 1, 0, {})), 256, {"token count is 0", ">= 1"});
  expect_refused(dir.write("negative.bin", raw_shard(20240520, 1, -5, five)), 256, {"token count is -5"});
  // count vs size, both ways, with both numbers named
  expect_refused(dir.write("more.bin", raw_shard(20240520, 1, 6, five)), 256,
                 {"token count 6", "file of 1036 bytes", "the file has 1034"});
  expect_refused(dir.write("fewer.bin", raw_shard(20240520, 1, 4, five)), 256,
                 {"token count 4", "file of 1032 bytes", "the file has 1034"});
  expect_refused(dir.write("odd.bin", valid_shard(five) + "x"), 256, {"file of 1034 bytes", "the file has 1035"});
  // 2^31 - 1 tokens claimed by a 1034-byte file: refused from the size, nothing allocated
  expect_refused(dir.write("huge.bin", raw_shard(20240520, 1, INT32_MAX, five)), 256,
                 {"token count 2147483647", "file of 4294968318 bytes", "the file has 1034"});
}

TEST(TokenShard, RefusesATokenBeyondTheVocabularyNamingIndexAndValue) {
  ScratchDir dir;
  const std::string path = dir.write("tokens.bin", valid_shard({0, 255, 256, 3}));
  EXPECT_EQ(TokenShard::open(path, 257).tokens().size(), 4u);
  expect_refused(path, 256, {"token 2 is 256", "outside the vocabulary [0, 256)"});
  expect_refused(dir.write("max.bin", valid_shard({65535})), 4096, {"token 0 is 65535", "[0, 4096)"});
}

TEST(TokenShard, RefusesWhatIsNotARegularFile) {
  ScratchDir dir;
  expect_refused(dir.file("missing.bin"), 256, {"cannot open", "No such file"});
  expect_refused(dir.path(), 256, {"is a directory"});
  expect_refused("/dev/zero", 256, {"not a regular file"});
  const std::string fifo = dir.file("fifo.bin");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_refused(fifo, 256, {"not a regular file"});  // and does not wait for a writer
}

TEST(TokenShard, RefusesAVocabularySizeNoShardHas) {
  const std::string bytes = valid_shard({1});
  for (int vocab : {0, -1, 65537})
    EXPECT_THROW(TokenShard::parse("in-memory", bytes.data(), bytes.size(), vocab), InputError) << vocab;
}

}  // namespace
}  // namespace tt::test
