// The cold tier of hash embedding shards (storage/hash_cold_store.h), with
// fixed seeds: a shard under a RAM budget holds exactly the rows, slots and
// counts of the same shard without one; demoted rows come back unchanged;
// saved states include cold rows; a failing store loses no row; the RocksDB
// store keeps what it is given.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>

#include "kernels/embedding_math.h"
#include "kernels/hash_embedding.h"
#include "storage/hash_cold_store.h"
#include "tests/support/temp_dir.h"

using namespace sf;

namespace {

HashShardConfig Config() {
  HashShardConfig c;
  c.table = "cold";
  c.dim = 4;
  c.scale = 0.5;
  c.seed = 3;
  return c;
}

Status Lookup(HashEmbeddingShard& s, const std::vector<int64_t>& ids, int64_t step, Tensor* out,
              bool read_only = false) {
  EmbeddingShardSpec spec;
  spec.table = "cold";
  spec.partition = EmbeddingPartition::kHash;
  EmbeddingGather q;
  q.ids = Tensor::FromVector(ids);
  std::vector<int64_t> seg(ids.size());
  for (size_t i = 0; i < seg.size(); ++i) seg[i] = static_cast<int64_t>(i);
  q.segment_ids = Tensor::FromVector(seg);
  q.num_segments = static_cast<int64_t>(ids.size());
  q.step_id = step;
  q.read_only = read_only;
  EmbeddingGather mine;
  SF_RETURN_IF_ERROR(BuildHashShardGather(spec, q, &mine));
  return s.GatherCombine(mine, out);
}

Status Apply(HashEmbeddingShard& s, const std::vector<int64_t>& ids, int64_t step) {
  SparseApplyRequest r;
  r.optimizer = OptimizerKind::kAdagrad;
  r.scalars = {Tensor::Scalar<float>(0.1f)};
  std::vector<int64_t> unique = ids;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  r.indices = Tensor::FromVector(unique);
  r.values = Tensor(DType::kFloat32, {static_cast<int64_t>(unique.size()), 4});
  for (int64_t i = 0; i < r.values.num_elements(); ++i) r.values.data<float>()[i] = 0.01f * static_cast<float>(i % 7);
  r.indices_unique = true;
  r.step_id = step;
  r.slot_init = {0.1};
  return s.Apply(r);
}

// A store whose writes fail once `fail` is set (a full disk).
class FlakyStore : public HashColdStore {
 public:
  explicit FlakyStore(bool* fail) : inner_(NewKvHashColdStore(NewInMemoryKvStore(), "flaky")), fail_(fail) {}
  Status MultiGet(const std::vector<int64_t>& ids, std::vector<std::string>* v, std::vector<bool>* f) override {
    return inner_->MultiGet(ids, v, f);
  }
  Status Write(const std::vector<std::pair<int64_t, std::string>>& puts, const std::vector<int64_t>& deletes) override {
    if (*fail_) return Unavailable("cold tier 'flaky': no space left on device");
    return inner_->Write(puts, deletes);
  }
  Status ScanFrom(int64_t from, const std::function<bool(int64_t, const std::string&)>& fn) override {
    return inner_->ScanFrom(from, fn);
  }
  Status ScanSome(std::string* cursor, int64_t max_rows,
                  const std::function<void(int64_t, const std::string&)>& fn) override {
    return inner_->ScanSome(cursor, max_rows, fn);
  }
  Status Clear() override { return inner_->Clear(); }
  int64_t DiskBytes() override { return 0; }

 private:
  std::unique_ptr<HashColdStore> inner_;
  bool* fail_;
};

}  // namespace

