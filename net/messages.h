// The messages nodes and cluster sessions exchange, as plain C++ values.
//
// Each has one Cap'n Proto wire form in proto/messages.capnp; net/wire.h
// encodes and decodes them (with size limits and a version check), so no
// code outside net/ touches Cap'n Proto builders. In one process nothing is
// encoded: these structs (tensors by reference) are what actors pass.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kernels/step_trace.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {
namespace net {

// The version of the message set; a peer with another one is refused.
// 3: CollectiveChunk.offset (ring chunks travel in pieces).
// 4: one Cap'n Proto interface per service (proto/peer.capnp), handed out by role.
// 5: Variables split into ReadVariables (-> VariableValues) and AssignVariables.
// 6: the gossip membership's methods gone; the leader's orders are Placement;
//    CollectiveAnnounce split from CollectiveChunk (Collectives.announce).
constexpr uint32_t kWireVersion = 6;

// Sent on an idle connection so a hung peer is noticed (net/peer_rpc.h).
struct Heartbeat {};

// The answer to a request that returns only a status.
struct StatusReply {
  Status status;
};

// Each request names the reply it is answered with (Req::Reply), which
// net::Call returns; these are defined below.
struct Membership;
struct RunPartitionDone;
struct VariableValues;
struct ShardsDone;
struct Namespaces;

// A member of the cluster: its name and the address it listens on.
struct Member {
  std::string name;
  std::string address;     // "host:port"
  // Which life of the node at `address` this is: its registration's in
  // etcd (a node that registers again after its lease ended has a new one).
  uint64_t incarnation = 0;
};
// Asks a node for the members it knows (itself first); answered with Membership.
struct ListMembers {
  using Reply = Membership;
};
// A node's view of the membership, which is etcd's: the answer to
// ListMembers, and sent one-way to the watchers (sessions) that asked when
// it changes. Never a request: no peer changes the membership by a message.
// leaving lists members that are draining (they take no new work and leave
// once no session uses them).
struct Membership {
  std::vector<Member> members;
  std::vector<Member> leaving;
  // The shard map (cluster/shard_map.h) when the cluster has one (map_slots > 0).
  int64_t map_epoch = 0;
  std::vector<std::string> map_holder;  // by slot
  std::vector<std::string> map_from;    // by slot: "" unless moving
  std::vector<int64_t> map_lost_after;  // by slot: 0, or the epoch after which its state was lost
  int32_t map_slots = 0;
};

// The placement leader to a slot's old holder: stop serving the slot's
// partitions registered before epoch, wait for those running, and copy the
// slot's variables to the node at `to`; answered with StatusReply.
struct MoveSlot {
  using Reply = StatusReply;
  int32_t slot = 0;
  std::string to;
  int64_t epoch = 0;
};
// The placement leader asking a slot's holder to copy the slot's whole
// state to the slot's new backup (cluster/slot_replicas.h), which it sends
// every change from then on: a StatusReply once the backup holds it.
struct SyncSlot {
  using Reply = StatusReply;
  int32_t slot = 0;
  std::string backup;
  int64_t epoch = 0;  // the map's, which names backup
};
// A slot's holder sending its backup what changed in the slot's variables
// since its last ReplicateSlot (each whole when `full`): a StatusReply once
// the backup applied it. The backup refuses it unless its map names the
// sender the slot's holder and itself the backup.
struct ReplicateSlot {
  using Reply = StatusReply;
  int32_t slot = 0;
  int64_t epoch = 0;         // the sender's map epoch
  std::string holder;        // the sender's listen address
  bool full = false;         // every variable of the slot, whole (a new backup)
  std::vector<std::string> names;
  std::vector<Tensor> values;   // the whole value, or its rows listed in rows[i]
  std::vector<Tensor> rows;     // int64 scalar: whole; int64 [k]: leading-dimension rows
  std::vector<Tensor> origins;  // int64 [k, 2]: update origins its shard applied (kernels/update_origin.h)
  // With rows: the variable's leading dimension, so a backup that lacks it
  // defines it (zeros) first: a big variable travels whole as pieces of rows.
  // -1: none (a whole value, or rows of a variable the backup holds).
  std::vector<int64_t> leading;
  // A round may take several messages: all but its last say `more`, and the
  // backup applies the round's changes together once the last one came, so
  // a holder that dies half way through a round leaves nothing of it.
  uint64_t round = 0;
  bool more = false;
  // Empty, or kReplicaCounters per name: the variable's synchronous-step and
  // update counters (kernels/replica_state.h), so a backup that takes over
  // goes on counting where its holder was; a first value of -1: none.
  std::vector<int64_t> counters;
  static constexpr size_t kReplicaCounters = 4;
  // Empty, or one per name: int64 [workers], the variable's stale-synchronous
  // clocks (kernels/replica_state.h), so a backup that takes over releases
  // the barrier where its holder would; int64 [0]: none.
  std::vector<Tensor> clocks;
};

// One output of a partition's graph, by node name and index.
struct OutputRef {
  std::string node;
  int32_t index = 0;
};

// Registers a partition of a cluster session's graph on a node; answered
// with StatusReply. graph_def is proto/graph_def.capnp bytes (shardflow/graph_io.h).
// What one RegisterPartition may name, refused (the peer dropped as
// malformed) before any of its lists is decoded: the tasks of its session
// (a shard map has at most 4096 slots), and its feeds, fetches and targets
// together (every node of the partition's step, by name).
constexpr uint64_t kMaxRegisteredTasks = 4096;
constexpr uint64_t kMaxRegisteredNodes = uint64_t{1} << 22;
struct RegisterPartition {
  using Reply = StatusReply;
  uint64_t session_id = 0;
  uint64_t handle = 0;  // unique within the session
  std::string device;   // full device name the partition was placed on
  // The session's tasks: tasks[i] is "/job:worker/task:i", where _Send
  // nodes send tensors for devices of that task.
  std::vector<Member> tasks;
  std::string graph_def;
  std::vector<OutputRef> feeds;
  std::vector<OutputRef> fetches;
  // The nodes each step runs (by name): with feeds and fetches they close
  // the step's share of the partition (net of ops this signature prunes).
  std::vector<std::string> targets;
  // The shard map epoch the session placed by (0: the cluster has no map):
  // a node that stopped serving the partition's task (slot) at a later
  // epoch refuses its steps as stale (runtime retries them on the new holder).
  int64_t epoch = 0;
};

// Runs one step of a registered partition; answered with RunPartitionDone.
struct RunPartition {
  using Reply = RunPartitionDone;
  uint64_t session_id = 0;
  uint64_t handle = 0;
  int64_t step_id = 0;
  std::vector<Tensor> feeds;  // in RegisterPartition::feeds order
  // > 0: record the step's timeline, keeping at most this many events
  // (the node caps it at kMaxTraceEvents), and return it in the reply.
  int64_t trace_max_events = 0;
  // > 0: while the step's ops finish, send the client a StepProgress at
  // most this often (its no-progress deadline restarts on each).
  int32_t progress_ms = 0;
};
// One-way, node to session: the partition of step step_id finished an op
// since its last report (ops: the reports so far).
struct StepProgress {
  uint64_t session_id = 0;
  int64_t step_id = 0;
  uint64_t ops = 0;
};
struct RunPartitionDone {
  int64_t step_id = 0;
  Status status;
  std::vector<Tensor> fetches;  // in RegisterPartition::fetches order
  // With RunPartition::trace_max_events: the events, their times since the
  // node received the request, and the nanoseconds from then to this reply
  // (what the coordinator aligns the node's clock with).
  TraceData trace;
  int64_t trace_elapsed_ns = 0;
};

// One tensor of a step for the receiving node's rendezvous (one-way).
struct SendTensor {
  int64_t step_id = 0;
  std::string edge;   // RendezvousKey::edge
  std::string frame;  // RendezvousKey::frame
  int64_t iteration = 0;
  bool is_dead = false;
  Tensor value;
  // The session whose step it is: a node refuses tensors for a session
  // that has no partition on it (a step may start after its tensors
  // arrive; a session may not).
  uint64_t session_id = 0;
};

// Fails a step's pending and later receives on the receiving node (one-way).
struct AbortStep {
  int64_t step_id = 0;
  Status status;
  uint64_t session_id = 0;  // whose partition host the abort goes to
};

// Forgets a step's rendezvous state on the receiving node (one-way).
struct CleanupStep {
  int64_t step_id = 0;
  uint64_t session_id = 0;
};

// Drops a session's partitions on the receiving node; answered with StatusReply.
struct CloseSession {
  using Reply = StatusReply;
  uint64_t session_id = 0;
};

// Benchmarks and tests: answered with an Echo carrying the same payload.
struct Echo {
  using Reply = Echo;
  Tensor payload;
};

// Variable state moved by a session (checkpoints, recovery, rebalancing).
// ReadVariables asks the node for the named variables (with none named,
// every variable of the asker's namespace there); answered with
// VariableValues: the initialised ones among them, each with its value.
struct ReadVariables {
  using Reply = VariableValues;
  std::vector<std::string> names;
};
struct VariableValues {
  std::vector<std::string> names;
  std::vector<Tensor> values;  // one per name (the decoder refuses others)
};
// Sets the named variables (creating them) to values; answered with
// StatusReply.
struct AssignVariables {
  using Reply = StatusReply;
  std::vector<std::string> names;
  std::vector<Tensor> values;  // one per name (the decoder refuses others)
};

// Node checkpoints (cluster/node_checkpoints.h): a node writes the variables
// of its tasks itself, under its --checkpoint-dir. SaveShards writes the
// named variables held by the receiver as piece `task` of checkpoint
// `token` (store DIR/pieces-TOKEN/task-TASK), after deleting the pieces of
// the checkpoints in drop; answered with ShardsDone.
struct SaveShards {
  using Reply = ShardsDone;
  std::string dir;
  uint64_t token = 0;
  int32_t task = 0;
  int64_t global_step = 0;
  std::vector<std::string> names;
  std::vector<uint64_t> drop;
};

// Commits checkpoint `token` (its pieces written): a record in store
// DIR/index whose id is the checkpoint's, keeping the newest keep_last (0:
// all); answered with ShardsDone (dropped: tokens retention removed).
struct CommitShards {
  using Reply = ShardsDone;
  std::string dir;
  uint64_t token = 0;
  int32_t tasks = 0;
  int64_t global_step = 0;
  int32_t keep_last = 0;
};

// Assigns the named variables on the receiver from piece `task` of a node
// checkpoint in dir: of token, or with token 0 of record id of DIR/index
// (-1: the newest readable); answered with ShardsDone.
struct RestoreShards {
  using Reply = ShardsDone;
  std::string dir;
  uint64_t token = 0;
  int64_t id = -1;
  int32_t task = 0;
  std::vector<std::string> names;
};

// What a node checkpoint request did.
struct ShardsDone {
  int64_t id = -1;
  uint64_t token = 0;
  int64_t global_step = 0;
  int64_t variables = 0;
  int64_t bytes = 0;
  std::vector<uint64_t> dropped;
};

// One step of a ring all-reduce between node processes (one-way; see
// cluster/cluster_collectives.h): rank from_rank's chunk for rank
// (from_rank + 1) mod group_size, in the generation-th reduction of the
// group. A non-OK status is a failed reduction passed round the ring (no
// chunk).
struct CollectiveChunk {
  std::string group_key;
  int64_t group_size = 0;  // in [1, 4096]
  int64_t generation = 0;  // >= 0: the k-th reduction of the group
  int64_t from_rank = 0;   // in [0, group_size)
  int64_t step = 0;        // in [0, 2 (group_size - 1))
  int64_t total = 0;       // the sender's element count (every rank must have the same)
  std::string address;     // the sending node's listen address "host:port"
  Status status;
  Tensor chunk;            // 1-D
  int64_t epoch = 0;       // >= 0: the group's restarts after failures (older chunks are stale)
  // >= 0: where chunk starts in the sender's tensor (elements); a ring
  // chunk travels as several pieces so the ranks add while bytes flow.
  int64_t offset = 0;
};

// Rank from_rank of an all-reduce group runs on the node at `address` (one-
// way, in order with the chunks: a chunk for a rank follows its announcement).
struct CollectiveAnnounce {
  std::string group_key;
  int64_t group_size = 0;  // in [1, 4096]
  int64_t from_rank = 0;   // in [0, group_size)
  std::string address;     // the sending node's listen address "host:port"
  int64_t epoch = 0;       // >= 0: the group's restarts after failures
};

// Namespaces (graph/namespaces.h). ListNamespaces asks a node what each
// namespace holds there (a session's credential: its own namespace only);
// DropNamespace drops namespace ns there (a session: only its own): the
// connections of its sessions close, its variables, tables and queues are
// forgotten. Both are answered with Namespaces (after a drop: what it held).
struct ListNamespaces {
  using Reply = Namespaces;
};
struct DropNamespace {
  using Reply = Namespaces;
  std::string ns;  // "default" for the default namespace
};
struct NamespaceState {
  std::string ns;  // "default" for the default namespace
  int64_t variables = 0;
  int64_t tables = 0;
  int64_t queues = 0;
  int64_t bytes = 0;
  int64_t sessions = 0;
};
struct Namespaces {
  std::vector<NamespaceState> namespaces;
};

using Body = std::variant<Heartbeat, StatusReply,
                          ListMembers, Membership, RegisterPartition, RunPartition,
                          RunPartitionDone, SendTensor, AbortStep, CleanupStep, CloseSession,
                          Echo, ReadVariables, VariableValues, AssignVariables, CollectiveChunk, StepProgress,
                          SaveShards, CommitShards, RestoreShards, ShardsDone, MoveSlot, SyncSlot, ReplicateSlot,
                          ListNamespaces, DropNamespace, Namespaces, CollectiveAnnounce>;

// A message: a body, and the id that pairs a request with its reply (0 for
// one-way messages; a reply carries its request's id).
struct Message {
  uint64_t request_id = 0;
  Body body;
};

// The body's type name ("RunPartition"), for errors and logs.
const char* BodyName(const Body& b);

}  // namespace net
}  // namespace sf
