// Checkpoints, failure recovery and elasticity of cluster sessions over real
// node processes on 127.0.0.1: a dead member's tasks come back from the
// checkpoint and training goes on; with exact consistency the replay equals
// an undisturbed run; members joining and draining move tasks with their
// state and lose no update.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/local_cluster.h"
#include "shardflow/checkpoint_ops.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"
#include "tests/support/sparse_model.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;
using sf::testing::SparseModel;
using sf::testing::Params;
using sf::testing::Reference;
using sf::testing::RequireClose;
using sf::testing::Step;

namespace {

bool Contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

ClusterOptions Options(const examples::LocalCluster& c, int tasks, const std::string& ckpt = "") {
  ClusterOptions o;
  o.address = c.addresses()[0];
  o.tls_dir = c.tls_dir();
  o.tasks = tasks;
  o.checkpoint_dir = ckpt;
  return o;
}

// The index (in c.addresses()) of the member running task t of s.
int NodeOfTask(const examples::LocalCluster& c, const ClusterSession& s, int t) {
  const std::string addr = s.tasks()[t];
  for (size_t i = 0; i < c.addresses().size(); ++i)
    if (c.addresses()[i] == addr) return static_cast<int>(i);
  FAIL("task " << t << " runs on " << addr << ", not a node of the cluster");
  return -1;
}

}  // namespace

TEST_CASE("Cluster: Save and Restore move variables and slots through a checkpoint", "[cluster][recovery]") {
  testing::TempDir dir("sf_cluster_ckpt");
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120).ok());
  SparseModel m;
  auto s = ClusterSession::Connect(m.g, Options(cluster, 4));
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
  for (int i = 0; i < 5; ++i) REQUIRE(Step(**s, m, i).ok());
  const std::vector<float> at5 = Params(**s, m);
  auto id = (*s)->Save(dir.path, 5);
  INFO(id.status().ToString());
  REQUIRE(id.ok());
  for (int i = 5; i < 9; ++i) REQUIRE(Step(**s, m, i).ok());
  REQUIRE(Params(**s, m) != at5);
  int64_t step = -1;
  REQUIRE((*s)->Restore(dir.path, -1, &step).ok());
  CHECK(step == 5);
  RequireClose(Params(**s, m), at5, 0.0f);
  // A local session reads the cluster's checkpoint: the same layout.
  Session local(m.g);
  REQUIRE(local.Restore(dir.path).ok());
  RequireClose(Params(local, m), at5, 0.0f);
  // A graph whose table has another width is refused by name; nothing changes.
  Graph other;
  EmbeddingTableOptions eo;
  eo.num_shards = 3;
  NewEmbeddingTable(other, "emb", 100, 5, eo);
  auto s2 = ClusterSession::Connect(other, Options(cluster, 4));
  REQUIRE(s2.ok());
  Status bad = (*s2)->Restore(dir.path);
  INFO(bad.ToString());
  CHECK(bad.code() == Code::kInvalidArgument);
  CHECK(Contains(bad, "emb/part_0"));
  RequireClose(Params(**s, m), at5, 0.0f);
  CHECK((*s)->Restore(dir.path + "/missing").code() == Code::kNotFound);
}

