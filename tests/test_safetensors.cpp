// Tests for engine/io/safetensors: round trips through the writer and reader, and one test per
// way a file can be malformed. Malformed files are built from raw bytes (header length, JSON,
// data) so each case exercises exactly one problem.
#include "engine/io/safetensors.h"

#include <gtest/gtest.h>

#include <sys/stat.h>  // mkfifo

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "engine/config.h"
#include "tests/cli_test_util.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }

  // Writes bytes exactly as given.
  std::string write_bytes(const std::string& name, const std::string& bytes) const { return dir_.write(name, bytes); }

  // Writes a safetensors file by hand: header length (the JSON's own length unless given),
  // the JSON text, then the data section.
  std::string write_raw(const std::string& name, const std::string& json, const std::string& data = "",
                        uint64_t header_len = UINT64_MAX) const {
    return dir_.write(name, test::raw_safetensors(json, data, header_len));
  }

  // Runs fn, expects an InputError whose message starts with "<path>: " and contains phrase;
  // returns the message so a test can check more.
  static std::string expect_error(const std::string& p, const std::function<void()>& fn, const std::string& phrase) {
    try {
      fn();
    } catch (const InputError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(p + ": ", 0), 0u) << "message does not start with the path: " << msg;
      EXPECT_NE(msg.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
      return msg;
    }
    ADD_FAILURE() << "expected InputError containing '" << phrase << "'";
    return "";
  }

  // Opening the file at p must fail with phrase in the message.
  static std::string expect_open_error(const std::string& p, const std::string& phrase) {
    return expect_error(p, [&] { SafetensorsFile::open(p); }, phrase);
  }

  // A one-tensor header whose entry body is given literally.
  std::string one_entry(const std::string& name, const std::string& body, const std::string& data = "") const {
    return write_raw(name, "{\"t\":" + body + "}", data);
  }

  test::ScratchDir dir_;
};

// ---------------------------------------------------------------- round trips

TEST_F(SafetensorsTest, RoundTripRanksZeroToFourWithMetadata) {
  const float scalar = 3.5f;
  const std::vector<float> v1 = {1, -2, 3};
  std::vector<float> v2(2 * 3), v3(2 * 3 * 4), v4(1 * 2 * 3 * 2);
  for (size_t i = 0; i < v2.size(); ++i) v2[i] = 0.5f * static_cast<float>(i);
  for (size_t i = 0; i < v3.size(); ++i) v3[i] = -1.25f * static_cast<float>(i);
  for (size_t i = 0; i < v4.size(); ++i) v4[i] = 1e-3f * static_cast<float>(i);
  const std::vector<int32_t> ids = {7, -1, 2147483647, -2147483647 - 1, 0, 42};
  const std::map<std::string, std::string> meta = {{"format", "tinytrain-reference"}, {"version", "1"},
                                                   {"config", "{\"d_model\": 64}"}};
  const std::string p = path("round.safetensors");
  write_safetensors(p, meta,
                    {{"scalar", DType::F32, Shape{}, &scalar},
                     {"v1", DType::F32, Shape{3}, v1.data()},
                     {"v2", DType::F32, Shape{2, 3}, v2.data()},
                     {"v3", DType::F32, Shape{2, 3, 4}, v3.data()},
                     {"v4", DType::F32, Shape{1, 2, 3, 2}, v4.data()},
                     {"ids", DType::I32, Shape{2, 3}, ids.data()}});

  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.path(), p);
  EXPECT_EQ(f.metadata(), meta);
  EXPECT_EQ(f.metadata_value("format"), "tinytrain-reference");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"ids", "scalar", "v1", "v2", "v3", "v4"}));
  EXPECT_TRUE(f.contains("v3"));
  EXPECT_FALSE(f.contains("v5"));

  float got_scalar = 0;
  f.read("scalar", DType::F32, Shape{}, &got_scalar);
  EXPECT_EQ(got_scalar, scalar);
  std::vector<float> g1(3), g2(6), g3(24), g4(12);
  f.read("v1", DType::F32, Shape{3}, g1.data());
  f.read("v2", DType::F32, Shape{2, 3}, g2.data());
  f.read("v3", DType::F32, Shape{2, 3, 4}, g3.data());
  f.read("v4", DType::F32, Shape{1, 2, 3, 2}, g4.data());
  EXPECT_EQ(g1, v1);
  EXPECT_EQ(g2, v2);
  EXPECT_EQ(g3, v3);
  EXPECT_EQ(g4, v4);
  std::vector<int32_t> gids(6);
  f.read("ids", DType::I32, Shape{2, 3}, gids.data());
  EXPECT_EQ(gids, ids);

  // Entries keep the file's dtype spelling and the given order, laid out contiguously.
  EXPECT_EQ(f.entry("ids").dtype, "I32");
  EXPECT_EQ(f.entry("v3").shape, (Shape{2, 3, 4}));
  EXPECT_EQ(f.entry("scalar").begin, 0u);
  EXPECT_EQ(f.entry("scalar").end, 4u);
  EXPECT_EQ(f.entry("v1").begin, 4u);
  EXPECT_EQ(f.entry("v2").begin, 16u);
  EXPECT_EQ(f.entry("ids").end, 4u * (1 + 3 + 6 + 24 + 12 + 6));
}

