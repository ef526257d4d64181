// The Cap'n Proto interfaces a connection serves (proto/peer.capnp): each
// decodes its call and calls its method of the endpoint's Handler; hello
// checks the peer and hands out what its role may call (net/peer_link.h).
#include <cstring>

#include "net/peer_link.h"

namespace sf {
namespace net {
namespace detail {

// ------------------------------------------------------------ the served services

// A request of the peer's is one call of its Handler method with an Answer
// (net/peer_handler.h): the answer is the call's return (or, when large, a
// call on the asker's Channel).
class Service {
 public:
  Service(Core* core, Link* link) : core_(core), id_(link->conn->id()) {}

 protected:
  using Conn = std::shared_ptr<ConnImpl>;

  // Finds this connection's link for the call being served (link_), false
  // once the link is gone: a call Cap'n Proto queued keeps its server alive
  // past the link that made it. Every entry point binds before using
  // link_, and only synchronously (no continuation reads it).
  bool Bind() {
    link_ = core_->FindLink(id_);
    if (link_) link_->last_used_ms = NowMs();  // in use: not the first to go when room is short
    return link_ != nullptr;
  }
  static kj::Promise<void> Gone() { return KJ_EXCEPTION(DISCONNECTED, "the connection is closed"); }

  // Serves a request: `serve` calls the handler with our number for the
  // request (what its Answer replies to), on the I/O thread when on_io,
  // else on the connection's strand in order; the call returns the answer.
  template <class Ctx, class Serve>
  kj::Promise<void> Ask(Ctx context, uint64_t asker_id, bool on_io, Serve serve) {
    const uint64_t id = link_->next_incoming;
    link_->next_incoming += 2;
    auto paf = kj::newPromiseAndFulfiller<Message>();
    link_->incoming.emplace(id, Link::Incoming{kj::mv(paf.fulfiller), asker_id});
    Conn conn = link_->conn;
    if (on_io) serve(conn, id);
    else conn->strand_->Add([conn, id, serve = std::move(serve)]() mutable { serve(conn, id); });
    return Returned(kj::mv(paf.promise), kj::mv(context));
  }

  // The call's return once its handler answered: the reply, or a status
  // saying why it cannot be sent.
  template <class Ctx>
  kj::Promise<void> Returned(kj::Promise<Message> replied, Ctx context) {
    Core* core = core_;
    const uint64_t id = id_;
    return replied.then([context, core, id](Message reply) mutable {
      // What the peer is owed until it takes it, the return's size: past
      // its cap its bytes are not read (Core::OwesTooMuch).
      auto owed = kj::defer([&context, core, id] {
        if (Link* l = core->FindLink(id))
          core->NoteReplyQueued(l, context.getResults().totalSize().wordCount * sizeof(capnp::word), /*queued=*/false);
      });
      if (std::holds_alternative<Heartbeat>(reply.body) && reply.request_id == kSentByTell) {
        context.getResults().setByTell(true);
        return;
      }
      // A return's bytes leave after this promise is done, with no way to
      // know when: its tensors are copied, not referenced.
      Status s = EncodeEnvelope(reply, context.getResults().initReply(), /*reference_tensors=*/false);
      if (!s.ok()) {
        Message e;
        e.request_id = reply.request_id;
        e.body = StatusReply{s.WithPrefix("the reply cannot be sent")};
        Status s2 = EncodeEnvelope(e, context.getResults().initReply(), false);
        if (!s2.ok()) throw KJ_EXCEPTION(FAILED, s2.message());
      }
    });
  }

  // The size of a call's parameters (before they are released).
  template <class Ctx>
  static uint64_t ParamBytes(Ctx& context) {
    return context.getParams().totalSize().wordCount * sizeof(capnp::word);
  }
  // Counts `bytes` of the bound link's peer's calls in flight until `done` ends.
  kj::Promise<void> Counted(uint64_t bytes, kj::Promise<void> done) {
    link_->calls_bytes += bytes;
    Core* core = core_;
    const uint64_t id = id_;
    return done.attach(kj::defer([core, id, bytes] {
      if (Link* l = core->FindLink(id)) l->calls_bytes -= bytes;
    }));
  }

