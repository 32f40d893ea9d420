// cli/commands.h - one entry per subcommand; cli/main.cpp only dispatches.
// Each declares its flags (cli/options.h groups) and one body that calls the library and
// renders with report/; parseThenRun joins them. Exit codes are decided in runCommand alone:
// 0 ok, 1 rejected (bad input, an impossible request), 2 usage, 3 bug (cli/main.cpp).
// Complexity: dispatch scans the 12 command names; parsing is linear in the arguments.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "base/expected.h"

namespace cleave::cli {

inline constexpr int kExitOk = 0, kExitRejected = 1, kExitUsage = 2, kExitBug = 3;

using Args = std::vector<std::string>;

// A subcommand: its name, its line in `cleave --help`, and how it runs (usually parseThenRun
// below). Each planning cli/cmd_*.cpp defines one; the running commands' are in
// cli/runtime_link.cpp and run their bodies from the runtime library (cli/runtime_library.h);
// cli/main.cpp lists them all.
struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Command& command, const Args& args, std::ostream& out, std::ostream& err);
};

extern const Command kInspectCommand, kGenCommand, kConvertCommand, kSupportCommand, kSplitCommand,
    kPartitionCommand, kPipelineCommand, kScheduleCommand, kRunCommand, kVerifyCommand, kShapesCommand,
    kMinimizeCommand, kLaunchCommand, kTrainCommand, kSimplifyCommand;

// The command kernel: parses `args` with `app` (its name is the command's, "cleave split"), then
// runs `body`. Exit 0 after --help or when the body succeeds; 2 on a usage error (CLI11's, or an
// Error with ErrorCode::Usage), printed as "cleave split: usage error: ... (see --help)"; 1 on
// any other Error, printed as "cleave split: error: ...". Messages are always one line.
int runCommand(CLI::App& app, const Args& args, std::ostream& out, std::ostream& err,
               const std::function<Status()>& body);

// The usual Command::run: a default `Flags`, `describe(app, flags)` sets the description that
// opens `--help` and adds the options, then runCommand parses and calls `body(flags, out, err)`.
template <class Flags, auto describe, auto body>
int parseThenRun(const Command& command, const Args& args, std::ostream& out, std::ostream& err) {
  CLI::App app{"", std::string("cleave ") + command.name};
  Flags flags;
  describe(app, flags);
  return runCommand(app, args, out, err, [&]() -> Status { return body(flags, out, err); });
}

// An Error that runCommand reports as a usage error (exit 2).
Error usageError();

} // namespace cleave::cli
