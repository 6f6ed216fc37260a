// Hostile files (issue 10): the committed inputs of tests/fuzz/regressions, each of which
// once got past a check, run through the real binary. Each must meet the bad-input contract
// (one line "error: <path>: ...", naming the field and the value, exit 1) and cost no more
// memory than a file the engine refuses at once: nothing may be allocated from a count in a
// file before the count is checked against what the file holds.
#include <gtest/gtest.h>

#include <string>

#include "tests/cli_test_util.h"

namespace tt::test {
namespace {

const std::string kBin = TINYTRAIN_BIN;
const std::string kFuzzDir = std::string(TINYTRAIN_SOURCE_DIR) + "/tests/fuzz";

// What a hostile file may cost above a run that fails on its first read: a few MB.
// (Before the fix, B allocated 512 MB for x and y and C 4.3 GB of parameters.)
constexpr long kMaxExtraKb = 16 * 1024;

class HostileFiles : public ::testing::Test {
 protected:
  CliResult verify(const std::string& path) {
    return run_command({kBin, "verify", path, "--backend", "cpu", "--threads", "1"}, dir_.path());
  }
  // Peak memory of a verify that stops at once: a path that does not exist.
  long baseline_kb() {
    const CliResult r = verify(dir_.file("missing.safetensors"));
    EXPECT_GT(r.peak_rss_kb, 0) << r.describe();
    return r.peak_rss_kb;
  }
  // Runs verify on a committed regression input: the error contract, the path and phrases
  // in the line, and the memory bound.
  void expect_refused_cheaply(const std::string& name, std::initializer_list<std::string> phrases) {
    const std::string path = kFuzzDir + "/regressions/" + name;
    ASSERT_TRUE(fs::exists(path)) << path;
    const long baseline = baseline_kb();
    const CliResult r = verify(path);
    if (!expect_user_error(r, phrases)) return;
    EXPECT_EQ(r.err.rfind("error: " + path + ": ", 0), 0u) << "the message must start with the path\n" << r.err;
    EXPECT_LE(r.peak_rss_kb, baseline + kMaxExtraKb)
        << "refusing a " << fs::file_size(path) << "-byte file took " << r.peak_rss_kb << " KB at peak, "
        << baseline << " KB for a missing file\n" << r.describe();
  }

  ScratchDir dir_;
};

// The file B-D are made from is a valid reference: each of them fails by its one change.
TEST_F(HostileFiles, TheTinyReferenceTheyAreMadeFromPasses) {
  const CliResult r = verify(kFuzzDir + "/seeds/tiny_reference.safetensors");
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.describe();
  EXPECT_TRUE(contains(r.out, " 0 failed (PASS)")) << r.describe();
}

// A: nlohmann's out_of_range for a number beyond double escaped as a bare library message.
TEST_F(HostileFiles, A_HeaderNumberBeyondDoubleIsAnInputErrorWithThePath) {
  expect_refused_cheaply("a_header_number_1E400.safetensors", {"header is not valid JSON", "1E400"});
}

// B: steps x batch x seq sized x and y before their shapes were checked.
TEST_F(HostileFiles, B_StepsBeyondTheTokensInTheFileAllocatesNothing) {
  expect_refused_cheaply("b_steps_16777216.safetensors", {"tensor 'x'", "[16777216, 1, 4]"});
}

// C: d_model sized the parameters before their shapes were checked.
TEST_F(HostileFiles, C_DModelBeyondTheParametersInTheFileAllocatesNothing) {
  expect_refused_cheaply("c_d_model_8192.safetensors", {"metadata 'config'", "parameters", "10432"});
}

// D: integer fields took floats and out-of-range numbers: UB for 1e300, a silent wrap to 4
// (and a passing verify) for 4294967300, a silent truncation to 8 (passing) for 8.9.
TEST_F(HostileFiles, D_DModel1e300IsRefusedNamingTheField) {
  expect_refused_cheaply("d_d_model_1e300.safetensors", {"metadata 'config'", "field 'd_model'", "integer", "1e+300"});
}

TEST_F(HostileFiles, D_DModelBeyondIntIsRefusedNotWrapped) {
  expect_refused_cheaply("d_d_model_4294967300.safetensors",
                         {"metadata 'config'", "field 'd_model'", "integer", "4294967300"});
}

TEST_F(HostileFiles, D_FractionalVocabSizeIsRefusedNotTruncated) {
  expect_refused_cheaply("d_vocab_size_8.9.safetensors", {"metadata 'config'", "field 'vocab_size'", "integer", "8.9"});
}

}  // namespace
}  // namespace tt::test