  // A request whose parameters are (request :T, id), served by `serve`.
  template <class T, class R, class Ctx>
  kj::Promise<void> AskStruct(Ctx context, void (Handler::*serve)(const ConnectionPtr&, T, Answer<R>)) {
    if (!Bind()) return Gone();
    const uint64_t bytes = ParamBytes(context);
    auto p = context.getParams();
    T m;
    Status s = DecodeStruct<T>(p.getRequest(), core_->limits, &m);
    const uint64_t asker = p.getId();
    context.releaseParams();
    if (!s.ok()) return Malformed(s);
    Handler* h = core_->handler;
    // Called once: on the I/O thread at once, or from the strand's queue.
    auto call = [h, serve, m = std::move(m)](const Conn& c, uint64_t id) mutable {
      (h->*serve)(c, std::move(m), c->AnswerTo<R>(id));
    };
    return Counted(bytes, Ask(kj::mv(context), asker, core_->OnIoThread<T>(), std::move(call)));
  }

  // Stops, once, a decode that runs off the I/O thread when its call ends:
  // the call's end frees the bytes it reads, so the end (on the I/O thread)
  // waits for a decode under way to see `cancel` (every 4096 elements).
  struct OffLoopDecode {
    std::mutex mu;
    bool ended = false;  // GUARDED_BY(mu): the call ended; its bytes are gone
    std::atomic<bool> cancel{false};
  };
  struct EndOffLoopDecode {
    explicit EndOffLoopDecode(std::shared_ptr<OffLoopDecode> decode) : d(std::move(decode)) {}
    EndOffLoopDecode(const EndOffLoopDecode&) = delete;
    EndOffLoopDecode& operator=(const EndOffLoopDecode&) = delete;
    std::shared_ptr<OffLoopDecode> d;
    ~EndOffLoopDecode() {
      d->cancel = true;
      std::lock_guard<std::mutex> l(d->mu);
      d->ended = true;
    }
  };

  // AskStruct for requests whose decoding takes long (a registration names
  // every node of a partition's step): decoded on the connection's strand,
  // in order with its other messages, so the I/O thread (every peer's
  // reads, writes and heartbeats) never spends a list's length on it. The
  // call's params stay alive until it returns.
  template <class T, class R, class Ctx>
  kj::Promise<void> AskStructOffLoop(Ctx context, void (Handler::*serve)(const ConnectionPtr&, T, Answer<R>)) {
    if (!Bind()) return Gone();
    const uint64_t bytes = ParamBytes(context);
    auto p = context.getParams();
    const uint64_t asker = p.getId();
    const typename WireOf<T>::Proto::Reader request = p.getRequest();
    auto decode = std::make_shared<OffLoopDecode>();
    Core* core = core_;
    auto ask = Ask(context, asker, /*on_io=*/false, [core, request, decode, serve](const Conn& conn, uint64_t id) {
      T m;
      Status s;
      {
        std::lock_guard<std::mutex> l(decode->mu);
        if (decode->ended) return;  // the call (and its bytes) went with the connection
        s = DecodeStruct<T>(request, core->limits, &m, &decode->cancel);
      }
      if (!s.ok()) {
        // Malformed bytes from an authenticated peer: it is dropped, as AskStruct does.
        const uint64_t cid = conn->id();
        core->Post([core, cid, s] { core->DownById(cid, s.WithPrefix("malformed message")); });
        return;
      }
      (core->handler->*serve)(conn, std::move(m), conn->AnswerTo<R>(id));
    });
    return Counted(bytes, ask.attach(kj::heap<EndOffLoopDecode>(decode)));
  }