TEST_F(SafetensorsTest, WriterPadsHeaderToEightBytesAndLeavesNoTmpFile) {
  const std::string p = path("pad.safetensors");
  const std::vector<float> v = {1, 2, 3};
  write_safetensors(p, {{"k", "v"}}, {{"a", DType::F32, Shape{3}, v.data()}});
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  const std::string bytes = test::read_whole_file(p);
  const uint64_t n = test::header_length(bytes);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 12);  // header, then exactly the data
  float first;
  std::memcpy(&first, bytes.data() + 8 + n, 4);
  EXPECT_EQ(first, 1.0f);
}

TEST_F(SafetensorsTest, WriterReplacesAnExistingFile) {
  const std::string p = path("replace.safetensors");
  const float a = 1, b = 2;
  write_safetensors(p, {}, {{"a", DType::F32, Shape{1}, &a}});
  write_safetensors(p, {}, {{"b", DType::F32, Shape{1}, &b}});
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.names(), std::vector<std::string>{"b"});
  EXPECT_TRUE(f.metadata().empty());
}

TEST_F(SafetensorsTest, EmptyFileAndZeroSizedTensorsRoundTrip) {
  const std::string p = path("empty.safetensors");
  write_safetensors(p, {}, {});
  EXPECT_TRUE(SafetensorsFile::open(p).names().empty());

  const std::string q = path("zero.safetensors");
  const float x = 9;
  write_safetensors(q, {}, {{"none", DType::F32, Shape{0, 3}, nullptr}, {"x", DType::F32, Shape{}, &x}});
  const SafetensorsFile f = SafetensorsFile::open(q);
  f.read("none", DType::F32, Shape{0, 3}, nullptr);  // nothing to copy
  float got = 0;
  f.read("x", DType::F32, Shape{}, &got);
  EXPECT_EQ(got, 9.0f);
}

TEST_F(SafetensorsTest, WriteIntoMissingDirectoryFailsCleanly) {
  const std::string p = path("no/such/dir/out.safetensors");
  const float a = 1;
  expect_error(p, [&] { write_safetensors(p, {}, {{"a", DType::F32, Shape{1}, &a}}); }, "cannot write");
  EXPECT_FALSE(fs::exists(p));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST_F(SafetensorsTest, WriterRejectsProgrammingErrors) {
  const std::string p = path("bad.safetensors");
  const float a = 1;
  EXPECT_THROW(write_safetensors(p, {}, {{"a", DType::F32, Shape{1}, &a}, {"a", DType::F32, Shape{1}, &a}}),
               std::invalid_argument);
  EXPECT_THROW(write_safetensors(p, {}, {{"__metadata__", DType::F32, Shape{1}, &a}}), std::invalid_argument);
  EXPECT_THROW(write_safetensors(p, {}, {{"a", DType::F32, Shape{1}, nullptr}}), std::invalid_argument);
  EXPECT_FALSE(fs::exists(p));
}

TEST_F(SafetensorsTest, AcceptsAllKnownDtypesPaddingAndTrailingBytes) {
  // A header as PyTorch might write it: other dtypes, space padding, unsorted offsets.
  const std::string json =
      R"({"b16":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},)"
      R"("h":{"dtype":"F16","shape":[1],"data_offsets":[4,6]},)"
      R"("flag":{"dtype":"BOOL","shape":[2],"data_offsets":[6,8]},)"
      R"("d":{"dtype":"F64","shape":[1],"data_offsets":[16,24]},)"
      R"("l":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},)"
      R"("s":{"dtype":"I16","shape":[1],"data_offsets":[24,26]},)"
      R"("c":{"dtype":"I8","shape":[1],"data_offsets":[26,27]},)"
      R"("u":{"dtype":"U8","shape":[1],"data_offsets":[27,28]},)"
      R"("e1":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
      R"("e2":{"dtype":"F32","shape":[0,5],"data_offsets":[4,4]}}    )";
  const std::string p = write_raw("dtypes.safetensors", json, std::string(28, '\x01') + "trailing");
  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.names().size(), 10u);
  EXPECT_EQ(f.entry("b16").dtype, "BF16");
  EXPECT_EQ(f.entry("d").begin, 16u);
  EXPECT_EQ(f.entry("e2").shape, (Shape{0, 5}));
  EXPECT_TRUE(f.metadata().empty());
  // tinytrain has no BF16 DType; asking for F32 names both spellings.
  std::vector<float> dst(1);
  expect_error(p, [&] { f.read("b16", DType::F32, Shape{2}, dst.data()); }, "has dtype BF16, expected F32");
}

