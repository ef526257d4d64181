// Replication builders: SyncReplicas wraps an optimizer by letting it build
// its ordinary Apply* node (slots, hyperparameters) and re-issuing that node's
// inputs as one ApplyGradientSync / ApplyGradientAsync with the tag appended.
// The ordinary node stays in the graph unreferenced; a session prunes it.
#include "shardflow/replication.h"

#include <algorithm>
#include <map>
#include <set>

#include "kernels/optimizer_spec.h"
#include "shardflow/gradients.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

// The handle behind `v`: a VarHandle output itself, or a read made by ops::Variable.
Output AsHandle(Output v) {
  if (v.valid() && v.op().op == "VarHandle") return v;
  return ops::VariableHandle(v);
}

// Builds opt's update of handle by grad, then a tagged copy of it: op
// ("ApplyGradientSync"/"ApplyGradientAsync") with the same inputs plus tag.
Result<int> TaggedApply(Graph& g, Optimizer& opt, Output handle, Output grad, Output tag,
                        const std::string& op, AttrMap attrs) {
  SF_ASSIGN_OR_RETURN(Operation group, opt.ApplyGradients(g, {{grad, handle}}));
  const Node& noop = g.node(group.node);
  if (noop.control_inputs.size() != 1)
    return Internal(opt.name() + " built " + std::to_string(noop.control_inputs.size()) +
                    " updates for one variable");
  const Node& apply = g.node(noop.control_inputs[0]);
  const OptimizerSpec* spec = FindOptimizerByOp(apply.op);
  if (!spec || apply.op != spec->apply_op)
    return Internal(opt.name() + " built a '" + apply.op + "' node, not an Apply* update");
  std::vector<Output> inputs = apply.inputs;
  inputs.push_back(tag);
  attrs.Set("optimizer", std::string(spec->name));
  auto nesterov = apply.attrs.GetOr<bool>("use_nesterov", false);
  if (nesterov.ok()) attrs.Set("use_nesterov", *nesterov);
  int id = g.AddNode(op, inputs, std::move(attrs));
  if (id < 0) return g.status();
  return id;
}

}  // namespace

