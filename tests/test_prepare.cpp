// Data preparation (data/tokenizer.h, data/prepare.h): the byte and SentencePiece BPE
// tokenizers round-trip text and train reproducibly; tokenizer.json is checked like any input;
// `tinytrain prepare`, run as a user runs it, writes shards whose documents decode back to
// exactly the input's documents, split between train and val; and every bad input ends in
// exit 1 and one line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "engine/config.h"
#include "tests/cli_test_util.h"

namespace tt::test {
namespace {

const std::string kBin = TINYTRAIN_BIN;

// Deterministic English-like text: sentences from small word lists, picked by a fixed LCG.
class SentenceMaker {
 public:
  explicit SentenceMaker(uint64_t seed) : state_(seed) {}

  std::string sentence() {
    static const std::vector<std::string> subjects = {
        "the cat", "a small dog", "my old friend", "the teacher", "every student", "the farmer", "our neighbour",
        "a quiet child", "the captain", "this machine", "the river", "an honest man", "the weather", "my sister"};
    static const std::vector<std::string> verbs = {"sees", "likes", "writes about", "remembers", "carries",
                                                   "follows", "watches", "forgets", "builds", "believes in",
                                                   "paints", "answers", "visits", "understands"};
    static const std::vector<std::string> objects = {
        "the garden", "a long letter", "the morning train", "some bread", "the open window", "a strange story",
        "the mountain", "every question", "the yellow house", "a wooden boat", "the evening news", "our village"};
    static const std::vector<std::string> endings = {"", " today", " again", " slowly", " in the rain",
                                                     " before dinner", " with great care", " every winter"};
    std::string s = subjects[pick(subjects.size())] + " " + verbs[pick(verbs.size())] + " " +
                    objects[pick(objects.size())] + endings[pick(endings.size())];
    s[0] = static_cast<char>(s[0] - 'a' + 'A');
    return s + ".!?"[pick(3)];
  }

  // A paragraph of `n` sentences, one line each or joined by spaces.
  std::string paragraph(int n) {
    std::string p;
    for (int i = 0; i < n; ++i) p += sentence() + (pick(2) ? "\n" : " ");
    if (p.back() == ' ') p.back() = '\n';
    return p;
  }

