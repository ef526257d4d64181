// Session: the embedded runtime. A coordinator actor plans each run signature
// once (prune, check, place, partition) and hands steps to partition actors;
// each partition actor runs its steps in an Executor on the session's compute
// pool; variables live in variable shard actors.
#include "shardflow/session.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <optional>
#include <set>

#include "actors/caf_thread_logger.h"
#include "actors/checkpoint_io.h"
#include "runtime/plan.h"
#include "actors/coordinator_protocol.h"
#include "actors/partition_protocol.h"
#include "actors/queue_actors.h"
#include "runtime/rendezvous.h"
#include "runtime/step_join.h"
#include "actors/variable_shards.h"
#include "graph/partition.h"
#include "graph/placement.h"
#include "kernels/compute_pool.h"
#include "storage/checkpoint.h"
#include "storage/embedding_reshard.h"

namespace sf {

using runtime::CoordinatorActor;
using runtime::PartitionActor;
using runtime::RunCallPtr;
using runtime::StepCallPtr;

namespace {

// A run signature's plan: the fed outputs and, per partition, its actor and
// where its feeds and fetches sit in the run's lists.
struct Plan {
  Status error;  // plans that fail (cycles, unknown names) are cached too
  std::vector<Output> feeds;
  struct Part {
    PartitionActor actor;
    std::vector<int> feed_index;   // run feed index of each partition feed
    std::vector<int> fetch_index;  // run fetch index of each partition fetch
  };
  std::vector<Part> parts;
  size_t num_fetches = 0;
  // Set when the step spans devices: the per-device graphs the executors
  // run (they point into them), and the steps' tensors go through the
  // session's rendezvous.
  std::shared_ptr<std::map<std::string, PartitionGraph>> device_graphs;
};

PartitionActor SpawnPartition(caf::actor_system& sys, std::shared_ptr<runtime::Executor> ex) {
  return sys.spawn([ex](PartitionActor::pointer) -> PartitionActor::behavior_type {
    return {
        [ex](StepCallPtr call) {
          ex->RunStep(call->step_id, std::move(call->feeds), std::move(call->done));
        },
    };
  });
}

}  // namespace

struct Session::Impl {
  Impl(const Graph& g, const SessionOptions& o)
      : graph(g), num_devices(std::max(1, o.num_cpu_devices)), kernels(o.kernels), pool(o.compute_threads),
        checkpoints(runtime::NewStoreCheckpointService()) {
    ForgetCafThreadLogger forget;  // the spawns below run on the caller's thread
    const int threads = o.scheduler_threads > 0 ? o.scheduler_threads : 2;
    cfg.set("scheduler.policy", caf::atom("sharing"));
    cfg.set("scheduler.max-threads", static_cast<size_t>(threads));
    system = std::make_unique<caf::actor_system>(cfg);
    std::set<std::string> names;
    for (int i = 0; i < g.num_nodes(); ++i) {
      const Node& n = g.node(i);
      if (n.op != "VarHandle") continue;
      auto s = n.attrs.Get<std::string>("shared_name");
      if (s.ok()) names.insert(*s);
    }
    variables = std::make_unique<runtime::ActorVariables>(*system, std::move(names));
    variables->SetComputePool(&pool);
    queues = std::make_unique<runtime::ActorQueues>(*system);
    coordinator = SpawnCoordinator();
  }

