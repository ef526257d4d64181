// ClusterNode: one member of a cluster (include/shardflow/cluster.h). It serves its
// peers' messages (Cap'n Proto RPC over mutual TLS, net/peer_rpc.h): membership, partition registration and steps, tensors
// for its rendezvous, step aborts. Each cluster session's partitions live in
// one partition host actor (actors/partition_host.h, the same actor a local
// Session uses) and run in executors on the node's compute pool; variables
// live in the node's variable shard actors, shared by every session whose
// graphs name them; queues in queue actors.
#include <caf/all.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "actors/caf_thread_logger.h"
#include "cluster/cluster_collectives.h"
#include "actors/checkpoint_io.h"
#include "cluster/cluster_rendezvous.h"
#include "cluster/member_registry.h"
#include "cluster/member_view.h"
#include "cluster/peer_router.h"
#include "actors/partition_host.h"
#include "runtime/executor.h"
#include "runtime/plan.h"
#include "actors/queue_actors.h"
#include "runtime/rendezvous.h"
#include "actors/variable_shards.h"
#include "shardflow/graph_io.h"
#include "kernels/compute_pool.h"
#include "net/credentials.h"
#include "net/peer_rpc.h"
#include "shardflow/cluster.h"

namespace sf {

namespace {

// A cluster session's share of the node: its rendezvous (task addresses
// for its _Sends) and the host of its partitions.
struct SessionState {
  const net::Connection* client = nullptr;  // the session is dropped when it goes down
  std::set<uint64_t> handles;               // its registered partitions (bounded)
  std::shared_ptr<runtime::ClusterRendezvous> rendezvous;
  std::shared_ptr<runtime::PartitionHost> host;  // the last reference stops its actor
};

// What a registered partition's executor points into: its graph and its
// session's rendezvous. Steps hold it, so closing a session never pulls
// either from under a step.
struct PartitionGraphs {
  std::shared_ptr<runtime::ClusterRendezvous> rendezvous;
  std::unique_ptr<Graph> graph;
};

// Calls the overload of fns that takes the variant's alternative.
template <class... Fns>
struct Overloaded : Fns... {
  using Fns::operator()...;
};
template <class... Fns>
Overloaded(Fns...) -> Overloaded<Fns...>;

// Finds output `ref` of g; InvalidArgument naming it otherwise.
Result<Output> FindRef(Graph& g, const net::OutputRef& ref) {
  auto id = g.FindNode(ref.node);
  if (!id.ok()) return InvalidArgument("partition has no node '" + ref.node + "'");
  if (ref.index < 0 || ref.index >= static_cast<int>(g.node(*id).output_dtypes.size()))
    return InvalidArgument("node '" + ref.node + "' has no output " + std::to_string(ref.index));
  return Output(&g, *id, ref.index);
}

}  // namespace

struct ClusterNode::Impl {
  NodeOptions opts;
  std::string address;
  std::unique_ptr<CheckpointService> checkpoints;  // rooted at opts.checkpoint_root
  std::unique_ptr<net::Endpoint> endpoint;
  ComputePool pool;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<runtime::ActorVariables> variables;
  std::unique_ptr<runtime::ActorQueues> queues;
  runtime::LocalRendezvous rendezvous;
  std::unique_ptr<runtime::ClusterCollectives> collectives;  // all-reduce rings between nodes

  // The membership client when the cluster's membership is in etcd
  // (--etcd): members come from it alone, and none of the gossip below runs.
  std::unique_ptr<cluster::MemberRegistry> registry;
  // The same, for handlers that may run while Start still sets it up.
  std::atomic<cluster::MemberRegistry*> registry_ready{nullptr};
  bool etcd_mode() const { return !opts.etcd.empty(); }
  // What sessions are told of the membership (its own lock).
  cluster::MemberView view{net::Member{}};
  // Connections to the other members, and messages waiting for a dial (its own lock).
  cluster::PeerRouter router{cluster::PeerRouter::Hooks{
      [this] { return opts.name; },
      [this](const std::string& addr) { return endpoint->Connect(addr); },
      [this](const std::string& to, const Status& why) { collectives->OnPeerDown(nullptr, to, why); }}};

