// Hash embedding shards (kernels/hash_embedding.h): the index, the arena,
// admission, eviction and the saved state.
#include "kernels/hash_embedding.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/optimizer_math.h"

namespace sf {
namespace {

// The saved state's header: int64 words at the start of the tensor.
enum HeaderWord : int64_t {
  kMagic, kVersion, kDim, kStride, kNumShards, kShard, kCapacity, kRows, kStep, kAdmitted,
  kRejected, kEvicted, kSkipped, kFilterWidth, kFilterDepth, kMinCount, kAdmitP, kTtl, kMaxRows,
  kEvictionWord, kInitWord, kScale, kSeed, kOptimizerWord, kSlotInit0, kScalar0 = kSlotInit0 + 4,
  kRng = kScalar0 + 4, kColdRows, kRamBudget, kColdDirBytes, kHeaderWords
};
// After the header words: cold_dir's bytes, kColdDirBytes of them.
constexpr int64_t kStateMagic = 0x5346485348415331;  // "SFHSHAS1"
constexpr int64_t kStateVersion = 1;
constexpr int64_t kRowWords = 4;  // id, used, last_seen, freq; then the packed floats
constexpr int64_t kInFlightSteps = 64;
// Cold rows are swept for ttl expiry once per kColdSweepEvery steps, each
// sweep reading max(1024, the lookup's ids) stored rows per step since the
// last (at most kColdSweepAtMost steps' worth): about as many rows scanned
// per step as a step looks up. A sweep reads RocksDB's table files, not its
// memtables (KvStore::ScanSome): a scan of a cache sorts its hashed
// memtables first, and that sort made a ttl run 2x slower (measured with a
// sweep every 16 steps).
constexpr int64_t kColdSweepEvery = 16, kColdSweepAtMost = 1024;

int64_t Bits(double d) {
  int64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}
double FromBits(int64_t b) {
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
}

int RowSlots(OptimizerKind k) { return SpecOf(k).handles - 1 - SpecOf(k).scalar_slots; }

std::string Who(const HashShardConfig& c) {
  return "hash embedding table '" + c.table + "' shard " + std::to_string(c.shard);
}

int64_t WidthFor(int64_t stride) { return std::max<int64_t>(8, kRowWords + (stride + 1) / 2); }

}  // namespace

Result<HashInitializer> ParseHashInitializer(const std::string& s) {
  if (s == "uniform") return HashInitializer::kUniform;
  if (s == "truncated_normal") return HashInitializer::kTruncatedNormal;
  if (s == "zeros") return HashInitializer::kZeros;
  return InvalidArgument("unknown initializer '" + s + "' (expected uniform, truncated_normal or zeros)");
}

Result<HashEviction> ParseHashEviction(const std::string& s) {
  if (s == "lru") return HashEviction::kLru;
  if (s == "lfu") return HashEviction::kLfu;
  return InvalidArgument("unknown eviction policy '" + s + "' (expected lru or lfu)");
}

Status CheckHashShardConfig(const HashShardConfig& c) {
  const std::string who = "hash embedding table '" + c.table + "'";
  auto bad = [&](const std::string& what) { return InvalidArgument(who + ": " + what); };
  if (c.num_shards < 1 || c.shard < 0 || c.shard >= c.num_shards)
    return bad("shard " + std::to_string(c.shard) + " of " + std::to_string(c.num_shards) + " is not valid");
  if (c.dim < 1) return bad("dim must be >= 1, got " + std::to_string(c.dim));
  if (c.min_count < 0) return bad("min_count must be >= 0, got " + std::to_string(c.min_count));
  if (!(c.admit_probability > 0.0 && c.admit_probability <= 1.0))
    return bad("admit_probability must be in (0, 1], got " + std::to_string(c.admit_probability));
  if (c.filter_width < 1 || c.filter_width > (int64_t{1} << 30))
    return bad("filter_width must be in [1, 2^30], got " + std::to_string(c.filter_width));
  if (c.filter_depth < 1 || c.filter_depth > 16)
    return bad("filter_depth must be in [1, 16], got " + std::to_string(c.filter_depth));
  if (c.ttl_steps < 0) return bad("ttl_steps must be >= 0 (0: no expiry), got " + std::to_string(c.ttl_steps));
  if (c.max_rows < 0) return bad("max_rows must be >= 0 (0: no limit), got " + std::to_string(c.max_rows));
  if (c.max_rows > (int64_t{1} << 40)) return bad("max_rows is too large: " + std::to_string(c.max_rows));
  if (!(c.scale >= 0.0)) return bad("scale must be >= 0");
  if (c.ram_budget_bytes < 0)
    return bad("ram_budget_bytes must be >= 0 (0: no cold tier), got " + std::to_string(c.ram_budget_bytes));
  if (!c.cold_dir.empty() && c.ram_budget_bytes == 0) return bad("a cold_dir needs ram_budget_bytes > 0");
  return Status::OK();
}

Tensor HashShardMetricsTensor(const HashShardMetrics& m) {
  return Tensor::FromVector(std::vector<int64_t>{m.rows, m.capacity, m.admitted, m.rejected, m.evicted, m.bytes,
                                                 m.step, m.skipped, m.cold_rows, m.hot_hits, m.cold_hits,
                                                 m.disk_bytes});
}

HashEmbeddingShard::HashEmbeddingShard(HashShardConfig config)
    : c_(std::move(config)), stride_(c_.dim), rng_(MixId(c_.seed * 31 + c_.shard)) {
  if (c_.min_count > 1) filter_.assign(static_cast<size_t>(c_.filter_depth * c_.filter_width), 0);
  IndexRebuild(16);
}

HashEmbeddingShard::~HashEmbeddingShard() {
  if (c_.budget && charged_.bytes > 0) c_.budget->Give(charged_.bytes);
}

// ---- the index: open addressing, linear probing ----

int64_t HashEmbeddingShard::Find(int64_t id) const {
  for (uint64_t b = (MixId(id) & mask_);; b = (b + 1) & mask_) {
    if (buckets_[b].val == 0) return -1;
    if (buckets_[b].key == id) return buckets_[b].val - 1;
  }
}

void HashEmbeddingShard::IndexInsert(int64_t id, int64_t slot) {
  if (static_cast<uint64_t>(rows_ + 1) * 10 > (mask_ + 1) * 7) {
    IndexRebuild(2 * (rows_ + 1));
    // The rebuild indexed every used slot, this one too when its metadata is set.
    if (Find(id) == slot) return;
  }
  uint64_t b = (MixId(id) & mask_);
  while (buckets_[b].val != 0) b = (b + 1) & mask_;
  buckets_[b].key = id;
  buckets_[b].val = slot + 1;
}

void HashEmbeddingShard::IndexErase(int64_t id) {
  uint64_t i = (MixId(id) & mask_);
  while (buckets_[i].val != 0 && buckets_[i].key != id) i = (i + 1) & mask_;
  if (buckets_[i].val == 0) return;
  buckets_[i].val = 0;
  // Backward-shift deletion: later entries of the probe run move up, so no
  // tombstones pile up under steady eviction.
  for (uint64_t j = (i + 1) & mask_; buckets_[j].val != 0; j = (j + 1) & mask_) {
    const uint64_t home = (MixId(buckets_[j].key) & mask_);
    const bool between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (between) continue;
    buckets_[i].key = buckets_[j].key;
    buckets_[i].val = buckets_[j].val;
    buckets_[j].val = 0;
    i = j;
  }
}

void HashEmbeddingShard::IndexRebuild(int64_t min_capacity) {
  uint64_t cap = 16;
  while (cap < static_cast<uint64_t>(min_capacity) * 10 / 7 + 1) cap <<= 1;
  buckets_.assign(cap, Bucket());
  mask_ = cap - 1;
  for (size_t s = 0; s < meta_.size(); ++s) {
    if (!meta_[s].used) continue;
    uint64_t b = (MixId(meta_[s].id) & mask_);
    while (buckets_[b].val != 0) b = (b + 1) & mask_;
    buckets_[b].key = meta_[s].id;
    buckets_[b].val = static_cast<int64_t>(s) + 1;
  }
}

// ---- rows ----

void HashEmbeddingShard::Grow(int64_t capacity) {
  const int64_t old = static_cast<int64_t>(meta_.size());
  if (capacity <= old) return;
  // Exactly the slots asked for: resize alone may double the allocation,
  // and the RAM budget counts what is allocated.
  arena_.reserve(static_cast<size_t>(capacity * stride_));
  meta_.reserve(static_cast<size_t>(capacity));
  arena_.resize(static_cast<size_t>(capacity * stride_), 0.0f);
  meta_.resize(static_cast<size_t>(capacity));
  for (int64_t s = old; s < capacity; ++s) free_.push_back(s);
  std::make_heap(free_.begin(), free_.end(), std::greater<int64_t>());
  all_dirty_ = true;
}

void HashEmbeddingShard::InitRow(int64_t slot, int64_t id) {
  float* r = arena_.data() + slot * stride_;
  // A splitmix64 stream seeded by (seed, id): the same row wherever and
  // whenever it is made.
  uint64_t state = MixId(c_.seed ^ static_cast<int64_t>(MixId(id)));
  auto next = [&state] {
    state += 0x9E3779B97F4A7C15ull;
    return MixId(static_cast<int64_t>(state));
  };
  auto unit = [&] { return static_cast<double>(next() >> 11) * 0x1.0p-53; };
  if (c_.initializer == HashInitializer::kUniform) {
    // Two 24-bit uniforms per draw: new rows are made in the training loop.
    const float scale = static_cast<float>(c_.scale);
    for (int64_t j = 0; j < c_.dim; j += 2) {
      const uint64_t z = next();
      r[j] = (static_cast<float>(z >> 40) * 0x1.0p-23f - 1.0f) * scale;
      if (j + 1 < c_.dim) r[j + 1] = (static_cast<float>((z >> 8) & 0xFFFFFF) * 0x1.0p-23f - 1.0f) * scale;
    }
  }
  for (int64_t j = 0; j < c_.dim && c_.initializer != HashInitializer::kUniform; ++j) {
    double v = 0.0;
    if (c_.initializer == HashInitializer::kTruncatedNormal) {
      double z;
      do {  // Box-Muller, redrawn beyond two standard deviations
        const double u1 = unit(), u2 = unit();
        z = std::sqrt(-2.0 * std::log(u1 > 0 ? u1 : 0x1.0p-53)) * std::cos(6.283185307179586 * u2);
      } while (std::abs(z) > 2.0);
      v = z * c_.scale;
    }
    r[j] = static_cast<float>(v);
  }
  const int slots = optimizer_ < 0 ? 0 : RowSlots(static_cast<OptimizerKind>(optimizer_));
  for (int s = 0; s < slots; ++s)
    std::fill(r + (1 + s) * c_.dim, r + (2 + s) * c_.dim, static_cast<float>(slot_init_[s]));
  Meta& m = meta_[slot];
  m.id = id;
  m.used = true;
  m.last_seen = step_;
  m.freq = 0;
  m.tick = tick_;
  MarkSlot(slot);
}

void HashEmbeddingShard::Evict(int64_t slot) {
  Meta& m = meta_[slot];
  if (m.cold_copy) cold_drop_.push_back(m.id);  // else a later lookup would bring it back
  IndexErase(m.id);
  m = Meta();
  std::fill(arena_.begin() + slot * stride_, arena_.begin() + (slot + 1) * stride_, 0.0f);
  FreePush(slot);
  --rows_;
  ++evicted_;
  MarkSlot(slot);
}

void HashEmbeddingShard::Release(const InFlight& f) {
  for (int64_t s : f.slots) --meta_[s].pins;
}

int64_t HashEmbeddingShard::EvictByPolicy(int64_t n) {
  std::vector<int64_t> cand;
  cand.reserve(static_cast<size_t>(rows_));
  for (int64_t s = 0; s < static_cast<int64_t>(meta_.size()); ++s)
    if (meta_[s].used && meta_[s].pins == 0) cand.push_back(s);
  n = std::min<int64_t>(n, static_cast<int64_t>(cand.size()));
  if (n == 0) return 0;
  auto older = [this](int64_t a, int64_t b) {
    const Meta &x = meta_[a], &y = meta_[b];
    if (c_.eviction == HashEviction::kLfu && x.freq != y.freq) return x.freq < y.freq;
    if (x.last_seen != y.last_seen) return x.last_seen < y.last_seen;
    if (x.tick != y.tick) return x.tick < y.tick;
    return x.id < y.id;  // a total order: the same rows go whatever the slots
  };
  std::nth_element(cand.begin(), cand.begin() + (n - 1), cand.end(), older);
  for (int64_t i = 0; i < n; ++i) Evict(cand[i]);
  return n;
}

int64_t HashEmbeddingShard::HotRowBytes() const {
  // Floats, metadata, up to three buckets (load <= 0.7 after doubling) and a free-list entry.
  return stride_ * static_cast<int64_t>(sizeof(float)) + static_cast<int64_t>(sizeof(Meta)) +
         3 * static_cast<int64_t>(sizeof(Bucket)) + static_cast<int64_t>(sizeof(int64_t));
}

int64_t HashEmbeddingShard::HotRowLimit() const {
  if (!cold_ || c_.ram_budget_bytes <= 0) return 0;
  return std::max<int64_t>(16, c_.ram_budget_bytes / HotRowBytes());
}

Result<int64_t> HashEmbeddingShard::TakeSlot(bool new_row) {
  const int64_t cap = static_cast<int64_t>(meta_.size());
  const int64_t limit = HotRowLimit();
  if (new_row && c_.max_rows > 0 && rows_ + cold_rows_ >= c_.max_rows) {
    const int64_t want = std::max<int64_t>(1, c_.max_rows / 16) + (rows_ + cold_rows_ - c_.max_rows);
    if (EvictByPolicy(want) == 0)
      return FailedPrecondition(Who(c_) + ": max_rows " + std::to_string(c_.max_rows) +
                                " reached and every row is in use by a step in flight (a batch "
                                "holds more of this shard's ids than max_rows)");
  } else if (limit > 0 && rows_ >= limit) {
    SF_ASSIGN_OR_RETURN(int64_t moved, Demote(std::max<int64_t>(1, limit / 16) + (rows_ - limit)));
    if (moved == 0)
      return FailedPrecondition(Who(c_) + ": ram_budget_bytes " + std::to_string(c_.ram_budget_bytes) +
                                " holds " + std::to_string(limit) +
                                " rows and every one is in use by a step in flight");
  }
  if (free_.empty()) {
    int64_t grown = std::max<int64_t>(64, 2 * cap);
    if (c_.max_rows > 0) grown = std::min(grown, c_.max_rows);
    if (limit > 0) grown = std::min(grown, limit);
    grown = std::max(grown, cap + 1);
    if (c_.budget) {
      const int64_t bytes = (grown - cap) * HotRowBytes();
      SF_RETURN_IF_ERROR(c_.budget->Take(bytes));
      charged_.bytes += bytes;
    }
    Grow(grown);
  }
  return FreePop();
}

Result<int64_t> HashEmbeddingShard::Allocate(int64_t id) {
  SF_ASSIGN_OR_RETURN(int64_t slot, TakeSlot());
  InitRow(slot, id);
  IndexInsert(id, slot);
  ++rows_;
  ++admitted_;
  return slot;
}

std::string HashEmbeddingShard::EncodeRow(int64_t slot) const {
  const Meta& m = meta_[slot];
  std::string b(2 * sizeof(int64_t) + static_cast<size_t>(stride_) * sizeof(float), '\0');
  std::memcpy(&b[0], &m.last_seen, sizeof(int64_t));
  std::memcpy(&b[sizeof(int64_t)], &m.freq, sizeof(int64_t));
  std::memcpy(&b[2 * sizeof(int64_t)], arena_.data() + slot * stride_, static_cast<size_t>(stride_) * sizeof(float));
  return b;
}

Status HashEmbeddingShard::DecodeRow(int64_t slot, int64_t id, const std::string& b) {
  const size_t head = 2 * sizeof(int64_t);
  const size_t floats = b.size() >= head ? (b.size() - head) / sizeof(float) : 0;
  // A row demoted before the first update has no slots yet: they start at their initial values.
  if (b.size() < head || (b.size() - head) % sizeof(float) != 0 ||
      (static_cast<int64_t>(floats) != stride_ && static_cast<int64_t>(floats) != c_.dim))
    return DataLoss(Who(c_) + ": the cold tier holds " + std::to_string(b.size()) + " bytes for id " +
                    std::to_string(id) + ", not a row");
  Meta& m = meta_[slot];
  m = Meta();
  m.id = id;
  m.used = true;
  std::memcpy(&m.last_seen, &b[0], sizeof(int64_t));
  std::memcpy(&m.freq, &b[sizeof(int64_t)], sizeof(int64_t));
  m.tick = tick_;
  float* r = arena_.data() + slot * stride_;
  std::memcpy(r, &b[head], floats * sizeof(float));
  const int slots = optimizer_ < 0 ? 0 : RowSlots(static_cast<OptimizerKind>(optimizer_));
  if (static_cast<int64_t>(floats) < stride_)
    for (int k = 0; k < slots; ++k)
      std::fill(r + (1 + k) * c_.dim, r + (2 + k) * c_.dim, static_cast<float>(slot_init_[k]));
  MarkSlot(slot);
  return Status::OK();
}

Status HashEmbeddingShard::DropColdCopies() {
  if (cold_drop_.empty()) return Status::OK();
  // An id may have come back as a fresh hot row since: its stale copy goes too.
  Status w = cold_->Write({}, cold_drop_);
  if (!w.ok()) return w.WithPrefix(Who(c_) + ": dropping evicted rows from the cold tier");
  cold_drop_.clear();
  return Status::OK();
}

Status HashEmbeddingShard::SweepColdTier(int64_t budget) {
  // What the scan shows may be an older copy of a row stored again since:
  // its candidates are read again, and only rows still expired go.
  std::vector<int64_t> maybe;
  std::string cursor = cold_sweep_cursor_;
  Status r = cold_->ScanSome(&cursor, budget, [&](int64_t id, const std::string& b) {
    int64_t last_seen;
    // A hot id's stored row is a stale copy, not a cold row; a malformed
    // one is left for the lookup that reads it to report.
    if (b.size() < sizeof last_seen || Find(id) >= 0) return;
    std::memcpy(&last_seen, b.data(), sizeof last_seen);
    if (ExpiredSince(last_seen)) maybe.push_back(id);
  });
  if (!r.ok()) return r.WithPrefix(Who(c_) + ": sweeping expired rows from the cold tier");
  std::sort(maybe.begin(), maybe.end());
  maybe.erase(std::unique(maybe.begin(), maybe.end()), maybe.end());
  std::vector<int64_t> gone;
  constexpr size_t kPiece = 4096;  // rows read at once: a sweep's memory stays small
  for (size_t at = 0; at < maybe.size(); at += kPiece) {
    const std::vector<int64_t> piece(maybe.begin() + at, maybe.begin() + std::min(maybe.size(), at + kPiece));
    std::vector<std::string> rows;
    std::vector<bool> found;
    r = cold_->MultiGet(piece, &rows, &found);
    if (!r.ok()) return r.WithPrefix(Who(c_) + ": sweeping expired rows from the cold tier");
    for (size_t i = 0; i < piece.size(); ++i) {
      int64_t last_seen;
      if (!found[i] || rows[i].size() < sizeof last_seen) continue;
      std::memcpy(&last_seen, rows[i].data(), sizeof last_seen);
      if (ExpiredSince(last_seen)) gone.push_back(piece[i]);
    }
  }
  if (!gone.empty()) {
    Status w = cold_->Write({}, gone);
    if (!w.ok()) return w.WithPrefix(Who(c_) + ": deleting expired rows from the cold tier");
    cold_rows_ -= static_cast<int64_t>(gone.size());
    evicted_ += static_cast<int64_t>(gone.size());
  }
  cold_sweep_cursor_ = std::move(cursor);
  cold_swept_at_ = step_;
  return Status::OK();
}

Result<int64_t> HashEmbeddingShard::Demote(int64_t n) {
  // Queued deletes go first, in their own write: in one batch a delete of an
  // id demoted again would win over its put.
  SF_RETURN_IF_ERROR(DropColdCopies());
  std::vector<int64_t> cand;
  for (int64_t s = 0; s < static_cast<int64_t>(meta_.size()); ++s)
    if (meta_[s].used && meta_[s].pins == 0) cand.push_back(s);
  n = std::min<int64_t>(n, static_cast<int64_t>(cand.size()));
  if (n == 0) return int64_t{0};
  auto older = [this](int64_t a, int64_t b) {
    const Meta &x = meta_[a], &y = meta_[b];
    if (x.last_seen != y.last_seen) return x.last_seen < y.last_seen;
    if (x.tick != y.tick) return x.tick < y.tick;
    return x.id < y.id;
  };
  std::nth_element(cand.begin(), cand.begin() + (n - 1), cand.end(), older);
  std::vector<std::pair<int64_t, std::string>> puts;
  for (int64_t i = 0; i < n; ++i) puts.emplace_back(meta_[cand[i]].id, EncodeRow(cand[i]));
  // Written before anything leaves RAM: a failed write loses no row.
  Status w = cold_->Write(puts, {});
  if (!w.ok()) return w.WithPrefix(Who(c_) + ": demoting rows to the cold tier");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t slot = cand[i];
    IndexErase(meta_[slot].id);
    meta_[slot] = Meta();
    std::fill(arena_.begin() + slot * stride_, arena_.begin() + (slot + 1) * stride_, 0.0f);
    FreePush(slot);
    --rows_;
    ++cold_rows_;
    MarkSlot(slot);
  }
  return n;
}

