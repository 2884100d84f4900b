// Status implementation: code names, string forms and the errno mapping used
// by every layer that talks to the kernel.
#include "uccl/status.h"

#include <cerrno>
#include <cstring>

namespace uccl {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kOutOfRange:
      return "OUT_OF_RANGE";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kTimedOut:
      return "TIMED_OUT";
    case StatusCode::kTruncated:
      return "TRUNCATED";
    case StatusCode::kConnectionFailed:
      return "CONNECTION_FAILED";
    case StatusCode::kRemoteError:
      return "REMOTE_ERROR";
    case StatusCode::kProtocolError:
      return "PROTOCOL_ERROR";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kNotSupported:
      return "NOT_SUPPORTED";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) {
    state_ = std::make_unique<State>(State{code, std::move(message)});
  }
}

Status::Status(const Status& other)
    : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) {
    state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
  }
  return *this;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string s = status_code_name(state_->code);
  if (!state_->message.empty()) s += ": " + state_->message;
  return s;
}

Status Status::with_context(const std::string& context) const {
  if (ok()) return *this;
  return Status(state_->code, context + ": " + state_->message);
}

std::ostream& operator<<(std::ostream& os, const Status& s) {
  return os << s.to_string();
}

Status ErrnoStatus(const std::string& what, int err) {
  StatusCode code;
  switch (err) {
    case EAGAIN:
    case EINPROGRESS:
    case EALREADY:
    case EINTR:
      code = StatusCode::kUnavailable;
      break;
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EPIPE:
    case ENOTCONN:
      code = StatusCode::kConnectionFailed;
      break;
    case ETIMEDOUT:
      code = StatusCode::kTimedOut;
      break;
    case EINVAL:
    case EBADF:
    case EFAULT:
    case EMSGSIZE:
      code = StatusCode::kInvalidArgument;
      break;
    case ENOENT:
    case ENODEV:
    case EADDRNOTAVAIL:
      code = StatusCode::kNotFound;
      break;
    case EADDRINUSE:
    case EEXIST:
      code = StatusCode::kAlreadyExists;
      break;
    case ENOMEM:
    case ENOBUFS:
    case EMFILE:
    case ENFILE:
    case ENOSPC:
      code = StatusCode::kResourceExhausted;
      break;
    case EPERM:
    case EACCES:
      code = StatusCode::kPermissionDenied;
      break;
    case EOPNOTSUPP:
    case ENOSYS:
      code = StatusCode::kNotSupported;
      break;
    default:
      code = StatusCode::kInternal;
      break;
  }
  char buf[128];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return Status(code,
                what + ": " + msg + " (errno " + std::to_string(err) + ")");
}

}  // namespace uccl
