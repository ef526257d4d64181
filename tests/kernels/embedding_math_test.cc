// The sharded embedding math (kernels/embedding_math.h) against a naive
// reference written from the partitioning's definition: every shard count,
// both partitionings, both combiners, sorted and unsorted segments, row widths
// with and without a compiled-in size, with and without the compute pool.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <unordered_map>

#include "kernels/compute_pool.h"
#include "kernels/embedding_math.h"

using namespace sf;

namespace {

// Shard and local row of a global id, straight from the definitions.
void Locate(int64_t rows, int64_t K, EmbeddingPartition p, int64_t id, int64_t* shard,
            int64_t* local) {
  if (p == EmbeddingPartition::kMod) {
    *shard = id % K;
    *local = id / K;
    return;
  }
  int64_t first = 0;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t n = EmbeddingShardRows(rows, K, k, p);
    if (id < first + n) {
      *shard = k;
      *local = id - first;
      return;
    }
    first += n;
  }
}

struct Case {
  int64_t rows, dim, K;
  EmbeddingPartition part;
  EmbeddingCombiner comb;
  bool sorted;  // segment ids non-decreasing (every lookup builder's), else shuffled
};

// A gather of n ids drawn with many duplicates over num_segments examples.
EmbeddingGather MakeGather(const Case& c, int64_t n, int64_t num_segments, std::mt19937_64& rng) {
  EmbeddingGather q;
  q.ids = Tensor(DType::kInt64, {n});
  q.segment_ids = Tensor(DType::kInt64, {n});
  q.num_segments = num_segments;
  q.combiner = c.comb;
  std::uniform_int_distribution<int64_t> hot(0, 63), any(0, c.rows - 1), seg(0, num_segments - 1);
  for (int64_t i = 0; i < n; ++i) {
    q.ids.data<int64_t>()[i] = i % 3 == 0 ? hot(rng) : any(rng);
    q.segment_ids.data<int64_t>()[i] = c.sorted ? i * num_segments / n : seg(rng);
  }
  return q;
}