Status HashEmbeddingShard::SetColdStore(std::unique_ptr<HashColdStore> store) {
  cold_ = std::move(store);
  cold_rows_ = 0;
  cold_drop_.clear();
  cold_sweep_cursor_.clear();
  cold_swept_at_ = -1;
  for (Meta& m : meta_) m.cold_copy = false;
  return FitBudget();
}

Status HashEmbeddingShard::FitBudget() {
  const int64_t limit = HotRowLimit();
  const int64_t cap = static_cast<int64_t>(meta_.size());
  if (limit <= 0 || cap <= limit) return Status::OK();
  if (rows_ > limit) {
    SF_ASSIGN_OR_RETURN(int64_t moved, Demote(rows_ - limit));
    if (rows_ > limit)
      return FailedPrecondition(Who(c_) + ": ram_budget_bytes " + std::to_string(c_.ram_budget_bytes) +
                                " holds " + std::to_string(limit) + " rows; " + std::to_string(rows_) +
                                " are in use by steps in flight (" + std::to_string(moved) + " moved)");
  }
  std::vector<int64_t> to(static_cast<size_t>(cap), -1);
  std::vector<float> arena;
  arena.reserve(static_cast<size_t>(limit * stride_));
  arena.assign(static_cast<size_t>(limit * stride_), 0.0f);
  std::vector<Meta> meta;
  meta.reserve(static_cast<size_t>(limit));
  meta.assign(static_cast<size_t>(limit), Meta());
  int64_t next = 0;
  for (int64_t s = 0; s < cap; ++s) {
    if (!meta_[s].used) continue;
    to[s] = next;
    meta[next] = meta_[s];
    std::copy(arena_.begin() + s * stride_, arena_.begin() + (s + 1) * stride_, arena.begin() + next * stride_);
    ++next;
  }
  arena_.swap(arena);
  meta_.swap(meta);
  free_.clear();
  for (int64_t s = next; s < limit; ++s) free_.push_back(s);  // ascending: already a min-heap
  for (InFlight& f : in_flight_)
    for (int64_t& s : f.slots) s = to[s];
  IndexRebuild(rows_ + 1);
  all_dirty_ = true;
  return Status::OK();
}

