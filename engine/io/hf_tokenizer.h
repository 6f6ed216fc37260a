// A tinytrain tokenizer as Hugging Face's AutoTokenizer reads it (`tinytrain export`).
//
// `tinytrain prepare --tokenizer bpe` trains a SentencePiece BPE model with byte fallback, the
// identity normalisation, no dummy prefix and no whitespace folding (data/tokenizer.h). Its
// .model file goes out unchanged as tokenizer.model, beside a tokenizer_config.json naming
// transformers' LlamaTokenizer (the SentencePiece-BPE tokenizer class) with the settings that
// make it encode as the model file says: no bos or eos added, no prefix space, not the
// "legacy" handling of text after special tokens. tools/hf_interop.py checks that
// AutoTokenizer then encodes text to the ids `tinytrain sample` encodes it to.
#pragma once
#include <string>

#include "data/tokenizer.h"

namespace tt {

// Writes DIR/tokenizer.model and DIR/tokenizer_config.json (each whole or not at all).
// model_max_length: the model's context. Throws InputError when a file cannot be read or written.
void write_hf_tokenizer(const std::string& dir, const SentencePieceTokenizer& tokenizer, int model_max_length);

}  // namespace tt
