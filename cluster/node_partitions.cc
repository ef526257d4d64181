// A node's partitions: registering a session's partitions and running their
// steps (with progress reports) (cluster/node_impl.h).
#include "cluster/node_impl.h"

#include <chrono>
#include <limits>

#include "graph/namespaces.h"
#include "graph/path_attrs.h"

namespace sf {

namespace {

// Finds output `ref` of g; InvalidArgument naming it otherwise.
Result<Output> FindRef(Graph& g, const net::OutputRef& ref) {
  auto id = g.FindNode(ref.node);
  if (!id.ok()) return InvalidArgument("partition has no node '" + ref.node + "'");
  if (ref.index < 0 || ref.index >= static_cast<int>(g.node(*id).output_dtypes.size()))
    return InvalidArgument("node '" + ref.node + "' has no output " + std::to_string(ref.index));
  return Output(&g, *id, ref.index);
}

}  // namespace

bool ClusterNode::Impl::IsMemberAddress(const std::string& addr) const {
  if (addr.empty()) return false;
  return addr == address || member_addresses.Knows(addr);
}

Status ClusterNode::Impl::CheckTaskAddresses(const std::vector<net::Member>& tasks) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kMemberWaitMs);
  for (size_t i = 0; i < tasks.size(); ++i) {
    const std::string& a = tasks[i].address;
    if (a.empty() || IsMemberAddress(a)) continue;  // "": a task no node holds, never dialed
    // A member that just joined may be in the session's map before it is
    // in this node's list from etcd: wait a little for etcd's word.
    const bool known = etcd_mode() && member_addresses.WaitKnown(a, deadline);
    {
      std::lock_guard<std::mutex> l(mu);
      if (stopped) return Unavailable("node " + opts.name + " is stopping");
    }
    if (!known)
      return PermissionDenied("partition's task " + std::to_string(i) + " names address " + a +
                              ", which is not a member of node " + opts.name +
                              "'s cluster: a node sends tensors only to members etcd lists");
  }
  return Status::OK();
}

void ClusterNode::Impl::ServeRegister(const net::ConnectionPtr& c, net::RegisterPartition r,
                                      net::Answer<net::StatusReply> done) {
  {
    std::lock_guard<std::mutex> l(mu);
    size_t& mine = registrations_of[c.get()];
    if (registrations_waiting >= kMaxRegistrationsWaiting || mine >= kMaxRegistrationsPerClient) {
      const bool client_full = mine >= kMaxRegistrationsPerClient;
      if (mine == 0) registrations_of.erase(c.get());
      return done(ResourceExhausted(
          "node " + opts.name + " has " +
          (client_full ? std::to_string(mine) + " registrations of this client"
                       : std::to_string(registrations_waiting) + " registrations") +
          " waiting already (at most " +
          std::to_string(client_full ? kMaxRegistrationsPerClient : kMaxRegistrationsWaiting) + "); try again"));
    }
    ++mine;
    ++registrations_waiting;
  }
  auto job = std::make_shared<net::RegisterPartition>(std::move(r));
  registrar.Post([this, c, done, job] {
    Status s = Register(c, *job);
    {
      std::lock_guard<std::mutex> l(mu);
      --registrations_waiting;
      if (auto it = registrations_of.find(c.get()); it != registrations_of.end() && --it->second == 0)
        registrations_of.erase(it);
    }
    done(s);
  });
}

