// cli/main.cpp - `cleave COMMAND ...`: dispatch only.
#include <cstring>
#include <exception>
#include <iostream>

#include "cli/commands.h"
#include "cli/version.h"
#include "base/strings.h"

namespace cleave::cli {

namespace {
std::string oneLine(std::string message) {
  for (char& c : message)
    if (c == '\n')
      c = ' ';
  return message;
}
} // namespace

int runCommand(CLI::App& app, const Args& args, std::ostream& out, std::ostream& err,
               const std::function<Status()>& body) {
  std::vector<std::string> reversed(args.rbegin(), args.rend()); // CLI11 consumes from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    err << app.get_name() << ": usage error: " << oneLine(e.what()) << " (see --help)\n";
    return kExitUsage;
  }
  Status status = body();
  if (status)
    return kExitOk;
  if (status.error().code() == ErrorCode::Usage) {
    err << app.get_name() << ": usage error: " << oneLine(status.error().message()) << " (see --help)\n";
    return kExitUsage;
  }
  err << app.get_name() << ": error: " << oneLine(status.error().message()) << "\n";
  return kExitRejected;
}

Error usageError() { return Error(ErrorCode::Usage); }

namespace {
const Command* const kCommands[] = {&kInspectCommand, &kGenCommand,      &kConvertCommand,  &kSimplifyCommand,
                                    &kSupportCommand, &kSplitCommand,    &kPartitionCommand, &kPipelineCommand,
                                    &kScheduleCommand, &kRunCommand,     &kVerifyCommand,   &kShapesCommand,
                                    &kMinimizeCommand, &kTrainCommand,   &kLaunchCommand};

void printUsage(std::ostream& out) {
  out << "cleave - cut neural-network graphs across devices\n\n"
         "usage: cleave COMMAND [ARGS] (cleave COMMAND --help for each)\n"
         "       cleave --version (what it was built with: libtorch, ONNX, oneDNN, the CUDA wing)\n\n"
         "commands:\n";
  for (const Command* command : kCommands)
    out << "  " << command->name << std::string(10 - std::strlen(command->name), ' ') << command->summary
        << "\n";
  out << "\nmodels: ONNX files (.onnx, ai.onnx opsets 1-28; 1-10 converted to 11), FX-graph JSON written by "
         "tools/cleave_fx.py, or torch.export programs (.pt2, from torch.export.save)\n";
}
} // namespace
} // namespace cleave::cli

int main(int argc, char** argv) {
  using namespace cleave::cli;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    printUsage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    printVersion(std::cout);
    return kExitOk;
  }
  Args args(argv + 2, argv + argc);
  for (const Command* command : kCommands) {
    if (std::strcmp(argv[1], command->name) != 0)
      continue;
    try {
      return command->run(*command, args, std::cout, std::cerr);
    } catch (const std::bad_alloc&) { // an input asked for more memory than the machine has: not a bug
      std::cerr << "cleave " << command->name << ": error: out of memory (the input needs more than this machine has)\n";
      return kExitRejected;
    } catch (const std::exception& e) { // a bug: say so in one line instead of crashing
      std::string what = e.what();
      std::cerr << "cleave " << command->name << ": internal error: " << cleave::firstLine(what) << "\n";
      return kExitBug;
    }
  }
  std::cerr << "cleave: unknown command '" << argv[1] << "' (see cleave --help)\n";
  return kExitUsage;
}
