// The Python module uccl.p2p (built as uccl/_p2p): p2p::Endpoint with its
// errors as exceptions, memory from the buffer protocol, torch tensors or
// (ptr, nbytes), and the GIL released in every call that may block.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include "p2p/python/py_util.h"
#include "uccl/p2p.h"

namespace py = pybind11;
using uccl::Result;
using uccl::Status;
using uccl::StatusCode;
namespace p2p = uccl::p2p;

namespace uccl_py {

// uccl.p2p.Error, set at import. A plain reference, never released: a
// static py::object would be released after the interpreter is gone.
PyObject* g_error = nullptr;

[[noreturn]] void raise(const Status& st) {
  py::object e = py::reinterpret_borrow<py::object>(g_error)(st.to_string());
  e.attr("code") = uccl::status_code_name(st.code());
  PyErr_SetObject(g_error, e.ptr());
  throw py::error_already_set();
}

}  // namespace uccl_py

namespace {

using uccl_py::check;
using uccl_py::raise;
using uccl_py::value;

// Address and size of a GPU array from its __cuda_array_interface__ (CuPy,
// Numba, ...): C-contiguous only.
std::pair<uintptr_t, size_t> cuda_array(py::handle cai) {
  auto d = cai.cast<py::dict>();
  auto data = d["data"].cast<py::tuple>();
  const std::string typestr = d["typestr"].cast<std::string>();
  size_t n = std::stoul(typestr.substr(2));  // "<f4": 4-byte items
  for (py::handle dim : d["shape"].cast<py::tuple>()) n *= dim.cast<size_t>();
  if (d.contains("strides") && !d["strides"].is_none()) {
    raise(uccl::InvalidArgument("GPU array is not C-contiguous"));
  }
  return {data[0].cast<uintptr_t>(), n};
}

// An object with the buffer protocol (bytes-like, numpy): C-contiguous.
std::pair<uintptr_t, size_t> buffer_memory(py::handle obj, bool writable) {
  py::buffer_info b;
  try {
    b = py::reinterpret_borrow<py::buffer>(obj).request(writable);
  } catch (const std::exception&) {
    PyErr_Clear();
    raise(uccl::InvalidArgument("a read-only buffer where data is written"));
  }
  // C-contiguous: each stride is the product of the later dimensions.
  py::ssize_t expect = b.itemsize;
  for (py::ssize_t d = b.ndim - 1; d >= 0; --d) {
    if (b.shape[d] > 1 && b.strides[d] != expect) {
      raise(uccl::InvalidArgument("buffer is not contiguous"));
    }
    expect *= b.shape[d];
  }
  return {reinterpret_cast<uintptr_t>(b.ptr),
          static_cast<size_t>(b.size * b.itemsize)};
}

// Address and size of anything that holds memory: (ptr, nbytes), a torch
// tensor (data_ptr, numel * element_size; CPU or CUDA), a GPU array with
// __cuda_array_interface__, or an object with the buffer protocol
// (bytes-like, numpy). Read-only buffers are
// accepted only where `writable` is false.
}  // namespace

std::pair<uintptr_t, size_t> uccl_py::memory_of(py::handle obj, bool writable,
                                                bool* gpu) {
  *gpu = false;
  // The buffer protocol first: the common case (numpy), and the cheapest
  // (the attribute probes below fail slowly on objects without them).
  if (PyObject_CheckBuffer(obj.ptr())) return buffer_memory(obj, writable);
  if (py::isinstance<py::tuple>(obj) && py::len(obj) == 2) {
    auto t = obj.cast<py::tuple>();
    return {t[0].cast<uintptr_t>(), t[1].cast<size_t>()};
  }
  if (py::hasattr(obj, "data_ptr") && py::hasattr(obj, "element_size")) {
    // A torch tensor, on the CPU or a GPU (an endpoint with local_gpu_idx
    // stages GPU memory; others refuse it at reg or the transfer).
    *gpu = py::hasattr(obj, "is_cuda") && obj.attr("is_cuda").cast<bool>();
    if (!obj.attr("is_contiguous")().cast<bool>()) {
      raise(uccl::InvalidArgument("tensor is not contiguous"));
    }
    return {obj.attr("data_ptr")().cast<uintptr_t>(),
            obj.attr("numel")().cast<size_t>() *
                obj.attr("element_size")().cast<size_t>()};
  }
  if (py::hasattr(obj, "__cuda_array_interface__")) {
    *gpu = true;
    return cuda_array(obj.attr("__cuda_array_interface__"));
  }
  raise(uccl::InvalidArgument("not a buffer, tensor or (ptr, nbytes)"));
}

