#include "actors/variable_shards.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <optional>

#include "actors/applied_window.h"
#include "kernels/compute_pool.h"
#include "kernels/hash_embedding.h"
#include "storage/hash_cold_store.h"
#include "kernels/in_memory_variables.h"
#include "kernels/optimizer_math.h"
#include "kernels/replica_state.h"

namespace sf {
namespace runtime {
namespace {

// The state of one variable shard actor.
struct ShardState {
  ComputePool* pool = nullptr;  // splits big gathers and sparse updates (may be null)
  struct Var {
    std::string name;
    DType dtype = DType::kInvalid;
    PartialShape shape;
    Tensor value;  // invalid until initialised (and for a hash table shard)
    // A hash table shard (kernels/hash_embedding.h): its rows live here, and
    // its value as a variable is its saved state (Serialize).
    std::unique_ptr<HashEmbeddingShard> hash;
    // Changes since the last dirty snapshot (incremental checkpoints):
    // everything, or the leading-dimension rows whose bits are set in
    // dirty_words (64 rows a word: a snapshot skips clean words whole, where
    // a bit at a time cost 17 ms per 16M-row table).
    bool all_dirty = true;
    std::vector<uint64_t> dirty_words;
    int64_t dirty_rows = 0;  // the rows dirty_words covers
    int64_t num_dirty = 0;
    void MarkAll() {
      all_dirty = true;
      dirty_words.clear();
      dirty_rows = 0;
      num_dirty = 0;
    }
    // Marks rows (int64 indices into the leading dimension); an index out of
    // range (the update was refused) is ignored.
    void MarkRows(const Tensor& indices) {
      if (all_dirty) return;
      const int64_t rows = value.valid() && !value.shape().empty() ? value.shape()[0] : 0;
      if (dirty_rows != rows) {
        dirty_words.assign(static_cast<size_t>((rows + 63) / 64), 0);
        dirty_rows = rows;
      }
      const int64_t* p = indices.data<int64_t>();
      for (int64_t i = 0; i < indices.num_elements(); ++i) {
        if (p[i] < 0 || p[i] >= rows) continue;
        uint64_t& w = dirty_words[static_cast<size_t>(p[i] >> 6)];
        const uint64_t bit = uint64_t{1} << (p[i] & 63);
        num_dirty += (w & bit) == 0;
        w |= bit;
      }
    }
    // The marked rows in order, and clears them.
    std::vector<int64_t> TakeDirtyRows() {
      std::vector<int64_t> out;
      out.reserve(static_cast<size_t>(num_dirty));
      for (size_t k = 0; k < dirty_words.size(); ++k)
        for (uint64_t w = dirty_words[k]; w != 0; w &= w - 1)
          out.push_back(static_cast<int64_t>(k * 64) + __builtin_ctzll(w));
      std::fill(dirty_words.begin(), dirty_words.end(), 0);
      num_dirty = 0;
      return out;
    }
  };
  std::unordered_map<int64_t, Var> vars;
  // Replication bookkeeping per variable (by the id of the variable, not its
  // slots), created on first use; its destructor fails waiting workers.
  std::unordered_map<int64_t, std::unique_ptr<ReplicaState>> replicas;
  int64_t next_waiter = 0;
  // The origins of the updates applied lately: a step run again applies
  // each of its updates once (kernels/update_origin.h).
  AppliedWindow applied;
  static int64_t NowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  ReplicaState& Replica(int64_t id) {
    auto& r = replicas[id];
    if (!r) r = std::make_unique<ReplicaState>();
    return *r;
  }
  // The variable id, or null.
  Var* Find(int64_t id) {
    auto it = vars.find(id);
    return it == vars.end() ? nullptr : &it->second;
  }
  // The name of the first variable of an update, for its errors ("?" when unknown).
  std::string FirstName(const std::vector<int64_t>& ids) {
    const Var* v = ids.empty() ? nullptr : Find(ids[0]);
    return v ? v->name : "?";
  }
};

}  // namespace

// One shard's state, shared by its actor and by ActorVariables' direct path:
// whoever holds mu changes it, so updates stay serialized and atomic. The
// actor's handlers wait for mu (a direct holder keeps it for one read or
// update); a direct caller only tries it and sends the message otherwise, so
// no compute thread waits on a shard.
struct ShardCore {
  std::mutex mu;
  ShardState st;  // GUARDED_BY(mu)
};

namespace {

// The core this thread holds (in a handler or a direct call), or null: a
// callback run under it that reaches a shard again takes the message path.
thread_local const ShardCore* t_held = nullptr;

// Holds a core for one actor handler.
class Held {
 public:
  explicit Held(ShardCore& c) : c_(c), prev_(t_held) {
    c_.mu.lock();
    t_held = &c_;
  }
  ~Held() {
    t_held = prev_;
    c_.mu.unlock();
  }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  ShardState& st() { return c_.st; }

