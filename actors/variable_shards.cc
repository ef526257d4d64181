#include "actors/variable_shards.h"

#include <algorithm>
#include <condition_variable>

#include "kernels/in_memory_variables.h"
#include "kernels/optimizer_math.h"

namespace sf {
namespace runtime {
namespace {

struct ShardState {
  struct Var {
    std::string name;
    DType dtype = DType::kInvalid;
    PartialShape shape;
    Tensor value;  // invalid until initialised
  };
  std::unordered_map<int64_t, Var> vars;
};

Status Uninitialised(const std::string& name, const char* what) {
  return FailedPrecondition("variable '" + name + "' is " + what + " before it was initialised");
}

void HandleApply(ShardState& st, VarMsg& m) {
  // Every variable of the update must live here: that is what makes it atomic.
  std::vector<Tensor> updated;
  updated.reserve(m.req.var_ids.size());
  const std::string first = m.req.var_ids.empty() || !st.vars.count(m.req.var_ids[0])
                                ? std::string("?")
                                : st.vars[m.req.var_ids[0]].name;
  for (int64_t id : m.req.var_ids) {
    auto it = st.vars.find(id);
    if (it == st.vars.end()) {
      m.status_done(FailedPrecondition("optimizer " + m.req.optimizer + ": variable id " +
                                       std::to_string(id) + " is not colocated with '" + first +
                                       "' (slots must be named '<var>/...')"));
      return;
    }
    if (!it->second.value.valid()) {
      m.status_done(Uninitialised(it->second.name, "updated"));
      return;
    }
    // Copy-on-write: readers keep the snapshot they were given. When no
    // reader holds one, update in place (ApplyOptimizerUpdate validates
    // before it writes, so a failed update still changes nothing).
    const Tensor& v = it->second.value;
    updated.push_back(v.BufferIsUnique() ? v : v.Copy());
  }
  std::vector<Tensor*> ptrs;
  for (auto& t : updated) ptrs.push_back(&t);
  Status s = ApplyOptimizerUpdate(m.req, ptrs);
  if (s.ok()) {
    for (size_t i = 0; i < updated.size(); ++i) st.vars[m.req.var_ids[i]].value = std::move(updated[i]);
  } else {
    s = s.WithPrefix("variable '" + first + "'");
  }
  m.status_done(std::move(s));
}

}  // namespace

VariableShardActor SpawnVariableShard(caf::actor_system& sys) {
  return sys.spawn([](VariableShardActor::stateful_pointer<ShardState> self)
                       -> VariableShardActor::behavior_type {
    return {
        [self](VarMsgPtr msg) {
          ShardState& st = self->state;
          VarMsg& m = *msg;
          switch (m.kind) {
            case VarMsg::kDefine:
              st.vars[m.id] = ShardState::Var{m.name, m.dtype, m.shape, Tensor()};
              return;
            case VarMsg::kRead: {
              auto it = st.vars.find(m.id);
              if (it == st.vars.end()) m.tensor_done(NotFound("no variable with id " + std::to_string(m.id)));
              else if (!it->second.value.valid()) m.tensor_done(Uninitialised(it->second.name, "read"));
              else m.tensor_done(it->second.value);
              return;
            }
            case VarMsg::kAssign: {
              auto it = st.vars.find(m.id);
              if (it == st.vars.end()) {
                m.tensor_done(NotFound("no variable with id " + std::to_string(m.id)));
                return;
              }
              ShardState::Var& v = it->second;
              Status s = ApplyAssign(v.name, v.dtype, v.shape, m.mode, m.value, &v.value);
              if (s.ok()) m.tensor_done(v.value);
              else m.tensor_done(s);
              return;
            }
            case VarMsg::kApply:
              HandleApply(st, m);
              return;
            case VarMsg::kSnapshot: {
              // Copy-on-write values: later updates never touch these buffers.
              std::vector<std::pair<std::string, Tensor>> vars;
              for (const auto& kv : st.vars)
                if (kv.second.value.valid()) vars.emplace_back(kv.second.name, kv.second.value);
              m.snapshot_done(std::move(vars));
              return;
            }
          }
        },
    };
  });
}

ActorVariables::ActorVariables(caf::actor_system& sys, std::set<std::string> graph_variables)
    : sys_(sys), graph_variables_(std::move(graph_variables)) {}

ActorVariables::~ActorVariables() { Shutdown(); }

void ActorVariables::Shutdown() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& kv : shards_) caf::anon_send_exit(kv.second, caf::exit_reason::user_shutdown);
  shards_.clear();
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

Result<int64_t> ActorVariables::Resolve(const std::string& name, DType dtype,
                                        const PartialShape& shape) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = ids_.find(name);
  if (it != ids_.end()) {
    const Var& v = vars_[it->second];
    SF_RETURN_IF_ERROR(CheckSameVariable(name, v.dtype, v.shape, dtype, shape));
    return it->second;
  }
  const std::string key = ColocationKey(name);
  auto s = shards_.find(key);
  if (s == shards_.end()) s = shards_.emplace(key, SpawnVariableShard(sys_)).first;
  const int64_t id = static_cast<int64_t>(vars_.size());
  vars_.push_back(Var{name, dtype, shape, s->second});
  ids_[name] = id;
  auto msg = std::make_shared<VarMsg>();
  msg->kind = VarMsg::kDefine;
  msg->id = id;
  msg->name = name;
  msg->dtype = dtype;
  msg->shape = shape;
  // Enqueued before Resolve returns, so it precedes every later request.
  caf::anon_send(s->second, std::move(msg));
  return id;
}

