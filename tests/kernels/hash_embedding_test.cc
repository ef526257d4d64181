// Property tests of one hash embedding shard (kernels/hash_embedding.h),
// with fixed seeds: admission, eviction, pinning by steps in flight, the
// memory bound, saved states (full and incremental) and resharding.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <set>

#include "kernels/embedding_math.h"
#include "kernels/hash_embedding.h"

using namespace sf;

namespace {

HashShardConfig Config(int64_t dim = 4) {
  HashShardConfig c;
  c.table = "tab";
  c.dim = dim;
  c.scale = 0.5;
  c.seed = 11;
  return c;
}

// Looks ids up (each its own example) in step step_id; the [n, dim] result.
Tensor Lookup(HashEmbeddingShard& s, const std::vector<int64_t>& ids, int64_t step_id, Status* status = nullptr,
              bool read_only = false) {
  EmbeddingShardSpec spec;
  spec.table = s.config().table;
  spec.num_shards = s.config().num_shards;
  spec.shard = s.config().shard;
  spec.partition = EmbeddingPartition::kHash;
  EmbeddingGather q;
  const int64_t n = static_cast<int64_t>(ids.size());
  q.ids = Tensor::FromVector(ids);
  std::vector<int64_t> seg(ids.size());
  for (int64_t i = 0; i < n; ++i) seg[i] = i;
  q.segment_ids = Tensor::FromVector(seg);
  q.num_segments = n;
  q.step_id = step_id;
  q.read_only = read_only;
  EmbeddingGather mine;
  Status st = BuildHashShardGather(spec, q, &mine);
  REQUIRE(st.ok());
  Tensor out;
  st = s.GatherCombine(mine, &out);
  if (status) *status = st;
  else REQUIRE(st.ok());
  return out;
}

// One sparse update of ids in step step_id: every gradient row is g.
Status Apply(HashEmbeddingShard& s, OptimizerKind kind, const std::vector<int64_t>& ids, int64_t step_id,
             float g = 0.5f) {
  SparseApplyRequest r;
  r.optimizer = kind;
  if (kind == OptimizerKind::kAdam)
    r.scalars = {Tensor::Scalar<float>(0.1f), Tensor::Scalar<float>(0.9f), Tensor::Scalar<float>(0.999f),
                 Tensor::Scalar<float>(1e-8f)};
  else if (kind == OptimizerKind::kFtrl)
    r.scalars = {Tensor::Scalar<float>(0.1f), Tensor::Scalar<float>(0.01f), Tensor::Scalar<float>(0.01f),
                 Tensor::Scalar<float>(-0.5f)};
  else
    r.scalars = {Tensor::Scalar<float>(0.1f)};
  r.indices = Tensor::FromVector(ids);
  r.values = Tensor(DType::kFloat32, {static_cast<int64_t>(ids.size()), s.config().dim});
  for (int64_t i = 0; i < r.values.num_elements(); ++i) r.values.data<float>()[i] = g;
  r.step_id = step_id;
  r.slot_init = kind == OptimizerKind::kAdam ? std::vector<double>{0, 0, 0.9, 0.999} : std::vector<double>{0.1, 0.0};
  return s.Apply(r);
}

// Replaces the rows of base listed in rows by those of now (an increment).
Tensor Compose(const Tensor& base, const Tensor& now, const std::vector<int64_t>& rows) {
  REQUIRE(base.shape() == now.shape());
  Tensor out = base.Copy();
  const int64_t w = base.dim(1);
  for (int64_t r : rows)
    std::copy(now.data<int64_t>() + r * w, now.data<int64_t>() + (r + 1) * w, out.data<int64_t>() + r * w);
  return out;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::equal(a.data<int64_t>(), a.data<int64_t>() + a.num_elements(),
                                              b.data<int64_t>());
}

}  // namespace

TEST_CASE("Hash shard: any int64 id, rows made on first lookup, deterministic values", "[hash_embedding]") {
  HashEmbeddingShard s(Config());
  const std::vector<int64_t> ids = {-1, 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                                    1234567890123, -1};
  Tensor a = Lookup(s, ids, 1);
  CHECK(s.Metrics().rows == 5);
  CHECK(s.Metrics().admitted == 5);
  // The same id twice reads the same row; a second shard makes the same row.
  for (int64_t j = 0; j < 4; ++j) CHECK(a.data<float>()[j] == a.data<float>()[5 * 4 + j]);
  HashEmbeddingShard t(Config());
  Tensor b = Lookup(t, {1234567890123}, 1);
  for (int64_t j = 0; j < 4; ++j) CHECK(b.data<float>()[j] == a.data<float>()[4 * 4 + j]);
  for (int64_t i = 0; i < a.num_elements(); ++i) CHECK(std::abs(a.data<float>()[i]) <= 0.5f);
}

