#include "actors/variable_shards.h"

#include <algorithm>
#include <condition_variable>
#include <optional>

#include "actors/shard_state.h"
#include "kernels/chunk_queue_service.h"
#include "kernels/compute_pool.h"
#include "kernels/in_memory_variables.h"

namespace sf {
namespace runtime {

ActorVariables::ActorVariables(caf::actor_system& sys, std::set<std::string> graph_variables)
    : sys_(sys), graph_variables_(std::move(graph_variables)), spawner_(SpawnCollectiveSpawner(sys)) {}

void ActorVariables::AddGraphVariables(const std::set<std::string>& names) {
  std::lock_guard<std::mutex> l(mu_);
  // Only colocation hints: past the bound they are dropped, not kept without one.
  for (const auto& n : names) {
    if (graph_variables_.size() >= kMaxVariables) break;
    graph_variables_.insert(n);
  }
}

ActorVariables::~ActorVariables() { Shutdown(); }

void ActorVariables::Shutdown() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& kv : shards_) caf::anon_send_exit(kv.second.actor, caf::exit_reason::user_shutdown);
  shards_.clear();
  groups_.clear();  // stops the all-reduce rings
  if (spawner_) caf::anon_send_exit(spawner_, caf::exit_reason::user_shutdown);
}

std::string ActorVariables::ColocationKey(const std::string& name) const {
  // The shortest graph variable that prefixes name as a path ("w" for "w/Adam/m").
  for (size_t pos = name.find('/'); pos != std::string::npos; pos = name.find('/', pos + 1)) {
    std::string prefix = name.substr(0, pos);
    // Variables resolved so far count too: the graph may have grown since.
    if (graph_variables_.count(prefix) || ids_.count(prefix)) return prefix;
  }
  return name;
}

Result<int64_t> ActorVariables::Resolve(const std::string& name, DType dtype, const PartialShape& shape) {
  return ResolveAs(name, dtype, shape, true);
}

Result<int64_t> ActorVariables::ResolveAs(const std::string& name, DType dtype, const PartialShape& shape,
                                          bool enforce) {
  if (name.empty() || name.size() > kMaxNameBytes)
    return InvalidArgument("variable name of " + std::to_string(name.size()) + " bytes ('" + name.substr(0, 64) +
                           (name.size() > 64 ? "...'" : "'") + ") refused: names are 1 to " +
                           std::to_string(kMaxNameBytes) + " bytes");
  std::lock_guard<std::mutex> l(mu_);
  auto it = ids_.find(name);
  if (it != ids_.end()) {
    const Var& v = vars_[it->second];
    SF_RETURN_IF_ERROR(CheckSameVariable(name, v.dtype, v.shape, dtype, shape));
    return it->second;
  }
  // Each variable costs a definition, and a new colocation group an actor:
  // bounded, so a peer naming variables without end cannot exhaust the node.
  if (ids_.size() >= kMaxVariables)
    return ResourceExhausted("variable '" + name + "' refused: " + std::to_string(ids_.size()) +
                             " variables exist here already (at most " + std::to_string(kMaxVariables) + ")");
  // Dropped ids are never reused (a late request must not reach another
  // variable): their records are small, and bounded too.
  if (vars_.size() >= 16 * kMaxVariables)
    return ResourceExhausted("variable '" + name + "' refused: this store defined " + std::to_string(vars_.size()) +
                             " variables in its life (at most " + std::to_string(16 * kMaxVariables) + ")");
  int64_t var_bytes = 0;
  if (quotas_) {
    // A declared shape's bytes count now; a hash shard's rows are not counted.
    int64_t bytes = 0;
    if (shape.fully_defined()) {
      bytes = DTypeSize(dtype);
      for (int i = 0; i < shape.rank(); ++i) bytes *= std::max<int64_t>(0, shape.dim(i));
    }
    SF_RETURN_IF_ERROR(quotas_->Take(NamespaceQuotas::Kind::kVariable, name, bytes, enforce));
    var_bytes = bytes;
  }
  const std::string key = ColocationKey(name);
  auto s = shards_.find(key);
  if (s == shards_.end()) {
    auto core = NewShardCore(pool_, cold_root_);
    VariableShardActor actor = SpawnShardActor(sys_, core);
    s = shards_.emplace(key, Shard{std::move(actor), std::move(core)}).first;
  }
  const int64_t id = static_cast<int64_t>(vars_.size());
  // Defined here when the shard is free, so that direct calls find it;
  // otherwise by a message enqueued before Resolve returns, which precedes
  // every later request for id, and id stays on the message path.
  const bool direct = TryHeld(*s->second.core, [&](ShardState& st) {
    st.vars[id] = ShardState::Var{name, dtype, shape, Tensor()};
  });
  if (!direct) caf::anon_send(s->second.actor, DefineVariable{id, name, dtype, shape});
  vars_.push_back(Var{name, dtype, shape, s->second.actor, direct ? s->second.core : nullptr, false, var_bytes});
  ids_[name] = id;
  return id;
}

