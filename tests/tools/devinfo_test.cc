// uccl_devinfo --knobs lists every knob of every layer (engine, NCCL plugin,
// NIC) with its value and meaning, and calls none of them a typo.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include "tests/subprocess.h"
#include "util/knobs.h"

namespace uccl::testing {
namespace {

TEST(DevinfoTool, KnobsListsEveryLayersKnobsAndNoneAsATypo) {
  Subprocess p({"/usr/bin/env", "UCCL_PATHS=3", "UCCL_CHUNK_KB=32",
                "UCCL_MAX_RETRIES=9", "UCCL_NCCL_ENGINES=4",
                "UCCL_SOFTNIC_MTU=9000", "UCCL_NOT_A_KNOB=1", UCCL_DEVINFO_BIN,
                "--knobs"});
  EXPECT_EQ(p.wait(20000), 0) << p.output();
  std::set<std::string> listed;
  std::istringstream in(p.output());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("UCCL_", 0) == 0)
      listed.insert(line.substr(0, line.find('=')));
  }
  for (const std::string& n : knob_catalog()) {
    EXPECT_TRUE(listed.count(n)) << n << " not listed:\n" << p.output();
  }
  EXPECT_NE(p.output().find("UCCL_PATHS=3 (from environment)"),
            std::string::npos)
      << p.output();
  EXPECT_NE(p.output().find("UCCL_NCCL_ENGINES=4 (from environment)"),
            std::string::npos);
  // Exactly one typo: the one that is not a knob.
  EXPECT_NE(p.output().find("UCCL_NOT_A_KNOB is not a UCCL knob"),
            std::string::npos)
      << p.output();
  EXPECT_EQ(p.output().find("is not a UCCL knob"),
            p.output().rfind("is not a UCCL knob"))
      << p.output();
}

}  // namespace
}  // namespace uccl::testing
