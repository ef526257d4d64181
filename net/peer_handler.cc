// The answers of a handler that does not serve a request (net/peer_handler.h).
#include "net/peer_handler.h"

#include <string>

namespace sf {
namespace net {

namespace {

Status NotServed(const char* what) {
  return InvalidArgument(std::string("this process does not serve ") + what);
}

}  // namespace

void Handler::ServeMembers(const ConnectionPtr&, Answer<Membership> done) { done(NotServed("ListMembers")); }
void Handler::ServeRegister(const ConnectionPtr&, RegisterPartition, Answer<StatusReply> done) {
  done(NotServed("RegisterPartition"));
}
void Handler::ServeRun(const ConnectionPtr&, RunPartition, Answer<RunPartitionDone> done) {
  done(NotServed("RunPartition"));
}
void Handler::ServeCloseSession(const ConnectionPtr&, CloseSession, Answer<StatusReply> done) {
  done(NotServed("CloseSession"));
}
void Handler::ServeReadVariables(const ConnectionPtr&, ReadVariables, Answer<VariableValues> done) {
  done(NotServed("ReadVariables"));
}
void Handler::ServeAssignVariables(const ConnectionPtr&, AssignVariables, Answer<StatusReply> done) {
  done(NotServed("AssignVariables"));
}
void Handler::ServeSaveShards(const ConnectionPtr&, SaveShards, Answer<ShardsDone> done) {
  done(NotServed("SaveShards"));
}
void Handler::ServeCommitShards(const ConnectionPtr&, CommitShards, Answer<ShardsDone> done) {
  done(NotServed("CommitShards"));
}
void Handler::ServeRestoreShards(const ConnectionPtr&, RestoreShards, Answer<ShardsDone> done) {
  done(NotServed("RestoreShards"));
}
void Handler::ServeReplicateSlot(const ConnectionPtr&, ReplicateSlot, Answer<StatusReply> done) {
  done(NotServed("ReplicateSlot"));
}
void Handler::ServeListNamespaces(const ConnectionPtr&, ListNamespaces, Answer<Namespaces> done) {
  done(NotServed("ListNamespaces"));
}
void Handler::ServeDropNamespace(const ConnectionPtr&, DropNamespace, Answer<Namespaces> done) {
  done(NotServed("DropNamespace"));
}
void Handler::ServeMoveSlot(const ConnectionPtr&, MoveSlot, Answer<StatusReply> done) { done(NotServed("MoveSlot")); }
void Handler::ServeSyncSlot(const ConnectionPtr&, SyncSlot, Answer<StatusReply> done) { done(NotServed("SyncSlot")); }
void Handler::ServeEcho(const ConnectionPtr&, Echo, Answer<Echo> done) { done(NotServed("Echo")); }

// A one-way message nobody serves is dropped: it has no one to answer.
void Handler::OnTensor(const ConnectionPtr&, SendTensor) {}
void Handler::OnAbort(const ConnectionPtr&, AbortStep) {}
void Handler::OnCleanup(const ConnectionPtr&, CleanupStep) {}
void Handler::OnChunk(const ConnectionPtr&, CollectiveChunk) {}
void Handler::OnAnnounce(const ConnectionPtr&, CollectiveAnnounce) {}
void Handler::OnProgress(const ConnectionPtr&, StepProgress) {}
void Handler::OnMembership(const ConnectionPtr&, Membership) {}

}  // namespace net
}  // namespace sf