  ~Impl() {
    // Steps waiting on a queue would otherwise wait forever: fail them.
    queues->Shutdown();
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return in_flight == 0; });
    }
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
    {
      std::lock_guard<std::mutex> l(actors_mu);
      for (auto& a : partition_actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      partition_actors.clear();
    }
    variables->Shutdown();
    queues->Stop();
    system.reset();  // waits for the actors to finish
  }

  CoordinatorActor SpawnCoordinator();
  // What this session's partitions run with (rendezvous: null for one partition).
  runtime::ExecutorEnv Env(RendezvousService* rendezvous) {
    return runtime::ActorExecutorEnv(kernels, &pool, variables.get(), queues.get(), rendezvous, checkpoints.get());
  }
  std::shared_ptr<Plan> BuildPlan(const runtime::RunCall& call);
  // Fills plan for a pruned graph whose nodes span several devices.
  Status BuildDevicePlan(Plan& plan, const std::vector<int>& order,
                         const std::vector<std::string>& placement, const std::vector<Output>& fetches);
  PartitionActor AddPartitionActor(std::unique_ptr<runtime::Executor> ex);
  void StartStep(Plan& plan, runtime::RunCall& call, int64_t step_id);

  const Graph& graph;
  const int num_devices;
  const KernelRegistry* kernels;  // null: the standard kernels
  ComputePool pool;
  // Declared before the actors: the partitions' checkpoint kernels use it
  // until the system below has stopped them.
  std::unique_ptr<CheckpointService> checkpoints;
  runtime::LocalRendezvous rendezvous;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<runtime::ActorVariables> variables;
  std::unique_ptr<runtime::ActorQueues> queues;
  CoordinatorActor coordinator;

  // Serializes Save and Restore: a RocksDB directory opens once at a time.
  std::mutex ckpt_mu;
  // The checkpoint the variables' dirty rows are relative to (the last
  // committed save); -1 when there is none (SaveIncremental writes in full).
  std::string last_save_dir;  // GUARDED_BY(ckpt_mu)
  int64_t last_save_id = -1;  // GUARDED_BY(ckpt_mu)

  std::mutex actors_mu;
  std::vector<PartitionActor> partition_actors;  // GUARDED_BY(actors_mu)

  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;  // GUARDED_BY(mu)
};

std::shared_ptr<Plan> Session::Impl::BuildPlan(const runtime::RunCall& call) {
  auto plan = std::make_shared<Plan>();
  auto fail = [&](Status s) {
    plan->error = std::move(s);
    return plan;
  };
  auto run = runtime::PlanRun(graph, call.feeds, call.fetches, call.targets);
  if (!run.ok()) return fail(run.status());
  plan->feeds = run->feeds;
  const std::vector<Output>& fetches = run->fetches;
  const std::vector<int>* order = &run->order;
  if (num_devices > 1) {
    std::vector<std::string> devices;
    for (int i = 0; i < num_devices; ++i)
      devices.push_back("/job:localhost/task:0/device:CPU:" + std::to_string(i));
    auto placement = sf::Place(graph, devices);
    if (!placement.ok()) return fail(placement.status());
    std::set<std::string> used;
    for (int id : *order) used.insert((*placement)[id]);
    if (used.size() > 1) {
      plan->num_fetches = fetches.size();
      Status st = BuildDevicePlan(*plan, *order, *placement, fetches);
      if (!st.ok()) return fail(st);
      return plan;
    }
  }
  // One device: one partition holding the whole pruned graph.
  plan->num_fetches = fetches.size();
  runtime::ExecutorSpec es{*order, plan->feeds, fetches};
  Plan::Part part;
  for (size_t i = 0; i < plan->feeds.size(); ++i) part.feed_index.push_back(static_cast<int>(i));
  for (size_t i = 0; i < fetches.size(); ++i) part.fetch_index.push_back(static_cast<int>(i));
  auto ex = runtime::Executor::Create(graph, es, Env(nullptr));
  if (!ex.ok()) return fail(ex.status());
  part.actor = AddPartitionActor(std::move(ex).value());
  plan->parts.push_back(std::move(part));
  return plan;
}

PartitionActor Session::Impl::AddPartitionActor(std::unique_ptr<runtime::Executor> ex) {
  PartitionActor a = SpawnPartition(*system, std::shared_ptr<runtime::Executor>(std::move(ex)));
  std::lock_guard<std::mutex> l(actors_mu);
  partition_actors.push_back(a);
  return a;
}

