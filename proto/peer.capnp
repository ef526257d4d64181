# What the two ends of a connection export to each other (Cap'n Proto RPC
# over mutual TLS, net/peer_rpc.h). The bootstrap capability only says
# hello; it hands back the services the caller's certificate entitles it
# to, one interface each, and a null capability for the rest: a session
# gets no placement orders, rendezvous or collectives to call at all. Every
# parameter is a typed struct of proto/messages.capnp, decoded by net/wire.h
# with its limits; replies are Envelopes (a result or a status).
@0xe9ec53bd5def4a24;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("sf::proto::rpc");

using W = import "messages.capnp";

struct HelloInfo {
  version @0 :UInt32;       # the message set's version (net/messages.h kWireVersion)
  name @1 :Text;            # node name, or "" for a session
  listenAddress @2 :Text;   # "host:port" where the sender listens ("" for a session)
  role @3 :Text;            # "node" or "session": checked against the certificate under TLS
}

interface Peer {
  # The only call of the bootstrap capability: who each side is, and what
  # each may call on the other. The dialer passes the services it serves
  # (a session: its channel only); the answer holds those the dialer's
  # role may call. A peer of another version gets status
  # FailedPrecondition naming both versions, and no services.
  hello @0 (info :HelloInfo, services :Services) -> (info :HelloInfo, status :W.Status, services :Services);
}

# One side's services as the other may call them; null where its role may not.
struct Services {
  channel @0 :Channel;              # every peer
  partitions @1 :PartitionHost;     # nodes serve it to nodes and sessions
  variables @2 :VariableStore;      # nodes serve it to nodes and sessions
  members @3 :Members;              # nodes serve it to nodes and sessions
  placement @4 :Placement;          # nodes only: the placement leader's orders
  rendezvous @5 :Rendezvous;        # nodes only
  collectives @6 :Collectives;      # nodes only
  diagnostics @7 :Diagnostics;      # every peer
}

# A request's answer: an Envelope (the result, or a StatusReply). A reply
# holding large tensors comes instead through the asker's Channel.replies
# (byTell), where its tensors are referenced; a return's must be copied.
# `id` of each request is the asker's own number for it, which such a
# reply names.
struct Reply {
  reply @0 :W.Envelope;
  byTell @1 :Bool;
}

# One-way methods take lists: what the sender queued in one turn of its
# event loop travels as one call. Each returns once the receiver has
# handled its messages; the sender keeps a window of bytes in flight per
# connection, and the receiver stops reading past its flow limit.

interface Channel {
  heartbeat @0 () -> ();                                # sent when idle: the peer is alive
  replies @1 (replies :List(W.Envelope)) -> ();         # large replies to our asks (byTell)
  progress @2 (reports :List(W.StepProgress)) -> ();    # a node's steps moved (to their session)
  members @3 (views :List(W.Membership)) -> ();         # the membership changed (to watchers that are no nodes)
}

interface PartitionHost {
  registerPartition @0 (request :W.RegisterPartition, id :UInt64) -> Reply;
  run @1 (request :W.RunPartition, id :UInt64) -> Reply;       # RunPartitionDone
  closeSession @2 (request :W.CloseSession, id :UInt64) -> Reply;
  abort @3 (steps :List(W.AbortStep)) -> ();
  cleanup @4 (steps :List(W.CleanupStep)) -> ();
}

interface VariableStore {
  # The named variables' values (a VariableValues).
  readVariables @0 (request :W.ReadVariables, id :UInt64) -> Reply;
  # Node checkpoints: each answered with a ShardsDone (or a StatusReply).
  saveShards @1 (request :W.SaveShards, id :UInt64) -> Reply;
  commitShards @2 (request :W.CommitShards, id :UInt64) -> Reply;
  restoreShards @3 (request :W.RestoreShards, id :UInt64) -> Reply;
  # A slot's holder sending its backup the slot's changes (a StatusReply).
  replicateSlot @4 (request :W.ReplicateSlot, id :UInt64) -> Reply;
  # Namespaces: what each holds here, or drop one (each a Namespaces).
  namespaces @5 (request :W.ListNamespaces, id :UInt64) -> Reply;
  dropNamespace @6 (request :W.DropNamespace, id :UInt64) -> Reply;
  # Sets the named variables to the values given (a StatusReply).
  assignVariables @7 (request :W.AssignVariables, id :UInt64) -> Reply;
}

interface Members {
  # This node's view of the membership; the asker is told of changes.
  list @0 (id :UInt64) -> Reply;
}

# Membership is etcd's (cluster/member_registry.h): no peer joins, ends or
# drains a member by a message. What the placement leader orders a node:
interface Placement {
  # The placement leader moving a slot off the receiver (a StatusReply).
  moveSlot @0 (request :W.MoveSlot, id :UInt64) -> Reply;
  # The placement leader having the receiver copy a slot to its new backup (a StatusReply).
  syncSlot @1 (request :W.SyncSlot, id :UInt64) -> Reply;
}

interface Rendezvous {
  # Tensors between partitions of a step.
  send @0 (tensors :List(W.SendTensor)) -> ();
  # A tensor larger than one call (1 MiB), streamed: its pieces in order,
  # one call each, and no other streamed tensor begun on the connection
  # until its last piece. The receiver writes each piece into the tensor
  # it allocated at the first, so no message holds the whole of it.
  sendPiece @1 (piece :TensorPiece) -> ();
}

struct TensorPiece {
  # On the first piece only: the message, whose value gives the dtype and
  # shape and holds no data.
  header @0 :W.SendTensor;
  offset @1 :UInt64;   # where data goes among the value's bytes: the bytes received so far
  data @2 :Data;
}

interface Collectives {
  # All-reduce ring pieces.
  chunks @0 (chunks :List(W.CollectiveChunk)) -> ();
  # Where ranks of a group run; in order with the chunks (one capability).
  announce @1 (announcements :List(W.CollectiveAnnounce)) -> ();
}

interface Diagnostics {
  # Answers with the payload (round trips and bandwidth).
  echo @0 (request :W.Echo, id :UInt64) -> Reply;
}
