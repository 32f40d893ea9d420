#include "runtime/distributed/launcher.h"

#include "runtime/distributed/communicator.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <string_view>
#include <thread>

namespace cleave::runtime::distributed {

namespace {
volatile sig_atomic_t interrupted = 0; // SIGINT / SIGTERM to the launcher: stop the ranks too

void onInterrupt(int) { interrupted = 1; }

struct Rank {
  int global = 0;
  pid_t pid = -1;
  int outFd = -1, errFd = -1;
  std::string outPending, errPending, lastErrLine;
  // When lastErrLine came in, counted across every rank's stderr: a rank that fails because a
  // peer's failure closed its connections writes its line after that peer's.
  std::uint64_t lastErrLineOrder = 0;
  bool exited = false;
  int status = 0;
};

std::string selfExecutable() {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : "cleave";
}

// The CPUs this process may run on, ascending.
std::vector<int> allowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set))
        cpus.push_back(cpu);
  }
  if (cpus.empty()) // no affinity to read: every CPU the hardware reports
    for (unsigned cpu = 0; cpu < std::max(1u, std::thread::hardware_concurrency()); ++cpu)
      cpus.push_back(static_cast<int>(cpu));
  return cpus;
}

std::vector<std::string> rankEnvironment(const LaunchOptions& o, int local, int cores, int restart) {
  int world = o.nodes * o.processes;
  std::vector<std::string> env = {
      "RANK=" + std::to_string(o.nodeRank * o.processes + local), "LOCAL_RANK=" + std::to_string(local),
      "WORLD_SIZE=" + std::to_string(world), "LOCAL_WORLD_SIZE=" + std::to_string(o.processes),
      "MASTER_ADDR=" + o.masterAddr, "MASTER_PORT=" + std::to_string(o.masterPort),
      "CLEAVE_DIST_TIMEOUT=" + std::to_string(o.timeout.count()),
      "TORCHELASTIC_RESTART_COUNT=" + std::to_string(restart),
      "TORCHELASTIC_MAX_RESTARTS=" + std::to_string(o.maxRestarts)};
  if (!std::getenv("OMP_NUM_THREADS"))
    env.push_back("OMP_NUM_THREADS=" + std::to_string(std::max(1, cores / o.processes)));
  return env;
}

