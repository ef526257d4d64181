// ShardMap without etcd: its text round-trips, bad text is refused by name,
// and planning keeps slots where they are as balance allows.
#include <catch2/catch.hpp>

#include <map>

#include "cluster/shard_map.h"

using namespace sf;
using cluster::ShardMap;

TEST_CASE("ShardMap: the text in etcd round-trips, moving and lost marks included", "[cluster][shard_map]") {
  ShardMap m;
  m.holder = {"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"};
  m.from = {"", "127.0.0.1:1", ""};
  m.lost_after = {0, 0, 12345};
  auto back = cluster::DecodeShardMap(cluster::EncodeShardMap(m));
  REQUIRE(back.ok());
  CHECK(*back == m);
  CHECK(back->moving());
  // Backups, synced ("+") or being copied ("+?"), beside the other marks.
  m.backup = {"127.0.0.1:2", "", "127.0.0.1:1"};
  m.synced = {1, 0, 0};
  const std::string text = cluster::EncodeShardMap(m);
  CHECK(text.find("127.0.0.1:1+127.0.0.1:2\n") != std::string::npos);
  CHECK(text.find("127.0.0.1:3+?127.0.0.1:1!12345\n") != std::string::npos);
  back = cluster::DecodeShardMap(text);
  REQUIRE(back.ok());
  CHECK(*back == m);
  CHECK(back->backup == m.backup);
  auto empty = cluster::DecodeShardMap(cluster::EncodeShardMap(ShardMap{}));
  REQUIRE(empty.ok());
  CHECK(empty->holder.empty());
}

TEST_CASE("ShardMap: text that does not parse is refused by name", "[cluster][shard_map]") {
  for (const std::string bad : {"", "v2 1\na\n", "v1 -1\n", "v1 5000\n", "v1 2\na\n", "v1 1\n\n", "v1 1\n<b\n",
                                "v1 1\na<\n", "v1 1\na!x\n", "v1 1\na!\n", "v1 1\na!99999999999999999999\n",
                                "v1 1\na+\n", "v1 1\na+?\n", "v1 1\n+b\n"}) {
    auto m = cluster::DecodeShardMap(bad);
    INFO(bad);
    CHECK(m.status().code() == Code::kDataLoss);
  }
}

TEST_CASE("ShardMap: planning spreads slots evenly and moves as few as balance allows", "[cluster][shard_map]") {
  const std::vector<std::string> two{"a", "b"}, three{"a", "b", "c"};
  ShardMap first = cluster::PlanShardMap(ShardMap{}, two, 8);
  REQUIRE(first.holder.size() == 8);
  // The first slots alternate, so a session of n tasks spans n members.
  CHECK(first.holder[0] != first.holder[1]);
  CHECK(!first.moving());
  ShardMap grown = cluster::PlanShardMap(first, three, 8);
  std::map<std::string, int> load;
  int moved = 0;
  for (int s = 0; s < 8; ++s) {
    ++load[grown.holder[s]];
    moved += grown.holder[s] != first.holder[s];
  }
  CHECK(load["a"] >= 2);
  CHECK(load["b"] >= 2);
  CHECK(load["c"] >= 2);
  CHECK(moved == load["c"]);  // only what the new member takes moves
  // A member gone: only its slots move; lost marks are kept.
  grown.lost_after[0] = 7;
  ShardMap shrunk = cluster::PlanShardMap(grown, {"a", "c"}, 8);
  for (int s = 0; s < 8; ++s) {
    CHECK(shrunk.holder[s] != "b");
    if (grown.holder[s] != "b") CHECK(shrunk.holder[s] == grown.holder[s]);
  }
  CHECK(shrunk.lost_after[0] == 7);
}

TEST_CASE("IsStaleEpoch: only a node's stale-map refusal", "[cluster][shard_map]") {
  CHECK(cluster::IsStaleEpoch(Aborted(std::string("node a: slot 3 ") + cluster::kStaleEpoch + " 5")));
  CHECK(!cluster::IsStaleEpoch(Aborted("step aborted")));
  CHECK(!cluster::IsStaleEpoch(Unavailable(cluster::kStaleEpoch)));
}

TEST_CASE("ShardMap: with replicas every slot has a backup on another member, spread evenly", "[cluster][shard_map]") {
  const std::vector<std::string> three{"a", "b", "c"};
  ShardMap m = cluster::PlanShardMap(ShardMap{}, three, 9, 2);
  std::map<std::string, int> backups;
  for (int s = 0; s < 9; ++s) {
    CHECK(!m.backup[s].empty());
    CHECK(m.backup[s] != m.holder[s]);
    CHECK_FALSE(m.synced[s]);  // new: the holder copies it first
    ++backups[m.backup[s]];
  }
  for (const auto& kv : backups) CHECK(kv.second == 3);
  // Synced backups stay synced while holder and backup stay.
  for (int s = 0; s < 9; ++s) m.synced[s] = 1;
  ShardMap same = cluster::PlanShardMap(m, three, 9, 2);
  CHECK(same == m);
  // A member gone: slots it held or backed get another backup, not synced;
  // a backup stays synced only with the same holder.
  ShardMap after = cluster::PlanShardMap(m, {"a", "c"}, 9, 2);
  for (int s = 0; s < 9; ++s) {
    CHECK(after.backup[s] != after.holder[s]);
    CHECK(after.backup[s] != "b");
    CHECK(after.holder[s] != "b");
    CHECK(after.synced[s] == (m.holder[s] == after.holder[s] && m.backup[s] == after.backup[s]));
  }
  // A slot that must leave its holder goes to its synced backup when that
  // is among the least loaded (it takes over without a copy).
  for (int s = 0; s < 9; ++s)
    if (m.holder[s] == "b" && m.backup[s] != "b") CHECK(after.holder[s] == m.backup[s]);
  // One member, or replicas 1: no backups.
  ShardMap one = cluster::PlanShardMap(m, {"a"}, 9, 2);
  for (int s = 0; s < 9; ++s) CHECK(one.backup[s].empty());
  ShardMap none = cluster::PlanShardMap(ShardMap{}, three, 9, 1);
  for (int s = 0; s < 9; ++s) CHECK(none.backup[s].empty());
}
