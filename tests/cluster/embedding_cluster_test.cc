// Sharded embedding tables across node processes: each shard's lookup and
// sparse update run on the node holding its rows (placement colocates them
// with the shard's handle); results must match a reference computed here
// from the shards' values, exactly as in one process.
#include <catch2/catch.hpp>

#include <cmath>

#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"

using namespace sf;

namespace {

using Table = std::vector<std::vector<double>>;

Table Assemble(const std::vector<Tensor>& shards, int64_t rows, int64_t dim) {
  const int64_t K = static_cast<int64_t>(shards.size());
  Table t(rows, std::vector<double>(dim));
  for (int64_t id = 0; id < rows; ++id)  // "mod": shard id % K, row id / K
    for (int64_t j = 0; j < dim; ++j) t[id][j] = shards[id % K].data<float>()[(id / K) * dim + j];
  return t;
}

}  // namespace

TEST_CASE("Cluster: sharded lookups and sparse SGD across processes match a reference",
          "[cluster][embedding]") {
  constexpr int64_t kRows = 1000, kDim = 4, kShards = 4;
  constexpr float kLr = 0.5f;
  Graph g;
  EmbeddingTableOptions to;
  to.num_shards = kShards;
  to.seed = 7;
  auto table = NewEmbeddingTable(g, "items", kRows, kDim, to);
  // Bags with duplicates, ids on every shard, and an empty bag.
  const std::vector<int64_t> ids = {3, 3, 998, 5, 0, 1, 2, 7, 7, 7, 500};
  const std::vector<int64_t> offsets = {0, 3, 4, 8, 8};
  auto id_t = ops::Placeholder(g, DType::kInt64, {-1}, "ids");
  auto off_t = ops::Placeholder(g, DType::kInt64, {-1}, "offsets");
  auto emb = ops::EmbeddingLookupBag(g, table, id_t, off_t, "sum");
  // loss = sum(emb * c): each looked-up row's gradient is c (per occurrence).
  auto c = ops::Const(g, std::vector<float>{1, -2, 3, 0.5f}, {kDim});
  auto loss = ops::Sum(g, emb * c);
  auto train = GradientDescentOptimizer(kLr).Minimize(g, loss);
  REQUIRE(train.ok());
  const Operation init = ops::GlobalVariablesInitializer(g);
  std::vector<Output> reads;
  for (const Output& h : table.shards) reads.push_back(ops::ReadVariable(g, h, DType::kFloat32));
  REQUIRE(g.status().ok());

  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  ClusterOptions o;
  o.address = cluster.addresses()[0];
  o.tls_dir = cluster.tls_dir();
  auto s = ClusterSession::Connect(g, o);
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {init}).ok());
  auto before = (*s)->Run({}, reads);
  REQUIRE(before.ok());
  const Table t0 = Assemble(*before, kRows, kDim);

  FeedMap feeds = {{"ids", Tensor::FromVector(ids, {static_cast<int64_t>(ids.size())})},
                   {"offsets", Tensor::FromVector(offsets, {static_cast<int64_t>(offsets.size())})}};
  auto out = (*s)->Run(feeds, std::vector<Output>{emb}, {*train});
  REQUIRE(out.ok());
  const Tensor& e = (*out)[0];
  REQUIRE(e.shape() == Shape{5, kDim});
  for (size_t b = 0; b < offsets.size(); ++b) {
    const size_t end = b + 1 < offsets.size() ? offsets[b + 1] : ids.size();
    for (int64_t j = 0; j < kDim; ++j) {
      double want = 0;
      for (size_t i = offsets[b]; i < end; ++i) want += t0[ids[i]][j];
      CHECK(e.data<float>()[b * kDim + j] == Approx(want).margin(1e-6));
    }
  }
  // The sparse update: each row moves by -lr * c per occurrence (duplicates summed).
  auto after = (*s)->Run({}, reads);
  REQUIRE(after.ok());
  const Table t1 = Assemble(*after, kRows, kDim);
  const float cv[kDim] = {1, -2, 3, 0.5f};
  for (int64_t id = 0; id < kRows; ++id) {
    const double n = static_cast<double>(std::count(ids.begin(), ids.end(), id));
    for (int64_t j = 0; j < kDim; ++j) {
      INFO("row " << id << " column " << j);
      CHECK(t1[id][j] == Approx(t0[id][j] - kLr * n * cv[j]).margin(1e-6));
    }
  }
  // An id out of range is an error naming the table and the id.
  FeedMap bad = {{"ids", Tensor::FromVector(std::vector<int64_t>{1, 1000}, {2})},
                 {"offsets", Tensor::FromVector(std::vector<int64_t>{0}, {1})}};
  auto r = (*s)->Run(bad, std::vector<Output>{emb});
  REQUIRE(!r.ok());
  INFO(r.status().ToString());
  CHECK(r.status().message().find("items") != std::string::npos);
  CHECK(r.status().message().find("1000") != std::string::npos);
}
