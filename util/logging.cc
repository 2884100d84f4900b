// glog initialisation and the forwarding sink that the NCCL plugin uses to
// send UCCL's log lines through NCCL's own logger.
#include "util/logging.h"

#include <mutex>

namespace uccl {
namespace {

class ForwardingSink : public google::LogSink {
 public:
  void send(google::LogSeverity severity, const char* full_filename,
            const char* base_filename, int line, const struct ::tm* tm_time,
            const char* message, size_t message_len) override {
    (void)full_filename;
    (void)tm_time;
    LogForwarder fn = fn_;
    if (fn != nullptr) fn(severity, base_filename, line, message, message_len);
  }
  LogForwarder fn_ = nullptr;
};

std::once_flag g_init_once;
std::mutex g_sink_mu;
ForwardingSink* g_sink = nullptr;

}  // namespace

void init_logging(const char* program_name) {
  std::call_once(g_init_once, [program_name] {
    if (!google::IsGoogleLoggingInitialized()) {
      // Default to stderr; users may still point GLOG_log_dir elsewhere.
      if (FLAGS_log_dir.empty()) FLAGS_logtostderr = true;
      google::InitGoogleLogging(program_name ? program_name : "uccl");
    }
  });
}

void set_log_forwarder(LogForwarder fn) {
  std::lock_guard<std::mutex> lock(g_sink_mu);
  if (fn != nullptr) {
    if (g_sink == nullptr) {
      g_sink = new ForwardingSink();  // lives for the process
      google::AddLogSink(g_sink);
    }
    g_sink->fn_ = fn;
    // Neither stderr nor log files: an empty destination disables the file
    // for that severity, so the forwarder is the only output.
    FLAGS_logtostderr = false;
    FLAGS_alsologtostderr = false;
    FLAGS_stderrthreshold = google::NUM_SEVERITIES;
    for (int s = 0; s < google::NUM_SEVERITIES; ++s) {
      google::SetLogDestination(s, "");
    }
  } else if (g_sink != nullptr) {
    g_sink->fn_ = nullptr;
    FLAGS_logtostderr = true;
    FLAGS_stderrthreshold = google::ERROR;
  }
}

}  // namespace uccl
