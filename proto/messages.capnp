# The wire form of every message in net/messages.h: one Envelope per frame.
# net/wire.h is the only code that reads or writes these; it checks sizes,
# dtypes and the version before anything reaches the runtime.
@0xa7285badac061ebf;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("sf::proto::wire");

using T = import "tensor.capnp";

# A sf::Status: its code (sf::Code ordinal, 0 = OK) and message.
struct Status {
  code @0 :UInt32;
  message @1 :Text;
}

# Keeps an idle connection alive; carries nothing.
struct Heartbeat {}

# The answer to a request that returns only a status.
struct StatusReply {
  status @0 :Status;
}

# A cluster member: its name and "host:port" listen address.
struct Member {
  name @0 :Text;
  address @1 :Text;
  unusedWatchPort @2 :UInt16;  # wire version 1's CAF watch port; never set
  incarnation @3 :UInt64;      # the node's life: a higher one replaces a lower
}

# Asks a node for the members it knows; carries nothing.
struct ListMembers {}

# A node's view of the membership (etcd's, cluster/member_view.h): the
# answer to ListMembers, and what a watcher is told when it changes.
struct Membership {
  members @0 :List(Member);
  leaving @1 :List(Member);
  unusedEnded @2 :List(Member);  # wire versions 3 to 5's gossip tombstones; never set
  mapEpoch @3 :Int64;          # the shard map (cluster/shard_map.h): its epoch, 0 for none yet
  mapHolder @4 :List(Text);    # by slot: the member serving it
  mapFrom @5 :List(Text);      # by slot: "" or the member it moves from
  mapSlots @6 :Int32;          # > 0: the cluster places by a map of this many slots (etcd); 0: no map
  mapLostAfter @7 :List(Int64);  # by slot: 0, or the epoch after which its state was lost
}

# The placement leader to a slot's old holder: stop serving the slot's
# partitions registered before epoch (a fence), wait for those running, and
# copy the slot's variables to the node at `to`; answered with StatusReply.
struct MoveSlot {
  slot @0 :Int32;
  to @1 :Text;
  epoch @2 :Int64;
}

# The placement leader asking a slot's holder to copy the slot to its new backup.
struct SyncSlot {
  slot @0 :Int32;
  backup @1 :Text;
  epoch @2 :Int64;
}

# A slot's holder sending its backup the slot's changes (net/messages.h).
struct ReplicateSlot {
  slot @0 :Int32;
  epoch @1 :Int64;
  holder @2 :Text;
  full @3 :Bool;
  names @4 :List(Text);
  values @5 :List(T.Tensor);
  rows @6 :List(T.Tensor);
  origins @7 :List(T.Tensor);
  leading @8 :List(Int64);
  round @9 :UInt64;
  more @10 :Bool;
  counters @11 :List(Int64);   # empty, or 4 per name: its replication counters (step -1: none)
  clocks @12 :List(T.Tensor);  # empty, or one per name: int64 [workers] SSP clocks ([0]: none)
}

# One output of a partition's graph: node name and output index.
struct OutputRef {
  node @0 :Text;
  index @1 :Int32;
}

# Registers a partition (graphDef is proto/graph_def.capnp bytes) on a node.
struct RegisterPartition {
  sessionId @0 :UInt64;
  handle @1 :UInt64;
  device @2 :Text;
  graphDef @3 :Data;
  feeds @4 :List(OutputRef);
  fetches @5 :List(OutputRef);
  tasks @6 :List(Member);
  targets @7 :List(Text);
  epoch @8 :Int64;              # the shard map epoch the session placed by (0: none)
}

# Runs one step of a registered partition with its feeds.
struct RunPartition {
  sessionId @0 :UInt64;
  handle @1 :UInt64;
  stepId @2 :Int64;
  feeds @3 :List(T.Tensor);
  traceMaxEvents @4 :Int64;  # > 0: record and return the step's timeline
  progressMs @5 :Int32;      # > 0: send a StepProgress at most this often while ops finish
}

# One-way, node to session: the partition's step finished an op since the
# last report (ops: the reports so far), so the session's no-progress
# deadline restarts.
struct StepProgress {
  sessionId @0 :UInt64;
  stepId @1 :Int64;
  ops @2 :UInt64;
}

# One event of a partition's timeline (kernels/step_trace.h).
struct TraceEvent {
  name @0 :Text;
  op @1 :Text;
  category @2 :Text;
  thread @3 :UInt32;  # index into PartitionTrace.threads
  startNs @4 :Int64;
  durNs @5 :Int64;
}

struct PartitionTrace {
  events @0 :List(TraceEvent);
  threads @1 :List(Text);
  dropped @2 :Int64;
  elapsedNs @3 :Int64;  # from the request's arrival to the reply
}

# The result of RunPartition: status and fetched tensors (and the timeline
# when asked for).
struct RunPartitionDone {
  stepId @0 :Int64;
  status @1 :Status;
  fetches @2 :List(T.Tensor);
  trace @3 :PartitionTrace;
}

# One tensor of a step for the receiver's rendezvous.
struct SendTensor {
  stepId @0 :Int64;
  edge @1 :Text;
  frame @2 :Text;
  iteration @3 :Int64;
  isDead @4 :Bool;
  value @5 :T.Tensor;
  sessionId @6 :UInt64;  # the step's session: refused where it has no partition
}

