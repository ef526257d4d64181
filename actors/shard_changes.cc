// Replication's side of the variable shards (cluster/slot_replicas.h): a
// holder takes what changed in a slot's variables, with the update origins
// their shards applied, and a backup applies it (actors/shard_state.h).
#include <algorithm>
#include <condition_variable>
#include <cstring>

#include "actors/shard_state.h"
#include "kernels/chunk_queue_service.h"
#include "kernels/in_memory_variables.h"

namespace sf {
namespace runtime {

namespace {

// Variable v's changes since the last take into *c (whole when full): false
// when it has none.
bool TakeVarChanges(ShardState::Var& v, bool full, int64_t pieces_over, VarChanges* c_ptr) {
  VarChanges& c = *c_ptr;
  if (v.hash) {
    // A hash shard sends what changed (its header, the changed filter
    // counters packed, its changed slots: TakeChangedRows), or goes whole
    // the first time, after it grew or took its optimizer, or with a cold
    // tier.
    if (!full && v.hash->TakeChangedRows(&c.rows, &c.value)) return true;
    if (full) {
      bool all = false;
      v.hash->TakeDirtyRows(&all);  // sent whole: what changed so far is in it
    }
    auto state = v.hash->Serialize();
    if (!state.ok()) return false;  // a cold tier read error: the next round sends it whole
    c.value = std::move(*state);
    return true;
  }
  if (!v.value.valid()) return false;
  if (full && pieces_over > 0 && v.value.rank() >= 1 && v.value.dim(0) > 1 &&
      static_cast<int64_t>(v.value.bytes()) > pieces_over) {
    // Read in pieces as it is sent (VarChanges::read_rows): rows changed
    // from now on are dirty, for the next round.
    c.leading = v.value.dim(0);
    v.TakeDirtyRows();
    v.all_dirty = false;
    return true;
  }
  if (full || v.all_dirty) {
    c.value = v.value;  // copy-on-write: later updates leave it
    v.TakeDirtyRows();
    v.all_dirty = false;
    return true;
  }
  std::vector<int64_t> rows = v.TakeDirtyRows();
  if (rows.empty()) return false;
  Shape shape = v.value.shape();
  const int64_t row_bytes = shape[0] > 0 ? static_cast<int64_t>(v.value.bytes()) / shape[0] : 0;
  shape[0] = static_cast<int64_t>(rows.size());
  c.value = Tensor(v.value.dtype(), shape);
  c.rows = Tensor(DType::kInt64, Shape{static_cast<int64_t>(rows.size())});
  const char* from = static_cast<const char*>(v.value.raw_data());
  char* to = static_cast<char*>(c.value.raw_data());
  for (size_t i = 0; i < rows.size(); ++i) {
    c.rows.data<int64_t>()[i] = rows[i];
    std::memcpy(to + i * row_bytes, from + rows[i] * row_bytes, static_cast<size_t>(row_bytes));
  }
  return true;
}

}  // namespace

// The named variables' changes since the last take (each whole when full),
// and the origins the shard applied since, on the first entry.
std::vector<VarChanges> TakeChangesOf(
    ShardState& st, const std::set<std::string>& names, bool full, int64_t pieces_over,
    const std::function<std::function<Result<Tensor>(int64_t, int64_t)>(int64_t id)>& reader) {
  if (!reader) pieces_over = 0;
  std::vector<VarChanges> out;
  for (auto& kv : st.vars) {
    ShardState::Var& v = kv.second;
    if (!names.count(v.name)) continue;
    VarChanges c;
    c.name = v.name;
    // Its step and version move only with an update, which makes it dirty:
    // they travel with every change of it. Its SSP clocks move without one:
    // they travel when they moved, alone if nothing else did.
    bool clocks = false;
    if (auto r = st.replicas.find(kv.first); r != st.replicas.end() && r->second) {
      c.replica = r->second->Counters();
      clocks = r->second->TakeClocksChanged() || (full && !r->second->Clocks().empty());
      if (clocks) c.clocks = r->second->Clocks();
    }
    const bool changed = TakeVarChanges(v, full, pieces_over, &c);
    if (changed && !c.value.valid() && c.leading > 0 && !c.rows.valid()) c.read_rows = reader(kv.first);
    if (changed || clocks) out.push_back(std::move(c));
  }
  std::vector<UpdateOrigin> origins = full ? st.applied.All() : st.applied.TakeRecent();
  if (!origins.empty()) {
    if (out.empty()) {
      // Origins alone (the updates changed nothing named, or were no-ops).
      for (const auto& kv : st.vars)
        if (names.count(kv.second.name)) {
          out.push_back(VarChanges{kv.second.name, Tensor(), Tensor(), {}});
          break;
        }
    }
    if (!out.empty()) out[0].origins = std::move(origins);
  }
  return out;
}

Result<Tensor> ReadRowsOf(const ShardState::Var& v, int64_t first, int64_t max_bytes) {
  if (v.hash || !v.value.valid() || v.value.rank() < 1)
    return FailedPrecondition("variable '" + v.name + "' has no dense value to read rows of");
  const int64_t n = v.value.dim(0);
  if (first < 0 || first >= n)
    return OutOfRange("row " + std::to_string(first) + " of variable '" + v.name + "' is outside [0, " +
                      std::to_string(n) + ")");
  const int64_t row_bytes = static_cast<int64_t>(v.value.bytes()) / n;
  const int64_t k = std::min(n - first, std::max<int64_t>(1, max_bytes / std::max<int64_t>(1, row_bytes)));
  Shape shape = v.value.shape();
  shape[0] = k;
  Tensor piece(v.value.dtype(), shape);
  std::memcpy(piece.raw_data(), static_cast<const char*>(v.value.raw_data()) + first * row_bytes,
              static_cast<size_t>(k * row_bytes));
  return piece;
}

// A backup's side of TakeChanges for variable v: whole values and hash
// states replace it, rows overwrite its rows; the origins join the window.
Status ApplyChangesTo(ShardState& st, int64_t id, ShardState::Var& v, const VarChanges& c) {
  // Checked before anything is written: a change refused half way would
  // leave the backup with its rows and without its clocks.
  if (!c.clocks.empty()) SF_RETURN_IF_ERROR(st.Replica(id).CheckClocks(v.name, c.clocks));
  if (c.value.valid() && !c.rows.valid()) {
    if (IsHashShardState(c.value) && (v.hash || v.dtype == DType::kInt64)) {
      auto h = HashEmbeddingShard::Deserialize(c.value, TableOfShard(v.name));
      if (!h.ok()) return h.status();
      v.hash.reset();  // closes its cold tier before the new shard opens it
      SF_RETURN_IF_ERROR(AttachColdTier(**h, st, v.name));
      v.hash = std::move(*h);
    } else {
      SF_RETURN_IF_ERROR(ApplyAssign(v.name, v.dtype, v.shape, AssignMode::kAssign, c.value, &v.value));
      v.MarkAll();
    }
  } else if (c.value.valid() && c.rows.num_elements() > 0 && v.hash) {
    // A hash shard's changed saved rows (TakeChangesOf).
    SF_RETURN_IF_ERROR(v.hash->ApplyRows(c.rows, c.value));
  } else if (c.value.valid() && c.rows.num_elements() > 0) {
    if (!v.value.valid() && !v.hash && c.leading >= 0 && c.value.rank() >= 1) {
      // The first piece of a variable sent whole in pieces of rows: zeros until the pieces fill it.
      Shape full = c.value.shape();
      full[0] = c.leading;
      Tensor zeros(c.value.dtype(), full);
      std::memset(zeros.raw_data(), 0, zeros.bytes());
      SF_RETURN_IF_ERROR(ApplyAssign(v.name, v.dtype, v.shape, AssignMode::kAssign, zeros, &v.value));
    }
    if (!v.value.valid() || v.hash)
      return FailedPrecondition("backup variable '" + v.name + "' has no value to apply rows to: it needs its whole state first");
    if (c.leading >= 0 && c.leading != v.value.dim(0))
      return InvalidArgument("rows for variable '" + v.name + "' come from one of " + std::to_string(c.leading) +
                             " rows; it has " + std::to_string(v.value.dim(0)));
    const Shape& shape = v.value.shape();
    if (c.value.dtype() != v.value.dtype() || c.rows.dtype() != DType::kInt64 || c.rows.rank() != 1 ||
        c.value.rank() != v.value.rank() || c.value.rank() == 0 || c.value.dim(0) != c.rows.dim(0))
      return InvalidArgument("rows for variable '" + v.name + "' do not fit it: " + c.value.DebugString(0) +
                             " at " + c.rows.DebugString(0) + " into " + v.value.DebugString(0));
    for (int i = 1; i < c.value.rank(); ++i)
      if (c.value.dim(i) != shape[i])
        return InvalidArgument("rows for variable '" + v.name + "' have shape " + ShapeString(c.value.shape()) +
                               ", it " + ShapeString(shape));
    const int64_t* rows = c.rows.data<int64_t>();
    for (int64_t i = 0; i < c.rows.num_elements(); ++i)
      if (rows[i] < 0 || rows[i] >= shape[0])
        return InvalidArgument("row " + std::to_string(rows[i]) + " of variable '" + v.name + "' is outside [0, " +
                               std::to_string(shape[0]) + ")");
    if (!v.value.BufferIsUnique()) v.value = v.value.Copy();
    const int64_t row_bytes = shape[0] > 0 ? static_cast<int64_t>(v.value.bytes()) / shape[0] : 0;
    char* to = static_cast<char*>(v.value.raw_data());
    const char* from = static_cast<const char*>(c.value.raw_data());
    for (int64_t i = 0; i < c.rows.num_elements(); ++i)
      std::memcpy(to + rows[i] * row_bytes, from + i * row_bytes, static_cast<size_t>(row_bytes));
    v.MarkRows(c.rows);
  }
  const int64_t now = ShardState::NowMs();
  for (const UpdateOrigin& o : c.origins) st.applied.Record(o, now);
  if (!c.replica.empty()) st.Replica(id).SetCounters(c.replica);
  if (!c.clocks.empty()) SF_RETURN_IF_ERROR(st.Replica(id).SetClocks(v.name, c.clocks));
  return Status::OK();
}

std::vector<VarChanges> ActorVariables::TakeChanges(const std::set<std::string>& names, bool full,
                                                    int64_t pieces_over) {
  std::vector<VariableShardActor> shards;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& n : names) {
      auto it = ids_.find(n);
      if (it == ids_.end()) continue;
      const VariableShardActor& a = vars_[static_cast<size_t>(it->second)].shard;
      if (std::find(shards.begin(), shards.end(), a) == shards.end()) shards.push_back(a);
    }
  }
  std::mutex mu;
  std::condition_variable cv;
  size_t remaining = shards.size();
  std::vector<VarChanges> all;
  for (const auto& shard : shards) {
    caf::anon_send(shard, TakeShardChanges{names, full, pieces_over, [&](std::vector<VarChanges> part) {
                                             std::lock_guard<std::mutex> l(mu);
                                             for (auto& c : part) all.push_back(std::move(c));
                                             if (--remaining == 0) cv.notify_all();
                                           }});
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return remaining == 0; });
  // Variables before their slots ("w" sorts before "w/Adagrad/accumulator"):
  // sent in this order, a backup defines a variable before its slots, which
  // then join its shard, whatever messages the changes are cut into.
  std::sort(all.begin(), all.end(), [](const VarChanges& a, const VarChanges& b) { return a.name < b.name; });
  return all;
}