TEST_CASE("Hash shard property: a read-only lookup reads the rows as they are and changes nothing",
          "[hash_embedding]") {
  HashShardConfig c = Config();
  c.min_count = 2;
  c.ttl_steps = 40;  // swept every 10 steps
  c.max_rows = 4;
  HashEmbeddingShard s(c);
  int64_t step = 0;
  for (int i = 0; i < 2; ++i) {  // 1, 2 and 3 are admitted at their second sighting
    Lookup(s, {1, 2, 3}, step);
    REQUIRE(Apply(s, OptimizerKind::kAdagrad, {1, 2, 3}, step++).ok());
  }
  const Tensor trained = Lookup(s, {1, 2}, step, nullptr, /*read_only=*/true);
  auto before = s.Serialize();
  REQUIRE(before.ok());
  const HashShardMetrics m0 = s.Metrics();
  Tensor ro;
  for (int i = 0; i < 5; ++i) ro = Lookup(s, {1, 2, 99, 100, 101}, step, nullptr, /*read_only=*/true);
  // 1 and 2 read their trained rows, the others zeros: no row made (not
  // even under max_rows, which would evict one), no sighting counted.
  for (int64_t j = 0; j < 8; ++j) CHECK(ro.data<float>()[j] == trained.data<float>()[j]);
  for (int64_t j = 8; j < ro.num_elements(); ++j) CHECK(ro.data<float>()[j] == 0.0f);
  auto after = s.Serialize();
  REQUIRE(after.ok());
  CHECK(SameBits(*before, *after));  // rows, last steps, frequencies, sketch, counters
  CHECK(s.Metrics().rows == m0.rows);
  CHECK(s.Metrics().rejected == m0.rejected);
  // 99 was read five times, but its first training sighting is its first.
  Lookup(s, {99}, step);
  REQUIRE(Apply(s, OptimizerKind::kAdagrad, {99}, step++).ok());
  CHECK(s.Metrics().rows == m0.rows);
  CHECK(s.Metrics().rejected == m0.rejected + 1);
  // A row past ttl_steps (last seen at shard step 1) reads zeros and is
  // left for a training lookup (or the sweep at step 50) to evict.
  while (s.Metrics().step < 45) REQUIRE(Apply(s, OptimizerKind::kAdagrad, {}, step++).ok());
  const int64_t evicted = s.Metrics().evicted;
  HashRowState row;
  REQUIRE(s.RowOf(1, &row));
  ro = Lookup(s, {1}, step, nullptr, /*read_only=*/true);
  for (int64_t j = 0; j < 4; ++j) CHECK(ro.data<float>()[j] == 0.0f);
  CHECK(s.RowOf(1, &row));
  CHECK(s.Metrics().evicted == evicted);
  Lookup(s, {1}, step);
  CHECK(s.Metrics().evicted == evicted + 1);
}

TEST_CASE("Hash shard property: an id seen fewer than min_count times never gets a row", "[hash_embedding]") {
  HashShardConfig c = Config();
  c.min_count = 3;
  HashEmbeddingShard s(c);
  std::mt19937_64 rng(42);
  std::map<int64_t, int64_t> seen;
  for (int step = 0; step < 200; ++step) {
    std::vector<int64_t> batch;
    for (int i = 0; i < 20; ++i) {
      const int64_t id = static_cast<int64_t>(rng() % 2000) - 1000;
      batch.push_back(id);
    }
    Tensor out = Lookup(s, batch, step);
    for (int64_t id : batch) ++seen[id];  // a batch counts as a whole
    for (size_t i = 0; i < batch.size(); ++i) {
      HashRowState row;
      const bool has = s.RowOf(batch[i], &row);
      if (seen[batch[i]] < 3) {
        INFO("id " << batch[i] << " seen " << seen[batch[i]]);
        CHECK_FALSE(has);
        for (int64_t j = 0; j < 4; ++j) CHECK(out.data<float>()[i * 4 + j] == 0.0f);  // the default value
      }
    }
    REQUIRE(Apply(s, OptimizerKind::kGradientDescent, batch, step).ok());
  }
  for (const auto& kv : seen) {
    HashRowState row;
    CHECK(s.RowOf(kv.first, &row) == (kv.second >= 3));
  }
  CHECK(s.Metrics().rejected > 0);
  CHECK(s.Metrics().skipped > 0);  // gradients of ids without a row
}