// ---------------------------------------------------------------- errors on read

TEST_F(SafetensorsTest, ReadWrongDtype) {
  const std::string p = path("ids.safetensors");
  const std::vector<float> v(6, 1.0f);
  write_safetensors(p, {}, {{"x", DType::F32, Shape{2, 3}, v.data()}});
  const SafetensorsFile f = SafetensorsFile::open(p);
  std::vector<int32_t> dst(6);
  const std::string msg = expect_error(p, [&] { f.read("x", DType::I32, Shape{2, 3}, dst.data()); }, "dtype");
  EXPECT_EQ(msg, p + ": tensor 'x' has dtype F32, expected I32");
}

TEST_F(SafetensorsTest, ReadWrongShape) {
  const std::string p = path("shape.safetensors");
  const std::vector<int32_t> v(6, 1);
  write_safetensors(p, {}, {{"x", DType::I32, Shape{2, 3}, v.data()}});
  const SafetensorsFile f = SafetensorsFile::open(p);
  std::vector<int32_t> dst(5 * 16 * 64);
  const std::string msg = expect_error(p, [&] { f.read("x", DType::I32, Shape{5, 16, 64}, dst.data()); }, "shape");
  EXPECT_EQ(msg, p + ": tensor 'x' has shape [2, 3], expected [5, 16, 64]");
  // Same element count, different shape: still refused.
  expect_error(p, [&] { f.read("x", DType::I32, Shape{3, 2}, dst.data()); }, "has shape [2, 3], expected [3, 2]");
}

TEST_F(SafetensorsTest, MissingTensor) {
  const std::string p = path("missing.safetensors");
  write_safetensors(p, {}, {});
  const SafetensorsFile f = SafetensorsFile::open(p);
  float dst;
  EXPECT_EQ(expect_error(p, [&] { f.read("loss", DType::F32, Shape{}, &dst); }, "missing tensor"),
            p + ": missing tensor 'loss'");
  expect_error(p, [&] { f.entry("loss"); }, "missing tensor 'loss'");
}

TEST_F(SafetensorsTest, MissingMetadata) {
  const std::string p = path("meta.safetensors");
  write_safetensors(p, {{"format", "tinytrain-reference"}}, {});
  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(expect_error(p, [&] { f.metadata_value("steps"); }, "missing metadata"),
            p + ": missing metadata 'steps'");
}

// ---------------------------------------------------------------- malformed files

TEST_F(SafetensorsTest, FileCannotBeOpened) {
  const std::string p = path("does_not_exist.safetensors");
  expect_open_error(p, "cannot open file");
}

TEST_F(SafetensorsTest, DirectoryCannotBeRead) { expect_open_error(dir_.path(), "cannot read file"); }

TEST_F(SafetensorsTest, EmptyFileIsTruncated) { expect_open_error(write_bytes("e", ""), "truncated"); }

TEST_F(SafetensorsTest, ShorterThanEightBytesIsTruncated) {
  expect_open_error(write_bytes("short", std::string("\x02\0\0\0\0", 5)), "truncated");
}

TEST_F(SafetensorsTest, HeaderLengthBeyondFile) {
  expect_open_error(write_raw("len", "{}", "", 3), "beyond the end of the file");
}

TEST_F(SafetensorsTest, HeaderLengthHugeDoesNotWrap) {
  // 2^64 - 1: 8 + N would wrap around to 7 if computed naively.
  expect_open_error(write_raw("huge", "{}", "", UINT64_MAX - 1), "beyond the end of the file");
  std::string bytes(8, '\xff');
  expect_open_error(write_bytes("ff", bytes + "{}"), "beyond the end of the file");
}

