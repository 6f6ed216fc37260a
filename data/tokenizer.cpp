// The byte and SentencePiece BPE tokenizers, SentencePiece training, and tokenizer.json
// (see tokenizer.h).
#include "data/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

#include "data/file_io.h"
#include "base/checked_input.h"
#include "base/input_error.h"

namespace tt {
namespace {

// A model file larger than this is not one prepare wrote (4096 pieces take 60 KB).
constexpr uint64_t kMaxModelBytes = 64ull << 20;
constexpr uint64_t kMaxJsonBytes = 64 << 10;

// A SentencePiece error as one line: its messages may hold newlines and other control bytes.
std::string one_line(const std::string& text) {
  std::string line = text;
  for (char& c : line)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return line;
}

void check_ids(const std::vector<int32_t>& ids, int vocab_size, const std::string& who) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size)
      throw InputError(who + ": cannot decode id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                       ", outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
}

// SentencePiece's trainer reads sentences from an iterator: here the lines of the documents,
// without their newlines (a newline inside a training sentence would be a character of it).
// Empty lines are skipped; SentencePiece would skip them too.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& documents) : documents_(documents) { advance(); }
  bool done() const override { return document_ >= documents_.size(); }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  // Moves to the next non-empty line, or past the last document.
  void advance() {
    while (document_ < documents_.size()) {
      const std::string& doc = documents_[document_];
      if (offset_ >= doc.size()) {
        ++document_;
        offset_ = 0;
        continue;
      }
      size_t end = doc.find('\n', offset_);
      if (end == std::string::npos) end = doc.size();
      line_.assign(doc, offset_, end - offset_);
      offset_ = end + 1;
      if (!line_.empty()) return;
    }
  }

  const std::vector<std::string>& documents_;
  size_t document_ = 0, offset_ = 0;
  std::string line_;
};

}  // namespace

// ---- bytes ----

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  check_ids(ids, vocab_size(), "byte tokenizer");
  std::string text(ids.size(), '\0');
  for (size_t i = 0; i < ids.size(); ++i) text[i] = static_cast<char>(ids[i]);
  return text;
}

// ---- SentencePiece ----

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : path_(model_path), processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  // Read here, not by SentencePiece's Load: our reader refuses a FIFO or a huge file first.
  const std::string bytes = read_regular_file(model_path, kMaxModelBytes);
  const sentencepiece::util::Status status = processor_->LoadFromSerializedProto(bytes);
  if (!status.ok())
    throw InputError(model_path + ": not a SentencePiece model: " + one_line(status.ToString()));
  if (processor_->GetPieceSize() > 65536)
    throw InputError(model_path + ": the model has " + std::to_string(processor_->GetPieceSize()) +
                     " pieces, more than the 65536 ids of a token shard");
  end_of_text_ = processor_->eos_id();
  if (end_of_text_ < 0)
    throw InputError(model_path + ": the model has no end-of-sentence piece (eos_id -1); tinytrain ends "
                     "documents with it");
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int SentencePieceTokenizer::vocab_size() const { return processor_->GetPieceSize(); }

std::vector<int32_t> SentencePieceTokenizer::encode(const std::string& text) const {
  std::vector<int> ids;
  const sentencepiece::util::Status status = processor_->Encode(text, &ids);
  if (!status.ok()) throw InputError(path_ + ": cannot encode: " + one_line(status.ToString()));
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  check_ids(ids, vocab_size(), path_);
  std::string text;
  const sentencepiece::util::Status status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw InputError(path_ + ": cannot decode: " + one_line(status.ToString()));
  return text;
}

void train_sentencepiece_bpe(const std::vector<std::string>& documents, const std::string& model_path,
                             int vocab_size, uint64_t seed) {
  // SentencePiece's seed is 32 bits, and its all-ones value means "seed from the device".
  uint32_t seed32 = static_cast<uint32_t>(seed ^ (seed >> 32));
  if (seed32 == UINT32_MAX) seed32 = 0;
  sentencepiece::SetRandomGeneratorSeed(seed32);
  const std::unordered_map<std::string, std::string> settings = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"num_threads", "1"},
      {"minloglevel", "3"},  // only fatal messages: errors come back as the status below
  };
  LineIterator lines(documents);
  std::string model;
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(settings, &lines, &model);
  if (!status.ok())
    throw InputError("bpe tokenizer: SentencePiece cannot train a vocabulary of " + std::to_string(vocab_size) +
                     " on this text: " + one_line(status.ToString()));
  write_file_atomically(model_path, model);
}

// ---- tokenizer.json ----

std::string tokenizer_json(const Tokenizer& tokenizer) {
  nlohmann::ordered_json json = {{"kind", tokenizer.kind()}, {"vocab_size", tokenizer.vocab_size()}};
  if (tokenizer.kind() == "bpe") json["model"] = kTokenizerModelFile;
  return json.dump(2) + "\n";
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  const std::string path = dir + "/" + kTokenizerJsonFile;
  const std::string text = read_regular_file(path, kMaxJsonBytes);
  JsonFields fields(parse_json(text, path), path);
  const std::string kind = fields.string("kind");
  const int vocab_size = static_cast<int>(fields.integer("vocab_size", 1, 65536));
  if (kind != "byte" && kind != "bpe")
    throw InputError(path + ": field 'kind' must be \"byte\" or \"bpe\", got '" + printable(kind) + "'");
  const std::string model = kind == "bpe" ? fields.string("model") : "";
  fields.finish();
  std::unique_ptr<Tokenizer> tokenizer;
  if (kind == "byte") {
    tokenizer = std::make_unique<ByteTokenizer>();
  } else {
    // A file name beside tokenizer.json, never a path that leads elsewhere.
    if (model.empty() || model == "." || model == ".." || model.find('/') != std::string::npos ||
        model.find('\0') != std::string::npos)
      throw InputError(path + ": field 'model' must name a file in the same directory, got '" + printable(model) + "'");
    tokenizer = std::make_unique<SentencePieceTokenizer>(dir + "/" + model);
  }
  if (tokenizer->vocab_size() != vocab_size)
    throw InputError(path + ": field 'vocab_size' is " + std::to_string(vocab_size) + " but the " + kind +
                     " tokenizer has " + std::to_string(tokenizer->vocab_size()) + " ids");
  return tokenizer;
}

}  // namespace tt
