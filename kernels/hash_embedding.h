// One shard of a hash embedding table: a map from any int64 id to its row
// and the row's optimizer slots, with admission, eviction and a state that
// checkpoints save and restore (into another shard count too). The variable
// shard actor owns one per hash table shard and serializes every call, so
// the class needs no locks (thread-compatible, not thread-safe).
//
// Layout. Rows live in one arena of `stride` floats per slot: the value
// (dim floats), then each row-shaped optimizer slot (dim floats each). An
// open-addressing index (linear probing, backward-shift deletion) maps ids
// to slots; metadata per slot holds the id, the last step that touched it,
// its frequency and the lookup that last pinned it.
//
// Admission: with min_count > 1 a new id is counted in a count-min sketch
// (filter_depth rows of filter_width counters, conservative update) and
// gets a row once its estimate reaches min_count; with admit_probability < 1
// it then also needs a draw. Until then it reads zeros, allocates nothing
// and is counted as rejected. The sketch never undercounts: an id seen
// min_count times is always admitted; a collision can admit an id early,
// with probability about (ids / filter_width)^filter_depth.
//
// Steps and eviction. The shard's step is the number of sparse updates it
// has applied (every training step sends each shard one, empty or not, so
// all shards agree). A row not touched for more than ttl_steps steps is
// deleted (at its next lookup, and by a sweep every ttl_steps / 4 steps).
// Under max_rows, a new row first evicts the least recently (LRU) or least
// frequently (LFU) used rows, a sixteenth of max_rows at a time. A row looked
// up by a step whose update has not arrived yet is never evicted: each
// lookup registers its step as in flight until that step's update (or until
// 64 later updates have passed, for lookups that never train). When every
// row is pinned, the lookup fails with FailedPrecondition naming the table.
// An evicted id that comes back starts fresh: initial value, initial slots.
//
// Initial values are a function of (seed, id) alone, so a row is the same
// whichever shard creates it and however often.
//
// Cold tier: with a HashColdStore (SetColdStore; storage/hash_cold_store.h
// keeps it in RocksDB) the shard keeps at most ram_budget_bytes of rows in
// RAM, each costing its floats, its metadata and its share of the index
// (HotRowBytes). A new or promoted row beyond that first demotes the least
// recently used unpinned rows, a sixteenth of the hot rows at a time, in one
// batched write; a lookup's misses are read with one MultiGet and promoted.
// A promoted row's cold copy stays in the store, stale: the hot row is the
// authority, a stored row counts as cold only while its id is not hot, and
// the next demotion overwrites the copy (deleting it at promotion was a
// tenth of the cold tier's time). Only a row that leaves the table (ttl,
// max_rows) has its copy deleted, before the next lookup reads the store.
// Updates always land on hot rows (a step's rows are pinned from its lookup
// to its update). A demoted row comes back bit for bit, slots and counts
// included. With a cold tier, every saved state is whole and holds the cold
// rows too; a restore rebuilds the store from it. A failed store write fails
// the lookup with an error naming the table and changes no row.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "kernels/embedding_math.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

enum class HashInitializer : uint8_t { kUniform = 0, kTruncatedNormal = 1, kZeros = 2 };
enum class HashEviction : uint8_t { kLru = 0, kLfu = 1 };

// How one shard behaves (include/shardflow/embedding.h documents each field).
// What a shard's rows may take beside others' (a node's namespace quota,
// actors/namespace_quotas.h): Take refuses bytes past it (ResourceExhausted
// naming the quota), Give returns them. Thread-safe.
class HashMemoryBudget {
 public:
  virtual ~HashMemoryBudget() = default;
  virtual Status Take(int64_t bytes) = 0;
  virtual void Give(int64_t bytes) = 0;
};

struct HashShardConfig {
  std::string table;  // for error messages
  int64_t num_shards = 1;
  int64_t shard = 0;
  int64_t dim = 0;
  HashInitializer initializer = HashInitializer::kUniform;
  double scale = 0.0;
  int64_t seed = 0;
  int64_t min_count = 0;
  double admit_probability = 1.0;
  int64_t filter_width = 1 << 16;
  int64_t filter_depth = 4;
  int64_t ttl_steps = 0;
  int64_t max_rows = 0;
  HashEviction eviction = HashEviction::kLru;
  int64_t ram_budget_bytes = 0;  // with a cold tier: the hot rows' RAM (0: no cold tier)
  std::string cold_dir;          // where the actor opens the shard's cold store ("": none)
  // Charged for the RAM of every row slot the shard grows by (null: none);
  // never saved with the state (a node sets it where a session's init runs).
  std::shared_ptr<HashMemoryBudget> budget;
};

