// cli/cmd_launch.cpp - `cleave launch --nproc N [--nnodes H --node-rank R --master-addr A
// --master-port P --bind-cores --max-restarts N] -- COMMAND ...`: start N ranks of COMMAND (torchrun's variables set), prefix
// their output with the rank, stop them all when one fails.
#include "cli/commands.h"
#include "cli/runtime_library.h"
#include "cli/options.h"
#include "runtime/distributed/launcher.h"

namespace cleave::cli {
namespace {
struct LaunchFlags {
  runtime::distributed::LaunchOptions options;
  int timeoutSeconds = 300;
  std::vector<std::string> command;
};

void describe(CLI::App& app, LaunchFlags& flags) {
  app.description("Start N ranks of a command on this host with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and "
                  "MASTER_PORT set (torchrun's variables; run it on each host of many), prefix their output "
                  "with the rank, and stop every rank when one fails. A rank listens on this host's address "
                  "toward --master-addr (GLOO_SOCKET_IFNAME picks an interface instead); with --nnodes over 1, "
                  "a rank that fails here is announced to the other hosts' ranks, whose errors name it.");
  app.add_option("--nproc", flags.options.processes, "ranks on this host")->required()->check(CLI::Range(1, 1024));
  app.add_option("--nnodes", flags.options.nodes, "hosts")->capture_default_str()->check(CLI::Range(1, 1 << 16));
  app.add_option("--node-rank", flags.options.nodeRank, "this host's index (0: the master)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--master-addr", flags.options.masterAddr, "address of rank 0's host")->capture_default_str();
  app.add_option("--master-port", flags.options.masterPort, "port of the rendezvous store")->capture_default_str();
  app.add_option("--timeout", flags.timeoutSeconds, "seconds a rank waits for the others (rendezvous, receives)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  app.add_flag("--bind-cores", flags.options.bindCores,
               "run each rank on its own cores (cores / ranks of those this process may use, in order), so two "
               "ranks' compute never shares a core; needs a core per rank");
  app.add_option("--max-restarts", flags.options.maxRestarts,
                 "when a rank fails, stop every rank and start them all again, up to N times (torchrun's elastic "
                 "restart; ranks see TORCHELASTIC_RESTART_COUNT): `cleave train --checkpoint-dir D` then resumes "
                 "from D's last complete checkpoint")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  app.add_option("command", flags.command, "the command each rank runs (after --; 'cleave' is this cleave)");
}

Status launchRanks(LaunchFlags& flags, std::ostream& out, std::ostream& err) {
  if (flags.command.empty())
    return usageError() << "no command: cleave launch --nproc N -- cleave run PLAN --distributed";
  if (flags.options.nodeRank >= flags.options.nodes)
    return usageError() << "--node-rank " << flags.options.nodeRank << " is not below --nnodes "
                        << flags.options.nodes;
  if (flags.options.masterPort == 0)
    return usageError() << "--master-port must be 1-65535";
  flags.options.timeout = std::chrono::seconds(flags.timeoutSeconds);
  CLEAVE_TRY(runtime::distributed::LaunchResult result,
             runtime::distributed::launch(flags.options, flags.command, out, err));
  if (result.exitCode == 0)
    return {};
  return Error(ErrorCode::InvalidArgument) << result.failure;
}
} // namespace

const CommandBody kLaunchBody{"launch", parseThenRun<LaunchFlags, describe, launchRanks>};

} // namespace cleave::cli