  // One-way messages of kind T, each handed to `on`, in order; the call
  // returns once they are handled, which bounds what a sender can have
  // queued here.
  template <class T, class List>
  kj::Promise<void> TellStructs(List list, void (Handler::*on)(const ConnectionPtr&, T)) {
    if (list.size() > core_->limits.max_list_elements)
      return Malformed(InvalidArgument("a call of " + std::to_string(list.size()) + " messages"));
    std::vector<T> decoded;
    for (auto r : list) {
      T m;
      Status s = DecodeStruct<T>(r, core_->limits, &m);
      if (!s.ok()) return Malformed(s);
      decoded.push_back(std::move(m));
    }
    return HandOver(std::move(decoded), on);
  }

  // Decoded one-way messages: handled now when T runs on the I/O thread,
  // else queued for the connection's strand.
  template <class T>
  kj::Promise<void> HandOver(std::vector<T> msgs, void (Handler::*on)(const ConnectionPtr&, T)) {
    Handler* h = core_->handler;
    Conn conn = link_->conn;
    if (core_->OnIoThread<T>()) {
      for (auto& m : msgs) (h->*on)(conn, std::move(m));
      return kj::READY_NOW;
    }
    if (msgs.empty()) return kj::READY_NOW;
    auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
    auto done = std::make_shared<kj::Own<kj::CrossThreadPromiseFulfiller<void>>>(kj::mv(paf.fulfiller));
    auto queued = std::make_shared<std::vector<T>>(std::move(msgs));
    conn->strand_->Add([conn, h, on, queued, done] {
      for (auto& m : *queued) (h->*on)(conn, std::move(m));
      (*done)->fulfill();
    });
    return kj::mv(paf.promise);
  }

  // TellStructs over a list of context's parameters, which are released
  // once decoded.
  template <class T, class Ctx, class List>
  kj::Promise<void> TellReleasing(Ctx& context, List list, void (Handler::*on)(const ConnectionPtr&, T)) {
    if (!Bind()) return Gone();
    const uint64_t bytes = ParamBytes(context);
    auto p = TellStructs<T>(list, on);
    context.releaseParams();
    return Counted(bytes, kj::mv(p));
  }

  // Malformed bytes from an authenticated peer: it is dropped (the stream
  // cannot be trusted further) and the call fails.
  kj::Promise<void> Malformed(const Status& s) {
    Core* core = core_;
    const uint64_t id = link_->conn->id();
    link_->tasks->add(kj::evalLater([core, id, s] { core->DownById(id, s.WithPrefix("malformed message")); }));
    return KJ_EXCEPTION(FAILED, s.message());
  }