// Where a hash shard keeps the rows its RAM budget leaves out. Values are
// opaque bytes. Thread-compatible: one shard calls it.
class HashColdStore {
 public:
  virtual ~HashColdStore() = default;
  // (*found)[i] says whether ids[i] is stored, (*values)[i] its bytes then;
  // Unavailable naming the store on a read failure.
  virtual Status MultiGet(const std::vector<int64_t>& ids, std::vector<std::string>* values,
                          std::vector<bool>* found) = 0;
  // Stores puts and removes deletes in one write; Unavailable naming the
  // store on failure (a full disk), nothing written then.
  virtual Status Write(const std::vector<std::pair<int64_t, std::string>>& puts,
                       const std::vector<int64_t>& deletes) = 0;
  // Calls fn(id, bytes) for the stored rows of ids >= from, in id order,
  // until fn returns false; Unavailable on a read failure.
  virtual Status ScanFrom(int64_t from, const std::function<bool(int64_t, const std::string&)>& fn) = 0;
  // Calls fn(id, bytes) for every stored row; Unavailable on a read failure.
  Status Scan(const std::function<void(int64_t, const std::string&)>& fn) {
    return ScanFrom(std::numeric_limits<int64_t>::min(), [&](int64_t id, const std::string& b) {
      fn(id, b);
      return true;
    });
  }
  // Removes every row; Unavailable on failure.
  virtual Status Clear() = 0;
  // About how many bytes the store holds on disk.
  virtual int64_t DiskBytes() = 0;
  // Calls fn(id, bytes) for up to max_rows stored rows from where *cursor
  // points ("": the start) and moves it on ("" after the last): called again
  // and again it comes to every row, in no set order, possibly with a stale
  // value (KvStore::ScanSome). Unavailable on a read failure.
  virtual Status ScanSome(std::string* cursor, int64_t max_rows,
                          const std::function<void(int64_t, const std::string&)>& fn) = 0;
};

// OK for a usable config; else InvalidArgument naming the table and the field.
Status CheckHashShardConfig(const HashShardConfig& c);
// Parses "uniform", "truncated_normal", "zeros"; InvalidArgument naming the value otherwise.
Result<HashInitializer> ParseHashInitializer(const std::string& s);
// Parses "lru" or "lfu"; InvalidArgument naming the value otherwise.
Result<HashEviction> ParseHashEviction(const std::string& s);

// A shard's counters (HashEmbeddingShard::Metrics).
struct HashShardMetrics {
  int64_t rows = 0;      // hot rows now
  int64_t capacity = 0;  // arena slots
  int64_t admitted = 0;  // rows created
  int64_t rejected = 0;  // lookups of ids not admitted (each id once per lookup)
  int64_t evicted = 0;   // rows deleted by ttl_steps or max_rows
  int64_t bytes = 0;     // RAM: arena, metadata, index and filter
  int64_t step = 0;      // sparse updates applied
  int64_t skipped = 0;   // gradient rows of ids without a row (not admitted)
  int64_t cold_rows = 0;  // rows in the cold tier
  int64_t hot_hits = 0;   // lookups of ids found in RAM
  int64_t cold_hits = 0;  // lookups of ids promoted from the cold tier
  int64_t disk_bytes = 0; // the cold tier's bytes on disk
};
inline constexpr int kNumHashShardMetrics = 12;
// The metrics as int64 [kNumHashShardMetrics], in the struct's order.
Tensor HashShardMetricsTensor(const HashShardMetrics& m);

// One row's whole state, for tests and tools.
struct HashRowState {
  int64_t last_seen = 0;
  int64_t freq = 0;
  std::vector<float> values;  // the value, then each slot (stride floats)
  bool operator==(const HashRowState& o) const {
    return last_seen == o.last_seen && freq == o.freq && values == o.values;
  }
};

