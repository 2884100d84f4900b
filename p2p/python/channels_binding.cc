// uccl.p2p.ChannelProxy: GPU-initiated channels' setup from Python (the
// proxy over a uccl.p2p.Endpoint, memory, descriptors, channel handles as
// bytes for kernels) and, for the CPU stand-in, the device calls from host.
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <string>

#include "channels/proxy.h"
#include "p2p/python/py_util.h"
#include "uccl/device/channel.h"

namespace uccl_py {
namespace {

namespace ch = uccl::channels;
namespace dev = uccl::device;

class PyChannelProxy {
 public:
  PyChannelProxy(py::object ep, int gpu, uint32_t num_semaphores,
                 uint32_t fifo_slots, size_t piece_bytes, int buffers,
                 int timeout_ms, int core, int64_t write_min_bytes)
      : ep_obj_(std::move(ep)) {
    ch::ProxyConfig c = ch::proxy_config_from_knobs();
    c.gpu = gpu;
    c.num_semaphores = num_semaphores;
    if (fifo_slots) c.fifo_slots = fifo_slots;
    if (piece_bytes) c.piece_bytes = piece_bytes;
    if (buffers) c.buffers = buffers;
    if (timeout_ms > 0) c.timeout_ns = uint64_t(timeout_ms) * 1000000;
    c.core = core;
    if (write_min_bytes >= 0) c.write_min_bytes = size_t(write_min_bytes);
    host_ = gpu < 0;
    proxy_ = value(ch::ChannelProxy::create(endpoint_of(ep_obj_), c));
  }
  ~PyChannelProxy() {
    py::gil_scoped_release nogil;
    proxy_.reset();
  }

  uint32_t register_memory(py::handle obj) {
    bool gpu = false;
    auto [a, n] = memory_of(obj, true, &gpu);
    return value(proxy_->register_memory(reinterpret_cast<void*>(a), n));
  }
  py::bytes descriptor() const { return py::bytes(proxy_->descriptor()); }
  uint32_t add_channel(uint64_t conn, const std::string& peer) {
    return value(proxy_->add_channel(conn, peer));
  }
  uint32_t open_channel(uint64_t conn, int timeout_ms) {
    uccl::Result<uint32_t> r = uccl::Unavailable("");
    {
      py::gil_scoped_release nogil;
      r = proxy_->open_channel(conn, timeout_ms);
    }
    return value(std::move(r));
  }
  // The ChannelHandle a kernel takes by value, as its bytes.
  py::bytes handle(uint32_t c) const {
    dev::ChannelHandle h = value(proxy_->handle(c));
    return py::bytes(reinterpret_cast<const char*>(&h), sizeof(h));
  }
  void start() { check(proxy_->start()); }
  void stop() {
    py::gil_scoped_release nogil;
    check(proxy_->stop());
  }
  void status(uint32_t c) const { check(proxy_->channel_status(c)); }
  std::map<std::string, uint64_t> stats() const {
    const auto s = proxy_->stats();
    return {{"triggers", s.triggers},         {"puts", s.puts},
            {"signals", s.signals},           {"flushes", s.flushes},
            {"put_bytes", s.put_bytes},       {"bad_triggers", s.bad_triggers},
            {"bad_messages", s.bad_messages}, {"writes", s.writes}};
  }

  // The device calls from a host thread (the CPU stand-in only: a GPU
  // proxy's FIFO counters are in GPU memory). Errors raise.
  void put(uint32_t c, uint32_t dst_mem, uint64_t dst_off, uint32_t src_mem,
           uint64_t src_off, uint64_t nbytes, int64_t signal) {
    const dev::ChannelHandle h = host_handle(c);
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = signal < 0
               ? dev::channel_put(h, dst_mem, dst_off, src_mem, src_off, nbytes)
               : dev::channel_put_with_signal(h, dst_mem, dst_off, src_mem,
                                              src_off, nbytes,
                                              static_cast<uint32_t>(signal));
    }
    result(c, rc);
  }
  void signal(uint32_t c, uint32_t sem) {
    const dev::ChannelHandle h = host_handle(c);
    result(c, dev::channel_signal(h, sem));
  }
  void wait(uint32_t c, uint32_t sem, uint64_t v) {
    const dev::ChannelHandle h = host_handle(c);
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = dev::channel_wait(h, sem, v);
    }
    result(c, rc);
  }
  void flush(uint32_t c) {
    const dev::ChannelHandle h = host_handle(c);
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = dev::channel_flush(h);
    }
    result(c, rc);
  }

 private:
  dev::ChannelHandle host_handle(uint32_t c) const {
    if (!host_) {
      raise(uccl::InvalidArgument(
          "host calls need a CPU proxy (gpu=-1); kernels call the device "
          "API with handle()"));
    }
    return value(proxy_->handle(c));
  }
  void result(uint32_t c, int rc) const {
    if (rc == dev::kChannelOk) return;
    uccl::Status st = proxy_->channel_status(c);
    if (st.ok()) {
      st = rc == dev::kChannelTimedOut
               ? uccl::TimedOut("channel " + std::to_string(c) +
                                ": no progress within the timeout")
               : uccl::Unavailable("channel " + std::to_string(c) +
                                   ": the FIFO failed");
    }
    raise(st);
  }

  py::object ep_obj_;  // keeps the endpoint alive
  std::unique_ptr<ch::ChannelProxy> proxy_;
  bool host_ = true;
};

}  // namespace

void bind_channels(py::module_& m) {
  m.attr("CHANNEL_HANDLE_BYTES") = sizeof(dev::ChannelHandle);
  py::class_<PyChannelProxy>(m, "ChannelProxy")
      .def(py::init<py::object, int, uint32_t, uint32_t, size_t, int, int, int,
                    int64_t>(),
           py::arg("endpoint"), py::arg("gpu") = -1,
           py::arg("num_semaphores") = 64, py::arg("fifo_slots") = 0,
           py::arg("piece_bytes") = 0, py::arg("buffers") = 0,
           py::arg("timeout_ms") = 0, py::arg("core") = -1,
           py::arg("write_min_bytes") = -1)
      .def("register_memory", &PyChannelProxy::register_memory)
      .def("descriptor", &PyChannelProxy::descriptor)
      .def("add_channel", &PyChannelProxy::add_channel)
      .def("open_channel", &PyChannelProxy::open_channel, py::arg("conn"),
           py::arg("timeout_ms") = 10000)
      .def("handle", &PyChannelProxy::handle)
      .def("start", &PyChannelProxy::start)
      .def("stop", &PyChannelProxy::stop)
      .def("status", &PyChannelProxy::status)
      .def("stats", &PyChannelProxy::stats)
      .def("put", &PyChannelProxy::put, py::arg("channel"), py::arg("dst_mem"),
           py::arg("dst_off"), py::arg("src_mem"), py::arg("src_off"),
           py::arg("nbytes"), py::arg("signal") = -1)
      .def("signal", &PyChannelProxy::signal)
      .def("wait", &PyChannelProxy::wait)
      .def("flush", &PyChannelProxy::flush);
}

}  // namespace uccl_py
