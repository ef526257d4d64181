// Collectives: ring all-reduce over actors (actor-private header: include
// only from actors/*.cc).
//
// A group of size n is n rank actors in a ring, rank i sending to rank
// (i + 1) mod n. A reduction splits the tensor into n chunks and takes
// 2 (n - 1) steps: reduce-scatter (at step s rank i sends chunk (i - s) mod n,
// the receiver adds it to its own), after which rank i holds the full sum of
// chunk (i + 1) mod n; then all-gather (the reduced chunks travel round the
// ring once more, overwriting). Each rank sends 2 (n - 1) / n of the tensor,
// whatever n is. A contribution or chunk that arrives early waits in its
// rank's state: nothing blocks a thread.
//
// Pipelining: each chunk travels as pieces of at most piece_bytes. Piece k
// of a chunk at step s + 1 depends only on piece k at step s, so a rank
// adds and forwards every piece the moment it arrives, in any order, and
// sending, receiving and adding overlap along the ring instead of each step
// waiting for a whole chunk. Copies are avoided where the data allows:
// step 0 sends views of the contribution (which is only read, never
// copied), a reduce-scatter piece is summed into the received buffer and
// forwarded as it is, an all-gather piece is copied into place and
// forwarded as it is. The result is a fresh tensor no message refers to.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {
namespace runtime {

struct CollectiveMsg;
using CollectiveMsgPtr = std::shared_ptr<CollectiveMsg>;
// A closure run by the collective spawner actor (see SpawnCollectiveSpawner).
struct CollectiveTask {
  std::function<void()> run;
};
using CollectiveTaskPtr = std::shared_ptr<CollectiveTask>;

}  // namespace runtime
}  // namespace sf

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::CollectiveMsgPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::CollectiveTaskPtr)

namespace sf {
namespace runtime {

using CollectiveRankActor = caf::typed_actor<caf::reacts_to<CollectiveMsgPtr>>;

// One message to a rank actor.
struct CollectiveMsg {
  enum Kind { kInit, kContribute, kChunk, kFailAll } kind = kChunk;
  CollectiveRankActor next;  // kInit: the rank this one sends to
  // kInit, instead of next: hands each outgoing chunk to a router (the ring
  // between node processes, cluster/cluster_collectives.h).
  std::function<void(CollectiveMsgPtr)> forward;
  int64_t instance = 0;      // kChunk: which reduction (the k-th call of every rank)
  int64_t step = 0;          // kChunk: 0 .. 2 (n - 1) - 1
  int64_t offset = 0;        // kChunk: where value starts in the tensor (elements)
  int64_t total = 0;         // kChunk: the sender's element count (shapes must agree)
  DType dtype = DType::kInvalid;  // kChunk
  Tensor value;              // kContribute: the whole tensor; kChunk: one chunk
  Status error;              // kChunk: a failed reduction, passed round the ring; kFailAll: why
  std::function<void(Result<Tensor>)> done;  // kContribute
  bool retire = false;       // kFailAll: the actor then quits (nobody sends it more)
};

using CollectiveSpawner = caf::typed_actor<caf::reacts_to<CollectiveTaskPtr>>;

// An actor that runs closures on a CAF thread. Groups are spawned there, not
// on the compute-pool thread whose kernel first asks for them: CAF keeps a
// reference to its logger in every thread that spawns, and a compute thread
// outlives the actor system, whose destructor waits for that reference.
CollectiveSpawner SpawnCollectiveSpawner(caf::actor_system& sys);

// Ring chunks travel in pieces of at most this many bytes (every rank of a
// group must use the same size: a piece is recognised by its offset). 1 MiB
// keeps the per-message cost small against the bytes and still gives a
// 64 MiB reduction dozens of pieces in flight.
constexpr int64_t kDefaultPieceBytes = int64_t{1} << 20;

// One rank actor of group `key` (rank of group_size); it learns where to
// send from a kInit message, and kFailAll ends its unfinished reductions
// (and every later one) with the message's error. REQUIRES: piece_bytes > 0.
CollectiveRankActor SpawnCollectiveRank(caf::actor_system& sys, const std::string& key, int64_t rank,
                                        int64_t group_size, int64_t piece_bytes = kDefaultPieceBytes);

// A ring of group_size rank actors for group `key`.
class CollectiveGroup {
 public:
  CollectiveGroup(caf::actor_system& sys, std::string key, int64_t group_size,
                  int64_t piece_bytes = kDefaultPieceBytes);
  ~CollectiveGroup();
  int64_t size() const { return static_cast<int64_t>(ranks_.size()); }
  // Contributes rank's value to its next reduction (REQUIRES: 0 <= rank < size()).
  // value is read, never written or copied whole, until done runs; the
  // reference held meanwhile keeps anyone else from writing it in place.
  void Contribute(int64_t rank, Tensor value, std::function<void(Result<Tensor>)> done);

 private:
  std::vector<CollectiveRankActor> ranks_;
};

}  // namespace runtime
}  // namespace sf