namespace {

using uccl_py::memory_of;

void* ptr(uintptr_t a) { return reinterpret_cast<void*>(a); }

class PyEndpoint {
 public:
  PyEndpoint(int local_gpu_idx, int num_cpus, const std::string& device,
             size_t stripe_bytes) {
    p2p::Config c;
    c.local_gpu_idx = local_gpu_idx;
    c.num_cpus = num_cpus;
    c.stripe_bytes = stripe_bytes;
    c.engine.device = device;
    has_gpu_ = local_gpu_idx >= 0;
    Result<std::unique_ptr<p2p::Endpoint>> r = uccl::InvalidArgument("");
    {
      py::gil_scoped_release nogil;
      r = p2p::Endpoint::create(c);
    }
    ep_ = value(std::move(r));
  }

  uint16_t listen(uint16_t port) { return value(ep_->listen(port)); }
  uint64_t accept(int timeout_ms) {
    Result<uint64_t> r = uccl::InvalidArgument("");
    {
      py::gil_scoped_release nogil;
      r = ep_->accept(timeout_ms);
    }
    return value(std::move(r));
  }
  uint64_t connect(const std::string& ip, uint16_t port, int timeout_ms) {
    Result<uint64_t> r = uccl::InvalidArgument("");
    {
      py::gil_scoped_release nogil;
      r = ep_->connect(ip, port, timeout_ms);
    }
    return value(std::move(r));
  }
  py::bytes metadata() { return py::bytes(value(ep_->metadata())); }
  uint64_t connect_by_metadata(const std::string& md, int timeout_ms) {
    Result<uint64_t> r = uccl::InvalidArgument("");
    {
      py::gil_scoped_release nogil;
      r = ep_->connect_by_metadata(md, timeout_ms);
    }
    return value(std::move(r));
  }
  void close(uint64_t c) { check(ep_->close(c)); }

  // reg(obj) -> memory id; the object must stay alive while registered.
  uint64_t reg(py::handle obj) {
    auto [a, n] = mem(obj, false);
    return value(ep_->reg(ptr(a), n));
  }
  void dereg(uint64_t mr) { check(ep_->dereg(mr)); }
  // Advertised GPU memory on the software NIC: peers' writes into GPU
  // memory (flush), GPU memory's contents for peers to read (publish).
  void flush(uint64_t mr) {
    check_nogil([&] { return ep_->flush(mr); });
  }
  void publish(uint64_t mr) {
    check_nogil([&] { return ep_->publish(mr); });
  }
  py::bytes advertise(uint64_t mr, size_t offset, size_t len) {
    return py::bytes(value(ep_->advertise(mr, offset, len)).to_bytes());
  }

