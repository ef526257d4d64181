// What an endpoint serves its peers, as typed C++ calls: the Cap'n Proto
// servers (net/peer_services.cc) decode each call of proto/peer.capnp and
// call one method of a Handler with the decoded struct, as TensorFlow's
// GrpcWorkerService calls its Worker. No message variant, request id or
// dispatch on a message's kind reaches the handler: a request's method
// gets an Answer<Reply> to answer through.
//
// Methods run on the endpoint's handler threads, one at a time per
// connection and in arrival order, except those OnIoThread claims (they
// run on the I/O thread at once, and must never block). A method the
// handler does not override answers InvalidArgument naming the request (a
// one-way message is dropped), so a peer calling a service this process
// does not serve learns it at once.
//
// Adding a message: its struct (net/messages.h) and wire form
// (proto/messages.capnp, net/wire_*.h), its method in proto/peer.capnp, one
// virtual here, one server method in net/peer_services.cc, and the client
// call.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <typeinfo>
#include <utility>

#include "net/messages.h"

namespace sf {
namespace net {

class Connection;
using ConnectionPtr = std::shared_ptr<Connection>;

// How a request is answered: once, from any thread, by calling it with the
// reply or with an error (sent as a StatusReply). Later calls do nothing; a
// request never answered fails at its asker by the asker's deadline.
template <class R>
class Answer {
 public:
  Answer() = default;
  // net/ makes answers: send puts a reply on the asker's connection.
  explicit Answer(std::function<void(Body)> send) : state_(std::make_shared<State>(std::move(send))) {}

  // Sends r.
  void operator()(R r) const { Send(Body(std::move(r))); }
  // Sends s instead of a reply (with R = StatusReply, OK is a reply too).
  void operator()(const Status& s) const { Send(Body(StatusReply{s})); }

 private:
  struct State {
    explicit State(std::function<void(Body)> s) : send(std::move(s)) {}
    std::atomic<bool> sent{false};
    std::function<void(Body)> send;
  };
  void Send(Body b) const {
    if (state_ && !state_->sent.exchange(true)) state_->send(std::move(b));
  }
  std::shared_ptr<State> state_;
};

class Handler {
 public:
  virtual ~Handler() = default;

  // True for messages of `message`'s type (a struct of net/messages.h) that
  // run on the I/O thread: only handlers that never block and hand real
  // work on (a tensor into a rendezvous), saving two thread hops. Asked
  // once per type when the endpoint starts.
  virtual bool OnIoThread(const std::type_info& message) const {
    (void)message;
    return false;
  }

  // Requests (proto/peer.capnp's Members, PartitionHost, VariableStore,
  // Placement, Diagnostics).
  virtual void ServeMembers(const ConnectionPtr& from, Answer<Membership> done);
  virtual void ServeRegister(const ConnectionPtr& from, RegisterPartition r, Answer<StatusReply> done);
  virtual void ServeRun(const ConnectionPtr& from, RunPartition r, Answer<RunPartitionDone> done);
  virtual void ServeCloseSession(const ConnectionPtr& from, CloseSession r, Answer<StatusReply> done);
  virtual void ServeReadVariables(const ConnectionPtr& from, ReadVariables r, Answer<VariableValues> done);
  virtual void ServeAssignVariables(const ConnectionPtr& from, AssignVariables r, Answer<StatusReply> done);
  virtual void ServeSaveShards(const ConnectionPtr& from, SaveShards r, Answer<ShardsDone> done);
  virtual void ServeCommitShards(const ConnectionPtr& from, CommitShards r, Answer<ShardsDone> done);
  virtual void ServeRestoreShards(const ConnectionPtr& from, RestoreShards r, Answer<ShardsDone> done);
  virtual void ServeReplicateSlot(const ConnectionPtr& from, ReplicateSlot r, Answer<StatusReply> done);
  virtual void ServeListNamespaces(const ConnectionPtr& from, ListNamespaces r, Answer<Namespaces> done);
  virtual void ServeDropNamespace(const ConnectionPtr& from, DropNamespace r, Answer<Namespaces> done);
  virtual void ServeMoveSlot(const ConnectionPtr& from, MoveSlot r, Answer<StatusReply> done);
  virtual void ServeSyncSlot(const ConnectionPtr& from, SyncSlot r, Answer<StatusReply> done);
  virtual void ServeEcho(const ConnectionPtr& from, Echo r, Answer<Echo> done);

  // One-way messages (Rendezvous, PartitionHost's abort and cleanup,
  // Collectives, Channel).
  virtual void OnTensor(const ConnectionPtr& from, SendTensor t);
  virtual void OnAbort(const ConnectionPtr& from, AbortStep a);
  virtual void OnCleanup(const ConnectionPtr& from, CleanupStep a);
  virtual void OnChunk(const ConnectionPtr& from, CollectiveChunk c);
  virtual void OnAnnounce(const ConnectionPtr& from, CollectiveAnnounce a);
  virtual void OnProgress(const ConnectionPtr& from, StepProgress p);
  virtual void OnMembership(const ConnectionPtr& from, Membership m);
};

}  // namespace net
}  // namespace sf
