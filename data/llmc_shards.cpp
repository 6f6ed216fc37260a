// Finding llm.c's shards in a directory (llmc_shards.h).
#include "data/llmc_shards.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "base/input_error.h"
#include "data/tokenizer.h"

namespace tt {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

bool has_tokenizer_json(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(std::filesystem::path(dir) / kTokenizerJsonFile, ec);
}

LlmcShards find_llmc_shards(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) throw InputError("--data " + dir + ": cannot list the directory (" + ec.message() + ")");
  LlmcShards shards;
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!ends_with(name, ".bin")) continue;
    const bool train = name.find("train") != std::string::npos, val = name.find("val") != std::string::npos;
    if (train && val)
      throw InputError("--data " + dir + ": " + name + " names both train and val: rename it to say which");
    if (train) shards.train.push_back(entry.path().string());
    if (val) shards.val.push_back(entry.path().string());
  }
  std::sort(shards.train.begin(), shards.train.end());
  std::sort(shards.val.begin(), shards.val.end());
  if (shards.train.empty())
    throw InputError("--data " + dir + ": no tokenizer.json (a `tinytrain prepare` directory) and no llm.c train " +
                     "shard (a *.bin file whose name holds \"train\")");
  if (shards.val.empty())
    throw InputError("--data " + dir + ": llm.c train shards but no val shard (a *.bin file whose name holds \"val\")");
  return shards;
}

}  // namespace tt
