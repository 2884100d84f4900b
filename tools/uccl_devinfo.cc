// uccl_devinfo: lists UCCL's devices (verbs and software NIC) like
// ibv_devinfo, and with --knobs every UCCL_* knob with its value.
#include <gflags/gflags.h>

#include <cstdio>

#include "transport/nic.h"
#include "uccl/params.h"
#include "util/logging.h"

DEFINE_bool(knobs, false, "Also print every UCCL_* knob with its value.");
DEFINE_string(device, "", "Open this device and print its port address.");

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Lists UCCL devices. Usage: uccl_devinfo [--knobs] [--device=NAME]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  uccl::init_logging(argv[0]);
  using namespace uccl::transport;
  for (const DeviceInfo& d : list_devices()) {
    std::printf("hca_id:\t%s\n", d.name.c_str());
    std::printf("\ttransport:\t%s\n", d.backend == "udp"
                                          ? "UDP (UCCL software NIC)"
                                          : "verbs (rdma-core)");
    if (!d.netdev.empty()) std::printf("\tnetdev:\t\t%s\n", d.netdev.c_str());
    if (!d.ip.empty()) std::printf("\tip:\t\t%s\n", d.ip.c_str());
    if (d.guid)
      std::printf("\tnode_guid:\t%016llx\n", (unsigned long long)d.guid);
    std::printf("\tlink_speed:\t%llu Mb/s\n",
                static_cast<unsigned long long>(d.link_speed_mbps));
    std::printf("\tmtu:\t\t%u bytes (payload per packet)\n", d.mtu_bytes);
    std::printf("\tnuma_node:\t%d\n", d.numa_node);
    std::printf("\tpci_path:\t%s\n",
                d.pci_path.empty() ? "(none)" : d.pci_path.c_str());
    std::printf("\tstate:\t\t%s\n\n", d.active ? "PORT_ACTIVE" : "PORT_DOWN");
  }
  std::string why = verbs_unavailable_reason();
  if (!why.empty()) std::printf("verbs: %s\n", why.c_str());
  int rc = 0;
  if (!FLAGS_device.empty()) {
    auto dev = open_device(FLAGS_device);
    if (!dev.ok()) {
      std::fprintf(stderr, "cannot open %s: %s\n", FLAGS_device.c_str(),
                   dev.status().to_string().c_str());
      rc = 1;
    } else {
      std::printf("%s: port address %s, mtu %u\n", FLAGS_device.c_str(),
                  (*dev)->port_address().to_string().c_str(),
                  (*dev)->info().mtu_bytes);
    }
  }
  if (FLAGS_knobs) {
    std::printf("\nUCCL knobs:\n%s", uccl::describe_knobs().c_str());
    for (const std::string& u : uccl::unknown_uccl_env_vars()) {
      std::printf("WARNING: %s is not a UCCL knob (typo?)\n", u.c_str());
    }
  }
  uccl::Status st = uccl::check_knobs();
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.to_string().c_str());
    rc = 1;
  }
  return rc;
}