TEST_CASE("Cold tier property: a shard under a RAM budget matches one without, row for row",
          "[hash_embedding][cold]") {
  HashShardConfig hot = Config(), cold = Config();
  HashEmbeddingShard ref(hot);
  {
    // Probe the row size with a shard that has the optimizer's slots.
    HashEmbeddingShard probe(hot);
    Tensor out;
    REQUIRE(Lookup(probe, {1}, 0, &out).ok());
    REQUIRE(Apply(probe, {1}, 0).ok());
    cold.ram_budget_bytes = 40 * probe.HotRowBytes();
  }
  HashEmbeddingShard s(cold);
  REQUIRE(s.SetColdStore(NewKvHashColdStore(NewInMemoryKvStore(), "mem")).ok());
  std::mt19937_64 rng(11);
  for (int64_t step = 0; step < 60; ++step) {
    std::vector<int64_t> batch;
    for (int i = 0; i < 12; ++i) batch.push_back(static_cast<int64_t>(rng() % 300) - 150);
    Tensor a, b;
    REQUIRE(Lookup(ref, batch, step, &a).ok());
    REQUIRE(Lookup(s, batch, step, &b).ok());
    REQUIRE(a.ToVector<float>() == b.ToVector<float>());  // a promoted row reads as it was
    REQUIRE(Apply(ref, batch, step).ok());
    REQUIRE(Apply(s, batch, step).ok());
    REQUIRE(s.Metrics().rows <= s.HotRowLimit());
    REQUIRE(s.Metrics().capacity <= s.HotRowLimit());
  }
  const HashShardMetrics m = s.Metrics();
  CHECK(m.cold_rows > 0);
  CHECK(m.cold_hits > 0);
  CHECK(m.rows + m.cold_rows == ref.Metrics().rows);
  CHECK(m.skipped == 0);
  auto all = s.AllRowsWithCold();
  REQUIRE(all.ok());
  CHECK(*all == ref.AllRows());  // values, slots, last steps and counts
  // A saved state holds the cold rows too; it restores without a cold tier.
  auto state = s.Serialize();
  REQUIRE(state.ok());
  auto back = HashEmbeddingShard::Deserialize(*state, "cold");
  REQUIRE(back.ok());
  CHECK((*back)->AllRows() == ref.AllRows());
  // And with one: the budget is met again, nothing lost.
  REQUIRE((*back)->SetColdStore(NewKvHashColdStore(NewInMemoryKvStore(), "mem2")).ok());
  CHECK((*back)->Metrics().rows <= (*back)->HotRowLimit());
  auto again = (*back)->AllRowsWithCold();
  REQUIRE(again.ok());
  CHECK(*again == ref.AllRows());
}

TEST_CASE("Cold tier: a failing store fails the lookup naming the table and loses no row",
          "[hash_embedding][cold][bad_input]") {
  HashShardConfig c = Config();
  c.ram_budget_bytes = 1;  // the 16-row floor
  bool fail = false;
  HashEmbeddingShard s(c);
  REQUIRE(s.SetColdStore(std::make_unique<FlakyStore>(&fail)).ok());
  std::vector<int64_t> first;
  for (int64_t i = 0; i < 16; ++i) first.push_back(i);
  Tensor out;
  REQUIRE(Lookup(s, first, 0, &out).ok());
  REQUIRE(Apply(s, first, 0).ok());
  auto before = s.AllRowsWithCold();
  REQUIRE(before.ok());
  fail = true;
  Status st = Lookup(s, {100, 101}, 1, &out);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("'cold'") != std::string::npos);
  CHECK(st.message().find("no space left") != std::string::npos);
  fail = false;
  auto after = s.AllRowsWithCold();
  REQUIRE(after.ok());
  for (const auto& kv : *before) {
    INFO("id " << kv.first);
    REQUIRE(after->count(kv.first));
    CHECK(after->at(kv.first).values == kv.second.values);
  }
  // The next step goes on once the store writes again.
  REQUIRE(Apply(s, {}, 1).ok());
  CHECK(Lookup(s, {100, 101}, 2, &out).ok());
}

