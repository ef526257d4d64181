// A slot's whole copy to a new backup while training goes on: its big dense
// variables are read in pieces as they are sent (ActorVariables::TakeChanges
// with pieces_over), rows the steps change meanwhile follow in the catch-up
// round, and the backup then holds the holder's state bit for bit.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;

TEST_CASE("Cluster: a new backup copied while steps update a 40 MB table holds its holder's state bit for bit",
          "[cluster][replicas]") {
  // 320,000 x 32 floats: 41 MB, and its Adagrad accumulator as much, each
  // over the 16 MB a whole copy reads in pieces.
  constexpr int64_t kRows = 320000, kDim = 32, kBatch = 512;
  Graph g;
  EmbeddingTableOptions eo;
  eo.num_shards = 1;
  eo.seed = 3;
  EmbeddingTable table = NewEmbeddingTable(g, "big", kRows, kDim, eo);
  g.mutable_node(table.shards[0].node).device = "/job:worker/task:0";
  auto ids = ops::Placeholder(g, DType::kInt64, {kBatch, 1}, "ids");
  auto e = ops::EmbeddingLookup(g, table, ids, "sum");
  auto loss = ops::Mean(g, ops::Square(g, e));
  auto train = AdagradOptimizer(0.1).Minimize(g, loss);
  REQUIRE(train.ok());
  auto counter = ops::Variable(g, "steps", ops::Const(g, 0.0f));
  g.mutable_node(counter.node).device = "/job:worker/task:0";
  auto add = ops::AssignAdd(g, ops::VariableHandle(counter), ops::Const(g, 1.0f));
  auto step = ops::NoOp(g, {*train, Operation(&g, add.node)}, "train_and_count");
  auto init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());

  examples::LocalCluster cluster;
  cluster.SetReplicas(2);
  REQUIRE(cluster.Start(3, 120).ok());
  REQUIRE(cluster.WaitBackups(2, 30000).ok());
  ClusterOptions o;
  o.address = cluster.addresses()[0];
  o.tls_dir = cluster.tls_dir();
  o.tasks = 2;
  auto made = ClusterSession::Connect(g, o);
  INFO(made.status().ToString());
  REQUIRE(made.ok());
  auto& s = *made;
  REQUIRE(s->Run({}, std::vector<Output>{}, {init}).ok());
  REQUIRE(cluster.WaitBackups(2, 60000).ok());

  auto map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
  REQUIRE(map.ok());
  const int backup = cluster.IndexOf(map->backup[0]);
  REQUIRE(backup >= 0);

  // Steps run throughout: slot 0 loses its backup, gets a new one copied
  // whole while they update its rows, and the new one is marked synced.
  std::atomic<bool> stop{false};
  std::atomic<int64_t> acked{0}, failed{0};
  std::thread trainer([&] {
    std::mt19937_64 rng(5);
    std::uniform_int_distribution<int64_t> row(0, kRows - 1);
    while (!stop) {
      Tensor batch(DType::kInt64, Shape{kBatch, 1});
      for (int64_t i = 0; i < kBatch; ++i) batch.data<int64_t>()[i] = row(rng);
      auto r = s->Run({{"ids", batch}}, Fetches{}, {step});
      ++(r.ok() ? acked : failed);
    }
  });
  testing::PauseFor(300ms);  // the point: steps are under way before the backup goes
  cluster.Kill(backup);
  const bool resynced = testing::WaitFor(
      [&] {
        auto m = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
        return m.ok() && m->epoch > map->epoch && !m->backup[0].empty() && m->synced[0] &&
               m->backup[0] != map->backup[0];
      },
      120s);
  testing::PauseFor(300ms);  // the point: steps go on after the copy (their rounds reach the new backup)
  stop = true;
  trainer.join();
  REQUIRE(resynced);
  CHECK(failed == 0);
  CHECK(acked > 0);

  REQUIRE(cluster.WaitBackups(2, 60000).ok());
  auto now = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
  REQUIRE(now.ok());
  auto cmp = s->CompareReplicas(*now);
  INFO(cmp.status().ToString());
  REQUIRE(cmp.ok());
  CHECK(cmp->unsynced.empty());
  CHECK(cmp->bytes > 2 * kRows * kDim * 4);
  for (const auto& d : cmp->differences) INFO(d);
  CHECK(cmp->differences.empty());
  // Every acknowledged step counted once.
  auto counted = s->Run({}, Fetches{counter});
  REQUIRE(counted.ok());
  CHECK((*counted)[0].data<float>()[0] == static_cast<float>(acked.load()));
}
