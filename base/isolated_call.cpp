#include "base/isolated_call.h"
#include "base/strings.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <exception>

namespace cleave {

namespace {
void writeAll(int fd, const std::string& bytes) {
  for (std::size_t done = 0; done < bytes.size();) {
    ssize_t put = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (put < 0 && errno == EINTR)
      continue;
    if (put <= 0)
      ::_exit(1);
    done += static_cast<std::size_t>(put);
  }
}

std::string readAll(int fd) {
  std::string bytes;
  char buffer[1 << 16];
  for (ssize_t got; (got = ::read(fd, buffer, sizeof buffer)) != 0;) {
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      break;
    bytes.append(buffer, static_cast<std::size_t>(got));
  }
  return bytes;
}
} // namespace

Expected<std::string> runIsolated(std::string_view what, const std::function<std::string()>& body,
                                  unsigned seconds) {
  int channel[2];
  if (::pipe(channel) != 0)
    return Error(ErrorCode::IoError) << "cannot run " << what << ": pipe: " << std::strerror(errno);
  pid_t child = ::fork();
  if (child < 0) {
    int saved = errno;
    ::close(channel[0]);
    ::close(channel[1]);
    return Error(ErrorCode::IoError) << "cannot run " << what << ": fork: " << std::strerror(saved);
  }
  if (child == 0) {
    ::close(channel[0]);
    ::alarm(seconds);
    // A crash is the child's death by its signal: no handler of the parent's (a sanitizer's
    // report, a fuzzer's crash artifact) runs for it. The caller reports the outcome in one line;
    // what the library would print in the child goes nowhere.
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
      std::signal(sig, SIG_DFL);
    if (int null = ::open("/dev/null", O_WRONLY); null >= 0) {
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
    }
    std::string reply;
    try {
      reply = "R" + body();
    } catch (const std::exception& e) {
      reply = std::string("E") + e.what();
    }
    writeAll(channel[1], reply);
    ::_exit(0);
  }
  ::close(channel[1]);
  std::string reply = readAll(channel[0]);
  ::close(channel[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
    return Error(ErrorCode::ParseError) << what << " did not finish in " << seconds << " s on this input";
  // A crash: a signal, or (under a sanitizer, which reports and exits) a failed exit without a result.
  if (WIFSIGNALED(status) || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || reply.empty())
    return Error(ErrorCode::ParseError) << what << " crashed on this input (the input is malformed)";
  if (reply[0] == 'E') {
    std::string message = reply.substr(1);
    return Error(ErrorCode::ParseError) << what << " failed: " << firstLine(message);
  }
  return reply.substr(1);
}

} // namespace cleave