TEST_CASE("Cluster: a killed member's tasks come back from the checkpoint and training goes on",
          "[cluster][recovery]") {
  testing::TempDir dir("sf_cluster_recover");
  examples::LocalCluster cluster;
  cluster.SetReplicas(1);  // no backups: a dead member's tasks come back from a checkpoint
  REQUIRE(cluster.Start(3, 120).ok());
  SparseModel m;
  auto so = Options(cluster, 6, dir.path);
  so.elastic = false;  // the test calls Recover itself
  auto s = ClusterSession::Connect(m.g, so);
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
  for (int i = 0; i < 10; ++i) REQUIRE(Step(**s, m, i).ok());
  REQUIRE((*s)->Save(dir.path, 10).ok());
  const std::vector<float> saved = Params(**s, m);
  for (int i = 10; i < 13; ++i) REQUIRE(Step(**s, m, i).ok());
  const std::vector<float> live = Params(**s, m);
  const int victim = NodeOfTask(cluster, **s, 1);
  const std::string victim_addr = cluster.addresses()[victim];
  cluster.Kill(victim);
  const auto t0 = std::chrono::steady_clock::now();
  auto failed = Step(**s, m, 13);
  const double detect_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(failed.status().ToString());
  REQUIRE(!failed.ok());
  CHECK(failed.status().code() == Code::kUnavailable);
  CHECK(Contains(failed.status(), victim_addr));
  CHECK(detect_s < 2.0);
  auto change = (*s)->Recover();
  INFO(change.status().ToString());
  REQUIRE(change.ok());
  CHECK(change->lost == std::vector<std::string>{victim_addr});
  CHECK(change->restored_tasks.size() == 2);
  CHECK(change->variables_restored > 0);
  CHECK(change->bytes_restored > 0);
  CHECK(change->global_step == 10);
  for (const std::string& a : (*s)->tasks()) CHECK(a != victim_addr);
  // Restored variables are back at step 10, the others kept their live
  // state (the failed step 13 may have updated some of them before it was
  // aborted: without exact consistency a failed step is not rolled back).
  const std::vector<float> after = Params(**s, m);
  size_t from_ckpt = 0, kept = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    if (after[i] == live[i]) ++kept;
    else if (after[i] == saved[i]) ++from_ckpt;
  }
  CHECK(from_ckpt > 0);
  CHECK(kept > after.size() / 3);
  for (int i = 13; i < 60; ++i) {
    auto l = Step(**s, m, i);
    INFO(l.status().ToString());
    REQUIRE(l.ok());
  }
  // The model still learns: its loss on a fixed batch is near an undisturbed run's.
  Session ref(m.g);
  REQUIRE(ref.Run({}, std::vector<Output>{}, {m.init}).ok());
  for (int i = 0; i < 60; ++i) REQUIRE(Step(ref, m, i).ok());
  const float disturbed = testing::EvalLoss(**s, m, 0), undisturbed = testing::EvalLoss(ref, m, 0);
  INFO("loss " << disturbed << " against undisturbed " << undisturbed);
  CHECK(std::isfinite(disturbed));
  CHECK(disturbed <= undisturbed * 1.5f + 0.02f);
}

TEST_CASE("Cluster: exact recovery replays from the checkpoint to the undisturbed parameters",
          "[cluster][recovery]") {
  testing::TempDir dir("sf_cluster_exact");
  SparseModel m;
  const int kSteps = 24;
  const std::vector<float> reference = Reference(m, kSteps);
  examples::LocalCluster cluster;
  cluster.SetReplicas(1);  // no backups: a dead member's tasks come back from a checkpoint
  REQUIRE(cluster.Start(3, 120).ok());
  auto so = Options(cluster, 6, dir.path);
  so.elastic = false;
  auto s = ClusterSession::Connect(m.g, so);
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
  bool killed = false;
  for (int i = 0; i < kSteps;) {
    if (i % 5 == 0) REQUIRE((*s)->Save(dir.path, i).ok());
    if (i == 13 && !killed) {
      cluster.Kill(NodeOfTask(cluster, **s, 4));
      killed = true;
    }
    auto l = Step(**s, m, i);
    if (l.ok()) {
      ++i;
      continue;
    }
    INFO(l.status().ToString());
    REQUIRE(l.status().code() == Code::kUnavailable);
    auto change = (*s)->Recover(/*roll_back_all=*/true);
    INFO(change.status().ToString());
    REQUIRE(change.ok());
    REQUIRE(change->global_step == 10);
    i = static_cast<int>(change->global_step);  // replay from the checkpoint's step
  }
  REQUIRE(killed);
  RequireClose(Params(**s, m), reference, 1e-5f);
  CHECK((*s)->Changes().size() == 1);
}

TEST_CASE("Cluster: a dead member without a checkpoint is a clear error", "[cluster][recovery]") {
  examples::LocalCluster cluster;
  cluster.SetReplicas(1);  // no backups: a dead member's tasks come back from a checkpoint
  REQUIRE(cluster.Start(2, 120).ok());
  SparseModel m;
  auto so = Options(cluster, 2);
  so.elastic = false;
  auto s = ClusterSession::Connect(m.g, so);
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
  cluster.Kill(1);
  REQUIRE(!Step(**s, m, 0).ok());
  auto change = (*s)->Recover();
  INFO(change.status().ToString());
  REQUIRE(change.status().code() == Code::kFailedPrecondition);
  CHECK(Contains(change.status(), "checkpoint_dir is empty"));
  // Both tasks now run on the survivor; re-initialising lets training go on.
  for (const auto& a : (*s)->tasks()) CHECK(a == cluster.addresses()[0]);
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
  REQUIRE(Step(**s, m, 0).ok());
}