int64_t HashEmbeddingShard::FilterAdd(int64_t id, int64_t count) {
  const uint64_t w = static_cast<uint64_t>(c_.filter_width);
  uint64_t idx[16];
  uint64_t est = std::numeric_limits<uint32_t>::max();
  for (int64_t d = 0; d < c_.filter_depth; ++d) {
    idx[d] = static_cast<uint64_t>(d) * w +
             MixId(id ^ static_cast<int64_t>(0x632BE59BD9B4E019ull * static_cast<uint64_t>(d + 1))) % w;
    est = std::min<uint64_t>(est, filter_[idx[d]]);
  }
  const uint64_t updated = std::min<uint64_t>(est + static_cast<uint64_t>(count), std::numeric_limits<uint32_t>::max());
  for (int64_t d = 0; d < c_.filter_depth; ++d) {
    // Conservative update: only counters below the new estimate rise, which
    // keeps the sketch an upper bound with less overcount.
    if (filter_[idx[d]] >= updated) continue;
    filter_[idx[d]] = static_cast<uint32_t>(updated);
    MarkCounter(idx[d]);
  }
  return static_cast<int64_t>(updated);
}

void HashEmbeddingShard::SetOptimizer(OptimizerKind kind, const std::vector<double>& init) {
  const OptimizerSpec& spec = SpecOf(kind);
  const int slots = RowSlots(kind);
  for (int i = 0; i < spec.handles - 1 && i < 4; ++i)
    slot_init_[i] = i < static_cast<int>(init.size()) ? init[i] : 0.0;
  for (int i = 0; i < spec.scalar_slots; ++i) scalar_slots_[i] = static_cast<float>(slot_init_[slots + i]);
  const int64_t stride = c_.dim * (1 + slots);
  const int64_t cap = static_cast<int64_t>(meta_.size());
  std::vector<float> arena(static_cast<size_t>(cap * stride), 0.0f);
  for (int64_t s = 0; s < cap; ++s) {
    if (!meta_[s].used) continue;
    float* r = arena.data() + s * stride;
    std::copy(arena_.begin() + s * stride_, arena_.begin() + s * stride_ + c_.dim, r);
    for (int k = 0; k < slots; ++k)
      std::fill(r + (1 + k) * c_.dim, r + (2 + k) * c_.dim, static_cast<float>(slot_init_[k]));
  }
  arena_ = std::move(arena);
  stride_ = stride;
  optimizer_ = static_cast<int>(kind);
  all_dirty_ = true;
}