// Forks one rank: stdout and stderr into pipes, its own process group, on `cpus` when given
// (inherited through exec), then exec.
Expected<Rank> start(const LaunchOptions& options, int local, int cores, const std::vector<int>& cpus,
                     const std::vector<std::string>& command, int restart) {
  int outPipe[2], errPipe[2];
  if (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0)
    return Error(ErrorCode::InvalidArgument) << "cannot create pipes: " << std::strerror(errno);
  std::vector<std::string> env = rankEnvironment(options, local, cores, restart);
  cpu_set_t cpuSet;
  CPU_ZERO(&cpuSet);
  for (int cpu : cpus)
    CPU_SET(cpu, &cpuSet);
  std::vector<std::string> args = command;
  if (args[0] == "cleave")
    args[0] = selfExecutable();
  pid_t pid = fork();
  if (pid < 0)
    return Error(ErrorCode::InvalidArgument) << "cannot start rank " << local << ": " << std::strerror(errno);
  if (pid == 0) {
    setpgid(0, 0);
    dup2(outPipe[1], STDOUT_FILENO);
    dup2(errPipe[1], STDERR_FILENO);
    if (!cpus.empty() && sched_setaffinity(0, sizeof(cpuSet), &cpuSet) != 0) { // reported as the rank's error
      std::fprintf(stderr, "cleave launch: error: cannot bind rank %d to its cores: %s\n", local, std::strerror(errno));
      _exit(127);
    }
    for (const std::string& entry : env)
      putenv(const_cast<char*>(entry.c_str()));
    std::vector<char*> argv;
    for (std::string& arg : args)
      argv.push_back(arg.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "cleave launch: error: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);
  close(outPipe[1]);
  close(errPipe[1]);
  // The launcher's ends never block (a rank's children may hold the write ends open after it
  // exits); the rank's ends stay blocking, so that a full pipe delays its writes, never drops them.
  fcntl(outPipe[0], F_SETFL, O_NONBLOCK);
  fcntl(errPipe[0], F_SETFL, O_NONBLOCK);
  Rank rank;
  rank.global = options.nodeRank * options.processes + local;
  rank.pid = pid;
  rank.outFd = outPipe[0];
  rank.errFd = errPipe[0];
  return rank;
}

// Whether `line` is a log line of libtorch's c10 logging ("[W1129 08:52:02.804993752 socket.cpp:207]
// ..."): c10d warns of its sockets on stderr, and a rank's failure is described by its own last
// line, not by a library's remark printed before it.
bool isLibraryLogLine(const std::string& line) {
  if (line.size() < 7 || line[0] != '[' || std::string_view("IWEF").find(line[1]) == std::string_view::npos)
    return false;
  for (std::size_t i = 2; i < 6; ++i)
    if (line[i] < '0' || line[i] > '9')
      return false;
  return line[6] == ' ';
}

// Moves whole lines from `pending` to `to`, prefixed; with `flush`, the rest too. Returns whether
// `lastLine` took a new line.
bool emitLines(std::string& pending, int rank, std::ostream& to, bool flush, std::string* lastLine) {
  bool taken = false;
  std::size_t start = 0, end;
  while ((end = pending.find('\n', start)) != std::string::npos || (flush && start < pending.size())) {
    if (end == std::string::npos)
      end = pending.size();
    std::string line = pending.substr(start, end - start);
    to << "[rank " << rank << "] " << line << "\n";
    if (lastLine && !line.empty() && !isLibraryLogLine(line)) {
      *lastLine = line;
      taken = true;
    }
    start = end + 1;
  }
  pending.erase(0, std::min(start, pending.size()));
  to.flush();
  return taken;
}

// What one read of a pipe did: whether it read bytes (more may be ready), and whether a new last
// line came with them.
struct Drained {
  bool read = false, newLastLine = false;
};

// Reads what is ready on one pipe; closes it at end of file.
Drained drain(int& fd, std::string& pending, int rank, std::ostream& to, std::string* lastLine) {
  char buffer[65536];
  ssize_t n = read(fd, buffer, sizeof(buffer));
  if (n > 0) {
    pending.append(buffer, static_cast<std::size_t>(n));
    return {true, emitLines(pending, rank, to, false, lastLine)};
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN))
    return {};
  close(fd);
  fd = -1;
  return {false, emitLines(pending, rank, to, true, lastLine)};
}

void signalAll(std::vector<Rank>& ranks, int signal) {
  for (Rank& rank : ranks)
    if (!rank.exited)
      kill(-rank.pid, signal);
}

class Supervisor {
public:
  Supervisor(std::vector<Rank> ranks, const LaunchOptions& options, std::ostream& out, std::ostream& err)
      : ranks_(std::move(ranks)), options_(options), out_(out), err_(err) {}

  LaunchResult run() {
    while (!allDone()) {
      pollPipes();
      reap();
      if ((result_.failedRank >= 0 || interrupted) && !terminated_) {
        signalAll(ranks_, SIGTERM);
        terminated_ = true;
        killAt_ = std::chrono::steady_clock::now() + options_.grace;
      }
      if (terminated_ && std::chrono::steady_clock::now() > killAt_)
        signalAll(ranks_, SIGKILL);
    }
    if (failedRank_ && result_.failure.empty())
      settleFailure();
    if (interrupted && result_.failedRank < 0) {
      result_.exitCode = 1;
      result_.failure = "interrupted: every rank was stopped";
    }
    return result_;
  }

private:
  bool allDone() const {
    for (const Rank& rank : ranks_)
      if (!rank.exited || rank.outFd >= 0 || rank.errFd >= 0)
        return false;
    return true;
  }

  void pollPipes() {
    std::vector<pollfd> fds;
    std::vector<std::pair<Rank*, bool>> owners; // (rank, is stderr)
    for (Rank& rank : ranks_) {
      if (rank.outFd >= 0) {
        fds.push_back({rank.outFd, POLLIN, 0});
        owners.push_back({&rank, false});
      }
      if (rank.errFd >= 0) {
        fds.push_back({rank.errFd, POLLIN, 0});
        owners.push_back({&rank, true});
      }
    }
    if (fds.empty() || poll(fds.data(), fds.size(), 100) <= 0)
      return;
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR)))
        continue;
      Rank& rank = *owners[k].first;
      if (owners[k].second)
        readStderr(rank);
      else
        drain(rank.outFd, rank.outPending, rank.global, out_, nullptr);
    }
  }

  // Reads what `rank` wrote to stderr and is ready; returns whether it read bytes.
  bool readStderr(Rank& rank) {
    const Drained drained = drain(rank.errFd, rank.errPending, rank.global, err_, &rank.lastErrLine);
    if (drained.newLastLine)
      rank.lastErrLineOrder = ++errLinesSeen_;
    return drained.read;
  }

  // Ranks that ended since the last pass; the run's first failure among them, if none came before.
  // Several failures reaped in one pass are ordered by when their last error line came in (one
  // without a line, killed by a signal, counts as first), not by rank: a rank whose peer failed
  // fails on the connection the peer's exit closed, after it.
  void reap() {
    Rank* first = nullptr;
    auto order = [](const Rank& rank) { return rank.lastErrLine.empty() ? 0 : rank.lastErrLineOrder; };
    for (Rank& rank : ranks_) {
      if (rank.exited || waitpid(rank.pid, &rank.status, WNOHANG) != rank.pid)
        continue;
      rank.exited = true;
      // Everything it wrote is in the pipe now: its last line, if it came after the last poll,
      // is read before the ranks are ordered.
      while (rank.errFd >= 0 && readStderr(rank)) {
      }
      bool failed = !WIFEXITED(rank.status) || WEXITSTATUS(rank.status) != 0;
      if (!failed || result_.failedRank >= 0 || terminated_)
        continue;
      if (!first || order(rank) < order(*first))
        first = &rank;
    }
    if (first) {
      result_.failedRank = first->global;
      result_.exitCode = WIFEXITED(first->status) ? WEXITSTATUS(first->status) : 1;
      failedRank_ = first;
    }
    if (failedRank_ && failedRank_->errFd < 0 && result_.failure.empty())
      settleFailure();
  }

  // The first failure, described once its last stderr line is in. With several hosts it is also
  // announced to the other hosts' ranks through the rendezvous store, so that theirs, failing
  // when this host's connections close, name it (communicator.h).
  void settleFailure() {
    result_.failure = describeFailure(*failedRank_);
    if (options_.nodes > 1 && failedRank_->global != 0) // rank 0's store went with it
      announceFailure(options_.masterAddr, options_.masterPort, result_.failure, std::chrono::seconds(2));
  }

  static std::string describeFailure(const Rank& rank) {
    std::string how = WIFEXITED(rank.status) ? "exited with status " + std::to_string(WEXITSTATUS(rank.status))
                                             : std::string("died of signal ") + strsignal(WTERMSIG(rank.status));
    return "rank " + std::to_string(rank.global) + " " + how +
           (rank.lastErrLine.empty() ? "" : ": " + rank.lastErrLine);
  }

  std::vector<Rank> ranks_;
  const LaunchOptions& options_;
  std::ostream &out_, &err_;
  LaunchResult result_;
  Rank* failedRank_ = nullptr;
  std::uint64_t errLinesSeen_ = 0; // Rank::lastErrLineOrder's count
  bool terminated_ = false;
  std::chrono::steady_clock::time_point killAt_;
};
} // namespace

