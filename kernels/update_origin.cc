#include "kernels/update_origin.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "shardflow/kernel.h"

namespace sf {

uint64_t OriginOpKey(const std::string& node_name) {
  return XXH3_64bits(node_name.data(), node_name.size());
}

UpdateOrigin OriginOf(const OpKernelContext& ctx, uint64_t op_key) {
  if (!ctx.update_origins()) return {};
  UpdateOrigin o;
  // 0 means "none": step 0 (an id below kMaxStepAttempts) becomes 1 << 63.
  o.step = StepOfId(ctx.step_id());
  if (o.step == 0) o.step = uint64_t{1} << 63;
  const std::string& frame = ctx.frame_key();
  const int64_t iteration = ctx.iteration();
  if (frame.empty() && iteration == 0) {
    o.op = op_key;
    return o;
  }
  // A loop body's update runs once per iteration: each is its own update.
  XXH64_hash_t h = XXH3_64bits_withSeed(frame.data(), frame.size(), op_key);
  o.op = XXH3_64bits_withSeed(&iteration, sizeof iteration, h);
  return o;
}

}  // namespace sf