# Fails a step's pending and later receives on the receiver.
struct AbortStep {
  stepId @0 :Int64;
  status @1 :Status;
  sessionId @2 :UInt64;
}

# Forgets a step's rendezvous state on the receiver.
struct CleanupStep {
  stepId @0 :Int64;
  sessionId @1 :UInt64;
}

# Drops a session's partitions on the receiver.
struct CloseSession {
  sessionId @0 :UInt64;
}

# Benchmarks and tests: answered with the same payload.
struct Echo {
  payload @0 :T.Tensor;
}

# Asks a node for the named variables (with none named, every variable of
# the asker's namespace there); answered with VariableValues.
struct ReadVariables {
  names @0 :List(Text);
}

# A ReadVariables' answer: the initialised variables of those named, each
# with its value (one per name).
struct VariableValues {
  names @0 :List(Text);
  values @1 :List(T.Tensor);
}

# Sets the named variables (creating them) to values, one per name;
# answered with a StatusReply.
struct AssignVariables {
  names @0 :List(Text);
  values @1 :List(T.Tensor);
}

# Node checkpoints (cluster/node_checkpoints.cc): every node writes the
# variables of its tasks itself, under its --checkpoint-dir. SaveShards
# writes the named variables held by the receiver as piece `task` of the
# checkpoint `token` (the store DIR/pieces-TOKEN/task-TASK), after removing
# the pieces of the checkpoints named in drop; answered with ShardsDone.
struct SaveShards {
  dir @0 :Text;
  token @1 :UInt64;
  task @2 :Int32;
  globalStep @3 :Int64;
  names @4 :List(Text);
  drop @5 :List(UInt64);
}

# Commits checkpoint `token` once its pieces are written: its record in the
# store DIR/index (the record's id is the checkpoint's), keeping the newest
# keepLast (0: all); answered with ShardsDone (dropped: the tokens retention
# removed, whose pieces the receiver deleted).
struct CommitShards {
  dir @0 :Text;
  token @1 :UInt64;
  tasks @2 :Int32;
  globalStep @3 :Int64;
  keepLast @4 :Int32;
}

# Assigns the named variables on the receiver from piece `task` of a node
# checkpoint in dir: of token, or with token 0 of record id in DIR/index
# (-1: the newest readable); answered with ShardsDone.
struct RestoreShards {
  dir @0 :Text;
  token @1 :UInt64;
  id @2 :Int64;
  task @3 :Int32;
  names @4 :List(Text);
}

# What a node checkpoint request did.
struct ShardsDone {
  id @0 :Int64;
  token @1 :UInt64;
  globalStep @2 :Int64;
  variables @3 :Int64;
  bytes @4 :Int64;
  dropped @5 :List(UInt64);
}

# One step of a ring all-reduce between nodes.
struct CollectiveChunk {
  groupKey @0 :Text;
  groupSize @1 :Int64;
  generation @2 :Int64;
  fromRank @3 :Int64;
  step @4 :Int64;
  total @5 :Int64;
  address @6 :Text;
  status @7 :Status;
  chunk @8 :T.Tensor;
  epoch @9 :Int64;
  offset @10 :Int64;
}

# Rank fromRank of an all-reduce group runs on the node at address.
struct CollectiveAnnounce {
  groupKey @0 :Text;
  groupSize @1 :Int64;
  fromRank @2 :Int64;
  address @3 :Text;
  epoch @4 :Int64;
}

# Namespaces (graph/namespaces.h): ListNamespaces asks a node what each
# namespace holds there (a session: its own namespace only); DropNamespace
# drops one (a session: only its own). Both are answered with Namespaces.
struct ListNamespaces {}

struct DropNamespace {
  ns @0 :Text;
}

struct NamespaceState {
  ns @0 :Text;
  variables @1 :Int64;
  tables @2 :Int64;
  queues @3 :Int64;
  bytes @4 :Int64;
  sessions @5 :Int64;
}

struct Namespaces {
  namespaces @0 :List(NamespaceState);
}

# One frame's message: wire version, request id (0 = one-way) and the body.
struct Envelope {
  version @0 :UInt32;
  requestId @1 :UInt64;
  body :union {
    heartbeat @2 :Heartbeat;
    statusReply @3 :StatusReply;
    listMembers @4 :ListMembers;
    membership @5 :Membership;
    registerPartition @6 :RegisterPartition;
    runPartition @7 :RunPartition;
    runPartitionDone @8 :RunPartitionDone;
    sendTensor @9 :SendTensor;
    abortStep @10 :AbortStep;
    cleanupStep @11 :CleanupStep;
    closeSession @12 :CloseSession;
    echo @13 :Echo;
    readVariables @14 :ReadVariables;
    collectiveChunk @15 :CollectiveChunk;
    stepProgress @16 :StepProgress;
    saveShards @17 :SaveShards;
    commitShards @18 :CommitShards;
    restoreShards @19 :RestoreShards;
    shardsDone @20 :ShardsDone;
    moveSlot @21 :MoveSlot;
    syncSlot @22 :SyncSlot;
    replicateSlot @23 :ReplicateSlot;
    listNamespaces @24 :ListNamespaces;
    dropNamespace @25 :DropNamespace;
    namespaces @26 :Namespaces;
    variableValues @27 :VariableValues;
    assignVariables @28 :AssignVariables;
    collectiveAnnounce @29 :CollectiveAnnounce;
  }
}