Result<SyncReplicaTrainOp> SyncReplicas::Minimize(Graph& g, Output loss, int replica,
                                                  const std::vector<Output>& var_list) {
  SF_RETURN_IF_ERROR(g.status());
  const std::string where = "SyncReplicas(" + opt_.name() + ")";
  if (o_.replicas_to_aggregate < 1)
    return InvalidArgument(where + ": replicas_to_aggregate must be >= 1, got " +
                           std::to_string(o_.replicas_to_aggregate));
  if (o_.total_num_replicas < o_.replicas_to_aggregate)
    return InvalidArgument(where + ": total_num_replicas (" + std::to_string(o_.total_num_replicas) +
                           ") must be >= replicas_to_aggregate (" +
                           std::to_string(o_.replicas_to_aggregate) + ")");
  if (replica < 0 || replica >= o_.total_num_replicas)
    return InvalidArgument(where + ": replica " + std::to_string(replica) + " is out of range [0, " +
                           std::to_string(o_.total_num_replicas) + ")");
  if (o_.timeout_ms < 0) return InvalidArgument(where + ": timeout_ms must be >= 0");
  if (!loss.valid()) return InvalidArgument(where + ": the loss is invalid");
  SyncReplicaTrainOp t;
  if (var_list.empty()) {
    for (int i = 0; i < g.num_nodes(); ++i) {
      const Node& n = g.node(i);
      auto tr = n.attrs.GetOr<bool>("trainable", false);
      if (n.op == "VarHandle" && tr.ok() && *tr) t.handles.push_back(Output(&g, i, 0));
    }
  } else {
    for (const Output& v : var_list) {
      Output h = AsHandle(v);
      if (!h.valid())
        return InvalidArgument(where + ": '" + (v.valid() ? v.name() : "?") +
                               "' is not a variable made by ops::Variable");
      t.handles.push_back(h);
    }
  }
  if (t.handles.empty()) return InvalidArgument(where + ": there are no variables to train");
  // An embedding table's shard passes no dense gradient back: its lookups
  // get the optimizer's sparse update, re-issued as a synchronous one
  // (EmbeddingSparseApplySync).
  std::set<Output> handle_set(t.handles.begin(), t.handles.end());
  std::vector<Output> lookups;
  for (int n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.op == "EmbeddingShardLookup" && !node.inputs.empty() && handle_set.count(node.inputs[0]))
      lookups.push_back(Output(&g, n, 0));
  }
  std::vector<Output> lookup_grads;
  if (!lookups.empty()) {
    SF_ASSIGN_OR_RETURN(lookup_grads, Gradients(g, {loss}, lookups, {}, /*allow_unconnected=*/true));
  }
  // A shard's step counts one contribution per worker: its trained lookups
  // make one update (ShardGradient), in the order the shards are first seen.
  std::vector<Output> trained_shards;
  std::map<Output, std::pair<std::vector<int>, std::vector<Output>>> per_shard;
  for (size_t i = 0; i < lookups.size(); ++i) {
    if (!lookup_grads[i].valid()) continue;
    auto read_only = lookups[i].op().attrs.GetOr<bool>("read_only", false);
    if (!read_only.ok() || *read_only) {
      auto table = lookups[i].op().attrs.GetOr<std::string>("table", "?");
      return InvalidArgument(where + ": the loss reads embedding table '" + (table.ok() ? *table : "?") +
                             "' through a read-only view, which cannot train it");
    }
    const Output shard = lookups[i].op().inputs[0];
    auto& entry = per_shard[shard];
    if (entry.first.empty()) trained_shards.push_back(shard);
    entry.first.push_back(lookups[i].node);
    entry.second.push_back(lookup_grads[i]);
  }
  SF_ASSIGN_OR_RETURN(std::vector<Output> grads,
                      Gradients(g, {loss}, t.handles, {}, /*allow_unconnected=*/true));
  const std::string prefix = "replica_" + std::to_string(replica);
  t.step_tag = ops::Placeholder(g, DType::kInt64, PartialShape(Shape{}), prefix + "/step_tag");
  std::vector<int> updates;
  std::vector<Output> handles;
  for (size_t i = 0; i < t.handles.size(); ++i) {
    if (!grads[i].valid()) continue;  // the loss does not depend on this variable
    AttrMap a;
    a.Set("num_required", static_cast<int64_t>(o_.replicas_to_aggregate));
    a.Set("timeout_ms", o_.timeout_ms);
    SF_ASSIGN_OR_RETURN(int id, TaggedApply(g, opt_, t.handles[i], grads[i], t.step_tag,
                                            "ApplyGradientSync", std::move(a)));
    updates.push_back(id);
    handles.push_back(t.handles[i]);
    t.counted_in.push_back(Output(&g, id, 0));
  }
  for (const Output& shard : trained_shards) {
    const auto& [shard_lookups, dys] = per_shard[shard];
    SF_ASSIGN_OR_RETURN(ShardSparseGradient sg, ShardGradient(g, shard_lookups, dys));
    SF_ASSIGN_OR_RETURN(int sparse, opt_.ApplySparseOne(g, shard, sg));
    const Node& apply = g.node(sparse);
    const OptimizerSpec* spec = FindOptimizerByOp(apply.op);
    if (!spec || !spec->sparse_op || apply.op != spec->sparse_op)
      return Internal(opt_.name() + " built a '" + apply.op + "' node, not a sparse update");
    std::vector<Output> inputs = apply.inputs;
    inputs.push_back(t.step_tag);
    AttrMap attrs = apply.attrs;
    attrs.Set("optimizer", std::string(spec->name));
    attrs.Set("num_required", static_cast<int64_t>(o_.replicas_to_aggregate));
    attrs.Set("timeout_ms", o_.timeout_ms);
    const int id = g.AddNode("EmbeddingSparseApplySync", inputs, std::move(attrs));
    if (id < 0) return g.status();
    updates.push_back(id);
    if (std::find(handles.begin(), handles.end(), shard) == handles.end()) handles.push_back(shard);
    t.counted_in.push_back(Output(&g, id, 0));
  }
  if (updates.empty()) return InvalidArgument(where + ": the loss depends on none of the variables");
  t.handles = std::move(handles);
  t.train_op = ops::NoOp(g, updates, prefix + "/sync_train");
  if (!t.train_op.valid()) return g.status();
  Output stats = ops::SyncReplicaStats(g, t.handles[0]);
  t.global_step = ops::Reshape(g, ops::Slice(g, stats, {0}, {1}), std::vector<int64_t>{});
  SF_RETURN_IF_ERROR(g.status());
  return t;
}

