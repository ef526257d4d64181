// MemberView: the node is first in every list whatever etcd's order, a
// change is reported once with a line per member that joined or left, a
// node's own drain is kept until etcd marks it too, and only a newer shard
// map replaces the one held.
#include <catch2/catch.hpp>

#include "cluster/member_view.h"

using namespace sf;
using cluster::MemberRecord;
using cluster::MemberView;

namespace {

std::vector<std::string> Addresses(const std::vector<net::Member>& ms) {
  std::vector<std::string> out;
  for (const auto& m : ms) out.push_back(m.address);
  return out;
}

}  // namespace

TEST_CASE("MemberView: itself first, a change reported once, a line per member joined or left", "[member_view]") {
  MemberView view(net::Member{});
  view.SetSelf("n1", "127.0.0.1:1");
  std::vector<std::string> lines;
  auto log = [&](const std::string& l) { lines.push_back(l); };
  bool leaving = true;
  const std::vector<MemberRecord> two = {{"n2", "127.0.0.1:2", false, 9, 20}, {"n1", "127.0.0.1:1", false, 9, 10}};
  CHECK(view.Update(two, &leaving, log));
  CHECK(!leaving);
  CHECK(Addresses(view.Members()) == std::vector<std::string>{"127.0.0.1:1", "127.0.0.1:2"});
  CHECK(view.Members()[0].incarnation == 10);  // its own life, from etcd
  CHECK(lines == std::vector<std::string>{"member n2 (127.0.0.1:2) joined"});
  lines.clear();
  CHECK(!view.Update(two, &leaving, log));  // the same list: no change, no line
  CHECK(lines.empty());

  // n2 restarted: a new life at the same address is another member.
  const std::vector<MemberRecord> restarted = {{"n1", "127.0.0.1:1", false, 9, 10}, {"n2", "127.0.0.1:2", false, 11, 30}};
  CHECK(view.Update(restarted, &leaving, log));
  CHECK(lines == std::vector<std::string>{"member n2 (127.0.0.1:2) joined", "member n2 (127.0.0.1:2) left"});
  lines.clear();
  CHECK(view.Update({{"n1", "127.0.0.1:1", false, 9, 10}}, &leaving, log));
  CHECK(lines == std::vector<std::string>{"member n2 (127.0.0.1:2) left"});
  CHECK(Addresses(view.Members()) == std::vector<std::string>{"127.0.0.1:1"});
}

TEST_CASE("MemberView: draining members are told, and this node's drain holds until etcd has it", "[member_view]") {
  MemberView view(net::Member{});
  view.SetSelf("n1", "127.0.0.1:1");
  bool leaving = false;
  CHECK(view.Update({{"n1", "127.0.0.1:1", false, 1, 1}, {"n2", "127.0.0.1:2", true, 1, 2}}, &leaving, nullptr));
  CHECK(!leaving);
  CHECK(Addresses(view.Snapshot().leaving) == std::vector<std::string>{"127.0.0.1:2"});
  view.MarkSelfLeaving();
  CHECK(Addresses(view.Snapshot().leaving) == std::vector<std::string>{"127.0.0.1:1", "127.0.0.1:2"});
  // etcd does not list this node's drain yet: it is kept.
  CHECK(!view.Update({{"n1", "127.0.0.1:1", false, 1, 1}, {"n2", "127.0.0.1:2", true, 1, 2}}, &leaving, nullptr));
  CHECK(Addresses(view.Snapshot().leaving) == std::vector<std::string>{"127.0.0.1:1", "127.0.0.1:2"});
  CHECK(view.Update({{"n1", "127.0.0.1:1", true, 1, 1}}, &leaving, nullptr));
  CHECK(leaving);  // etcd marks it: the node drains
}

TEST_CASE("MemberView: only a newer shard map replaces the one held, and sessions are told it", "[member_view]") {
  MemberView view(net::Member{"n1", "127.0.0.1:1", 0});
  view.SetMapSlots(2);
  cluster::ShardMap m;
  m.epoch = 5;
  m.holder = {"127.0.0.1:1", "127.0.0.1:2"};
  m.from = {"", ""};
  m.lost_after = {0, 0};
  CHECK(view.SetMap(m));
  cluster::ShardMap older = m;
  older.epoch = 4;
  older.holder = {"x", "y"};
  CHECK(!view.SetMap(older));
  CHECK(!view.SetMap(m));  // the same epoch: nothing new
  const net::Membership told = view.Snapshot();
  CHECK(told.map_slots == 2);
  CHECK(told.map_epoch == 5);
  CHECK(told.map_holder == m.holder);
}