Status Session::Impl::BuildDevicePlan(Plan& plan, const std::vector<int>& order,
                                      const std::vector<std::string>& placement,
                                      const std::vector<Output>& fetches) {
  SF_ASSIGN_OR_RETURN(auto parts, sf::Partition(graph, placement));
  plan.device_graphs = std::make_shared<std::map<std::string, PartitionGraph>>(std::move(parts));
  SF_ASSIGN_OR_RETURN(auto steps, runtime::PlanDeviceSteps(*plan.device_graphs, order, plan.feeds, fetches));
  for (runtime::DeviceStep& d : steps) {
    SF_ASSIGN_OR_RETURN(auto ex, runtime::Executor::Create(*d.partition->graph, d.spec, Env(&rendezvous)));
    Plan::Part part;
    part.feed_index = std::move(d.feed_index);
    part.fetch_index = std::move(d.fetch_index);
    part.actor = AddPartitionActor(std::move(ex));
    plan.parts.push_back(std::move(part));
  }
  return Status::OK();
}

void Session::Impl::StartStep(Plan& plan, runtime::RunCall& call, int64_t step_id) {
  if (Status s = runtime::ValidateFeeds(call.feeds, plan.feeds); !s.ok()) return call.done(s);
  if (plan.parts.empty()) return call.done(std::vector<Tensor>(plan.num_fetches));
  runtime::LocalRendezvous* rdv = plan.device_graphs ? &rendezvous : nullptr;
  // Partitions still waiting on a failed one's tensors fail rather than hang.
  auto join = std::make_shared<runtime::StepJoin>(
      static_cast<int>(plan.parts.size()), plan.num_fetches, std::move(call.done),
      rdv ? std::function<void(const Status&)>([rdv, step_id](const Status& s) { rdv->Abort(step_id, s); })
          : nullptr,
      rdv ? std::function<void()>([rdv, step_id] { rdv->Cleanup(step_id); }) : nullptr);
  for (const Plan::Part& part : plan.parts) {
    auto sc = std::make_shared<runtime::StepCall>();
    sc->step_id = step_id;
    sc->feeds.reserve(part.feed_index.size());
    for (int i : part.feed_index) sc->feeds.push_back(call.feeds[i].second);
    // The plan outlives its steps (the coordinator keeps it until the session,
    // which waits for every step, goes): no per-step copy of the index.
    const std::vector<int>* fetch_index = &part.fetch_index;
    sc->done = [join, fetch_index](Status s, std::vector<Tensor> out) {
      join->Report(std::move(s), std::move(out), *fetch_index);
    };
    caf::anon_send(part.actor, std::move(sc));
  }
}

CoordinatorActor Session::Impl::SpawnCoordinator() {
  struct State {
    std::map<std::string, std::shared_ptr<Plan>> plans;
    int64_t next_step = 1;
  };
  Impl* impl = this;
  return system->spawn([impl](CoordinatorActor::stateful_pointer<State> self)
                           -> CoordinatorActor::behavior_type {
    return {
        [impl, self](RunCallPtr call) {
          // The signature: feed names, fetch names and targets, in order.
          const std::string key = runtime::RunSignature(call->feeds, call->fetches, call->targets);
          auto& plan = self->state.plans[key];
          if (!plan) plan = impl->BuildPlan(*call);
          if (!plan->error.ok()) return call->done(plan->error);
          impl->StartStep(*plan, *call, self->state.next_step++);
        },
    };
  });
}

Session::Session(const Graph& g, SessionOptions options) {
  impl_ = std::make_unique<Impl>(g, options);
}

Session::~Session() = default;