TEST_F(SafetensorsTest, HeaderNotJson) { expect_open_error(write_raw("nj", "{\"a\": "), "header is not valid JSON"); }

TEST_F(SafetensorsTest, HeaderEmptyIsNotJson) { expect_open_error(write_raw("empty", ""), "header is not valid JSON"); }

TEST_F(SafetensorsTest, HeaderInvalidUtf8) {
  expect_open_error(write_raw("utf8", "{\"\xff\xfe\": 1}"), "header is not valid JSON");
}

// Issue 10, A: nlohmann reports a number beyond double's range as out_of_range, not as a
// parse error; it must still be the reader's one error type, with the path.
TEST_F(SafetensorsTest, HeaderNumberBeyondDoubleIsInputError) {
  const std::string p = write_raw("1e400", "{\"a\":1E400}");
  EXPECT_EQ(fs::file_size(p), 19u);
  expect_open_error(p, "header is not valid JSON: number overflow parsing '1E400'");
}

// Names and dtypes from the file are quoted printable: a newline cannot split the line.
TEST_F(SafetensorsTest, NamesInMessagesArePrintable) {
  expect_open_error(one_entry("nl", R"({"dtype":"F8\nX","shape":[1],"data_offsets":[0,1]})", "a"), "unknown dtype 'F8?X'");
}

// A FIFO (or a device) has no size to check and could block forever: refused before reading.
TEST_F(SafetensorsTest, FifoIsNotARegularFile) {
  const std::string p = path("fifo");
  ASSERT_EQ(mkfifo(p.c_str(), 0600), 0);
  expect_open_error(p, "not a regular file");
}

// parse() is open() without the file: the same checks on bytes in memory.
TEST_F(SafetensorsTest, ParseChecksBytesInMemory) {
  const std::string bytes = test::raw_safetensors(R"({"t":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", "abcd");
  const SafetensorsFile f = SafetensorsFile::parse("mem", std::vector<char>(bytes.begin(), bytes.end()));
  EXPECT_EQ(f.entry("t").end, 4u);
  EXPECT_EQ(f.size(), bytes.size());
  const std::string truncated = bytes.substr(0, bytes.size() - 1);
  expect_error("mem", [&] { SafetensorsFile::parse("mem", std::vector<char>(truncated.begin(), truncated.end())); },
               "out of range");
}

TEST_F(SafetensorsTest, HeaderNotAnObject) { expect_open_error(write_raw("arr", "[1, 2]"), "not a JSON object"); }

TEST_F(SafetensorsTest, EntryNotAnObject) {
  expect_open_error(one_entry("eno", "[1, 2]"), "tensor 't': entry is not an object");
}

TEST_F(SafetensorsTest, MissingDtype) {
  expect_open_error(one_entry("md", R"({"shape":[1],"data_offsets":[0,4]})", "abcd"), "missing 'dtype'");
}

TEST_F(SafetensorsTest, DtypeNotString) {
  expect_open_error(one_entry("dns", R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})", "abcd"),
                    "'dtype' is not a string");
}

TEST_F(SafetensorsTest, UnknownDtype) {
  expect_open_error(one_entry("ud", R"({"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]})", "a"),
                    "unknown dtype 'F8_E4M3'");
}

TEST_F(SafetensorsTest, MissingShape) {
  expect_open_error(one_entry("ms", R"({"dtype":"F32","data_offsets":[0,4]})", "abcd"), "missing 'shape'");
}

TEST_F(SafetensorsTest, ShapeNotArray) {
  expect_open_error(one_entry("sna", R"({"dtype":"F32","shape":4,"data_offsets":[0,16]})", std::string(16, 'a')),
                    "'shape' is not an array");
}

TEST_F(SafetensorsTest, ShapeNotIntegers) {
  expect_open_error(one_entry("sf", R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})", std::string(8, 'a')),
                    "'shape' holds a value that is not an integer");
  expect_open_error(one_entry("ss", R"({"dtype":"F32","shape":["2"],"data_offsets":[0,8]})", std::string(8, 'a')),
                    "'shape' holds a value that is not an integer");
}

TEST_F(SafetensorsTest, NegativeDimension) {
  expect_open_error(one_entry("neg", R"({"dtype":"F32","shape":[2,-3],"data_offsets":[0,0]})"),
                    "negative dimension -3");
}