Tensor RandomTable(int64_t rows, int64_t dim, std::mt19937_64& rng) {
  Tensor t(DType::kFloat32, {rows, dim});
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

std::vector<float> Weights(const EmbeddingGather& q) {
  std::vector<float> w(q.num_segments, 1.0f);
  if (q.combiner != EmbeddingCombiner::kMean) return w;
  std::vector<int64_t> count(q.num_segments, 0);
  for (int64_t i = 0; i < q.ids.num_elements(); ++i) ++count[q.segment_ids.data<int64_t>()[i]];
  for (int64_t s = 0; s < q.num_segments; ++s) w[s] = count[s] ? 1.0f / count[s] : 0.0f;
  return w;
}

void Check(const Case& c, ComputePool* pool, int64_t n, int64_t num_segments) {
  CAPTURE(c.rows, c.dim, c.K, static_cast<int>(c.part), static_cast<int>(c.comb), c.sorted,
          pool != nullptr, n);
  std::mt19937_64 rng(c.K * 131 + c.dim);
  const EmbeddingGather q = MakeGather(c, n, num_segments, rng);
  const std::vector<float> w = Weights(q);
  Tensor dy = RandomTable(num_segments, c.dim, rng);
  const int64_t* ids = q.ids.data<int64_t>();
  const int64_t* seg = q.segment_ids.data<int64_t>();
  std::vector<double> total(num_segments * c.dim, 0.0);  // the sum over every shard
  double expect_total = 0;
  // The same lookup split once for all shards (EmbeddingSplitIds): each
  // shard then gets only its ids, as local rows in batch order.
  EmbeddingOpAttrs split_attrs;
  split_attrs.spec = EmbeddingShardSpec{"tbl", c.rows, c.K, 0, c.part};
  split_attrs.combiner = c.comb;
  split_attrs.segments = EmbeddingSegments::kSegmentIds;
  split_attrs.num_segments = num_segments;
  EmbeddingIdSplit split;
  REQUIRE(SplitEmbeddingIds(split_attrs, q.ids, &q.segment_ids, &split).ok());
  REQUIRE(split.rows.size() == static_cast<size_t>(c.K));
  REQUIRE(split.weights.num_elements() == num_segments);
  for (int64_t s = 0; s < num_segments; ++s) REQUIRE(split.weights.data<float>()[s] == w[s]);
  int64_t split_total = 0;
  for (int64_t k = 0; k < c.K; ++k) {
    EmbeddingShardSpec spec{"tbl", c.rows, c.K, k, c.part};
    Tensor table = RandomTable(EmbeddingShardRows(c.rows, c.K, k, c.part), c.dim, rng);
    // Reference gather, and reference gradient rows in first-seen order.
    std::vector<double> want(num_segments * c.dim, 0.0);
    std::vector<int64_t> want_rows;
    std::unordered_map<int64_t, size_t> slot;
    std::vector<std::vector<double>> want_vals;
    for (int64_t i = 0; i < n; ++i) {
      int64_t shard, local;
      Locate(c.rows, c.K, c.part, ids[i], &shard, &local);
      if (shard != k) continue;
      auto it = slot.find(local);
      if (it == slot.end()) {
        it = slot.emplace(local, want_rows.size()).first;
        want_rows.push_back(local);
        want_vals.emplace_back(c.dim, 0.0);
      }
      for (int64_t j = 0; j < c.dim; ++j) {
        want[seg[i] * c.dim + j] += double(table.data<float>()[local * c.dim + j]) * w[seg[i]];
        want_vals[it->second][j] += double(dy.data<float>()[seg[i] * c.dim + j]) * w[seg[i]];
      }
    }
    // Shard k's part of the split: exactly its ids, in order, as local rows.
    std::vector<int64_t> mine_rows, mine_segs;
    for (int64_t i = 0; i < n; ++i) {
      int64_t shard, local;
      Locate(c.rows, c.K, c.part, ids[i], &shard, &local);
      if (shard == k) mine_rows.push_back(local), mine_segs.push_back(seg[i]);
    }
    REQUIRE(split.rows[k].ToVector<int64_t>() == mine_rows);
    REQUIRE(split.segments[k].ToVector<int64_t>() == mine_segs);
    split_total += split.rows[k].num_elements();
    EmbeddingOpAttrs shard_attrs = split_attrs;
    shard_attrs.spec.shard = k;
    shard_attrs.segments = EmbeddingSegments::kSplit;
    EmbeddingGather qk;
    REQUIRE(BuildSplitShardGather(shard_attrs, split.rows[k], split.segments[k], split.weights, &qk).ok());
    Tensor out;
    Tensor split_out;
    REQUIRE(EmbeddingGatherCombine(spec, qk, table, &split_out, pool).ok());
    REQUIRE(split_out.shape() == Shape{num_segments, c.dim});
    for (int64_t i = 0; i < split_out.num_elements(); ++i)
      REQUIRE(std::abs(split_out.data<float>()[i] - want[i]) < 1e-4);
    Tensor split_rows, split_vals;
    REQUIRE(EmbeddingSparseGrad(spec, qk, dy, &split_rows, &split_vals, pool).ok());
    REQUIRE(split_rows.ToVector<int64_t>() == want_rows);
    for (size_t u = 0; u < want_rows.size(); ++u)
      for (int64_t j = 0; j < c.dim; ++j)
        REQUIRE(std::abs(split_vals.data<float>()[u * c.dim + j] - want_vals[u][j]) < 1e-4);
    REQUIRE(EmbeddingGatherCombine(spec, q, table, &out, pool).ok());
    REQUIRE(out.shape() == Shape{num_segments, c.dim});
    for (int64_t i = 0; i < out.num_elements(); ++i) {
      REQUIRE(std::abs(out.data<float>()[i] - want[i]) < 1e-4);
      total[i] += out.data<float>()[i];
      expect_total += want[i];
    }
    Tensor rows, vals;
    REQUIRE(EmbeddingSparseGrad(spec, q, dy, &rows, &vals, pool).ok());
    REQUIRE(rows.num_elements() == static_cast<int64_t>(want_rows.size()));
    REQUIRE(vals.shape() == Shape{rows.num_elements(), c.dim});
    for (size_t u = 0; u < want_rows.size(); ++u) {
      REQUIRE(rows.data<int64_t>()[u] == want_rows[u]);
      for (int64_t j = 0; j < c.dim; ++j)
        REQUIRE(std::abs(vals.data<float>()[u * c.dim + j] - want_vals[u][j]) < 1e-4);
    }
  }
  CHECK(split_total == n);  // every id went to one shard
  // Every id is in exactly one shard: the partials add up to the whole lookup.
  double got_total = 0;
  for (double x : total) got_total += x;
  CHECK(std::abs(got_total - expect_total) < 1e-2);
}

}  // namespace

TEST_CASE("Embedding gather and sparse gradient match a naive reference on every layout",
          "[embedding]") {
  ComputePool pool(2);
  for (int64_t K : {1, 2, 3, 4})
    for (auto part : {EmbeddingPartition::kMod, EmbeddingPartition::kRange})
      for (auto comb : {EmbeddingCombiner::kSum, EmbeddingCombiner::kMean})
        for (int64_t dim : {32, 5})
          for (bool sorted : {true, false}) {
            const Case c{1001, dim, K, part, comb, sorted};
            Check(c, nullptr, 300, 40);
            Check(c, &pool, 300, 40);
          }
  // Big enough for the pool to split the gather (>= 8192 of a shard's ids,
  // segments sorted) and the gradient sums (>= 4096 unique rows).
  for (int64_t K : {1, 2})
    for (bool sorted : {true, false})
      Check(Case{100003, 32, K, EmbeddingPartition::kMod, EmbeddingCombiner::kSum, sorted}, &pool,
            32768, 4096);
}

