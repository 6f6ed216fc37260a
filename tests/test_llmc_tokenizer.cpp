// llm.c's GPT-2 tokenizer file (data/llmc_tokenizer.h) and its shard directories
// (data/llmc_shards.h): a file built here byte by byte after llm.c's layout decodes, and every
// malformed one is refused in one line naming it. tests/llmc_data.sh runs them end to end.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/input_error.h"
#include "data/llmc_shards.h"
#include "data/llmc_tokenizer.h"
#include "tests/cli_test_util.h"

namespace tt::test {
namespace {

std::string le32(int32_t v) {
  std::string s(4, '\0');
  for (int b = 0; b < 4; ++b) s[b] = static_cast<char>((static_cast<uint32_t>(v) >> (8 * b)) & 0xff);
  return s;
}

// header (magic, version, count, eot, zeros) then each piece as a length byte and its bytes
std::string tokenizer_file(int32_t magic, int32_t version, int32_t count, int32_t eot,
                           const std::vector<std::string>& pieces) {
  std::string bytes = le32(magic) + le32(version) + le32(count) + le32(eot) + std::string(252 * 4, '\0');
  for (const std::string& p : pieces) bytes += static_cast<char>(p.size()) + p;
  return bytes;
}

void expect_refused(const std::string& bytes, const std::vector<std::string>& phrases) {
  try {
    LlmcTokenizer::parse("gpt2_tokenizer.bin", bytes);
    ADD_FAILURE() << "accepted; wanted an error holding " << phrases.front();
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("gpt2_tokenizer.bin: ", 0), 0u) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    for (const std::string& p : phrases) EXPECT_NE(what.find(p), std::string::npos) << what << " lacks " << p;
  }
}

TEST(LlmcTokenizer, DecodesTheBytesOfEachIdAndNamesItsEndOfText) {
  const LlmcTokenizer v2 = LlmcTokenizer::parse("t", tokenizer_file(20240328, 2, 3, 1, {"Hel", "\n", "lo"}));
  EXPECT_EQ(v2.vocab_size(), 3);
  EXPECT_EQ(v2.end_of_text(), 1);
  EXPECT_EQ(v2.decode({0, 2, 1, 0}), "Hello\nHel");
  // version 1 has no end-of-text field: the last id (GPT-2's 50256 of 50257)
  EXPECT_EQ(LlmcTokenizer::parse("t", tokenizer_file(20240328, 1, 3, 0, {"a", "b", "c"})).end_of_text(), 2);
  EXPECT_THROW(v2.decode({3}), InputError);
  EXPECT_THROW(v2.encode("Hello"), InputError);  // no merges: --prompt-ids instead
}

TEST(LlmcTokenizer, RefusesEachMalformedFileInOneLine) {
  const std::vector<std::string> two = {"a", "b"};
  expect_refused("", {"shorter than its 1024-byte header"});
  expect_refused(tokenizer_file(20240520, 2, 2, 1, two), {"magic 20240520", "expected 20240328"});
  expect_refused(tokenizer_file(20240328, 3, 2, 1, two), {"version 3"});
  expect_refused(tokenizer_file(20240328, 2, 0, 0, {}), {"holds 0 ids"});
  expect_refused(tokenizer_file(20240328, 2, 70000, 1, two), {"holds 70000 ids"});
  expect_refused(tokenizer_file(20240328, 2, 2, 2, two), {"end-of-text id 2"});
  expect_refused(tokenizer_file(20240328, 2, 3, 1, two), {"ends after 2 of its 3 ids"});
  expect_refused(tokenizer_file(20240328, 2, 2, 1, {"a", ""}), {"id 1 has an empty byte string"});
  std::string cut = tokenizer_file(20240328, 2, 2, 1, {"a", "bcd"});
  cut.pop_back();
  expect_refused(cut, {"id 1 needs 3 bytes, 2 are left"});
  expect_refused(tokenizer_file(20240328, 2, 2, 1, two) + "x", {"1 bytes follow its last id"});
}

TEST(LlmcShards, FindsTrainAndValInNameOrderAndRefusesWhatIsMissingOrAmbiguous) {
  ScratchDir dir;
  for (const char* sub : {"d", "v", "t", "both"}) std::filesystem::create_directories(dir.file(sub));
  dir.write("d/fineweb_train_000002.bin", "x");
  dir.write("d/fineweb_train_000001.bin", "x");
  dir.write("d/fineweb_val_000000.bin", "x");
  dir.write("d/notes.txt", "not a shard");
  const LlmcShards s = find_llmc_shards(dir.file("d"));
  ASSERT_EQ(s.train.size(), 2u);
  EXPECT_NE(s.train[0].find("000001"), std::string::npos);
  EXPECT_NE(s.train[1].find("000002"), std::string::npos);
  ASSERT_EQ(s.val.size(), 1u);
  EXPECT_FALSE(has_tokenizer_json(dir.file("d")));
  dir.write("v/x_val.bin", "x");
  EXPECT_THROW(find_llmc_shards(dir.file("v")), InputError);  // no train shard
  dir.write("t/x_train.bin", "x");
  EXPECT_THROW(find_llmc_shards(dir.file("t")), InputError);  // no val shard
  dir.write("both/train_val.bin", "x");
  EXPECT_THROW(find_llmc_shards(dir.file("both")), InputError);
  EXPECT_THROW(find_llmc_shards(dir.file("nowhere")), InputError);
}

}  // namespace
}  // namespace tt::test