bool ActorVariables::ShardOf(int64_t id, VariableShardActor* out, std::shared_ptr<ShardCore>* core) const {
  std::lock_guard<std::mutex> l(mu_);
  if (id < 0 || id >= static_cast<int64_t>(vars_.size()) || vars_[id].dropped) return false;
  *out = vars_[id].shard;
  if (core) *core = vars_[id].core;
  return true;
}

void ActorVariables::Read(int64_t id, std::function<void(Result<Tensor>)> done) {
  VariableShardActor shard;
  std::shared_ptr<ShardCore> core;
  if (!ShardOf(id, &shard, &core)) return done(NotFound("no variable with id " + std::to_string(id)));
  std::optional<Result<Tensor>> r;
  if (core && TryHeld(*core, [&](ShardState& st) {
        const ShardState::Var* v = st.Find(id);
        if (!v || !v->hash) r = ReadDense(v, id);  // a hash shard's state is serialized by its actor
      }) && r)
    return done(std::move(*r));
  caf::anon_send(shard, ReadVariable{id, std::move(done)});
}

void ActorVariables::Assign(int64_t id, AssignMode mode, Tensor value,
                            std::function<void(Result<Tensor>)> done, UpdateOrigin origin) {
  VariableShardActor shard;
  std::shared_ptr<ShardCore> core;
  if (!ShardOf(id, &shard, &core)) return done(NotFound("no variable with id " + std::to_string(id)));
  std::optional<Result<Tensor>> r;
  if (core && !IsHashShardState(value) && TryHeld(*core, [&](ShardState& st) {
        ShardState::Var* v = st.Find(id);
        if (!v) r = NoVariable(id);
        else if (!v->hash) r = AssignDense(st, *v, mode, value, origin);
      }) && r)
    return done(std::move(*r));
  caf::anon_send(shard, AssignVariable{id, mode, std::move(value), std::move(done), origin});
}

void ActorVariables::AssignRows(AssignRowsRequest req, std::function<void(Status)> done) {
  VariableShardActor shard;
  std::shared_ptr<ShardCore> core;
  if (!ShardOf(req.var_id, &shard, &core)) return done(NotFound("no variable with id " + std::to_string(req.var_id)));
  Status s;
  if (core && TryHeld(*core, [&](ShardState& st) {
        ShardState::Var* v = st.Find(req.var_id);
        s = v ? AssignRowsDense(st, *v, req) : NoVariable(req.var_id);
      }))
    return done(s);
  caf::anon_send(shard, AssignVariableRows{std::move(req), std::move(done)});
}

void ActorVariables::Refill(int64_t id, std::function<Status(Tensor*)> fill, std::function<void(Status)> done) {
  VariableShardActor shard;
  if (!ShardOf(id, &shard)) return done(NotFound("no variable with id " + std::to_string(id)));
  caf::anon_send(shard, RefillVariable{id, std::move(fill), std::move(done)});
}

void ActorVariables::Apply(ApplyRequest req, std::function<void(Status)> done) {
  VariableShardActor shard;
  std::shared_ptr<ShardCore> core;
  if (req.var_ids.empty() || !ShardOf(req.var_ids[0], &shard, &core))
    return done(NotFound(std::string("optimizer ") + OptimizerName(req.optimizer) +
                         ": unknown variable"));
  Status s;
  if (core && TryHeld(*core, [&](ShardState& st) { s = ApplyUpdate(st, req); })) return done(s);
  caf::anon_send(shard, ApplyDense{std::move(req), std::move(done)});
}

namespace {

// Sends every shard one Msg (SnapshotShard, SnapshotDirtyShard) whose
// callback hands back a vector of T, and blocks until all have answered; the
// answers concatenated.
template <typename Msg, typename T>
std::vector<T> AskEveryShard(const std::vector<VariableShardActor>& shards) {
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = shards.size();
  std::vector<T> all;
  for (const auto& shard : shards) {
    caf::anon_send(shard, Msg{[&](std::vector<T> part) {
      std::lock_guard<std::mutex> l(mu);
      for (auto& v : part) all.push_back(std::move(v));
      if (--remaining == 0) cv.notify_all();
    }});
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return remaining == 0; });
  return all;
}

}  // namespace