TEST_CASE("Hash shard: an id a step's lookup turned away stays out for the step's other lookups", "[hash_embedding]") {
  HashShardConfig c = Config();
  c.min_count = 2;
  HashEmbeddingShard s(c);
  // Step 1: two lookups see id 7 once each (its second sighting comes in
  // the second lookup); both read zeros and its update is skipped.
  Tensor first = Lookup(s, {7, 9}, 1);
  Tensor second = Lookup(s, {7}, 1);
  for (int64_t j = 0; j < 4; ++j) {
    CHECK(first.data<float>()[j] == 0.0f);
    CHECK(second.data<float>()[j] == 0.0f);
  }
  HashRowState row;
  CHECK_FALSE(s.RowOf(7, &row));
  REQUIRE(Apply(s, OptimizerKind::kGradientDescent, {7, 7}, 1).ok());
  CHECK_FALSE(s.RowOf(7, &row));
  // Both sightings counted: step 2's first lookup admits it, and the
  // step's other lookup reads the same row.
  Tensor third = Lookup(s, {7}, 2);
  CHECK(s.RowOf(7, &row));
  Tensor fourth = Lookup(s, {7}, 2);
  CHECK(third.ToVector<float>() == fourth.ToVector<float>());
  CHECK(third.data<float>()[0] != 0.0f);
  // Another step's rejection does not carry over: id 9 (seen once, in step
  // 1) is admitted at its second sighting, in step 3.
  Lookup(s, {9}, 3);
  CHECK(s.RowOf(9, &row));
}

TEST_CASE("Hash shard property: admit_probability admits about that share, deterministically", "[hash_embedding]") {
  HashShardConfig c = Config();
  c.admit_probability = 0.25;
  HashEmbeddingShard a(c), b(c);
  std::vector<int64_t> ids(4000);
  for (int64_t i = 0; i < 4000; ++i) ids[i] = i * 7919;
  Lookup(a, ids, 1);
  Lookup(b, ids, 1);
  CHECK(a.Metrics().rows == b.Metrics().rows);
  CHECK(a.Metrics().rows > 800);
  CHECK(a.Metrics().rows < 1200);
  CHECK(a.Metrics().rejected == 4000 - a.Metrics().rows);
}

TEST_CASE("Hash shard property: an evicted id comes back with a fresh value and slots", "[hash_embedding]") {
  for (const bool by_ttl : {true, false}) {
    INFO((by_ttl ? "ttl" : "max_rows"));
    HashShardConfig c = Config();
    if (by_ttl) c.ttl_steps = 3;
    else c.max_rows = 32;
    HashEmbeddingShard s(c);
    const Tensor fresh = Lookup(s, {77}, 0);
    REQUIRE(Apply(s, OptimizerKind::kAdagrad, {77}, 0).ok());
    HashRowState trained;
    REQUIRE(s.RowOf(77, &trained));
    CHECK(trained.values[0] != fresh.data<float>()[0]);
    CHECK(trained.values[4] != 0.1f);  // the accumulator moved
    // Other ids only, until 77 has gone.
    for (int64_t step = 1; step < 40; ++step) {
      std::vector<int64_t> batch;
      for (int64_t i = 0; i < 8; ++i) batch.push_back(1000 * step + i);
      Lookup(s, batch, step);
      REQUIRE(Apply(s, OptimizerKind::kAdagrad, batch, step).ok());
    }
    HashRowState row;
    CHECK_FALSE(s.RowOf(77, &row));
    CHECK(s.Metrics().evicted > 0);
    const Tensor again = Lookup(s, {77}, 40);
    REQUIRE(s.RowOf(77, &row));
    for (int64_t j = 0; j < 4; ++j) {
      CHECK(again.data<float>()[j] == fresh.data<float>()[j]);
      CHECK(row.values[j] == fresh.data<float>()[j]);
      CHECK(row.values[4 + j] == 0.1f);  // Adagrad's initial accumulator
    }
    CHECK(row.freq == 1);
  }
}