// ---- lookups and updates ----

Status HashEmbeddingShard::GatherCombine(const EmbeddingGather& q, Tensor* out) {
  const std::string who = Who(c_);
  if (q.ids.dtype() != DType::kInt64 || q.ids.rank() != 1 || q.segment_ids.dtype() != DType::kInt64 ||
      q.unique_index.dtype() != DType::kInt32 || q.unique_index.num_elements() != q.segment_ids.num_elements() ||
      q.num_segments < 0)
    return InvalidArgument(who + ": a lookup needs unique int64 ids with int32 positions (BuildHashShardGather)");
  const bool weighted = q.weights.valid();
  if (weighted && (q.weights.dtype() != DType::kFloat32 || q.weights.num_elements() != q.num_segments))
    return InvalidArgument(who + ": the lookup's weights must be float32 [" + std::to_string(q.num_segments) + "]");
  const int64_t m = q.ids.num_elements(), n = q.segment_ids.num_elements();
  const int64_t* ids = q.ids.data<int64_t>();
  const int64_t* seg = q.segment_ids.data<int64_t>();
  const int32_t* ui = q.unique_index.data<int32_t>();
  for (int64_t u = 0; u < m; ++u)
    if (HashShardOf(ids[u], c_.num_shards) != c_.shard)
      return InvalidArgument(who + ": id " + std::to_string(ids[u]) + " belongs to shard " +
                             std::to_string(HashShardOf(ids[u], c_.num_shards)));
  std::vector<int64_t> count(static_cast<size_t>(m), 0);
  for (int64_t p = 0; p < n; ++p) {
    if (seg[p] < 0 || seg[p] >= q.num_segments || ui[p] < 0 || ui[p] >= m)
      return InvalidArgument(who + ": position " + std::to_string(p) + " of the lookup is out of range");
    ++count[ui[p]];
  }
  // A training lookup pins what it touches until its step's update arrives;
  // a read-only one (evaluation, serving) only while it reads, and changes
  // nothing of the model: no row made, no sighting counted, no row expired,
  // no last step or frequency moved (a cold row it reads is promoted, as a
  // cache would).
  const bool ro = q.read_only;
  std::vector<int64_t> ro_pins;
  struct Unpin {
    HashEmbeddingShard* self;
    std::vector<int64_t>* pins;
    ~Unpin() { self->Release(InFlight{0, 0, std::move(*pins), {}}); }
  } unpin{this, &ro_pins};
  std::vector<int64_t>* pins = &ro_pins;
  std::unordered_set<int64_t>* step_rejected = nullptr;
  if (!ro) {
    ++tick_;
    auto f = std::find_if(in_flight_.begin(), in_flight_.end(),
                          [&](const InFlight& x) { return x.step_id == q.step_id; });
    if (f == in_flight_.end()) f = in_flight_.insert(in_flight_.end(), InFlight{q.step_id, step_, {}, {}});
    pins = &f->slots;
    step_rejected = &f->rejected;
  }
  std::vector<int64_t>& pinned = *pins;
  std::vector<int64_t> slot(static_cast<size_t>(m), -1);
  constexpr int64_t kAhead = 8;  // probes are cache misses: overlap a few
  // The misses, read from the cold tier in one batch before anything moves.
  std::vector<int64_t> missed;
  std::vector<int32_t> miss_of(cold_ ? static_cast<size_t>(m) : 0, -1);
  std::vector<std::string> cold_rows;
  std::vector<bool> cold_found;
  if (cold_) {
    Status d = DropColdCopies();  // before the read, or it would find them
    if (!d.ok()) return d;
    const int64_t since = step_ - cold_swept_at_;
    if (!ro && c_.ttl_steps > 0 && cold_rows_ > 0 && since >= kColdSweepEvery)
      SF_RETURN_IF_ERROR(SweepColdTier(std::min(since, kColdSweepAtMost) * std::max<int64_t>(1024, m)));
  }
  if (cold_ && cold_rows_ > 0) {
    for (int64_t u = 0; u < m; ++u) {
      if (u + kAhead < m) PrefetchBucket(ids[u + kAhead]);
      if (Find(ids[u]) < 0) {
        miss_of[u] = static_cast<int32_t>(missed.size());
        missed.push_back(ids[u]);
      }
    }
    if (!missed.empty()) {
      Status r = cold_->MultiGet(missed, &cold_rows, &cold_found);
      if (!r.ok()) return r.WithPrefix(who + ": reading the cold tier");
    }
  }
  // First every hit in RAM is pinned: making room for the misses below may
  // then demote or evict only rows this lookup does not read.
  for (int64_t u = 0; u < m; ++u) {
    if (u + kAhead < m) PrefetchBucket(ids[u + kAhead]);
    int64_t s = Find(ids[u]);
    if (s >= 0 && Expired(meta_[s]) && ro) {
      slot[u] = -2;  // gone by ttl_steps: reads zeros, left for a training lookup to evict
      continue;
    }
    if (s >= 0 && Expired(meta_[s]) && meta_[s].pins == 0) {
      Evict(s);
      s = -1;
    }
    if (s < 0) continue;
    ++hot_hits_;
    ++meta_[s].pins;
    pinned.push_back(s);
    slot[u] = s;
  }
  for (int64_t u = 0; u < m; ++u) {
    if (slot[u] == -2) slot[u] = -1;
    if (slot[u] >= 0 || (ro && Find(ids[u]) >= 0)) continue;
    int64_t s = -1;
    if (cold_ && miss_of.size() > 0 && miss_of[u] >= 0 && cold_found[miss_of[u]]) {
      if (ro) {
        int64_t last_seen = 0;
        const std::string& b = cold_rows[miss_of[u]];
        if (b.size() >= sizeof last_seen) std::memcpy(&last_seen, b.data(), sizeof last_seen);
        if (ExpiredSince(last_seen)) continue;  // gone: zeros, and the row stays for a training lookup
      }
      SF_ASSIGN_OR_RETURN(int64_t fresh, TakeSlot(/*new_row=*/false));
      Status d = DecodeRow(fresh, ids[u], cold_rows[miss_of[u]]);
      if (!d.ok()) {
        meta_[fresh] = Meta();
        FreePush(fresh);
        return d;
      }
      --cold_rows_;
      if (Expired(meta_[fresh])) {  // gone by ttl_steps while cold: it starts afresh below
        meta_[fresh] = Meta();
        FreePush(fresh);
        ++evicted_;
        cold_drop_.push_back(ids[u]);
      } else {
        meta_[fresh].cold_copy = true;
        IndexInsert(ids[u], fresh);
        ++rows_;
        ++cold_hits_;
        s = fresh;
      }
    }
    if (s < 0 && ro) continue;  // no row: reads zeros, and no sighting is counted
    if (s < 0) {
      bool admit = true;
      if (c_.min_count > 1) admit = FilterAdd(ids[u], count[u]) >= c_.min_count;  // every sighting counts
      // One decision per id and step (InFlight::rejected): the sightings of
      // a step's later lookups count for the steps after it.
      if (admit && step_rejected && step_rejected->count(ids[u])) admit = false;
      if (admit && c_.admit_probability < 1.0) {
        rng_ += 0x9E3779B97F4A7C15ull;
        admit = static_cast<double>(MixId(static_cast<int64_t>(rng_)) >> 11) * 0x1.0p-53 < c_.admit_probability;
      }
      if (!admit) {
        ++rejected_;
        if (step_rejected) step_rejected->insert(ids[u]);
        continue;
      }
      SF_ASSIGN_OR_RETURN(s, Allocate(ids[u]));
    }
    ++meta_[s].pins;
    pinned.push_back(s);
    slot[u] = s;
  }
  for (int64_t u = 0; u < m && !ro; ++u) {
    const int64_t s = slot[u];
    if (s < 0) continue;
    Meta& meta = meta_[s];
    meta.last_seen = step_;
    meta.freq += count[u];
    meta.tick = tick_;
    MarkSlot(s);
  }
  const int64_t dim = c_.dim;
  *out = Tensor::Zeros(DType::kFloat32, {q.num_segments, dim});
  float* dst = out->data<float>();
  const float* w = weighted ? q.weights.data<float>() : nullptr;
  using Row = Eigen::Map<Eigen::Array<float, 1, Eigen::Dynamic>>;
  using ConstRow = Eigen::Map<const Eigen::Array<float, 1, Eigen::Dynamic>>;
  const float* arena = arena_.data();
  const int64_t stride = stride_;
  auto combine = [&](auto width) {
    constexpr int D = decltype(width)::value;
    using FixedRow = Eigen::Map<Eigen::Array<float, 1, D>>;
    using ConstFixedRow = Eigen::Map<const Eigen::Array<float, 1, D>>;
    for (int64_t p = 0; p < n; ++p) {
      if (p + kAhead < n && slot[ui[p + kAhead]] >= 0) __builtin_prefetch(arena + slot[ui[p + kAhead]] * stride);
      const int64_t s = slot[ui[p]];
      if (s < 0) continue;  // not admitted: reads zeros
      const float wt = w ? w[seg[p]] : 1.0f;
      if constexpr (D == Eigen::Dynamic) Row(dst + seg[p] * dim, dim) += ConstRow(arena + s * stride, dim) * wt;
      else FixedRow(dst + seg[p] * dim) += ConstFixedRow(arena + s * stride) * wt;
    }
  };
  switch (dim) {  // the common widths unrolled, as the fixed tables' gather
    case 16: combine(std::integral_constant<int, 16>()); break;
    case 32: combine(std::integral_constant<int, 32>()); break;
    case 64: combine(std::integral_constant<int, 64>()); break;
    default: combine(std::integral_constant<int, Eigen::Dynamic>()); break;
  }
  return Status::OK();
}

