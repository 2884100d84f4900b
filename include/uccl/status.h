// Status and Result<T>: how every UCCL API reports errors (a code plus a
// human-readable message), never by aborting. OK carries no allocation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

namespace uccl {

// Error classes. Callers branch on the code; the message is for humans.
enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,    // the caller passed something malformed
  kNotFound,           // a named thing (device, knob, region) does not exist
  kAlreadyExists,      // creating something that is already there
  kOutOfRange,         // an address/length outside a registered region
  kResourceExhausted,  // queue full, too many requests/flows, out of memory
  kUnavailable,        // retry later (would block, not yet connected)
  kTimedOut,           // a deadline passed
  kTruncated,          // message larger than the posted receive
  kConnectionFailed,   // bootstrap/connect/accept failed
  kRemoteError,        // the peer reported a failure or went away
  kProtocolError,      // bytes on the wire were not what the protocol allows
  kPermissionDenied,   // access rights (rkey/access flags) forbid the op
  kNotSupported,       // valid request this backend/build cannot do
  kCancelled,          // the operation was abandoned (close, flow failure)
  kInternal,           // a bug in UCCL: please report
};

// Short name of a code ("INVALID_ARGUMENT", ...).
const char* status_code_name(StatusCode code);

class Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);
  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status OK() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  // Empty for OK.
  const std::string& message() const;
  // "OK" or "CODE: message".
  std::string to_string() const;

  // Returns a copy whose message is "context: <original message>".
  Status with_context(const std::string& context) const;

  bool operator==(const Status& o) const {
    return code() == o.code() && message() == o.message();
  }
  bool operator!=(const Status& o) const { return !(*this == o); }

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::unique_ptr<State> state_;  // null == OK, so OK never allocates.
};

std::ostream& operator<<(std::ostream& os, const Status& s);

// Convenience constructors.
inline Status InvalidArgument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status NotFound(std::string m) {
  return Status(StatusCode::kNotFound, std::move(m));
}
inline Status AlreadyExists(std::string m) {
  return Status(StatusCode::kAlreadyExists, std::move(m));
}
inline Status OutOfRange(std::string m) {
  return Status(StatusCode::kOutOfRange, std::move(m));
}
inline Status ResourceExhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status Unavailable(std::string m) {
  return Status(StatusCode::kUnavailable, std::move(m));
}
inline Status TimedOut(std::string m) {
  return Status(StatusCode::kTimedOut, std::move(m));
}
inline Status Truncated(std::string m) {
  return Status(StatusCode::kTruncated, std::move(m));
}
inline Status ConnectionFailed(std::string m) {
  return Status(StatusCode::kConnectionFailed, std::move(m));
}
inline Status RemoteError(std::string m) {
  return Status(StatusCode::kRemoteError, std::move(m));
}
inline Status ProtocolError(std::string m) {
  return Status(StatusCode::kProtocolError, std::move(m));
}
inline Status PermissionDenied(std::string m) {
  return Status(StatusCode::kPermissionDenied, std::move(m));
}
inline Status NotSupported(std::string m) {
  return Status(StatusCode::kNotSupported, std::move(m));
}
inline Status Cancelled(std::string m) {
  return Status(StatusCode::kCancelled, std::move(m));
}
inline Status Internal(std::string m) {
  return Status(StatusCode::kInternal, std::move(m));
}

// Status from an errno value: "<what>: <strerror(err)>", mapped to the
// closest code (EAGAIN -> kUnavailable, ECONNREFUSED -> kConnectionFailed,
// ...).
Status ErrnoStatus(const std::string& what, int err);

// A value or the Status explaining why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) {
      status_ = Status(StatusCode::kInternal, "Result built from OK status");
    }
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

  // The value, or `fallback` when this holds an error.
  T value_or(T fallback) const& { return ok() ? *value_ : std::move(fallback); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace uccl

#define UCCL_STATUS_CONCAT_INNER(a, b) a##b
#define UCCL_STATUS_CONCAT(a, b) UCCL_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define UCCL_RETURN_IF_ERROR(expr)       \
  do {                                   \
    ::uccl::Status _uccl_st = (expr);    \
    if (!_uccl_st.ok()) return _uccl_st; \
  } while (0)

// `lhs = value of expr` or return its Status. `lhs` may declare a variable.
#define UCCL_ASSIGN_OR_RETURN(lhs, expr)                                    \
  UCCL_ASSIGN_OR_RETURN_IMPL(UCCL_STATUS_CONCAT(_uccl_res_, __LINE__), lhs, \
                             expr)
#define UCCL_ASSIGN_OR_RETURN_IMPL(res, lhs, expr) \
  auto res = (expr);                               \
  if (!res.ok()) return res.status();              \
  lhs = std::move(res).value()