  Core* core_;
  const uint64_t id_;
  Link* link_ = nullptr;  // the bound call's (Bind)
};

class ChannelServer final : public rp::Channel::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> heartbeat(HeartbeatContext) override { return kj::READY_NOW; }
  kj::Promise<void> replies(RepliesContext context) override {
    if (!Bind()) return Gone();
    auto list = context.getParams().getReplies();
    if (list.size() > core_->limits.max_list_elements)
      return Malformed(InvalidArgument("a call of " + std::to_string(list.size()) + " replies"));
    for (auto env : list) {
      auto m = DecodeEnvelope(env, core_->limits);
      if (!m.ok()) return Malformed(m.status());
      if (m->request_id == 0) return Malformed(InvalidArgument("a reply that names no request"));
      link_->conn->Finish(m->request_id, std::move(*m));
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> progress(ProgressContext c) override {
    return TellReleasing(c, c.getParams().getReports(), &Handler::OnProgress);
  }
  kj::Promise<void> members(MembersContext context) override {
    if (!Bind()) return Gone();  // Malformed reads the link: unbound, it crashed the node
    // Membership is etcd's: views are for watchers (sessions), and a node
    // learns it from etcd, never from a peer.
    if (core_->credential.role == Role::kNode)
      return Malformed(PermissionDenied("a membership view sent to a node's channel"));
    return TellReleasing(context, context.getParams().getViews(), &Handler::OnMembership);
  }
};

class PartitionHostServer final : public rp::PartitionHost::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> registerPartition(RegisterPartitionContext c) override {
    return AskStructOffLoop(c, &Handler::ServeRegister);
  }
  kj::Promise<void> run(RunContext c) override { return AskStruct(c, &Handler::ServeRun); }
  kj::Promise<void> closeSession(CloseSessionContext c) override { return AskStruct(c, &Handler::ServeCloseSession); }
  kj::Promise<void> abort(AbortContext c) override { return TellReleasing(c, c.getParams().getSteps(), &Handler::OnAbort); }
  kj::Promise<void> cleanup(CleanupContext c) override {
    return TellReleasing(c, c.getParams().getSteps(), &Handler::OnCleanup);
  }
};

class VariableStoreServer final : public rp::VariableStore::Server, Service {
 public:
  using Service::Service;
  // A session's read or assign names any number of variables, and an
  // assign carries their values (up to the frame limit): decoded off the
  // I/O thread, as a registration is.
  kj::Promise<void> readVariables(ReadVariablesContext c) override { return AskStructOffLoop(c, &Handler::ServeReadVariables); }
  kj::Promise<void> assignVariables(AssignVariablesContext c) override {
    return AskStructOffLoop(c, &Handler::ServeAssignVariables);
  }
  kj::Promise<void> saveShards(SaveShardsContext c) override { return AskStruct(c, &Handler::ServeSaveShards); }
  kj::Promise<void> commitShards(CommitShardsContext c) override { return AskStruct(c, &Handler::ServeCommitShards); }
  kj::Promise<void> restoreShards(RestoreShardsContext c) override { return AskStruct(c, &Handler::ServeRestoreShards); }
  kj::Promise<void> replicateSlot(ReplicateSlotContext c) override { return AskStruct(c, &Handler::ServeReplicateSlot); }
  kj::Promise<void> namespaces(NamespacesContext c) override { return AskStruct(c, &Handler::ServeListNamespaces); }
  kj::Promise<void> dropNamespace(DropNamespaceContext c) override { return AskStruct(c, &Handler::ServeDropNamespace); }
};

class MembersServer final : public rp::Members::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> list(ListContext c) override {
    if (!Bind()) return Gone();
    const uint64_t asker = c.getParams().getId();
    c.releaseParams();
    Handler* h = core_->handler;
    return Ask(c, asker, core_->OnIoThread<ListMembers>(),
               [h](const Conn& conn, uint64_t id) { h->ServeMembers(conn, conn->AnswerTo<Membership>(id)); });
  }
};

class PlacementServer final : public rp::Placement::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> moveSlot(MoveSlotContext c) override { return AskStruct(c, &Handler::ServeMoveSlot); }
  kj::Promise<void> syncSlot(SyncSlotContext c) override { return AskStruct(c, &Handler::ServeSyncSlot); }
};

class RendezvousServer final : public rp::Rendezvous::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> send(SendContext c) override { return TellReleasing(c, c.getParams().getTensors(), &Handler::OnTensor); }