TEST_CASE("Hash shard property: streaming 10x max_rows distinct ids keeps rows <= max_rows", "[hash_embedding]") {
  for (const char* policy : {"lru", "lfu"}) {
    INFO(policy);
    HashShardConfig c = Config(8);
    c.max_rows = 1000;
    c.eviction = std::string(policy) == "lru" ? HashEviction::kLru : HashEviction::kLfu;
    HashEmbeddingShard s(c);
    std::mt19937_64 rng(7);
    int64_t next = 0;
    int64_t peak_bytes = 0;
    for (int64_t step = 0; step < 200; ++step) {
      std::vector<int64_t> batch;
      for (int i = 0; i < 50; ++i) batch.push_back(next++);              // 10'000 distinct ids in all
      for (int i = 0; i < 10; ++i) batch.push_back(static_cast<int64_t>(rng() % 20));  // a hot set
      Lookup(s, batch, step);
      REQUIRE(Apply(s, OptimizerKind::kAdagrad, batch, step).ok());
      REQUIRE(s.Metrics().rows <= c.max_rows);
      REQUIRE(s.Metrics().capacity <= c.max_rows);
      peak_bytes = std::max(peak_bytes, s.Metrics().bytes);
    }
    CHECK(next == 10 * c.max_rows);
    CHECK(s.Metrics().evicted >= next - c.max_rows);
    // The model of a row's cost: value and slot floats, 40 bytes of metadata,
    // about 3 index words and a free-list word; doubled for growth slack.
    const int64_t per_row = 8 * 4 * 2 + 40 + 3 * 16 + 8;
    CHECK(peak_bytes <= 2 * c.max_rows * per_row);
    // The hot ids survive under both policies: they are used every step.
    for (int64_t id = 0; id < 20; ++id) {
      HashRowState row;
      CHECK(s.RowOf(id, &row));
    }
  }
}

TEST_CASE("Hash shard property: no row used by a step in flight is evicted", "[hash_embedding]") {
  HashShardConfig c = Config();
  c.max_rows = 64;
  HashEmbeddingShard s(c);
  // Step 100 looks up 40 rows; its update comes only at the end.
  std::vector<int64_t> pinned;
  for (int64_t i = 0; i < 40; ++i) pinned.push_back(-1 - i);
  const Tensor before = Lookup(s, pinned, 100);
  // Other steps stream new ids meanwhile (an async worker).
  for (int64_t step = 0; step < 30; ++step) {
    std::vector<int64_t> batch;
    for (int64_t i = 0; i < 16; ++i) batch.push_back(100000 + step * 16 + i);
    Lookup(s, batch, step);
    REQUIRE(Apply(s, OptimizerKind::kGradientDescent, batch, step).ok());
    for (int64_t id : pinned) {
      HashRowState row;
      REQUIRE(s.RowOf(id, &row));
    }
  }
  // More new ids than unpinned rows: an error, not a silent default.
  std::vector<int64_t> big;
  for (int64_t i = 0; i < 30; ++i) big.push_back(900000 + i);
  Status st;
  Lookup(s, big, 200, &st);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("'tab'") != std::string::npos);
  CHECK(st.message().find("max_rows") != std::string::npos);
  // The pinned step's update lands on its rows, as they were.
  REQUIRE(Apply(s, OptimizerKind::kGradientDescent, pinned, 100).ok());
  HashRowState row;
  REQUIRE(s.RowOf(pinned[0], &row));
  CHECK(row.values[0] == Approx(before.data<float>()[0] - 0.1f * 0.5f));
}

