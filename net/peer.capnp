# The one capability each end of a connection exports to the other (Cap'n
# Proto RPC over mutual TLS, net/peer_rpc.h). Every message is a typed
# Envelope (net/messages.capnp), decoded by net/wire.h with its limits.
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
  # The first call on a connection: who each side is. Any other call before
  # it is refused. A peer of another version gets status FailedPrecondition
  # naming both versions.
  hello @0 (info :HelloInfo) -> (info :HelloInfo, status :W.Status);
  # A request and its reply (net::Connection::Request). A reply holding
  # large tensors comes instead as a tell whose requestId is the ask's
  # (byTell): a tell's tensors are referenced, a return's must be copied.
  ask @1 (message :W.Envelope) -> (reply :W.Envelope, byTell :Bool);
  # One-way messages, in order (those sent in one turn of the sender's
  # event loop travel together); it returns once the receiver has handled
  # them, which bounds what a sender can have queued at the receiver.
  tell @2 (messages :List(W.Envelope)) -> ();
}