 private:
  size_t pick(size_t n) {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>((state_ >> 33) % n);
  }
  uint64_t state_;
};

// Text the BPE tests train on: about 6 KB.
std::vector<std::string> english_documents(int n, uint64_t seed) {
  SentenceMaker maker(seed);
  std::vector<std::string> docs;
  for (int i = 0; i < n; ++i) docs.push_back(maker.paragraph(3 + i % 4));
  return docs;
}

// Strings that stress a round trip: unseen characters (byte fallback), runs of spaces,
// leading and trailing whitespace, tabs, newlines, the replacement character.
const std::vector<std::string> kHardTexts = {
    "The cat sees the garden.",
    "  two leading spaces,   three inside, and trailing  ",
    "tabs\there\tand\nnew\nlines\n\n\nblank lines",
    "naïve café, Straße, Ελληνικά, 日本語, emoji 🎉🙂, math ∑ ≠ ∞",
    "\xEF\xBF\xBD replacement char, then CR LF\r\n",
    "",
};

// ---- the byte tokenizer ----

TEST(ByteTokenizer, RoundTripsAnyTextIncludingNonAscii) {
  ByteTokenizer bytes;
  EXPECT_EQ(bytes.vocab_size(), 256);
  EXPECT_EQ(bytes.kind(), "byte");
  EXPECT_EQ(bytes.end_of_text(), 0);
  for (const std::string& text : kHardTexts) {
    const std::vector<int32_t> ids = bytes.encode(text);
    ASSERT_EQ(ids.size(), text.size());
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(text[i]));
    EXPECT_EQ(bytes.decode(ids), text);
  }
  EXPECT_EQ(bytes.encode("é"), (std::vector<int32_t>{0xC3, 0xA9}));
  EXPECT_THROW(bytes.decode({65, 256}), InputError);
  EXPECT_THROW(bytes.decode({-1}), InputError);
}

// ---- SentencePiece BPE ----

class Bpe : public ::testing::Test {
 protected:
  static constexpr int kVocab = 400;
  std::string train(const std::string& name, uint64_t seed = 1) {
    const std::string path = dir_.file(name);
    train_sentencepiece_bpe(english_documents(40, 11), path, kVocab, seed);
    return path;
  }
  ScratchDir dir_;
};

TEST_F(Bpe, RoundTripsTheTrainingTextAndTextItNeverSaw) {
  const SentencePieceTokenizer bpe(train("m.model"));
  EXPECT_EQ(bpe.vocab_size(), kVocab);
  EXPECT_EQ(bpe.kind(), "bpe");
  const std::vector<std::string> docs = english_documents(40, 11);
  size_t bytes = 0, tokens = 0;
  for (const std::string& doc : docs) {
    const std::vector<int32_t> ids = bpe.encode(doc);
    EXPECT_EQ(bpe.decode(ids), doc);
    bytes += doc.size();
    tokens += ids.size();
  }
  // Merges learned: well above one byte per token on the text it was trained on.
  EXPECT_GT(static_cast<double>(bytes) / tokens, 2.0) << bytes << " bytes, " << tokens << " tokens";
  for (const std::string& text : kHardTexts) {
    const std::vector<int32_t> ids = bpe.encode(text);
    EXPECT_EQ(bpe.decode(ids), text);
    for (int32_t id : ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, kVocab);
      EXPECT_NE(id, bpe.end_of_text()) << "no text encodes to the end-of-text id";
    }
  }
  EXPECT_THROW(bpe.decode({kVocab}), InputError);
}

TEST_F(Bpe, SameTextAndSeedGiveTheSameModelAndIds) {
  const std::string a = train("a.model", 5), b = train("b.model", 5);
  EXPECT_EQ(read_whole_file(a), read_whole_file(b));
  const SentencePieceTokenizer ta(a), tb(b);
  const std::string text = english_documents(3, 99)[2];
  EXPECT_EQ(ta.encode(text), tb.encode(text));
}