TEST_CASE("Hash shard property: a full state plus increments restores bit-identical", "[hash_embedding]") {
  HashShardConfig c = Config();
  c.max_rows = 100;
  c.ttl_steps = 6;
  c.min_count = 2;
  c.filter_width = 4096;
  HashEmbeddingShard s(c);
  std::mt19937_64 rng(3);
  bool all = false;
  Tensor saved;
  int64_t step = 0;
  auto run = [&](int n) {
    for (int k = 0; k < n; ++k, ++step) {
      std::vector<int64_t> batch;
      for (int i = 0; i < 30; ++i) batch.push_back(static_cast<int64_t>(rng() % 400) - 200);
      Lookup(s, batch, step);
      REQUIRE(Apply(s, OptimizerKind::kAdam, batch, step).ok());
    }
  };
  run(5);
  s.TakeDirtyRows(&all);
  saved = s.Serialize().value();
  CHECK(all);
  const int64_t evicted0 = s.Metrics().evicted;
  for (int inc = 0; inc < 4; ++inc) {
    run(7);  // rows evicted and re-admitted between the saves
    const std::vector<int64_t> rows = s.TakeDirtyRows(&all);
    const Tensor now = s.Serialize().value();
    if (all) saved = now;
    else saved = Compose(saved, now, rows);
    REQUIRE(SameBits(saved, now));
    if (!all) CHECK(static_cast<int64_t>(rows.size()) < now.dim(0));
  }
  CHECK(s.Metrics().evicted > evicted0);
  auto back = HashEmbeddingShard::Deserialize(saved, "tab");
  REQUIRE(back.ok());
  CHECK(SameBits((*back)->Serialize().value(), s.Serialize().value()));
  // And the restored shard goes on exactly as the live one.
  std::vector<int64_t> batch = {5, -7, 150, 151};
  Tensor x = Lookup(s, batch, 999), y = Lookup(**back, batch, 999);
  REQUIRE(Apply(s, OptimizerKind::kAdam, batch, 999).ok());
  REQUIRE(Apply(**back, OptimizerKind::kAdam, batch, 999).ok());
  CHECK(SameBits((*back)->Serialize().value(), s.Serialize().value()));
}

TEST_CASE("Hash shard property: a backup that takes each step's changed rows stays bit-identical",
          "[hash_embedding][replicas]") {
  for (int variant = 0; variant < 3; ++variant) {
    HashShardConfig c = Config();
    c.max_rows = variant == 0 ? 100 : 0;  // evictions, or growth
    c.ttl_steps = variant == 1 ? 4 : 0;   // expiry
    c.min_count = variant == 2 ? 1 : 2;   // the admission filter
    c.filter_width = 4096;
    HashEmbeddingShard holder(c);
    std::mt19937_64 rng(11 + variant);
    bool all = false;
    int64_t step = 0, deltas = 0, wholes = 0;
    std::unique_ptr<HashEmbeddingShard> backup;
    for (int round = 0; round < 40; ++round, ++step) {
      std::vector<int64_t> batch;
      const int64_t span = variant == 1 ? 60 : 400;
      for (int i = 0; i < 30; ++i) batch.push_back(static_cast<int64_t>(rng() % span) - span / 2 + round * (variant == 1));
      Lookup(holder, batch, step);
      REQUIRE(Apply(holder, OptimizerKind::kAdagrad, batch, step).ok());
      const std::vector<int64_t> rows = holder.TakeDirtyRows(&all);
      if (all || !backup) {
        auto whole = HashEmbeddingShard::Deserialize(holder.Serialize().value(), "tab");
        REQUIRE(whole.ok());
        backup = std::move(*whole);
        ++wholes;
      } else {
        auto part = holder.SerializeRows(rows);
        REQUIRE(part.ok());
        Tensor ix(DType::kInt64, Shape{static_cast<int64_t>(rows.size())});
        std::copy(rows.begin(), rows.end(), ix.data<int64_t>());
        Status applied = backup->ApplyRows(ix, *part);
        INFO("variant " << variant << ", round " << round << ": " << applied.ToString());
        REQUIRE(applied.ok());
        ++deltas;
      }
      INFO("variant " << variant << ", round " << round);
      REQUIRE(SameBits(backup->Serialize().value(), holder.Serialize().value()));
    }
    CHECK(deltas > wholes);
    // The backup goes on as the holder would (promoted after a failover).
    std::vector<int64_t> batch = {5, -7, 150, 151, 9999};
    Lookup(holder, batch, 999);
    Lookup(*backup, batch, 999);
    REQUIRE(Apply(holder, OptimizerKind::kAdagrad, batch, 999).ok());
    REQUIRE(Apply(*backup, OptimizerKind::kAdagrad, batch, 999).ok());
    CHECK(SameBits(backup->Serialize().value(), holder.Serialize().value()));
  }
  // Rows of another layout are refused whole, nothing written.
  HashEmbeddingShard a(Config()), b(Config(8));
  Lookup(a, {1, 2}, 0);
  bool all = false;
  a.TakeDirtyRows(&all);
  Lookup(a, {3}, 1);
  const std::vector<int64_t> rows = a.TakeDirtyRows(&all);
  auto part = a.SerializeRows(rows);
  REQUIRE(part.ok());
  Tensor ix(DType::kInt64, Shape{static_cast<int64_t>(rows.size())});
  std::copy(rows.begin(), rows.end(), ix.data<int64_t>());
  const Tensor before = b.Serialize().value();
  CHECK_FALSE(b.ApplyRows(ix, *part).ok());
  CHECK(SameBits(b.Serialize().value(), before));
}

