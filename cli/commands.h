// cli/commands.h - one entry per subcommand; cli/main.cpp only dispatches.
// Each declares its options (cli/options.h groups), then runs one body through runCommand: call
// the library, render with report/. Exit codes are decided in runCommand alone:
// 0 ok, 1 rejected (bad input, an impossible request), 2 usage, 3 bug (cli/main.cpp).
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

int runInspect(const Args& args, std::ostream& out, std::ostream& err);
int runGen(const Args& args, std::ostream& out, std::ostream& err);
int runConvert(const Args& args, std::ostream& out, std::ostream& err);
int runSupport(const Args& args, std::ostream& out, std::ostream& err);
int runSplit(const Args& args, std::ostream& out, std::ostream& err);
int runPartition(const Args& args, std::ostream& out, std::ostream& err);
int runRun(const Args& args, std::ostream& out, std::ostream& err);
int runVerify(const Args& args, std::ostream& out, std::ostream& err);
int runMinimize(const Args& args, std::ostream& out, std::ostream& err);
int runShapes(const Args& args, std::ostream& out, std::ostream& err);
int runPipeline(const Args& args, std::ostream& out, std::ostream& err);
int runSchedule(const Args& args, std::ostream& out, std::ostream& err);

// The command kernel: parses `args` with `app` (its name is the command's, "cleave split"), then
// runs `body`. Exit 0 after --help or when the body succeeds; 2 on a usage error (CLI11's, or an
// Error with ErrorCode::Usage), printed as "cleave split: usage error: ... (see --help)"; 1 on
// any other Error, printed as "cleave split: error: ...". Messages are always one line.
int runCommand(CLI::App& app, const Args& args, std::ostream& out, std::ostream& err,
               const std::function<Status()>& body);

// An Error that runCommand reports as a usage error (exit 2).
Error usageError();

} // namespace cleave::cli
