// Node checkpoints over real node processes on 127.0.0.1 sharing one
// --checkpoint-dir: every node writes and reads its tasks' variables itself
// (ClusterSession::SaveOnNodes, RestoreFromNodes, Recover with
// ClusterOptions::node_checkpoint_dir), and the values are exact.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "tests/support/sparse_model.h"
#include "tests/support/temp_dir.h"

using namespace sf;
using sf::testing::Params;
using sf::testing::Reference;
using sf::testing::RequireClose;
using sf::testing::SparseModel;
using sf::testing::Step;

namespace {

bool Contains(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

// n nodes sharing root as their --checkpoint-dir.
void StartNodes(examples::LocalCluster& cluster, int n, const std::string& root) {
  if (!root.empty()) cluster.SetNodeArgs({"--checkpoint-dir", root});
  REQUIRE(cluster.Start(n, 120).ok());
}

std::unique_ptr<ClusterSession> Connect(const examples::LocalCluster& c, const SparseModel& m, int tasks,
                                        bool elastic = true) {
  ClusterOptions o;
  o.address = c.addresses()[0];
  o.tls_dir = c.tls_dir();
  o.tasks = tasks;
  o.node_checkpoint_dir = "ck";
  o.elastic = elastic;
  auto s = ClusterSession::Connect(m.g, o);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
  return std::move(s).value();
}

void Train(ClusterSession& s, const SparseModel& m, int from, int to) {
  for (int i = from; i < to; ++i) {
    auto r = Step(s, m, i);
    INFO("step " << i << ": " << r.status().ToString());
    REQUIRE(r.ok());
  }
}

size_t Pieces(const std::string& dir) {
  size_t n = 0;
  if (!std::filesystem::exists(dir)) return 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    n += e.path().filename().string().rfind("pieces-", 0) == 0;
  return n;
}

}  // namespace

TEST_CASE("Cluster: every node saves and restores its own tasks' variables, exactly", "[cluster][checkpoint]") {
  testing::TempDir root("sf_node_ckpt");
  examples::LocalCluster cluster;
  StartNodes(cluster, 3, root.path);
  SparseModel m;
  auto s = Connect(cluster, m, 6);
  Train(*s, m, 0, 8);
  const std::vector<float> saved = Params(*s, m);
  auto id = s->SaveOnNodes("ck", 8);
  INFO(id.status().ToString());
  REQUIRE(id.ok());
  // One piece per task holding variables, each written by its own node.
  size_t tasks_with_pieces = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root.path + "/ck"))
    tasks_with_pieces += e.is_directory() && e.path().filename().string().rfind("task-", 0) == 0;
  CHECK(tasks_with_pieces >= 2);
  CHECK(Pieces(root.path + "/ck") == 1);
  Train(*s, m, 8, 12);
  CHECK(Params(*s, m) != saved);
  int64_t step = -1;
  Status restored = s->RestoreFromNodes("ck", -1, &step);
  INFO(restored.ToString());
  REQUIRE(restored.ok());
  CHECK(step == 8);
  CHECK(Params(*s, m) == saved);  // bit for bit, slots included below
  // Training from the restored state replays the undisturbed run.
  Train(*s, m, 8, 14);
  RequireClose(Params(*s, m), Reference(m, 14), 1e-5f);
}

TEST_CASE("Cluster: a killed member's tasks come back from the node checkpoint, and replay is exact",
          "[cluster][checkpoint][recovery]") {
  testing::TempDir root("sf_node_ckpt_recover");
  examples::LocalCluster cluster;
  cluster.SetReplicas(1);  // no backups: a dead member's tasks come back from a checkpoint
  StartNodes(cluster, 3, root.path);
  SparseModel m;
  auto s = Connect(cluster, m, 6, /*elastic=*/false);
  Train(*s, m, 0, 10);
  REQUIRE(s->SaveOnNodes("ck", 10).ok());
  Train(*s, m, 10, 13);
  cluster.Kill(1);
  CHECK(!Step(*s, m, 13).ok());
  // Every variable back at step 10, read by the nodes now holding the tasks.
  auto change = s->Recover(/*roll_back_all=*/true);
  INFO(change.status().ToString());
  REQUIRE(change.ok());
  CHECK(change->lost == std::vector<std::string>{cluster.addresses()[1]});
  CHECK(change->global_step == 10);
  CHECK(change->variables_restored > 0);
  CHECK(change->bytes_restored > 0);
  for (const std::string& a : s->tasks()) CHECK(a != cluster.addresses()[1]);
  Train(*s, m, 10, 20);
  RequireClose(Params(*s, m), Reference(m, 20), 1e-5f);
}

TEST_CASE("Cluster: node checkpoints keep the newest keep_last and delete the others' pieces",
          "[cluster][checkpoint]") {
  testing::TempDir root("sf_node_ckpt_keep");
  examples::LocalCluster cluster;
  StartNodes(cluster, 2, root.path);
  SparseModel m;
  auto s = Connect(cluster, m, 4);
  std::vector<int64_t> ids;
  std::vector<std::vector<float>> values;
  for (int k = 0; k < 4; ++k) {
    Train(*s, m, 2 * k, 2 * k + 2);
    values.push_back(Params(*s, m));
    auto id = s->SaveOnNodes("ck", 2 * k + 2, /*keep_last=*/2);
    REQUIRE(id.ok());
    ids.push_back(*id);
  }
  CHECK(Pieces(root.path + "/ck") == 2);
  Status gone = s->RestoreFromNodes("ck", ids[0]);
  CHECK(gone.code() == Code::kNotFound);
  REQUIRE(s->RestoreFromNodes("ck", ids[2]).ok());
  CHECK(Params(*s, m) == values[2]);
}

TEST_CASE("Cluster: node checkpoints refuse what they cannot do, naming why", "[cluster][checkpoint]") {
  SparseModel m;
  SECTION("nodes without --checkpoint-dir") {
    examples::LocalCluster cluster;
    StartNodes(cluster, 2, "");
    auto s = Connect(cluster, m, 2);
    auto id = s->SaveOnNodes("ck", 1);
    REQUIRE(!id.ok());
    CHECK(id.status().code() == Code::kFailedPrecondition);
    CHECK(Contains(id.status(), "--checkpoint-dir"));
    // Steps go on after the refusal.
    Train(*s, m, 0, 2);
  }
  SECTION("paths outside the nodes' root, and a checkpoint that is not there") {
    testing::TempDir root("sf_node_ckpt_bad");
    examples::LocalCluster cluster;
    StartNodes(cluster, 2, root.path);
    auto s = Connect(cluster, m, 2);
    for (const std::string bad : {"/tmp/elsewhere", "../up", "a/../../up", ""}) {
      auto id = s->SaveOnNodes(bad, 1);
      INFO(bad << ": " << id.status().ToString());
      REQUIRE(!id.ok());
      CHECK(id.status().code() == Code::kInvalidArgument);
    }
    CHECK(!std::filesystem::exists("/tmp/elsewhere/index"));
    Status missing = s->RestoreFromNodes("never_saved");
    CHECK(missing.code() == Code::kNotFound);
    CHECK(Contains(missing, "never_saved"));
    Train(*s, m, 0, 2);
  }
}