Status ClusterNode::Impl::Register(const net::ConnectionPtr& client, const net::RegisterPartition& r) {
  {
    std::lock_guard<std::mutex> l(mu);
    if (stopped) return Unavailable("node " + opts.name + " is stopping");
  }
  if (!client->is_up()) return Unavailable("client " + client->peer_address() + " went away");
  SF_RETURN_IF_ERROR(CheckTaskAddresses(r.tasks));
  auto graphs = std::make_shared<PartitionGraphs>();
  graphs->graph = std::make_unique<Graph>(opts.ops ? *opts.ops : StandardOpRegistry());
  SF_RETURN_IF_ERROR(GraphFromBytes(r.graph_def, graphs->graph.get(),
                                    "partition " + std::to_string(r.handle) + " for " + r.device));
  Graph& g = *graphs->graph;
  // Its variables, tables, queues, groups and directories are its namespace's.
  SF_RETURN_IF_ERROR(ScopeGraphState(&g, client->peer_namespace())
                         .WithPrefix("partition for " + r.device + " on node " + opts.name));
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
  // Every file an op that runs here names lies under the directories this
  // node's operator gave it.
  SF_RETURN_IF_ERROR(ConfineGraphPaths(&g, NodeDirs{opts.data_root, opts.checkpoint_root}, spec.nodes)
                         .WithPrefix("partition for " + r.device + " on node " + opts.name));
  // The slot's variables are those this partition holds: its own nodes'
  // (spec.nodes). g is the session's whole graph, whose other nodes (other
  // slots' variables among them) only name what this partition feeds from:
  // counting those made a variable two slots' state, and a round of one
  // slot overwrote the other's holder with a stale copy.
  std::set<std::string> var_names;
  for (int i : spec.nodes) {
    if (g.node(i).op != "VarHandle") continue;
    auto s = g.node(i).attrs.Get<std::string>("shared_name");
    if (s.ok()) var_names.insert(*s);
  }
  // A chunk queue's state is a variable of its slot (cluster/node_chunk_queues.cc).
  for (const auto& kv : ChunkQueueStates(g, spec.nodes)) var_names.insert(kv.second);
  variables->AddGraphVariables(var_names);
  std::shared_ptr<runtime::PartitionHost> host;
  {
    std::lock_guard<std::mutex> l(mu);
    // A client that went down meanwhile was already forgotten by OnDown:
    // registering for it would keep the session forever.
    if (!client->is_up()) return Unavailable("client " + client->peer_address() + " went away");
    // With a shard map (etcd), its task is its slot: what the slot holds
    // here (what a move copies) and which map placed it (a fence refuses
    // older ones). A task outside the map could never be moved: refused.
    auto dev = ParseDeviceName(r.device);
    const int task = dev.ok() && dev->has_task ? dev->task : -1;
    if (etcd_mode() && (task < 0 || task >= opts.map_slots))
      return InvalidArgument("partition for " + r.device + ": its task is not one of the " +
                             std::to_string(opts.map_slots) + " slots of the cluster's shard map");
    // What one client (or all) may make this node hold is bounded.
    const cluster::NodeSessions::Slot placed = etcd_mode() ? cluster::NodeSessions::Slot{task, r.epoch}
                                                           : cluster::NodeSessions::Slot{-1, 0};
    SF_ASSIGN_OR_RETURN(cluster::NodeSessions::Runtime rt,
                        sessions.Add(r.session_id, r.handle, placed, client.get(), client->peer_address(),
                                     client->peer_namespace()));
    TouchNamespaceLocked(client->peer_namespace());
    if (etcd_mode()) slot_names.AddOwn(task, var_names);
    if (!rt.host) {
      std::vector<std::string> tasks;
      for (const auto& t : r.tasks) tasks.push_back(t.address);
      rt.rendezvous = std::make_shared<runtime::ClusterRendezvous>(
          &rendezvous, address, std::move(tasks), r.session_id,
          [this](const std::string& to, net::SendTensor t, std::function<void(Status)> later) {
            return router.SendOrQueue(to, std::move(t), std::move(later));
          });
      runtime::PartitionHostOptions ho;
      ho.env = runtime::ActorExecutorEnv(opts.kernels, &pool, variables.get(), queues.get(), rt.rendezvous.get(),
                                         checkpoints.get());
      ho.env.max_tensor_bytes = opts.max_tensor_bytes;
      // A session runs a step that failed on a moved or failed-over shard
      // again: its updates apply once (kernels/update_origin.h).
      ho.env.update_origins = true;
      ho.steps = &rendezvous;
      // Kernels trust their inputs: a peer's feeds are checked as a local
      // session checks its caller's.
      ho.check_feeds = true;
      ho.name = "node " + opts.name;
      ForgetCafThreadLogger forget;  // spawned on a connection handler thread
      rt.host = runtime::NewLocalPartitionHost(*system, std::move(ho));
      sessions.SetRuntime(r.session_id, rt);
    }
    graphs->rendezvous = rt.rendezvous;
    host = rt.host;
  }
  // The kernels' Resolve of a moved or promoted slot's chunk queues goes on
  // from their stored states, read here (Resolve runs on an actor thread).
  SF_RETURN_IF_ERROR(LoadChunkQueueStates(g, spec.nodes));
  // Blocks the registrar thread while the host builds the executor: the
  // registration's reply follows it.
  SF_RETURN_IF_ERROR(host->Register(r.handle, r.device, g, spec, graphs));
  std::lock_guard<std::mutex> l(mu);
  if (!sessions.Has(r.session_id) || !client->is_up())  // closed or its client went away meanwhile
    return Unavailable("session " + std::to_string(r.session_id) + " closed while registering");
  return Status::OK();
}

std::shared_ptr<runtime::PartitionHost> ClusterNode::Impl::HostOf(uint64_t session_id) {
  return sessions.HostOf(session_id);
}