TEST_CASE("Cold tier: the RocksDB store reads back what it was given, in batches", "[hash_embedding][cold]") {
  testing::TempDir dir("sf_cold_store");
  auto store = OpenHashColdStore(dir.path, "scope/users", 3);
  REQUIRE(store.ok());
  std::vector<std::pair<int64_t, std::string>> puts = {
      {-5, "minus five"}, {std::numeric_limits<int64_t>::min(), "min"}, {7, std::string(1000, 'x')}};
  REQUIRE((*store)->Write(puts, {}).ok());
  std::vector<std::string> values;
  std::vector<bool> found;
  REQUIRE((*store)->MultiGet({7, 8, -5, std::numeric_limits<int64_t>::min()}, &values, &found).ok());
  CHECK(found == std::vector<bool>{true, false, true, true});
  CHECK(values[0] == std::string(1000, 'x'));
  CHECK(values[2] == "minus five");
  REQUIRE((*store)->Write({}, {-5}).ok());
  std::vector<int64_t> ids;
  REQUIRE((*store)->Scan([&](int64_t id, const std::string&) { ids.push_back(id); }).ok());
  CHECK(ids == std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 7});  // in id order
  // A sweep resumes at an id, and stops when asked.
  REQUIRE((*store)->Write({{-3, "a"}, {9, "b"}, {12, "c"}}, {}).ok());
  ids.clear();
  REQUIRE((*store)->ScanFrom(-3, [&](int64_t id, const std::string&) {
    ids.push_back(id);
    return id < 9;
  }).ok());
  CHECK(ids == std::vector<int64_t>{-3, 7, 9});
  REQUIRE((*store)->Clear().ok());
  ids.clear();
  REQUIRE((*store)->Scan([&](int64_t id, const std::string&) { ids.push_back(id); }).ok());
  CHECK(ids.empty());
  // A directory that cannot be made is an error naming the table.
  testing::WriteFile(dir / "file", "x");
  auto bad = OpenHashColdStore(dir / "file", "users", 0);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("'users'") != std::string::npos);
}

namespace {

// The ids a cold store holds, stale copies included.
std::vector<int64_t> StoredIds(HashColdStore& store) {
  std::vector<int64_t> ids;
  REQUIRE(store.Scan([&](int64_t id, const std::string&) { ids.push_back(id); }).ok());
  return ids;
}

std::vector<int64_t> Ids(int64_t first, int64_t n) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(first + i);
  return ids;
}

// A shard of config c under the 16-row RAM floor with an in-memory cold
// store, and the same shard all in RAM as the reference, stepped together.
struct TieredAndReference {
  HashEmbeddingShard ref, s;
  HashColdStore* store = nullptr;
  int64_t step = 0;
  Tensor a, b;  // the last lookups of ref and s

  explicit TieredAndReference(HashShardConfig c) : ref(c), s(Tiered(c)) {
    auto owned = NewKvHashColdStore(NewInMemoryKvStore(), "mem");
    store = owned.get();
    REQUIRE(s.SetColdStore(std::move(owned)).ok());
  }
  // Looks ids up in both (the same rows either way), without a step.
  void Look(const std::vector<int64_t>& ids) {
    REQUIRE(Lookup(ref, ids, step, &a).ok());
    REQUIRE(Lookup(s, ids, step, &b).ok());
    CHECK(a.ToVector<float>() == b.ToVector<float>());
  }
  // One training step of batch (none looked up when it is empty) in both.
  void Step(const std::vector<int64_t>& batch) {
    if (!batch.empty()) Look(batch);
    REQUIRE(Apply(ref, batch, step).ok());
    REQUIRE(Apply(s, batch, step).ok());
    ++step;
  }

 private:
  static HashShardConfig Tiered(HashShardConfig c) {
    c.ram_budget_bytes = 1;  // the 16-row floor
    return c;
  }
};

}  // namespace