Status HashEmbeddingShard::Apply(const SparseApplyRequest& req) {
  if (req.optimizer >= OptimizerKind::kCount)
    return InvalidArgument(Who(c_) + ": unknown sparse optimizer " + std::to_string(static_cast<int>(req.optimizer)));
  const OptimizerSpec& spec = SpecOf(req.optimizer);
  const std::string who = Who(c_) + ": sparse optimizer " + spec.name;
  SF_RETURN_IF_ERROR(CheckOptimizerScalars(spec, who, req.scalars));
  const int64_t dim = c_.dim;
  if (req.indices.dtype() != DType::kInt64 || req.indices.rank() != 1)
    return InvalidArgument(who + ": indices must be an int64 vector of ids");
  const int64_t m = req.indices.num_elements();
  if (req.values.dtype() != DType::kFloat32 || req.values.rank() != 2 || req.values.dim(0) != m ||
      req.values.dim(1) != dim)
    return InvalidArgument(who + ": values must be float32 [" + std::to_string(m) + ", " + std::to_string(dim) +
                           "], got " + req.values.DebugString(0));
  if (optimizer_ >= 0 && optimizer_ != static_cast<int>(req.optimizer))
    return FailedPrecondition(who + " cannot update a table trained by " +
                              OptimizerName(static_cast<OptimizerKind>(optimizer_)) +
                              " (its rows hold that optimizer's slots)");
  if (optimizer_ < 0) {
    SetOptimizer(req.optimizer, req.slot_init);
    SF_RETURN_IF_ERROR(FitBudget());  // rows grew by their slots
  }
  const int64_t* ip = req.indices.data<int64_t>();
  const float* g = req.values.data<float>();
  std::vector<int64_t> unique;
  std::vector<int32_t> index;
  std::vector<float> merged;
  int64_t u = m;
  if (!req.indices_unique) {
    UniqueRows(ip, m, &unique, &index);
    u = static_cast<int64_t>(unique.size());
    merged.assign(static_cast<size_t>(u * dim), 0.0f);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < dim; ++j) merged[index[i] * dim + j] += g[i * dim + j];
    ip = unique.data();
    g = merged.data();
  }
  float* scalar_ptrs[4] = {&scalar_slots_[0], &scalar_slots_[1], &scalar_slots_[2], &scalar_slots_[3]};
  RowUpdater update(req.optimizer, req.scalars, dim, scalar_ptrs, req.use_nesterov);
  const int slots = RowSlots(req.optimizer);
  float* slot_rows[kMaxOptimizerSlots] = {};
  // Two passes, each prefetching ahead: the probes, then the rows.
  constexpr int64_t kAhead = 8;
  std::vector<int64_t> found(static_cast<size_t>(u));
  for (int64_t i = 0; i < u; ++i) {
    if (i + kAhead < u) PrefetchBucket(ip[i + kAhead]);
    found[i] = Find(ip[i]);
  }
  for (int64_t i = 0; i < u; ++i) {
    if (i + kAhead < u && found[i + kAhead] >= 0) {
      const float* ahead = arena_.data() + found[i + kAhead] * stride_;
      for (int64_t j = 0; j < stride_; j += 16) __builtin_prefetch(ahead + j);
    }
    const int64_t s = found[i];
    if (s < 0) {  // never admitted (or the caller sent another shard's id)
      ++skipped_;
      continue;
    }
    float* row = arena_.data() + s * stride_;
    for (int k = 0; k < slots; ++k) slot_rows[k] = row + (1 + k) * dim;
    update.ApplyRow(row, slot_rows, g + i * dim);
    meta_[s].last_seen = step_;
    MarkSlot(s);
  }
  update.Finish();
  // The step's update has come: its lookups' rows may go again.
  auto f = std::find_if(in_flight_.begin(), in_flight_.end(),
                        [&](const InFlight& x) { return x.step_id == req.step_id; });
  if (f != in_flight_.end()) {
    Release(*f);
    in_flight_.erase(f);
  }
  ++step_;
  // Lookups that never train (evaluation) stop pinning after a while.
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (step_ - it->at_step <= kInFlightSteps) {
      ++it;
      continue;
    }
    Release(*it);
    it = in_flight_.erase(it);
  }
  if (c_.ttl_steps > 0 && step_ % std::max<int64_t>(1, c_.ttl_steps / 4) == 0) {
    for (int64_t s = 0; s < static_cast<int64_t>(meta_.size()); ++s)
      if (meta_[s].used && Expired(meta_[s]) && meta_[s].pins == 0) Evict(s);
  }
  return Status::OK();
}

HashShardMetrics HashEmbeddingShard::Metrics() const {
  HashShardMetrics m;
  m.rows = rows_;
  m.capacity = static_cast<int64_t>(meta_.size());
  m.admitted = admitted_;
  m.rejected = rejected_;
  m.evicted = evicted_;
  m.step = step_;
  m.skipped = skipped_;
  m.cold_rows = cold_rows_;
  m.hot_hits = hot_hits_;
  m.cold_hits = cold_hits_;
  m.disk_bytes = cold_ ? cold_->DiskBytes() : 0;
  m.bytes = static_cast<int64_t>(arena_.capacity() * sizeof(float) + meta_.capacity() * sizeof(Meta) +
                                 buckets_.capacity() * sizeof(Bucket) +
                                 free_.capacity() * sizeof(int64_t) + filter_.capacity() * sizeof(uint32_t));
  return m;
}

bool HashEmbeddingShard::RowOf(int64_t id, HashRowState* out) const {
  const int64_t s = Find(id);
  if (s < 0) return false;
  out->last_seen = meta_[s].last_seen;
  out->freq = meta_[s].freq;
  out->values.assign(arena_.begin() + s * stride_, arena_.begin() + (s + 1) * stride_);
  return true;
}

// ---- the saved state ----

int64_t HashEmbeddingShard::Width() const { return WidthFor(stride_); }
int64_t HashEmbeddingShard::HeaderRows() const {
  const int64_t words = kHeaderWords + (static_cast<int64_t>(c_.cold_dir.size()) + 7) / 8;
  return (words + Width() - 1) / Width();
}
int64_t HashEmbeddingShard::FilterRows() const {
  const int64_t words = (static_cast<int64_t>(filter_.size()) + 1) / 2;
  return (words + Width() - 1) / Width();
}

Result<Tensor> HashEmbeddingShard::Serialize() const {
  const int64_t W = Width(), H = HeaderRows(), F = FilterRows(), C = static_cast<int64_t>(meta_.size());
  // The cold tier's rows follow the arena's, as if they were hot.
  std::vector<std::pair<int64_t, std::string>> cold;
  if (cold_) {
    // Only cold rows: a stored id that is hot (a stale copy) or evicted
    // (a queued delete) is not one.
    std::vector<int64_t> gone = cold_drop_;
    std::sort(gone.begin(), gone.end());
    Status r = cold_->Scan([&](int64_t id, const std::string& b) {
      if (Find(id) < 0 && !std::binary_search(gone.begin(), gone.end(), id)) cold.emplace_back(id, b);
    });
    if (!r.ok()) return r.WithPrefix(Who(c_) + ": saving the cold tier");
  }
  const int64_t K = static_cast<int64_t>(cold.size());
  Tensor t = Tensor::Zeros(DType::kInt64, {H + F + C + K, W});
  int64_t* p = t.data<int64_t>();
  WriteHeader(p, K);
  if (!filter_.empty()) std::memcpy(p + H * W, filter_.data(), filter_.size() * sizeof(uint32_t));
  for (int64_t s = 0; s < C; ++s) WriteSlot(s, p + (H + F + s) * W);
  const size_t head = 2 * sizeof(int64_t);
  const int slots = optimizer_ < 0 ? 0 : RowSlots(static_cast<OptimizerKind>(optimizer_));
  for (int64_t k = 0; k < K; ++k) {
    const std::string& b = cold[k].second;
    const size_t floats = b.size() >= head ? (b.size() - head) / sizeof(float) : 0;
    if (b.size() < head || (static_cast<int64_t>(floats) != stride_ && static_cast<int64_t>(floats) != c_.dim))
      return DataLoss(Who(c_) + ": the cold tier holds " + std::to_string(b.size()) + " bytes for id " +
                      std::to_string(cold[k].first) + ", not a row");
    int64_t* r = p + (H + F + C + k) * W;
    r[0] = cold[k].first;
    r[1] = 1;
    std::memcpy(&r[2], &b[0], 2 * sizeof(int64_t));
    float row[4096];
    std::vector<float> big;
    float* f = row;
    if (stride_ > 4096) {
      big.resize(static_cast<size_t>(stride_));
      f = big.data();
    }
    std::memcpy(f, &b[head], floats * sizeof(float));
    if (static_cast<int64_t>(floats) < stride_)  // demoted before the first update: fresh slots
      for (int s2 = 0; s2 < slots; ++s2)
        std::fill(f + (1 + s2) * c_.dim, f + (2 + s2) * c_.dim, static_cast<float>(slot_init_[s2]));
    std::memcpy(r + kRowWords, f, static_cast<size_t>(stride_) * sizeof(float));
  }
  return t;
}

