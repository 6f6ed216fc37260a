// A directory of llm.c's token shards (karpathy/llm.c, dev/data/*.py: tiny_shakespeare_train.bin,
// fineweb_train_000001.bin, ...) as `train --data DIR` reads it when DIR has no tokenizer.json:
// the shards whose names hold "train" are the training stream, those whose names hold "val" the
// validation stream, each in name order, read as one stream (FineWeb comes in many shards).
// The shard format is the same (data/token_shard.h); the vocabulary is not in the files, so it
// comes from --vocab-size. docs/toy-lm.md, "llm.c's data".
#pragma once
#include <string>
#include <vector>

namespace tt {

struct LlmcShards {
  std::vector<std::string> train, val;  // paths, in name order
};

// The *.bin files of `dir` whose names hold "train" (not "val") or "val" (not "train").
// InputError, naming the directory: it cannot be listed; it has no train shard, or no val
// shard; a .bin file's name holds both words.
LlmcShards find_llmc_shards(const std::string& dir);

// Whether `dir` is a prepared directory of `tinytrain prepare` (it holds tokenizer.json).
bool has_tokenizer_json(const std::string& dir);

}  // namespace tt
