// What the Python module's files share: Status as uccl.p2p.Error, memory
// from Python objects, the p2p endpoint behind an Endpoint object.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <utility>

#include "uccl/p2p.h"
#include "uccl/status.h"

namespace uccl_py {

namespace py = pybind11;

extern PyObject* g_error;  // uccl.p2p.Error

// Raises uccl.p2p.Error with the Status text (its .code the code's name).
[[noreturn]] void raise(const uccl::Status& st);
inline void check(const uccl::Status& st) {
  if (!st.ok()) raise(st);
}
template <typename T>
T value(uccl::Result<T> r) {
  if (!r.ok()) raise(r.status());
  return std::move(*r);
}

// Address and size of (ptr, nbytes), a torch tensor, a GPU array or a
// buffer; *gpu tells GPU memory. Raises for anything else.
std::pair<uintptr_t, size_t> memory_of(py::handle obj, bool writable,
                                       bool* gpu);

// The p2p endpoint of a uccl.p2p.Endpoint.
uccl::p2p::Endpoint* endpoint_of(py::handle obj);

// uccl.p2p.ChannelProxy (p2p/python/channels_binding.cc).
void bind_channels(py::module_& m);

}  // namespace uccl_py