TEST_CASE("Embedding gather and gradient name the bad id or segment", "[embedding]") {
  Case c{100, 4, 2, EmbeddingPartition::kMod, EmbeddingCombiner::kSum, true};
  std::mt19937_64 rng(1);
  EmbeddingGather q = MakeGather(c, 10, 3, rng);
  Tensor table = RandomTable(50, 4, rng), dy = RandomTable(3, 4, rng), out, rows, vals;
  EmbeddingShardSpec spec{"tbl", 100, 2, 0, EmbeddingPartition::kMod};
  // An odd id is shard 1's, still checked by shard 0.
  q.ids.data<int64_t>()[7] = 101;
  Status s = EmbeddingGatherCombine(spec, q, table, &out);
  CHECK(s.message().find("'tbl'") != std::string::npos);
  CHECK(s.message().find("id 101") != std::string::npos);
  s = EmbeddingSparseGrad(spec, q, dy, &rows, &vals);
  CHECK(s.message().find("id 101") != std::string::npos);
  q.ids.data<int64_t>()[7] = -3;
  CHECK(EmbeddingGatherCombine(spec, q, table, &out).message().find("id -3") != std::string::npos);
  q.ids.data<int64_t>()[7] = 7;
  q.segment_ids.data<int64_t>()[4] = 3;
  s = EmbeddingGatherCombine(spec, q, table, &out);
  CHECK(s.message().find("segment id 3 of id position 4") != std::string::npos);
  s = EmbeddingSparseGrad(spec, q, dy, &rows, &vals);
  CHECK(s.message().find("segment id 3") != std::string::npos);
  q.segment_ids.data<int64_t>()[4] = 1;
  CHECK(EmbeddingGatherCombine(spec, q, table, &out).ok());
}

