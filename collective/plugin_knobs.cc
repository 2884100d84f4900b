// The NCCL plugin's and tuner's knobs (UCCL_NCCL_*), in a library of their
// own so that tools list them (uccl_devinfo --knobs) without the plugin.
#include "collective/plugin_knobs.h"

#include <cstdint>

#include "uccl/endpoint.h"

namespace uccl::nccl {

UCCL_KNOB(std::string, knob_devices, "UCCL_NCCL_DEVICES", "",
          "NCCL plugin: comma-separated UCCL devices to offer NCCL (udp, "
          "udp:<if>, udp:<ipv4>, mlx5_0, ...), in that order; wins over "
          "NCCL's variables. Empty: active verbs devices (NCCL_IB_HCA "
          "selects), then the software NIC on each interface but lo and "
          "docker* (NCCL_SOCKET_IFNAME selects), lo only where there is no "
          "other; nearest the GPU first.");
UCCL_KNOB(int64_t, knob_engines, "UCCL_NCCL_ENGINES", 0,
          "NCCL plugin: engine threads per device in use (each spins on a "
          "core of its own while there is traffic). 0: three quarters of "
          "this rank's share of the CPUs it may run on (its allowed "
          "CPUs, or its cgroup's CPU quota where lower) over the ranks on "
          "the host (LOCAL_WORLD_SIZE, "
          "OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS, else the host's "
          "GPUs), at most the share less two, at least 1 and at most 12 "
          "with one or two ranks per host, 8 with more: 12 with 2 ranks on "
          "32 CPUs (which also gets 6 NCCL channels, UCCL_NCCL_SPEED_MBPS), "
          "8 with 4 ranks on 64, 6 with 8 ranks on 64, 2 with 4 ranks on 16 "
          "(collective/stripe.h).",
          0, 16);
UCCL_KNOB(int64_t, knob_conns, "UCCL_NCCL_CONNS", 0,
          "NCCL plugin: UCCL connections per NCCL comm; each message is "
          "striped over them (0: half the engines, between 1 and 6: 6 with "
          "12 engines, 4 with 8).",
          0, 16);
UCCL_KNOB(int64_t, knob_max_recvs, "UCCL_NCCL_MAX_RECVS", 1,
          "NCCL plugin: grouped receives offered to NCCL (maxRecvs). Above 1 "
          "each comm uses a single connection (tags then pick buffers).",
          1, kMaxRecvsPerRequest);
UCCL_KNOB(int64_t, knob_stripe_kb, "UCCL_NCCL_STRIPE_KB", 0,
          "NCCL plugin: KiB of each message per connection of its comm (the "
          "last connection takes the rest); shorter messages go whole on one "
          "connection. 0: NCCL's 1 MiB all_reduce message (4 MiB buffers, "
          "Simple) over the comm's K connections, 1 MiB / K rounded up to "
          "1 KiB and then to whole chunks where that keeps the parts "
          "even (collective/stripe.h): with 4 connections (8 engines) on "
          "lo, 256 KiB (61440-byte chunks, UCCL_SOFTNIC_SPLICE) or 255.5 "
          "KiB (four 65408-byte chunks, payloads copied); with 6 (12 "
          "engines) three 61440-byte chunks, 184320 B, on lo and on the "
          "GPU machines' eth0 alike (chunks are one datagram to a peer on this "
          "host); 86 KiB with 12. "
          "The receiving side's stripe travels in the connect handle: "
          "senders use it.",
          0, 1 << 20);
UCCL_KNOB(int64_t, knob_speed_mbps, "UCCL_NCCL_SPEED_MBPS", 0,
          "NCCL plugin: link speed reported to NCCL, Mb/s (0: the device's "
          "link speed; where the link has none, as on lo and most VM "
          "interfaces, 300000 with 12 or more engines per device and "
          "400000 with fewer). NCCL sizes its channel count from it: on "
          "one host 100000 gives 2 channels, 300000 gives 6, 400000 gives "
          "4 (collective/stripe.h).",
          0, INT32_MAX);
const char* const kPartsModes[] = {"first", "all", "auto", nullptr};
UCCL_KNOB(std::string, knob_parts, "UCCL_NCCL_PARTS", "auto",
          "NCCL plugin: how a comm's receivers post the K parts of a "
          "message. first: part 0, and the rest once part 0 shows the "
          "sender striped (a message shorter than a stripe goes whole on "
          "connection 0). all: all K parts at once; a message shorter than "
          "a stripe goes in part 0 with K-1 empty parts and completes with "
          "part 0. auto: all for a message where the comm's message 32 "
          "before was at least a stripe, else first (large messages skip "
          "the wait for part 0, small ones keep one connection). The "
          "receiving side's choice travels in the connect handle.",
          kPartsModes);
UCCL_KNOB(bool, knob_spread, "UCCL_NCCL_SPREAD", true,
          "NCCL plugin: give each comm's connection 0, which carries its "
          "small messages whole, an engine of its own where there are "
          "enough (send comms from engine 0, receive comms from engine "
          "n/2, each taking turns), and spread a comm's K connections "
          "evenly over the n engines (connection i on the i*n/K-th after "
          "connection 0), so send and receive traffic share every engine "
          "alike. Off: every connection goes to the least-loaded engine, "
          "which puts connection 0 of every comm on one engine.");
UCCL_KNOB(bool, knob_steer, "UCCL_NCCL_STEER_THREADS", true,
          "NCCL plugin: each NCCL thread that calls the plugin to connect, "
          "accept, send or receive (its proxy threads) leaves, once, the "
          "cores UCCL engines of any process on the host are pinned to "
          "(Endpoint::engine_cores_on_host), where it may run on others; so "
          "does the process's main thread, at the first send or receive "
          "(UCCL_NCCL_STEER_MAIN). A "
          "busy engine does not yield its core, so a proxy thread the "
          "scheduler put there waited behind it, up to a scheduler tick per "
          "message, until the kernel moved it; a thread put beside a "
          "sleeping engine is interrupted each time it wakes. Off: the "
          "kernel alone places them.");
UCCL_KNOB(bool, knob_gpu_direct, "UCCL_NCCL_GPU_DIRECT", true,
          "NCCL plugin: offer NCCL GPU memory (ptrSupport CUDA) on verbs "
          "devices where rdma-core registers dma-bufs (CUDA and DMABUF) or "
          "nvidia_peermem is loaded (CUDA); off: host memory only, NCCL "
          "stages through it. The software NIC is host memory only.");
const char* const kFlushModes[] = {"auto", "read", "off", nullptr};
UCCL_KNOB(std::string, knob_flush, "UCCL_NCCL_FLUSH", "auto",
          "NCCL plugin: how iflush makes received data visible to the GPU. "
          "auto: for GPU memory, a one-byte read of it back through a "
          "loopback connection (the NIC's read is ordered after its writes, "
          "as NCCL's IB transport flushes); nothing for host memory. read: "
          "for host memory too (to exercise the path on any NIC). off: "
          "never.",
          kFlushModes);
UCCL_KNOB(bool, knob_steer_main, "UCCL_NCCL_STEER_MAIN", true,
          "NCCL plugin, with UCCL_NCCL_STEER_THREADS: the process's main "
          "thread leaves the engines' cores too, once, at the first send or "
          "receive. The threads and processes it starts afterwards (e.g. "
          "data loader workers) inherit that affinity. Off: only NCCL's "
          "threads move.");
UCCL_KNOB(int64_t, knob_max_bytes, "UCCL_NCCL_MAX_BYTES", int64_t{1} << 30,
          "NCCL plugin: largest message NCCL may post (maxP2pBytes, "
          "maxCollBytes); larger operations are split by NCCL.",
          4096, int64_t{1} << 40);

UCCL_KNOB(bool, knob_tuner, "UCCL_NCCL_TUNER", true,
          "NCCL plugin: also act as NCCL's tuner (ncclTunerPlugin_v4, used "
          "when NCCL_TUNER_PLUGIN is unset): all_reduce over the software "
          "NIC above UCCL_NCCL_LL_MAX_KB per rank runs NCCL's Simple "
          "protocol instead of LL/LL128. Off: NCCL's own choice.");
// Where LL stops paying over the software NIC (BENCHMARKS.md, the tuner's
// LL / Simple crossover on loopback with 2 ranks, NCCL_PROTO forced, us per
// all_reduce): with 2 NCCL channels LL / Simple were 64 KiB 49.3 / 60.5,
// 128 KiB 77.5 / 63.7, 256 KiB 138.1 / 73.5, where NCCL's model keeps LL up
// to 256 KiB; with the 4 channels a link without a speed gets, 128 KiB
// 57.3 / 66.0, 192 KiB 73.2 / 71.4. So LL up to 64 KiB per rank (128 KiB
// for 2 ranks).
UCCL_KNOB(int64_t, knob_ll_max_kb, "UCCL_NCCL_LL_MAX_KB", 64,
          "NCCL plugin tuner: largest all_reduce, in KiB per rank (the "
          "buffer's bytes / ranks), that may still run LL/LL128; 0: the "
          "tuner changes nothing.",
          0, int64_t{1} << 30);

// Measured with 2 ranks (BENCHMARKS.md, the tuner's Tree rule), us per
// all_reduce, Ring/LL (NCCL's choice) / Tree/LL: 4 B 20.7 / 19.5, 64 B
// 20.9 / 20.0, 256 B 21.6 / 20.6, 1 KiB 22.4 / 22.4, 4 KiB 26.2 / 30.2 (6
// rounds); in 10 more rounds on another machine, 4 B 20.3 / 19.6, 64 B
// 21.3 / 20.3, 512 B 21.8 / 20.8. NCCL's model puts the two 0.2 us apart (16.6
// / 16.8), so it takes Ring. A Tree of 2 ranks sends one way, then back; a Ring
// sends both ways at once and each hop then shares the engines' and the
// kernel's time with the other.
UCCL_KNOB(int64_t, knob_tree_max_bytes, "UCCL_NCCL_TREE_MAX_BYTES", 512,
          "NCCL plugin tuner: largest all_reduce, in bytes (the buffer), "
          "that runs NCCL's Tree algorithm with LL where NCCL allows it; "
          "0: NCCL's own choice.",
          0, int64_t{1} << 30);

}  // namespace uccl::nccl
