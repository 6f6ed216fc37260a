// Tests for parallel/rank_launch (detect_launch): how mpirun, srun and torchrun launches are told
// apart from their environment variables, and that every malformed or inconsistent variable
// is refused with one line naming it and its value. Each test sets the variables it needs on
// a clean slate and puts the process's own back afterwards.
#include "parallel/rank_launch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tt {
namespace {

// Every variable detect_launch reads.
const char* const kLaunchVariables[] = {
    "RANK",         "WORLD_SIZE", "LOCAL_RANK",   "MASTER_ADDR",    "MASTER_PORT",
    "OMPI_COMM_WORLD_SIZE",       "OMPI_COMM_WORLD_RANK",           "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_SIZE",     "PMI_RANK",   "PMIX_RANK",    "MPI_LOCALRANKID", "SLURM_NTASKS",
    "SLURM_PROCID", "SLURM_LOCALID"};

// Clears the launch variables for one test (ctest may itself run under a launcher) and
// restores them when the test ends.
class LaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kLaunchVariables) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value)
        setenv(name, value->c_str(), 1);
      else
        unsetenv(name);
    }
  }
  static void set(std::initializer_list<std::pair<const char*, const char*>> variables) {
    for (const auto& [name, value] : variables) setenv(name, value, 1);
  }
  // A torchrun launch of rank 1 of 2, correct in every variable.
  static void set_torchrun() {
    set({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}});
  }

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

// Runs detect_launch, expects a std::runtime_error holding every phrase on one line; returns it.
std::string expect_error(std::initializer_list<std::string> phrases) {
  try {
    detect_launch();
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    for (const std::string& phrase : phrases)
      EXPECT_NE(message.find(phrase), std::string::npos) << "expected '" << phrase << "' in: " << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    return message;
  }
  ADD_FAILURE() << "detect_launch() did not throw";
  return "";
}

TEST_F(LaunchTest, NoVariablesIsASingleRank) {
  const Launch launch = detect_launch();
  EXPECT_EQ(launch.kind, Launch::Kind::Single);
  EXPECT_EQ(launch.rank, 0);
  EXPECT_EQ(launch.world_size, 1);
  EXPECT_EQ(launch.local_rank, 0);
  EXPECT_STREQ(launch.kind_name(), "single");
}

