// Pure verbs helpers (see verbs_util.h): no device access here, so all of it
// is covered by unit tests on machines without RDMA NICs.
#include "transport/verbs/verbs_util.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace uccl::transport::verbs {
namespace {

bool is_zero(const uint8_t g[16]) {
  for (int i = 0; i < 16; ++i) {
    if (g[i]) return false;
  }
  return true;
}

bool is_v4_mapped(const uint8_t g[16]) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g, kPrefix, 12) == 0;
}

bool is_link_local(const uint8_t g[16]) {
  return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

}  // namespace

Result<VerbsParams> VerbsParams::parse(const std::string& text) {
  VerbsParams p;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string val = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key != "gid_index") {
      return InvalidArgument("verbs device option '" + item +
                             "': the verbs backend takes gid_index=N");
    }
    char* stop = nullptr;
    const long v = val.empty() ? -1 : std::strtol(val.c_str(), &stop, 10);
    if (val.empty() || *stop != '\0' || v < 0 || v > 255) {
      return InvalidArgument("verbs device option '" + item +
                             "': gid_index takes 0 to 255");
    }
    p.gid_index = static_cast<int>(v);
  }
  return p;
}

Status verbs_errno(const std::string& what) {
  return ErrnoStatus(what, errno ? errno : EINVAL);
}

int choose_gid_index(const std::vector<GidEntry>& table, int preferred) {
  if (preferred >= 0) {
    for (const GidEntry& e : table) {
      if (e.index == preferred && !is_zero(e.gid)) return preferred;
    }
  }
  for (const GidEntry& e : table) {
    if (e.type == "RoCE v2" && !is_zero(e.gid) && is_v4_mapped(e.gid)) {
      return e.index;
    }
  }
  for (const GidEntry& e : table) {
    if (e.type == "RoCE v2" && !is_zero(e.gid) && !is_link_local(e.gid)) {
      return e.index;
    }
  }
  for (const GidEntry& e : table) {
    if (!is_zero(e.gid)) return e.index;
  }
  return -1;
}

WcStatus map_wc_status(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS:
      return WcStatus::kSuccess;
    case IBV_WC_LOC_LEN_ERR:
      return WcStatus::kLocalLengthError;
    case IBV_WC_LOC_PROT_ERR:
      return WcStatus::kLocalProtectionError;
    case IBV_WC_LOC_QP_OP_ERR:
      return WcStatus::kLocalQpError;
    case IBV_WC_WR_FLUSH_ERR:
      return WcStatus::kWrFlushError;
    case IBV_WC_REM_ACCESS_ERR:
      return WcStatus::kRemoteAccessError;
    case IBV_WC_REM_INV_REQ_ERR:
      return WcStatus::kRemoteInvalidRequest;
    case IBV_WC_REM_OP_ERR:
      return WcStatus::kRemoteOperationError;
    case IBV_WC_RETRY_EXC_ERR:
      return WcStatus::kRetryExceeded;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return WcStatus::kRnrRetryExceeded;
    default:
      return WcStatus::kGeneralError;
  }
}

uint32_t mtu_enum_to_bytes(ibv_mtu m) {
  switch (m) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 1024;
}

ibv_mtu mtu_bytes_to_enum(uint32_t bytes) {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

void build_init_attr(QpType type, uint8_t port, ibv_qp_attr* attr, int* mask) {
  std::memset(attr, 0, sizeof(*attr));
  attr->qp_state = IBV_QPS_INIT;
  attr->pkey_index = 0;
  attr->port_num = port;
  attr->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  if (type == QpType::kRC) attr->qp_access_flags |= IBV_ACCESS_REMOTE_READ;
  *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
}

void build_rtr_attr(QpType type, const QpInfo& remote, uint8_t port,
                    bool is_roce, int sgid_index, ibv_mtu path_mtu,
                    const RcAttrs& rc, ibv_qp_attr* attr, int* mask) {
  std::memset(attr, 0, sizeof(*attr));
  attr->qp_state = IBV_QPS_RTR;
  attr->path_mtu = path_mtu;
  attr->dest_qp_num = remote.qpn;
  attr->rq_psn = remote.psn & 0xffffff;
  attr->ah_attr.port_num = port;
  attr->ah_attr.sl = 0;
  if (is_roce) {
    attr->ah_attr.is_global = 1;
    std::memcpy(attr->ah_attr.grh.dgid.raw, remote.addr.gid, 16);
    attr->ah_attr.grh.sgid_index = static_cast<uint8_t>(sgid_index);
    attr->ah_attr.grh.hop_limit = 255;
    attr->ah_attr.grh.traffic_class = 0;
  } else {
    attr->ah_attr.is_global = 0;
    attr->ah_attr.dlid = remote.addr.lid;
  }
  *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
          IBV_QP_RQ_PSN;
  if (type == QpType::kRC) {
    attr->max_dest_rd_atomic = rc.max_rd_atomic;
    attr->min_rnr_timer = rc.min_rnr_timer;
    *mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
}

void build_rts_attr(QpType type, uint32_t sq_psn, const RcAttrs& rc,
                    ibv_qp_attr* attr, int* mask) {
  std::memset(attr, 0, sizeof(*attr));
  attr->qp_state = IBV_QPS_RTS;
  attr->sq_psn = sq_psn & 0xffffff;
  *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (type == QpType::kRC) {
    attr->timeout = rc.timeout;
    attr->retry_cnt = rc.retry_cnt;
    attr->rnr_retry = rc.rnr_retry;
    attr->max_rd_atomic = rc.max_rd_atomic;
    *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
             IBV_QP_MAX_QP_RD_ATOMIC;
  }
}

}  // namespace uccl::transport::verbs
