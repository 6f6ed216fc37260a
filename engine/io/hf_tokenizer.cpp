// A SentencePiece tokenizer as Hugging Face's AutoTokenizer reads it (engine/io/hf_tokenizer.h).
#include "engine/io/hf_tokenizer.h"

#include <nlohmann/json.hpp>

#include "data/file_io.h"

namespace tt {

namespace {
constexpr uint64_t kMaxModelBytes = 64ull << 20;  // a 65536-piece model is a few MB
}  // namespace

void write_hf_tokenizer(const std::string& dir, const SentencePieceTokenizer& tokenizer, int model_max_length) {
  write_file_atomically(dir + "/tokenizer.model", read_regular_file(tokenizer.model_path(), kMaxModelBytes));
  const nlohmann::json config = {
      {"tokenizer_class", "LlamaTokenizer"},
      {"add_bos_token", false},      // prepare's shards hold no bos: documents end with eos
      {"add_eos_token", false},
      {"add_prefix_space", false},   // prepare trains without SentencePiece's dummy prefix
      {"legacy", false},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"},         // tinytrain's end-of-text
      {"unk_token", "<unk>"},
      {"model_max_length", model_max_length}};
  write_file_atomically(dir + "/tokenizer_config.json", config.dump(2) + "\n");
}

}  // namespace tt
