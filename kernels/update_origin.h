// UpdateOrigin: which step, and which op in it, made an update of a
// variable or table shard, so that a shard applies each update once. A
// cluster session runs a step that failed on a moved or failed-over shard
// again (cluster/cluster_session.cc); the parts of the step that had already
// updated their shards must not update them a second time, and the parts
// that had not must update them now.
//
// A cluster session numbers the attempts of one step in the low
// kStepAttemptBits bits of its step id (every attempt needs a step id of
// its own: nodes refuse tensors of a step that ended); the bits above name
// the step. Kernels on a cluster node (KernelServices::update_origins) put
// the step and their node, frame and iteration into each update; local
// sessions, which never run a step again, leave the origin empty.
#pragma once

#include <cstdint>
#include <string>

namespace sf {

class OpKernelContext;

struct UpdateOrigin {
  uint64_t step = 0;  // 0: none (applied every time it comes)
  uint64_t op = 0;    // the op, its frame and iteration within the step
  bool none() const { return step == 0; }
  bool operator==(const UpdateOrigin& o) const { return step == o.step && op == o.op; }
};

inline constexpr int kStepAttemptBits = 4;
inline constexpr int64_t kMaxStepAttempts = int64_t{1} << kStepAttemptBits;

// The attempt-free part of a step id.
inline uint64_t StepOfId(int64_t step_id) { return static_cast<uint64_t>(step_id) >> kStepAttemptBits; }

// A node's name hashed once, when its kernel is built.
uint64_t OriginOpKey(const std::string& node_name);

// The origin of an update the kernel of op_key makes in ctx's step, frame
// and iteration; none when ctx's services do not track origins.
UpdateOrigin OriginOf(const OpKernelContext& ctx, uint64_t op_key);

// What a shard remembers of the updates it applied (its applied window,
// actors/applied_window.h), as the synchronous aggregation beside it
// (kernels/replica_state.h) sees it: a contribution to a step that was
// applied is answered, not counted again.
class AppliedOrigins {
 public:
  virtual ~AppliedOrigins() = default;
  // Whether origin was applied lately; false for none.
  virtual bool Seen(const UpdateOrigin& origin) const = 0;
  // Records origin as applied now (none is ignored).
  virtual void Record(const UpdateOrigin& origin) = 0;
};

}  // namespace sf