void HashEmbeddingShard::WriteSlot(int64_t s, int64_t* r) const {
  const Meta& m = meta_[s];
  if (!m.used) return;  // free slots save as zeros, whatever they held
  r[0] = m.id;
  r[1] = 1;
  r[2] = m.last_seen;
  r[3] = m.freq;
  std::memcpy(r + kRowWords, arena_.data() + s * stride_, static_cast<size_t>(stride_) * sizeof(float));
}

void HashEmbeddingShard::WriteHeader(int64_t* h, int64_t K) const {
  const int64_t C = static_cast<int64_t>(meta_.size());
  h[kMagic] = kStateMagic;
  h[kVersion] = kStateVersion;
  h[kDim] = c_.dim;
  h[kStride] = stride_;
  h[kNumShards] = c_.num_shards;
  h[kShard] = c_.shard;
  h[kCapacity] = C;
  h[kRows] = rows_;
  h[kStep] = step_;
  h[kAdmitted] = admitted_;
  h[kRejected] = rejected_;
  h[kEvicted] = evicted_;
  h[kSkipped] = skipped_;
  h[kFilterWidth] = c_.filter_width;
  h[kFilterDepth] = c_.filter_depth;
  h[kMinCount] = c_.min_count;
  h[kAdmitP] = Bits(c_.admit_probability);
  h[kTtl] = c_.ttl_steps;
  h[kMaxRows] = c_.max_rows;
  h[kEvictionWord] = static_cast<int64_t>(c_.eviction);
  h[kInitWord] = static_cast<int64_t>(c_.initializer);
  h[kScale] = Bits(c_.scale);
  h[kSeed] = c_.seed;
  h[kOptimizerWord] = optimizer_;
  for (int i = 0; i < 4; ++i) h[kSlotInit0 + i] = Bits(slot_init_[i]);
  for (int i = 0; i < 4; ++i) h[kScalar0 + i] = Bits(static_cast<double>(scalar_slots_[i]));
  h[kRng] = static_cast<int64_t>(rng_);
  h[kColdRows] = K;
  h[kRamBudget] = c_.ram_budget_bytes;
  h[kColdDirBytes] = static_cast<int64_t>(c_.cold_dir.size());
  if (!c_.cold_dir.empty()) std::memcpy(h + kHeaderWords, c_.cold_dir.data(), c_.cold_dir.size());
}

Result<Tensor> HashEmbeddingShard::SerializeRows(const std::vector<int64_t>& rows) const {
  if (cold_) return FailedPrecondition(Who(c_) + ": a shard with a cold tier is saved whole");
  const int64_t W = Width(), H = HeaderRows(), F = FilterRows(), C = static_cast<int64_t>(meta_.size());
  std::vector<int64_t> header(static_cast<size_t>(H * W), 0);
  WriteHeader(header.data(), 0);
  Tensor t = Tensor::Zeros(DType::kInt64, {static_cast<int64_t>(rows.size()), W});
  int64_t* p = t.data<int64_t>();
  const int64_t filter_bytes = static_cast<int64_t>(filter_.size() * sizeof(uint32_t));
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t r = rows[i];
    int64_t* out = p + static_cast<int64_t>(i) * W;
    if (r < 0 || r >= H + F + C) return InvalidArgument(Who(c_) + ": no saved row " + std::to_string(r));
    if (r < H) {
      std::memcpy(out, header.data() + r * W, static_cast<size_t>(W) * sizeof(int64_t));
    } else if (r < H + F) {
      // The filter's counts, packed into the rows after the header (zero-padded).
      const int64_t from = (r - H) * W * 8, n = std::min<int64_t>(W * 8, filter_bytes - from);
      if (n > 0) std::memcpy(out, reinterpret_cast<const char*>(filter_.data()) + from, static_cast<size_t>(n));
    } else {
      WriteSlot(r - H - F, out);
    }
  }
  return t;
}

Status HashEmbeddingShard::ApplyRows(const Tensor& rows, const Tensor& values) {
  const int64_t W = Width(), H = HeaderRows(), F = FilterRows(), C = static_cast<int64_t>(meta_.size());
  const std::string who = Who(c_);
  if (cold_) return FailedPrecondition(who + ": a shard with a cold tier takes its whole state only");
  if (rows.dtype() != DType::kInt64 || rows.rank() != 1 || values.dtype() != DType::kInt64 || values.rank() != 2 ||
      values.dim(0) != rows.dim(0) || values.dim(1) != W)
    return InvalidArgument(who + ": saved rows do not fit the shard: " + values.DebugString(0) + " at " +
                           rows.DebugString(0));
  const int64_t* ix = rows.data<int64_t>();
  const int64_t* v = values.data<int64_t>();
  const int64_t k = rows.dim(0);
  // The header comes first and whole: its layout must be this shard's, or
  // the rows mean other slots (the shard grew, or its optimizer came).
  if (k < H) return FailedPrecondition(who + ": saved rows without the header: the shard needs its whole state");
  for (int64_t r = 0; r < H; ++r)
    if (ix[r] != r) return FailedPrecondition(who + ": saved rows without the header: the shard needs its whole state");
  const int64_t* h = v;
  if (h[kMagic] != kStateMagic || h[kVersion] != kStateVersion || h[kCapacity] != C || h[kStride] != stride_ ||
      h[kOptimizerWord] != optimizer_ || h[kColdRows] != 0 || h[kDim] != c_.dim || h[kShard] != c_.shard ||
      h[kNumShards] != c_.num_shards)
    return FailedPrecondition(who + ": saved rows of another layout (capacity " + std::to_string(h[kCapacity]) +
                              ", here " + std::to_string(C) + "): the shard needs its whole state");
  // Packed counters (TakeChangedRows) come right after the header.
  int64_t packed = H;
  const uint64_t counters = filter_.size();
  for (; packed < k && ix[packed] == kHashPackedCountersRow; ++packed)
    for (int64_t j = 0; j < W; ++j) {
      const int64_t word = v[packed * W + j];
      if (word != -1 && (word < 0 || static_cast<uint64_t>(word) >> 32 >= counters))
        return InvalidArgument(who + ": a packed filter counter names counter " + std::to_string(word >> 32) +
                               " of " + std::to_string(counters));
    }
  for (int64_t i = packed; i < k; ++i)
    if (ix[i] < H || ix[i] >= H + F + C || (i > packed && ix[i] <= ix[i - 1]))
      return InvalidArgument(who + ": saved row " + std::to_string(ix[i]) + " is out of order or outside [" +
                             std::to_string(H) + ", " + std::to_string(H + F + C) + ")");
  for (int64_t i = H; i < packed; ++i)
    for (int64_t j = 0; j < W; ++j) {
      const int64_t word = v[i * W + j];
      if (word == -1) continue;
      const uint64_t at = static_cast<uint64_t>(word) >> 32;
      filter_[at] = static_cast<uint32_t>(word);
      MarkCounter(at);
    }
  const int64_t filter_bytes = static_cast<int64_t>(filter_.size() * sizeof(uint32_t));
  bool freed = false;
  for (int64_t i = packed; i < k; ++i) {
    const int64_t r = ix[i];
    const int64_t* in = v + i * W;
    if (r < H + F) {
      const int64_t from = (r - H) * W * 8, n = std::min<int64_t>(W * 8, filter_bytes - from);
      if (n <= 0) continue;
      // Counters that change are marked, as the holder marked them.
      uint32_t* to = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(filter_.data()) + from);
      const uint32_t* got = reinterpret_cast<const uint32_t*>(in);
      for (int64_t j = 0; j < n / 4; ++j)
        if (to[j] != got[j]) {
          to[j] = got[j];
          MarkCounter(static_cast<uint64_t>(from / 4 + j));
        }
      continue;
    }
    const int64_t s = r - H - F;
    Meta& m = meta_[s];
    if (in[1] != 0 && in[1] != 1) return DataLoss(who + ": saved row " + std::to_string(r) + " is not a row");
    if (m.used && Find(m.id) == s) IndexErase(m.id);
    const bool was = m.used;
    // rows_ counts as rows come and go: IndexInsert grows the index by it,
    // and a round that brings more rows than its free buckets would
    // otherwise fill it (and probe forever).
    if (was) --rows_;
    m = Meta();
    if (in[1] == 1) {
      m.id = in[0];
      m.used = true;
      m.last_seen = in[2];
      m.freq = in[3];
      std::memcpy(arena_.data() + s * stride_, in + kRowWords, static_cast<size_t>(stride_) * sizeof(float));
      IndexInsert(m.id, s);
      ++rows_;
    }
    freed = freed || was != m.used;
    MarkSlot(s);
  }
  if (freed) {
    free_.clear();
    for (int64_t s = C - 1; s >= 0; --s)
      if (!meta_[s].used) free_.push_back(s);
    std::make_heap(free_.begin(), free_.end(), std::greater<int64_t>());
  }
  rows_ = h[kRows];
  step_ = h[kStep];
  admitted_ = h[kAdmitted];
  rejected_ = h[kRejected];
  evicted_ = h[kEvicted];
  skipped_ = h[kSkipped];
  for (int i = 0; i < 4; ++i) scalar_slots_[i] = static_cast<float>(FromBits(h[kScalar0 + i]));
  rng_ = static_cast<uint64_t>(h[kRng]);
  return Status::OK();
}


