// `tinytrain prepare`: text files -> documents -> train/val split -> tokenizer -> token shards
// (see prepare.h for the rules and docs/toy-lm.md for why).
#include "data/prepare.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string_view>
#include <system_error>

#include "data/file_io.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "base/input_error.h"
#include "kernels/common/philox.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

constexpr int kDefaultBpeVocab = 4096;
// prepare holds the whole corpus in memory: it is for toy corpora, not for the web.
constexpr uint64_t kMaxInputFileBytes = 1ull << 30;
// Philox's third counter word for the split, so its draws are a stream of their own.
constexpr uint32_t kSplitStream = 0x73706c74;  // "splt"

// ---- inputs ----

struct InputFile {
  std::string path;
  bool named;  // given on the command line (refused when binary), or found in a directory (skipped)
};

// The files to read, in order: each input as given, a directory's regular files recursively in
// sorted order. Symbolic links inside a directory are not followed (fortunes' *.u8 files are
// links to the files beside them, which would count twice); a named link is what the user named.
std::vector<InputFile> collect_inputs(const std::vector<std::string>& inputs, int* skipped_links) {
  std::vector<InputFile> files;
  for (const std::string& input : inputs) {
    std::error_code ec;
    const fs::file_status status = fs::status(input, ec);
    if (ec) throw InputError(input + ": cannot open: " + ec.message());
    if (!fs::is_directory(status)) {
      files.push_back({input, true});  // RegularFile refuses what is not a regular file
      continue;
    }
    std::vector<std::string> found;
    fs::recursive_directory_iterator it(input, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      const fs::file_status entry = it->symlink_status(ec);
      if (ec) break;
      if (fs::is_symlink(entry)) ++*skipped_links;
      else if (fs::is_regular_file(entry)) found.push_back(it->path().string());
    }
    if (ec) throw InputError(input + ": cannot list the directory: " + ec.message());
    std::sort(found.begin(), found.end());
    for (std::string& path : found) files.push_back({std::move(path), false});
  }
  return files;
}

// The length of the well-formed UTF-8 sequence at p (1 to 4 bytes), or 0 when there is none:
// the Unicode Standard's table of well-formed byte sequences (table 3-7), which also rules out
// overlong forms, surrogates and code points beyond U+10FFFF.
int utf8_sequence_length(const unsigned char* p, size_t left) {
  auto in = [&](size_t i, unsigned lo, unsigned hi) { return i < left && p[i] >= lo && p[i] <= hi; };
  const unsigned b0 = p[0];
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return in(1, 0x80, 0xBF) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF)  // E0: no overlong forms; ED: no surrogates
    return in(1, b0 == 0xE0 ? 0xA0 : 0x80, b0 == 0xED ? 0x9F : 0xBF) && in(2, 0x80, 0xBF) ? 3 : 0;
  if (b0 >= 0xF0 && b0 <= 0xF4)  // F0: no overlong forms; F4: nothing beyond U+10FFFF
    return in(1, b0 == 0xF0 ? 0x90 : 0x80, b0 == 0xF4 ? 0x8F : 0xBF) && in(2, 0x80, 0xBF) && in(3, 0x80, 0xBF) ? 4
                                                                                                           : 0;
  return 0;
}

// A file's bytes as text: empty `why` and the text with each byte of invalid UTF-8 replaced by
// U+FFFD, or `why` it is binary. A NUL byte never occurs in text (and is the byte tokenizer's
// end-of-text); invalid UTF-8 in more than 1% of the bytes means another encoding or no text
// at all, where a few bytes are damage worth keeping the file for.
struct Text {
  std::string text, why;
  size_t replaced = 0;
};

Text as_text(const std::string& bytes) {
  Text t;
  const size_t nul = bytes.find('\0');
  if (nul != std::string::npos) {
    t.why = "a NUL byte at offset " + std::to_string(nul);
    return t;
  }
  t.text.reserve(bytes.size());
  const unsigned char* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < bytes.size();) {
    const int n = utf8_sequence_length(p + i, bytes.size() - i);
    if (n == 0) {
      t.text += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      ++t.replaced;
      ++i;
    } else {
      t.text.append(bytes, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    }
  }
  if (t.replaced * 100 > bytes.size())
    t.why = std::to_string(t.replaced) + " of its " + std::to_string(bytes.size()) + " bytes are not valid UTF-8";
  return t;
}

