// Runs a program as a child process with its output captured, for tests of
// command-line tools: bounded waits, and the child is killed with its test.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace uccl::testing {

class Subprocess {
 public:
  // Starts `argv[0]` with `argv` (stdout and stderr captured together).
  explicit Subprocess(const std::vector<std::string>& argv) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(99);
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      std::vector<char*> args;
      for (const std::string& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    fcntl(fd_, F_SETFL, O_NONBLOCK);
  }
  ~Subprocess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  bool started() const { return pid_ > 0; }
  // SIGKILL now, as a crash would end it, and reap it.
  void kill_now() {
    if (pid_ <= 0 || exited_) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    exited_ = true;
    status_ = 128 + SIGKILL;
  }
  const std::string& output() const { return out_; }
  // True while the child has not exited.
  bool running() {
    if (pid_ <= 0 || exited_) return false;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) != pid_) return true;
    exited_ = true;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return false;
  }

  // Reads output until it contains `needle` (true) or `timeout_ms` passes.
  bool wait_for_output(const std::string& needle, int timeout_ms) {
    const auto end = deadline(timeout_ms);
    while (out_.find(needle) == std::string::npos) {
      if (!read_some(end)) return out_.find(needle) != std::string::npos;
    }
    return true;
  }

  // Waits for the exit (reading all output); the exit status, or -1 if it
  // did not exit within `timeout_ms` (then it is killed).
  int wait(int timeout_ms) {
    const auto end = deadline(timeout_ms);
    while (read_some(end)) {
    }
    if (exited_) return status_;
    for (;;) {
      int st = 0;
      const pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return status_;
      }
      if (std::chrono::steady_clock::now() >= end) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        exited_ = true;
        status_ = -1;
        return -1;
      }
      usleep(10000);
    }
  }

 private:
  static std::chrono::steady_clock::time_point deadline(int ms) {
    return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  }
  // Appends what is available; false at EOF or the deadline.
  bool read_some(std::chrono::steady_clock::time_point end) {
    if (fd_ < 0) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          end - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<long long>(left, 100))) <= 0) {
      return std::chrono::steady_clock::now() < end;
    }
    char buf[4096];
    const ssize_t n = read(fd_, buf, sizeof(buf));
    if (n > 0) {
      out_.append(buf, static_cast<size_t>(n));
      return true;
    }
    if (n < 0 && errno == EAGAIN) return true;
    close(fd_);
    fd_ = -1;
    return false;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string out_;
  bool exited_ = false;
  int status_ = -1;
};

}  // namespace uccl::testing