class HashEmbeddingShard {
 public:
  explicit HashEmbeddingShard(HashShardConfig config);
  ~HashEmbeddingShard();
  HashEmbeddingShard(HashEmbeddingShard&&) = default;
  HashEmbeddingShard& operator=(HashEmbeddingShard&&) = default;
  const HashShardConfig& config() const { return c_; }

  // The shard's partial [num_segments, dim] of a deduplicated gather
  // (BuildHashShardGather): admits, creates and touches rows as above.
  // InvalidArgument naming the table for a malformed gather or an id of
  // another shard; FailedPrecondition when max_rows leaves no evictable row.
  Status GatherCombine(const EmbeddingGather& q, Tensor* out);
  // Applies a sparse update whose indices are ids (rows of ids without a
  // row are skipped and counted), then advances the step. The first update
  // fixes the optimizer (slots are added to every row); another optimizer
  // later is FailedPrecondition. InvalidArgument naming the table and the
  // optimizer on bad input; nothing changes then.
  Status Apply(const SparseApplyRequest& req);
  HashShardMetrics Metrics() const;
  // Gives the shard a cold tier (see the top of the file) and demotes rows
  // beyond the budget to it. The store must be empty or hold this shard's
  // cold rows only. Unavailable naming the table when a write fails.
  Status SetColdStore(std::unique_ptr<HashColdStore> store);
  // The most rows RAM holds (the budget over HotRowBytes; 0: no limit).
  int64_t HotRowLimit() const;
  // RAM per hot row: its floats, metadata, index and free-list share.
  int64_t HotRowBytes() const;

  // The whole state as one int64 tensor [rows, width] (header, filter
  // counts, one row per arena slot, then the cold tier's rows), the form
  // checkpoints store. Unavailable when the cold tier cannot be read.
  Result<Tensor> Serialize() const;
  // Rows `rows` of what Serialize() would give (the header's rows computed
  // now), [rows.size(), width]; what a backup needs of TakeDirtyRows' rows.
  // FailedPrecondition for a shard with a cold tier (saved whole),
  // InvalidArgument for a row it does not have.
  Result<Tensor> SerializeRows(const std::vector<int64_t>& rows) const;
  // The changes since the last take (this or TakeDirtyRows) in the form
  // ApplyRows writes: false when the shard must go whole (TakeDirtyRows'
  // *all), else *rows [k] and *values [k, width]: the header rows, then
  // rows of changed admission-filter counters packed by PackFilterCounter
  // (index kHashPackedCountersRow; a sighting changes up to filter_depth
  // counters, and their whole saved rows of the filter cost 2 * width
  // counters each), then the changed saved rows in order (a filter row
  // goes whole where packing its changes would not be smaller).
  bool TakeChangedRows(Tensor* rows, Tensor* values);
  // Writes saved rows (SerializeRows' or TakeChangedRows' of a shard of this
  // layout: the header rows first, packed counters, then rows in order) into the shard. FailedPrecondition when
  // their header is of another layout (capacity, optimizer, cold tier: the
  // shard needs a whole state), InvalidArgument or DataLoss for rows that
  // do not fit; a failed call may have written some rows.
  Status ApplyRows(const Tensor& rows, const Tensor& values);
  // The rows of Serialize()'s tensor changed since the last call (sorted);
  // *all is set when every row must be saved (the first time, or after the
  // tensor's shape changed).
  std::vector<int64_t> TakeDirtyRows(bool* all);
  // A shard from a Serialize()d state; DataLoss naming `who` for a state
  // that is not one or is inconsistent. table names the shard's table.
  static Result<std::unique_ptr<HashEmbeddingShard>> Deserialize(const Tensor& state,
                                                                 const std::string& table);

  // The state of id's row, or false when it has none.
  bool RowOf(int64_t id, HashRowState* out) const;
  // Every row's state by id, hot and cold; Unavailable when the cold tier
  // cannot be read.
  Result<std::map<int64_t, HashRowState>> AllRowsWithCold() const;
  // Every hot row's state by id.
  std::map<int64_t, HashRowState> AllRows() const;

