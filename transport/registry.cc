// The backend table: each backend says which device names it opens and
// which devices it lists; open_device() asks them in order.
#include "transport/registry.h"

#include "transport/null/null_nic.h"
#include "transport/udp/soft_nic.h"
#ifdef UCCL_HAVE_VERBS
#include "transport/verbs/verbs_nic.h"
#endif

namespace uccl::transport {
namespace {

using OpenFn = Result<std::unique_ptr<Device>> (*)(const std::string&,
                                                   const DeviceOptions&);

struct Backend {
  const char* name;
  bool (*claims)(const std::string& device);  // nullptr: any name left
  OpenFn open;
  std::vector<DeviceInfo> (*list)();  // nullptr: opened by name only
};

Result<std::unique_ptr<Device>> open_null(const std::string& name,
                                          const DeviceOptions& opts) {
  UCCL_ASSIGN_OR_RETURN(auto dev, nullnic::NullDevice::open(name, opts));
  return std::unique_ptr<Device>(std::move(dev));
}

#ifdef UCCL_HAVE_VERBS
std::vector<DeviceInfo> list_verbs() {
  return verbs::list_verbs_devices(nullptr);
}
#endif

// Verbs takes the names nothing else claims, so it goes last.
const Backend kBackends[] = {
    {"null", [](const std::string& d) { return d == "null"; }, open_null,
     nullptr},
    {"udp", udp::is_soft_device_name, udp::open_soft_device,
     udp::list_soft_devices},
#ifdef UCCL_HAVE_VERBS
    {"verbs", nullptr, verbs::open_verbs_device, list_verbs},
#endif
};

}  // namespace

std::string verbs_unavailable_reason() {
#ifdef UCCL_HAVE_VERBS
  std::string why;
  if (verbs::list_verbs_devices(&why).empty()) return why;
  return "";
#else
  return "built without the verbs backend (UCCL_VERBS=OFF or no rdma-core "
         "headers)";
#endif
}

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  for (const Backend& b : kBackends) {
    if (b.list == nullptr) continue;
    for (DeviceInfo& d : b.list()) out.push_back(std::move(d));
  }
  return out;
}

Result<std::unique_ptr<Device>> open_device(const std::string& name,
                                            const DeviceOptions& opts) {
  for (const Backend& b : kBackends) {
    if (b.claims == nullptr || b.claims(name)) return b.open(name, opts);
  }
  return NotFound("device '" + name + "': " + verbs_unavailable_reason() +
                  "; software NIC devices are 'udp', 'udp:<ifname>' or "
                  "'udp:<ipv4>'; 'null' is the in-process null NIC");
}

}  // namespace uccl::transport
