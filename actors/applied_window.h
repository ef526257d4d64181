// AppliedWindow: the update origins a variable shard applied lately
// (kernels/update_origin.h), so that an update a cluster session sends
// again, in a step it runs again after a failure, changes nothing.
//
// It remembers every origin for kKeepMs after it was applied, and at most
// kMaxOrigins at once (the oldest go first): a session runs a failed step
// again within ClusterOptions' retry budget (30 s at most), well inside
// kKeepMs, and a shard taking more than kMaxOrigins / 120 s (about 2,000)
// updates a second forgets the oldest sooner. Time is passed in.
//
// Thread-safety: none; its shard's lock (or actor) serializes it.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_set>
#include <vector>

#include "kernels/update_origin.h"

namespace sf {
namespace runtime {

class AppliedWindow {
 public:
  static constexpr int64_t kKeepMs = 120000;
  static constexpr size_t kMaxOrigins = size_t{1} << 18;

  // Whether origin was recorded (and not forgotten yet); false for none.
  bool Seen(const UpdateOrigin& origin) const;
  // Records origin as applied at now_ms and forgets what is too old; none is ignored.
  void Record(const UpdateOrigin& origin, int64_t now_ms);
  size_t size() const { return set_.size(); }
  // Every origin remembered, oldest first; from now on Record also keeps
  // each new origin for TakeRecent (a shard that has a backup).
  std::vector<UpdateOrigin> All();
  // The origins recorded since the last All or TakeRecent (at most
  // kMaxOrigins: a shard's backup is sent them after every step).
  std::vector<UpdateOrigin> TakeRecent();

 private:
  struct Hash {
    size_t operator()(const UpdateOrigin& o) const { return static_cast<size_t>(o.step * 0x9E3779B97F4A7C15ull ^ o.op); }
  };
  struct Entry {
    UpdateOrigin origin;
    int64_t ms;
  };
  std::unordered_set<UpdateOrigin, Hash> set_;
  std::deque<Entry> order_;  // oldest first
  bool track_recent_ = false;
  std::vector<UpdateOrigin> recent_;
};

}  // namespace runtime
}  // namespace sf
