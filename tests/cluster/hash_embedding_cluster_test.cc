// Hash embedding tables across node processes: each shard's hash table lives
// in the shard actor of the node that holds it; lookups of any int64 id and
// sparse Adagrad must match a reference computed here from the shards' saved
// rows, and a checkpoint saved on the cluster restores the same rows.
#include <catch2/catch.hpp>

#include <algorithm>

#include <cmath>
#include <map>

#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

using namespace sf;

namespace {

using Rows = std::map<int64_t, HashEmbeddingShardSummary::Row>;

Rows ToRows(const std::vector<Tensor>& states) {
  Rows rows;
  for (const Tensor& t : states) {
    auto h = SummarizeHashEmbeddingShard(t, std::numeric_limits<int64_t>::max());
    REQUIRE(h.ok());
    for (auto& r : h->rows) rows[r.id] = r;
  }
  return rows;
}

}  // namespace

TEST_CASE("Cluster: hash table lookups and sparse Adagrad across processes match a reference",
          "[cluster][embedding][hash_embedding]") {
  constexpr int64_t kDim = 4, kShards = 4;
  Graph g;
  HashEmbeddingTableOptions to;
  to.num_shards = kShards;
  to.seed = 7;
  auto table = NewHashEmbeddingTable(g, "feats", kDim, to);
  const std::vector<int64_t> ids = {-3, -3, 1LL << 60, 5, 0, 1, 2, 7, 7, 7, -500};
  const std::vector<int64_t> offsets = {0, 3, 4, 8, 8};
  auto id_t = ops::Placeholder(g, DType::kInt64, {-1}, "ids");
  auto off_t = ops::Placeholder(g, DType::kInt64, {-1}, "offsets");
  auto emb = ops::EmbeddingLookupBag(g, table, id_t, off_t, "sum");
  auto c = ops::Const(g, std::vector<float>{1, -2, 3, 0.5f}, {kDim});
  auto loss = ops::Sum(g, emb * c);
  auto train = AdagradOptimizer(0.5).Minimize(g, loss);
  REQUIRE(train.ok());
  const Operation init = ops::GlobalVariablesInitializer(g);
  std::vector<Output> reads;
  for (const Output& h : table.shards) reads.push_back(ops::ReadVariable(g, h, DType::kInt64));
  auto metrics = ops::HashEmbeddingShardMetrics(g, table);
  REQUIRE(g.status().ok());

  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  ClusterOptions o;
  o.address = cluster.addresses()[0];
  o.tls_dir = cluster.tls_dir();
  auto s = ClusterSession::Connect(g, o);
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {init}).ok());

  FeedMap feeds = {{"ids", Tensor::FromVector(ids, {static_cast<int64_t>(ids.size())})},
                   {"offsets", Tensor::FromVector(offsets, {static_cast<int64_t>(offsets.size())})}};
  // A lookup alone first: it creates the rows the reference reads.
  auto out = (*s)->Run(feeds, std::vector<Output>{emb});
  REQUIRE(out.ok());
  auto before = (*s)->Run({}, reads);
  REQUIRE(before.ok());
  const Rows r0 = ToRows(*before);
  CHECK(r0.size() == 8);
  const Tensor& e = (*out)[0];
  REQUIRE(e.shape() == Shape{5, kDim});
  for (size_t b = 0; b < offsets.size(); ++b) {
    const size_t end = b + 1 < offsets.size() ? offsets[b + 1] : ids.size();
    for (int64_t j = 0; j < kDim; ++j) {
      double want = 0;
      for (size_t i = offsets[b]; i < end; ++i) want += r0.at(ids[i]).values[j];
      CHECK(e.data<float>()[b * kDim + j] == Approx(want).margin(1e-6));
    }
  }
  REQUIRE((*s)->Run(feeds, std::vector<Output>{}, {*train}).ok());
  auto after = (*s)->Run({}, reads);
  REQUIRE(after.ok());
  const Rows r1 = ToRows(*after);
  const float cv[kDim] = {1, -2, 3, 0.5f};
  for (const auto& kv : r0) {
    const double n = static_cast<double>(std::count(ids.begin(), ids.end(), kv.first));
    for (int64_t j = 0; j < kDim; ++j) {
      INFO("id " << kv.first << " column " << j);
      const double g1 = n * cv[j], acc = 0.1 + g1 * g1;
      CHECK(r1.at(kv.first).values[j] == Approx(kv.second.values[j] - 0.5 * g1 / std::sqrt(acc)).margin(1e-5));
      CHECK(r1.at(kv.first).values[kDim + j] == Approx(acc).margin(1e-5));
    }
  }
  auto m = (*s)->Run({}, metrics);
  REQUIRE(m.ok());
  int64_t rows = 0;
  for (const Tensor& x : *m) {
    auto hm = HashEmbeddingMetricsOf(x);
    REQUIRE(hm.ok());
    CHECK(hm->step == 1);
    rows += hm->rows;
  }
  CHECK(rows == 8);

  // A cluster checkpoint holds the same rows; a restore brings them back.
  testing::TempDir dir("sf_hash_cluster");
  REQUIRE((*s)->Save(dir.path, 1).ok());
  REQUIRE((*s)->Run(feeds, std::vector<Output>{}, {*train}).ok());
  REQUIRE((*s)->Restore(dir.path).ok());
  auto restored = (*s)->Run({}, reads);
  REQUIRE(restored.ok());
  const Rows r2 = ToRows(*restored);
  REQUIRE(r2.size() == r1.size());
  for (const auto& kv : r1) CHECK(r2.at(kv.first).values == kv.second.values);
}