void ActorVariables::ApplyChanges(std::vector<VarChanges> changes, std::function<void(Status)> done) {
  // Whole values define what is new (variables before their slots, so a
  // slot joins its variable's shard); rows and origins need it defined.
  std::sort(changes.begin(), changes.end(), [](const VarChanges& a, const VarChanges& b) { return a.name < b.name; });
  std::set<std::string> names;
  for (const auto& c : changes)
    if (c.value.valid() && !c.rows.valid()) names.insert(c.name);
  AddGraphVariables(names);
  std::vector<std::pair<int64_t, VarChanges>> applies;
  for (auto& c : changes) {
    Result<int64_t> id = NotFound("");
    if (c.value.valid() && !c.rows.valid()) {
      // A hash shard's state grows with its table, a chunk queue's with its
      // tickets: their variables have no fixed shape.
      // A replica follows its holder: counted against quotas, never refused.
      id = ResolveAs(c.name, c.value.dtype(),
                     IsHashShardState(c.value)    ? PartialShape::Unknown()
                     : IsChunkQueueState(c.value) ? PartialShape::UnknownDims(1)
                                                  : PartialShape(c.value.shape()),
                     false);
    } else if (c.value.valid() && c.leading >= 0 && c.value.rank() >= 1) {
      // A piece of a variable sent whole in pieces: defined by its full shape,
      // which must fit in memory (a peer names the leading dimension).
      Shape full = c.value.shape();
      full[0] = c.leading;
      double bytes = static_cast<double>(DTypeSize(c.value.dtype()));
      for (int64_t d : full) bytes *= static_cast<double>(d);
      if (bytes > static_cast<double>(AllocationLimit()))
        return done(ResourceExhausted("variable '" + c.name + "' of shape " + ShapeString(full) + " (" +
                                      std::to_string(static_cast<int64_t>(bytes)) + " bytes) does not fit in " +
                                      std::to_string(AllocationLimit()) + " bytes"));
      if (!names.count(c.name)) AddGraphVariables({c.name});
      id = ResolveAs(c.name, c.value.dtype(), PartialShape(full), false);
    } else {
      std::lock_guard<std::mutex> l(mu_);
      auto it = ids_.find(c.name);
      if (it != ids_.end()) id = it->second;
      else id = FailedPrecondition("backup holds no variable '" + c.name + "': it needs the slot's whole state first");
    }
    if (!id.ok()) return done(id.status());
    applies.emplace_back(*id, std::move(c));
  }
  auto finish = JoinStatuses(applies.size() + 1, std::move(done));
  for (auto& [id, c] : applies) {
    VariableShardActor shard;
    if (!ShardOf(id, &shard)) {
      finish(NotFound("no variable with id " + std::to_string(id)));
      continue;
    }
    caf::anon_send(shard, ApplyShardChanges{id, std::move(c), finish});
  }
  finish(Status::OK());
}

}  // namespace runtime
}  // namespace sf
