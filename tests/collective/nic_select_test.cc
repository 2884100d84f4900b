// The NCCL plugin's device choice: UCCL_NCCL_DEVICES against NCCL's own
// NCCL_IB_HCA / NCCL_SOCKET_IFNAME / NCCL_IB_GID_INDEX, and PCIe order.
#include "collective/nic_select.h"

#include <gtest/gtest.h>

#include <map>

namespace uccl::nccl {
namespace {

transport::DeviceInfo dev(const std::string& name, const std::string& backend,
                          const std::string& netdev, const std::string& pci,
                          bool active = true) {
  transport::DeviceInfo d;
  d.name = name;
  d.backend = backend;
  d.netdev = netdev;
  d.pci_path = pci;
  d.active = active;
  return d;
}

// Two RoCE NICs on different PCIe switches, a VM NIC, docker, lo.
const std::vector<transport::DeviceInfo> kHost = {
    dev("mlx5_0", "verbs", "",
        "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0"),
    dev("mlx5_1", "verbs", "",
        "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0"),
    dev("mlx5_2", "verbs", "", "", /*active=*/false),
    dev("udp:eth0", "udp", "eth0",
        "/sys/devices/pci0000:00/0000:00:03.0/virtio2"),
    dev("udp:docker0", "udp", "docker0", ""),
    dev("udp:lo", "udp", "lo", ""),
};

struct Env {
  std::map<std::string, std::string> vars;
  Getenv get() const {
    return [this](const char* n) -> const char* {
      auto it = vars.find(n);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

std::vector<std::string> pick(const Env& e, const std::string& uccl = "") {
  auto c = choose_devices(kHost, uccl, e.get());
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? c->names : std::vector<std::string>{};
}

using V = std::vector<std::string>;

TEST(NameList, PrefixExactExcludeAndPorts) {
  auto l = NameList::parse("mlx5");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->keeps("mlx5_1", 1));
  EXPECT_FALSE(l->keeps("bnxt_re0", 1));
  l = NameList::parse("=mlx5_0:1,mlx5_1");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->keeps("mlx5_0", 1));
  EXPECT_FALSE(l->keeps("mlx5_0", 2));   // the port must match
  EXPECT_TRUE(l->keeps("mlx5_1", 2));    // no port given: any
  EXPECT_FALSE(l->keeps("mlx5_10", 1));  // exact
  l = NameList::parse("^=mlx5_0");
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(l->keeps("mlx5_0", 1));
  EXPECT_TRUE(l->keeps("mlx5_01", 1));
  for (const char* bad :
       {"", "^", "^=", "eth0,", ",eth0", "mlx5_0:", "mlx5_0:x", "mlx5_0:0"}) {
    EXPECT_FALSE(NameList::parse(bad).ok()) << bad;
  }
}

TEST(ChooseDevices, DefaultsAsNccl) {
  // Active verbs devices, then interfaces but lo and docker*.
  EXPECT_EQ(pick(Env{}), (V{"mlx5_0", "mlx5_1", "udp:eth0"}));
}

TEST(ChooseDevices, NcclVariablesSelect) {
  EXPECT_EQ(pick(Env{{{"NCCL_IB_HCA", "=mlx5_1"}}}), (V{"mlx5_1", "udp:eth0"}));
  EXPECT_EQ(pick(Env{{{"NCCL_IB_HCA", "^mlx5_0"}}}), (V{"mlx5_1", "udp:eth0"}));
  EXPECT_EQ(pick(Env{{{"NCCL_IB_HCA", "mlx5_0:2"}}}), (V{"udp:eth0"}));
  EXPECT_EQ(pick(Env{{{"NCCL_SOCKET_IFNAME", "lo"}}}),
            (V{"mlx5_0", "mlx5_1", "udp:lo"}));
  EXPECT_EQ(pick(Env{{{"NCCL_SOCKET_IFNAME", "^eth,docker"}}}),
            (V{"mlx5_0", "mlx5_1", "udp:lo"}));
  EXPECT_EQ(pick(Env{{{"NCCL_SOCKET_IFNAME", "=eth"}}}),
            (V{"mlx5_0", "mlx5_1"}));
}

TEST(ChooseDevices, UcclKnobWinsAndSaysSo) {
  Env e{{{"NCCL_IB_HCA", "mlx5_1"}, {"NCCL_SOCKET_IFNAME", "lo"}}};
  auto c = choose_devices(kHost, "udp:eth0,mlx5_0", e.get());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->names, (V{"udp:eth0", "mlx5_0"}));
  EXPECT_NE(c->why.find("UCCL_NCCL_DEVICES (wins over"), std::string::npos)
      << c->why;
}

TEST(ChooseDevices, NothingLeftIsAnErrorOnlyWhenTheUserFiltered) {
  const std::vector<transport::DeviceInfo> lo_only = {
      dev("udp:lo", "udp", "lo", "")};
  auto c = choose_devices(lo_only, "", Env{}.get());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->names, (V{"udp:lo"}));
  c = choose_devices(lo_only, "", Env{{{"NCCL_SOCKET_IFNAME", "ib"}}}.get());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("interfaces: lo"), std::string::npos);
  c = choose_devices(kHost, "", Env{{{"NCCL_IB_HCA", "x:"}}}.get());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("NCCL_IB_HCA"), std::string::npos);
}

TEST(ChooseDevices, GidIndexFromNcclUnlessUcclSetsIt) {
  auto c = choose_devices(kHost, "", Env{{{"NCCL_IB_GID_INDEX", "3"}}}.get());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->verbs_params, "gid_index=3");
  c = choose_devices(
      kHost, "",
      Env{{{"NCCL_IB_GID_INDEX", "3"}, {"UCCL_IB_GID_INDEX", "1"}}}.get());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->verbs_params, "");
  EXPECT_NE(c->why.find("UCCL_IB_GID_INDEX wins"), std::string::npos);
  c = choose_devices(kHost, "", Env{{{"NCCL_IB_GID_INDEX", "-2"}}}.get());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

TEST(PcieDistance, HopsBelowTheCommonPrefix) {
  const std::string gpu = "/sys/devices/pci0000:00/0000:00:01.0/0000:02:00.0";
  EXPECT_EQ(pcie_distance(gpu, kHost[0].pci_path), 2);   // same switch
  EXPECT_EQ(pcie_distance(gpu, kHost[3].pci_path), 4);   // same root
  EXPECT_EQ(pcie_distance(gpu, kHost[1].pci_path), -1);  // other root
  EXPECT_EQ(pcie_distance(gpu, ""), -1);
}

TEST(PcieDistance, DevicesNearestTheGpuFirst) {
  V names = {"mlx5_1", "udp:eth0", "mlx5_0"};
  order_by_distance(kHost, "/sys/devices/pci0000:80/0000:80:01.0/0000:82:00.0",
                    &names);
  EXPECT_EQ(names, (V{"mlx5_1", "udp:eth0", "mlx5_0"}));
  order_by_distance(kHost, "/sys/devices/pci0000:00/0000:00:01.0/0000:02:00.0",
                    &names);
  EXPECT_EQ(names, (V{"mlx5_0", "udp:eth0", "mlx5_1"}));
  order_by_distance(kHost, "", &names);  // unknown GPU: unchanged
  EXPECT_EQ(names, (V{"mlx5_0", "udp:eth0", "mlx5_1"}));
}

}  // namespace
}  // namespace uccl::nccl
