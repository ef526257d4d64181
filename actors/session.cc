// Session: the embedded runtime. The coordinator (runtime/coordinator.h)
// plans each run signature once (prune, check, place, partition) and
// registers the partitions on the session's partition host actor, which
// runs their steps in executors on the session's compute pool; variables
// live in variable shard actors.
#include "shardflow/session.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <optional>
#include <set>

#include "actors/caf_thread_logger.h"
#include "actors/checkpoint_io.h"
#include "actors/coordinator_actor.h"
#include "actors/partition_host.h"
#include "actors/queue_actors.h"
#include "actors/variable_shards.h"
#include "kernels/compute_pool.h"
#include "runtime/coordinator.h"
#include "runtime/plan.h"
#include "runtime/rendezvous.h"
#include "storage/checkpoint.h"
#include "storage/embedding_reshard.h"

namespace sf {

struct Session::Impl {
  Impl(const Graph& g, const SessionOptions& o)
      : graph(g), kernels(o.kernels), pool(o.compute_threads), checkpoints(runtime::NewStoreCheckpointService()) {
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
    queues = std::make_unique<runtime::ActorQueues>(*system, o.chunk_queue_clock_ms);
    // One host serves every device of the session: they share the pool and
    // the rendezvous.
    runtime::PartitionHostOptions ho;
    ho.env = runtime::ActorExecutorEnv(kernels, &pool, variables.get(), queues.get(), &rendezvous, checkpoints.get());
    ho.env.max_tensor_bytes = o.max_tensor_bytes;
    ho.steps = &rendezvous;
    host = runtime::NewLocalPartitionHost(*system, std::move(ho));
    runtime::CoordinatorOptions co;
    for (int i = 0; i < std::max(1, o.num_cpu_devices); ++i)
      co.devices.push_back("/job:localhost/task:0/device:CPU:" + std::to_string(i));
    co.host_for = [this](const std::string&) -> Result<std::shared_ptr<runtime::PartitionHost>> { return host; };
    coordinator = std::make_unique<runtime::Coordinator>(g, std::move(co));
    runtime::Coordinator* c = coordinator.get();
    coordinator_actor = runtime::SpawnCoordinatorActor(*system, [c](runtime::RunCall& call) {
      c->StartStep(c->PlanFor(call.feeds, call.fetches, call.targets), call.feeds, std::move(call.done), call.options);
    });
  }

  ~Impl() {
    // Steps waiting on a queue would otherwise wait forever: fail them.
    queues->Shutdown();
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return in_flight == 0; });
    }
    caf::anon_send_exit(coordinator_actor, caf::exit_reason::user_shutdown);
    coordinator_actor = nullptr;  // a detached actor's thread ends with its last reference
    // The plans hold the host; the last reference stops its actor.
    coordinator.reset();
    host.reset();
    variables->Shutdown();
    queues->Stop();
    system.reset();  // waits for the actors to finish
  }

  const Graph& graph;
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
  std::shared_ptr<runtime::PartitionHost> host;
  std::unique_ptr<runtime::Coordinator> coordinator;
  runtime::CoordinatorActor coordinator_actor;

  // Serializes Save and Restore: a RocksDB directory opens once at a time.
  std::mutex ckpt_mu;
  // The checkpoint the variables' dirty rows are relative to (the last
  // committed save); -1 when there is none (SaveIncremental writes in full).
  std::string last_save_dir;  // GUARDED_BY(ckpt_mu)
  int64_t last_save_id = -1;  // GUARDED_BY(ckpt_mu)

  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;  // GUARDED_BY(mu)
};

Session::Session(const Graph& g, SessionOptions options) {
  impl_ = std::make_unique<Impl>(g, options);
}

Session::~Session() = default;

void Session::StartRun(const RunOptions& options, NamedFeeds feeds, std::vector<std::string> fetches,
                       std::vector<std::string> targets, std::function<void(Result<std::vector<Tensor>>)> done) {
  Impl* impl = impl_.get();
  {
    std::lock_guard<std::mutex> l(impl->mu);
    ++impl->in_flight;
  }
  auto finish = [impl, done = std::move(done)](Result<std::vector<Tensor>> r) {
    done(std::move(r));
    std::lock_guard<std::mutex> l(impl->mu);
    if (--impl->in_flight == 0) impl->cv.notify_all();
  };
  if (auto plan = impl->coordinator->Find(runtime::RunSignature(feeds, fetches, targets)))
    return impl->coordinator->StartStep(plan, feeds, std::move(finish), options);
  caf::anon_send(impl->coordinator_actor, runtime::RunCall{std::move(feeds), std::move(fetches), std::move(targets),
                                                           std::move(finish), options});
}

const Graph& Session::graph() const { return impl_->graph; }

void Session::CancelWaits() { impl_->queues->Shutdown(); }

void SessionInterface::RunAsync(const FeedMap& feeds, const Fetches& fetches, const Targets& targets,
                                std::function<void(Result<std::vector<Tensor>>)> done) {
  RunAsync(feeds, fetches, targets, RunOptions{}, std::move(done));
}

void SessionInterface::RunAsync(const FeedMap& feeds, const Fetches& fetches, const Targets& targets,
                                const RunOptions& options, std::function<void(Result<std::vector<Tensor>>)> done) {
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
  StartRun(options, std::move(named).value(), std::move(fetch_names), std::move(target_names), std::move(done));
}

Result<std::vector<Tensor>> SessionInterface::Run(const FeedMap& feeds, const Fetches& fetches,
                                                  const Targets& targets) {
  return Run(feeds, fetches, targets, RunOptions{});
}

Result<std::vector<Tensor>> SessionInterface::Run(const FeedMap& feeds, const Fetches& fetches,
                                                  const Targets& targets, const RunOptions& options) {
  // A mutex and condition variable rather than std::promise: the same cost,
  // and thread sanitizers see the hand-over (libstdc++'s futures hide theirs).
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<std::vector<Tensor>>> result;
  RunAsync(feeds, fetches, targets, options, [&](Result<std::vector<Tensor>> r) {
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
  SF_ASSIGN_OR_RETURN(auto kv, OpenCheckpointStore(dir, false));
  if (id < 0) {
    SF_ASSIGN_OR_RETURN(id, CheckpointReader(kv.get()).LatestCommitted());
  }
  return sf::CompactCheckpoint(kv.get(), id);
}

Result<int64_t> Session::CheckpointStep(const std::string& dir, int64_t id) {
  SF_ASSIGN_OR_RETURN(auto kv, OpenCheckpointStore(dir, false));
  CheckpointReader reader(kv.get());
  if (id < 0) {
    SF_ASSIGN_OR_RETURN(id, reader.LatestCommitted());
  }
  SF_ASSIGN_OR_RETURN(CheckpointInfo info, reader.Manifest(id));
  return info.global_step;
}

Status Session::Restore(const std::string& dir, int64_t id, int64_t* global_step) {
  std::lock_guard<std::mutex> l(impl_->ckpt_mu);
  // Into the variables' own memory when the checkpoint allows: fresh memory
  // for every value was most of a restore's time (the kernel zeroing pages).
  SF_ASSIGN_OR_RETURN(bool in_place, runtime::RestoreInPlace(impl_->graph, dir, id, impl_->variables.get(), global_step));
  if (in_place) {
    impl_->last_save_id = -1;
    return Status::OK();
  }
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