bool ActorVariables::ShardOf(int64_t id, VariableShardActor* out) const {
  std::lock_guard<std::mutex> l(mu_);
  if (id < 0 || id >= static_cast<int64_t>(vars_.size())) return false;
  *out = vars_[id].shard;
  return true;
}

void ActorVariables::Read(int64_t id, std::function<void(Result<Tensor>)> done) {
  VariableShardActor shard;
  if (!ShardOf(id, &shard)) return done(NotFound("no variable with id " + std::to_string(id)));
  auto msg = std::make_shared<VarMsg>();
  msg->kind = VarMsg::kRead;
  msg->id = id;
  msg->tensor_done = std::move(done);
  caf::anon_send(shard, std::move(msg));
}

void ActorVariables::Assign(int64_t id, AssignMode mode, Tensor value,
                            std::function<void(Result<Tensor>)> done) {
  VariableShardActor shard;
  if (!ShardOf(id, &shard)) return done(NotFound("no variable with id " + std::to_string(id)));
  auto msg = std::make_shared<VarMsg>();
  msg->kind = VarMsg::kAssign;
  msg->id = id;
  msg->mode = mode;
  msg->value = std::move(value);
  msg->tensor_done = std::move(done);
  caf::anon_send(shard, std::move(msg));
}

void ActorVariables::Apply(ApplyRequest req, std::function<void(Status)> done) {
  VariableShardActor shard;
  if (req.var_ids.empty() || !ShardOf(req.var_ids[0], &shard))
    return done(NotFound("optimizer " + req.optimizer + ": unknown variable"));
  auto msg = std::make_shared<VarMsg>();
  msg->kind = VarMsg::kApply;
  msg->req = std::move(req);
  msg->status_done = std::move(done);
  caf::anon_send(shard, std::move(msg));
}

std::vector<std::pair<std::string, Tensor>> ActorVariables::SnapshotAll() {
  std::vector<VariableShardActor> shards;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& kv : shards_) shards.push_back(kv.second);
  }
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = shards.size();
  std::vector<std::pair<std::string, Tensor>> all;
  for (auto& shard : shards) {
    auto msg = std::make_shared<VarMsg>();
    msg->kind = VarMsg::kSnapshot;
    msg->snapshot_done = [&](std::vector<std::pair<std::string, Tensor>> vars) {
      std::lock_guard<std::mutex> l(mu);
      for (auto& v : vars) all.push_back(std::move(v));
      if (--remaining == 0) cv.notify_all();
    };
    caf::anon_send(shard, std::move(msg));
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return remaining == 0; });
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return all;
}

std::string ActorVariables::NameOf(int64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  return id >= 0 && id < static_cast<int64_t>(vars_.size()) ? vars_[id].name : "";
}

}  // namespace runtime
}  // namespace sf
