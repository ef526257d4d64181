// RendezvousService: how _Send/_Recv kernels hand tensors across partitions
// of one step (in-process: runtime/rendezvous.h). Kernels only see this
// interface, so kernels/ knows nothing of actors.
//
// A transfer is keyed by (step id, static edge key, frame key, iteration):
// the static key comes from partitioning, the frame key and iteration from
// the executor running the op, so loop iterations never mix.
// Send never blocks; RecvAsync calls back when the value arrives (or at once
// when it is already there). No thread ever waits.
// Thread-safety: implementations are safe to call from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

struct RendezvousKey {
  int64_t step_id = 0;
  std::string edge;   // "src:out->dst_device" or "^src->dst_device"
  std::string frame;  // "" for the root frame
  int64_t iteration = 0;
};

class RendezvousService {
 public:
  virtual ~RendezvousService() = default;
  // Stores (value, is_dead) under key; the step's abort status when the
  // step was aborted, InvalidArgument when the key was already sent.
  virtual Status Send(const RendezvousKey& key, Tensor value, bool is_dead) = 0;
  // Calls done(status, value, is_dead) once the key was sent; with the
  // step's abort status when the step is (or gets) aborted first.
  virtual void RecvAsync(const RendezvousKey& key,
                         std::function<void(Status, Tensor, bool)> done) = 0;
  // Fails the step's pending and later receives with `status` (the first
  // abort wins), so a failing partition never leaves another one waiting.
  virtual void Abort(int64_t step_id, const Status& status) = 0;
  // Calls done once every value step step_id sent has left, with the first
  // failure to deliver one (a host reports a step's result only then); at
  // once and OK where Send delivers before it returns.
  virtual void Flush(int64_t step_id, std::function<void(Status)> done) {
    (void)step_id;
    done(Status::OK());
  }
};

}  // namespace sf
