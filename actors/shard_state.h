// The inside of a variable shard (actor-private: include only from
// actors/*.cc). A shard's state (ShardState) lives in a ShardCore shared by
// its actor (variable_shard_actor.cc) and ActorVariables' direct path
// (variable_shards.cc): whoever holds the core's lock changes the state, so
// updates stay serialized and atomic. The functions below read and change a
// held state (shard_state.cc; replication's in shard_changes.cc).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/applied_window.h"
#include "actors/join_statuses.h"
#include "actors/variable_shards.h"
#include "kernels/hash_embedding.h"
#include "kernels/replica_state.h"

namespace sf {
namespace runtime {

// The state of one variable shard actor.
struct ShardState {
  ComputePool* pool = nullptr;  // splits big gathers and sparse updates (may be null)
  // Where hash shards' cold tiers live: null, their cold_dir as given (one
  // process: the user's own paths); else a directory their cold_dir is a
  // relative path under (a node's --data-dir; "": the node has none, and a
  // cold tier is refused).
  std::shared_ptr<const std::string> cold_root;
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

// One shard's state, shared by its actor and by ActorVariables' direct path:
// whoever holds mu changes it, so updates stay serialized and atomic. The
// actor's handlers wait for mu (a direct holder keeps it for one read or
// update); a direct caller only tries it and sends the message otherwise, so
// no compute thread waits on a shard.
struct ShardCore {
  std::mutex mu;
  ShardState st;  // GUARDED_BY(mu)
};

// The core this thread holds (in a handler or a direct call), or null: a
// callback run under it that reaches a shard again takes the message path.
inline thread_local const ShardCore* t_held = nullptr;

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

// Gives a hash shard (of variable var, its stored name) whose config names a
// cold_dir its cold tier, emptied first, under st.cold_root when set:
// InvalidArgument for a cold_dir that is absolute, leaves it, or lies
// outside var's namespace's directory (graph/namespaces.h), FailedPrecondition
// when the root is "".
Status AttachColdTier(HashEmbeddingShard& h, const ShardState& st, const std::string& var);
// The table of a shard variable "<table>/part_<k>" (the name itself otherwise).
std::string TableOfShard(const std::string& name);
// NotFound naming id.
Status NoVariable(int64_t id);
// FailedPrecondition: variable `name` is `what` ("read", "updated") before it was initialised.
Status Uninitialised(const std::string& name, const char* what);
// Applies one optimizer update (once per origin); the error names the variable.
Status ApplyUpdate(ShardState& st, const ApplyRequest& req);
// Applies a sparse update beside the rows (once per origin); the error names the variable.
Status ApplySparseUpdate(ShardState& st, const SparseApplyRequest& req);
// Every initialised variable with its changes since the last call; resets that record.
std::vector<VarSnapshot> TakeDirtySnapshot(ShardState& st);
// A dense variable's value (a copy-on-write snapshot); v null: NotFound.
Result<Tensor> ReadDense(const ShardState::Var* v, int64_t id);
// Stores, adds or subtracts value into a dense variable; its new value (its
// value now when origin was applied before).
Result<Tensor> AssignDense(ShardState& st, ShardState::Var& v, AssignMode mode, const Tensor& value,
                           const UpdateOrigin& origin);
// Overwrites the rows req names in v (once per origin), marking them dirty;
// the error names the variable (a hash table shard is refused), nothing
// written then.
Status AssignRowsDense(ShardState& st, ShardState::Var& v, const AssignRowsRequest& req);
// Gathers and combines rows of a fixed (not hash) embedding shard.
Result<Tensor> GatherDense(const ShardState& st, const ShardState::Var& v, const EmbeddingShardSpec& spec,
                           const EmbeddingGather& gather);
// Replication (shard_changes.cc): the named variables' changes since the last
// take (each whole when full), and the origins the shard applied since, on
// the first entry.
// With full and pieces_over > 0, a dense variable of more bytes is left to
// be read in pieces: its entry has no value, leading set and read_rows =
// reader(its id).
std::vector<VarChanges> TakeChangesOf(
    ShardState& st, const std::set<std::string>& names, bool full, int64_t pieces_over = 0,
    const std::function<std::function<Result<Tensor>(int64_t, int64_t)>(int64_t id)>& reader = nullptr);
// Rows first.. of dense variable v, as many as fit in max_bytes (at least
// one): a piece of a whole take in pieces. FailedPrecondition when v has no
// dense value, OutOfRange when first is not one of its rows.
Result<Tensor> ReadRowsOf(const ShardState::Var& v, int64_t first, int64_t max_bytes);
// A backup's side of TakeChangesOf for variable v: whole values and hash
// states replace it, rows overwrite its rows; the origins join the window.
Status ApplyChangesTo(ShardState& st, int64_t id, ShardState::Var& v, const VarChanges& c);

// A new shard's state, splitting its big work over pool (may be null), its
// hash shards' cold tiers under cold_root (ShardState::cold_root).
std::shared_ptr<ShardCore> NewShardCore(ComputePool* pool, std::shared_ptr<const std::string> cold_root = nullptr);
// A shard actor serving core (variable_shard_actor.cc).
VariableShardActor SpawnShardActor(caf::actor_system& sys, std::shared_ptr<ShardCore> core);


}  // namespace runtime
}  // namespace sf
