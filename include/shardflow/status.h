// Status and Result<T>: how every shardflow function reports failure.
//
// Errors are values (LevelDB style): a function that can fail returns a Status
// or a Result<T>; no exception crosses a module or actor boundary. A message
// names what failed (op, node, shape, file) in words a user can act on.
// Thread-safety: values; safe to copy between threads.
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace sf {

enum class Code : int {
  kOk = 0,
  kInvalidArgument = 1,  // the caller's input is wrong (feed, attr, shape, file)
  kNotFound = 2,         // a named thing does not exist
  kFailedPrecondition = 3,
  kOutOfRange = 4,
  kUnimplemented = 5,
  kInternal = 6,  // our own bug
  kAborted = 7,   // a step was aborted because another part failed
  kDataLoss = 8,  // corrupt or truncated data
  kUnavailable = 9,
  kPermissionDenied = 10,  // a peer refused by TLS, or a role that may not do this
  kDeadlineExceeded = 11,  // a remote request timed out
  kResourceExhausted = 12,  // a tensor past the allocation limit, memory gone
};

const char* CodeName(Code c);

class Status {
 public:
  Status() = default;
  Status(Code code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  static Status OK() { return Status(); }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }
  // "InvalidArgument: <message>", or "OK".
  std::string ToString() const;
  // Returns a copy whose message is "<prefix>: <message>" (OK stays OK).
  Status WithPrefix(const std::string& prefix) const;

 private:
  Code code_ = Code::kOk;
  std::string msg_;
};

inline Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
inline Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
inline Status FailedPrecondition(std::string m) { return Status(Code::kFailedPrecondition, std::move(m)); }
inline Status OutOfRange(std::string m) { return Status(Code::kOutOfRange, std::move(m)); }
inline Status Unimplemented(std::string m) { return Status(Code::kUnimplemented, std::move(m)); }
inline Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
inline Status Aborted(std::string m) { return Status(Code::kAborted, std::move(m)); }
inline Status DataLoss(std::string m) { return Status(Code::kDataLoss, std::move(m)); }
inline Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
inline Status PermissionDenied(std::string m) { return Status(Code::kPermissionDenied, std::move(m)); }
inline Status DeadlineExceeded(std::string m) { return Status(Code::kDeadlineExceeded, std::move(m)); }
inline Status ResourceExhausted(std::string m) { return Status(Code::kResourceExhausted, std::move(m)); }

// A value or the Status explaining why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status s) : status_(std::move(s)) {}    // NOLINT: implicit by design
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // REQUIRES: ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace sf

#define SF_RETURN_IF_ERROR(expr)      \
  do {                                \
    ::sf::Status _sf_s = (expr);      \
    if (!_sf_s.ok()) return _sf_s;    \
  } while (0)

#define SF_CONCAT_INNER(a, b) a##b
#define SF_CONCAT(a, b) SF_CONCAT_INNER(a, b)
#define SF_ASSIGN_OR_RETURN(lhs, expr) SF_ASSIGN_OR_RETURN_IMPL(SF_CONCAT(_sf_r_, __LINE__), lhs, expr)
#define SF_ASSIGN_OR_RETURN_IMPL(r, lhs, expr) \
  auto r = (expr);                             \
  if (!r.ok()) return r.status();              \
  lhs = std::move(r).value()