 private:
  ShardCore& c_;
  const ShardCore* prev_;
};

// Runs fn(state) on this thread if the core is free (and this thread holds
// no core); false, having run nothing, otherwise.
template <typename Fn>
bool TryHeld(ShardCore& c, Fn&& fn) {
  if (t_held != nullptr || !c.mu.try_lock()) return false;
  t_held = &c;
  struct Release {
    ShardCore& c;
    ~Release() {
      t_held = nullptr;
      c.mu.unlock();
    }
  } release{c};
  fn(c.st);
  return true;
}

// The actor's own state: its core, emptied when the actor goes (the
// variables' memory is freed and sync waiters are failed with it, as before
// the core was shared), after which direct calls find no variable.
struct ShardActorState {
  std::shared_ptr<ShardCore> core;
  ~ShardActorState() {
    if (!core) return;
    ShardState gone;
    {
      std::lock_guard<std::mutex> l(core->mu);
      gone.pool = core->st.pool;
      std::swap(gone, core->st);
    }
  }
};

using ShardPointer = VariableShardActor::stateful_pointer<ShardActorState>;

// Gives a hash shard whose config names a cold_dir its cold tier, emptied
// first (the shard's rows are all in RAM or in its saved state).
Status AttachColdTier(HashEmbeddingShard& h) {
  const HashShardConfig& c = h.config();
  if (c.cold_dir.empty()) return Status::OK();
  SF_ASSIGN_OR_RETURN(auto store, OpenHashColdStore(c.cold_dir, c.table, c.shard));
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

// The named variables' changes since the last take (each whole when full),
// and the origins the shard applied since, on the first entry.
std::vector<VarChanges> TakeChangesOf(ShardState& st, const std::set<std::string>& names, bool full) {
  std::vector<VarChanges> out;
  for (auto& kv : st.vars) {
    ShardState::Var& v = kv.second;
    if (!names.count(v.name)) continue;
    VarChanges c;
    c.name = v.name;
    if (v.hash) {
      // A hash shard goes whole (its rows, counters and filter change together).
      bool all = false;
      const bool changed = !v.hash->TakeDirtyRows(&all).empty() || all;
      if (!full && !changed) continue;
      auto state = v.hash->Serialize();
      if (!state.ok()) continue;  // a cold tier read error: the next round sends it whole
      c.value = std::move(*state);
      out.push_back(std::move(c));
      continue;
    }
    if (!v.value.valid()) continue;
    if (full || v.all_dirty) {
      c.value = v.value;  // copy-on-write: later updates leave it
      v.TakeDirtyRows();
      v.all_dirty = false;
      out.push_back(std::move(c));
      continue;
    }
    std::vector<int64_t> rows = v.TakeDirtyRows();
    if (rows.empty()) continue;
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
    out.push_back(std::move(c));
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

// A backup's side of TakeChanges for variable v: whole values and hash
// states replace it, rows overwrite its rows; the origins join the window.
Status ApplyChangesTo(ShardState& st, ShardState::Var& v, const VarChanges& c) {
  if (c.value.valid() && !c.rows.valid()) {
    if (IsHashShardState(c.value) && (v.hash || v.dtype == DType::kInt64)) {
      auto h = HashEmbeddingShard::Deserialize(c.value, TableOfShard(v.name));
      if (!h.ok()) return h.status();
      v.hash.reset();  // closes its cold tier before the new shard opens it
      SF_RETURN_IF_ERROR(AttachColdTier(**h));
      v.hash = std::move(*h);
    } else {
      SF_RETURN_IF_ERROR(ApplyAssign(v.name, v.dtype, v.shape, AssignMode::kAssign, c.value, &v.value));
      v.MarkAll();
    }
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
  return Status::OK();
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

// Gathers and combines rows of a fixed (not hash) embedding shard.
Result<Tensor> GatherDense(const ShardState& st, const ShardState::Var& v, const EmbeddingShardSpec& spec,
                           const EmbeddingGather& gather) {
  if (!v.value.valid()) return Uninitialised(v.name, "read");
  Tensor out;
  SF_RETURN_IF_ERROR(EmbeddingGatherCombine(spec, gather, v.value, &out, st.pool));
  return out;
}

// The behavior of a variable shard actor: one handler per message of
// actors/variable_shard_protocol.h. Each answers through the message's done
// (taken by mutable reference: the message is the handler's alone, nothing
// is copied).
// One worker's contribution to a synchronous step of the variable its
// request names, handed to the variable's ReplicaState by `offer`; the
// waiter's timeout is a delayed message to the shard itself.
template <typename Msg, typename Offer>
void OfferSyncStep(ShardPointer self, Msg& m, Offer offer) {
  Held held(*self->state.core);
  ShardState& st = held.st();
  const int64_t id = m.req.req.var_ids.empty() ? -1 : m.req.req.var_ids[0];
  ShardState::Var* v = st.Find(id);
  if (!v) return m.done(NoVariable(id));
  const int64_t waiter = ++st.next_waiter;
  const int64_t timeout_ms = m.req.timeout_ms;
  offer(st, *v, id, waiter, m);
  if (timeout_ms > 0) self->delayed_send(self, std::chrono::milliseconds(timeout_ms), SyncWaitTimeout{id, waiter});
}

VariableShardActor::behavior_type VariableShard(ShardPointer self, std::shared_ptr<ShardCore> core) {
  self->state.core = std::move(core);
  return {
      [self](DefineVariable& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        st.vars[m.id] = ShardState::Var{std::move(m.name), m.dtype, std::move(m.shape), Tensor()};
      },
      [self](ReadVariable& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (v && v->hash) m.done(v->hash->Serialize());  // the state, or the cold tier's read error
        else m.done(ReadDense(v, m.id));
      },
      [self](AssignVariable& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        // A saved hash shard state (a restore or a move) makes the variable
        // that shard again, rows, slots and counts as saved.
        const bool hash_state = IsHashShardState(m.value) && m.mode == AssignMode::kAssign;
        if (v->hash || (hash_state && v->dtype == DType::kInt64)) {
          if (!hash_state)
            return m.done(InvalidArgument("variable '" + v->name +
                                          "' is a hash embedding table shard: only its saved state can be assigned"));
          auto h = HashEmbeddingShard::Deserialize(m.value, TableOfShard(v->name));
          if (!h.ok()) return m.done(h.status());
          v->hash.reset();  // closes its cold tier before the new shard opens it
          Status cold = AttachColdTier(**h);
          if (!cold.ok()) return m.done(cold);
          v->hash = std::move(*h);
          return m.done(m.value);
        }
        m.done(AssignDense(st, *v, m.mode, m.value, m.origin));
      },
      [self](RefillVariable& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        if (v->hash)
          return m.done(Unimplemented("variable '" + v->name + "' is a hash embedding table shard: it is assigned"));
        Status s = m.fill(&v->value);
        v->MarkAll();
        m.done(s);
      },
      [self](ApplyDense& m) {
        Held held(*self->state.core);
        m.done(ApplyUpdate(held.st(), m.req));
      },
      // Sharded embeddings: lookups and sparse updates run here, beside the rows.
      [self](GatherRows& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        Tensor out;
        if (m.spec.partition == EmbeddingPartition::kHash || v->hash) {
          if (!v->hash)
            return m.done(FailedPrecondition("hash embedding table '" + m.spec.table + "': shard '" + v->name +
                                             "' is looked up before it was initialised"));
          Status s = v->hash->GatherCombine(m.gather, &out);
          if (s.ok()) m.done(std::move(out));
          else m.done(s);
          return;
        }
        m.done(GatherDense(st, *v, m.spec, m.gather));
      },
      [self](ApplySparse& m) {
        Held held(*self->state.core);
        m.done(ApplySparseUpdate(held.st(), m.req));
      },
      [self](InitHashShard& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        Status s = CheckHashShardConfig(m.config);
        if (!s.ok()) return m.done(s);
        v->hash.reset();  // closes its cold tier before the new shard opens it
        auto h = std::make_unique<HashEmbeddingShard>(std::move(m.config));
        s = AttachColdTier(*h);
        if (!s.ok()) return m.done(s);
        v->hash = std::move(h);
        m.done(Status::OK());
      },
      [self](QueryHashShard& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        if (!v->hash)
          return m.done(FailedPrecondition("variable '" + v->name + "' is not an initialised hash table shard"));
        m.done(HashShardMetricsTensor(v->hash->Metrics()));
      },
      // Replication (kernels/replica_state.h): the variable's ReplicaState
      // keeps the waiting workers' callbacks.
      [self](ApplySyncGradient& m) {
        OfferSyncStep(self, m, [](ShardState& st, ShardState::Var& v, int64_t id, int64_t waiter, ApplySyncGradient& m) {
          st.Replica(id).OfferSync(v.name, v.value, std::move(m.req), waiter, std::move(m.done),
                                     [&st](const ApplyRequest& req) { return ApplyUpdate(st, req); });
        });
      },
      [self](ApplySparseSyncGradient& m) {
        OfferSyncStep(self, m, [](ShardState& st, ShardState::Var& v, int64_t id, int64_t waiter,
                                  ApplySparseSyncGradient& m) {
          st.Replica(id).OfferSparseSync(v.name, std::move(m.req), waiter, std::move(m.done),
                                           [&st](const SparseApplyRequest& req) { return ApplySparseUpdate(st, req); });
        });
      },
      [self](const SyncWaitTimeout& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        if (const ShardState::Var* v = st.Find(m.id)) st.Replica(m.id).TimeoutWaiter(v->name, m.waiter);
      },
      [self](AbortSyncSteps& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        st.Replica(m.id).AbortSync(v->name);
        m.done(Status::OK());
      },
      [self](ReadVersioned& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        if (!v->value.valid()) return m.done(Uninitialised(v->name, "read"));
        m.done(std::make_pair(v->value, st.Replica(m.id).version()));
      },
      [self](QueryReplicaStats& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        if (!st.Find(m.id)) return m.done(NoVariable(m.id));
        const ReplicaState& r = st.Replica(m.id);
        m.done(m.what == ReplicaQuery::kSyncStats ? r.SyncStats() : r.StalenessStats());
      },
      [self](WaitStaleSync& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        st.Replica(m.id).StaleSyncWait(v->name, m.worker, m.clock, m.num_workers, m.staleness,
                                       std::move(m.done));
      },
      // Checkpoints. Copy-on-write values: later updates never touch these buffers.
      [self](SnapshotShard& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        std::vector<std::pair<std::string, Tensor>> vars;
        for (const auto& kv : st.vars) {
          if (kv.second.hash) {
            auto state = kv.second.hash->Serialize();  // invalid on a cold tier read error (see above)
            vars.emplace_back(kv.second.name, state.ok() ? std::move(*state) : Tensor());
          }
          else if (kv.second.value.valid()) vars.emplace_back(kv.second.name, kv.second.value);
        }
        m.done(std::move(vars));
      },
      [self](SnapshotDirtyShard& m) {
        Held held(*self->state.core);
        m.done(TakeDirtySnapshot(held.st()));
      },
      [self](TakeShardChanges& m) {
        Held held(*self->state.core);
        m.done(TakeChangesOf(held.st(), m.names, m.full));
      },
      [self](ApplyShardChanges& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        m.done(ApplyChangesTo(st, *v, m.changes));
      },
  };
}

}  // namespace

// A new shard's state, splitting its big work over pool (may be null).
std::shared_ptr<ShardCore> NewShardCore(ComputePool* pool) {
  auto core = std::make_shared<ShardCore>();
  core->st.pool = pool;
  return core;
}

VariableShardActor SpawnVariableShard(caf::actor_system& sys, ComputePool* pool) {
  return sys.spawn(VariableShard, NewShardCore(pool));
}

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

Result<int64_t> ActorVariables::Resolve(const std::string& name, DType dtype,
                                        const PartialShape& shape) {
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
  if (vars_.size() >= kMaxVariables)
    return ResourceExhausted("variable '" + name + "' refused: " + std::to_string(vars_.size()) +
                             " variables exist here already (at most " + std::to_string(kMaxVariables) + ")");
  const std::string key = ColocationKey(name);
  auto s = shards_.find(key);
  if (s == shards_.end()) {
    auto core = NewShardCore(pool_);
    VariableShardActor actor = sys_.spawn(VariableShard, core);
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
  vars_.push_back(Var{name, dtype, shape, s->second.actor, direct ? s->second.core : nullptr});
  ids_[name] = id;
  return id;
}

bool ActorVariables::ShardOf(int64_t id, VariableShardActor* out, std::shared_ptr<ShardCore>* core) const {
  std::lock_guard<std::mutex> l(mu_);
  if (id < 0 || id >= static_cast<int64_t>(vars_.size())) return false;
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

// A callback to call n times with each part's status: the n-th call passes
// the first error (or OK) to done.
std::function<void(const Status&)> JoinStatuses(size_t n, std::function<void(Status)> done) {
  struct Join {
    std::mutex mu;
    size_t remaining;
    Status first;
    std::function<void(Status)> done;
  };
  auto join = std::make_shared<Join>();
  join->remaining = n;
  join->done = std::move(done);
  return [join](const Status& s) {
    bool last;
    {
      std::lock_guard<std::mutex> l(join->mu);
      if (!s.ok() && join->first.ok()) join->first = s;
      last = --join->remaining == 0;
    }
    if (last) join->done(join->first);
  };
}

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
    auto id = Resolve(name, value.dtype(), PartialShape(value.shape()));
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

std::vector<VarChanges> ActorVariables::TakeChanges(const std::set<std::string>& names, bool full) {
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
    caf::anon_send(shard, TakeShardChanges{names, full, [&](std::vector<VarChanges> part) {
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
      id = Resolve(c.name, c.value.dtype(), PartialShape(c.value.shape()));
    } else if (c.value.valid() && c.leading >= 0 && c.value.rank() >= 1) {
      // A piece of a variable sent whole in pieces: defined by its full shape.
      Shape full = c.value.shape();
      full[0] = c.leading;
      if (!names.count(c.name)) AddGraphVariables({c.name});
      id = Resolve(c.name, c.value.dtype(), PartialShape(full));
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
  caf::anon_send(shard, runtime::InitHashShard{id, std::move(config), std::move(done)});
}

void ActorVariables::HashShardStats(int64_t id, std::function<void(Result<Tensor>)> done) {
  VariableShardActor shard;
  if (!ShardOf(id, &shard)) return done(NotFound("no variable with id " + std::to_string(id)));
  caf::anon_send(shard, QueryHashShard{id, std::move(done)});
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
                                   int64_t staleness, std::function<void(Status)> done) {
  VariableShardActor shard;
  if (!ShardOf(id, &shard)) return done(NotFound("no variable with id " + std::to_string(id)));
  caf::anon_send(shard, WaitStaleSync{id, worker, clock, num_workers, staleness, std::move(done)});
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