std::vector<VariableShardActor> ActorVariables::Shards() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<VariableShardActor> shards;
  for (auto& kv : shards_) shards.push_back(kv.second.actor);
  return shards;
}

void ActorVariables::ReadNamed(const std::vector<std::string>& names,
                               std::function<void(std::vector<std::pair<std::string, Tensor>>)> done) {
  using Named = std::pair<std::string, Tensor>;
  std::vector<std::pair<std::string, int64_t>> ids;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (names.empty()) {
      for (const auto& kv : ids_) ids.emplace_back(kv.first, kv.second);
    } else {
      for (const auto& n : names) {
        auto it = ids_.find(n);
        if (it != ids_.end()) ids.emplace_back(n, it->second);
      }
    }
  }
  struct Join {
    std::mutex mu;
    size_t remaining;
    std::vector<Named> out;
    std::function<void(std::vector<Named>)> done;
  };
  auto join = std::make_shared<Join>();
  join->remaining = ids.size() + 1;
  join->done = std::move(done);
  auto finish = [join](std::string name, Result<Tensor> r) {
    bool last;
    {
      std::lock_guard<std::mutex> l(join->mu);
      // An uninitialised variable has nothing to move or save.
      if (!name.empty() && r.ok()) join->out.emplace_back(std::move(name), std::move(r).value());
      last = --join->remaining == 0;
    }
    if (!last) return;
    std::sort(join->out.begin(), join->out.end(), [](const Named& a, const Named& b) { return a.first < b.first; });
    join->done(std::move(join->out));
  };
  for (auto& [name, id] : ids)
    Read(id, [finish, name = name](Result<Tensor> r) { finish(name, std::move(r)); });
  finish("", Status::OK());
}