TEST_CASE("Cold tier: a promoted row's stale cold copy is never read, counted or saved",
          "[hash_embedding][cold]") {
  TieredAndReference t(Config());
  HashEmbeddingShard& s = t.s;
  const std::vector<int64_t> first = Ids(0, 16), second = Ids(100, 16);
  t.Step(first);
  t.Step(second);  // demotes the first
  REQUIRE(s.Metrics().cold_rows == 16);
  // Promote 0..3 and train them: the store keeps their old bytes.
  const std::vector<int64_t> back = {0, 1, 2, 3};
  t.Step(back);
  const std::vector<int64_t> stored = StoredIds(*t.store);
  for (int64_t id : back) {
    INFO("id " << id);
    HashRowState row;
    CHECK(s.RowOf(id, &row));  // hot
    CHECK(std::count(stored.begin(), stored.end(), id) == 1);  // and a stale copy in the store
  }
  // Cold rows are the stored ids that are not hot: counted once, saved once.
  const HashShardMetrics m = s.Metrics();
  int64_t cold = 0;
  for (int64_t id : stored) {
    HashRowState row;
    if (!s.RowOf(id, &row)) ++cold;
  }
  CHECK(m.cold_rows == cold);
  CHECK(m.rows + m.cold_rows == t.ref.Metrics().rows);
  auto all = s.AllRowsWithCold();
  REQUIRE(all.ok());
  CHECK(*all == t.ref.AllRows());  // the trained hot rows, not their stale copies
  // A saved state restores the exact rows, with a cold tier and without.
  auto state = s.Serialize();
  REQUIRE(state.ok());
  auto restored = HashEmbeddingShard::Deserialize(*state, "cold");
  REQUIRE(restored.ok());
  CHECK((*restored)->AllRows() == t.ref.AllRows());
  CHECK((*restored)->Metrics().rows == t.ref.Metrics().rows);
  REQUIRE((*restored)->SetColdStore(NewKvHashColdStore(NewInMemoryKvStore(), "mem2")).ok());
  auto again = (*restored)->AllRowsWithCold();
  REQUIRE(again.ok());
  CHECK(*again == t.ref.AllRows());
  CHECK((*restored)->Metrics().rows + (*restored)->Metrics().cold_rows == t.ref.Metrics().rows);
  // Demoting a promoted row overwrites its stale copy with the trained bytes.
  t.Step(second);
  t.Look(back);
  all = s.AllRowsWithCold();
  REQUIRE(all.ok());
  CHECK(*all == t.ref.AllRows());
}

TEST_CASE("Cold tier: a row evicted by ttl_steps while its stale copy is stored comes back fresh",
          "[hash_embedding][cold]") {
  HashShardConfig c = Config();
  c.ttl_steps = 8;
  TieredAndReference t(c);
  HashEmbeddingShard& s = t.s;
  t.Step(Ids(0, 16));
  t.Step(Ids(100, 16));  // demotes 0..15
  t.Step({0});           // promotes 0, its stale copy stays; 0 is last seen at step 2
  const auto stored = StoredIds(*t.store);
  REQUIRE(std::count(stored.begin(), stored.end(), 0) == 1);
  while (t.step < 14) t.Step({});  // 0 expires hot and is swept
  HashRowState row;
  REQUIRE_FALSE(s.RowOf(0, &row));
  // Gone from every view before any lookup deletes its copy...
  auto all = s.AllRowsWithCold();
  REQUIRE(all.ok());
  CHECK(all->count(0) == 0);
  auto state = s.Serialize();
  REQUIRE(state.ok());
  auto restored = HashEmbeddingShard::Deserialize(*state, "cold");
  REQUIRE(restored.ok());
  CHECK_FALSE((*restored)->RowOf(0, &row));
  // ...and the next lookup reads a fresh row (as the reference), not the stale copy.
  t.Step({0});
  const auto after = StoredIds(*t.store);
  CHECK(std::count(after.begin(), after.end(), 0) == 0);
  REQUIRE(s.RowOf(0, &row));
  HashRowState want;
  REQUIRE(t.ref.RowOf(0, &want));
  CHECK(row == want);
}