TEST_CASE("Cluster: scaling 1 -> 2 -> 3 -> 2 members during training loses no update", "[cluster][elastic]") {
  SparseModel m;
  const int kSteps = 40;
  const std::vector<float> reference = Reference(m, kSteps);
  examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 120).ok());
  auto s = ClusterSession::Connect(m.g, Options(cluster, 6));
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
  auto members_used = [&] {
    const std::vector<std::string> tasks = (*s)->tasks();
    std::set<std::string> used(tasks.begin(), tasks.end());
    return used.size();
  };
  for (int i = 0; i < kSteps; ++i) {
    if (i == 10 || i == 20) REQUIRE(cluster.AddNode(120).ok());
    if (i == 30) {
      // The CLI's drain, as an operator would run it: the node leaves after
      // the session moved its tasks away (before this step).
      const std::string cmd = std::string(SF_BIN_DIR) + "/shardflow node drain " + cluster.addresses()[1] +
                              " --etcd " + cluster.etcd_endpoint() + " --tls-dir " + cluster.tls_dir() +
                              " --wait-s 0 >/dev/null";
      REQUIRE(std::system(cmd.c_str()) == 0);
    }
    // A join or drain reaches the session by a message, which the node sends
    // before answering the joiner (or `node drain`): the session's reader
    // still has to take it in. ClusterSession offers no query for the
    // membership it has heard of (only tasks(), which changes at the step),
    // so this is a margin, not a wait on the condition.
    if (i == 10 || i == 20 || i == 30) testing::PauseFor(300ms);
    // A slot moves to a joined node once copied there, and off a draining
    // one the same way (its old holder serves it meanwhile).
    if (i == 10 || i == 20 || i == 30)
      REQUIRE(testing::WaitFor([&] {
        auto map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
        if (!map.ok() || map->holder.size() < 6) return false;
        std::set<std::string> used(map->holder.begin(), map->holder.begin() + 6);
        if (i == 30) return used.size() == 2 && !used.count(cluster.addresses()[1]);
        return used.size() == (i == 10 ? 2u : 3u);
      }, 30s));
    auto l = Step(**s, m, i);
    INFO("step " << i << ": " << l.status().ToString());
    REQUIRE(l.ok());
    if (i == 10) CHECK(members_used() == 2);
    if (i == 20) CHECK(members_used() == 3);
    if (i == 30) {
      CHECK(members_used() == 2);
      for (const auto& a : (*s)->tasks()) CHECK(a != cluster.addresses()[1]);
    }
  }
  CHECK(cluster.WaitExit(1, 10000));  // the drained node left by itself
  const auto changes = (*s)->Changes();
  REQUIRE(changes.size() == 3);
  CHECK(changes[0].added.size() == 1);
  CHECK(changes[1].added.size() == 1);
  CHECK(changes[2].drained == std::vector<std::string>{cluster.addresses()[1]});
  // The placement leader moved the tasks' state (nothing came from a checkpoint).
  for (const auto& c : changes) {
    CHECK(c.restored_tasks.empty());
    CHECK(!c.moved_tasks.empty());
  }
  // Every update applied once: the counter and the parameters match one process.
  const std::vector<float> got = Params(**s, m);
  CHECK(got.back() == static_cast<float>(kSteps));
  RequireClose(got, reference, 1e-5f);
}

TEST_CASE("Cluster: the in-graph Save op gathers variables from every node into one checkpoint",
          "[cluster][recovery]") {
  testing::TempDir dir("sf_cluster_save_op");
  SparseModel m;
  // On a node the op's dir is relative to the node's --checkpoint-dir.
  Output save = ops::SaveVariables(m.g, "ckpt", ops::Const(m.g, int64_t{3}));
  REQUIRE(save.valid());
  examples::LocalCluster cluster;
  cluster.SetNodeArgs({"--checkpoint-dir", dir.path});
  REQUIRE(cluster.Start(2, 120).ok());
  auto s = ClusterSession::Connect(m.g, Options(cluster, 4));
  REQUIRE(s.ok());
  REQUIRE((*s)->Run({}, std::vector<Output>{}, {m.init}).ok());
  for (int i = 0; i < 3; ++i) REQUIRE(Step(**s, m, i).ok());
  auto id = (*s)->Run({}, std::vector<Output>{save});
  INFO(id.status().ToString());
  REQUIRE(id.ok());
  Session local(m.g);
  int64_t step = -1;
  REQUIRE(local.Restore(dir.path + "/ckpt", -1, &step).ok());
  CHECK(step == 3);
  RequireClose(Params(local, m), Params(**s, m), 0.0f);
}
