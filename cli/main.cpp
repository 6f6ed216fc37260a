// The tinytrain command line: the list of commands (one file each, cli/<name>_command.cpp; what
// a command is: cli/command.h) and the dispatch to the one given. Every user error ends as one
// line on stderr and exit code 1 (2 for bad flags: CLI11's parse errors).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/input_error.h"
#include "cli/command.h"
#include "kernels/cpu/cpu_simd.h"

int main(int argc, char** argv) {
  using namespace tt;
  std::vector<std::unique_ptr<Command>> commands;
  commands.push_back(make_train_command());
  commands.push_back(make_plan_command());
  commands.push_back(make_profile_command());
  commands.push_back(make_verify_command());
  commands.push_back(make_prepare_command());
  commands.push_back(make_sample_command());
  commands.push_back(make_export_command());
  commands.push_back(make_merge_command());
  commands.push_back(make_doctor_command());
  commands.push_back(make_ops_command());

  CLI::App app{"tinytrain: a from-scratch Transformer training engine (CPU and CUDA)"};
  app.require_subcommand(1);
  std::string names;  // every command, for the message below
  bool known = false;
  for (const auto& command : commands) {
    CLI::App* cmd = app.add_subcommand(command->name(), command->summary());
    cmd->allow_extras();  // (kept to be named below: CLI11's own message lists them in reverse)
    command->add_flags(*cmd);
    names += (names.empty() ? "" : ", ") + std::string(command->name());
    known = known || (argc > 1 && command->name() == std::string(argv[1]));
  }
  // CLI11 would call an unknown command "no subcommand"; name it instead.
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::cerr << "error: unknown command '" << argv[1] << "' (expected one of " << names << "; see --help)" << std::endl;
    return 2;
  }
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      std::cerr << "error: " << e.what() << " (see --help)" << std::endl;
      return 2;
    }
    for (const auto& command : commands) {
      const CLI::App* cmd = app.get_subcommand(command->name());
      if (!cmd->parsed()) continue;
      // A flag the command does not declare is one it does not use: refused, never ignored.
      if (!cmd->remaining().empty()) {
        std::cerr << "error: " << command->name() << " does not take '" << cmd->remaining().front()
                  << "' (see tinytrain " << command->name() << " --help)" << std::endl;
        return 2;
      }
      best_cpu_simd();  // (a bad TINYTRAIN_CPU_SIMD stops every command here, in one line)
      return command->run();
    }
  } catch (const InputError& e) {  // (a flag parsed as it is read, --backend, throws from parse)
    std::cerr << "error: " << e.what() << std::endl;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of host memory" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
  }
  return 1;
}
