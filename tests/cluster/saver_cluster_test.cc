// Saver works with either session kind: a ClusterSession's checkpoints,
// written through it, restore into a local Session.
#include <catch2/catch.hpp>

#include "shardflow/checkpoint.h"
#include "shardflow/cluster.h"
#include "shardflow/ops.h"
#include "tests/support/in_process_nodes.h"
#include "tests/support/temp_dir.h"

using namespace sf;

TEST_CASE("Cluster: Saver saves a ClusterSession's variables and a local Session restores them", "[cluster]") {
  testing::TempDir tmp("saver_cluster");
  auto nodes = testing::StartInProcessNodes();
  REQUIRE(nodes.ok());

  Graph g;
  Output v, w;
  {
    auto s = g.DeviceScope("/job:worker/task:0");
    v = ops::Variable(g, "saver_v", ops::Const(g, std::vector<float>{1, 2, 3}, {3}));
  }
  {
    auto s = g.DeviceScope("/job:worker/task:1");
    w = ops::Variable(g, "saver_w", ops::Const(g, std::vector<float>{4, 5}, {2}));
  }
  auto bump = ops::AssignAdd(g, ops::VariableHandle(w), ops::Const(g, std::vector<float>{10, 10}, {2}));
  auto init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  auto cs = ClusterSession::Connect(g, nodes->SessionOptions());
  REQUIRE(cs.ok());
  REQUIRE((*cs)->Run({}, {}, {init}).ok());
  REQUIRE((*cs)->Run({}, {bump}).ok());

  const std::string dir = tmp.path + "/ckpt";
  Saver saver(cs->get(), dir, /*keep_last=*/1);
  auto first = saver.Save(1);
  REQUIRE(first.ok());
  auto second = saver.SaveIncremental(2);  // a cluster writes a full checkpoint
  REQUIRE(second.ok());
  auto listed = CheckpointDir::Open(dir);
  REQUIRE(listed.ok());
  auto ids = (*listed)->List();
  REQUIRE(ids.ok());
  CHECK(*ids == std::vector<int64_t>{*second});  // keep_last = 1
  auto summary = (*listed)->Describe(*second);
  REQUIRE(summary.ok());
  CHECK(summary->parent == -1);
  CHECK(summary->global_step == 2);
  listed->reset();

  Session local(g);
  Saver local_saver(&local, dir);
  int64_t step = -1;
  Status r = local_saver.Restore(-1, &step);
  INFO(r.ToString());
  REQUIRE(r.ok());
  CHECK(step == 2);
  auto values = local.Run({}, {v, w});
  REQUIRE(values.ok());
  CHECK((*values)[0].ToVector<float>() == std::vector<float>{1, 2, 3});
  CHECK((*values)[1].ToVector<float>() == std::vector<float>{14, 15});
}