VersionedRead ReadVariableWithVersion(Graph& g, Output handle) {
  VersionedRead r;
  r.handle = AsHandle(handle);
  if (!r.handle.valid()) {
    g.RecordError(InvalidArgument("ReadVariableWithVersion: '" +
                                  (handle.valid() ? handle.name() : std::string("?")) +
                                  "' is not a variable handle or a read made by ops::Variable"));
    return r;
  }
  auto dt = r.handle.op().attrs.Get<DType>("dtype");
  if (!dt.ok()) {
    g.RecordError(dt.status());
    return r;
  }
  AttrMap a;
  a.Set("dtype", *dt);
  int id = g.AddNode("ReadVariableWithVersion", {r.handle}, std::move(a));
  if (id < 0) return r;
  r.value = Output(&g, id, 0);
  r.version = Output(&g, id, 1);
  return r;
}

Result<Operation> MinimizeAsync(Graph& g, Optimizer& opt, Output loss, const std::vector<VersionedRead>& reads) {
  SF_RETURN_IF_ERROR(g.status());
  const std::string where = "MinimizeAsync(" + opt.name() + ")";
  if (!loss.valid()) return InvalidArgument(where + ": the loss is invalid");
  if (reads.empty()) return InvalidArgument(where + ": there are no variables to train");
  std::vector<Output> values;
  for (const VersionedRead& r : reads) {
    if (!r.value.valid() || !r.version.valid() || !r.handle.valid())
      return InvalidArgument(where + ": a read was not made by ReadVariableWithVersion");
    values.push_back(r.value);
  }
  SF_ASSIGN_OR_RETURN(std::vector<Output> grads, Gradients(g, {loss}, values, {}, true));
  std::vector<int> updates;
  for (size_t i = 0; i < reads.size(); ++i) {
    if (!grads[i].valid()) continue;
    SF_ASSIGN_OR_RETURN(int id, TaggedApply(g, opt, reads[i].handle, grads[i], reads[i].version,
                                            "ApplyGradientAsync", AttrMap()));
    updates.push_back(id);
  }
  if (updates.empty()) return InvalidArgument(where + ": the loss depends on none of the variables");
  Operation op = ops::NoOp(g, updates, "async_train");
  if (!op.valid()) return g.status();
  return op;
}

namespace ops {

Output SyncReplicaStats(Graph& g, Output handle) { return g.Add1("SyncReplicaStats", {AsHandle(handle)}); }

Output StalenessStats(Graph& g, Output handle) { return g.Add1("StalenessStats", {AsHandle(handle)}); }

Operation AbortSyncStep(Graph& g, Output handle) { return Operation(&g, g.AddNode("AbortSyncStep", {AsHandle(handle)})); }

Operation StaleSyncWait(Graph& g, Output handle, Output clock, int worker, int num_workers, int staleness) {
  AttrMap a;
  a.Set("worker", static_cast<int64_t>(worker));
  a.Set("num_workers", static_cast<int64_t>(num_workers));
  a.Set("staleness", static_cast<int64_t>(staleness));
  return Operation(&g, g.AddNode("StaleSyncWait", {AsHandle(handle), clock}, std::move(a)));
}

Output AllReduce(Graph& g, Output x, const std::string& group_key, int group_size, int rank) {
  AttrMap a;
  a.Set("group_key", group_key);
  a.Set("group_size", static_cast<int64_t>(group_size));
  a.Set("rank", static_cast<int64_t>(rank));
  return g.Add1("AllReduce", {x}, std::move(a));
}

}  // namespace ops
}  // namespace sf