TEST_F(LaunchTest, WorldSizeOneIsASingleRank) {
  // What `torchrun --nproc-per-node 1` sets.
  set({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  const Launch launch = detect_launch();
  EXPECT_EQ(launch.kind, Launch::Kind::Single);
  EXPECT_EQ(launch.world_size, 1);
  // ...and WORLD_SIZE=1 alone.
  unsetenv("RANK");
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  EXPECT_EQ(detect_launch().kind, Launch::Kind::Single);
}

TEST_F(LaunchTest, TorchrunReadsEveryVariable) {
  set({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node-0.cluster"}, {"MASTER_PORT", "29500"}});
  const Launch launch = detect_launch();
  EXPECT_EQ(launch.kind, Launch::Kind::Torchrun);
  EXPECT_STREQ(launch.kind_name(), "torchrun");
  EXPECT_EQ(launch.rank, 5);
  EXPECT_EQ(launch.world_size, 8);
  EXPECT_EQ(launch.local_rank, 1);
  EXPECT_EQ(launch.master_addr, "node-0.cluster");
  EXPECT_EQ(launch.master_port, 29500);
}

TEST_F(LaunchTest, TorchrunWithoutLocalRankUsesTheFirstDevice) {
  set_torchrun();
  unsetenv("LOCAL_RANK");
  EXPECT_EQ(detect_launch().local_rank, 0);
}

TEST_F(LaunchTest, TorchrunAcceptsTheEdgesOfEveryRange) {
  set({{"RANK", "65535"}, {"WORLD_SIZE", "65536"}, {"LOCAL_RANK", "65535"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "65535"}});
  Launch launch = detect_launch();
  EXPECT_EQ(launch.rank, 65535);
  EXPECT_EQ(launch.world_size, 65536);
  EXPECT_EQ(launch.local_rank, 65535);
  EXPECT_EQ(launch.master_port, 65535);
  set({{"RANK", "0"}, {"LOCAL_RANK", "0"}, {"MASTER_PORT", "1"}});
  launch = detect_launch();
  EXPECT_EQ(launch.rank, 0);
  EXPECT_EQ(launch.master_port, 1);
}

TEST_F(LaunchTest, OpenMpiVariables) {
  set({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  const Launch launch = detect_launch();
  EXPECT_EQ(launch.kind, Launch::Kind::Mpi);
  EXPECT_STREQ(launch.kind_name(), "mpirun");
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.world_size, 4);
  EXPECT_EQ(launch.local_rank, 1);
}

TEST_F(LaunchTest, PmiVariablesWithSlurmsLocalRank) {
  // srun --mpi=pmi2: PMI_* for rank and size, SLURM_LOCALID for the local rank.
  set({{"PMI_SIZE", "6"}, {"PMI_RANK", "4"}, {"SLURM_NTASKS", "6"}, {"SLURM_PROCID", "4"}, {"SLURM_LOCALID", "2"}});
  const Launch launch = detect_launch();
  EXPECT_EQ(launch.kind, Launch::Kind::Mpi);
  EXPECT_EQ(launch.rank, 4);
  EXPECT_EQ(launch.world_size, 6);
  EXPECT_EQ(launch.local_rank, 2);
}

TEST_F(LaunchTest, PmixWithSlurmVariables) {
  set({{"PMIX_RANK", "2"}, {"SLURM_NTASKS", "3"}, {"SLURM_PROCID", "2"}, {"SLURM_LOCALID", "0"}});
  const Launch launch = detect_launch();
  EXPECT_EQ(launch.kind, Launch::Kind::Mpi);
  EXPECT_EQ(launch.rank, 2);
  EXPECT_EQ(launch.world_size, 3);
  EXPECT_EQ(launch.local_rank, 0);
}

TEST_F(LaunchTest, PmixAloneLeavesRankAndSizeToMpi) {
  set({{"PMIX_RANK", "1"}});
  const Launch launch = detect_launch();
  EXPECT_EQ(launch.kind, Launch::Kind::Mpi);
  EXPECT_EQ(launch.rank, 0);
  EXPECT_EQ(launch.world_size, 1);
  EXPECT_EQ(launch.local_rank, 0);
}

TEST_F(LaunchTest, MpiWinsOverTorchrunVariables) {
  set_torchrun();
  set({{"OMPI_COMM_WORLD_SIZE", "3"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}});
  const Launch launch = detect_launch();
  EXPECT_EQ(launch.kind, Launch::Kind::Mpi);
  EXPECT_EQ(launch.rank, 2);
  EXPECT_EQ(launch.world_size, 3);
}

TEST_F(LaunchTest, MalformedMpiVariablesAreRefused) {
  set({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "2"}});
  expect_error({"OMPI_COMM_WORLD_RANK=2 is not below OMPI_COMM_WORLD_SIZE=2"});
  set({{"OMPI_COMM_WORLD_SIZE", "two"}});
  expect_error({"OMPI_COMM_WORLD_SIZE=two", "world size"});
  set({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "-1"}});
  expect_error({"OMPI_COMM_WORLD_LOCAL_RANK=-1", "local rank"});
}

TEST_F(LaunchTest, RankNotBelowWorldSize) {
  set_torchrun();
  set({{"RANK", "3"}});
  expect_error({"RANK=3 is not below WORLD_SIZE=2"});
  set({{"RANK", "2"}});
  expect_error({"RANK=2 is not below WORLD_SIZE=2"});
  set({{"RANK", "99999999999999999999999999"}});
  expect_error({"RANK=99999999999999999999999999 is not below WORLD_SIZE=2"});
  // A single rank's RANK must agree too.
  set({{"RANK", "1"}, {"WORLD_SIZE", "1"}});
  expect_error({"RANK=1 is not below WORLD_SIZE=1"});
}

TEST_F(LaunchTest, RankMustBeAWholeDecimalNumber) {
  for (const char* bad : {"", "abc", "-1", "+1", " 1", "1 ", "0x1", "1.0", "1e0"}) {
    set_torchrun();
    set({{"RANK", bad}});
    expect_error({std::string("RANK=") + bad + " is not a rank: a whole decimal number below WORLD_SIZE=2"});
  }
  // An Arabic-Indic digit one (two bytes of UTF-8, each shown as '?').
  set({{"RANK", "\u0661"}});
  expect_error({"RANK=?? is not a rank"});
}

TEST_F(LaunchTest, WorldSizeOutOfRangeOrNotANumber) {
  for (const char* bad : {"0", "65537", "abc", "-2", "+2", "2.0", ""}) {
    set_torchrun();
    set({{"WORLD_SIZE", bad}});
    expect_error({std::string("WORLD_SIZE=") + bad + " is not a world size in [1, 65536]"});
  }
}

TEST_F(LaunchTest, LocalRankOutOfRangeOrNotANumber) {
  for (const char* bad : {"65536", "-1", "x", ""}) {
    set_torchrun();
    set({{"LOCAL_RANK", bad}});
    expect_error({std::string("LOCAL_RANK=") + bad + " is not a local rank in [0, 65536)"});
  }
}

TEST_F(LaunchTest, MasterPortNotAPort) {
  for (const char* bad : {"abc", "0", "65536", "-1", "29500 ", ""}) {
    set_torchrun();
    set({{"MASTER_PORT", bad}});
    expect_error({std::string("MASTER_PORT=") + bad + " is not a port number in [1, 65535]"});
  }
}

TEST_F(LaunchTest, MissingVariablesAreNamed) {
  set_torchrun();
  unsetenv("MASTER_ADDR");
  expect_error({"WORLD_SIZE=2 needs MASTER_ADDR (rank 0's host name or address), as torchrun sets it"});
  set({{"MASTER_ADDR", ""}});
  expect_error({"WORLD_SIZE=2 needs MASTER_ADDR"});
  set_torchrun();
  unsetenv("MASTER_PORT");
  expect_error({"WORLD_SIZE=2 needs MASTER_PORT", "as torchrun sets it"});
  set_torchrun();
  unsetenv("RANK");
  expect_error({"WORLD_SIZE=2 needs RANK", "as torchrun sets it"});
}

TEST_F(LaunchTest, QuotedValuesAreCutAndMadePrintable) {
  set_torchrun();
  set({{"MASTER_PORT", "29\n500\x1b[31m"}});
  expect_error({"MASTER_PORT=29?500?[31m is not a port number"});
  const std::string long_value(200, '7');
  set({{"MASTER_PORT", long_value.c_str()}});
  const std::string message = expect_error({"MASTER_PORT=" + std::string(64, '7') + "... is not a port number"});
  EXPECT_EQ(message.find(std::string(65, '7')), std::string::npos) << message;
}

}  // namespace
}  // namespace tt