void Session::StartRun(NamedFeeds feeds, std::vector<std::string> fetches, std::vector<std::string> targets,
                       std::function<void(Result<std::vector<Tensor>>)> done) {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    ++impl_->in_flight;
  }
  auto call = std::make_shared<runtime::RunCall>();
  call->feeds = std::move(feeds);
  call->fetches = std::move(fetches);
  call->targets = std::move(targets);
  Impl* impl = impl_.get();
  call->done = [impl, done = std::move(done)](Result<std::vector<Tensor>> r) {
    done(std::move(r));
    std::lock_guard<std::mutex> l(impl->mu);
    if (--impl->in_flight == 0) impl->cv.notify_all();
  };
  caf::anon_send(impl_->coordinator, std::move(call));
}

const Graph& Session::graph() const { return impl_->graph; }

void SessionInterface::RunAsync(const FeedMap& feeds, const Fetches& fetches, const Targets& targets,
                                std::function<void(Result<std::vector<Tensor>>)> done) {
  const Graph& g = graph();
  auto named = ResolveFeeds(g, feeds);
  if (!named.ok()) return done(named.status());
  std::vector<std::string> fetch_names, target_names;
  fetch_names.reserve(fetches.list().size());
  for (const Fetch& f : fetches.list()) {
    auto n = f.NameIn(g);
    if (!n.ok()) return done(n.status().WithPrefix("fetch " + std::to_string(fetch_names.size())));
    fetch_names.push_back(std::move(n).value());
  }
  for (const Target& t : targets.list()) {
    auto n = t.NameIn(g);
    if (!n.ok()) return done(n.status());
    target_names.push_back(std::move(n).value());
  }
  StartRun(std::move(named).value(), std::move(fetch_names), std::move(target_names), std::move(done));
}

Result<std::vector<Tensor>> SessionInterface::Run(const FeedMap& feeds, const Fetches& fetches,
                                                  const Targets& targets) {
  // A mutex and condition variable rather than std::promise: the same cost,
  // and thread sanitizers see the hand-over (libstdc++'s futures hide theirs).
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<std::vector<Tensor>>> result;
  RunAsync(feeds, fetches, targets, [&](Result<std::vector<Tensor>> r) {
    std::lock_guard<std::mutex> l(mu);
    result.emplace(std::move(r));
    cv.notify_all();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return result.has_value(); });
  return std::move(*result);
}

namespace {

// Blocks until every callback of n asynchronous calls ran; the first error.
struct Waiter {
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = 0;
  Status first;
  void Done(const Status& s) {
    std::lock_guard<std::mutex> l(mu);
    if (!s.ok() && first.ok()) first = s;
    if (--remaining == 0) cv.notify_all();
  }
  Status Wait() {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return remaining == 0; });
    return first;
  }
};

}  // namespace

// Saves a checkpoint (an increment on the session's last save into dir when
// incremental and there is one), then keeps the newest keep_last (<= 0: all).
// REQUIRES: impl->ckpt_mu held.
static Result<int64_t> WriteCheckpoint(Session::Impl* impl, const std::string& dir, int64_t global_step,
                                      int keep_last, bool incremental);

Result<int64_t> Session::Save(const std::string& dir, int64_t global_step) {
  std::lock_guard<std::mutex> l(impl_->ckpt_mu);
  return WriteCheckpoint(impl_.get(), dir, global_step, 0, false);
}

Result<int64_t> Session::SaveCheckpoint(const std::string& dir, int64_t global_step, int keep_last) {
  std::lock_guard<std::mutex> l(impl_->ckpt_mu);
  return WriteCheckpoint(impl_.get(), dir, global_step, keep_last, false);
}

