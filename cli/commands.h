// cli/commands.h - one entry per subcommand; cli/main.cpp only dispatches.
// Each parses its arguments into an options struct, calls the library and renders with report/.
// Exit codes: 0 ok, 1 rejected (bad input, an impossible request), 2 usage, 3 bug.
#pragma once

#include <CLI/CLI.hpp>
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

// Parses `args` with `app`. Returns -1 to go on, or the exit code (0 after --help, 2 on a
// usage error, printed as one line).
int parseArguments(CLI::App& app, const Args& args, std::ostream& out, std::ostream& err);
// Prints "cleave <command>: error: <message>" and returns kExitRejected.
int reportError(const std::string& command, const Error& error, std::ostream& err);

} // namespace cleave::cli