TEST_CASE("Split ids name the bad id, segment or local row", "[embedding]") {
  EmbeddingOpAttrs a;
  a.spec = EmbeddingShardSpec{"tbl", 100, 3, 0, EmbeddingPartition::kMod};
  a.segments = EmbeddingSegments::kSegmentIds;
  a.num_segments = 2;
  Tensor ids = Tensor::FromVector<int64_t>({1, 5, 99, 100}), segs = Tensor::FromVector<int64_t>({0, 0, 1, 1});
  EmbeddingIdSplit split;
  Status s = SplitEmbeddingIds(a, ids, &segs, &split);
  CHECK(s.message().find("'tbl'") != std::string::npos);
  CHECK(s.message().find("id 100") != std::string::npos);
  ids.data<int64_t>()[3] = 4;
  segs.data<int64_t>()[1] = 2;
  s = SplitEmbeddingIds(a, ids, &segs, &split);
  CHECK(s.message().find("segment id 2 of id position 1") != std::string::npos);
  segs.data<int64_t>()[1] = 0;
  REQUIRE(SplitEmbeddingIds(a, ids, &segs, &split).ok());
  // ids 1, 5, 99, 4 mod 3: shard 0 gets 99 (row 33), shard 1 gets 1 and 4
  // (rows 0, 1), shard 2 gets 5 (row 1).
  CHECK(split.rows[0].ToVector<int64_t>() == std::vector<int64_t>{33});
  CHECK(split.rows[1].ToVector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(split.segments[1].ToVector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(split.rows[2].ToVector<int64_t>() == std::vector<int64_t>{1});
  // A local row past its shard (a hostile or wrong feed) is refused by the shard.
  EmbeddingOpAttrs k1 = a;
  k1.spec.shard = 1;
  k1.segments = EmbeddingSegments::kSplit;
  EmbeddingGather q;
  REQUIRE(BuildSplitShardGather(k1, Tensor::FromVector<int64_t>({0, 34}), split.segments[1], split.weights, &q).ok());
  Tensor out;
  s = EmbeddingGatherCombine(k1.spec, q, Tensor::Zeros(DType::kFloat32, {33, 2}), &out);
  CHECK(s.message().find("local row 34 of shard 1") != std::string::npos);
  // A hash table is never split by row.
  a.spec.partition = EmbeddingPartition::kHash;
  CHECK(SplitEmbeddingIds(a, ids, &segs, &split).message().find("hash") != std::string::npos);
}

TEST_CASE("A big split runs in chunks on the pool, with the same parts and the first bad id", "[embedding]") {
  ComputePool pool(2);
  // A power-of-two mod table splits in chunks from 262144 ids, others from 16384.
  for (int64_t batch : {4096, 40000})
  for (auto partition : {EmbeddingPartition::kMod, EmbeddingPartition::kRange}) {
    for (int64_t shards : {2, 3, 4}) {
      INFO("partition " << static_cast<int>(partition) << ", " << shards << " shards, batch " << batch);
      EmbeddingOpAttrs a;
      a.spec = EmbeddingShardSpec{"tbl", 1'000'003, shards, 0, partition};
      a.segments = EmbeddingSegments::kDense;
      std::mt19937_64 rng(7);
      std::vector<int64_t> v(batch * 8);
      for (auto& x : v) x = static_cast<int64_t>(rng() % 1'000'003);
      const Tensor ids = Tensor::FromVector<int64_t>(v, {batch, 8});
      EmbeddingIdSplit one, chunked;
      REQUIRE(SplitEmbeddingIds(a, ids, nullptr, &one).ok());
      REQUIRE(SplitEmbeddingIds(a, ids, nullptr, &chunked, &pool).ok());
      int64_t total = 0;
      for (int64_t k = 0; k < shards; ++k) {
        CHECK(chunked.rows[k].ToVector<int64_t>() == one.rows[k].ToVector<int64_t>());
        CHECK(chunked.segments[k].ToVector<int64_t>() == one.segments[k].ToVector<int64_t>());
        total += one.rows[k].num_elements();
      }
      CHECK(total == batch * 8);
      // Bad ids in both chunks: the error names the first in the batch.
      std::vector<int64_t> bad = v;
      bad[batch * 8 - 2768] = -5;
      bad[batch * 8 / 2 - 12768] = 1'000'003;
      Status s = SplitEmbeddingIds(a, Tensor::FromVector<int64_t>(bad, {batch, 8}), nullptr, &chunked, &pool);
      CHECK(s.message().find("1000003") != std::string::npos);
      CHECK(s.message().find("-5") == std::string::npos);
    }
  }
}

TEST_CASE("A split's parts are each shard's ids in batch order, for any shard count and batch length",
          "[embedding]") {
  ComputePool pool(2);
  std::mt19937_64 rng(11);
  const int64_t rows = 1'000'003;
  // Lengths around the 8-id vectors of the packed scatter and the sizes
  // that split in chunks (16384, and 262144 for a power-of-two mod table);
  // shard counts on both sides of where the packed scatter stops (16).
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{1000}, int64_t{16389}, int64_t{40001},
                    int64_t{262151}}) {
    for (int64_t shards : {2, 3, 4, 5, 8, 9, 16, 17}) {
      for (auto partition : {EmbeddingPartition::kMod, EmbeddingPartition::kRange}) {
        INFO("n " << n << ", " << shards << " shards, partition " << static_cast<int>(partition));
        EmbeddingOpAttrs a;
        a.spec = EmbeddingShardSpec{"tbl", rows, shards, 0, partition};
        a.segments = EmbeddingSegments::kSegmentIds;
        a.num_segments = n;
        std::vector<int64_t> v(n), seg(n);
        for (int64_t i = 0; i < n; ++i) {
          v[i] = static_cast<int64_t>(rng() % rows);
          seg[i] = i;  // distinct, so a misplaced id shows
        }
        // The reference: each id's shard and local row, written here from the partition rules.
        std::vector<std::vector<int64_t>> want_rows(shards), want_segs(shards);
        const int64_t base = rows / shards, extra = rows % shards;
        for (int64_t i = 0; i < n; ++i) {
          int64_t k, r;
          if (partition == EmbeddingPartition::kMod) {
            k = v[i] % shards;
            r = v[i] / shards;
          } else if (v[i] < extra * (base + 1)) {
            k = v[i] / (base + 1);
            r = v[i] % (base + 1);
          } else {
            k = extra + (v[i] - extra * (base + 1)) / base;
            r = (v[i] - extra * (base + 1)) % base;
          }
          want_rows[k].push_back(r);
          want_segs[k].push_back(seg[i]);
        }
        const Tensor ids = Tensor::FromVector<int64_t>(v), segs = Tensor::FromVector<int64_t>(seg);
        for (ComputePool* p : {static_cast<ComputePool*>(nullptr), &pool}) {
          EmbeddingIdSplit split;
          REQUIRE(SplitEmbeddingIds(a, ids, &segs, &split, p).ok());
          REQUIRE(split.rows.size() == static_cast<size_t>(shards));
          for (int64_t k = 0; k < shards; ++k) {
            CHECK(split.rows[k].ToVector<int64_t>() == want_rows[k]);
            CHECK(split.segments[k].ToVector<int64_t>() == want_segs[k]);
          }
        }
      }
    }
  }
}
