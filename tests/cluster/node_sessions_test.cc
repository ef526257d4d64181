// NodeSessions: a session is its registering client's (another client
// neither adds to it, runs in it nor closes it), what a client and all may
// make a node hold is bounded with errors naming the bound, and a closed
// session's partitions count no more.
#include <catch2/catch.hpp>

#include "cluster/node_sessions.h"

using namespace sf;
using cluster::NodeSessions;

namespace {

// Clients are keys only, never used: distinct addresses stand for distinct connections.
struct Clients {
  char a = 0, b = 0;
  const net::Connection* first() const { return reinterpret_cast<const net::Connection*>(&a); }
  const net::Connection* second() const { return reinterpret_cast<const net::Connection*>(&b); }
};

NodeSessions::Limits Small() {
  NodeSessions::Limits l;
  l.sessions_per_client = 2;
  l.sessions = 3;
  l.partitions_per_session = 2;
  l.partitions = 4;
  return l;
}

}  // namespace

TEST_CASE("NodeSessions: a session is its client's alone", "[node_sessions]") {
  NodeSessions sessions("n1", Small());
  Clients c;
  auto made = sessions.Add(7, 1, {3, 5}, c.first(), "client-a", "team");
  REQUIRE(made.ok());
  CHECK(!made->host);  // new: the node makes its runtime
  CHECK(sessions.Has(7));
  CHECK(!sessions.IsOthers(7, c.first()));
  CHECK(sessions.IsOthers(7, c.second()));
  CHECK(!sessions.IsOthers(8, c.second()));  // unknown: nobody's

  const auto taken = sessions.Add(7, 2, {-1, 0}, c.second(), "client-b", "team");
  CHECK(taken.status().code() == Code::kPermissionDenied);
  CHECK(taken.status().message() == "session 7 on node n1 belongs to another client");

  const NodeSessions::Partition mine = sessions.Find(7, 1, c.first());
  CHECK(mine.ns == "team");
  CHECK(mine.slot == NodeSessions::Slot{3, 5});
  CHECK(sessions.Find(7, 9, c.first()).slot == NodeSessions::Slot{-1, 0});  // a partition placed by no map
  CHECK(sessions.Find(7, 1, c.second()).ns.empty());  // another client's session is as unknown as none
  CHECK(!sessions.Close(7, c.second()));
  CHECK(sessions.Has(7));
  CHECK(sessions.Close(7, c.first()));
  CHECK(!sessions.Has(7));
  CHECK(!sessions.Close(7, c.first()));
}

TEST_CASE("NodeSessions: sessions and partitions are bounded per client, per session and in all", "[node_sessions]") {
  NodeSessions sessions("n1", Small());
  Clients c;
  REQUIRE(sessions.Add(1, 1, {-1, 0}, c.first(), "a", "").ok());
  REQUIRE(sessions.Add(1, 1, {-1, 0}, c.first(), "a", "").ok());  // the same partition again: nothing new
  REQUIRE(sessions.Add(1, 2, {-1, 0}, c.first(), "a", "").ok());
  const auto per_session = sessions.Add(1, 3, {-1, 0}, c.first(), "a", "");
  CHECK(per_session.status().code() == Code::kResourceExhausted);
  CHECK(per_session.status().message() == "session 1 has 2 partitions on node n1 already");

  REQUIRE(sessions.Add(2, 1, {-1, 0}, c.first(), "a", "").ok());
  const auto per_client = sessions.Add(3, 1, {-1, 0}, c.first(), "a", "");
  CHECK(per_client.status().code() == Code::kResourceExhausted);
  CHECK(per_client.status().message() == "client a has 2 sessions on node n1 already (at most 2)");

  REQUIRE(sessions.Add(4, 1, {-1, 0}, c.second(), "b", "other").ok());  // 4 partitions now
  const auto all_sessions = sessions.Add(5, 1, {-1, 0}, c.second(), "b", "other");
  CHECK(all_sessions.status().message() == "node n1 holds 3 sessions already (at most 3)");
  const auto all_partitions = sessions.Add(4, 2, {-1, 0}, c.second(), "b", "other");
  CHECK(all_partitions.status().message() == "node n1 holds 4 partitions already (at most 4)");

  CHECK(sessions.CountByNamespace() == std::map<std::string, int64_t>{{"", 2}, {"other", 1}});
  CHECK(sessions.CloseClient(c.first()) == 2);  // its client went away
  CHECK(sessions.size() == 1);
  REQUIRE(sessions.Add(4, 2, {-1, 0}, c.second(), "b", "other").ok());  // their partitions count no more
  CHECK(sessions.CloseNamespace("other") == 1);
  CHECK(sessions.empty());
  REQUIRE(sessions.Add(9, 1, {-1, 0}, c.first(), "a", "").ok());
  sessions.Clear();
  CHECK(sessions.empty());
}