bool whitespace_only(const std::string& s) {
  return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
}

// A file's documents: the text between lines holding only "%" ("%\r" too), the separator of
// fortune files, or the whole text when there is no such line. Whitespace-only ones are dropped.
void split_documents(const std::string& text, std::vector<std::string>* documents) {
  std::string current;
  auto finish_document = [&] {
    if (!whitespace_only(current)) documents->push_back(current);
    current.clear();
  };
  for (size_t pos = 0; pos < text.size();) {
    const size_t newline = text.find('\n', pos);
    const size_t line_end = newline == std::string::npos ? text.size() : newline;
    const size_t next = newline == std::string::npos ? text.size() : newline + 1;
    const std::string_view line(text.data() + pos, line_end - pos);
    if (line == "%" || line == "%\r") finish_document();
    else current.append(text, pos, next - pos);
    pos = next;
  }
  finish_document();
}

// ---- the split ----

// Document i's draw, uniform in [0, 1): Philox (the generator dropout uses) on (seed, i), so a
// document's side depends on the seed and its index only.
double split_draw(uint64_t seed, uint64_t index) {
  const Philox4 counter = {{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32), kSplitStream, 0}};
  const Philox4 r = philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return r.v[0] * 0x1p-32;
}

// Which documents go to val: draw < fraction; if that is none, the document with the lowest
// draw; if it is all, the one with the highest draw stays in train. n >= 2.
std::vector<bool> split_validation(size_t n, double fraction, uint64_t seed) {
  std::vector<double> draws(n);
  for (size_t i = 0; i < n; ++i) draws[i] = split_draw(seed, i);
  std::vector<bool> val(n);
  for (size_t i = 0; i < n; ++i) val[i] = draws[i] < fraction;
  const size_t n_val = static_cast<size_t>(std::count(val.begin(), val.end(), true));
  if (n_val == 0) val[std::min_element(draws.begin(), draws.end()) - draws.begin()] = true;
  if (n_val == n) val[std::max_element(draws.begin(), draws.end()) - draws.begin()] = false;
  return val;
}

// ---- the command ----

std::string shortest(double value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

void check_options(const PrepareOptions& o) {
  if (o.inputs.empty()) throw InputError("invalid config: prepare needs at least one --input");
  if (o.out_dir.empty()) throw InputError("invalid config: --out must name a directory");
  if (o.tokenizer != "bpe" && o.tokenizer != "byte")
    throw InputError("invalid config: --tokenizer must be bpe or byte, got '" + o.tokenizer + "'");
  if (o.tokenizer == "byte" && o.vocab_size != 0 && o.vocab_size != 256)
    throw InputError("invalid config: --vocab-size " + std::to_string(o.vocab_size) +
                     ": the byte tokenizer has exactly 256 ids");
  // 65535: the largest id a uint16 token shard holds, and a margin under its 65536 values.
  if (o.vocab_size < 0 || o.vocab_size > 65535)
    throw InputError("invalid config: --vocab-size must be in [1, 65535] (token shards hold uint16 ids), got " +
                     std::to_string(o.vocab_size));
  if (!(o.val_fraction > 0 && o.val_fraction <= 0.5))
    throw InputError("invalid config: --val-fraction must be in (0, 0.5], got " + shortest(o.val_fraction));
}

// Appends the end-of-text id and then each document's tokens; returns the document tokens.
size_t encode_documents(const Tokenizer& tokenizer, const std::vector<const std::string*>& documents,
                        std::vector<int32_t>* tokens) {
  size_t document_tokens = 0;
  for (const std::string* doc : documents) {
    tokens->push_back(tokenizer.end_of_text());
    const std::vector<int32_t> ids = tokenizer.encode(*doc);
    tokens->insert(tokens->end(), ids.begin(), ids.end());
    document_tokens += ids.size();
  }
  return document_tokens;
}

std::string fixed(double value, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, value);
  return buf;
}

}  // namespace

