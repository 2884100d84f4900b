// Tests for Status/Result: codes, messages, copies, errno mapping and the
// RETURN/ASSIGN macros that every layer relies on.
#include "uccl/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace uccl {
namespace {

TEST(StatusTest, OkHasNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.to_string(), "OK");
}

TEST(StatusTest, ErrorCarriesCodeAndMessage) {
  Status s = Truncated("message of 10 bytes > receive of 4");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kTruncated);
  EXPECT_EQ(s.to_string(), "TRUNCATED: message of 10 bytes > receive of 4");
}

TEST(StatusTest, OkCodeWithMessageIsStillOk) {
  Status s(StatusCode::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

TEST(StatusTest, CopyAndMoveKeepContent) {
  Status a = NotFound("device udp:nope");
  Status b = a;
  EXPECT_EQ(a, b);
  Status c = std::move(b);
  EXPECT_EQ(c.code(), StatusCode::kNotFound);
  EXPECT_EQ(c.message(), "device udp:nope");
  c = Status::OK();
  EXPECT_TRUE(c.ok());
  EXPECT_NE(a, c);
}

TEST(StatusTest, WithContextPrefixesMessage) {
  Status s = TimedOut("no ACK").with_context("flow 3");
  EXPECT_EQ(s.code(), StatusCode::kTimedOut);
  EXPECT_EQ(s.message(), "flow 3: no ACK");
  EXPECT_TRUE(Status::OK().with_context("x").ok());
}

TEST(StatusTest, ErrnoMapping) {
  EXPECT_EQ(ErrnoStatus("recv", EAGAIN).code(), StatusCode::kUnavailable);
  EXPECT_EQ(ErrnoStatus("connect", ECONNREFUSED).code(),
            StatusCode::kConnectionFailed);
  EXPECT_EQ(ErrnoStatus("bind", EADDRINUSE).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoStatus("open", ENOENT).code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus("x", EPERM).code(), StatusCode::kPermissionDenied);
  Status s = ErrnoStatus("connect 10.0.0.1:5", ECONNREFUSED);
  EXPECT_NE(s.message().find("connect 10.0.0.1:5"), std::string::npos);
  EXPECT_NE(s.message().find("refused"), std::string::npos);
}

TEST(StatusTest, CodeNamesAreDistinct) {
  EXPECT_STREQ(status_code_name(StatusCode::kInvalidArgument),
               "INVALID_ARGUMENT");
  EXPECT_STREQ(status_code_name(StatusCode::kRemoteError), "REMOTE_ERROR");
}

Result<int> half(int x) {
  if (x % 2) return InvalidArgument("odd");
  return x / 2;
}

Result<int> quarter(int x) {
  UCCL_ASSIGN_OR_RETURN(int h, half(x));
  UCCL_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status check_even(int x) {
  UCCL_RETURN_IF_ERROR(half(x).status());
  return Status::OK();
}

TEST(ResultTest, ValueAndError) {
  Result<int> r = half(8);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, 4);
  Result<int> e = half(3);
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e.value_or(-1), -1);
}

TEST(ResultTest, MacrosPropagate) {
  EXPECT_EQ(*quarter(8), 2);
  EXPECT_EQ(quarter(6).status().message(), "odd");
  EXPECT_TRUE(check_even(2).ok());
  EXPECT_FALSE(check_even(1).ok());
}

TEST(ResultTest, OkStatusIsRefusedAsError) {
  Result<int> r{Status::OK()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r(std::make_unique<int>(7));
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 7);
}

}  // namespace
}  // namespace uccl
