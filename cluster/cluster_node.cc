// ClusterNode: one member of a cluster (include/shardflow/cluster.h). It serves its
// peers' messages (Cap'n Proto RPC over mutual TLS, net/peer_rpc.h, each a
// method of net/peer_handler.h's Handler): membership, partition registration and steps, tensors
// for its rendezvous, step aborts. Each cluster session's partitions live in
// one partition host actor (actors/partition_host.h, the same actor a local
// Session uses) and run in executors on the node's compute pool; variables
// live in the node's variable shard actors, shared by every session whose
// graphs name them; queues in queue actors.
#include "cluster/admin_endpoint.h"
#include "cluster/node_impl.h"

namespace sf {

ClusterNode::Impl::Impl(NodeOptions o)
    : opts(std::move(o)),
      checkpoints(runtime::NewRootedCheckpointService(opts.checkpoint_root)),
      pool(opts.compute_threads) {
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", static_cast<size_t>(2));
  system = std::make_unique<caf::actor_system>(cfg);
  variables = std::make_unique<runtime::ActorVariables>(*system, std::set<std::string>{});
  variables->SetComputePool(&pool);
  variables->SetColdRoot(opts.data_root);  // every cold tier opened here is under --data-dir
  queues = std::make_unique<runtime::ActorQueues>(*system);
  quotas = std::make_shared<NamespaceQuotas>(
      NamespaceLimits{opts.ns_max_variables, opts.ns_max_tables, opts.ns_max_queues, opts.ns_max_bytes});
  variables->SetQuotas(quotas);
  queues->SetQuotas(quotas);
  StoreChunkQueues();
  node_checkpoints = std::make_unique<cluster::NodeCheckpoints>(cluster::NodeCheckpoints::Hooks{
      opts.checkpoint_root, opts.name,
      [this](const std::vector<std::string>& names, std::function<void(cluster::NodeCheckpoints::Values)> done) {
        variables->ReadNamed(names, std::move(done));
      },
      [this](cluster::NodeCheckpoints::Values values, std::function<void(Status)> done) {
        variables->AssignNamed(std::move(values), std::move(done));
      }});
  collectives = std::make_unique<runtime::ClusterCollectives>(
      *system, runtime::ClusterCollectivesHooks{
                   // The hub is an actor on the CAF threads the variable
                   // shards share: it must never wait on a dial.
                   [this](const std::string& to, net::CollectiveChunk c) {
                     return router.SendOrQueue(to, std::move(c), nullptr).status();
                   },
                   [this](const std::string& to, net::CollectiveAnnounce a) {
                     return router.SendOrQueue(to, std::move(a), nullptr).status();
                   },
                   [this] {
                     std::vector<std::string> out;
                     for (const auto& m : view.Members()) out.push_back(m.address);
                     return out;
                   },
                   [this](const std::string& line) { LogLimited("collectives", line); }});
  variables->SetAllReduce([this](const std::string& key, int64_t n, int64_t rank, Tensor v,
                                 std::function<void(Result<Tensor>)> done) {
    collectives->AllReduce(key, n, rank, std::move(v), std::move(done));
  });
}

void ClusterNode::Impl::Log(const std::string& line) const {
  // Stamped with the steady clock's seconds, which every process of a
  // machine shares: a local cluster's logs interleave into one timeline.
  if (opts.log) std::fprintf(stderr, "[%.3f] shardflow node %s: %s\n", NowMs() / 1e3, opts.name.c_str(), line.c_str());
}

void ClusterNode::Impl::LogLimited(const char* kind, const std::string& line) {
  const int64_t now = NowMs();
  int64_t skipped = 0;
  {
    std::lock_guard<std::mutex> l(log_mu);
    auto& [last_ms, quiet] = log_limits[kind];
    if (last_ms != 0 && now - last_ms < 1000) {
      ++quiet;
      return;
    }
    last_ms = now;
    skipped = quiet;
    quiet = 0;
  }
  Log(skipped ? line + " (and " + std::to_string(skipped) + " more like it)" : line);
}

void ClusterNode::Impl::OnMembers(const std::vector<cluster::MemberRecord>& records) {
  {
    std::lock_guard<std::mutex> l(mu);
    if (stopped) return;
  }
  member_addresses.Update(records);  // registrations waiting for a member that just joined go on
  if (auto* p = placement_ready.load()) p->SetMembers(records);
  bool drain_me = false;
  const bool changed = view.Update(records, &drain_me, [this](const std::string& line) { Log(line); });
  if (drain_me) StartDrain();
  if (changed) view.NotifyWatchers();
}

bool ClusterNode::Impl::HoldsSlots() const {
  cluster::PlacementLeader* pl = placement_ready.load();
  if (!pl) return false;
  const cluster::ShardMap m = pl->Map();
  for (size_t s = 0; s < m.holder.size(); ++s)
    if (m.holder[s] == address || (s < m.from.size() && m.from[s] == address)) return true;
  return false;
}

void ClusterNode::Impl::StartDrain() {
  {
    std::lock_guard<std::mutex> l(mu);
    if (draining || stopped) return;
    draining = true;
  }
  view.MarkSelfLeaving();
  Log("draining: waiting for sessions to move away");
  // Gone once no session uses the node and the map gives its slots to
  // others (each was copied to its new holder while served here).
  const int64_t deadline = NowMs() + opts.drain_timeout_ms;
  timers.Add("drain", [this, deadline](int64_t now) { return DrainTick(now, deadline); });
}

int64_t ClusterNode::Impl::DrainTick(int64_t now_ms, int64_t deadline_ms) {
  std::lock_guard<std::mutex> l(mu);
  if (left) return cluster::TimerLoop::kNever;
  const bool drained = stopped || (sessions.empty() && admission.Idle() && !HoldsSlots());
  if (!drained && now_ms < deadline_ms) return now_ms + kDrainCheckMs;
  if (!drained) Log("drain timeout: leaving with " + std::to_string(sessions.size()) + " sessions");
  left = true;
  idle.notify_all();
  return cluster::TimerLoop::kNever;
}

// Cheap and never blocking: a tensor into the rendezvous (its waiter
// continues on the compute pool), an abort or cleanup, an echo, an
// all-reduce piece (posted to the collectives hub), a partition's step (its
// feeds checked against the partition, its ops started on the compute pool:
// a hop through a handler thread was on every step's critical path).
bool ClusterNode::Impl::OnIoThread(const std::type_info& m) const {
  return m == typeid(net::RunPartition) || m == typeid(net::SendTensor) || m == typeid(net::AbortStep) ||
         m == typeid(net::CleanupStep) || m == typeid(net::Echo) || m == typeid(net::CollectiveChunk) ||
         m == typeid(net::CollectiveAnnounce);
}

void ClusterNode::Impl::OnTensor(const net::ConnectionPtr& c, net::SendTensor t) {
  // Partitions run on nodes only: a session has no tensor to send a node.
  if (c->peer_role() != net::Role::kNode)
    return LogLimited("session tensor", "dropped a tensor from session " + c->peer_address() +
                                            ": only nodes send tensors between partitions");
  Status admitted = AdmitPeerStep(t.step_id, t.value.valid() ? static_cast<int64_t>(t.value.bytes()) : 0, &t.session_id);
  if (!admitted.ok())
    return LogLimited("refused tensor", "dropped a tensor from " + c->peer_address() + ": " + admitted.message());
  RendezvousKey key{t.step_id, std::move(t.edge), std::move(t.frame), t.iteration};
  // The receiving step's cheap ops that follow (an update by a scalar, a
  // send back) run here instead of waking the pool.
  runtime::InlineCheapOps cheap;
  Status s = rendezvous.Send(key, std::move(t.value), t.is_dead);
  if (!s.ok() && s.code() != Code::kAborted) Log("tensor from " + c->peer_address() + ": " + s.ToString());
}

void ClusterNode::Impl::OnAbort(const net::ConnectionPtr& c, net::AbortStep a) {
  if (ForeignStep(c, a.session_id, a.step_id))
    return LogLimited("foreign abort", "dropped an abort of step " + std::to_string(a.step_id) + " from session " +
                                           c->peer_address() + ": the step is another client's");
  Status admitted = AdmitPeerStep(a.step_id, 0);
  if (!admitted.ok())
    return LogLimited("early abort", "dropped an abort from " + c->peer_address() + ": " + admitted.message());
  // A step may outlive its closed session: its table is the node's.
  if (auto host = HostOf(a.session_id)) host->Abort(a.step_id, a.status);
  else rendezvous.Abort(a.step_id, a.status);
}

void ClusterNode::Impl::OnCleanup(const net::ConnectionPtr& c, net::CleanupStep a) {
  bool foreign = false;
  {
    std::lock_guard<std::mutex> l(mu);
    // Only the session's own client ends its steps (a closed session's
    // late cleanup still frees what its steps left).
    foreign = sessions.IsOthers(a.session_id, c.get()) || ForeignStepLocked(c, a.step_id);
    if (!foreign) early.End(a.step_id);
  }
  if (foreign)
    return LogLimited("foreign cleanup", "dropped a cleanup of step " + std::to_string(a.step_id) + " from " +
                                             c->peer_address() + ": session " + std::to_string(a.session_id) +
                                             " or the step is another client's");
  if (auto host = HostOf(a.session_id)) host->Cleanup(a.step_id);
  else rendezvous.Cleanup(a.step_id);
}

void ClusterNode::Impl::ServeMembers(const net::ConnectionPtr& c, net::Answer<net::Membership> done) {
  view.Watch(c);
  done(view.Snapshot());
}

void ClusterNode::Impl::ServeCloseSession(const net::ConnectionPtr& c, net::CloseSession cs,
                                          net::Answer<net::StatusReply> done) {
  {
    std::lock_guard<std::mutex> l(mu);
    // Only its own client closes a session (an unknown one is closed already).
    sessions.Close(cs.session_id, c.get());
    idle.notify_all();
  }
  done(Status::OK());
}

void ClusterNode::Impl::ServeEcho(const net::ConnectionPtr&, net::Echo e, net::Answer<net::Echo> done) {
  done(std::move(e));
}

void ClusterNode::Impl::OnChunk(const net::ConnectionPtr& c, net::CollectiveChunk cc) {
  // All-reduce rings run between nodes; a session takes no part.
  if (c->peer_role() != net::Role::kNode)
    return LogLimited("session chunk", "dropped an all-reduce chunk from session " + c->peer_address() +
                                           ": only nodes take part in collectives");
  collectives->OnChunk(c.get(), std::move(cc));
}

void ClusterNode::Impl::OnAnnounce(const net::ConnectionPtr& c, net::CollectiveAnnounce ca) {
  if (c->peer_role() != net::Role::kNode)
    return LogLimited("session chunk", "dropped an all-reduce announcement from session " + c->peer_address() +
                                           ": only nodes take part in collectives");
  collectives->OnAnnounce(c.get(), std::move(ca));
}

void ClusterNode::Impl::OnDown(const net::ConnectionPtr& c, const Status& why) {
  const std::string lost = router.Forget(c.get());
  if (lost.empty()) Log("connection from " + c->peer_address() + " (" + net::RoleName(c->peer_role()) + ") is down: " + why.message());
  std::set<int64_t> orphaned;
  {
    std::lock_guard<std::mutex> l(mu);
    if (stopped) return;
    // A client that went away closes its sessions (running steps keep
    // what they use alive until they finish).
    sessions.CloseClient(c.get());
    // Its running steps can deliver nothing and get no AbortStep: a part
    // waiting for a tensor of a partition the client never started would
    // wait (and hold its step's state) forever.
    orphaned = admission.StepsOf(c.get());
    // etcd decides who is a member: report the peer, whose lease ends
    // (a killed node is gone for everyone at once, not after its TTL).
    if (!lost.empty())
      if (auto* r = registry_ready.load()) r->ReportDownLater(lost);
    idle.notify_all();
  }
  collectives->OnPeerDown(c.get(), lost, why);
  for (int64_t step : orphaned) {
    const Status gone = Aborted("step " + std::to_string(step) + " aborted: its client " + c->peer_address() +
                                " went away (" + why.message() + ")");
    rendezvous.Abort(step, gone);
    // A step blocked on a queue waits on no tensor: the abort above would
    // not reach it, and it would hold its wait (and take the queue's next
    // element) for good.
    queues->CancelStep(step, gone);
  }
  if (!lost.empty()) Log("connection to member " + lost + " is down: " + why.message());
}

void ClusterNode::Impl::Stop() {
  {
    std::lock_guard<std::mutex> l(mu);
    if (stopped) return;
    stopped = true;
    if (draining) left = true;  // its drain timer stops with the node
    admission.Close();  // under mu with stopped: Run, under mu too, sees both or neither
  }
  // No more placement work (a leader resigns), then gone from etcd:
  // members and sessions see it leave at once.
  if (placement) placement->Stop();
  if (registry) registry->Leave();
  idle.notify_all();
  member_addresses.Close();
  router.Stop();
  timers.Stop();
  endpoint->Shutdown();
  registrar.Stop();  // after the endpoint: no registration comes any more
  // Fail what running steps wait on (queues, tensors from peers that can no
  // longer arrive) and wait for them: they use the queues, variables and
  // rendezvous that Stop and the destructor tear down.
  queues->Shutdown();
  const std::set<int64_t> steps = admission.RunningSteps();
  for (int64_t step : steps)
    rendezvous.Abort(step, Unavailable("step " + std::to_string(step) + ": node " + opts.name +
                                       " is stopping"));
  collectives->FailAll(Unavailable("node " + opts.name + " is stopping"));
  admission.WaitIdle();
  {
    std::lock_guard<std::mutex> l(mu);
    sessions.Clear();
  }
  router.Clear();
  for (int64_t step : steps) rendezvous.Cleanup(step);
  node_checkpoints->Stop();  // it reads and assigns variables
  movers.Stop();             // so do slot moves
  replicas.reset();          // and replication rounds
  variables->Shutdown();
  queues->Stop();
  // As Session: stop the actors now. Members die in reverse order, which
  // would free the variables and queues while their actors still run.
  collectives->Stop();
  system.reset();
}

Result<std::unique_ptr<ClusterNode>> ClusterNode::Start(NodeOptions opts) {
  ForgetCafThreadLogger forget;  // the system is made and spawns on the caller's thread
  std::string host;
  uint16_t port = 0;
  SF_RETURN_IF_ERROR(net::ParseAddress(opts.listen, &host, &port).WithPrefix("--listen"));
  if (opts.copy_mib_per_s < 0)
    return InvalidArgument("--copy-mib-per-s " + std::to_string(opts.copy_mib_per_s) + " is negative (0: unlimited)");
  if (opts.replicas < 1 || opts.replicas > 2)
    return InvalidArgument("--replicas " + std::to_string(opts.replicas) + ": 1 (none) or 2 (a backup of every slot)");
  auto impl = std::make_unique<Impl>(opts);
  Impl* p = impl.get();
  net::EndpointOptions to;
  to.tls_dir = opts.tls_dir;
  to.tls_name = opts.tls_name;
  to.insecure = opts.insecure;
  to.role = net::Role::kNode;
  to.heartbeat_ms = opts.heartbeat_ms;
  to.peer_timeout_ms = opts.peer_timeout_ms;
  to.max_peer_buffer_bytes = static_cast<uint64_t>(std::max<int64_t>(opts.max_peer_buffer_bytes, 1 << 20));
  to.max_connections = opts.max_connections;
  to.max_connections_per_credential = opts.max_connections_per_credential;
  to.max_connections_per_source = opts.max_connections_per_source;
  to.log = true;
  if (opts.insecure)
    std::fprintf(stderr, "shardflow node: WARNING: --insecure: peers are not authenticated and traffic is plaintext\n");
  SF_ASSIGN_OR_RETURN(
      impl->endpoint,
      net::Endpoint::Create(to, p, [p](const net::ConnectionPtr& c, const Status& s) { p->OnDown(c, s); }));
  SF_ASSIGN_OR_RETURN(uint16_t bound, impl->endpoint->Listen(host, port));
  impl->address = host + ":" + std::to_string(bound);
  impl->collectives->SetAddress(impl->address);
  if (impl->etcd_mode() && !opts.insecure) {
    // A node with a credential of its own registers only under its certificate's name.
    const std::string tls_name = opts.tls_name.empty() ? "node" : opts.tls_name;
    SF_ASSIGN_OR_RETURN(net::Credential cred, net::LoadCredential(opts.tls_dir, tls_name));
    SF_ASSIGN_OR_RETURN(impl->opts.name, cluster::MemberNameFromCredential(cred, impl->opts.name));
  }
  if (impl->opts.name.empty()) impl->opts.name = "node@" + impl->address;
  // Its life (incarnation) is its key's revision in etcd, set once registered.
  impl->view.SetSelf(impl->opts.name, impl->address);
  std::unique_ptr<ClusterNode> node(new ClusterNode(std::move(impl)));
  p->timers.Start();
  if (!opts.etcd.empty()) {
    // etcd holds the membership: register under a lease and follow the members' keys.
    cluster::MemberRegistryOptions ro;
    ro.etcd = opts.etcd;
    ro.cluster = opts.cluster.empty() ? "default" : opts.cluster;
    ro.name = p->opts.name;
    ro.address = p->address;
    ro.lease_ttl_s = opts.lease_ttl_s;
    ro.request_timeout_ms = 5000;
    std::optional<net::Credential> credential;
    if (!opts.insecure) {
      auto cred = net::LoadCredential(opts.tls_dir, opts.tls_name.empty() ? "node" : opts.tls_name);
      if (!cred.ok()) return cred.status().WithPrefix("etcd credential");
      credential = std::move(*cred);
    }
    ro.credential = credential;
    ro.on_change = [p](const std::vector<cluster::MemberRecord>& records) { p->OnMembers(records); };
    ro.on_replaced = [p](const std::string& holder) {
      std::lock_guard<std::mutex> l(p->mu);
      p->replaced_by = holder;
      p->left = true;
      p->idle.notify_all();
    };
    ro.log = [p](const std::string& line) { p->Log(line); };
    // A peer reported down is asked first, on a connection of its own (a
    // failed dial through the router would keep steps from dialing it for a
    // while): a killed one refuses it at once, a hung one does not answer
    // within the peer timeout.
    ro.answers = [p](const std::string& addr) {
      auto c = p->endpoint->Connect(addr);
      if (!c.ok()) return false;
      const bool answered = net::Call(*c, net::ListMembers{}, std::max(1, p->opts.peer_timeout_ms)).ok();
      (*c)->Close();
      return answered;
    };
    auto registry = cluster::MemberRegistry::Start(std::move(ro));
    if (!registry.ok()) return registry.status().WithPrefix("node " + p->opts.name + " joining through etcd " + opts.etcd);
    p->registry = std::move(*registry);
    p->registry_ready = p->registry.get();
    // The shard map: followed by every node, computed by the one elected.
    Status placed = p->StartPlacement(credential);
    if (!placed.ok()) return placed.WithPrefix("node " + p->opts.name + " following the shard map");
    p->placement_ready = p->placement.get();
    p->placement->SetMembers(p->member_addresses.Latest());
  } else {
    p->Log("no --etcd: a cluster of this node alone");
  }
  return node;
}

ClusterNode::ClusterNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterNode::~ClusterNode() { Stop(); }
void ClusterNode::Stop() { impl_->Stop(); }
const std::string& ClusterNode::address() const { return impl_->address; }
const std::string& ClusterNode::name() const { return impl_->opts.name; }

bool ClusterNode::WaitLeft(int timeout_ms) {
  std::unique_lock<std::mutex> l(impl_->mu);
  return impl_->idle.wait_for(l, std::chrono::milliseconds(std::max(0, timeout_ms)), [&] { return impl_->left; });
}

void ClusterNode::Drain() {
  impl_->StartDrain();
  if (impl_->registry) {
    // Every node and session learns it from etcd.
    Status s = impl_->registry->SetLeaving();
    if (!s.ok()) impl_->Log("draining: " + s.ToString());
  }
  impl_->view.NotifyWatchers();
}

std::string ClusterNode::ReplacedBy() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->replaced_by;
}