void run_prepare(const PrepareOptions& options, std::ostream& log) {
  const auto start = std::chrono::steady_clock::now();
  check_options(options);
  const int vocab_size =
      options.tokenizer == "byte" ? 256 : options.vocab_size == 0 ? kDefaultBpeVocab : options.vocab_size;

  // --- read: every file checked before anything is written
  int skipped_links = 0, skipped_binary = 0, files_read = 0, files_repaired = 0;
  size_t replaced = 0;
  std::string first_skipped;
  std::vector<std::string> documents;
  for (const InputFile& file : collect_inputs(options.inputs, &skipped_links)) {
    const Text t = as_text(read_regular_file(file.path, kMaxInputFileBytes));
    if (!t.why.empty()) {
      if (file.named) throw InputError(file.path + ": a binary file, not text: " + t.why);
      if (skipped_binary++ == 0) first_skipped = file.path;
      continue;
    }
    ++files_read;
    replaced += t.replaced;
    files_repaired += t.replaced > 0;
    split_documents(t.text, &documents);
  }
  if (skipped_binary > 0 || skipped_links > 0)
    log << "prepare: skipped " << skipped_binary << " binary files (the first: "
        << (first_skipped.empty() ? "none" : first_skipped) << ") and " << skipped_links
        << " symbolic links in directories" << std::endl;
  if (replaced > 0)
    log << "prepare: replaced " << replaced << " bytes of invalid UTF-8 with U+FFFD in " << files_repaired
        << " files" << std::endl;
  if (documents.empty())
    throw InputError("prepare: the inputs hold no text (" + std::to_string(files_read) + " text files read)");
  if (documents.size() < 2)
    throw InputError("prepare: the inputs hold 1 document; a train/val split needs at least 2 (separate "
                     "documents with lines holding only '%')");

  // --- split
  const std::vector<bool> is_val = split_validation(documents.size(), options.val_fraction, options.seed);
  std::vector<const std::string*> train_docs, val_docs;
  size_t bytes = 0;
  for (size_t i = 0; i < documents.size(); ++i) {
    (is_val[i] ? val_docs : train_docs).push_back(&documents[i]);
    bytes += documents[i].size();
  }

  // --- the tokenizer: BPE is trained on the training documents only, so val stays unseen
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec || !fs::is_directory(options.out_dir))
    throw InputError(options.out_dir + ": cannot create the output directory: " +
                     (ec ? ec.message() : "a file of that name exists"));
  std::unique_ptr<Tokenizer> tokenizer;
  if (options.tokenizer == "byte") {
    tokenizer = std::make_unique<ByteTokenizer>();
  } else {
    std::vector<std::string> train_text;
    train_text.reserve(train_docs.size());
    for (const std::string* doc : train_docs) train_text.push_back(*doc);
    const std::string model_path = options.out_dir + "/" + kTokenizerModelFile;
    train_sentencepiece_bpe(train_text, model_path, vocab_size, options.seed);
    tokenizer = std::make_unique<SentencePieceTokenizer>(model_path);
  }

  // --- encode and write; tokenizer.json last, so a directory that has it is complete
  std::vector<int32_t> train_tokens, val_tokens;
  const size_t document_tokens =
      encode_documents(*tokenizer, train_docs, &train_tokens) + encode_documents(*tokenizer, val_docs, &val_tokens);
  write_token_shard(options.out_dir + "/train.bin", train_tokens);
  write_token_shard(options.out_dir + "/val.bin", val_tokens);
  write_file_atomically(options.out_dir + "/" + kTokenizerJsonFile, tokenizer_json(*tokenizer));

  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  log << "prepare: " << documents.size() << " documents (train " << train_docs.size() << ", val " << val_docs.size()
      << ") from " << files_read << " files, " << bytes << " bytes -> " << train_tokens.size() + val_tokens.size()
      << " tokens (train " << train_tokens.size() << ", val " << val_tokens.size()
      << "; one end-of-text per document), " << fixed(static_cast<double>(bytes) / document_tokens, 2)
      << " bytes/token, " << tokenizer->kind() << " vocab " << tokenizer->vocab_size() << ", " << fixed(seconds, 1)
      << " s -> " << options.out_dir << std::endl;
}

}  // namespace tt