  uint64_t send_async(uint64_t c, uint64_t mr, py::handle obj) {
    auto [a, n] = mem(obj, false);
    return value(ep_->send_async(c, mr, ptr(a), n));
  }
  uint64_t recv_async(uint64_t c, uint64_t mr, py::handle obj) {
    auto [a, n] = mem(obj, true);
    return value(ep_->recv_async(c, mr, ptr(a), n));
  }
  uint64_t write_async(uint64_t c, uint64_t mr, py::handle obj,
                       const std::string& desc, uint64_t offset) {
    auto [a, n] = mem(obj, false);
    p2p::RegionDesc d = value(p2p::RegionDesc::from_bytes(desc));
    return value(ep_->write_async(c, mr, ptr(a), n, d, offset));
  }
  uint64_t read_async(uint64_t c, uint64_t mr, py::handle obj,
                      const std::string& desc, uint64_t offset) {
    auto [a, n] = mem(obj, true);
    p2p::RegionDesc d = value(p2p::RegionDesc::from_bytes(desc));
    return value(ep_->read_async(c, mr, ptr(a), n, d, offset));
  }
  // Vectored: slices as [(mr, buffer), ...]; remote ones as
  // [(desc, offset), ...].
  uint64_t sendv_async(uint64_t c, const py::list& slices) {
    return value(ep_->sendv_async(c, io_slices(slices, false)));
  }
  uint64_t recvv_async(uint64_t c, const py::list& slices) {
    return value(ep_->recvv_async(c, io_slices(slices, true)));
  }
  uint64_t writev_async(uint64_t c, const py::list& slices,
                        const py::list& remote) {
    return value(
        ep_->writev_async(c, io_slices(slices, false), remote_slices(remote)));
  }
  uint64_t readv_async(uint64_t c, const py::list& slices,
                       const py::list& remote) {
    return value(
        ep_->readv_async(c, io_slices(slices, true), remote_slices(remote)));
  }
  // (done, bytes)
  py::tuple poll(uint64_t h) {
    size_t n = 0;
    bool done = value(ep_->poll(h, &n));
    return py::make_tuple(done, n);
  }
  // Bytes moved; raises on error or timeout (the handle then stays valid).
  size_t wait(uint64_t h, int timeout_ms) {
    size_t n = 0;
    Status st;
    {
      py::gil_scoped_release nogil;
      st = ep_->wait(h, timeout_ms, &n);
    }
    check(st);
    return n;
  }
  void send_notif(uint64_t c, const std::string& data) {
    check(ep_->send_notif(c, data));
  }
  // [(conn, bytes), ...]
  py::list get_notifs() {
    py::list out;
    for (const p2p::Notif& n : ep_->get_notifs()) {
      out.append(py::make_tuple(n.conn, py::bytes(n.data)));
    }
    return out;
  }
  int num_engines() const { return ep_->num_engines(); }
  py::dict staging_stats() const {
    const p2p::Endpoint::StagingStats st = ep_->staging_stats();
    py::dict d;
    d["copies"] = st.copies;
    d["overlapped"] = st.overlapped;
    d["bytes"] = st.bytes;
    return d;
  }

 private:
  template <typename F>
  static void check_nogil(F f) {
    Status st;
    {
      py::gil_scoped_release nogil;
      st = f();
    }
    check(st);
  }
  // memory_of, refusing GPU memory on an endpoint without a GPU (the engines
  // would read it as host memory).
  std::pair<uintptr_t, size_t> mem(py::handle obj, bool writable) const {
    bool gpu = false;
    auto r = memory_of(obj, writable, &gpu);
    if (gpu && !has_gpu_) {
      raise(uccl::InvalidArgument(
          "GPU memory on an endpoint made without local_gpu_idx"));
    }
    return r;
  }
  std::vector<p2p::IoSlice> io_slices(const py::list& l, bool writable) {
    std::vector<p2p::IoSlice> v;
    v.reserve(py::len(l));
    for (py::handle item : l) {
      if (!py::isinstance<py::tuple>(item) || py::len(item) != 2) {
        raise(uccl::InvalidArgument("a slice is a (mr, buffer) tuple"));
      }
      auto t = item.cast<py::tuple>();
      auto [a, n] = mem(t[1], writable);
      v.push_back({t[0].cast<uint64_t>(), ptr(a), n});
    }
    return v;
  }
  std::vector<p2p::RemoteSlice> remote_slices(const py::list& l) {
    std::vector<p2p::RemoteSlice> v;
    v.reserve(py::len(l));
    for (py::handle item : l) {
      if (!py::isinstance<py::tuple>(item) || py::len(item) != 2) {
        raise(
            uccl::InvalidArgument("a remote slice is a (desc, offset) tuple"));
      }
      auto t = item.cast<py::tuple>();
      p2p::RegionDesc d =
          value(p2p::RegionDesc::from_bytes(t[0].cast<std::string>()));
      v.push_back({d, t[1].cast<uint64_t>()});
    }
    return v;
  }