std::vector<int64_t> HashEmbeddingShard::TakeDirtyRows(bool* all) {
  const int64_t H = HeaderRows(), F = FilterRows(), C = static_cast<int64_t>(meta_.size());
  std::vector<int64_t> rows;
  // With a cold tier every save is whole: the cold rows have no slots to track.
  *all = all_dirty_ || cold_ != nullptr;
  if (!*all) {
    for (int64_t r = 0; r < H; ++r) rows.push_back(r);  // the header changes every step
    for (int64_t r = 0; r < F; ++r)
      if (dirty_filter_[r]) rows.push_back(H + r);
    for (int64_t s = 0; s < C; ++s)
      if (dirty_slot_[s]) rows.push_back(H + F + s);
  }
  ClearDirty();
  return rows;
}

void HashEmbeddingShard::ClearDirty() {
  const int64_t C = static_cast<int64_t>(meta_.size());
  all_dirty_ = false;
  dirty_slot_.assign(static_cast<size_t>(C), 0);
  dirty_filter_.assign(static_cast<size_t>(FilterRows()), 0);
  dirty_counter_.assign((filter_.size() + 63) / 64, 0);
}

bool HashEmbeddingShard::TakeChangedRows(Tensor* rows_out, Tensor* values_out) {
  if (all_dirty_ || cold_ != nullptr) {
    ClearDirty();
    return false;
  }
  const int64_t W = Width(), H = HeaderRows(), F = FilterRows(), C = static_cast<int64_t>(meta_.size());
  const uint64_t counters = filter_.size();
  // A filter row's changed counters go packed, a word each, unless they
  // are more than its width (the row is smaller then) or lie past 2^31
  // (their index does not fit the packed word).
  std::vector<int64_t> packed, whole;
  for (int64_t r = 0; r < F; ++r) {
    if (!dirty_filter_[r]) continue;
    const uint64_t lo = static_cast<uint64_t>(r * 2 * W), hi = std::min<uint64_t>(lo + 2 * W, counters);
    const size_t before = packed.size();
    for (uint64_t w = lo >> 6; w <= (hi - 1) >> 6; ++w) {
      uint64_t bits = dirty_counter_[w];
      if (w == lo >> 6) bits &= ~uint64_t{0} << (lo & 63);
      if (w == (hi - 1) >> 6 && (hi & 63) != 0) bits &= ~(~uint64_t{0} << (hi & 63));
      for (; bits != 0; bits &= bits - 1) {
        const uint64_t i = w * 64 + static_cast<uint64_t>(__builtin_ctzll(bits));
        packed.push_back(PackFilterCounter(static_cast<int64_t>(i), filter_[i]));
      }
    }
    if (static_cast<int64_t>(packed.size() - before) > W || hi > (uint64_t{1} << 31)) {
      packed.resize(before);
      whole.push_back(H + r);
    }
  }
  for (int64_t s = 0; s < C; ++s)
    if (dirty_slot_[s]) whole.push_back(H + F + s);
  const int64_t P = (static_cast<int64_t>(packed.size()) + W - 1) / W;
  const int64_t k = H + P + static_cast<int64_t>(whole.size());
  *rows_out = Tensor(DType::kInt64, Shape{k});
  *values_out = Tensor::Zeros(DType::kInt64, {k, W});
  int64_t* ix = rows_out->data<int64_t>();
  int64_t* out = values_out->data<int64_t>();
  for (int64_t r = 0; r < H; ++r) ix[r] = r;  // the header changes every step
  WriteHeader(out, 0);
  for (int64_t p = 0; p < P; ++p) ix[H + p] = kHashPackedCountersRow;
  int64_t* words = out + H * W;
  std::copy(packed.begin(), packed.end(), words);
  std::fill(words + packed.size(), words + P * W, int64_t{-1});
  const int64_t filter_bytes = static_cast<int64_t>(counters * sizeof(uint32_t));
  for (size_t i = 0; i < whole.size(); ++i) {
    const int64_t r = whole[i];
    int64_t* row = out + (H + P + static_cast<int64_t>(i)) * W;
    ix[H + P + static_cast<int64_t>(i)] = r;
    if (r < H + F) {
      const int64_t from = (r - H) * W * 8, n = std::min<int64_t>(W * 8, filter_bytes - from);
      if (n > 0) std::memcpy(row, reinterpret_cast<const char*>(filter_.data()) + from, static_cast<size_t>(n));
    } else {
      WriteSlot(r - H - F, row);
    }
  }
  ClearDirty();
  return true;
}

bool IsHashShardState(const Tensor& t) {
  return t.valid() && t.dtype() == DType::kInt64 && t.rank() == 2 && t.dim(1) >= 8 && t.dim(0) >= 1 &&
         t.data<int64_t>()[kMagic] == kStateMagic;
}

int64_t HashStateNumShards(const Tensor& t) {
  if (!IsHashShardState(t) || t.num_elements() < kHeaderWords) return -1;
  return t.data<int64_t>()[kNumShards];
}