TEST_F(SafetensorsTest, RankAboveFour) {
  expect_open_error(one_entry("r5", R"({"dtype":"U8","shape":[1,1,1,1,1],"data_offsets":[0,1]})", "a"),
                    "rank 5");
}

TEST_F(SafetensorsTest, DimensionBeyondInt64) {
  expect_open_error(one_entry("big", R"({"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,1]})", "a"),
                    "too large");
}

TEST_F(SafetensorsTest, MissingDataOffsets) {
  expect_open_error(one_entry("mo", R"({"dtype":"F32","shape":[1]})", "abcd"), "missing 'data_offsets'");
}

TEST_F(SafetensorsTest, DataOffsetsIllTyped) {
  const std::string phrase = "'data_offsets' is not [begin, end]";
  expect_open_error(one_entry("o1", R"({"dtype":"F32","shape":[1],"data_offsets":4})", "abcd"), phrase);
  expect_open_error(one_entry("o2", R"({"dtype":"F32","shape":[1],"data_offsets":[0]})", "abcd"), phrase);
  expect_open_error(one_entry("o3", R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})", "abcd"), phrase);
  expect_open_error(one_entry("o4", R"({"dtype":"F32","shape":[1],"data_offsets":[-4,0]})", "abcd"), phrase);
  expect_open_error(one_entry("o5", R"({"dtype":"F32","shape":[1],"data_offsets":[0,"4"]})", "abcd"), phrase);
  expect_open_error(one_entry("o6", R"({"dtype":"F32","shape":[1],"data_offsets":[0,4.0]})", "abcd"), phrase);
}

TEST_F(SafetensorsTest, DataOffsetsBeginAfterEnd) {
  expect_open_error(one_entry("be", R"({"dtype":"F32","shape":[1],"data_offsets":[8,4]})", std::string(8, 'a')),
                    "data_offsets [8, 4] has begin after end");
}

TEST_F(SafetensorsTest, DataOffsetsOutOfRange) {
  // Four bytes claimed at [4, 8) of a data section of 6 bytes.
  const std::string msg = expect_open_error(
      one_entry("oor", R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})", std::string(6, 'a')), "out of range");
  EXPECT_NE(msg.find("holds 6 bytes"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, SizeDoesNotMatchDtypeAndShape) {
  expect_open_error(one_entry("sz", R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,20]})", std::string(24, 'a')),
                    "size does not match dtype and shape");
}

TEST_F(SafetensorsTest, HugeDimsDoNotOverflowElementCount) {
  // 2^40 * 2^40 elements overflows 64 bits.
  expect_open_error(
      one_entry("h1", R"({"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,4]})", "abcd"),
      "too many elements");
  // Even with a zero dimension the product of the others must fit, so Shape::numel() stays safe.
  expect_open_error(
      one_entry("h2", R"({"dtype":"F32","shape":[1099511627776,1099511627776,0],"data_offsets":[0,0]})"),
      "too many elements");
}

TEST_F(SafetensorsTest, HugeDimsDoNotOverflowByteCount) {
  // (2^62 + 1) * 4 bytes wraps to exactly 4 in 64 bits: unchecked, this would "match".
  expect_open_error(one_entry("w", R"({"dtype":"F32","shape":[4611686018427387905],"data_offsets":[0,4]})", "abcd"),
                    "size does not match dtype and shape");
  // 2^61 * 8 wraps to 0.
  expect_open_error(one_entry("z", R"({"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]})"),
                    "size does not match dtype and shape");
}

TEST_F(SafetensorsTest, OverlappingTensors) {
  const std::string json =
      R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},)"
      R"("c":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  expect_open_error(write_raw("ov", json, std::string(24, 'a')), "overlap");
}

TEST_F(SafetensorsTest, IdenticalRangesOverlap) {
  const std::string json =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})";
  expect_open_error(write_raw("same", json, std::string(8, 'a')), "tensors 'a' [0, 8] and 'b' [0, 8] overlap");
}

TEST_F(SafetensorsTest, MetadataNotAnObject) {
  expect_open_error(write_raw("mno", R"({"__metadata__":["a"]})"), "__metadata__ is not an object");
}

TEST_F(SafetensorsTest, MetadataValueNotString) {
  expect_open_error(write_raw("mvs", R"({"__metadata__":{"steps":3}})"),
                    "__metadata__ value for 'steps' is not a string");
}

}  // namespace
}  // namespace tt
