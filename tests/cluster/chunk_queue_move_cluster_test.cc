// A chunk queue's state moves with its slot: the node holding the queue's
// task (slot 0) drains, or is killed (its backup promoted), mid-epoch while
// two workers train; the queue goes on at the new holder from where it was
// (tickets the workers hold stay valid), so every line is trained exactly
// once and the workers finish. Before the queue's state was a variable of
// its slot, the new holder started the epoch again: lines trained twice.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "examples/common/local_cluster.h"
#include "kernels/criteo_format.h"
#include "shardflow/chunk_queue_ops.h"
#include "shardflow/cluster.h"
#include "shardflow/queue_runner.h"
#include "tests/support/criteo_files.h"
#include "tests/support/shared_input_run.h"
#include "tests/support/temp_dir.h"

using namespace sf;
using sf::testing::CriteoLine;
using sf::testing::TempDir;
using sf::testing::WriteFile;
using sf::testing::SharedInputRun;



namespace {

// The cluster's map once slot 0 has a synced backup (its state on a second node).
Result<ShardMapInfo> SyncedMap(examples::LocalCluster& cluster) {
  Result<ShardMapInfo> map = Unavailable("no map read");
  SharedInputRun::WaitFor(
      [&] {
        map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
        return map.ok() && map->holder.size() >= 2 && map->synced.size() >= 1 && map->synced[0] &&
               !map->holder[0].empty() && map->moving_from[0].empty();
      },
      60000);
  return map;
}

// An address of the cluster other than `not_this` (the sessions' first contact).
std::string OtherThan(const examples::LocalCluster& cluster, const std::string& not_this) {
  for (const std::string& a : cluster.addresses())
    if (a != not_this) return a;
  return "";
}

// Starts 3 nodes with replicas 2 and the run on them (connected to a node
// other than the queue's), waits until it is mid-epoch and slot 0 has a
// synced backup; the map then, whose holder[0] holds the queue.
ShardMapInfo StartMidEpoch(examples::LocalCluster& cluster, SharedInputRun& run) {
  cluster.SetReplicas(2);
  cluster.SetNodeArgs({"--data-dir", run.dir()});
  REQUIRE(cluster.Start(3, 180).ok());
  REQUIRE(cluster.WaitMembers(3, 30000).ok());
  auto before = SyncedMap(cluster);
  REQUIRE(before.ok());
  run.Start(cluster, OtherThan(cluster, before->holder[0]));
  run.WaitMidEpoch();
  auto map = SyncedMap(cluster);
  REQUIRE(map.ok());
  return *map;
}

}  // namespace

TEST_CASE("A chunk queue's state moves with its slot: the queue's node drains mid-epoch, every line trained once",
          "[cluster][chunk_queue][chunk_queue_move]") {
  SharedInputRun run("sf_chunk_move_drain");
  examples::LocalCluster cluster;
  const ShardMapInfo map = StartMidEpoch(cluster, run);
  const std::string from = map.holder[0];
  INFO("slot 0 on " << from << ", its backup " << map.backup[0]);
  const auto drained = std::chrono::steady_clock::now();
  REQUIRE(DrainMember(cluster.etcd_endpoint(), cluster.tls_dir(), from, 0, "default", "", cluster.insecure()).ok());
  run.CheckGoesOnAndTrainsEveryLineOnce(cluster, run.steps());
  // The rows worker 0's row queue held went with it: the chunk queue hands
  // their chunks out again at the worker's next Take (its new row queue is
  // another), not once their leases (30 s) end.
  CHECK(std::chrono::steady_clock::now() - drained < std::chrono::seconds(25));
  auto after = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
  REQUIRE(after.ok());
  CHECK(after->holder[0] != from);  // the queue did move
  CHECK(run.unsure_rows() == 0);      // a handover fails no training step
}

TEST_CASE("A chunk queue's state survives its node's death: the backup goes on mid-epoch, every line trained once",
          "[cluster][chunk_queue][chunk_queue_move]") {
  SharedInputRun run("sf_chunk_move_kill");
  examples::LocalCluster cluster;
  const ShardMapInfo map = StartMidEpoch(cluster, run);
  const std::string from = map.holder[0];
  INFO("slot 0 on " << from << ", its backup " << map.backup[0]);
  const int victim = cluster.IndexOf(from);
  REQUIRE(victim >= 0);
  cluster.Kill(victim);
  run.CheckGoesOnAndTrainsEveryLineOnce(cluster, run.steps());
  // A training step that failed with the queue's node runs again on the
  // promoted backup (its report repeated is a no-op): none is given up.
  CHECK(run.unsure_rows() == 0);
}