  kj::Promise<void> sendPiece(SendPieceContext c) override {
    if (!Bind()) return Gone();
    auto piece = c.getParams().getPiece();
    if (piece.hasHeader()) {
      if (link_->assembly) return Malformed(InvalidArgument("a streamed tensor began before the last one ended"));
      auto a = std::make_unique<Link::Assembly>();
      DType dtype = DType::kInvalid;
      Shape shape;
      Status s = DecodeStreamedHeader(piece.getHeader(), core_->limits, &a->message, &dtype, &shape, &a->total);
      if (!s.ok()) return Malformed(s);
      // No larger than one message or all the peer may have in flight here.
      const uint64_t cap = std::max(core_->options.max_frame_bytes, core_->options.max_peer_buffer_bytes);
      if (a->total > cap)
        return Malformed(InvalidArgument("a streamed tensor of " + std::to_string(a->total) + " bytes; the limit is " +
                                         std::to_string(cap)));
      try {
        a->message.value = Tensor(dtype, std::move(shape));
      } catch (const std::exception& e) {
        return Malformed(ResourceExhausted(std::string("a streamed tensor cannot be allocated: ") + e.what()));
      }
      a->start_ms = NowMs();
      link_->assembly = std::move(a);
    }
    if (!link_->assembly) return Malformed(InvalidArgument("a tensor piece without a streamed tensor begun"));
    Link::Assembly& a = *link_->assembly;
    auto data = piece.getData();
    if (piece.getOffset() != a.got || data.size() > a.total - a.got)
      return Malformed(InvalidArgument("a tensor piece of " + std::to_string(data.size()) + " bytes at offset " +
                                       std::to_string(piece.getOffset()) + " of a tensor of " +
                                       std::to_string(a.total) + " bytes, " + std::to_string(a.got) + " received"));
    auto* dst = static_cast<uint8_t*>(a.message.value.raw_data()) + a.got;
    if (data.size() > 0) std::memcpy(dst, data.begin(), data.size());
    if (a.message.value.dtype() == DType::kBool)  // any nonzero byte is true, as decoded whole
      for (size_t i = 0; i < data.size(); ++i) dst[i] = dst[i] != 0;
    a.got += data.size();
    c.releaseParams();
    if (a.got < a.total) return kj::READY_NOW;
    std::vector<SendTensor> whole;
    whole.push_back(std::move(a.message));
    link_->assembly.reset();
    return HandOver(std::move(whole), &Handler::OnTensor);
  }
};

class CollectivesServer final : public rp::Collectives::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> chunks(ChunksContext c) override {
    return TellReleasing(c, c.getParams().getChunks(), &Handler::OnChunk);
  }
  kj::Promise<void> announce(AnnounceContext c) override {
    return TellReleasing(c, c.getParams().getAnnouncements(), &Handler::OnAnnounce);
  }
};

class DiagnosticsServer final : public rp::Diagnostics::Server, Service {
 public:
  using Service::Service;
  kj::Promise<void> echo(EchoContext c) override { return AskStruct(c, &Handler::ServeEcho); }
};

// The services this process lets a peer of peer_role call: a node serves
// partitions, variables and the member list to every peer, placement
// orders, tensors and collectives to nodes only; everyone serves the
// channel and diagnostics.
void BuildServices(Core* core, Link* l, Role self, Role peer_role, rp::Services::Builder b) {
  b.setChannel(kj::heap<ChannelServer>(core, l));
  b.setDiagnostics(kj::heap<DiagnosticsServer>(core, l));
  if (self != Role::kNode) return;
  b.setPartitions(kj::heap<PartitionHostServer>(core, l));
  b.setVariables(kj::heap<VariableStoreServer>(core, l));
  b.setMembers(kj::heap<MembersServer>(core, l));
  if (peer_role != Role::kNode) return;
  b.setPlacement(kj::heap<PlacementServer>(core, l));
  b.setRendezvous(kj::heap<RendezvousServer>(core, l));
  b.setCollectives(kj::heap<CollectivesServer>(core, l));
}

// Keeps the services a peer handed over; InvalidArgument when it gave no
// channel (every peer must take heartbeats and replies).
Status TakeServices(Link* l, Role self, rp::Services::Reader s) {
  if (!s.hasChannel()) return InvalidArgument("the peer's hello offers no channel");
  Link::Remote& r = l->services;
  uint32_t mask = 0;
  r.channel = s.getChannel();
  mask |= kChannelService;
  if (s.hasPartitions()) r.partitions = s.getPartitions(), mask |= kPartitionsService;
  if (s.hasVariables()) r.variables = s.getVariables(), mask |= kVariablesService;
  if (s.hasMembers()) r.members = s.getMembers(), mask |= kMembersService;
  if (s.hasPlacement()) r.placement = s.getPlacement(), mask |= kPlacementService;
  if (s.hasRendezvous()) r.rendezvous = s.getRendezvous(), mask |= kRendezvousService;
  if (s.hasCollectives()) r.collectives = s.getCollectives(), mask |= kCollectivesService;
  if (s.hasDiagnostics()) r.diagnostics = s.getDiagnostics(), mask |= kDiagnosticsService;
  if (self == Role::kNode && !s.hasPlacement()) mask |= kMembershipViews;
  l->conn->services_ = mask;
  return Status::OK();
}