  mutable std::mutex mu;
  std::map<uint64_t, SessionState> sessions;           // GUARDED_BY(mu)
  bool stopped = false;                                // GUARDED_BY(mu)
  // Steps whose partitions run here: Stop aborts them and waits, because the
  // queues, variables and rendezvous they use die with the node.
  std::multimap<int64_t, const net::Connection*> running;  // GUARDED_BY(mu): step -> client
  std::unordered_map<const net::Connection*, size_t> running_per_client;  // GUARDED_BY(mu)
  std::condition_variable idle;                        // running or sessions shrank, or stopping
  bool draining = false;                               // GUARDED_BY(mu)
  bool left = false;                                   // GUARDED_BY(mu): drained or replaced, may exit
  std::string replaced_by;                             // GUARDED_BY(mu): the node that took this one's place
  std::thread drain_thread;                            // waits for sessions to move away
  std::thread housekeeping_thread;                     // expires early steps
  // Drain requests of peer nodes, handled in order by the membership thread
  // (they write to etcd, which a handler thread must not wait on).
  struct MembershipJob {
    net::ConnectionPtr from;
    uint64_t request_id = 0;
    net::Membership membership;
  };
  std::deque<MembershipJob> membership_jobs;           // GUARDED_BY(mu)
  std::condition_variable membership_cv;               // a job came, or stopping
  std::thread membership_thread;
  // Steps peers sent tensors or aborts for that run no partition here (yet:
  // a peer's tensor may beat the session's RunPartition). What they hold is
  // bounded (kMaxEarlySteps, kMaxEarlyBytes) and expires after
  // kEarlyStepTtlMs, so a peer cannot fill the node with steps that never run.
  struct EarlyStep {
    int64_t first_ms = 0;
    int64_t bytes = 0;
  };
  std::map<int64_t, EarlyStep> early_steps;            // GUARDED_BY(mu)
  // Steps their session cleaned up here, the latest kMaxEndedSteps: every
  // Recv of an ended step has its tensor, so one arriving now (a late send
  // of an aborted step, or a peer's junk) is refused, not held for
  // kEarlyStepTtlMs under the early-step budget.
  std::unordered_set<int64_t> ended_steps;             // GUARDED_BY(mu)
  std::deque<int64_t> ended_order;                     // GUARDED_BY(mu): oldest first
  static constexpr size_t kMaxEndedSteps = 65536;
  // Steps whose client asked for progress reports (RunPartition.progress_ms):
  // the executor sets `finished` when an op finished, and the progress
  // thread clears it and tells the client, at most every interval_ms.
  struct Watched {
    std::weak_ptr<net::Connection> client;
    uint64_t session_id = 0;
    int64_t step = 0;
    int interval_ms = 0;
    std::atomic<uint64_t> finished{0};
    uint64_t reports = 0;     // progress thread only
    int64_t reported_ms = 0;  // progress thread only
  };
  std::set<std::shared_ptr<Watched>> watched;          // GUARDED_BY(mu)
  std::condition_variable watch_cv;                    // watched grew, or stopping
  std::thread progress_thread;
  int64_t early_bytes = 0;                             // GUARDED_BY(mu)
  static constexpr size_t kMaxEarlySteps = 4096;
  static constexpr int64_t kMaxEarlyBytes = int64_t{1} << 30;
  static constexpr int64_t kEarlyStepTtlMs = 60000;
  static constexpr int kMinProgressMs = 20;
  static constexpr size_t kMaxMembershipJobs = 256;
  static constexpr size_t kMaxSessionsPerClient = 256;
  static constexpr size_t kMaxSessions = 4096;
  static constexpr size_t kMaxPartitionsPerSession = 4096;
  static constexpr size_t kMaxPartitions = 65536;
  // Partition runs one client may have going here at once: each holds a
  // step's state (and maybe a wait on a queue) until it ends.
  static constexpr size_t kMaxRunningPerClient = 1024;
  explicit Impl(NodeOptions o)
      : opts(std::move(o)),
        checkpoints(runtime::NewRootedCheckpointService(opts.checkpoint_root)),
        pool(opts.compute_threads) {
    cfg.set("scheduler.policy", caf::atom("sharing"));
    cfg.set("scheduler.max-threads", static_cast<size_t>(2));
    system = std::make_unique<caf::actor_system>(cfg);
    variables = std::make_unique<runtime::ActorVariables>(*system, std::set<std::string>{});
    variables->SetComputePool(&pool);
    queues = std::make_unique<runtime::ActorQueues>(*system);
    collectives = std::make_unique<runtime::ClusterCollectives>(
        *system, runtime::ClusterCollectivesHooks{
                     [this](const std::string& to, const net::Message& m) { return SendFromHub(to, m); },
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

  void Log(const std::string& line) const {
    if (opts.log) std::fprintf(stderr, "shardflow node %s: %s\n", opts.name.c_str(), line.c_str());
  }

  // Logs line at most once a second per kind (a fixed string), with how many
  // were not logged: a peer's flood of refused messages must not become one
  // of log lines.
  void LogLimited(const char* kind, const std::string& line) {
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
  std::mutex log_mu;
  std::map<std::string, std::pair<int64_t, int64_t>> log_limits;  // GUARDED_BY(log_mu): kind -> last ms, not logged

  // The all-reduce hub's sends. The hub is an actor on the CAF threads the
  // variable shards share, so it must never wait on a dial.
  Status SendFromHub(const std::string& to, const net::Message& m) {
    return router.SendOrQueue(to, m, nullptr).status();
  }

  // Membership requests of peer nodes, in order, on their own thread (a
  // drain writes to etcd, which a handler must not wait on). etcd holds the
  // membership: a node asks this one only to drain itself.
  void MembershipLoop() {
    std::unique_lock<std::mutex> l(mu);
    while (true) {
      membership_cv.wait(l, [&] { return stopped || !membership_jobs.empty(); });
      if (stopped) break;
      MembershipJob job = std::move(membership_jobs.front());
      membership_jobs.pop_front();
      l.unlock();
      bool drain_me = false;
      for (const net::Member& m : job.membership.leaving) drain_me = drain_me || m.address == address;
      Status s;
      if (drain_me) {
        StartDrain();
        auto* r = registry_ready.load();
        if (r) s = r->SetLeaving();
        else if (etcd_mode()) s = Unavailable("node " + opts.name + " is still registering in etcd");
        view.NotifyWatchers();
      } else {
        s = FailedPrecondition("node " + opts.name + " keeps no membership of its own: its cluster's members are " +
                               "the nodes registered in etcd (start nodes with --etcd)");
      }
      if (s.ok()) Reply(job.from, job.request_id, view.Snapshot());
      else Reply(job.from, job.request_id, net::StatusReply{s});
      l.lock();
    }
  }


  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void ForgetEarlyLocked(int64_t step) {
    auto it = early_steps.find(step);
    if (it == early_steps.end()) return;
    early_bytes -= it->second.bytes;
    early_steps.erase(it);
  }

  // True when c, a session's client, names a step running here for another
  // client: whatever session id it gives, it may not end or abort that step
  // (nodes may: a step's parts on other nodes abort it). REQUIRES: mu held.
  bool ForeignStepLocked(const net::ConnectionPtr& c, int64_t step) const {
    if (c->peer_role() == net::Role::kNode) return false;
    auto [b, e] = running.equal_range(step);
    for (auto it = b; it != e; ++it)
      if (it->second != c.get()) return true;
    return false;
  }
  // ForeignStepLocked, or c naming a session that is another client's.
  bool ForeignStep(const net::ConnectionPtr& c, uint64_t session_id, int64_t step) {
    if (c->peer_role() == net::Role::kNode) return false;
    std::lock_guard<std::mutex> l(mu);
    auto s = sessions.find(session_id);
    return (s != sessions.end() && s->second.client != c.get()) || ForeignStepLocked(c, step);
  }

  // Admits a peer's tensor (or abort) for a step; false, with why, when a
  // tensor's session (if given) has no partition here, or the step runs
  // nothing here and the budget for such steps is spent.
  bool AdmitPeerStep(int64_t step, int64_t bytes, std::string* why, const uint64_t* session = nullptr) {
    std::lock_guard<std::mutex> l(mu);
    if (session) {
      auto s = sessions.find(*session);
      if (s == sessions.end() || !s->second.host) {
        *why = "session " + std::to_string(*session) + " has no partition on node " + opts.name;
        return false;
      }
    }
    if (running.count(step)) return true;
    if (ended_steps.count(step)) {
      *why = "step " + std::to_string(step) + " has ended on node " + opts.name;
      return false;
    }
    auto it = early_steps.find(step);
    if (it == early_steps.end()) {
      if (early_steps.size() >= kMaxEarlySteps) {
        *why = "step " + std::to_string(step) + " runs no partition here and " + std::to_string(kMaxEarlySteps) +
               " such steps are waiting already";
        return false;
      }
      it = early_steps.emplace(step, EarlyStep{NowMs(), 0}).first;
    }
    if (early_bytes + bytes > kMaxEarlyBytes) {
      *why = "step " + std::to_string(step) + " runs no partition here and tensors of such steps hold " +
             std::to_string(early_bytes) + " bytes already";
      return false;
    }
    it->second.bytes += bytes;
    early_bytes += bytes;
    return true;
  }

  // Forgets early steps that never ran within kEarlyStepTtlMs (mu held).
  void ExpireEarlyLocked(std::vector<int64_t>* expired) {
    const int64_t now = NowMs();
    for (auto it = early_steps.begin(); it != early_steps.end();) {
      if (now - it->second.first_ms < kEarlyStepTtlMs) {
        ++it;
        continue;
      }
      expired->push_back(it->first);
      early_bytes -= it->second.bytes;
      it = early_steps.erase(it);
    }
  }

  // Forgets, every 250 ms, the steps peers sent tensors for that never
  // ran here (kEarlyStepTtlMs), until the node stops.
  void HousekeepingLoop() {
    std::unique_lock<std::mutex> l(mu);
    while (!stopped) {
      idle.wait_for(l, std::chrono::milliseconds(250), [&] { return stopped; });
      if (stopped) break;
      std::vector<int64_t> expired;
      ExpireEarlyLocked(&expired);
      if (expired.empty()) continue;
      l.unlock();
      for (int64_t step : expired) rendezvous.Cleanup(step);
      Log("forgot " + std::to_string(expired.size()) + " steps that peers sent tensors for but never ran here");
      l.lock();
    }
  }

  // The members etcd lists now (registry's thread): sessions are told of a
  // change, and a node etcd says is draining starts to.
  void OnMembers(const std::vector<cluster::MemberRecord>& records) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (stopped) return;
    }
    bool drain_me = false;
    const bool changed = view.Update(records, &drain_me, [this](const std::string& line) { Log(line); });
    if (drain_me) StartDrain();
    if (changed) view.NotifyWatchers();
  }

  // Starts leaving the cluster: sessions move this node's tasks away (they
  // are told), and once none uses the node (or after the drain timeout) it
  // has left and its process may exit.
  void StartDrain() {
    {
      std::lock_guard<std::mutex> l(mu);
      if (draining || stopped) return;
      draining = true;
    }
    view.MarkSelfLeaving();
    Log("draining: waiting for sessions to move away");
    drain_thread = std::thread([this] {
      std::unique_lock<std::mutex> l(mu);
      const bool drained = idle.wait_for(l, std::chrono::milliseconds(opts.drain_timeout_ms),
                                         [&] { return stopped || (sessions.empty() && running.empty()); });
      if (!drained) Log("drain timeout: leaving with " + std::to_string(sessions.size()) + " sessions");
      left = true;
      idle.notify_all();
    });
  }

  void Reply(const net::ConnectionPtr& c, uint64_t request_id, net::Body body) {
    if (request_id == 0) return;
    net::Message m;
    m.request_id = request_id;
    m.body = std::move(body);
    Status s = c->Send(m);
    if (s.ok()) return;
    // A reply that cannot be encoded (a tensor too large for a frame) still
    // answers: the requester gets the error instead of waiting for good.
    if (c->is_up()) {
      net::Message e;
      e.request_id = request_id;
      e.body = net::StatusReply{s.WithPrefix("node " + opts.name + " cannot send its reply")};
      if (c->Send(e).ok()) return;
    }
    Log("reply to " + c->peer_address() + " lost: " + s.ToString());
  }

  Status Register(const net::ConnectionPtr& client, const net::RegisterPartition& r) {
    auto graphs = std::make_shared<PartitionGraphs>();
    graphs->graph = std::make_unique<Graph>(opts.ops ? *opts.ops : StandardOpRegistry());
    SF_RETURN_IF_ERROR(GraphFromBytes(r.graph_def, graphs->graph.get(),
                                      "partition " + std::to_string(r.handle) + " for " + r.device));
    Graph& g = *graphs->graph;
    runtime::ExecutorSpec spec;
    std::vector<int> targets;
    for (const auto& f : r.feeds) {
      SF_ASSIGN_OR_RETURN(Output o, FindRef(g, f));
      spec.fed.push_back(o);
    }
    for (const auto& f : r.fetches) {
      SF_ASSIGN_OR_RETURN(Output o, FindRef(g, f));
      spec.fetches.push_back(o);
    }
    for (const std::string& t : r.targets) {
      auto id = g.FindNode(t);
      if (!id.ok()) return InvalidArgument("partition has no target node '" + t + "'");
      targets.push_back(*id);
    }
    SF_ASSIGN_OR_RETURN(spec.nodes, runtime::PruneAndSort(g, spec.fed, spec.fetches, targets));
    std::set<std::string> var_names;
    for (int i = 0; i < g.num_nodes(); ++i) {
      if (g.node(i).op != "VarHandle") continue;
      auto s = g.node(i).attrs.Get<std::string>("shared_name");
      if (s.ok()) var_names.insert(*s);
    }
    variables->AddGraphVariables(var_names);
    std::shared_ptr<runtime::PartitionHost> host;
    {
      std::lock_guard<std::mutex> l(mu);
      // A client that went down meanwhile was already forgotten by OnDown:
      // registering for it would keep the session forever.
      if (!client->is_up()) return Unavailable("client " + client->peer_address() + " went away");
      auto existing = sessions.find(r.session_id);
      if (existing == sessions.end()) {
        // What one client (or all) may make this node hold is bounded.
        size_t mine = 0;
        for (const auto& kv : sessions) mine += kv.second.client == client.get();
        if (mine >= kMaxSessionsPerClient)
          return ResourceExhausted("client " + client->peer_address() + " has " + std::to_string(mine) +
                                   " sessions on node " + opts.name + " already (at most " +
                                   std::to_string(kMaxSessionsPerClient) + ")");
        if (sessions.size() >= kMaxSessions)
          return ResourceExhausted("node " + opts.name + " holds " + std::to_string(sessions.size()) +
                                   " sessions already (at most " + std::to_string(kMaxSessions) + ")");
      } else if (existing->second.client != client.get()) {
        return PermissionDenied("session " + std::to_string(r.session_id) + " on node " + opts.name +
                                " belongs to another client");
      } else if (!existing->second.handles.count(r.handle) &&
                 existing->second.handles.size() >= kMaxPartitionsPerSession) {
        return ResourceExhausted("session " + std::to_string(r.session_id) + " has " +
                                 std::to_string(kMaxPartitionsPerSession) + " partitions on node " + opts.name +
                                 " already");
      }
      if (existing == sessions.end() || !existing->second.handles.count(r.handle)) {
        size_t partitions = 0;
        for (const auto& kv : sessions) partitions += kv.second.handles.size();
        if (partitions >= kMaxPartitions)
          return ResourceExhausted("node " + opts.name + " holds " + std::to_string(partitions) +
                                   " partitions already (at most " + std::to_string(kMaxPartitions) + ")");
      }
      SessionState& ss = sessions[r.session_id];
      ss.handles.insert(r.handle);
      if (!ss.host) {
        std::vector<std::string> tasks;
        for (const auto& t : r.tasks) tasks.push_back(t.address);
        ss.client = client.get();
        ss.rendezvous = std::make_shared<runtime::ClusterRendezvous>(
            &rendezvous, address, std::move(tasks), r.session_id,
            [this](const std::string& to, const net::Message& m, std::function<void(Status)> later) {
              return router.SendOrQueue(to, m, std::move(later));
            });
        runtime::PartitionHostOptions ho;
        ho.env = runtime::ActorExecutorEnv(opts.kernels, &pool, variables.get(), queues.get(), ss.rendezvous.get(),
                                           checkpoints.get());
        ho.env.max_tensor_bytes = opts.max_tensor_bytes;
        ho.steps = &rendezvous;
        // Kernels trust their inputs: a peer's feeds are checked as a local
        // session checks its caller's.
        ho.check_feeds = true;
        ho.name = "node " + opts.name;
        ForgetCafThreadLogger forget;  // spawned on a connection handler thread
        ss.host = runtime::NewLocalPartitionHost(*system, std::move(ho));
      }
      graphs->rendezvous = ss.rendezvous;
      host = ss.host;
    }
    // Blocks this reader thread while the host builds the executor, as
    // building it here did: the registration's reply follows it.
    SF_RETURN_IF_ERROR(host->Register(r.handle, r.device, g, spec, graphs));
    std::lock_guard<std::mutex> l(mu);
    auto it = sessions.find(r.session_id);
    if (it == sessions.end() || !client->is_up())  // closed or its client went away meanwhile
      return Unavailable("session " + std::to_string(r.session_id) + " closed while registering");
    return Status::OK();
  }

  // The host of a session's partitions; null when the session is unknown.
  std::shared_ptr<runtime::PartitionHost> HostOf(uint64_t session_id) {
    std::lock_guard<std::mutex> l(mu);
    auto it = sessions.find(session_id);
    return it == sessions.end() ? nullptr : it->second.host;
  }

  void Run(const net::ConnectionPtr& c, uint64_t request_id, net::RunPartition r) {
    std::shared_ptr<runtime::PartitionHost> host;
    bool stopping = false;
    bool full = false;
    const int64_t step = r.step_id;
    {
      std::lock_guard<std::mutex> l(mu);
      stopping = stopped;
      auto s = sessions.find(r.session_id);
      // Another client's session is as unknown to this one as no session.
      if (s != sessions.end() && s->second.client == c.get()) host = s->second.host;
      full = host && running_per_client[c.get()] >= kMaxRunningPerClient;
      if (!stopping && host && !full) {
        running.emplace(step, c.get());
        ++running_per_client[c.get()];
        ForgetEarlyLocked(step);  // it runs now: its tensors are the step's
      }
    }
    if (full) {
      Reply(c, request_id,
            net::RunPartitionDone{step,
                                  ResourceExhausted("node " + opts.name + ": step " + std::to_string(step) +
                                                    " refused: this client has " +
                                                    std::to_string(kMaxRunningPerClient) +
                                                    " partition runs going here already"),
                                  {}});
      return;
    }
    if (stopping) {
      Reply(c, request_id, net::RunPartitionDone{step, Unavailable("node " + opts.name + " is stopping"), {}});
      return;
    }
    if (!host) {
      Reply(c, request_id,
            net::RunPartitionDone{step,
                                  NotFound("node " + opts.name + " has no partition " +
                                           std::to_string(r.handle) + " of session " +
                                           std::to_string(r.session_id)),
                                  {}});
      return;
    }
    // Asked for a timeline: recorded from here (at most kMaxTraceEvents,
    // whatever the peer asked) and returned with the reply.
    auto trace = r.trace_max_events > 0 ? std::make_shared<StepTrace>(r.trace_max_events) : nullptr;
    std::shared_ptr<Watched> watch;
    if (r.progress_ms > 0) {
      watch = std::make_shared<Watched>();
      watch->client = c;
      watch->session_id = r.session_id;
      watch->step = step;
      // A peer asking for a report every millisecond gets one every kMinProgressMs.
      watch->interval_ms = std::max(r.progress_ms, kMinProgressMs);
      watch->reported_ms = NowMs();
      std::lock_guard<std::mutex> l(mu);
      watched.insert(watch);
      watch_cv.notify_all();
    }
    // The host's actor starts the step: this connection keeps reading.
    host->Run(r.handle, step, std::move(r.feeds), [this, c, request_id, step, trace, watch](Status s, std::vector<Tensor> out) {
      net::RunPartitionDone d{step, std::move(s), std::move(out)};
      if (trace) {
        d.trace_elapsed_ns = trace->Now();
        d.trace = trace->Take().first;
      }
      Reply(c, request_id, std::move(d));
      std::lock_guard<std::mutex> l(mu);
      if (watch) watched.erase(watch);
      running.erase(running.find(step));
      if (auto n = running_per_client.find(c.get()); n != running_per_client.end() && --n->second == 0)
        running_per_client.erase(n);
      if (running.empty()) idle.notify_all();
      // No CleanupStep comes from a client that went away.
      if (!c->is_up() && running.count(step) == 0) rendezvous.Cleanup(step);
    }, trace.get(), watch ? &watch->finished : nullptr);
  }

  // Tells clients whose steps here finished an op since the last report (one
  // StepProgress each, at most every interval_ms), so their no-progress
  // deadlines restart; sleeps while no step is watched.
  void ProgressLoop() {
    std::unique_lock<std::mutex> l(mu);
    while (!stopped) {
      if (watched.empty()) {
        watch_cv.wait(l, [&] { return stopped || !watched.empty(); });
        continue;
      }
      // Half the shortest interval asked for: a report is at most that late.
      int tick_ms = 1000;
      for (const auto& w : watched) tick_ms = std::min(tick_ms, w->interval_ms / 2);
      watch_cv.wait_for(l, std::chrono::milliseconds(std::max(kMinProgressMs / 2, tick_ms)));
      const int64_t now = NowMs();
      std::vector<std::pair<net::ConnectionPtr, net::Message>> out;
      for (const auto& w : watched) {
        if (now - w->reported_ms < w->interval_ms || w->finished.exchange(0, std::memory_order_relaxed) == 0) continue;
        auto c = w->client.lock();
        if (!c) continue;
        w->reported_ms = now;
        out.push_back({std::move(c), net::Message{0, net::StepProgress{w->session_id, w->step, ++w->reports}}});
      }
      if (out.empty()) continue;
      l.unlock();
      for (auto& [c, m] : out) c->Send(m);  // a client gone has no deadline to restart
      l.lock();
    }
  }

  void OnMessage(const net::ConnectionPtr& c, net::Message m) {
    const uint64_t id = m.request_id;
    std::visit(
        Overloaded{
            [&](net::RunPartition& r) { Run(c, id, std::move(r)); },
            [&](net::SendTensor& t) {
              // Partitions run on nodes only: a session has no tensor to send a node.
              if (c->peer_role() != net::Role::kNode)
                return LogLimited("session tensor", "dropped a tensor from session " + c->peer_address() +
                                                        ": only nodes send tensors between partitions");
              std::string why;
              if (!AdmitPeerStep(t.step_id, t.value.valid() ? static_cast<int64_t>(t.value.bytes()) : 0, &why,
                                 &t.session_id))
                return LogLimited("refused tensor", "dropped a tensor from " + c->peer_address() + ": " + why);
              RendezvousKey key{t.step_id, std::move(t.edge), std::move(t.frame), t.iteration};
              // The receiving step's cheap ops that follow (an update by a
              // scalar, a send back) run here instead of waking the pool.
              runtime::InlineCheapOps cheap;
              Status s = rendezvous.Send(key, std::move(t.value), t.is_dead);
              if (!s.ok() && s.code() != Code::kAborted) Log("tensor from " + c->peer_address() + ": " + s.ToString());
            },
            [&](net::AbortStep& a) {
              std::string why;
              if (ForeignStep(c, a.session_id, a.step_id))
                return LogLimited("foreign abort", "dropped an abort of step " + std::to_string(a.step_id) +
                                                       " from session " + c->peer_address() +
                                                       ": the step is another client's");
              if (!AdmitPeerStep(a.step_id, 0, &why))
                return LogLimited("early abort", "dropped an abort from " + c->peer_address() + ": " + why);
              // A step may outlive its closed session: its table is the node's.
              if (auto host = HostOf(a.session_id)) host->Abort(a.step_id, a.status);
              else rendezvous.Abort(a.step_id, a.status);
            },
            [&](net::CleanupStep& a) {
              bool foreign = false;
              {
                std::lock_guard<std::mutex> l(mu);
                // Only the session's own client ends its steps (a closed
                // session's late cleanup still frees what its steps left).
                auto s = sessions.find(a.session_id);
                foreign = (s != sessions.end() && s->second.client != c.get()) || ForeignStepLocked(c, a.step_id);
                if (!foreign) {
                  ForgetEarlyLocked(a.step_id);
                  if (ended_steps.insert(a.step_id).second) {
                    ended_order.push_back(a.step_id);
                    if (ended_order.size() > kMaxEndedSteps) {
                      ended_steps.erase(ended_order.front());
                      ended_order.pop_front();
                    }
                  }
                }
              }
              if (foreign)
                return LogLimited("foreign cleanup", "dropped a cleanup of step " + std::to_string(a.step_id) +
                                                         " from " + c->peer_address() + ": session " +
                                                         std::to_string(a.session_id) + " or the step is another client's");
              if (auto host = HostOf(a.session_id)) host->Cleanup(a.step_id);
              else rendezvous.Cleanup(a.step_id);
            },
            [&](net::RegisterPartition& r) { Reply(c, id, net::StatusReply{Register(c, r)}); },
            [&](net::ListMembers&) {
              view.Watch(c);
              Reply(c, id, view.Snapshot());
            },
            [&](net::Membership& mem) {
              // Only nodes change membership: a session's certificate may run work, no more.
              if (c->peer_role() != net::Role::kNode) {
                Log("refused a membership change from session " + c->peer_address());
                Reply(c, id, net::StatusReply{PermissionDenied("only nodes may change membership; " +
                                                               c->peer_address() + " holds a session credential")});
                return;
              }
              {
                std::lock_guard<std::mutex> l(mu);
                if (membership_jobs.size() < kMaxMembershipJobs) {
                  membership_jobs.push_back({c, id, std::move(mem)});
                  membership_cv.notify_all();
                  return;
                }
              }
              Reply(c, id, net::StatusReply{ResourceExhausted("node " + opts.name + " has " +
                                                              std::to_string(kMaxMembershipJobs) +
                                                              " membership changes waiting; try again")});
            },
            [&](net::CloseSession& cs) {
              {
                std::lock_guard<std::mutex> l(mu);
                // Only its own client closes a session (an unknown one is closed already).
                auto it = sessions.find(cs.session_id);
                if (it != sessions.end() && it->second.client == c.get()) sessions.erase(it);
                idle.notify_all();
              }
              Reply(c, id, net::StatusReply{Status::OK()});
            },
            [&](net::Variables& v) { ServeVariables(c, id, std::move(v)); },
            [&](net::Echo& e) { Reply(c, id, net::Echo{std::move(e.payload)}); },
            [&](net::CollectiveChunk& cc) {
              // All-reduce rings run between nodes; a session takes no part.
              if (c->peer_role() != net::Role::kNode)
                return LogLimited("session chunk", "dropped an all-reduce chunk from session " + c->peer_address() +
                                                       ": only nodes take part in collectives");
              collectives->OnChunk(c.get(), std::move(cc));
            },
            [&](auto&) {
              LogLimited("unexpected", std::string("unexpected ") + net::BodyName(m.body) + " from " + c->peer_address());
              Reply(c, id, net::StatusReply{InvalidArgument(std::string("node does not serve ") +
                                                            net::BodyName(m.body))});
            },
        },
        m.body);
  }

  // Reads or assigns variables for a session; the reply is sent from the
  // pool (a large one must not hold a shard actor's thread while it writes).
  void ServeVariables(const net::ConnectionPtr& c, uint64_t id, net::Variables v) {
    if (!v.assign) {
      variables->ReadNamed(v.names, [this, c, id](std::vector<std::pair<std::string, Tensor>> values) {
        auto out = std::make_shared<net::Variables>();
        for (auto& kv : values) {
          out->names.push_back(std::move(kv.first));
          out->values.push_back(std::move(kv.second));
        }
        pool.Schedule([this, c, id, out] { Reply(c, id, std::move(*out)); });
      });
      return;
    }
    if (v.names.size() != v.values.size())
      return Reply(c, id, net::StatusReply{InvalidArgument(
                              "Variables: " + std::to_string(v.names.size()) + " names but " +
                              std::to_string(v.values.size()) + " values")});
    std::vector<std::pair<std::string, Tensor>> values;
    for (size_t i = 0; i < v.names.size(); ++i) values.emplace_back(std::move(v.names[i]), std::move(v.values[i]));
    variables->AssignNamed(std::move(values), [this, c, id](Status s) {
      pool.Schedule([this, c, id, s] { Reply(c, id, net::StatusReply{s.WithPrefix("node " + opts.name)}); });
    });
  }

  void OnDown(const net::ConnectionPtr& c, const Status& why) {
    const std::string lost = router.Forget(c.get());
    std::set<int64_t> orphaned;
    {
      std::lock_guard<std::mutex> l(mu);
      if (stopped) return;
      // A client that went away closes its sessions (running steps keep
      // what they use alive until they finish).
      for (auto it = sessions.begin(); it != sessions.end();) {
        if (it->second.client == c.get()) it = sessions.erase(it);
        else ++it;
      }
      // Its running steps can deliver nothing and get no AbortStep: a part
      // waiting for a tensor of a partition the client never started would
      // wait (and hold its step's state) forever.
      for (const auto& r : running)
        if (r.second == c.get()) orphaned.insert(r.first);
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

  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu);
      if (stopped) return;
      stopped = true;
    }
    // Gone from etcd first: members and sessions see it leave at once.
    if (registry) registry->Leave();
    idle.notify_all();
    watch_cv.notify_all();
    membership_cv.notify_all();
    if (membership_thread.joinable()) membership_thread.join();
    router.Stop();
    if (drain_thread.joinable()) drain_thread.join();
    if (housekeeping_thread.joinable()) housekeeping_thread.join();
    if (progress_thread.joinable()) progress_thread.join();
    endpoint->Shutdown();
    // Fail what running steps wait on (queues, tensors from peers that can no
    // longer arrive) and wait for them: they use the queues, variables and
    // rendezvous that Stop and the destructor tear down.
    queues->Shutdown();
    std::set<int64_t> steps;
    {
      std::lock_guard<std::mutex> l(mu);
      for (const auto& r : running) steps.insert(r.first);
    }
    for (int64_t step : steps)
      rendezvous.Abort(step, Unavailable("step " + std::to_string(step) + ": node " + opts.name +
                                         " is stopping"));
    collectives->FailAll(Unavailable("node " + opts.name + " is stopping"));
    {
      std::unique_lock<std::mutex> l(mu);
      idle.wait(l, [&] { return running.empty(); });
      sessions.clear();
    }
    router.Clear();
    for (int64_t step : steps) rendezvous.Cleanup(step);
    variables->Shutdown();
    queues->Stop();
    // As Session: stop the actors now. Members die in reverse order, which
    // would free the variables and queues while their actors still run.
    collectives->Stop();
    system.reset();
  }
};

Result<std::unique_ptr<ClusterNode>> ClusterNode::Start(NodeOptions opts) {
  ForgetCafThreadLogger forget;  // the system is made and spawns on the caller's thread
  std::string host;
  uint16_t port = 0;
  SF_RETURN_IF_ERROR(net::ParseAddress(opts.listen, &host, &port).WithPrefix("--listen"));
  auto impl = std::make_unique<Impl>(opts);
  Impl* p = impl.get();
  net::EndpointOptions to;
  to.tls_dir = opts.tls_dir;
  to.tls_name = opts.tls_name;
  to.insecure = opts.insecure;
  to.role = net::Role::kNode;
  to.heartbeat_ms = opts.heartbeat_ms;
  to.peer_timeout_ms = opts.peer_timeout_ms;
  to.log = true;
  // Cheap and never blocking: a tensor into the rendezvous (its waiter
  // continues on the compute pool), an abort or cleanup, an echo, an
  // all-reduce piece (posted to the collectives hub), a partition's step
  // (its feeds checked against the partition, its ops started on the
  // compute pool: a hop through a handler thread was on every step's
  // critical path).
  to.handle_inline = [](const net::Message& m) {
    return std::holds_alternative<net::RunPartition>(m.body) ||
           std::holds_alternative<net::SendTensor>(m.body) || std::holds_alternative<net::AbortStep>(m.body) ||
           std::holds_alternative<net::CleanupStep>(m.body) || std::holds_alternative<net::Echo>(m.body) ||
           std::holds_alternative<net::CollectiveChunk>(m.body);
  };
  if (opts.insecure)
    std::fprintf(stderr, "shardflow node: WARNING: --insecure: peers are not authenticated and traffic is plaintext\n");
  SF_ASSIGN_OR_RETURN(
      impl->endpoint,
      net::Endpoint::Create(
          to, [p](const net::ConnectionPtr& c, net::Message m) { p->OnMessage(c, std::move(m)); },
          [p](const net::ConnectionPtr& c, const Status& s) { p->OnDown(c, s); }));
  SF_ASSIGN_OR_RETURN(uint16_t bound, impl->endpoint->Listen(host, port));
  impl->address = host + ":" + std::to_string(bound);
  impl->collectives->SetAddress(impl->address);
  if (impl->opts.name.empty()) impl->opts.name = "node@" + impl->address;
  // Its life (incarnation) is its key's revision in etcd, set once registered.
  impl->view.SetSelf(impl->opts.name, impl->address);
  std::unique_ptr<ClusterNode> node(new ClusterNode(std::move(impl)));
  p->progress_thread = std::thread([p] { p->ProgressLoop(); });
  p->membership_thread = std::thread([p] { p->MembershipLoop(); });
  if (!opts.etcd.empty()) {
    // etcd holds the membership: register under a lease and follow the members' keys.
    cluster::MemberRegistryOptions ro;
    ro.etcd = opts.etcd;
    ro.cluster = opts.cluster.empty() ? "default" : opts.cluster;
    ro.name = p->opts.name;
    ro.address = p->address;
    ro.lease_ttl_s = opts.lease_ttl_s;
    ro.request_timeout_ms = 5000;
    if (!opts.insecure) {
      auto cred = net::LoadCredential(opts.tls_dir, opts.tls_name.empty() ? "node" : opts.tls_name);
      if (!cred.ok()) return cred.status().WithPrefix("etcd credential");
      ro.credential = std::move(*cred);
    }
    ro.on_change = [p](const std::vector<cluster::MemberRecord>& records) { p->OnMembers(records); };
    ro.on_replaced = [p](const std::string& holder) {
      std::lock_guard<std::mutex> l(p->mu);
      p->replaced_by = holder;
      p->left = true;
      p->idle.notify_all();
    };
    ro.log = [p](const std::string& line) { p->Log(line); };
    auto registry = cluster::MemberRegistry::Start(std::move(ro));
    if (!registry.ok()) return registry.status().WithPrefix("node " + p->opts.name + " joining through etcd " + opts.etcd);
    p->registry = std::move(*registry);
    p->registry_ready = p->registry.get();
  } else {
    p->Log("no --etcd: a cluster of this node alone");
  }
  p->housekeeping_thread = std::thread([p] { p->HousekeepingLoop(); });
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
                              const std::vector<std::string>& hosts) {
  SF_ASSIGN_OR_RETURN(net::Role r, net::ParseRole(role));
  return net::IssueCredential(dir, r, name, hosts);
}

Result<std::string> MakeTemporaryClusterCredentials() { return net::MakeTemporaryCredentials(); }

Result<std::vector<MemberInfo>> ListClusterMembers(const std::string& address, const std::string& tls_dir,
                                                   const std::string& tls_name, bool insecure) {
  net::EndpointOptions to;
  to.tls_dir = tls_dir;
  to.tls_name = tls_name.empty() ? "session" : tls_name;
  to.insecure = insecure;
  to.role = net::Role::kSession;
  to.handler_threads = 1;
  to.log = false;
  if (!insecure) {
    // Any credential of the cluster may list: take the role it was issued for.
    SF_ASSIGN_OR_RETURN(net::Credential cred, net::LoadCredential(tls_dir, to.tls_name));
    to.role = cred.role;
  }
  SF_ASSIGN_OR_RETURN(auto endpoint, net::Endpoint::Create(to, nullptr, nullptr));
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr c, endpoint->Connect(address));
  SF_ASSIGN_OR_RETURN(net::Message reply, net::Call(c, net::ListMembers{}, 10000));
  auto* mem = std::get_if<net::Membership>(&reply.body);
  if (!mem) return Internal(std::string("node ") + address + " answered ListMembers with " + net::BodyName(reply.body));
  std::vector<MemberInfo> out;
  for (const net::Member& m : mem->members) {
    bool draining = false;
    for (const net::Member& d : mem->leaving) draining = draining || d.address == m.address;
    out.push_back({m.name, m.address, m.incarnation, draining ? "leaving" : "alive"});
  }
  c->Close();
  endpoint->Shutdown();
  return out;
}

Status DrainNode(const std::string& address, const std::string& tls_dir, int wait_ms, const std::string& tls_name,
                 bool insecure) {
  net::EndpointOptions to;
  to.tls_dir = tls_dir;
  to.tls_name = tls_name;
  to.insecure = insecure;
  to.role = net::Role::kNode;
  to.handler_threads = 1;
  std::mutex mu;
  std::condition_variable cv;
  bool gone = false;
  SF_ASSIGN_OR_RETURN(auto endpoint, net::Endpoint::Create(to, nullptr, [&](const net::ConnectionPtr&, const Status&) {
                        std::lock_guard<std::mutex> l(mu);
                        gone = true;
                        cv.notify_all();
                      }));
  auto c = endpoint->Connect(address);
  if (!c.ok()) return c.status().WithPrefix("draining " + address);
  bool replied = false;
  Status status;
  net::Membership ask;
  ask.leaving.push_back({"", address});
  (*c)->Request(ask, 10000, [&](Result<net::Message> r) {
    std::lock_guard<std::mutex> l(mu);
    if (!r.ok()) status = r.status();
    else if (!std::holds_alternative<net::Membership>(r->body))
      status = Internal(std::string("unexpected reply ") + net::BodyName(r->body));
    replied = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return replied; });
  if (!status.ok()) return status.WithPrefix("draining " + address);
  // The node closes our connection when it has left.
  if (wait_ms > 0 && !cv.wait_for(l, std::chrono::milliseconds(wait_ms), [&] { return gone; }))
    return DeadlineExceeded("node " + address + " is still draining after " + std::to_string(wait_ms) + " ms");
  l.unlock();
  endpoint->Shutdown();
  return Status::OK();
}

}  // namespace sf
