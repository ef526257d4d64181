// JoinStatuses: one callback for n parts that reports once, with the first
// error, when the last part ends.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>

#include "shardflow/status.h"

namespace sf {
namespace runtime {

// A callback to call n times with each part's status: the n-th call passes
// the first error (or OK) to done.
inline std::function<void(const Status&)> JoinStatuses(size_t n, std::function<void(Status)> done) {
  struct Join {
    std::mutex mu;
    size_t remaining;
    Status first;
    std::function<void(Status)> done;
  };
  auto join = std::make_shared<Join>();
  join->remaining = n;
  join->done = std::move(done);
  return [join](const Status& s) {
    bool last;
    {
      std::lock_guard<std::mutex> l(join->mu);
      if (!s.ok() && join->first.ok()) join->first = s;
      last = --join->remaining == 0;
    }
    if (last) join->done(join->first);
  };
}

}  // namespace runtime
}  // namespace sf