TEST_F(Bpe, AVocabularyTheTextCannotSupportIsOneLine) {
  for (int vocab : {270, 60000}) {
    try {
      train_sentencepiece_bpe(english_documents(40, 11), dir_.file("bad.model"), vocab, 1);
      ADD_FAILURE() << vocab << " accepted";
    } catch (const InputError& e) {
      const std::string message = e.what();
      EXPECT_TRUE(contains(message, "SentencePiece cannot train a vocabulary of " + std::to_string(vocab))) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
  EXPECT_FALSE(fs::exists(dir_.file("bad.model")));
}

TEST_F(Bpe, ACorruptModelFileIsOneLine) {
  const std::string path = dir_.write("junk.model", "this is not a protobuf \x01\x02\x03");
  try {
    SentencePieceTokenizer bad(path);
    ADD_FAILURE() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": not a SentencePiece model", 0), 0u) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
  EXPECT_THROW(SentencePieceTokenizer(dir_.file("missing.model")), InputError);
}

// ---- tokenizer.json ----

TEST_F(Bpe, TokenizerJsonLoadsAndEveryBadFieldIsRefused) {
  train("tokenizer.model");
  const ByteTokenizer bytes;
  dir_.write("tokenizer.json", tokenizer_json(bytes));
  EXPECT_EQ(load_tokenizer(dir_.path())->kind(), "byte");
  dir_.write("tokenizer.json", tokenizer_json(SentencePieceTokenizer(dir_.file("tokenizer.model"))));
  const std::unique_ptr<Tokenizer> loaded = load_tokenizer(dir_.path());
  EXPECT_EQ(loaded->kind(), "bpe");
  EXPECT_EQ(loaded->vocab_size(), kVocab);

  const std::map<std::string, std::string> bad = {
      {R"({"kind": "bpe", "vocab_size": 399, "model": "tokenizer.model"})", "has 400 ids"},
      {R"({"kind": "byte", "vocab_size": 300})", "has 256 ids"},
      {R"({"kind": "wordpiece", "vocab_size": 256})", "field 'kind'"},
      {R"({"kind": "bpe", "vocab_size": 400, "model": "../tokenizer.model"})", "field 'model'"},
      {R"({"kind": "bpe", "vocab_size": 400, "model": "/etc/passwd"})", "field 'model'"},
      {R"({"kind": "bpe", "vocab_size": 400})", "missing field 'model'"},
      {R"({"kind": "byte", "vocab_size": 256, "model": "tokenizer.model"})", "unknown field 'model'"},
      {R"({"kind": "byte", "vocab_size": 256.0})", "field 'vocab_size'"},
      {R"({"kind": "byte", "vocab_size": 1e300})", "field 'vocab_size'"},
      {R"({"kind": "bpe", "vocab_size": 400, "model": "missing.model"})", "cannot open"},
      {R"(["kind"])", "not a JSON object"},
      {R"({"kind": )", "not valid JSON"},
  };
  for (const auto& [json, phrase] : bad) {
    dir_.write("tokenizer.json", json);
    try {
      load_tokenizer(dir_.path());
      ADD_FAILURE() << "accepted: " << json;
    } catch (const InputError& e) {
      EXPECT_TRUE(contains(e.what(), phrase)) << json << " -> " << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  }
}

// ---- tinytrain prepare ----

// The documents a shard holds: its tokens split at end_of_text (which starts each document),
// each decoded, with encode(decoded) checked to give the shard's ids back.
std::vector<std::string> shard_documents(const TokenShard& shard, const Tokenizer& tokenizer) {
  std::vector<std::string> docs;
  const std::vector<uint16_t>& t = shard.tokens();
  EXPECT_FALSE(t.empty());
  EXPECT_EQ(t.front(), tokenizer.end_of_text()) << "a shard starts with end-of-text";
  for (size_t i = 0; i < t.size();) {
    size_t j = i + 1;
    while (j < t.size() && t[j] != tokenizer.end_of_text()) ++j;
    const std::vector<int32_t> ids(t.begin() + static_cast<long>(i) + 1, t.begin() + static_cast<long>(j));
    docs.push_back(tokenizer.decode(ids));
    EXPECT_EQ(tokenizer.encode(docs.back()), ids) << "the shard holds the tokenizer's encoding";
    i = j;
  }
  return docs;
}

// An input tree: a fortune file of 40 documents, an essay (one document), and what a directory
// walk skips (a binary file, a symbolic link).
struct Corpus {
  std::string dir;
  std::vector<std::string> documents;  // in order
  size_t bytes = 0;
};

Corpus write_corpus(const ScratchDir& scratch) {
  Corpus c;
  c.dir = scratch.file("corpus");
  fs::create_directories(c.dir + "/more");
  std::string fortunes;
  for (const std::string& doc : english_documents(40, 3)) {
    fortunes += doc + "%\n";
    c.documents.push_back(doc);
  }
  scratch.write("corpus/fortunes", "%\n" + fortunes);  // a leading separator: no empty document
  const std::string essay = SentenceMaker(4).paragraph(6) + "\n" + SentenceMaker(5).paragraph(4);
  scratch.write("corpus/more/essay.txt", essay);
  c.documents.push_back(essay);
  scratch.write("corpus/more/index.dat", std::string("\x00\x00\x01\x02 binary", 10));
  fs::create_symlink("fortunes", c.dir + "/fortunes.u8");
  for (const std::string& d : c.documents) c.bytes += d.size();
  return c;
}

struct Summary {
  size_t documents = 0, train_docs = 0, val_docs = 0, files = 0, bytes = 0, tokens = 0, train_tokens = 0,
         val_tokens = 0;
  double bytes_per_token = 0;
  std::string kind;
  int vocab = 0;
};

// Parses the summary line; fails the test when it is not there.
Summary parse_summary(const std::string& line) {
  const char* format =
      R"(^prepare: (\d+) documents \(train (\d+), val (\d+)\) from (\d+) files, (\d+) bytes -> (\d+) tokens )"
      R"(\(train (\d+), val (\d+); one end-of-text per document\), ([0-9.]+) bytes/token, (bpe|byte) vocab (\d+), )"
      R"([0-9.]+ s -> .+$)";
  Summary s;
  const auto m = regex_match_groups(line, format);
  if (!m) {
    ADD_FAILURE() << "not the summary line: " << line;
    return s;
  }
  auto n = [&](int i) { return static_cast<size_t>(std::stoull((*m)[i])); };
  s = {n(1), n(2), n(3), n(4), n(5), n(6), n(7), n(8), std::stod((*m)[9]), (*m)[10], std::stoi((*m)[11])};
  return s;
}

std::vector<std::string> prepare_args(const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {kBin, "prepare"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return argv;
}

// Runs prepare on the corpus and checks everything it wrote against the corpus.
void check_prepare_end_to_end(const std::string& tokenizer_kind, const std::vector<std::string>& extra_flags) {
  ScratchDir scratch;
  const Corpus corpus = write_corpus(scratch);
  const std::string out = scratch.file("out");
  std::vector<std::string> flags = {"--input", corpus.dir, "--out", out, "--tokenizer", tokenizer_kind,
                                    "--val-fraction", "0.2", "--seed", "7"};
  flags.insert(flags.end(), extra_flags.begin(), extra_flags.end());
  const CliResult r = run_command(prepare_args(flags), scratch.path(), 120);
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  EXPECT_EQ(r.err, "");
  const std::vector<std::string> lines = r.out_lines();
  ASSERT_EQ(lines.size(), 2u) << r.describe();
  EXPECT_EQ(lines[0], "prepare: skipped 1 binary files (the first: " + corpus.dir +
                          "/more/index.dat) and 1 symbolic links in directories");
  const Summary s = parse_summary(lines[1]);

  // The files, and the tokenizer they name.
  for (const char* name : {"train.bin", "val.bin", "tokenizer.json"}) EXPECT_TRUE(fs::exists(out + "/" + name)) << name;
  EXPECT_EQ(fs::exists(out + "/tokenizer.model"), tokenizer_kind == "bpe");
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(out);
  EXPECT_EQ(tokenizer->kind(), tokenizer_kind);
  EXPECT_EQ(s.kind, tokenizer_kind);
  EXPECT_EQ(s.vocab, tokenizer->vocab_size());

  // The shards hold exactly the corpus's documents, each once, split between them.
  const TokenShard train = TokenShard::open(out + "/train.bin", tokenizer->vocab_size());
  const TokenShard val = TokenShard::open(out + "/val.bin", tokenizer->vocab_size());
  const std::vector<std::string> train_docs = shard_documents(train, *tokenizer);
  const std::vector<std::string> val_docs = shard_documents(val, *tokenizer);
  std::vector<std::string> all = train_docs;
  all.insert(all.end(), val_docs.begin(), val_docs.end());
  std::vector<std::string> expected = corpus.documents;
  std::sort(all.begin(), all.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);

  // The summary's numbers are the files' numbers.
  EXPECT_EQ(s.documents, corpus.documents.size());
  EXPECT_EQ(s.train_docs, train_docs.size());
  EXPECT_EQ(s.val_docs, val_docs.size());
  EXPECT_GE(s.val_docs, 1u);
  EXPECT_GE(s.train_docs, s.val_docs);
  EXPECT_EQ(s.files, 2u);
  EXPECT_EQ(s.bytes, corpus.bytes);
  EXPECT_EQ(s.train_tokens, train.tokens().size());
  EXPECT_EQ(s.val_tokens, val.tokens().size());
  EXPECT_EQ(s.tokens, s.train_tokens + s.val_tokens);
  EXPECT_NEAR(s.bytes_per_token, static_cast<double>(s.bytes) / (s.tokens - s.documents), 0.006);
  if (tokenizer_kind == "byte") {
    EXPECT_EQ(s.tokens, corpus.bytes + corpus.documents.size());
  }

  // The same command writes the same bytes.
  flags[3] = scratch.file("again");
  const CliResult again = run_command(prepare_args(flags), scratch.path(), 120);
  ASSERT_TRUE(again.exited && again.exit_code == 0) << again.describe();
  for (const char* name : {"train.bin", "val.bin", "tokenizer.json", "tokenizer.model"})
    if (fs::exists(out + "/" + name)) {
      EXPECT_EQ(read_whole_file(out + "/" + name), read_whole_file(flags[3] + "/" + name)) << name;
    }
}

TEST(PrepareCli, BpeShardsHoldExactlyTheCorpusDocuments) { check_prepare_end_to_end("bpe", {"--vocab-size", "400"}); }

TEST(PrepareCli, ByteShardsHoldExactlyTheCorpusDocuments) { check_prepare_end_to_end("byte", {}); }

// A few bytes of invalid UTF-8 in a text file become U+FFFD, one per byte, and the log says
// so: a Latin-1 byte, a UTF-16 surrogate, an overlong '/', a sequence cut off by the end of the
// file; a 4-byte emoji is valid and kept.
TEST(PrepareCli, ReplacesAFewInvalidBytesAndSaysSo) {
  ScratchDir scratch;
  std::string text;
  for (const std::string& doc : english_documents(10, 8)) text += doc + "%\n";
  text += "caf\xE9 au lait, \xED\xA0\x80 surrogate, \xC0\xAF overlong, \xF0\x9F\x8E\x89 emoji\n%\nthe end \xE2\x82";
  const std::string input = scratch.write("damaged.txt", text);
  const CliResult r =
      run_command(prepare_args({"--input", input, "--out", scratch.file("out"), "--tokenizer", "byte"}), scratch.path());
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  EXPECT_EQ(r.out_lines().at(0), "prepare: replaced 8 bytes of invalid UTF-8 with U+FFFD in 1 files");
  const ByteTokenizer bytes;
  const TokenShard train = TokenShard::open(scratch.file("out/train.bin"), 256);
  const TokenShard val = TokenShard::open(scratch.file("out/val.bin"), 256);
  std::vector<std::string> docs = shard_documents(train, bytes), val_docs = shard_documents(val, bytes);
  docs.insert(docs.end(), val_docs.begin(), val_docs.end());
  const std::string r1 = "\xEF\xBF\xBD";  // U+FFFD
  for (const std::string& expected :
       {"caf" + r1 + " au lait, " + r1 + r1 + r1 + " surrogate, " + r1 + r1 + " overlong, \xF0\x9F\x8E\x89 emoji\n",
        "the end " + r1 + r1})
    EXPECT_NE(std::find(docs.begin(), docs.end(), expected), docs.end()) << expected;
}

// Fortune files with CRLF line ends split the same way ("%\r" is a separator line too).
TEST(PrepareCli, CrlfSeparatorsSplitDocuments) {
  ScratchDir scratch;
  const std::string input = scratch.write("crlf.txt", "First one.\r\n%\r\nSecond one.\r\n%\r\n");
  const CliResult r = run_command(
      prepare_args({"--input", input, "--out", scratch.file("out"), "--tokenizer", "byte", "--val-fraction", "0.5"}),
      scratch.path());
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  const ByteTokenizer bytes;
  std::vector<std::string> docs = shard_documents(TokenShard::open(scratch.file("out/train.bin"), 256), bytes);
  const std::vector<std::string> val = shard_documents(TokenShard::open(scratch.file("out/val.bin"), 256), bytes);
  docs.insert(docs.end(), val.begin(), val.end());
  std::sort(docs.begin(), docs.end());
  EXPECT_EQ(docs, (std::vector<std::string>{"First one.\r\n", "Second one.\r\n"}));
}

// Each bad input: exit 1, one line naming the problem, and nothing written.
class PrepareBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string text;
    for (const std::string& doc : english_documents(20, 2)) text += doc + "%\n";
    good_ = scratch_.write("good.txt", text);
  }
  void expect_refused(std::vector<std::string> flags, std::initializer_list<std::string> phrases) {
    if (std::find(flags.begin(), flags.end(), "--out") == flags.end()) {
      flags.push_back("--out");
      flags.push_back(scratch_.file("out"));
    }
    const CliResult r = run_command(prepare_args(flags), scratch_.path(), 120);
    if (expect_user_error(r, phrases)) {
      EXPECT_EQ(r.exit_code, 1) << r.describe();
    }
    EXPECT_FALSE(fs::exists(scratch_.file("out/tokenizer.json"))) << r.describe();
  }
  ScratchDir scratch_;
  std::string good_;
};

TEST_F(PrepareBadInput, UnreadablePaths) {
  expect_refused({"--input", scratch_.file("missing.txt")}, {scratch_.file("missing.txt"), "cannot open"});
  expect_refused({"--input", "/dev/zero"}, {"/dev/zero", "not a regular file"});
}

TEST_F(PrepareBadInput, EmptyInputs) {
  expect_refused({"--input", scratch_.write("empty.txt", "")}, {"no text"});
  expect_refused({"--input", scratch_.write("blank.txt", " \n\t\n%\n\n")}, {"no text"});
  fs::create_directories(scratch_.file("bin_only"));
  scratch_.write("bin_only/a.dat", std::string("\x00\x01", 2));
  expect_refused({"--input", scratch_.file("bin_only")}, {"no text"});
}

TEST_F(PrepareBadInput, OneDocumentCannotBeSplit) {
  expect_refused({"--input", scratch_.write("one.txt", "Only one document here.\n")}, {"1 document", "at least 2"});
}

TEST_F(PrepareBadInput, BinaryFilesNamedOnTheCommandLine) {
  const std::string nul = scratch_.write("nul.txt", std::string("text\0more", 9));
  expect_refused({"--input", good_, nul}, {nul, "binary file", "NUL byte at offset 4"});
  std::string latin1;
  for (int i = 0; i < 50; ++i) latin1 += "Stra\xDF" "e und Caf\xE9 ";
  const std::string enc = scratch_.write("latin1.txt", latin1);
  expect_refused({"--input", enc}, {enc, "binary file", "100 of its 800 bytes are not valid UTF-8"});
}

TEST_F(PrepareBadInput, Flags) {
  for (const char* fraction : {"0", "0.6", "-0.1", "nan"})
    expect_refused({"--input", good_, "--val-fraction", fraction}, {"--val-fraction", "(0, 0.5]"});
  expect_refused({"--input", good_, "--vocab-size", "70000"}, {"--vocab-size", "65535"});
  expect_refused({"--input", good_, "--vocab-size", "-5"}, {"--vocab-size"});
  expect_refused({"--input", good_, "--tokenizer", "byte", "--vocab-size", "512"}, {"byte tokenizer", "256"});
  expect_refused({"--input", good_, "--tokenizer", "wordpiece"}, {"--tokenizer", "wordpiece"});
  expect_refused({"--input", good_, "--seed", "-1"}, {"--seed"});
  expect_refused({"--input", good_, "--out", good_}, {"cannot create the output directory"});
}

TEST_F(PrepareBadInput, AVocabularyTheTextCannotSupport) {
  expect_refused({"--input", good_, "--vocab-size", "280"}, {"SentencePiece", "vocabulary of 280"});
  expect_refused({"--input", good_, "--vocab-size", "30000"}, {"SentencePiece", "vocabulary of 30000"});
}

}  // namespace
}  // namespace tt::test