// The bootstrap: hello only, on the side that was dialed.
class PeerServer final : public rp::Peer::Server {
 public:
  PeerServer(Core* core, Link* link) : core_(core), id_(link->conn->id()) {}

  kj::Promise<void> hello(HelloContext context) override {
    // As Service::Bind: the call may come after the link is gone.
    link_ = core_->FindLink(id_);
    if (!link_) return KJ_EXCEPTION(DISCONNECTED, "the connection is closed");
    auto params = context.getParams();
    auto in = params.getInfo();
    auto out = context.getResults();
    auto info = out.initInfo();
    info.setVersion(kWireVersion);
    info.setName(core_->options.node_name);
    info.setListenAddress(core_->listen_address_);
    info.setRole(RoleName(core_->credential.role));
    Status s = refused_ ? FailedPrecondition("hello after a refused hello") : Check(in, params.getServices());
    auto st = out.initStatus();
    st.setCode(static_cast<uint32_t>(s.code()));
    st.setMessage(s.message());
    if (!s.ok()) {
      refused_ = true;
      core_->LogRefusal(link_->conn->peer_address(), s.message());
      // Answer first, then drop once the answer had time to leave: the
      // dialer learns why (dropped at once, the answer could die queued).
      Core* core = core_;
      const uint64_t id = link_->conn->id();
      link_->tasks->add(core->timer_->afterDelay(100 * kj::MILLISECONDS).then([core, id, s] { core->DownById(id, s); }));
      return kj::READY_NOW;
    }
    BuildServices(core_, link_, core_->credential.role, link_->conn->peer_role_, out.initServices());
    return kj::READY_NOW;
  }

 private:
  bool refused_ = false;
  Status Check(rp::HelloInfo::Reader in, rp::Services::Reader services) {
    if (link_->side == Side::CLIENT) return PermissionDenied("hello goes to the side that was dialed");
    if (link_->hello_done) return FailedPrecondition("hello twice");
    if (in.getVersion() != kWireVersion)
      return FailedPrecondition("peer speaks wire version " + std::to_string(in.getVersion()) +
                                ", this node speaks " + std::to_string(kWireVersion));
    auto claimed = ParseRole(in.getRole().cStr());
    if (!claimed.ok()) return PermissionDenied(claimed.status().message());
    if (link_->cert_checked && *claimed != link_->cert_role)
      return PermissionDenied(std::string("peer claims role ") + RoleName(*claimed) + " but its certificate is for " +
                              RoleName(link_->cert_role));
    if (in.getName().size() > 1024 || in.getListenAddress().size() > 1024)
      return InvalidArgument("hello names longer than 1024 bytes");
    SF_RETURN_IF_ERROR(TakeServices(link_, core_->credential.role, services));
    SF_RETURN_IF_ERROR(core_->Admit(link_));
    ConnImpl& c = *link_->conn;
    c.peer_name_ = in.getName().cStr();
    c.peer_listen_ = in.getListenAddress().cStr();
    c.peer_role_ = link_->cert_checked ? link_->cert_role : *claimed;
    c.peer_namespace_ = link_->cert_namespace;
    if (!c.MarkUp()) return Unavailable("went down during hello");
    link_->hello_done = true;
    if (link_->slot) link_->slot->HandshakeDone();
    return Status::OK();
  }

  Core* core_;
  const uint64_t id_;
  Link* link_ = nullptr;  // the current call's
};

rp::Peer::Client MakePeerServer(Core* core, Link* link) { return kj::heap<PeerServer>(core, link); }

}  // namespace detail
}  // namespace net
}  // namespace sf