 private:
  friend Result<std::vector<Tensor>> ReshardHashStates(const std::vector<Tensor>&, int64_t,
                                                       const std::string&);
  struct Meta {
    int64_t id = 0;
    int64_t last_seen = 0;
    int64_t freq = 0;
    uint64_t tick = 0;  // the lookup that last touched the row (orders LRU ties)
    int32_t pins = 0;   // lookups in flight that read the row
    bool used = false;
    bool cold_copy = false;  // the cold tier holds a stale copy (promoted from it)
  };
  // A step that looked rows up and whose update has not come yet.
  struct InFlight {
    int64_t step_id;
    int64_t at_step;             // the shard's step then
    std::vector<int64_t> slots;  // one pin each
    // Ids a lookup of the step turned away: they stay out for the step's
    // other lookups, so all of them read zeros for the id (and its update
    // skips it) whatever order they ran in.
    std::unordered_set<int64_t> rejected;
  };
  void Release(const InFlight& f);
  // Serialize's header rows (K cold rows follow the arena) into h, zeroed
  // before; slot s's saved row into r, zeroed before (left so when free).
  void WriteHeader(int64_t* h, int64_t K) const;
  void WriteSlot(int64_t s, int64_t* r) const;
  // Moves up to n unpinned rows (least recently used first) to the cold
  // tier in one write; how many, or the write's error (nothing moved then).
  Result<int64_t> Demote(int64_t n);
  // The bytes a row keeps in the cold tier, and back.
  std::string EncodeRow(int64_t slot) const;
  Status DecodeRow(int64_t slot, int64_t id, const std::string& bytes);

  int64_t Find(int64_t id) const;  // slot or -1
  void IndexInsert(int64_t id, int64_t slot);
  void IndexErase(int64_t id);
  void IndexRebuild(int64_t min_capacity);
  // A free slot, made by eviction (for a new row under max_rows: a promoted
  // one adds none), demotion or growth.
  Result<int64_t> TakeSlot(bool new_row = true);
  Result<int64_t> Allocate(int64_t id);  // a fresh row's slot
  void InitRow(int64_t slot, int64_t id);
  void Evict(int64_t slot);
  // Evicts up to n rows by policy among those not pinned; returns how many.
  int64_t EvictByPolicy(int64_t n);
  void Grow(int64_t capacity);
  void SetOptimizer(OptimizerKind kind, const std::vector<double>& slot_init);
  // Brings RAM within the cold tier's budget after a row grew (slots) or
  // rows arrived (a restore): demotes the excess, then packs the rows into
  // an arena of HotRowLimit() slots (pins follow their rows).
  Status FitBudget();
  bool Expired(const Meta& m) const { return ExpiredSince(m.last_seen); }
  bool ExpiredSince(int64_t last_seen) const { return c_.ttl_steps > 0 && step_ - last_seen > c_.ttl_steps; }
  // Deletes the cold rows expired by ttl_steps among the next `budget`
  // stored ones (continuing where the last sweep stopped, wrapping at the
  // end), so rows never read again leave the disk and the counts too;
  // Unavailable naming the table when the store fails (nothing counted).
  Status SweepColdTier(int64_t budget);
  // Count-min: adds count to id's counters, returns the new estimate.
  int64_t FilterAdd(int64_t id, int64_t count);
  void MarkSlot(int64_t slot) { if (!all_dirty_) dirty_slot_[slot] = 1; }
  // Marks filter counter i changed (its saved row, and the counter itself
  // for TakeChangedRows).
  void MarkCounter(uint64_t i) {
    if (all_dirty_) return;
    dirty_filter_[static_cast<size_t>(i / 2 / static_cast<uint64_t>(Width()))] = 1;
    dirty_counter_[i >> 6] |= uint64_t{1} << (i & 63);
  }
  // Forgets what changed (after a take): nothing has since.
  void ClearDirty();
  int64_t HeaderRows() const;
  int64_t FilterRows() const;
  int64_t Width() const;