void ActorVariables::AssignNamed(std::vector<std::pair<std::string, Tensor>> values,
                                 std::function<void(Status)> done) {
  // Variables before their slots ("w" sorts before "w/Adam/m"), and every name
  // known as a graph variable first, so a slot joins its variable's shard.
  std::sort(values.begin(), values.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::set<std::string> names;
  for (const auto& v : values) names.insert(v.first);
  AddGraphVariables(names);
  std::vector<std::pair<int64_t, Tensor>> assigns;
  for (auto& [name, value] : values) {
    if (!value.valid()) return done(InvalidArgument("variable '" + name + "': no value to assign"));
    // A chunk queue's state changes its length (a restore defines it here).
    auto id = Resolve(name, value.dtype(),
                      IsChunkQueueState(value) ? PartialShape::UnknownDims(1) : PartialShape(value.shape()));
    if (!id.ok()) return done(id.status());
    assigns.emplace_back(*id, std::move(value));
  }
  auto finish = JoinStatuses(assigns.size() + 1, std::move(done));
  for (auto& [id, value] : assigns)
    Assign(id, AssignMode::kAssign, std::move(value), [finish](Result<Tensor> r) { finish(r.status()); });
  finish(Status::OK());
}

std::vector<std::pair<std::string, Tensor>> ActorVariables::SnapshotAll() {
  using Named = std::pair<std::string, Tensor>;
  auto all = AskEveryShard<SnapshotShard, Named>(Shards());
  std::sort(all.begin(), all.end(), [](const Named& a, const Named& b) { return a.first < b.first; });
  return all;
}

std::vector<VarSnapshot> ActorVariables::SnapshotDirty() {
  auto all = AskEveryShard<SnapshotDirtyShard, VarSnapshot>(Shards());
  std::sort(all.begin(), all.end(), [](const VarSnapshot& a, const VarSnapshot& b) { return a.name < b.name; });
  return all;
}

void ActorVariables::GatherCombine(int64_t id, EmbeddingShardSpec spec, EmbeddingGather q,
                                   std::function<void(Result<Tensor>)> done) {
  VariableShardActor shard;
  std::shared_ptr<ShardCore> core;
  if (!ShardOf(id, &shard, &core)) return done(NotFound("no variable with id " + std::to_string(id)));
  std::optional<Result<Tensor>> r;
  // Hash tables stay with their actor (their cold tier reads from disk).
  if (core && spec.partition != EmbeddingPartition::kHash && TryHeld(*core, [&](ShardState& st) {
        const ShardState::Var* v = st.Find(id);
        if (!v) r = NoVariable(id);
        else if (!v->hash) r = GatherDense(st, *v, spec, q);
      }) && r)
    return done(std::move(*r));
  caf::anon_send(shard, GatherRows{id, std::move(spec), std::move(q), std::move(done)});
}

void ActorVariables::SparseApply(SparseApplyRequest req, std::function<void(Status)> done) {
  VariableShardActor shard;
  std::shared_ptr<ShardCore> core;
  if (req.var_ids.empty() || !ShardOf(req.var_ids[0], &shard, &core))
    return done(NotFound(std::string("sparse optimizer ") + OptimizerName(req.optimizer) +
                         ": unknown variable"));
  std::optional<Status> s;
  if (core && TryHeld(*core, [&](ShardState& st) {
        const ShardState::Var* v = st.Find(req.var_ids[0]);
        if (!v || !v->hash) s = ApplySparseUpdate(st, req);
      }) && s)
    return done(*s);
  caf::anon_send(shard, ApplySparse{std::move(req), std::move(done)});
}

void ActorVariables::InitHashShard(int64_t id, HashShardConfig config, std::function<void(Status)> done) {
  VariableShardActor shard;
  if (!ShardOf(id, &shard)) return done(NotFound("no variable with id " + std::to_string(id)));
  if (quotas_) {
    std::lock_guard<std::mutex> l(mu_);
    if (!tables_.count(id)) {
      Status s = quotas_->Take(NamespaceQuotas::Kind::kTable, vars_[id].name, 0, true);
      if (!s.ok()) return done(s);
      tables_.insert(id);
    }
    // Its rows' RAM counts against the namespace's bytes as the shard grows.
    config.budget = NamespaceQuotas::RowBudget(quotas_, vars_[id].name);
  }
  caf::anon_send(shard, runtime::InitHashShard{id, std::move(config), std::move(done)});
}

void ActorVariables::HashShardStats(int64_t id, std::function<void(Result<Tensor>)> done) {
  VariableShardActor shard;
  if (!ShardOf(id, &shard)) return done(NotFound("no variable with id " + std::to_string(id)));
  caf::anon_send(shard, QueryHashShard{id, std::move(done)});
}

std::vector<std::string> ActorVariables::NamesWhere(const std::function<bool(const std::string&)>& keep) const {
  std::lock_guard<std::mutex> l(mu_);
  return SortedKeysWhere(ids_, keep);
}

int64_t ActorVariables::DropWhere(const std::function<bool(const std::string&)>& drop) {
  std::lock_guard<std::mutex> l(mu_);
  int64_t dropped = 0;
  for (auto it = ids_.begin(); it != ids_.end();) {
    if (!drop(it->first)) {
      ++it;
      continue;
    }
    Var& v = vars_[it->second];
    if (quotas_) {
      quotas_->Give(NamespaceQuotas::Kind::kVariable, v.name, v.bytes);
      if (tables_.erase(it->second)) quotas_->Give(NamespaceQuotas::Kind::kTable, v.name, 0);
    }
    // The shard's state goes once in-flight requests, which hold the actor, are done.
    v.shard = VariableShardActor();
    v.core.reset();
    v.dropped = true;
    ++dropped;
    it = ids_.erase(it);
  }
  for (auto it = shards_.begin(); it != shards_.end();) it = drop(it->first) ? shards_.erase(it) : std::next(it);
  for (auto it = graph_variables_.begin(); it != graph_variables_.end();)
    it = drop(*it) ? graph_variables_.erase(it) : std::next(it);
  return dropped;
}

std::string ActorVariables::NameOf(int64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  return id >= 0 && id < static_cast<int64_t>(vars_.size()) ? vars_[id].name : "";
}

// ---- replication ----

void ActorVariables::ApplySync(SyncApplyRequest req, std::function<void(Result<int64_t>)> done) {
  VariableShardActor shard;
  if (req.req.var_ids.empty() || !ShardOf(req.req.var_ids[0], &shard))
    return done(NotFound(std::string("synchronous ") + OptimizerName(req.req.optimizer) +
                         ": unknown variable"));
  caf::anon_send(shard, ApplySyncGradient{std::move(req), std::move(done)});
}

void ActorVariables::SparseApplySync(SparseSyncApplyRequest req, std::function<void(Result<int64_t>)> done) {
  VariableShardActor shard;
  if (req.req.var_ids.empty() || !ShardOf(req.req.var_ids[0], &shard))
    return done(NotFound(std::string("synchronous sparse ") + OptimizerName(req.req.optimizer) +
                         ": unknown embedding shard"));
  caf::anon_send(shard, ApplySparseSyncGradient{std::move(req), std::move(done)});
}

void ActorVariables::AbortSync(int64_t id, std::function<void(Status)> done) {
  VariableShardActor shard;
  if (!ShardOf(id, &shard)) return done(NotFound("no variable with id " + std::to_string(id)));
  caf::anon_send(shard, AbortSyncSteps{id, std::move(done)});
}

void ActorVariables::AbortWaits(int64_t run_step, const Status& why) {
  for (const VariableShardActor& shard : Shards()) caf::anon_send(shard, AbortStepWaits{run_step, why});
}

void ActorVariables::ReadWithVersion(int64_t id,
                                     std::function<void(Result<std::pair<Tensor, int64_t>>)> done) {
  VariableShardActor shard;
  if (!ShardOf(id, &shard)) return done(NotFound("no variable with id " + std::to_string(id)));
  caf::anon_send(shard, ReadVersioned{id, std::move(done)});
}

void ActorVariables::QueryReplica(int64_t id, ReplicaQuery what,
                                  std::function<void(Result<Tensor>)> done) {
  VariableShardActor shard;
  if (!ShardOf(id, &shard)) return done(NotFound("no variable with id " + std::to_string(id)));
  caf::anon_send(shard, QueryReplicaStats{id, what, std::move(done)});
}

void ActorVariables::StaleSyncWait(int64_t id, int64_t worker, int64_t clock, int64_t num_workers,
                                   int64_t staleness, int64_t run_step, std::function<void(Status)> done) {
  VariableShardActor shard;
  if (!ShardOf(id, &shard)) return done(NotFound("no variable with id " + std::to_string(id)));
  caf::anon_send(shard, WaitStaleSync{id, worker, clock, num_workers, staleness, run_step, std::move(done)});
}

void ActorVariables::AllReduce(const std::string& group_key, int64_t group_size, int64_t rank,
                               Tensor value, std::function<void(Result<Tensor>)> done) {
  const std::string where = "all-reduce group '" + group_key + "'";
  if (group_size < 1 || group_size > 4096)
    return done(InvalidArgument(where + ": group size must be in [1, 4096], got " + std::to_string(group_size)));
  if (rank < 0 || rank >= group_size)
    return done(InvalidArgument(where + ": rank " + std::to_string(rank) + " is out of range [0, " +
                                std::to_string(group_size) + ")"));
  if (all_reduce_) return all_reduce_(group_key, group_size, rank, std::move(value), std::move(done));
  // Contributes to an existing group (under mu_: Shutdown may not destroy it
  // meanwhile); false when the group does not exist yet. Errors go to done
  // outside the lock.
  auto contribute = [this, group_key, group_size, rank, where](
                        Tensor& value, std::function<void(Result<Tensor>)>& done, bool create) {
    int64_t have = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = groups_.find(group_key);
      if (it == groups_.end()) {
        if (!create) return false;
        it = groups_.emplace(group_key, std::make_unique<CollectiveGroup>(sys_, group_key, group_size)).first;
      }
      have = it->second->size();
      if (have == group_size) {
        it->second->Contribute(rank, std::move(value), std::move(done));
        return true;
      }
    }
    done(InvalidArgument(where + " has " + std::to_string(have) + " ranks, rank " + std::to_string(rank) +
                         " says " + std::to_string(group_size)));
    return true;
  };
  if (contribute(value, done, /*create=*/false)) return;
  // The group's actors are spawned by the spawner, on a CAF thread.
  CollectiveSpawner spawner;
  {
    std::lock_guard<std::mutex> l(mu_);
    spawner = spawner_;
  }
  auto task = std::make_shared<CollectiveTask>();
  auto state = std::make_shared<std::pair<Tensor, std::function<void(Result<Tensor>)>>>(std::move(value), std::move(done));
  task->run = [contribute, state]() mutable { contribute(state->first, state->second, /*create=*/true); };
  caf::anon_send(spawner, std::move(task));
}

ExecutorEnv ActorExecutorEnv(const KernelRegistry* kernels, ComputePool* pool, ActorVariables* vars,
                             QueueService* queues, RendezvousService* rendezvous, CheckpointService* checkpoints) {
  ExecutorEnv env;
  env.kernels = kernels;
  env.pool = pool;
  env.variables = vars;
  env.embeddings = vars;
  env.replication = vars;
  env.collectives = vars;
  env.queues = queues;
  env.rendezvous = rendezvous;
  env.checkpoints = checkpoints;
  return env;
}

}  // namespace runtime
}  // namespace sf
