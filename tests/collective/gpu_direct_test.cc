// The NCCL plugin's GPU-memory decisions: ptrSupport from what the host
// offers a verbs NIC, peer memory from sysfs, and when iflush reads back.
#include "collective/gpu_direct.h"

#include <gtest/gtest.h>

#include <set>

#include "collective/nccl_net_abi.h"

namespace uccl::nccl {
namespace {

using ncclabi::kPtrCuda;
using ncclabi::kPtrDmaBuf;
using ncclabi::kPtrHost;

TEST(GpuDirect, PtrSupportFromWhatTheHostOffers) {
  GpuDirectProbe p;
  EXPECT_EQ(gpu_ptr_support(p), kPtrHost);  // the software NIC
  p.dmabuf_api = p.peermem = true;
  EXPECT_EQ(gpu_ptr_support(p), kPtrHost);  // still not verbs
  p.verbs = true;
  EXPECT_EQ(gpu_ptr_support(p), kPtrHost | kPtrCuda | kPtrDmaBuf);
  p.dmabuf_api = false;
  EXPECT_EQ(gpu_ptr_support(p), kPtrHost | kPtrCuda);  // peer memory
  p.peermem = false;
  EXPECT_EQ(gpu_ptr_support(p), kPtrHost);  // nothing: NCCL stages
  p.dmabuf_api = true;
  p.enabled = false;  // UCCL_NCCL_GPU_DIRECT=0
  EXPECT_EQ(gpu_ptr_support(p), kPtrHost);
}

TEST(GpuDirect, PeerMemoryFromSysfs) {
  std::set<std::string> present;
  auto exists = [&](const std::string& p) { return present.count(p) > 0; };
  EXPECT_FALSE(peermem_loaded(exists));
  present = {"/sys/module/nvidia_peermem"};
  EXPECT_TRUE(peermem_loaded(exists));
  present = {"/sys/kernel/mm/memory_peers/nv_mem/version"};
  EXPECT_TRUE(peermem_loaded(exists));
  present = {"/sys/module/nvidia"};  // the driver alone is not enough
  EXPECT_FALSE(peermem_loaded(exists));
}

TEST(GpuDirect, FlushReadsBackGpuMemoryOnly) {
  EXPECT_TRUE(flush_needed(FlushMode::kAuto, true));
  EXPECT_FALSE(flush_needed(FlushMode::kAuto, false));
  EXPECT_TRUE(flush_needed(FlushMode::kRead, false));
  EXPECT_FALSE(flush_needed(FlushMode::kOff, true));
}

}  // namespace
}  // namespace uccl::nccl
