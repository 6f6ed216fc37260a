// Tokenizers: text <-> token ids for the toy language models.
//
//   ByteTokenizer           the UTF-8 bytes themselves: 256 ids, nothing to train, any text.
//   SentencePieceTokenizer  a byte-pair-encoding model trained by SentencePiece (Google's
//                           library) with byte fallback: a few thousand ids, about 3 bytes
//                           of English per token (docs/toy-lm.md), and still any text (a
//                           character the model never saw becomes its UTF-8 bytes).
//
// Both round-trip: decode(encode(text)) == text for valid UTF-8. Each also names the id that
// prepare puts before every document in the shards (end_of_text): a model trained on them
// learns where documents start and stop, and a sampler stops at it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace tt {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual int vocab_size() const = 0;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Throws InputError for an id outside [0, vocab_size).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual std::string kind() const = 0;  // "byte" or "bpe", as tokenizer.json spells it
  virtual int32_t end_of_text() const = 0;
};

// id = byte value. end_of_text is 0, the NUL byte: prepare refuses text holding NUL (it is
// binary), so in a shard 0 only ever separates documents.
class ByteTokenizer : public Tokenizer {
 public:
  int vocab_size() const override { return 256; }
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string kind() const override { return "byte"; }
  int32_t end_of_text() const override { return 0; }
};

// A SentencePiece model file (.model). end_of_text is the model's end-of-sentence piece
// "</s>", a control id that no text encodes to; a model without one is refused.
class SentencePieceTokenizer : public Tokenizer {
 public:
  // Errors (a missing, oversized or corrupt file) are one InputError "<path>: ...".
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer() override;
  int vocab_size() const override;
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string kind() const override { return "bpe"; }
  int32_t end_of_text() const override { return end_of_text_; }
  const std::string& model_path() const { return path_; }  // the .model file it was read from

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  int32_t end_of_text_ = -1;
};

// Trains a SentencePiece BPE model of exactly vocab_size pieces on `documents` and writes
// it to model_path (atomically). Each line of a document is one training sentence.
// Settings, all fixed so the same documents and seed give the same file:
//   byte_fallback, character_coverage 1.0  every character of the documents gets a piece,
//                                          any other character its bytes
//   normalization identity, no whitespace  the text is tokenized as it is (SentencePiece's
//   folding, no dummy prefix               default NFKC folding and space trimming would
//                                          break the round trip)
//   the seed                               SentencePiece's random generator; it draws only
//                                          when sampling sentences, and every sentence is used
// A vocabulary the text cannot support (too small for its characters and the 256 bytes,
// or more merges than it has pairs) is SentencePiece's error, as one InputError line.
void train_sentencepiece_bpe(const std::vector<std::string>& documents, const std::string& model_path,
                             int vocab_size, uint64_t seed);

// The files that describe a prepared directory's tokenizer (data/prepare.h writes them).
constexpr const char* kTokenizerJsonFile = "tokenizer.json";
constexpr const char* kTokenizerModelFile = "tokenizer.model";

// tokenizer.json's text: {"kind": "byte", "vocab_size": 256}, or {"kind": "bpe",
// "vocab_size": N, "model": "tokenizer.model"} for a SentencePiece model in that file beside it.
std::string tokenizer_json(const Tokenizer& tokenizer);

// The tokenizer described by dir/tokenizer.json. Every field is checked for type and range
// (base/checked_input.h), "model" must name a file in dir, and the tokenizer must have
// vocab_size ids; errors are one InputError naming the file.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);

}  // namespace tt
