// The membership as etcd holds it, folded without etcd (cluster/member_table.h).
#include <catch2/catch.hpp>

#include "cluster/member_table.h"

namespace sf::cluster {
namespace {

const std::string kPrefix = "/shardflow/test/";

EtcdKeyValue Kv(const std::string& name, const std::string& value, int64_t created, int64_t lease = 7) {
  EtcdKeyValue kv;
  kv.key = MemberKey(kPrefix, name);
  kv.value = value;
  kv.create_revision = created;
  kv.mod_revision = created;
  kv.lease = lease;
  return kv;
}

EtcdWatchEvent Put(EtcdKeyValue kv) {
  EtcdWatchEvent e;
  e.type = EtcdWatchEvent::Type::kPut;
  e.kv = std::move(kv);
  return e;
}

EtcdWatchEvent Del(const std::string& name) {
  EtcdWatchEvent e;
  e.type = EtcdWatchEvent::Type::kDelete;
  e.kv.key = MemberKey(kPrefix, name);
  return e;
}

TEST_CASE("MemberTable: members in join order, states and lives from etcd's keys") {
  MemberTable t(kPrefix);
  std::vector<std::string> bad;
  t.Reset({Kv("b", EncodeMemberValue("127.0.0.1:2", false), 9), Kv("a", EncodeMemberValue("127.0.0.1:1", false), 5)},
          &bad);
  CHECK(bad.empty());
  auto m = t.Members();
  REQUIRE(m.size() == 2);
  CHECK(m[0].name == "a");  // joined first, though its key sorts first too
  CHECK(m[1].name == "b");
  CHECK(m[1].life == 9);
  CHECK(m[1].lease == 7);
  // Draining is a change; the same value again (a keepalive's rewrite) is not.
  CHECK(t.Apply({Put(Kv("a", EncodeMemberValue("127.0.0.1:1", true), 5))}));
  CHECK(t.Find("a")->leaving);
  CHECK_FALSE(t.Apply({Put(Kv("a", EncodeMemberValue("127.0.0.1:1", true), 5))}));
  // A new life of b (its lease ended and it registered again) sorts last.
  CHECK(t.Apply({Del("b"), Put(Kv("c", EncodeMemberValue("127.0.0.1:3", false), 12)),
                 Put(Kv("b", EncodeMemberValue("127.0.0.1:2", false), 14))}));
  m = t.Members();
  REQUIRE(m.size() == 3);
  CHECK(m[0].name == "a");
  CHECK(m[1].name == "c");
  CHECK(m[2].name == "b");
  CHECK(m[2].life == 14);
  CHECK(t.FindAddress("127.0.0.1:3")->name == "c");
  CHECK(t.FindAddress("127.0.0.1:9") == nullptr);
  // Deleting what is not there changes nothing; an error event changes nothing.
  CHECK_FALSE(t.Apply({Del("zzz")}));
  EtcdWatchEvent err;
  err.type = EtcdWatchEvent::Type::kError;
  err.error = OutOfRange("compacted");
  CHECK_FALSE(t.Apply({err}));
  CHECK(t.Members().size() == 3);
}

TEST_CASE("MemberTable: malformed keys and values are skipped and named, never listed") {
  MemberTable t(kPrefix);
  std::vector<std::string> bad;
  EtcdKeyValue other;
  other.key = "/shardflow/other/members/x";
  other.value = EncodeMemberValue("127.0.0.1:1", false);
  t.Reset({Kv("ok", EncodeMemberValue("127.0.0.1:1", false), 1), Kv("noversion", "127.0.0.1:1 alive", 2),
           Kv("badport", EncodeMemberValue("127.0.0.1:99999", false), 3),
           Kv("noport", EncodeMemberValue("127.0.0.1", false), 4), Kv("state", "v1 127.0.0.1:5 sleeping", 5),
           Kv("bad name!", EncodeMemberValue("127.0.0.1:6", false), 6), Kv(std::string(100, 'x'), "v1 a:1 alive", 7),
           other},
          &bad);
  CHECK(t.Members().size() == 1);
  CHECK(bad.size() == 7);
  for (const auto& b : bad) CHECK(b.find("/shardflow/") != std::string::npos);
  bad.clear();
  CHECK_FALSE(t.Apply({Put(Kv("junk", "v1", 9))}, &bad));
  CHECK(bad.size() == 1);
}

TEST_CASE("MemberTable: cluster and node names are checked before they become etcd keys") {
  CHECK(ValidMemberName("node@127.0.0.1:7000"));
  CHECK(ValidMemberName("worker-7.a_b"));
  CHECK_FALSE(ValidMemberName(""));
  CHECK_FALSE(ValidMemberName("rack/7"));
  CHECK_FALSE(ValidMemberName("a b"));
  CHECK_FALSE(ValidMemberName(std::string(65, 'a')));
  CHECK(ClusterPrefix("prod-1").ok());
  CHECK(*ClusterPrefix("prod-1") == "/shardflow/prod-1/");
  CHECK(ClusterPrefix("").status().code() == Code::kInvalidArgument);
  CHECK(ClusterPrefix("a/b").status().code() == Code::kInvalidArgument);
  CHECK(ClusterPrefix(std::string(65, 'a')).status().code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace sf::cluster
