// LoRA from the command line (docs/finetune.md): a run resumes bit for bit and refuses another
// base; `merge` refuses adapters of another base; every bad flag or file is one line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cli_test_util.h"

namespace tt::test {
namespace {

const std::string kBin = TINYTRAIN_BIN;

// A tiny Llama trained two steps (dropout 0, `seed`) and exported: a base for adapters.
std::string make_base(const ScratchDir& dir, const std::string& name, int seed) {
  const CliResult trained =
      run_command({kBin, "train", "--backend", "cpu", "--arch", "llama", "--vocab-size", "64", "--d-model", "32",
                   "--n-head", "4", "--n-kv-head", "2", "--n-layer", "2", "--d-ff", "48", "--batch", "4", "--seq", "16",
                   "--max-seq-len", "16", "--steps", "2", "--dropout", "0", "--seed", std::to_string(seed),
                   "--save-dir", dir.file(name + ".run")},
                  dir.path());
  EXPECT_EQ(trained.exit_code, 0) << trained.describe();
  const CliResult exported = run_command(
      {kBin, "export", "--checkpoint", dir.file(name + ".run"), "--format", "hf", "--out", dir.file(name)}, dir.path());
  EXPECT_EQ(exported.exit_code, 0) << exported.describe();
  return dir.file(name);
}

std::vector<std::string> lora_run(const std::string& base, const std::string& save_dir, int steps) {
  return {kBin,         "train",      "--backend",    "cpu",         "--init-from",    base,
          "--lora-rank", "4",         "--lora-dropout", "0.1",      "--lora-targets", "q_proj,v_proj,down_proj",
          "--batch",    "4",          "--seq",        "16",          "--lr",           "1e-2",
          "--steps",    std::to_string(steps), "--save-dir", save_dir, "--save-every", "3"};
}

// Six steps at once, or three then three resumed: the same bytes (adapters, their moments, the
// scaler). Resuming on another base is refused by its fingerprint, and so is merging.
TEST(LoraCli, ResumeIsBitForBitAndAnotherBaseIsRefused) {
  ScratchDir dir;
  const std::string base = make_base(dir, "base", 1), other = make_base(dir, "other", 2);
  ASSERT_EQ(run_command(lora_run(base, dir.file("whole"), 6), dir.path()).exit_code, 0);
  ASSERT_EQ(run_command(lora_run(base, dir.file("halves"), 3), dir.path()).exit_code, 0);
  std::vector<std::string> resume = lora_run(base, dir.file("halves"), 6);
  resume.insert(resume.end(), {"--resume", dir.file("halves")});
  const CliResult resumed = run_command(resume, dir.path());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.describe();
  EXPECT_EQ(read_whole_file(dir.file("whole/ckpt_00000006.safetensors")),
            read_whole_file(dir.file("halves/ckpt_00000006.safetensors")));

  std::vector<std::string> elsewhere = lora_run(other, dir.file("halves"), 6);
  elsewhere.insert(elsewhere.end(), {"--resume", dir.file("halves/ckpt_00000003.safetensors")});
  expect_user_error(run_command(elsewhere, dir.path()), {"lora_base"});
  expect_user_error(run_command({kBin, "merge", "--base", other, "--adapter", dir.file("whole"), "--out",
                                 dir.file("merged")},
                                dir.path()),
                    {"adapters trained on another base"});
}

TEST(LoraCli, BadFlagsAndFilesAreOneLineEach) {
  ScratchDir dir;
  const std::string base = make_base(dir, "base", 1);
  auto train = [&](std::vector<std::string> flags) {
    std::vector<std::string> argv = {kBin, "train", "--backend", "cpu", "--batch", "4", "--seq", "16", "--steps", "1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return run_command(argv, dir.path());
  };
  expect_user_error(train({"--init-from", base, "--lora-rank", "4", "--lora-targets", "q_proj,in_proj"}),
                    {"no module 'in_proj'", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"});
  expect_user_error(train({"--init-from", base, "--lora-rank", "4", "--lora-targets", "q_proj,q_proj"}), {"twice"});
  expect_user_error(train({"--init-from", base, "--lora-rank", "-1"}), {"--lora-rank"});
  expect_user_error(train({"--init-from", base, "--lora-alpha", "4"}), {"need --lora-rank"});
  expect_user_error(train({"--init-from", base, "--base-quant", "nf4"}), {"need --lora-rank"});
  expect_user_error(train({"--init-from", base, "--lora-rank", "4", "--base-quant", "int3"}), {"--base-quant"});
  expect_user_error(train({"--init-from", base, "--lora-rank", "4", "--lora-dropout", "1"}), {"--lora-dropout"});
  expect_user_error(train({"--lora-rank", "4"}), {"--init-from BASE"});
  // a PEFT directory: bad config, options tinytrain does not run, a tensor of another base
  const std::string peft = dir.file("peft");
  fs::create_directories(peft);
  dir.write("peft/adapter_config.json", "{\"peft_type\": \"LORA\", \"r\": 4");
  expect_user_error(train({"--init-from", base, "--lora-from", peft}), {"adapter_config.json"});
  dir.write("peft/adapter_config.json",
            "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"lora_dropout\": 0.0, \"target_modules\": "
            "[\"q_proj\"], \"use_dora\": true}");
  expect_user_error(train({"--init-from", base, "--lora-from", peft}), {"use_dora"});
  dir.write("peft/adapter_config.json",
            "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"lora_dropout\": 0.0, \"target_modules\": "
            "[\"q_proj\"]}");
  RawSafetensors wrong;  // q_proj's A for a model 64 wide: another base
  wrong.tensors.push_back({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", "F32", {4, 64},
                           std::string(4 * 64 * 4, '\0')});
  dir.write("peft/adapter_model.safetensors", wrong.serialize());
  expect_user_error(train({"--init-from", base, "--lora-from", peft}), {"adapter_model.safetensors", "lora_A"});
  expect_user_error(train({"--init-from", base, "--lora-from", peft, "--lora-rank", "8"}), {"--lora-from"});
  // a base saved already quantised (bitsandbytes' 4-bit: its config names it)
  fs::create_directories(dir.file("quantised"));
  fs::copy_file(base + "/model.safetensors", dir.file("quantised/model.safetensors"));
  nlohmann::json config = nlohmann::json::parse(read_whole_file(base + "/config.json"));
  config["quantization_config"] = {{"load_in_4bit", true}, {"bnb_4bit_quant_type", "nf4"}};
  dir.write("quantised/config.json", config.dump());
  expect_user_error(train({"--init-from", dir.file("quantised"), "--lora-rank", "4", "--base-quant", "nf4"}),
                    {"quantization_config", "unquantised"});
  // a checkpoint without adapters where adapters are expected
  expect_user_error(run_command({kBin, "export", "--checkpoint", dir.file("base.run"), "--format", "peft", "--out",
                                 dir.file("x")},
                                dir.path()),
                    {"without LoRA"});
}

}  // namespace
}  // namespace tt::test