void ClusterNode::Impl::ServeRun(const net::ConnectionPtr& c, net::RunPartition r,
                                 net::Answer<net::RunPartitionDone> done) {
  using Verdict = cluster::RunAdmission::Verdict;
  std::shared_ptr<runtime::PartitionHost> host;
  bool stopping = false;
  const int64_t step = r.step_id;
  std::pair<int, int64_t> slot{-1, 0};
  cluster::RunAdmission::Outcome admitted;  // kAdmitted too when there is no host: nothing was asked
  {
    // Admitted under mu: with the session's lookup, the stall check and the
    // early step's end, and atomic with a backup's ServedEpoch check.
    std::lock_guard<std::mutex> l(mu);
    stopping = stopped;
    // Another client's session is as unknown to this one as no session.
    cluster::NodeSessions::Partition part = sessions.Find(r.session_id, r.handle, c.get());
    host = std::move(part.host);
    if (host) {
      TouchNamespaceLocked(part.ns);
      slot = part.slot;
    }
    // A node that stalled past its lease serves nothing until it re-read the map.
    if (host && CheckStallLocked(NowMs())) {
      admitted = {Verdict::kStale, std::numeric_limits<int64_t>::max()};
    } else if (host) {
      admitted = admission.Admit(step, c.get(), slot, kMaxRunningPerClient);
      if (admitted.verdict == Verdict::kAdmitted) early.Forget(step);  // it runs now: its tensors are the step's
    }
  }
  const int64_t fence = admitted.fence;
  if (admitted.verdict == Verdict::kStale) {
    // This node stopped serving the slot (it moved away): nothing ran.
    done(net::RunPartitionDone{step,
                                Aborted("node " + opts.name + ": slot " + std::to_string(slot.first) + " " +
                                        cluster::kStaleEpoch + " " + std::to_string(slot.second) +
                                        (fence == std::numeric_limits<int64_t>::max()
                                             ? std::string(" (this node stalled past its lease and has not read "
                                                           "the map since)")
                                             : " (it moved at epoch " + std::to_string(fence) + ")") +
                                        "; the session follows the new map before its next step"),
                                {}});
    return;
  }
  if (admitted.verdict == Verdict::kFull) {
    done(net::RunPartitionDone{step,
                                ResourceExhausted("node " + opts.name + ": step " + std::to_string(step) +
                                                  " refused: this client has " +
                                                  std::to_string(kMaxRunningPerClient) +
                                                  " partition runs going here already"),
                                {}});
    return;
  }
  if (admitted.verdict == Verdict::kClosed || (!host && stopping)) {
    done(net::RunPartitionDone{step, Unavailable("node " + opts.name + " is stopping"), {}});
    return;
  }
  if (!host) {
    done(net::RunPartitionDone{step,
                                NotFound("node " + opts.name + " has no partition " +
                                         std::to_string(r.handle) + " of session " +
                                         std::to_string(r.session_id)),
                                {}});
    return;
  }
  // Asked for a timeline: recorded from here (at most kMaxTraceEvents,
  // whatever the peer asked) and returned with the reply.
  auto trace = r.trace_max_events > 0 ? std::make_shared<StepTrace>(r.trace_max_events) : nullptr;
  std::shared_ptr<cluster::ProgressReports::Watch> watch;
  if (r.progress_ms > 0) {
    std::weak_ptr<net::Connection> client = c;  // a client gone has no deadline to restart
    watch = progress.Add(r.progress_ms, NowMs(), [client, session = r.session_id, step](uint64_t reports) {
      if (auto to = client.lock()) (void)net::Tell(to, net::StepProgress{session, step, reports});
    });
    timers.Poke(progress_timer);  // its next report may be due sooner than the timer's
  }
  // The host's actor starts the step: this connection keeps reading.
  // The run ends once its reply is sent: after its slot's changes reached
  // the slot's backup (FinishRun), so a fence waits for that too.
  auto reply = [this, c, done, step, trace, watch, slot](net::RunPartitionDone d) {
    if (trace) {
      d.trace_elapsed_ns = trace->Now();
      d.trace = trace->Take().first;
    }
    done(std::move(d));
    // Ended under mu: the drain's wait on `idle` reads admission.Idle() under it.
    progress.Remove(watch);
    std::lock_guard<std::mutex> l(mu);
    if (admission.End(step, c.get(), slot)) idle.notify_all();
    // No CleanupStep comes from a client that went away.
    if (!c->is_up() && admission.Runs(step) == 0) rendezvous.Cleanup(step);
  };
  host->Run(r.handle, step, std::move(r.feeds), [this, step, slot, reply](Status s, std::vector<Tensor> out) {
    FinishRun(slot, reply, net::RunPartitionDone{step, std::move(s), std::move(out)});
  }, trace.get(), watch ? &watch->finished : nullptr);
}

}  // namespace sf