  HashShardConfig c_;
  int64_t stride_;                 // floats per slot: dim * (1 + row slots)
  int optimizer_ = -1;             // OptimizerKind, -1 before the first update
  double slot_init_[4] = {};       // the optimizer's slot starting values
  float scalar_slots_[4] = {};     // per-shard scalar slots (Adam's beta powers)
  std::vector<float> arena_;
  std::vector<Meta> meta_;
  // Free slots, a min-heap: the lowest is taken first, so a restored shard
  // places new rows where the live one would.
  std::vector<int64_t> free_;
  void FreePush(int64_t s) {
    free_.push_back(s);
    std::push_heap(free_.begin(), free_.end(), std::greater<int64_t>());
  }
  int64_t FreePop() {
    std::pop_heap(free_.begin(), free_.end(), std::greater<int64_t>());
    const int64_t s = free_.back();
    free_.pop_back();
    return s;
  }
  int64_t rows_ = 0;
  // Open addressing: a bucket holds an id and its slot + 1 (0: empty), side
  // by side so a probe costs one cache miss.
  struct Bucket {
    int64_t key = 0;
    int64_t val = 0;
  };
  std::vector<Bucket> buckets_;
  void PrefetchBucket(int64_t id) const { __builtin_prefetch(&buckets_[MixId(id) & mask_]); }
  uint64_t mask_ = 0;
  std::vector<uint32_t> filter_;   // depth x width counters (empty without min_count)
  std::vector<InFlight> in_flight_;
  uint64_t tick_ = 0;
  uint64_t rng_;
  int64_t step_ = 0, admitted_ = 0, rejected_ = 0, evicted_ = 0, skipped_ = 0;
  bool all_dirty_ = true;
  std::vector<uint8_t> dirty_slot_, dirty_filter_;
  std::vector<uint64_t> dirty_counter_;  // a bit per filter counter (sized at a take)
  // Deletes the queued stale cold copies of rows that left the table; OK when
  // none are queued, else the write's error (the queue stays then).
  Status DropColdCopies();
  std::unique_ptr<HashColdStore> cold_;
  // Bytes taken from c_.budget, given back when the shard goes (a moved-from
  // shard gives nothing).
  struct Charge {
    int64_t bytes = 0;
    Charge() = default;
    Charge(Charge&& o) noexcept : bytes(o.bytes) { o.bytes = 0; }
    Charge& operator=(Charge&& o) noexcept {
      std::swap(bytes, o.bytes);
      return *this;
    }
  };
  Charge charged_;
  // Stored ids that are neither hot nor cold: rows evicted while the store
  // held a stale copy of them. Deleted before the store is read again.
  std::vector<int64_t> cold_drop_;
  int64_t cold_rows_ = 0, hot_hits_ = 0, cold_hits_ = 0;
  // Where the next SweepColdTier starts, and the step of the last one.
  std::string cold_sweep_cursor_;
  int64_t cold_swept_at_ = -1;
};

// The saved-row index ApplyRows reads as a row of packed admission-filter
// counters: each int64 word one counter (PackFilterCounter), -1 for none.
inline constexpr int64_t kHashPackedCountersRow = -1;
// A counter's word in such a row: its index in the filter (below 2^31) and
// its count.
inline int64_t PackFilterCounter(int64_t index, uint32_t count) {
  return static_cast<int64_t>((static_cast<uint64_t>(index) << 32) | count);
}

// True when t looks like a HashEmbeddingShard state (its header's magic).
bool IsHashShardState(const Tensor& t);
// The shard count a state was saved with, or -1 when t is not a state.
int64_t HashStateNumShards(const Tensor& t);

// Moves the rows of a table's saved shard states (one per old shard, in
// order) into num_shards new ones (HashShardOf picks each id's shard): rows
// keep their value, slots, last step and frequency; sketches merge by
// taking each counter's maximum (still never undercounting); the counters
// (admitted, ...) go to new shard 0. DataLoss or InvalidArgument naming the
// table for states that are not a table's shards.
Result<std::vector<Tensor>> ReshardHashStates(const std::vector<Tensor>& parts, int64_t num_shards,
                                              const std::string& table);

// What `shardflow ckpt inspect` prints of a saved shard state.
struct HashStateSummary {
  int64_t dim = 0, num_shards = 0, shard = 0;
  HashShardMetrics metrics;
  std::string optimizer;  // "" before the first update
  std::vector<std::pair<int64_t, HashRowState>> rows;  // the first `max_rows` rows, by id
};
// Summarizes a state (rows: up to max_rows of them, smallest ids first);
// DataLoss as Deserialize.
Result<HashStateSummary> SummarizeHashState(const Tensor& state, int64_t max_rows);
// Every row of a state by id; DataLoss as Deserialize.
Result<std::map<int64_t, HashRowState>> HashStateRows(const Tensor& state);

}  // namespace sf