std::vector<std::string> ClusterNode::Members() const {
  std::vector<std::string> out;
  for (const auto& m : impl_->view.Members()) out.push_back(m.address);
  return out;
}

Status InitClusterCredentials(const std::string& dir) { return net::InitCredentials(dir); }

Status IssueClusterCredential(const std::string& dir, const std::string& role, const std::string& name,
                              const std::vector<std::string>& hosts, const std::string& ns) {
  SF_ASSIGN_OR_RETURN(net::Role r, net::ParseRole(role));
  return net::IssueCredential(dir, r, name, hosts, ns);
}

Result<std::string> MakeTemporaryClusterCredentials() { return net::MakeTemporaryCredentials(); }

Result<std::vector<MemberInfo>> ListClusterMembers(const std::string& address, const std::string& tls_dir,
                                                   const std::string& tls_name, bool insecure) {
  SF_ASSIGN_OR_RETURN(auto endpoint, cluster::AdminEndpoint(tls_dir, tls_name, insecure));
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, endpoint->Connect(address));
  SF_ASSIGN_OR_RETURN(net::Membership mem, net::Call(c, net::ListMembers{}, 10000));
  std::vector<MemberInfo> out;
  for (const net::Member& m : mem.members) {
    bool draining = false;
    for (const net::Member& d : mem.leaving) draining = draining || d.address == m.address;
    out.push_back({m.name, m.address, m.incarnation, draining ? "leaving" : "alive"});
  }
  c->Close();
  endpoint->Shutdown();
  return out;
}

}  // namespace sf