TEST_CASE("Cluster: hash table shards move with their rows when members join and drain",
          "[cluster][elastic][hash_embedding]") {
  Graph g;
  HashEmbeddingTableOptions to;
  to.num_shards = 4;
  to.seed = 3;
  to.min_count = 2;
  auto table = NewHashEmbeddingTable(g, "moving", 4, to);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 2}, "ids");
  auto loss = ops::Sum(g, ops::EmbeddingLookup(g, table, ids, "mean"));
  auto train = FtrlOptimizer(0.2, 0.001, 0.001).Minimize(g, loss);
  REQUIRE(train.ok());
  const Operation init = ops::GlobalVariablesInitializer(g);
  std::vector<Output> reads;
  for (const Output& h : table.shards) reads.push_back(ops::ReadVariable(g, h, DType::kInt64));
  REQUIRE(g.status().ok());
  const int kSteps = 16;
  auto batch = [](int step) {
    std::vector<int64_t> b;
    for (int i = 0; i < 16; ++i) b.push_back(static_cast<int64_t>((step * 7 + i * 13) % 40) * 1000003 - 20000000);
    return FeedMap{{"ids", Tensor::FromVector(b, {8, 2})}};
  };
  Rows want;
  {
    Session ref(g);
    REQUIRE(ref.Run({}, std::vector<Output>{}, {init}).ok());
    for (int i = 0; i < kSteps; ++i) REQUIRE(ref.Run(batch(i), std::vector<Output>{}, {*train}).ok());
    auto r = ref.Run({}, reads);
    REQUIRE(r.ok());
    want = ToRows(*r);
  }
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  ClusterOptions o;
  o.address = cluster.addresses()[0];
  o.tls_dir = cluster.tls_dir();
  o.tasks = 4;
  auto s = ClusterSession::Connect(g, o);
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {init}).ok());
  for (int i = 0; i < kSteps; ++i) {
    if (i == 5) REQUIRE(cluster.AddNode(120).ok());
    if (i == 11) {
      const std::string cmd = std::string(SF_BIN_DIR) + "/shardflow node drain " + cluster.addresses()[1] +
                              " --etcd " + cluster.etcd_endpoint() + " --tls-dir " + cluster.tls_dir() +
                              " --wait-s 0 >/dev/null";
      REQUIRE(std::system(cmd.c_str()) == 0);
    }
    // As in recovery_cluster_test: the session hears of a join or drain by a
    // message it has no query for, so a margin, not a wait on a condition.
    if (i == 5 || i == 11) testing::PauseFor(std::chrono::milliseconds(300));
    // A slot moves once copied to its new holder (the old one serves it meanwhile).
    if (i == 5 || i == 11)
      REQUIRE(testing::WaitFor([&] {
        auto map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
        if (!map.ok() || map->holder.size() < 4) return false;
        const auto used = std::count(map->holder.begin(), map->holder.begin() + 4, cluster.addresses()[1]);
        return i == 5 ? used > 0 : used == 0;
      }, std::chrono::seconds(30)));
    auto r = (*s)->Run(batch(i), std::vector<Output>{}, {*train});
    INFO("step " << i << ": " << r.status().ToString());
    REQUIRE(r.ok());
  }
  CHECK(cluster.WaitExit(1, 10000));
  const auto changes = (*s)->Changes();
  REQUIRE(changes.size() == 2);
  // The placement leader moved the shards with their rows (none restored).
  for (const auto& c : changes) {
    CHECK(!c.moved_tasks.empty());
    CHECK(c.restored_tasks.empty());
  }
  auto r = (*s)->Run({}, reads);
  REQUIRE(r.ok());
  const Rows got = ToRows(*r);
  REQUIRE(got.size() == want.size());
  for (const auto& kv : want) {
    INFO("id " << kv.first);
    REQUIRE(got.count(kv.first));
    CHECK(got.at(kv.first).values == kv.second.values);
    CHECK(got.at(kv.first).freq == kv.second.freq);
  }
}