TEST_CASE("Hash shard property: a backup applying compact rounds (changed filter counters packed) stays bit-identical",
          "[hash_embedding][replicas]") {
  for (int variant = 0; variant < 4; ++variant) {
    HashShardConfig c = Config(8);
    c.max_rows = variant == 0 ? 100 : 0;                     // eviction (else growth: whole rounds)
    c.ttl_steps = variant == 1 ? 4 : 0;                      // expiry
    c.min_count = variant == 1 ? 3 : variant == 3 ? 1 : 2;  // admission (3: no filter)
    c.filter_width = variant == 2 ? 16 : 4096;               // 2: a crowded filter, rows go whole
    HashEmbeddingShard holder(c);
    std::mt19937_64 rng(21 + variant);
    int64_t deltas = 0, wholes = 0, packed_rows = 0, bytes = 0, old_bytes = 0;
    std::unique_ptr<HashEmbeddingShard> backup;
    for (int64_t step = 0; step < 40; ++step) {
      INFO("variant " << variant << ", step " << step);
      std::vector<int64_t> batch;
      const int64_t span = variant == 1 ? 60 : 400;
      for (int i = 0; i < 30; ++i) batch.push_back(static_cast<int64_t>(rng() % span) - span / 2 + step * (variant == 1));
      Lookup(holder, batch, step);
      REQUIRE(Apply(holder, OptimizerKind::kAdagrad, batch, step).ok());
      Tensor rows, values;
      if (!holder.TakeChangedRows(&rows, &values)) {
        // The first round, and after the shard grew: whole.
        auto whole = HashEmbeddingShard::Deserialize(holder.Serialize().value(), "tab");
        REQUIRE(whole.ok());
        backup = std::move(*whole);
        ++wholes;
      } else {
        REQUIRE(backup);
        // What the round would cost with each changed counter's whole filter
        // row (TakeDirtyRows' rows): its other rows, and one row per filter
        // row its packed counters lie in.
        const int64_t W = values.dim(1);
        std::set<int64_t> filter_rows;
        int64_t others = 0;
        for (int64_t i = 0; i < rows.num_elements(); ++i) {
          if (rows.data<int64_t>()[i] != kHashPackedCountersRow) {
            ++others;
            continue;
          }
          ++packed_rows;
          for (int64_t j = 0; j < W; ++j) {
            const int64_t word = values.data<int64_t>()[i * W + j];
            if (word != -1) filter_rows.insert((word >> 32) / (2 * W));
          }
        }
        const int64_t b = static_cast<int64_t>(values.bytes() + rows.bytes());
        const int64_t ob = (others + static_cast<int64_t>(filter_rows.size())) * (W + 1) * 8;
        CHECK(b <= ob);
        bytes += b;
        old_bytes += ob;
        Status applied = backup->ApplyRows(rows, values);
        INFO(applied.ToString());
        REQUIRE(applied.ok());
        ++deltas;
      }
      // Header, filter counters, rows, values and slots, bit for bit.
      REQUIRE(SameBits(backup->Serialize().value(), holder.Serialize().value()));
    }
    INFO("variant " << variant << ": " << deltas << " compact rounds of " << bytes << " bytes (" << old_bytes
                    << " with whole filter rows), " << packed_rows << " packed rows, " << wholes << " whole");
    CHECK(deltas > wholes);
    if (variant <= 1) {
      CHECK(holder.Metrics().evicted > 0);  // 0: by max_rows, 1: by ttl
      CHECK(packed_rows > 0);
      // 1 sees each id often (60 ids): most of its bytes are rows trained.
      CHECK(bytes * (variant == 0 ? 3 : 3) < old_bytes * (variant == 0 ? 1 : 2));
    }
    if (variant == 3) {
      CHECK(packed_rows == 0);
      CHECK(bytes == old_bytes);
    }
  }
}

