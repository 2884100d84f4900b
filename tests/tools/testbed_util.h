// A tools/testbed/netns.sh testbed for tests: brought up with given flags,
// removed when it goes out of scope, with the reason when none can be made.
#pragma once

#include <unistd.h>

#include <string>
#include <vector>

#include "tests/subprocess.h"

namespace uccl::testing {

inline const std::string& testbed_script() {
  static const std::string s =
      std::string(UCCL_SOURCE_DIR) + "/tools/testbed/netns.sh";
  return s;
}

// Two namespaces, <name>-a (10.199.0.1) and <name>-b (10.199.0.2), joined
// by a veth pair; `skip` says why none could be made here (no root, no
// namespaces, no iproute2 or iptables), `up_rc`/`up_out` what `up` said.
struct Testbed {
  std::string name, skip, up_out;
  int up_rc = -1;
  Testbed(const std::string& tag, const std::vector<std::string>& flags)
      : name(tag + std::to_string(getpid() % 100000)) {
    if (geteuid() != 0) {
      skip = "needs root for ip netns";
      return;
    }
    std::vector<std::string> up = {testbed_script(), "up", "--name=" + name};
    up.insert(up.end(), flags.begin(), flags.end());
    Subprocess p(up);
    up_rc = p.wait(30000);
    up_out = p.output();
    if (up_rc != 0 &&
        up_out.find("Operation not permitted") != std::string::npos) {
      skip = "no network namespaces here: " + up_out;
    } else if (up_rc == 3) {
      skip = "no iproute2 or iptables here: " + up_out;
    }
  }
  ~Testbed() {
    if (up_rc == 0) {
      Subprocess({testbed_script(), "down", "--name=" + name}).wait(30000);
    }
  }
  Testbed(const Testbed&) = delete;
  Testbed& operator=(const Testbed&) = delete;

  // The command line that runs `argv` inside side "a" or "b".
  std::vector<std::string> in(const std::string& side,
                              const std::vector<std::string>& argv) const {
    std::vector<std::string> c = {testbed_script(), "exec", "--name=" + name,
                                  side};
    c.insert(c.end(), argv.begin(), argv.end());
    return c;
  }
  // `argv` run inside side a or b: its exit code and output.
  int exec(const std::string& side, const std::vector<std::string>& argv,
           std::string* out, int timeout_ms = 30000) const {
    Subprocess p(in(side, argv));
    const int rc = p.wait(timeout_ms);
    *out = p.output();
    return rc;
  }
  // What side's link dropped (netns.sh drops).
  std::string drops(const std::string& side) const {
    Subprocess p({testbed_script(), "drops", "--name=" + name, side});
    p.wait(30000);
    return p.output();
  }
  // What the bottleneck's queue dropped leaving side (netns.sh qdrops).
  std::string qdrops(const std::string& side) const {
    Subprocess p({testbed_script(), "qdrops", "--name=" + name, side});
    p.wait(30000);
    return p.output();
  }
};

}  // namespace uccl::testing
