#include "shardflow/status.h"

namespace sf {

const char* CodeName(Code c) {
  switch (c) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kNotFound: return "NotFound";
    case Code::kFailedPrecondition: return "FailedPrecondition";
    case Code::kOutOfRange: return "OutOfRange";
    case Code::kUnimplemented: return "Unimplemented";
    case Code::kInternal: return "Internal";
    case Code::kAborted: return "Aborted";
    case Code::kDataLoss: return "DataLoss";
    case Code::kUnavailable: return "Unavailable";
    case Code::kPermissionDenied: return "PermissionDenied";
    case Code::kDeadlineExceeded: return "DeadlineExceeded";
    case Code::kResourceExhausted: return "ResourceExhausted";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + msg_;
}

Status Status::WithPrefix(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code_, prefix + ": " + msg_);
}

}  // namespace sf
