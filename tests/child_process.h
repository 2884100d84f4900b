// fork() for tests that run a peer in a second process: the child dies with
// its parent, so a test killed by its timeout leaves no process behind.
#pragma once
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

namespace uccl::testing {

// Like fork(); in the child, SIGKILL arrives when the parent exits.
inline pid_t fork_child() {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(99);  // the parent died before prctl
  }
  return pid;
}

}  // namespace uccl::testing
