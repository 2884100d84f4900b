// NIC-layer entry points: device listing and opening across both backends,
// enum names, and address helpers shared by all backends.
#include "transport/nic.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "transport/null/null_nic.h"
#include "transport/udp/netif.h"
#include "transport/udp/soft_nic.h"
#ifdef UCCL_HAVE_VERBS
#include "transport/verbs/verbs_nic.h"
#endif

namespace uccl::transport {

const char* qp_type_name(QpType t) {
  switch (t) {
    case QpType::kRC:
      return "RC";
    case QpType::kUC:
      return "UC";
    case QpType::kUD:
      return "UD";
  }
  return "?";
}

const char* wr_opcode_name(WrOpcode op) {
  switch (op) {
    case WrOpcode::kWrite:
      return "RDMA_WRITE";
    case WrOpcode::kWriteWithImm:
      return "RDMA_WRITE_WITH_IMM";
    case WrOpcode::kSend:
      return "SEND";
    case WrOpcode::kSendWithImm:
      return "SEND_WITH_IMM";
    case WrOpcode::kRead:
      return "RDMA_READ";
  }
  return "?";
}

namespace {

// Calls fn(name_pos, name_len, value) for each "name value" line of a
// counters_text(), in order; lines without a space are skipped.
template <typename Fn>
void for_each_counter(const std::string& text, Fn fn) {
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const size_t sp = text.find(' ', pos);
    if (sp < end && sp > pos) {
      fn(pos, sp - pos, std::strtoull(text.c_str() + sp + 1, nullptr, 10));
    }
    pos = end + 1;
  }
}

}  // namespace

uint64_t counter_sum(const std::string& text, const std::string& name) {
  uint64_t sum = 0;
  for_each_counter(text, [&](size_t pos, size_t n, uint64_t v) {
    if (text.compare(pos, n, name) == 0) sum += v;
  });
  return sum;
}

std::string nonzero_counters(const std::string& text,
                             const std::string& prefix) {
  std::string out;
  for_each_counter(text, [&](size_t pos, size_t n, uint64_t v) {
    if (v == 0 || n < prefix.size() ||
        text.compare(pos, prefix.size(), prefix) != 0) {
      return;
    }
    if (!out.empty()) out += ' ';
    out.append(text, pos, n);
    out += '=';
    out += std::to_string(v);
  });
  return out;
}

const char* wc_status_name(WcStatus s) {
  switch (s) {
    case WcStatus::kSuccess:
      return "success";
    case WcStatus::kLocalLengthError:
      return "local length error";
    case WcStatus::kLocalProtectionError:
      return "local protection error";
    case WcStatus::kLocalQpError:
      return "local QP operation error";
    case WcStatus::kWrFlushError:
      return "work request flushed";
    case WcStatus::kRemoteAccessError:
      return "remote access error";
    case WcStatus::kRemoteInvalidRequest:
      return "remote invalid request";
    case WcStatus::kRemoteOperationError:
      return "remote operation error";
    case WcStatus::kRetryExceeded:
      return "transport retry counter exceeded";
    case WcStatus::kRnrRetryExceeded:
      return "RNR retry counter exceeded";
    case WcStatus::kGeneralError:
      return "general error";
  }
  return "?";
}

const char* qp_state_name(QpState s) {
  switch (s) {
    case QpState::kReset:
      return "RESET";
    case QpState::kInit:
      return "INIT";
    case QpState::kRtr:
      return "RTR";
    case QpState::kRts:
      return "RTS";
    case QpState::kError:
      return "ERROR";
  }
  return "?";
}

void ipv4_to_gid(uint32_t ipv4_be, uint8_t gid[16]) {
  std::memset(gid, 0, 16);
  gid[10] = gid[11] = 0xff;
  std::memcpy(gid + 12, &ipv4_be, 4);
}

bool gid_to_ipv4(const uint8_t gid[16], uint32_t* ipv4_be) {
  for (int i = 0; i < 10; ++i) {
    if (gid[i] != 0) return false;
  }
  if (gid[10] != 0xff || gid[11] != 0xff) return false;
  std::memcpy(ipv4_be, gid + 12, 4);
  return true;
}

bool PortAddress::gid_is_zero() const {
  for (uint8_t b : gid) {
    if (b) return false;
  }
  return true;
}

std::string PortAddress::to_string() const {
  uint32_t ip;
  if (gid_to_ipv4(gid, &ip)) {
    return udp::ipv4_to_string(ip) + ":" + std::to_string(udp_port);
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "gid %02x%02x:%02x%02x:...:%02x%02x lid %u",
                gid[0], gid[1], gid[2], gid[3], gid[14], gid[15], lid);
  return buf;
}

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
#ifdef UCCL_HAVE_VERBS
  out = verbs::list_verbs_devices(nullptr);
#endif
  for (const udp::NetIf& n : udp::list_netifs()) {
    DeviceInfo d;
    d.name = "udp:" + n.name;
    d.backend = "udp";
    d.netdev = n.name;
    d.ip = udp::ipv4_to_string(n.ipv4_be);
    d.link_speed_mbps = n.speed_mbps ? n.speed_mbps : 100000;
    d.link_speed_known = n.speed_mbps != 0;
    d.mtu_bytes = std::min<uint32_t>(n.mtu > 92 ? (n.mtu - 92) & ~63u : 256,
                                     udp::kMaxFragmentPayload & ~63u);
    d.numa_node = n.numa_node;
    d.pci_path = n.pci_path;
    d.active = n.up;
    out.push_back(d);
  }
  return out;
}

Result<std::unique_ptr<Device>> open_device(const std::string& name,
                                            const DeviceOptions& opts) {
  if (name == "null") {
    UCCL_ASSIGN_OR_RETURN(auto dev, nullnic::NullDevice::open(name, opts));
    return std::unique_ptr<Device>(std::move(dev));
  }
  if (name == "udp" || name.rfind("udp:", 0) == 0) {
    udp::NetIf nif;
    if (name == "udp" || name == "udp:*") {
      // Every interface; QPs learn their path MTU from the route at connect.
      nif.name = "*";
      nif.ipv4_be = 0;
      for (const udp::NetIf& n : udp::list_netifs())
        nif.mtu = std::max(nif.mtu, n.mtu);
    } else {
      UCCL_ASSIGN_OR_RETURN(nif, udp::find_netif(name.substr(4)));
    }
    UCCL_ASSIGN_OR_RETURN(auto dev, udp::SoftDevice::open(nif, name, opts));
    return std::unique_ptr<Device>(std::move(dev));
  }
#ifdef UCCL_HAVE_VERBS
  return verbs::open_verbs_device(name, opts);
#else
  return NotFound("device '" + name + "': " + verbs_unavailable_reason() +
                  "; software NIC devices are 'udp', 'udp:<ifname>' or "
                  "'udp:<ipv4>'; 'null' is the in-process null NIC");
#endif
}

}  // namespace uccl::transport