namespace {
// One start of every rank (restart: how many came before), supervised until all have ended.
Expected<LaunchResult> launchOnce(const LaunchOptions& options, const std::vector<std::string>& command, int restart,
                                  std::ostream& out, std::ostream& err) {
  const std::vector<int> cpus = allowedCpus();
  const int cores = std::max<int>(1, static_cast<int>(cpus.size())), share = cores / options.processes;
  if (options.bindCores && share == 0)
    return Error(ErrorCode::Usage) << "--bind-cores needs a core per rank: " << options.processes << " ranks, "
                                   << cpus.size() << " cores";
  std::vector<Rank> ranks;
  for (int local = 0; local < options.processes; ++local) {
    std::vector<int> own;
    if (options.bindCores)
      own.assign(cpus.begin() + local * share, cpus.begin() + (local + 1) * share);
    Expected<Rank> rank = start(options, local, cores, own, command, restart);
    if (!rank) {
      signalAll(ranks, SIGKILL);
      for (Rank& started : ranks)
        waitpid(started.pid, nullptr, 0);
      return std::move(rank.error());
    }
    ranks.push_back(std::move(*rank));
  }
  return Supervisor(std::move(ranks), options, out, err).run();
}
} // namespace

Expected<LaunchResult> launch(const LaunchOptions& options, const std::vector<std::string>& command,
                              std::ostream& out, std::ostream& err) {
  if (command.empty())
    return Error(ErrorCode::Usage) << "no command to launch (cleave launch --nproc N -- COMMAND ...)";
  interrupted = 0;
  struct sigaction action {};
  action.sa_handler = onInterrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  for (int restart = 0;; ++restart) {
    CLEAVE_TRY(LaunchResult result, launchOnce(options, command, restart, out, err));
    if (result.exitCode == 0 || restart >= options.maxRestarts || interrupted || result.exitCode == 2)
      return result;
    err << "cleave launch: " << result.failure << "; restarting every rank (restart " << restart + 1 << " of "
        << options.maxRestarts << ")\n";
    err.flush();
  }
}

} // namespace cleave::runtime::distributed
