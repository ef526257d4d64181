// A variable shard's state: updates, reads and snapshots of a held
// ShardState (actors/shard_state.h).
#include "actors/shard_state.h"

#include "graph/namespaces.h"
#include "graph/path_attrs.h"
#include "kernels/compute_pool.h"
#include "kernels/in_memory_variables.h"
#include "kernels/optimizer_math.h"
#include "storage/hash_cold_store.h"

namespace sf {
namespace runtime {

// Gives a hash shard whose config names a cold_dir its cold tier, emptied
// first (the shard's rows are all in RAM or in its saved state). On a node
// every cold_dir (a graph's attribute, a state a session assigned, one a
// replica or checkpoint carried) is opened here, under the node's root.
Status AttachColdTier(HashEmbeddingShard& h, const ShardState& st, const std::string& var) {
  const HashShardConfig& c = h.config();
  if (c.cold_dir.empty()) return Status::OK();
  std::string dir = c.cold_dir;
  if (st.cold_root) {
    const std::string what = "hash embedding table '" + c.table + "': cold_dir";
    if (st.cold_root->empty())
      return FailedPrecondition(what + " '" + c.cold_dir +
                                "' refused: this node has no data directory (shardflow node --data-dir DIR)");
    SF_RETURN_IF_ERROR(CheckRelativePath(c.cold_dir, what, "the node's --data-dir"));
    // Opening a cold tier empties it: a state a session assigned must not
    // name another namespace's directory (the graph's attribute was scoped
    // when it was registered; an assigned state's config is the session's).
    const std::string ns = NamespaceOf(var);
    const std::string prefix = "@" + ns + "/";
    if (ns.empty()) {
      SF_RETURN_IF_ERROR(CheckSessionDir(c.cold_dir, what));
    } else if (c.cold_dir.compare(0, prefix.size(), prefix) != 0 || c.cold_dir.size() == prefix.size() ||
               !CheckSessionDir(c.cold_dir.substr(prefix.size()), what).ok()) {
      return InvalidArgument(what + " '" + c.cold_dir + "' lies outside the directory of namespace '" + ns + "'");
    }
    dir = *st.cold_root + "/" + c.cold_dir;
  }
  SF_ASSIGN_OR_RETURN(auto store, OpenHashColdStore(dir, c.table, c.shard));
  SF_RETURN_IF_ERROR(store->Clear());
  return h.SetColdStore(std::move(store));
}

// The table of a shard variable "<table>/part_<k>" (the name itself otherwise).
std::string TableOfShard(const std::string& name) {
  const size_t p = name.rfind("/part_");
  return p == std::string::npos ? name : name.substr(0, p);
}

Status NoVariable(int64_t id) { return NotFound("no variable with id " + std::to_string(id) + " in this shard"); }

Status Uninitialised(const std::string& name, const char* what) {
  return FailedPrecondition("variable '" + name + "' is " + what + " before it was initialised");
}

// Applies one optimizer update to variables of this shard; the error names
// the variable. Records the update's version (and staleness) on success.
Status ApplyUpdate(ShardState& st, const ApplyRequest& req) {
  if (st.applied.Seen(req.origin)) return Status::OK();  // a step run again: applied before
  // Every variable of the update must live here: that is what makes it atomic.
  std::vector<Tensor> updated;
  updated.reserve(req.var_ids.size());
  const std::string first = st.FirstName(req.var_ids);
  for (int64_t id : req.var_ids) {
    const ShardState::Var* v = st.Find(id);
    if (!v) {
      return FailedPrecondition(std::string("optimizer ") + OptimizerName(req.optimizer) +
                                ": variable id " + std::to_string(id) +
                                " is not colocated with '" + first +
                                "' (slots must be named '<var>/...')");
    }
    if (!v->value.valid()) return Uninitialised(v->name, "updated");
    // Copy-on-write: readers keep the snapshot they were given. When no
    // reader holds one, update in place (ApplyOptimizerUpdate validates
    // before it writes, so a failed update still changes nothing).
    updated.push_back(v->value.BufferIsUnique() ? v->value : v->value.Copy());
  }
  std::vector<Tensor*> ptrs;
  for (auto& t : updated) ptrs.push_back(&t);
  Status s = ApplyOptimizerUpdate(req, ptrs, st.pool);
  if (s.ok()) {
    for (size_t i = 0; i < updated.size(); ++i) {
      st.vars[req.var_ids[i]].value = std::move(updated[i]);
      st.vars[req.var_ids[i]].MarkAll();
    }
    st.Replica(req.var_ids[0]).RecordUpdate(req.read_version);
    st.applied.Record(req.origin, ShardState::NowMs());
  } else {
    s = s.WithPrefix("variable '" + first + "'");
  }
  return s;
}

// Applies a sparse update beside the rows; the error names the variable.
Status ApplySparseUpdate(ShardState& st, const SparseApplyRequest& req) {
  if (st.applied.Seen(req.origin)) return Status::OK();  // a step run again: applied before
  const std::string first = st.FirstName(req.var_ids);
  if (ShardState::Var* h = req.var_ids.empty() ? nullptr : st.Find(req.var_ids[0]); h && h->hash) {
    // Its slots are in its own arena: every handle of the update is the shard's.
    for (int64_t id : req.var_ids)
      if (id != req.var_ids[0])
        return FailedPrecondition("hash embedding table '" + h->hash->config().table +
                                  "': an update's slots must be the shard itself");
    Status s = h->hash->Apply(req);
    if (s.ok()) st.applied.Record(req.origin, ShardState::NowMs());
    return s;
  }
  std::vector<Tensor> updated;
  for (int64_t id : req.var_ids) {
    const ShardState::Var* v = st.Find(id);
    if (!v)
      return FailedPrecondition(std::string("sparse optimizer ") + OptimizerName(req.optimizer) +
                                ": variable id " + std::to_string(id) + " is not colocated with '" +
                                first + "'");
    if (!v->value.valid()) return Uninitialised(v->name, "updated");
    // In place when no reader holds a snapshot (the usual case for a big
    // table: a copy would cost the whole table per step).
    updated.push_back(v->value.BufferIsUnique() ? v->value : v->value.Copy());
  }
  std::vector<Tensor*> ptrs;
  for (auto& t : updated) ptrs.push_back(&t);
  Status s = ApplySparseOptimizerUpdate(req, ptrs, st.pool);
  if (!s.ok()) return s.WithPrefix("variable '" + first + "'");
  const int64_t rows = updated.empty() || updated[0].shape().empty() ? -1 : updated[0].shape()[0];
  const bool int64_indices = req.indices.valid() && req.indices.dtype() == DType::kInt64;
  for (size_t i = 0; i < updated.size(); ++i) {
    ShardState::Var& v = st.vars[req.var_ids[i]];
    v.value = std::move(updated[i]);
    // Row-shaped slots change in the touched rows only; others (Adam's
    // beta powers) change as a whole.
    if (int64_indices && !v.value.shape().empty() && v.value.shape()[0] == rows) v.MarkRows(req.indices);
    else v.MarkAll();
  }
  st.applied.Record(req.origin, ShardState::NowMs());
  return s;
}

std::vector<VarSnapshot> TakeDirtySnapshot(ShardState& st) {
  std::vector<VarSnapshot> vars;
  for (auto& kv : st.vars) {
    ShardState::Var& v = kv.second;
    if (v.hash) {
      VarSnapshot snap;
      snap.name = v.name;
      // A cold tier that cannot be read leaves the value invalid: the
      // checkpoint writer then refuses it, and no checkpoint commits.
      auto state = v.hash->Serialize();
      if (state.ok()) snap.value = std::move(*state);
      snap.dirty_rows = v.hash->TakeDirtyRows(&snap.all_dirty);
      vars.push_back(std::move(snap));
      continue;
    }
    if (!v.value.valid()) continue;
    VarSnapshot snap;
    snap.name = v.name;
    snap.value = v.value;
    snap.all_dirty = v.all_dirty;
    // The next snapshot reports changes from here on.
    std::vector<int64_t> rows = v.TakeDirtyRows();
    if (!v.all_dirty) snap.dirty_rows = std::move(rows);
    v.all_dirty = false;
    vars.push_back(std::move(snap));
  }
  return vars;
}


// A dense variable's value (a copy-on-write snapshot); v null: NotFound.
Result<Tensor> ReadDense(const ShardState::Var* v, int64_t id) {
  if (!v) return NoVariable(id);
  if (!v->value.valid()) return Uninitialised(v->name, "read");
  return v->value;
}

// Stores, adds or subtracts value into a dense variable; its new value
// (its value now when origin was applied before).
Result<Tensor> AssignDense(ShardState& st, ShardState::Var& v, AssignMode mode, const Tensor& value,
                           const UpdateOrigin& origin) {
  if (st.applied.Seen(origin)) return ReadDense(&v, 0);
  SF_RETURN_IF_ERROR(ApplyAssign(v.name, v.dtype, v.shape, mode, value, &v.value));
  v.MarkAll();
  st.applied.Record(origin, ShardState::NowMs());
  return v.value;
}

Status AssignRowsDense(ShardState& st, ShardState::Var& v, const AssignRowsRequest& req) {
  if (st.applied.Seen(req.origin)) return Status::OK();  // a step run again: applied before
  if (v.hash)
    return InvalidArgument("variable '" + v.name + "' is a hash embedding table shard: its rows cannot be assigned");
  Tensor written;
  SF_RETURN_IF_ERROR(ApplyAssignRows(v.name, req.indices, req.rows, &v.value, &written));
  v.MarkRows(written);  // replicas and incremental checkpoints take only these rows
  st.applied.Record(req.origin, ShardState::NowMs());
  return Status::OK();
}

// Gathers and combines rows of a fixed (not hash) embedding shard.
Result<Tensor> GatherDense(const ShardState& st, const ShardState::Var& v, const EmbeddingShardSpec& spec,
                           const EmbeddingGather& gather) {
  if (!v.value.valid()) return Uninitialised(v.name, "read");
  Tensor out;
  SF_RETURN_IF_ERROR(EmbeddingGatherCombine(spec, gather, v.value, &out, st.pool));
  return out;
}

std::shared_ptr<ShardCore> NewShardCore(ComputePool* pool, std::shared_ptr<const std::string> cold_root) {
  auto core = std::make_shared<ShardCore>();
  core->st.pool = pool;
  core->st.cold_root = std::move(cold_root);
  return core;
}

}  // namespace runtime
}  // namespace sf