  std::unique_ptr<p2p::Endpoint> ep_;
  bool has_gpu_ = false;
  friend p2p::Endpoint* uccl_py::endpoint_of(py::handle obj);
};

}  // namespace

p2p::Endpoint* uccl_py::endpoint_of(py::handle obj) {
  return obj.cast<PyEndpoint&>().ep_.get();
}

PYBIND11_MODULE(_p2p, m) {
  m.doc() = "UCCL point-to-point transfers (C++ engine: include/uccl/p2p.h)";
  uccl_py::g_error =
      PyErr_NewException("uccl.p2p.Error", PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::reinterpret_borrow<py::object>(uccl_py::g_error);
  m.attr("REGION_DESC_BYTES") = p2p::kRegionDescBytes;
  m.attr("MAX_NOTIF_BYTES") = p2p::kMaxNotifBytes;
  py::class_<PyEndpoint>(m, "Endpoint")
      .def(py::init<int, int, const std::string&, size_t>(),
           py::arg("local_gpu_idx") = -1, py::arg("num_cpus") = 4,
           py::arg("device") = "", py::arg("stripe_bytes") = 1 << 20)
      .def("listen", &PyEndpoint::listen, py::arg("port") = 0)
      .def("accept", &PyEndpoint::accept, py::arg("timeout_ms") = 30000)
      .def("connect", &PyEndpoint::connect, py::arg("ip"), py::arg("port"),
           py::arg("timeout_ms") = 30000)
      .def("get_metadata", &PyEndpoint::metadata)
      .def("connect_by_metadata", &PyEndpoint::connect_by_metadata,
           py::arg("metadata"), py::arg("timeout_ms") = 30000)
      .def("close", &PyEndpoint::close)
      .def("reg", &PyEndpoint::reg)
      .def("dereg", &PyEndpoint::dereg)
      .def("flush", &PyEndpoint::flush)
      .def("publish", &PyEndpoint::publish)
      .def("advertise", &PyEndpoint::advertise, py::arg("mr"),
           py::arg("offset") = 0, py::arg("len"))
      .def("send_async", &PyEndpoint::send_async)
      .def("recv_async", &PyEndpoint::recv_async)
      .def("write_async", &PyEndpoint::write_async, py::arg("conn"),
           py::arg("mr"), py::arg("src"), py::arg("desc"),
           py::arg("offset") = 0)
      .def("read_async", &PyEndpoint::read_async, py::arg("conn"),
           py::arg("mr"), py::arg("dst"), py::arg("desc"),
           py::arg("offset") = 0)
      .def("sendv_async", &PyEndpoint::sendv_async)
      .def("recvv_async", &PyEndpoint::recvv_async)
      .def("writev_async", &PyEndpoint::writev_async)
      .def("readv_async", &PyEndpoint::readv_async)
      .def("poll", &PyEndpoint::poll)
      .def("wait", &PyEndpoint::wait, py::arg("handle"),
           py::arg("timeout_ms") = 30000)
      .def("send_notif", &PyEndpoint::send_notif)
      .def("get_notifs", &PyEndpoint::get_notifs)
      .def("staging_stats", &PyEndpoint::staging_stats)
      .def_property_readonly("num_engines", &PyEndpoint::num_engines);
  uccl_py::bind_channels(m);
}
