// ClusterCollectives: ring all-reduce among ranks that run on different
// node processes (actor-private header: include only from actors/*.cc).
//
// Each node hosts one. Its hub actor owns every group's routing state: where
// each rank runs (a node address), the rank actors of the ranks that run
// here (actors/collectives.h: the same ring algorithm as in one process),
// and chunks waiting for a rank whose node is not known yet. A rank actor
// hands each outgoing piece of a chunk (collectives.h: pipelining) to the
// hub, which passes it to the successor rank's actor when that rank runs
// here, or sends it as one net::CollectiveChunk (its offset says which
// piece) straight to the successor's node (never through a client). So
// each rank sends 2 (n - 1) / n of the tensor, node to node.
//
// Where ranks run: the first time a rank contributes on a node, the node
// announces "group G rank r is here" (a CollectiveAnnounce) to
// every member it knows; chunks for a rank not announced yet wait in the hub.
// A node that hears a rank announced from a new address answers with its own
// ranks of that group, so a restarted node learns the others.
//
// Generations: a rank's k-th contribution joins the group's k-th reduction
// (between-graph replicas use different sessions and step ids, so chunks
// are keyed by group and generation, never by step).
//
// Failures: when a node that runs a rank of a group goes down (the
// connection's down notification, or a failed send to it), every unfinished
// reduction of the group on this node fails with Unavailable naming that
// node and rank, and so does every later contribution until that rank is
// announced again from a live node. The group then starts over at
// generation 0 in a new epoch: chunks carry the epoch, older ones are
// dropped, and a node that receives a newer one fails its reductions in
// flight and adopts it (so no chunk sent before a failure joins a reduction
// after it). Ranks whose node never announced them are not watched: a
// reduction waiting for such a rank waits for it.
//
// Thread-safety: all methods may be called from any thread (they post to
// the hub actor).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "net/messages.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {
namespace runtime {

struct ClusterCollectivesHooks {
  // Send a chunk, or an announcement, to the node at address; Unavailable
  // naming it when unreachable.
  std::function<Status(const std::string& address, net::CollectiveChunk c)> send_chunk;
  std::function<Status(const std::string& address, net::CollectiveAnnounce a)> announce;
  // The listen addresses of every member this node knows, itself included.
  std::function<std::vector<std::string>()> members;
  // Logs one line (may be empty).
  std::function<void(const std::string&)> log;
};

class ClusterCollectives {
 public:
  ClusterCollectives(caf::actor_system& sys, ClusterCollectivesHooks hooks);
  ~ClusterCollectives();
  ClusterCollectives(const ClusterCollectives&) = delete;
  ClusterCollectives& operator=(const ClusterCollectives&) = delete;

  // Sets this node's listen address (before the first AllReduce).
  void SetAddress(const std::string& address);
  // Contributes rank's value to its group's next reduction; done gets the
  // sum, or the group's error (CollectiveService::AllReduce). REQUIRES:
  // 0 <= rank < group_size <= 4096 (the caller checked).
  void AllReduce(const std::string& group_key, int64_t group_size, int64_t rank, Tensor value,
                 std::function<void(Result<Tensor>)> done);
  // A CollectiveChunk that arrived on connection `from`.
  void OnChunk(const void* from, net::CollectiveChunk chunk);
  // A CollectiveAnnounce that arrived on connection `from`.
  void OnAnnounce(const void* from, net::CollectiveAnnounce announce);
  // Connection `from` went down: fails the groups with a rank at its node
  // (`address`, or the address its chunks came from when empty).
  void OnPeerDown(const void* from, const std::string& address, const Status& why);
  // Fails every unfinished and later reduction with why (the node is stopping).
  void FailAll(const Status& why);
  // Stops the actors (before the actor system goes).
  void Stop();

 private:
  caf::actor hub_;
};

}  // namespace runtime
}  // namespace sf