CheckpointSchedule::CheckpointSchedule(int64_t every_steps, double every_seconds)
    : every_steps_(every_steps), every_seconds_(every_seconds) {
  last_time_ = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool CheckpointSchedule::Due(int64_t step) {
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (last_step_ < 0) last_step_ = step - (step % std::max<int64_t>(every_steps_, 1));
  const bool by_steps = every_steps_ > 0 && step - last_step_ >= every_steps_;
  const bool by_time = every_seconds_ > 0 && now - last_time_ >= every_seconds_;
  if (!by_steps && !by_time) return false;
  last_step_ = step;
  last_time_ = now;
  return true;
}

Result<int64_t> Session::SaveIncremental(const std::string& dir, int64_t global_step) {
  return SaveIncrementalCheckpoint(dir, global_step, 0);
}

Result<int64_t> Session::SaveIncrementalCheckpoint(const std::string& dir, int64_t global_step, int keep_last) {
  std::lock_guard<std::mutex> l(impl_->ckpt_mu);
  return WriteCheckpoint(impl_.get(), dir, global_step, keep_last, true);
}

static Result<int64_t> WriteCheckpoint(Session::Impl* impl, const std::string& dir, int64_t global_step,
                                      int keep_last, bool incremental) {
  // Every save takes (and resets) the dirty rows, so they are always
  // relative to the last save; until this one commits there is no base.
  auto vars = impl->variables->SnapshotDirty();
  const std::string base_dir = impl->last_save_dir;
  const int64_t base_id = impl->last_save_id;
  impl->last_save_id = -1;
  SF_ASSIGN_OR_RETURN(auto writer, runtime::GraphCheckpointWriter::Begin(
                                        &impl->graph, dir, global_step, incremental && base_dir == dir ? base_id : -1));
  const bool inc = writer->incremental();
  for (const auto& v : vars) {
    if (inc && !v.all_dirty && !v.value.shape().empty())
      SF_RETURN_IF_ERROR(writer->AddRows(v.name, v.value, v.dirty_rows));
    else
      SF_RETURN_IF_ERROR(writer->Add(v.name, v.value));
  }
  SF_ASSIGN_OR_RETURN(int64_t id, writer->Commit(keep_last));
  impl->last_save_dir = dir;
  impl->last_save_id = id;
  return id;
}

Result<int64_t> Session::CompactCheckpoint(const std::string& dir, int64_t id) {
  SF_ASSIGN_OR_RETURN(auto kv, runtime::OpenCheckpointDir(dir, false));
  if (id < 0) {
    SF_ASSIGN_OR_RETURN(id, CheckpointReader(kv.get()).LatestCommitted());
  }
  return sf::CompactCheckpoint(kv.get(), id);
}

Result<int64_t> Session::CheckpointStep(const std::string& dir, int64_t id) {
  SF_ASSIGN_OR_RETURN(auto kv, runtime::OpenCheckpointDir(dir, false));
  CheckpointReader reader(kv.get());
  if (id < 0) {
    SF_ASSIGN_OR_RETURN(id, reader.LatestCommitted());
  }
  SF_ASSIGN_OR_RETURN(CheckpointInfo info, reader.Manifest(id));
  return info.global_step;
}

Status Session::Restore(const std::string& dir, int64_t id, int64_t* global_step) {
  std::lock_guard<std::mutex> l(impl_->ckpt_mu);
  SF_ASSIGN_OR_RETURN(runtime::GraphCheckpoint ckpt, runtime::ReadCheckpointForGraph(impl_->graph, dir, id));
  std::vector<runtime::CheckpointValue>& targets = ckpt.values;
  std::vector<std::pair<int64_t, Tensor>> assigns;
  for (auto& t : targets) {
    SF_ASSIGN_OR_RETURN(int64_t var_id, impl_->variables->Resolve(t.name, t.dtype, t.shape));
    assigns.emplace_back(var_id, std::move(t.value));
  }
  Waiter w;
  w.remaining = assigns.size() + 1;
  for (auto& a : assigns)
    impl_->variables->Assign(a.first, AssignMode::kAssign, std::move(a.second),
                             [&w](Result<Tensor> r) { w.Done(r.status()); });
  w.Done(Status::OK());
  SF_RETURN_IF_ERROR(w.Wait());
  // The assigns marked every variable changed: the next incremental save
  // writes in full (and has no base to build on).
  impl_->last_save_id = -1;
  if (global_step) *global_step = ckpt.global_step;
  return Status::OK();
}

}  // namespace sf