TEST_CASE("Cold tier: the RocksDB cache store keeps keys of any length in order across table files",
          "[hash_embedding][cold][storage]") {
  testing::TempDir dir("sf_cold_cache");
  auto kv = OpenRocksDb(dir / "db", true, RocksDbUse::kCache);
  REQUIRE(kv.ok());
  // Table files (bulk-written) and the hashed memtable together, short keys too.
  auto w = (*kv)->NewBulkWriter();
  REQUIRE(w.ok());
  for (const char* k : {"a", "r\x01", "r\x03"}) REQUIRE((*w)->Put(k, std::string("sst ") + k).ok());
  REQUIRE((*w)->Finish().ok());
  std::mt19937_64 rng(5);
  std::map<std::string, std::string> want = {{"a", "sst a"}, {"r\x01", "sst r\x01"}, {"r\x03", "sst r\x03"}};
  for (int i = 0; i < 2000; ++i) {
    std::string k = "r" + std::to_string(rng() % 100000);
    want[k] = std::to_string(i);
    REQUIRE((*kv)->Put(k, want[k]).ok());
  }
  REQUIRE((*kv)->Put("r\x03", "mem").ok());  // the memtable's newer value wins
  want["r\x03"] = "mem";
  std::vector<std::string> keys;
  for (const auto& kv2 : want) keys.push_back(kv2.first);
  std::vector<std::string> values;
  std::vector<bool> found;
  REQUIRE((*kv)->MultiGet(keys, &values, &found).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    INFO(keys[i]);
    REQUIRE(found[i]);
    CHECK(values[i] == want[keys[i]]);
  }
  std::map<std::string, std::string> scanned;
  std::string last;
  REQUIRE((*kv)->Scan("", [&](const std::string& k, const std::string& v) {
    CHECK(k > last);  // in key order
    last = k;
    scanned[k] = v;
    return true;
  }).ok());
  CHECK(scanned == want);
  REQUIRE((*kv)->DeletePrefix("r").ok());
  auto left = (*kv)->Keys("");
  REQUIRE(left.ok());
  CHECK(*left == std::vector<std::string>{"a"});
  // A synced write still works (it goes through the log).
  CHECK((*kv)->Put("s", "synced", /*sync=*/true).ok());
  CHECK(*(*kv)->Get("s") == "synced");
}

TEST_CASE("Cold tier: rows expired by ttl_steps while cold leave the store and the counts unread",
          "[hash_embedding][cold]") {
  HashShardConfig c = Config();
  c.ttl_steps = 20;
  TieredAndReference t(c);
  HashEmbeddingShard& s = t.s;
  t.Step(Ids(0, 16));
  while (t.step < 30) t.Step(Ids(100, 16));  // 0..15 go cold at step 1 and are never read again
  REQUIRE(t.step == 30);
  while (t.step < 40) t.Step(Ids(200, 16));  // 100..115 go cold at step 30, last seen at 29
  // A sweep (the first at step 15, the next at 31) deleted 0..15 once they
  // were 20 steps old, and only them: 100..115 are cold and live.
  const auto stored = StoredIds(*t.store);
  CHECK(stored == Ids(100, 16));
  const HashShardMetrics m = s.Metrics();
  CHECK(m.cold_rows == 16);
  CHECK(m.evicted == t.ref.Metrics().evicted);  // the reference evicts them hot
  CHECK(m.evicted == 16);
  auto all = s.AllRowsWithCold();
  REQUIRE(all.ok());
  CHECK(*all == t.ref.AllRows());
  // An expired id looked up again starts fresh, as in the reference.
  t.Step({3});
  HashRowState row, want;
  REQUIRE(s.RowOf(3, &row));
  REQUIRE(t.ref.RowOf(3, &want));
  CHECK(row == want);
}