TEST_CASE("Hash shard: packed filter counters that do not fit the shard are refused, nothing written",
          "[hash_embedding][replicas]") {
  HashShardConfig c = Config(8);
  c.min_count = 2;
  c.filter_width = 64;
  HashEmbeddingShard holder(c), backup(c);
  for (HashEmbeddingShard* s : {&holder, &backup}) {
    Lookup(*s, {1, 2, 3}, 0);
    Lookup(*s, {2}, 1);  // admitted: the shard grows
  }
  Tensor rows, values;
  CHECK_FALSE(holder.TakeChangedRows(&rows, &values));  // the first take: whole
  CHECK_FALSE(backup.TakeChangedRows(&rows, &values));
  Lookup(holder, {1, 4, 5}, 2);  // 1 is admitted (a slot row), 4 and 5 counted
  REQUIRE(holder.TakeChangedRows(&rows, &values));
  const int64_t W = values.dim(1);
  int64_t at = -1;  // the packed row: right after the header
  for (int64_t i = rows.num_elements() - 1; i >= 0; --i)
    if (rows.data<int64_t>()[i] == kHashPackedCountersRow) at = i;
  REQUIRE(at > 0);  // 1, 4 and 5 changed up to 12 counters of 256, in rows of 2 * W
  {
    auto copy = HashEmbeddingShard::Deserialize(backup.Serialize().value(), "tab");
    REQUIRE(copy.ok());
    REQUIRE((*copy)->ApplyRows(rows, values).ok());
    CHECK(SameBits((*copy)->Serialize().value(), holder.Serialize().value()));
  }
  const Tensor before = backup.Serialize().value();
  auto refused = [&](HashEmbeddingShard& s, const Tensor& r, const Tensor& v, const Tensor& was) {
    Status st = s.ApplyRows(r, v);
    INFO(st.ToString());
    CHECK(st.code() == Code::kInvalidArgument);
    CHECK(SameBits(s.Serialize().value(), was));
  };
  // A counter past the filter (4 x 64 counters), and a negative word.
  Tensor bad = values.Copy();
  bad.data<int64_t>()[at * W] = PackFilterCounter(4 * 64, 7);
  refused(backup, rows, bad, before);
  bad.data<int64_t>()[at * W] = -5;
  refused(backup, rows, bad, before);
  // Packed counters after the saved rows they precede.
  int64_t last = at;
  while (last + 1 < rows.num_elements() && rows.data<int64_t>()[last + 1] == kHashPackedCountersRow) ++last;
  REQUIRE(last + 1 < rows.num_elements());
  Tensor late = rows.Copy(), lv = values.Copy();
  std::swap(late.data<int64_t>()[last], late.data<int64_t>()[last + 1]);
  std::swap_ranges(lv.data<int64_t>() + last * W, lv.data<int64_t>() + (last + 1) * W,
                   lv.data<int64_t>() + (last + 1) * W);
  refused(backup, late, lv, before);
  // A shard without a filter has no counter to set.
  HashShardConfig nf = c;
  nf.min_count = 1;
  HashEmbeddingShard plain(nf);
  Lookup(plain, {1, 2, 3}, 0);
  CHECK_FALSE(plain.TakeChangedRows(&rows, &values));
  const Tensor plain_before = plain.Serialize().value();
  Lookup(plain, {1, 9}, 1);
  REQUIRE(plain.TakeChangedRows(&rows, &values));
  auto other = HashEmbeddingShard::Deserialize(plain_before, "tab");
  REQUIRE(other.ok());
  // The same round with a packed row of counter 0 after its header (as long as the holder's).
  Tensor r2(DType::kInt64, Shape{rows.num_elements() + 1});
  Tensor v2 = Tensor::Zeros(DType::kInt64, {rows.num_elements() + 1, values.dim(1)});
  for (int64_t i = 0, j = 0; i < r2.num_elements(); ++i) {
    if (i == at) {
      r2.data<int64_t>()[i] = kHashPackedCountersRow;
      std::fill(v2.data<int64_t>() + i * values.dim(1), v2.data<int64_t>() + (i + 1) * values.dim(1), int64_t{-1});
      v2.data<int64_t>()[i * values.dim(1)] = PackFilterCounter(0, 1);
      continue;
    }
    r2.data<int64_t>()[i] = rows.data<int64_t>()[j];
    std::copy(values.data<int64_t>() + j * values.dim(1), values.data<int64_t>() + (j + 1) * values.dim(1),
              v2.data<int64_t>() + i * values.dim(1));
    ++j;
  }
  refused(**other, r2, v2, plain_before);
  REQUIRE((*other)->ApplyRows(rows, values).ok());  // without it, taken
  CHECK(SameBits((*other)->Serialize().value(), plain.Serialize().value()));
}

