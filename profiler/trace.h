// Writes one communicator's events as a Chrome/Perfetto trace (JSON): a
// track per kind of host work, per GPU channel and per proxy connection.
#pragma once

#include <cstdio>
#include <string>

#include "profiler/analysis.h"
#include "profiler/events.h"

namespace uccl::profiler {

struct TraceInfo {
  int rank = 0, nranks = 0;
  uint64_t comm_id = 0;
  std::string comm_name;
  uint64_t stray_calls = 0;
};

// The whole document to `f`: slices ("X") with times in us on the
// monotonic clock (the engines' UCCL_TRACE_FILE clock, so
// tools/profile_merge.py can lay both on one timeline), and the counts
// of Analysis::stats under "otherData". False on a write error.
bool write_trace(std::FILE* f, const EventPool& pool, const Analysis& a,
                 const TraceInfo& info);
// `s` as a JSON string body (quotes, backslashes, control characters).
std::string json_escape(const std::string& s);

}  // namespace uccl::profiler