namespace {

// A store whose bounded scans also show an old, expired copy of one id, as
// RocksDB's table files do after the row was stored again.
class StaleScanStore : public HashColdStore {
 public:
  explicit StaleScanStore(int64_t stale_id) : inner_(NewKvHashColdStore(NewInMemoryKvStore(), "stale")), id_(stale_id) {}
  Status MultiGet(const std::vector<int64_t>& ids, std::vector<std::string>* v, std::vector<bool>* f) override {
    return inner_->MultiGet(ids, v, f);
  }
  Status Write(const std::vector<std::pair<int64_t, std::string>>& puts, const std::vector<int64_t>& deletes) override {
    return inner_->Write(puts, deletes);
  }
  Status ScanFrom(int64_t from, const std::function<bool(int64_t, const std::string&)>& fn) override {
    return inner_->ScanFrom(from, fn);
  }
  Status ScanSome(std::string* cursor, int64_t max_rows,
                  const std::function<void(int64_t, const std::string&)>& fn) override {
    ++scans;
    fn(id_, std::string(2 * sizeof(int64_t) + 4 * sizeof(float), '\0'));  // last seen at step 0
    return inner_->ScanSome(cursor, max_rows, fn);
  }
  Status Clear() override { return inner_->Clear(); }
  int64_t DiskBytes() override { return 0; }
  int scans = 0;

 private:
  std::unique_ptr<HashColdStore> inner_;
  int64_t id_;
};

}  // namespace

TEST_CASE("Cold tier: a sweep deletes a row only when its stored value is expired, not an old copy's",
          "[hash_embedding][cold]") {
  HashShardConfig c = Config();
  c.ttl_steps = 20;
  c.ram_budget_bytes = 1;  // the 16-row floor
  HashEmbeddingShard s(c);
  auto owned = std::make_unique<StaleScanStore>(/*stale_id=*/100);
  StaleScanStore* store = owned.get();
  REQUIRE(s.SetColdStore(std::move(owned)).ok());
  Tensor out;
  auto step = [&](int64_t first, int64_t at) {
    REQUIRE(Lookup(s, Ids(first, 16), at, &out).ok());
    REQUIRE(Apply(s, Ids(first, 16), at).ok());
  };
  int64_t at = 0;
  step(0, at++);
  while (at < 30) step(100, at++);
  while (at < 40) step(200, at++);  // 100..115 cold now, last seen at 29
  CHECK(store->scans >= 2);
  const auto stored = StoredIds(*store);
  CHECK(stored == Ids(100, 16));  // 0..15 expired and went; 100 stays
  CHECK(s.Metrics().cold_rows == 16);
  CHECK(s.Metrics().evicted == 16);
}

TEST_CASE("Cold tier: a read-only lookup reads cold rows as they are and expires none", "[hash_embedding][cold]") {
  HashShardConfig c = Config();
  c.ttl_steps = 40;
  TieredAndReference t(c);
  HashEmbeddingShard& s = t.s;
  t.Step(Ids(0, 16));
  t.Step(Ids(100, 16));  // 0..15 go cold
  Tensor a, b;
  REQUIRE(Lookup(t.ref, {0, 5, 100, 999}, t.step, &a, /*read_only=*/true).ok());
  REQUIRE(Lookup(s, {0, 5, 100, 999}, t.step, &b, /*read_only=*/true).ok());
  CHECK(a.ToVector<float>() == b.ToVector<float>());
  CHECK(b.data<float>()[0] != 0.0f);  // a cold row's value, not zeros
  CHECK(s.Metrics().rows + s.Metrics().cold_rows == 32);  // 999 got no row
  while (t.step < 42) t.Step({});  // 0..15 (last seen at 0) expire, no lookup sweeps them
  const HashShardMetrics m = s.Metrics();
  REQUIRE(Lookup(t.ref, {0}, t.step, &a, /*read_only=*/true).ok());
  REQUIRE(Lookup(s, {0}, t.step, &b, /*read_only=*/true).ok());
  CHECK(a.ToVector<float>() == b.ToVector<float>());
  CHECK(b.ToVector<float>() == std::vector<float>(4, 0.0f));
  CHECK(s.Metrics().evicted == m.evicted);
  CHECK(s.Metrics().cold_rows == m.cold_rows);
  const auto stored = StoredIds(*t.store);
  CHECK(std::count(stored.begin(), stored.end(), 0) == 1);
}
