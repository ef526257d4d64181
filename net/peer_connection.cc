// A connection's thread-safe face and the routes of messages to services
// (net/peer_link.h).
#include "net/peer_link.h"

namespace sf {
namespace net {

namespace detail {

Result<Message> CallBody(const ConnectionPtr& c, Body body, int timeout_ms) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<Message>> reply;
  c->RequestInline(std::move(body), timeout_ms, [&](Result<Message> r) {
    std::lock_guard<std::mutex> l(mu);
    reply.emplace(std::move(r));
    cv.notify_all();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return reply.has_value(); });
  return std::move(*reply);
}

const char* ServiceName(uint32_t s) {
  switch (s) {
    case kChannelService: return "channel";
    case kPartitionsService: return "partition host";
    case kVariablesService: return "variable store";
    case kMembersService: return "member list";
    case kPlacementService: return "placement";
    case kRendezvousService: return "rendezvous";
    case kCollectivesService: return "collectives";
    case kDiagnosticsService: return "diagnostics";
    case kMembershipViews: return "membership view";
  }
  return "unknown";
}


Route RouteOf(const Body& body) {
  return std::visit(
      [](const auto& b) -> Route {
        using B = std::decay_t<decltype(b)>;
        if constexpr (std::is_same_v<B, Heartbeat> || std::is_same_v<B, StepProgress>) return {kChannelService, false, true};
        else if constexpr (std::is_same_v<B, ListMembers>) return {kMembersService, true, false};
        else if constexpr (std::is_same_v<B, Membership>) return {kMembershipViews, false, true};
        else if constexpr (std::is_same_v<B, MoveSlot> || std::is_same_v<B, SyncSlot>)
          return {kPlacementService, true, false};
        else if constexpr (std::is_same_v<B, RegisterPartition> || std::is_same_v<B, RunPartition> ||
                           std::is_same_v<B, CloseSession>)
          return {kPartitionsService, true, false};
        else if constexpr (std::is_same_v<B, AbortStep> || std::is_same_v<B, CleanupStep>)
          return {kPartitionsService, false, true};
        else if constexpr (std::is_same_v<B, SendTensor>) return {kRendezvousService, false, true};
        else if constexpr (std::is_same_v<B, CollectiveChunk> || std::is_same_v<B, CollectiveAnnounce>)
          return {kCollectivesService, false, true};
        else if constexpr (std::is_same_v<B, ReadVariables> || std::is_same_v<B, AssignVariables> ||
                           std::is_same_v<B, SaveShards> ||
                           std::is_same_v<B, CommitShards> || std::is_same_v<B, RestoreShards> ||
                           std::is_same_v<B, ReplicateSlot> || std::is_same_v<B, ListNamespaces> ||
                           std::is_same_v<B, DropNamespace>)
          return {kVariablesService, true, false};
        else if constexpr (std::is_same_v<B, Echo>) return {kDiagnosticsService, true, false};
        else return {};
      },
      body);
}

Slot::~Slot() {
  if (!core) return;
  --core->total_conns;
  HandshakeDone();
  ReleaseAdmission();
  auto it = core->per_source.find(source);
  if (it != core->per_source.end() && --it->second <= 0) core->per_source.erase(it);
}

void Slot::HandshakeDone() {
  if (core && handshake != 0) core->EndHandshake(handshake);
  handshake = 0;
}

// ------------------------------------------------------------ ConnImpl

bool ConnImpl::MarkDown(const Status& why) {
  std::map<uint64_t, PendingRequest> pending;
  bool was_up = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (down_) return false;
    down_ = true;
    up_ = false;
    down_why_ = why.message();
    was_up = was_up_;
    pending.swap(pending_);
  }
  for (auto& [rid, p] : pending)
    Complete(std::move(p), Unavailable(std::string(p.what) + " to " + Who() + " failed: " + why.message()));
  if (was_up && core_->on_down) {
    auto self = shared_from_this();
    strand_->Add([self, why] { self->core_->on_down(self, why); });
  }
  return true;
}

Status ConnImpl::Send(const Message& m) {
  if (m.request_id != 0)
    return InvalidArgument(std::string("a ") + BodyName(m.body) +
                           " with a request id: requests are answered through their Answer");
  if (!up_) return Unavailable("connection to " + Who() + " is down" + DownReason());
  SF_RETURN_IF_ERROR(CheckRoute(m.body, /*ask=*/false, services_, [this] { return Who(); }));
  SF_RETURN_IF_ERROR(CheckEncodable(m).WithPrefix(std::string("encoding ") + BodyName(m.body)));
  auto copy = std::make_shared<Message>(m);  // tensors by reference
  auto core = core_;
  const uint64_t id = id_;
  if (!core->Soon([core, id, copy] { core->SendOnLoop(id, copy); }))
    return Unavailable("connection to " + Who() + " is down: the endpoint shut down");
  return Status::OK();
}

void ConnImpl::Reply(uint64_t request_id, Body body) {
  auto core = core_;
  const uint64_t id = id_;
  auto m = std::make_shared<Message>(Message{request_id, std::move(body)});
  // Down or shut down: the asker learns it from its connection.
  core->Soon([core, id, m] { core->ReplyOnLoop(id, std::move(*m)); });
}

void ConnImpl::StartRequest(Body body, int timeout_ms, std::function<void(Result<Message>)> cb, bool inline_reply) {
  const char* what = BodyName(body);
  if (up_) {
    Status route = CheckRoute(body, /*ask=*/true, services_, [this] { return Who(); });
    if (!route.ok()) return Complete(PendingRequest{what, std::move(cb), inline_reply}, route);
  }
  const uint64_t rid = AddPending(what, cb, inline_reply);
  if (rid == 0) {
    Complete(PendingRequest{what, std::move(cb), inline_reply},
             Unavailable(std::string(what) + " to " + Who() + " failed: the connection is down" + DownReason()));
    return;
  }
  auto m = std::make_shared<Message>();
  m->body = std::move(body);
  auto core = core_;
  const uint64_t id = id_;
  if (!core->Soon([core, id, rid, m, timeout_ms] { core->AskOnLoop(id, rid, m, timeout_ms); }))
    Finish(rid, Unavailable(std::string(what) + " to " + Who() + " failed: the endpoint shut down"));
}

void ConnImpl::Close() {
  if (!MarkDown(Unavailable("connection to " + Who() + " closed"))) return;
  auto core = core_;
  const uint64_t id = id_;
  core->Soon([core, id] { core->DownById(id, Unavailable("closed")); });
}

}  // namespace detail
}  // namespace net
}  // namespace sf
