// The backend registry: names go to the backend that claims them, listing
// covers the software NIC, and backend options are applied or refused.
#include "transport/registry.h"

#include <gtest/gtest.h>
#include <unistd.h>

namespace uccl::transport {
namespace {

DeviceOptions with_params(const std::string& params) {
  DeviceOptions o;
  o.faults_from_knobs = false;
  o.backend_params = params;
  return o;
}

TEST(Registry, NamesReachTheirBackend) {
  auto udp = open_device("udp:lo", with_params(""));
  ASSERT_TRUE(udp.ok()) << udp.status();
  EXPECT_EQ((*udp)->info().backend, "udp");
  auto null = open_device("null", with_params(""));
  ASSERT_TRUE(null.ok()) << null.status();
  EXPECT_NE((*null)->info().backend, "udp");
  auto none = open_device("udp:no-such-interface0", with_params(""));
  EXPECT_FALSE(none.ok());
  auto bogus = open_device("nosuchnic_9", with_params(""));
  ASSERT_FALSE(bogus.ok());
  EXPECT_NE(bogus.status().message().find("nosuchnic_9"), std::string::npos)
      << bogus.status();
}

TEST(Registry, ListsTheLoopbackSoftwareNicAndNotTheNullNic) {
  bool lo = false;
  for (const DeviceInfo& d : list_devices()) {
    EXPECT_NE(d.name, "null");
    lo = lo || d.name == "udp:lo";
  }
  EXPECT_TRUE(lo);
}

TEST(Registry, SoftwareNicOptionsAreAppliedOrRefused) {
  // Splicing caps lo's payload MTU at 15 pages; copying does not.
  const long page = sysconf(_SC_PAGESIZE);
  auto spliced = open_device("udp:lo", with_params("splice=1, local_crc=0"));
  auto copied = open_device("udp:lo", with_params("splice=0,local_crc=0"));
  ASSERT_TRUE(spliced.ok() && copied.ok());
  EXPECT_LE((*spliced)->info().mtu_bytes, static_cast<uint32_t>(page * 15));
  EXPECT_GT((*copied)->info().mtu_bytes, (*spliced)->info().mtu_bytes);
  EXPECT_TRUE(open_device("udp:lo", with_params("direct_rx_bytes=0")).ok());
  for (const char* bad : {"splice=2", "local_crc", "direct_rx_bytes=-5",
                          "spliced=1", "splice=1,mtu=9000"}) {
    auto d = open_device("udp:lo", with_params(bad));
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace uccl::transport
