// The NCCL plugin's engine and connection counts, default stripe, message
// cut and engine placement (collective/stripe.h): NCCL's 1 MiB slice over K
// connections in the fewest datagrams, even parts; connections spread
// evenly both ways.
#include "collective/stripe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "uccl/striped.h"

namespace uccl::nccl {
namespace {

// Datagrams (chunks) a message of `len` bytes takes when cut over k
// connections at `stripe` (stripe_part(), as a StripedConn cuts it), each part
// in chunks of `chunk` bytes. *largest: the biggest part.
size_t datagrams(size_t len, int k, size_t stripe, size_t chunk,
                 size_t* largest) {
  size_t total = 0;
  *largest = 0;
  for (int j = 0; j < k; ++j) {
    size_t off = 0, n = 0;
    stripe_part(len, j, k, stripe, &off, &n);
    *largest = std::max(*largest, n);
    total += (n + chunk - 1) / chunk;
  }
  return total;
}

// On lo (65408-byte chunks) and a 1400-MTU interface's software NIC with
// payloads copied (65280), 8 connections: parts of two whole chunks, 17
// datagrams per 1 MiB (the fewest: ceil(1 MiB / chunk)) against 24 for 128 KiB
// parts, each of which ended in a short chunk.
TEST(DefaultStripe, EightConnectionsCutTheSliceIntoWholeChunks) {
  for (uint32_t chunk : {65408u, 65280u}) {
    const size_t s = default_stripe_bytes(8, chunk);
    EXPECT_EQ(s, 2u * chunk);
    size_t largest = 0;
    EXPECT_EQ(datagrams(kNcclSliceBytes, 8, s, chunk, &largest), 17u)
        << "chunk " << chunk;
    EXPECT_EQ(datagrams(kNcclSliceBytes, 8, 128 * 1024, chunk, &largest), 24u)
        << "chunk " << chunk << ": the old 128 KiB stripe";
  }
}

// 12 engines' 6 connections with spliced payloads (61440-byte chunks, lo
// or a 1400-MTU eth0 whose peers on this host are reached through lo): parts of
// three whole chunks, 18 datagrams per 1 MiB, the fewest.
TEST(DefaultStripe, SixConnectionsOfSplicedChunks) {
  const size_t s = default_stripe_bytes(6, 61440);
  EXPECT_EQ(s, 3u * 61440);
  size_t largest = 0;
  EXPECT_EQ(datagrams(kNcclSliceBytes, 6, s, 61440, &largest), 18u);
  EXPECT_LE(largest, kNcclSliceBytes / 6 + kNcclSliceBytes / 6 / 8);
}

// Across connection counts and chunk sizes (lo, spliced and copied, a
// 1400-MTU interface, a 9000-MTU one, a 1500-MTU one): never more datagrams
// than the plain 1 MiB / K stripe, the fewest possible wherever the stripe is
// whole chunks, and no part more than an eighth above an even share.
TEST(DefaultStripe, FewDatagramsAndEvenParts) {
  int whole = 0;
  for (uint32_t chunk : {61440u, 65408u, 65280u, 8908u, 1408u}) {
    for (int k = 1; k <= 16; ++k) {
      const size_t s = default_stripe_bytes(k, chunk);
      const size_t plain = default_stripe_bytes(k, 0);
      size_t largest = 0, plain_largest = 0;
      const size_t n = datagrams(kNcclSliceBytes, k, s, chunk, &largest);
      const size_t before =
          datagrams(kNcclSliceBytes, k, plain, chunk, &plain_largest);
      const std::string what = "k " + std::to_string(k) + " chunk " +
                               std::to_string(chunk) + " stripe " +
                               std::to_string(s);
      EXPECT_LE(n, before) << what;
      if (k > 1 && s % chunk == 0) {
        ++whole;
        EXPECT_EQ(n, (kNcclSliceBytes + chunk - 1) / chunk) << what;
      }
      const size_t even = kNcclSliceBytes / static_cast<size_t>(k);
      EXPECT_LE(largest, std::max(even + even / 8, plain_largest)) << what;
    }
  }
  EXPECT_GT(whole, 30) << "whole-chunk stripes were the exception";
}

// Where whole chunks would leave the last connection far more than the
// others (12 connections: 86 KiB shares, 64 KiB chunks), the stripe stays
// 1 MiB / K rounded up to 1 KiB; so it does with no chunk size known.
TEST(DefaultStripe, KeepsTheEvenShareWhereWholeChunksWouldNot) {
  EXPECT_EQ(default_stripe_bytes(12, 65408), 88064u);
  EXPECT_EQ(default_stripe_bytes(8, 0), 131072u);
  EXPECT_EQ(default_stripe_bytes(16, 1u << 20), 65536u);  // chunk > share
  EXPECT_EQ(default_stripe_bytes(0, 65408), default_stripe_bytes(1, 65408));
}

// c send and c receive comms (NCCL's channels) of k connections on n
// engines: every engine carries as many send as receive connections where
// the counts divide evenly, never more than one above an even share each
// way otherwise, and the connection 0s of up to n/2 comms each way are on
// engines of their own.
TEST(LaneEngine, SpreadsBothDirectionsEvenlyAndKeepsConnectionZerosApart) {
  for (int n = 1; n <= 16; ++n) {
    for (int k = 1; k <= n; ++k) {
      for (int c = 1; c <= 8; ++c) {
        std::vector<int> sends(n, 0), recvs(n, 0);
        std::set<int> zeros;
        int zero_clash = 0;
        for (uint32_t lane = 0; lane < static_cast<uint32_t>(c); ++lane) {
          for (int i = 0; i < k; ++i) {
            const int s = lane_engine(true, lane, i, k, n);
            const int r = lane_engine(false, lane, i, k, n);
            ASSERT_TRUE(s >= 0 && s < n && r >= 0 && r < n);
            ++sends[s];
            ++recvs[r];
            if (i == 0) {
              zero_clash += !zeros.insert(s).second;
              zero_clash += !zeros.insert(r).second;
            }
          }
        }
        const std::string what = "n " + std::to_string(n) + " k " +
                                 std::to_string(k) + " comms " +
                                 std::to_string(c);
        // A comm's own connections never share an engine.
        for (uint32_t lane = 0; lane < 3; ++lane) {
          std::set<int> mine;
          for (int i = 0; i < k; ++i) {
            mine.insert(lane_engine(true, lane, i, k, n));
          }
          EXPECT_EQ(mine.size(), static_cast<size_t>(k)) << what;
        }
        const int share = (c * k + n - 1) / n;  // ceil(c*k / n)
        EXPECT_LE(*std::max_element(sends.begin(), sends.end()), share) << what;
        EXPECT_LE(*std::max_element(recvs.begin(), recvs.end()), share) << what;
        if ((c * k) % n == 0) {
          EXPECT_EQ(sends, recvs) << what << ": an engine one way only";
        }
        if (2 * c <= n && n % 2 == 0) {
          EXPECT_EQ(zero_clash, 0) << what;
        }
      }
    }
  }
  // The case that motivated it: 4 + 4 comms of 4 connections on 8
  // engines, 2 send and 2 receive connections on every engine (consecutive
  // engines left engine 3 receive-only and engine 7 send-only).
  std::vector<int> sends(8, 0), recvs(8, 0);
  for (uint32_t lane = 0; lane < 4; ++lane) {
    for (int i = 0; i < 4; ++i) {
      ++sends[lane_engine(true, lane, i, 4, 8)];
      ++recvs[lane_engine(false, lane, i, 4, 8)];
    }
  }
  EXPECT_EQ(sends, std::vector<int>(8, 2));
  EXPECT_EQ(recvs, std::vector<int>(8, 2));
  // k = n: connection i on the i-th engine after connection 0, as before.
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(lane_engine(true, 3, i, 8, 8), (3 + i) % 8);
  }
  EXPECT_EQ(lane_engine(false, 0, 0, 8, 8), 4);
  EXPECT_EQ(lane_engine(true, 5, 0, 4, 0), 0);  // no engines: no crash
}

TEST(AutoEngines, ThreeQuartersOfTheRanksShareUpToTwelveOrEight) {
  // Two CPUs of a small share left to NCCL's proxy and the rank's thread:
  // 4 ranks on 16 CPUs got 3 engines each and ran 100x slower than with 2.
  EXPECT_EQ(auto_engines(16, 4), 2);
  EXPECT_EQ(auto_engines(12, 4), 1);
  EXPECT_EQ(auto_engines(20, 4), 3);   // 5 each: three quarters and 5 - 2
  EXPECT_EQ(auto_engines(32, 2), 12);  // the 2-GPU machines: the share, 12
  EXPECT_EQ(auto_engines(64, 2), 12);  // capped at 12
  EXPECT_EQ(auto_engines(24, 2), 9);
  EXPECT_EQ(auto_engines(16, 1), 12);
  EXPECT_EQ(auto_engines(64, 4), 8);  // the 4-GPU machines: capped at 8 (12 by
                                      // share)
  EXPECT_EQ(auto_engines(64, 3), 8);
  EXPECT_EQ(auto_engines(64, 8), 6);  // 8 each: 6, 2 left to NCCL
  EXPECT_EQ(auto_engines(40, 8), 3);  // 5 each
  EXPECT_EQ(auto_engines(2, 1), 1);   // CI: never below one
  EXPECT_EQ(auto_engines(8, 16), 1);  // more ranks than CPUs
  EXPECT_EQ(auto_engines(8, 0), 6);   // unknown ranks: one
  for (int cpus = 1; cpus <= 256; ++cpus) {
    for (int ranks = 1; ranks <= 8; ++ranks) {
      const int e = auto_engines(cpus, ranks);
      ASSERT_GE(e, 1);
      ASSERT_LE(e, ranks <= 2 ? kMaxAutoEngines : kMaxAutoEnginesManyRanks);
      // Never more than three quarters of the share, nor the share less
      // two, unless that is < 1.
      if (cpus / ranks >= 2) {
        ASSERT_LE(e * ranks * 4, cpus * 3) << cpus << " CPUs, " << ranks;
      }
      if (cpus / ranks >= 3) {
        ASSERT_LE(e, cpus / ranks - 2) << cpus << " CPUs, " << ranks;
      }
    }
  }
}

TEST(UnknownLinkSpeed, SixNcclChannelsForTwelveEnginesElseFour) {
  // The values NCCL 2.28 turns into 6 and 4 channels on one host.
  EXPECT_EQ(unknown_link_speed_mbps(12), 300000u);
  EXPECT_EQ(unknown_link_speed_mbps(16), 300000u);
  EXPECT_EQ(unknown_link_speed_mbps(11), 400000u);
  EXPECT_EQ(unknown_link_speed_mbps(8), 400000u);
  EXPECT_EQ(unknown_link_speed_mbps(1), 400000u);
  // By default: 6 channels for 2 ranks on 32 CPUs (12 engines each), 4 for
  // 2 ranks on 24 (9) and for 4 ranks on 64 (8).
  EXPECT_EQ(unknown_link_speed_mbps(auto_engines(32, 2)), 300000u);
  EXPECT_EQ(unknown_link_speed_mbps(auto_engines(24, 2)), 400000u);
  EXPECT_EQ(unknown_link_speed_mbps(auto_engines(64, 4)), 400000u);
  for (int cpus = 1; cpus <= 256; ++cpus) {
    for (int ranks = 3; ranks <= 8; ++ranks) {
      ASSERT_EQ(unknown_link_speed_mbps(auto_engines(cpus, ranks)), 400000u);
    }
  }
}

TEST(AutoConns, HalfTheEnginesPutFourConnectionsOnEveryEngine) {
  EXPECT_EQ(auto_conns(8), 4);   // the measured pairs: 8 and 4, 12 and 6
  EXPECT_EQ(auto_conns(12), 6);  // UCCL_NCCL_ENGINES=12
  EXPECT_EQ(auto_conns(1), 1);
  EXPECT_EQ(auto_conns(3), 1);
  EXPECT_EQ(auto_conns(16), kMaxAutoConns);
  // NCCL with 2 ranks and 4 channels: 4 send and 4 receive comms per rank.
  // With every even engine count up to 12, each engine carries 2
  // connections each way.
  for (int n = 2; n <= 12; n += 2) {
    const int k = auto_conns(n);
    std::map<int, int> sends, recvs;
    for (uint32_t lane = 0; lane < 4; ++lane) {
      for (int i = 0; i < k; ++i) {
        ++sends[lane_engine(true, lane, i, k, n)];
        ++recvs[lane_engine(false, lane, i, k, n)];
      }
    }
    ASSERT_EQ(sends.size(), static_cast<size_t>(n)) << n;
    ASSERT_EQ(recvs.size(), static_cast<size_t>(n)) << n;
    for (int e = 0; e < n; ++e) {
      EXPECT_EQ(sends[e], 2) << "engine " << e << " of " << n;
      EXPECT_EQ(recvs[e], 2) << "engine " << e << " of " << n;
    }
  }
}

TEST(LocalRanks, LauncherCountThenGpusThenOne) {
  std::map<std::string, std::string> env;
  auto get = [&](const char* k) -> const char* {
    auto it = env.find(k);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(local_ranks(get, 0), 1);
  EXPECT_EQ(local_ranks(get, 4), 4);
  env["MPI_LOCALNRANKS"] = "3";
  EXPECT_EQ(local_ranks(get, 4), 3);
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  EXPECT_EQ(local_ranks(get, 4), 2);
  env["LOCAL_WORLD_SIZE"] = "8";  // torchrun's wins
  EXPECT_EQ(local_ranks(get, 4), 8);
  // Not a positive number: ignored, the next source counts.
  for (const char* bad : {"", "0", "-2", "2x", "x", "99999"}) {
    env["LOCAL_WORLD_SIZE"] = bad;
    EXPECT_EQ(local_ranks(get, 4), 2) << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace uccl::nccl