Result<std::unique_ptr<HashEmbeddingShard>> HashEmbeddingShard::Deserialize(const Tensor& state,
                                                                            const std::string& table) {
  const std::string who = "hash embedding table '" + table + "'";
  auto bad = [&](const std::string& what) { return DataLoss(who + ": saved shard state " + what); };
  if (!IsHashShardState(state)) return bad("is not a hash table shard (no header)");
  const int64_t* p = state.data<int64_t>();
  const int64_t W = state.dim(1);
  if (W * state.dim(0) < kHeaderWords) return bad("is truncated");
  const int64_t* h = p;
  if (h[kVersion] != kStateVersion) return bad("has version " + std::to_string(h[kVersion]));
  HashShardConfig c;
  c.table = table;
  c.num_shards = h[kNumShards];
  c.shard = h[kShard];
  c.dim = h[kDim];
  c.initializer = static_cast<HashInitializer>(h[kInitWord]);
  c.scale = FromBits(h[kScale]);
  c.seed = h[kSeed];
  c.min_count = h[kMinCount];
  c.admit_probability = FromBits(h[kAdmitP]);
  c.filter_width = h[kFilterWidth];
  c.filter_depth = h[kFilterDepth];
  c.ttl_steps = h[kTtl];
  c.max_rows = h[kMaxRows];
  c.eviction = static_cast<HashEviction>(h[kEvictionWord]);
  c.ram_budget_bytes = h[kRamBudget];
  if (h[kColdDirBytes] < 0 || h[kColdDirBytes] > 4096 || kHeaderWords + (h[kColdDirBytes] + 7) / 8 > W * state.dim(0))
    return bad("has a bad cold_dir");
  c.cold_dir.assign(reinterpret_cast<const char*>(h + kHeaderWords), static_cast<size_t>(h[kColdDirBytes]));
  if (h[kInitWord] < 0 || h[kInitWord] > 2 || h[kEvictionWord] < 0 || h[kEvictionWord] > 1)
    return bad("has an unknown initializer or eviction policy");
  Status cs = CheckHashShardConfig(c);
  if (!cs.ok()) return bad("has a bad configuration: " + cs.message());
  const int64_t opt = h[kOptimizerWord];
  if (opt < -1 || opt >= static_cast<int64_t>(OptimizerKind::kCount)) return bad("names an unknown optimizer");
  const int64_t stride = c.dim * (1 + (opt < 0 ? 0 : RowSlots(static_cast<OptimizerKind>(opt))));
  if (h[kStride] != stride || W != WidthFor(stride)) return bad("has a layout that does not match its dim");
  auto shard = std::make_unique<HashEmbeddingShard>(c);
  HashEmbeddingShard& s = *shard;
  s.stride_ = stride;
  s.optimizer_ = static_cast<int>(opt);
  for (int i = 0; i < 4; ++i) s.slot_init_[i] = FromBits(h[kSlotInit0 + i]);
  for (int i = 0; i < 4; ++i) s.scalar_slots_[i] = static_cast<float>(FromBits(h[kScalar0 + i]));
  const int64_t H = s.HeaderRows(), F = s.FilterRows(), K = h[kColdRows];
  // Cold rows come back hot; SetColdStore moves what the budget leaves out.
  const int64_t C = h[kCapacity] + K;
  if (h[kCapacity] < 0 || K < 0 || state.dim(0) != H + F + C)
    return bad("has " + std::to_string(state.dim(0)) + " rows, expected " + std::to_string(H + F + C));
  if (!s.filter_.empty()) std::memcpy(s.filter_.data(), p + H * W, s.filter_.size() * sizeof(uint32_t));
  s.arena_.assign(static_cast<size_t>(C * stride), 0.0f);
  s.meta_.assign(static_cast<size_t>(C), Meta());
  for (int64_t i = C - 1; i >= 0; --i) {
    const int64_t* r = p + (H + F + i) * W;
    if (r[1] == 0) {
      s.free_.push_back(i);
      continue;
    }
    if (r[1] != 1) return bad("has a bad row " + std::to_string(i));
    Meta& m = s.meta_[i];
    m.id = r[0];
    m.used = true;
    m.last_seen = r[2];
    m.freq = r[3];
    std::memcpy(s.arena_.data() + i * stride, r + kRowWords, static_cast<size_t>(stride) * sizeof(float));
    ++s.rows_;
  }
  std::make_heap(s.free_.begin(), s.free_.end(), std::greater<int64_t>());
  if (s.rows_ != h[kRows] + K) return bad("holds " + std::to_string(s.rows_) + " rows, its header says " +
                                      std::to_string(h[kRows]));
  s.IndexRebuild(s.rows_ + 1);
  for (int64_t i = 0; i < C; ++i)
    if (s.meta_[i].used && s.Find(s.meta_[i].id) != i) return bad("holds id " + std::to_string(s.meta_[i].id) + " twice");
  s.step_ = h[kStep];
  s.admitted_ = h[kAdmitted];
  s.rejected_ = h[kRejected];
  s.evicted_ = h[kEvicted];
  s.skipped_ = h[kSkipped];
  s.rng_ = static_cast<uint64_t>(h[kRng]);
  s.all_dirty_ = true;
  return shard;
}

Result<std::vector<Tensor>> ReshardHashStates(const std::vector<Tensor>& parts, int64_t num_shards,
                                              const std::string& table) {
  const std::string who = "hash embedding table '" + table + "'";
  if (parts.empty()) return InvalidArgument(who + ": no saved shards to reshard");
  if (num_shards < 1) return InvalidArgument(who + ": cannot reshard into " + std::to_string(num_shards) + " shards");
  std::vector<std::unique_ptr<HashEmbeddingShard>> old;
  for (const Tensor& t : parts) {
    SF_ASSIGN_OR_RETURN(auto s, HashEmbeddingShard::Deserialize(t, table));
    old.push_back(std::move(s));
  }
  const HashEmbeddingShard& first = *old[0];
  for (size_t j = 0; j < old.size(); ++j) {
    const HashEmbeddingShard& o = *old[j];
    if (o.config().shard != static_cast<int64_t>(j) || o.config().num_shards != static_cast<int64_t>(old.size()))
      return InvalidArgument(who + ": saved shard " + std::to_string(j) + " says it is shard " +
                             std::to_string(o.config().shard) + " of " + std::to_string(o.config().num_shards));
    if (o.config().dim != first.config().dim || o.filter_.size() != first.filter_.size())
      return InvalidArgument(who + ": saved shards disagree on dim or filter size");
  }
  // Shards that never trained have no slots yet: they take the others' optimizer.
  int optimizer = -1;
  std::vector<double> init;
  for (const auto& o : old)
    if (o->optimizer_ >= 0) {
      if (optimizer >= 0 && optimizer != o->optimizer_)
        return InvalidArgument(who + ": saved shards were trained by different optimizers");
      optimizer = o->optimizer_;
      init.assign(o->slot_init_, o->slot_init_ + 4);
    }
  for (auto& o : old)
    if (optimizer >= 0 && o->optimizer_ < 0) o->SetOptimizer(static_cast<OptimizerKind>(optimizer), init);
  std::vector<HashEmbeddingShard> fresh;
  int64_t step = 0;
  for (const auto& o : old) step = std::max(step, o->step_);
  for (int64_t k = 0; k < num_shards; ++k) {
    HashShardConfig c = first.config();
    c.shard = k;
    c.num_shards = num_shards;
    fresh.emplace_back(c);
    HashEmbeddingShard& s = fresh.back();
    if (optimizer >= 0) s.SetOptimizer(static_cast<OptimizerKind>(optimizer), init);
    for (int i = 0; i < 4; ++i) s.scalar_slots_[i] = first.scalar_slots_[i];
    for (const auto& o : old) {
      if (o->optimizer_ < 0) continue;
      for (int i = 0; i < 4; ++i) s.scalar_slots_[i] = o->scalar_slots_[i];
      break;
    }
    s.step_ = step;
    s.rng_ = MixId(static_cast<int64_t>(first.rng_) + k);
    for (const auto& o : old)
      for (size_t i = 0; i < s.filter_.size(); ++i) s.filter_[i] = std::max(s.filter_[i], o->filter_[i]);
  }
  for (const auto& o : old) {
    fresh[0].admitted_ += o->admitted_;
    fresh[0].rejected_ += o->rejected_;
    fresh[0].evicted_ += o->evicted_;
    fresh[0].skipped_ += o->skipped_;
    for (size_t i = 0; i < o->meta_.size(); ++i) {
      const auto& m = o->meta_[i];
      if (!m.used) continue;
      HashEmbeddingShard& s = fresh[HashShardOf(m.id, num_shards)];
      if (s.free_.empty()) s.Grow(std::max<int64_t>(64, 2 * static_cast<int64_t>(s.meta_.size())));
      const int64_t slot = s.FreePop();
      s.meta_[slot] = m;
      s.meta_[slot].tick = 0;
      s.meta_[slot].pins = 0;
      std::copy(o->arena_.begin() + i * o->stride_, o->arena_.begin() + (i + 1) * o->stride_,
                s.arena_.begin() + slot * s.stride_);
      s.IndexInsert(m.id, slot);
      ++s.rows_;
    }
  }
  std::vector<Tensor> out;
  for (const auto& s : fresh) {
    SF_ASSIGN_OR_RETURN(Tensor t, s.Serialize());
    out.push_back(std::move(t));
  }
  return out;
}

Result<std::map<int64_t, HashRowState>> HashEmbeddingShard::AllRowsWithCold() const {
  SF_ASSIGN_OR_RETURN(Tensor t, Serialize());
  SF_ASSIGN_OR_RETURN(auto copy, Deserialize(t, c_.table));
  return copy->AllRows();
}

std::map<int64_t, HashRowState> HashEmbeddingShard::AllRows() const {
  std::map<int64_t, HashRowState> rows;
  for (size_t i = 0; i < meta_.size(); ++i)
    if (meta_[i].used) RowOf(meta_[i].id, &rows[meta_[i].id]);
  return rows;
}

Result<std::map<int64_t, HashRowState>> HashStateRows(const Tensor& state) {
  SF_ASSIGN_OR_RETURN(auto s, HashEmbeddingShard::Deserialize(state, "?"));
  return s->AllRows();
}

Result<HashStateSummary> SummarizeHashState(const Tensor& state, int64_t max_rows) {
  SF_ASSIGN_OR_RETURN(auto s, HashEmbeddingShard::Deserialize(state, "?"));
  HashStateSummary out;
  out.dim = s->config().dim;
  out.num_shards = s->config().num_shards;
  out.shard = s->config().shard;
  out.metrics = s->Metrics();
  const int64_t opt = state.data<int64_t>()[kOptimizerWord];
  out.optimizer = opt < 0 ? "" : OptimizerName(static_cast<OptimizerKind>(opt));
  auto rows = s->AllRows();
  for (auto& kv : rows) {
    if (static_cast<int64_t>(out.rows.size()) >= max_rows) break;
    out.rows.emplace_back(kv.first, std::move(kv.second));
  }
  return out;
}

}  // namespace sf
