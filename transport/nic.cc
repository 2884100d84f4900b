// Backend-neutral helpers of the NIC interface: enum names, counter text,
// address conversions. Opening devices: transport/registry.cc.
#include "transport/nic.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

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
    char text[INET_ADDRSTRLEN];
    in_addr a;
    a.s_addr = ip;
    inet_ntop(AF_INET, &a, text, sizeof(text));
    return std::string(text) + ":" + std::to_string(udp_port);
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "gid %02x%02x:%02x%02x:...:%02x%02x lid %u",
                gid[0], gid[1], gid[2], gid[3], gid[14], gid[15], lid);
  return buf;
}

int grh_hop_limit(const uint8_t* grh) {
  if ((grh[0] >> 4) == 6) return grh[7];
  if (grh[20] == 0x45) return grh[28];  // IPv4, no options
  return -1;
}

uint32_t hops_from_hop_limit(int hop_limit) {
  if (hop_limit < 0 || hop_limit > 255) return 0;
  const int start = hop_limit <= 64 ? 64 : hop_limit <= 128 ? 128 : 255;
  return static_cast<uint32_t>(start - hop_limit);
}

}  // namespace uccl::transport