TEST_CASE("Hash shard property: resharding 3 shards into 2 and 5 keeps every id's state", "[hash_embedding]") {
  std::vector<Tensor> parts;
  std::map<int64_t, HashRowState> want;
  std::mt19937_64 rng(5);
  for (int64_t k = 0; k < 3; ++k) {
    HashShardConfig c = Config();
    c.num_shards = 3;
    c.shard = k;
    HashEmbeddingShard s(c);
    std::vector<int64_t> mine;
    while (mine.size() < 50) {
      const int64_t id = static_cast<int64_t>(rng());
      if (HashShardOf(id, 3) == k) mine.push_back(id);
    }
    for (int64_t step = 0; step < 3; ++step) {
      Lookup(s, mine, step);
      REQUIRE(Apply(s, OptimizerKind::kFtrl, mine, step).ok());
    }
    for (auto& kv : s.AllRows()) want[kv.first] = kv.second;
    parts.push_back(s.Serialize().value());
  }
  for (int64_t to : {2, 5}) {
    INFO(to << " shards");
    auto r = ReshardHashStates(parts, to, "tab");
    REQUIRE(r.ok());
    REQUIRE(static_cast<int64_t>(r->size()) == to);
    std::map<int64_t, HashRowState> got;
    for (int64_t k = 0; k < to; ++k) {
      auto rows = HashStateRows((*r)[k]);
      REQUIRE(rows.ok());
      for (auto& kv : *rows) {
        CHECK(HashShardOf(kv.first, to) == k);
        got[kv.first] = kv.second;
      }
    }
    CHECK(got == want);
  }
  // Not a table's shards: an error naming the table.
  auto bad = ReshardHashStates({parts[0], parts[0]}, 2, "tab");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("'tab'") != std::string::npos);
}

TEST_CASE("Hash shard: bad configs, updates and states are errors naming the table", "[hash_embedding][bad_input]") {
  HashShardConfig c = Config();
  c.max_rows = -1;
  Status s = CheckHashShardConfig(c);
  REQUIRE_FALSE(s.ok());
  CHECK(s.message().find("'tab'") != std::string::npos);
  CHECK(s.message().find("max_rows") != std::string::npos);
  c = Config();
  c.admit_probability = 0.0;
  CHECK_FALSE(CheckHashShardConfig(c).ok());
  c = Config();
  c.ttl_steps = -5;
  CHECK(CheckHashShardConfig(c).message().find("ttl_steps") != std::string::npos);

  HashEmbeddingShard h(Config());
  Lookup(h, {1, 2}, 1);
  REQUIRE(Apply(h, OptimizerKind::kAdagrad, {1, 2}, 1).ok());
  const Tensor before = h.Serialize().value();
  Status other = Apply(h, OptimizerKind::kAdam, {1}, 2);
  REQUIRE_FALSE(other.ok());
  CHECK(other.message().find("Adagrad") != std::string::npos);
  CHECK(SameBits(before, h.Serialize().value()));  // nothing changed
  // A state cut short or altered is DataLoss, never a crash.
  Tensor cut(DType::kInt64, {before.dim(0) - 1, before.dim(1)});
  std::copy(before.data<int64_t>(), before.data<int64_t>() + cut.num_elements(), cut.data<int64_t>());
  auto r = HashEmbeddingShard::Deserialize(cut, "tab");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kDataLoss);
  CHECK(r.status().message().find("'tab'") != std::string::npos);
  CHECK_FALSE(HashEmbeddingShard::Deserialize(Tensor::Zeros(DType::kInt64, {4, 8}), "tab").ok());
}
