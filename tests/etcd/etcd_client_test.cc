// EtcdClient and EtcdElection against a real etcd 3.4 over mutual TLS
// (EtcdProcess), and against fake servers that answer garbage.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "cluster/etcd_election.h"
#include "cluster/etcd_json.h"
#include "cluster/etcd_transport.h"
#include "tests/etcd/etcd_fixture.h"
#include "tests/etcd/fake_http_server.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace sf {
namespace {

using cluster::EtcdClient;
using cluster::EtcdCompare;
using cluster::EtcdElection;
using cluster::EtcdOp;
using cluster::EtcdWatchEvent;
using std::chrono::milliseconds;

// Every event a watch delivered, in order.
struct Events {
  std::mutex mu;
  std::vector<EtcdWatchEvent> all;
  cluster::EtcdWatchCallback Callback() {
    return [this](const std::vector<EtcdWatchEvent>& evs) {
      std::lock_guard<std::mutex> l(mu);
      all.insert(all.end(), evs.begin(), evs.end());
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> l(mu);
    return all.size();
  }
  std::vector<EtcdWatchEvent> Get() {
    std::lock_guard<std::mutex> l(mu);
    return all;
  }
};

// "P" for a put of key, "D" for a delete.
std::string Describe(const std::vector<EtcdWatchEvent>& evs) {
  std::string out;
  for (const auto& e : evs)
    out += (e.type == EtcdWatchEvent::Type::kPut ? "P:" : e.type == EtcdWatchEvent::Type::kDelete ? "D:" : "E:") +
           e.kv.key + " ";
  return out;
}

TEST_CASE("base64 and prefix ends as the gateway writes them") {
  const std::string bytes("\0\xff\x01 key/\xfe", 8);
  CHECK(cluster::Base64Encode("foo") == "Zm9v");
  CHECK(cluster::Base64Encode("fo") == "Zm8=");
  CHECK(cluster::Base64Encode("") == "");
  CHECK(*cluster::Base64Decode(cluster::Base64Encode(bytes)) == bytes);
  CHECK(*cluster::Base64Decode("Zm8") == "fo");  // unpadded and URL-safe are accepted too
  CHECK(cluster::Base64Decode("Zm9v!").status().code() == Code::kDataLoss);
  CHECK(cluster::PrefixEnd("a/") == "a0");
  CHECK(cluster::PrefixEnd(std::string("a\xff", 2)) == "b");
  CHECK(cluster::PrefixEnd("") == std::string(1, '\0'));
  int64_t v = 0;
  CHECK(cluster::ReadInt64({{"revision", "12"}}, "revision", &v).ok());
  CHECK(v == 12);
  CHECK(cluster::ReadInt64({{"revision", "12x"}}, "revision", &v).code() == Code::kDataLoss);
}

TEST_CASE("put, get, range and delete, with binary keys and values") {
  auto etcd = testing::StartEtcd();
  auto c = testing::Connect(*etcd);
  const std::string binary("v\0\xff", 3);
  auto r1 = c->Put("/sf/t/a", binary);
  REQUIRE(r1.ok());
  auto r2 = c->Put("/sf/t/b", "2");
  REQUIRE(r2.ok());
  CHECK(*r2 > *r1);
  REQUIRE(c->Put("/sf/u", "outside").ok());

  auto a = c->Get("/sf/t/a");
  REQUIRE(a.ok());
  REQUIRE(a->has_value());
  CHECK((*a)->value == binary);
  CHECK((*a)->create_revision == *r1);
  CHECK((*a)->mod_revision == *r1);
  CHECK((*a)->version == 1);
  auto missing = c->Get("/sf/t/none");
  REQUIRE(missing.ok());
  CHECK_FALSE(missing->has_value());

  auto range = c->Range("/sf/t/");
  REQUIRE(range.ok());
  REQUIRE(range->kvs.size() == 2);
  CHECK(range->kvs[0].key == "/sf/t/a");
  CHECK(range->kvs[1].key == "/sf/t/b");
  CHECK(range->revision >= *r2);

  REQUIRE(c->Put("/sf/t/a", "again").ok());
  CHECK((*c->Get("/sf/t/a"))->version == 2);
  CHECK(*c->Delete("/sf/t/a") == 1);
  CHECK(*c->Delete("/sf/t/a") == 0);
  CHECK(*c->DeletePrefix("/sf/t/") == 1);
  CHECK(c->Range("/sf/t/")->kvs.empty());
  CHECK(c->Get("/sf/u")->has_value());
}

TEST_CASE("a txn compares mod_revision: the success branch, then the failure branch") {
  auto etcd = testing::StartEtcd();
  auto c = testing::Connect(*etcd);
  const int64_t epoch = *c->Put("/sf/map", "v1");
  auto won = c->Txn({EtcdCompare::ModRevision("/sf/map", EtcdCompare::Op::kEqual, epoch)},
                    {EtcdOp::Put("/sf/map", "v2"), EtcdOp::Get("/sf/map")}, {EtcdOp::Get("/sf/map")});
  REQUIRE(won.ok());
  CHECK(won->succeeded);
  CHECK(won->revision > epoch);
  REQUIRE(won->ranges.size() == 1);
  REQUIRE(won->ranges[0].kvs.size() == 1);
  CHECK(won->ranges[0].kvs[0].value == "v2");

  // The same epoch again is stale now: the failure branch runs, and that is no error.
  auto lost = c->Txn({EtcdCompare::ModRevision("/sf/map", EtcdCompare::Op::kEqual, epoch)},
                     {EtcdOp::Put("/sf/map", "v3")}, {EtcdOp::Range("/sf/")});
  REQUIRE(lost.ok());
  CHECK_FALSE(lost->succeeded);
  REQUIRE(lost->ranges.size() == 1);
  CHECK(lost->ranges[0].kvs.at(0).value == "v2");
  CHECK((*c->Get("/sf/map"))->value == "v2");

  // The other compares: absent keys have create_revision 0; values; versions.
  auto create = c->Txn({EtcdCompare::CreateRevision("/sf/new", EtcdCompare::Op::kEqual, 0),
                        EtcdCompare::Value("/sf/map", EtcdCompare::Op::kNotEqual, "v1"),
                        EtcdCompare::Version("/sf/map", EtcdCompare::Op::kGreater, 1),
                        EtcdCompare::ModRevision("/sf/map", EtcdCompare::Op::kLess, won->revision + 1)},
                       {EtcdOp::Put("/sf/new", "x"), EtcdOp::DeletePrefix("/sf/map")}, {});
  REQUIRE(create.ok());
  CHECK(create->succeeded);
  CHECK(c->Get("/sf/new")->has_value());
  CHECK_FALSE(c->Get("/sf/map")->has_value());
}

TEST_CASE("a kept lease keeps its key past several TTLs, and the key goes within about a TTL after it stops, or at once at revoke") {
  auto etcd = testing::StartEtcd();
  auto c = testing::Connect(*etcd);
  auto lease = c->GrantLease(1);
  REQUIRE(lease.ok());
  CHECK(lease->ttl_seconds == 1);
  REQUIRE(c->Put("/sf/nodes/a", "alive", lease->id).ok());
  std::atomic<int> lost{0};
  auto ka = c->KeepAlive(*lease, [&](const Status&) { ++lost; });
  REQUIRE(ka.ok());
  // The time is the point: three TTLs in which only the keepalive keeps the key.
  testing::PauseFor(milliseconds(3000));
  CHECK(c->Get("/sf/nodes/a")->has_value());
  CHECK(lost == 0);
  CHECK(*c->LeaseTimeToLive(lease->id) >= 0);

  ka->reset();
  const auto stopped = std::chrono::steady_clock::now();
  CHECK(testing::WaitFor([&] { return !c->Get("/sf/nodes/a")->has_value(); }, milliseconds(5000)));
  CHECK(std::chrono::steady_clock::now() - stopped < milliseconds(3000));  // TTL + etcd's 0.5 s expiry sweep
  CHECK(lost == 0);
  CHECK(*c->LeaseTimeToLive(lease->id) == -1);
  CHECK(c->Put("/sf/nodes/a", "late", lease->id).status().code() == Code::kNotFound);

  auto second = c->GrantLease(5);
  REQUIRE(second.ok());
  REQUIRE(c->Put("/sf/nodes/b", "alive", second->id).ok());
  REQUIRE(c->RevokeLease(second->id).ok());
  CHECK_FALSE(c->Get("/sf/nodes/b")->has_value());
  CHECK(c->RevokeLease(second->id).code() == Code::kNotFound);
  CHECK(c->GrantLease(0).status().code() == Code::kInvalidArgument);
}

TEST_CASE("on_lost fires once when the lease is revoked by another client or etcd hangs past the TTL") {
  auto etcd = testing::StartEtcd();
  auto c = testing::Connect(*etcd);
  auto other = testing::Connect(*etcd);

  auto lease = c->GrantLease(1);
  REQUIRE(lease.ok());
  std::atomic<int> calls{0};
  Status why;
  testing::Flag lost;
  auto ka = c->KeepAlive(*lease, [&](const Status& s) {
    why = s;
    ++calls;
    lost.Set();
  });
  REQUIRE(ka.ok());
  REQUIRE(other->RevokeLease(lease->id).ok());
  REQUIRE(lost.WaitFor(milliseconds(3000)));
  CHECK(why.code() == Code::kNotFound);
  CHECK((*ka)->lost());

  auto lease2 = c->GrantLease(1);
  REQUIRE(lease2.ok());
  testing::Flag lost2;
  Status why2;
  auto ka2 = c->KeepAlive(*lease2, [&](const Status& s) {
    why2 = s;
    ++calls;
    lost2.Set();
  });
  REQUIRE(ka2.ok());
  REQUIRE(etcd->Pause().ok());
  const auto paused = std::chrono::steady_clock::now();
  REQUIRE(lost2.WaitFor(milliseconds(4000)));
  CHECK(std::chrono::steady_clock::now() - paused < milliseconds(2500));  // about the TTL
  CHECK(why2.code() == Code::kUnavailable);
  CHECK(why2.message().find("TTL") != std::string::npos);
  REQUIRE(etcd->Resume().ok());
  CHECK(calls == 2);
}

TEST_CASE("a watch sees puts and deletes in revision order, from now or from a past revision") {
  auto etcd = testing::StartEtcd();
  auto c = testing::Connect(*etcd);
  const int64_t before = *c->Put("/sf/w/early", "0");
  Events now, history;
  auto w = c->Watch("/sf/w/", 0, now.Callback());
  REQUIRE(w.ok());
  REQUIRE(c->Put("/sf/w/a", "1").ok());
  REQUIRE(c->Put("/sf/other", "not watched").ok());
  REQUIRE(c->Put("/sf/w/b", "2").ok());
  REQUIRE(c->Txn({}, {EtcdOp::Put("/sf/w/c", "3"), EtcdOp::Delete("/sf/w/a")}, {}).ok());
  REQUIRE(c->Delete("/sf/w/b").ok());
  REQUIRE(testing::WaitFor([&] { return now.size() >= 5; }, milliseconds(5000)));
  const auto evs = now.Get();
  CHECK(Describe(evs) == "P:/sf/w/a P:/sf/w/b P:/sf/w/c D:/sf/w/a D:/sf/w/b ");
  for (size_t i = 1; i < evs.size(); ++i) CHECK(evs[i].kv.mod_revision >= evs[i - 1].kv.mod_revision);
  CHECK(evs[0].kv.value == "1");
  CHECK(evs[2].kv.mod_revision == evs[3].kv.mod_revision);  // one txn, one revision
  CHECK((*w)->next_revision() == evs.back().kv.mod_revision + 1);

  auto replay = c->Watch("/sf/w/", before, history.Callback());
  REQUIRE(replay.ok());
  REQUIRE(testing::WaitFor([&] { return history.size() >= 6; }, milliseconds(5000)));
  CHECK(Describe(history.Get()) == "P:/sf/w/early " + Describe(evs));
}

TEST_CASE("a watch resumes after etcd restarts, every event exactly once") {
  auto etcd = testing::StartEtcd();
  auto c = testing::Connect(*etcd);
  Events got;
  auto w = c->Watch("/sf/r/", 0, got.Callback());
  REQUIRE(w.ok());
  std::string expected;
  for (int i = 0; i < 5; ++i) {
    REQUIRE(c->Put("/sf/r/" + std::to_string(i), "x").ok());
    expected += "P:/sf/r/" + std::to_string(i) + " ";
  }
  REQUIRE(testing::WaitFor([&] { return got.size() >= 5; }, milliseconds(5000)));
  REQUIRE(etcd->Restart().ok());
  for (int i = 5; i < 10; ++i) {
    auto put = c->Put("/sf/r/" + std::to_string(i), "x");
    INFO(put.status().ToString());
    REQUIRE(put.ok());
    expected += "P:/sf/r/" + std::to_string(i) + " ";
  }
  REQUIRE(testing::WaitFor([&] { return got.size() >= 10; }, milliseconds(10000)));
  // Nothing more arrives: no event twice.
  REQUIRE(c->Put("/sf/r/last", "x").ok());
  REQUIRE(testing::WaitFor([&] { return got.size() >= 11; }, milliseconds(5000)));
  CHECK(Describe(got.Get()) == expected + "P:/sf/r/last ");
  CHECK_FALSE((*w)->ended());
}

TEST_CASE("a watch from a compacted revision ends with an error event naming the compaction") {
  auto etcd = testing::StartEtcd();
  auto c = testing::Connect(*etcd);
  const int64_t old = *c->Put("/sf/c/a", "1");
  const int64_t latest = *c->Put("/sf/c/a", "2");
  auto compacted = c->transport()->Call("compact", "/v3/kv/compaction", {{"revision", std::to_string(latest)}},
                                        std::chrono::steady_clock::now() + milliseconds(2000));
  REQUIRE(compacted.ok());
  Events got;
  auto w = c->Watch("/sf/c/", old, got.Callback());
  REQUIRE(w.ok());
  REQUIRE(testing::WaitFor([&] { return got.size() >= 1; }, milliseconds(5000)));
  const auto evs = got.Get();
  REQUIRE(evs.size() == 1);
  CHECK(evs[0].type == EtcdWatchEvent::Type::kError);
  CHECK(evs[0].error.code() == Code::kOutOfRange);
  CHECK(evs[0].compact_revision == latest);
  CHECK(testing::WaitFor([&] { return (*w)->ended(); }, milliseconds(2000)));
}

// Campaigns from another thread; `done` is set when Campaign returns.
struct Candidate {
  std::unique_ptr<EtcdElection> election;
  Status result;
  testing::Flag done;
  std::thread thread;
  Candidate(EtcdClient* c, const std::string& value, int64_t lease) : election(new EtcdElection(c, "/sf/leader")) {
    thread = std::thread([this, value, lease] {
      result = election->Campaign(value, lease, milliseconds(15000));
      done.Set();
    });
  }
  ~Candidate() {
    election->Cancel();
    thread.join();
  }
};

TEST_CASE("election: one leads, and the other takes over when the leader's lease is revoked or its client goes") {
  auto etcd = testing::StartEtcd();
  auto observer = testing::Connect(*etcd);
  auto a = testing::Connect(*etcd);
  auto b = testing::Connect(*etcd);
  auto d = testing::Connect(*etcd);
  auto la = *a->GrantLease(1), lb = *b->GrantLease(1), ld = *d->GrantLease(1);
  auto ka = a->KeepAlive(la, [](const Status&) {});
  auto kb = b->KeepAlive(lb, [](const Status&) {});
  auto kd = d->KeepAlive(ld, [](const Status&) {});

  EtcdElection first(a.get(), "/sf/leader");
  REQUIRE(first.Campaign("a", la.id, milliseconds(5000)).ok());
  CHECK(first.leading());
  Candidate second(b.get(), "b", lb.id);
  // Nothing may happen within this time: b waits behind a.
  CHECK_FALSE(second.done.WaitFor(milliseconds(500)));
  auto leader = EtcdElection::Leader(*observer, "/sf/leader");
  REQUIRE(leader.ok());
  REQUIRE(leader->has_value());
  CHECK((*leader)->value == "a");

  const auto revoked = std::chrono::steady_clock::now();
  REQUIRE(observer->RevokeLease(la.id).ok());
  REQUIRE(second.done.WaitFor(milliseconds(3000)));
  CHECK(second.result.ok());
  CHECK(std::chrono::steady_clock::now() - revoked < milliseconds(1500));
  CHECK((*EtcdElection::Leader(*observer, "/sf/leader"))->value == "b");

  // The leader's process goes (its client and keepalive with it): its lease
  // ends after the TTL and the next candidate leads.
  Candidate third(d.get(), "d", ld.id);
  CHECK_FALSE(third.done.WaitFor(milliseconds(300)));
  const auto gone = std::chrono::steady_clock::now();
  kb->reset();
  b.reset();
  REQUIRE(third.done.WaitFor(milliseconds(5000)));
  CHECK(third.result.ok());
  CHECK(std::chrono::steady_clock::now() - gone < milliseconds(3500));  // TTL + etcd's expiry sweep
  CHECK((*EtcdElection::Leader(*observer, "/sf/leader"))->value == "d");
  CHECK(third.election->Resign().ok());
  CHECK_FALSE((*EtcdElection::Leader(*observer, "/sf/leader")).has_value());
}

TEST_CASE("election: a campaign gives up at its deadline or when canceled, and withdraws") {
  auto etcd = testing::StartEtcd();
  auto c = testing::Connect(*etcd);
  auto l1 = *c->GrantLease(5), l2 = *c->GrantLease(5);
  EtcdElection leader(c.get(), "/sf/e");
  REQUIRE(leader.Campaign("1", l1.id, milliseconds(2000)).ok());
  EtcdElection waiting(c.get(), "/sf/e");
  CHECK(waiting.Campaign("2", l2.id, milliseconds(300)).code() == Code::kDeadlineExceeded);
  CHECK(c->Range("/sf/e/")->kvs.size() == 1);  // its key was withdrawn
  std::thread canceler([&] { waiting.Cancel(); });
  canceler.join();
  CHECK(waiting.Campaign("2", l2.id, milliseconds(5000)).code() == Code::kAborted);
  CHECK(leader.Campaign("1b", l1.id, milliseconds(2000)).ok());  // the same lease keeps its place
  CHECK((*leader.Leader())->value == "1b");
}

TEST_CASE("TLS: a plaintext client, a client of another CA, and a server of another name are refused") {
  auto etcd = testing::StartEtcd();
  cluster::EtcdClientOptions plain;
  plain.endpoints = etcd->endpoint();
  plain.plaintext_for_tests = true;
  plain.request_timeout = milliseconds(2000);
  auto p = testing::MakeClient(plain);
  const Status refused = p->Put("/sf/x", "1").status();
  INFO(refused.ToString());
  CHECK(refused.code() == Code::kUnavailable);
  CHECK(refused.message().find(etcd->endpoint()) != std::string::npos);
  CHECK(refused.message().find("TLS only") != std::string::npos);

  testing::TempDir tmp("sf_etcd_other_ca");
  REQUIRE(net::InitCredentials(tmp / "tls").ok());
  auto stranger = testing::MakeClient(testing::ClientOptions(etcd->endpoint(), "node", tmp / "tls"));
  const Status untrusted = stranger->Put("/sf/x", "1").status();
  INFO(untrusted.ToString());
  CHECK(untrusted.code() == Code::kPermissionDenied);
  CHECK(untrusted.message().find("TLS") != std::string::npos);

  // Trusting our CA but showing a certificate of another: etcd refuses it.
  auto mixed = testing::ClientOptions(etcd->endpoint());
  auto foreign = net::LoadCredential(tmp / "tls", "node");
  REQUIRE(foreign.ok());
  mixed.credential->cert_pem = foreign->cert_pem;
  mixed.credential->key_pem = foreign->key_pem;
  const Status rejected = testing::MakeClient(mixed)->Put("/sf/x", "1").status();
  INFO(rejected.ToString());
  CHECK(rejected.code() == Code::kUnavailable);
  CHECK(rejected.message().find(etcd->endpoint()) != std::string::npos);
  CHECK(rejected.message().find("certificate") != std::string::npos);

  auto wrong_name = testing::ClientOptions(etcd->endpoint());
  wrong_name.server_name = "node.shardflow.internal";
  CHECK(testing::MakeClient(wrong_name)->Health().code() == Code::kPermissionDenied);
  CHECK(testing::Connect(*etcd)->Health().ok());
}

TEST_CASE("unreachable endpoints: Unavailable naming them at once, DeadlineExceeded for a silent one, failover") {
  auto etcd = testing::StartEtcd();
  // A port just bound and released: nothing listens there.
  std::string dead;
  {
    testing::FakeHttpServer probe("");
    dead = probe.endpoint();
  }
  auto o = testing::ClientOptions(dead);
  o.request_timeout = milliseconds(500);
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = testing::MakeClient(o)->Get("/sf/x").status();
  CHECK(s.code() == Code::kUnavailable);
  CHECK(s.message().find(dead) != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < milliseconds(500));

  // A listener that never answers (a hung etcd): the deadline, naming it.
  const int silent_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(silent_fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(silent_fd, 4) == 0);
  REQUIRE(::getsockname(silent_fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const std::string silent = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto so = testing::ClientOptions(silent);
  so.request_timeout = milliseconds(300);
  const auto t1 = std::chrono::steady_clock::now();
  const Status hung = testing::MakeClient(so)->Get("/sf/x").status();
  CHECK(hung.code() == Code::kDeadlineExceeded);
  CHECK(hung.message().find(silent) != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t1 < milliseconds(1500));
  ::close(silent_fd);

  auto both = testing::MakeClient(testing::ClientOptions(dead + "," + etcd->endpoint()));
  CHECK(both->Put("/sf/x", "1").ok());
  CHECK(cluster::EtcdClient::Create(testing::ClientOptions("http://" + etcd->endpoint())).status().code() ==
        Code::kInvalidArgument);
  CHECK(cluster::EtcdClient::Create(testing::ClientOptions("")).status().code() == Code::kInvalidArgument);
  auto bad_pem = testing::ClientOptions(etcd->endpoint());
  bad_pem.credential->cert_pem = "not a certificate";
  CHECK(cluster::EtcdClient::Create(bad_pem).status().code() == Code::kInvalidArgument);
  auto no_credential = testing::ClientOptions(etcd->endpoint());
  no_credential.credential.reset();
  CHECK(cluster::EtcdClient::Create(no_credential).status().code() == Code::kInvalidArgument);
}

// A client of a fake etcd (plaintext) with a 1 MiB reply limit.
std::unique_ptr<EtcdClient> FakeClient(const testing::FakeHttpServer& server) {
  cluster::EtcdClientOptions o;
  o.endpoints = server.endpoint();
  o.plaintext_for_tests = true;
  o.request_timeout = milliseconds(2000);
  o.max_response_bytes = 1 << 20;
  return testing::MakeClient(o);
}

std::string HttpOk(const std::string& body) {
  return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

TEST_CASE("malformed and oversized replies are errors naming the operation, never a crash") {
  struct Case {
    std::string response;
    Code code;
  };
  const std::string big(3 << 20, 'x');
  const std::vector<Case> cases = {
      {HttpOk("{not json"), Code::kDataLoss},
      {HttpOk("[1,2,3]"), Code::kDataLoss},
      {HttpOk(R"({"header":{"revision":"12x"},"kvs":[]})"), Code::kDataLoss},
      {HttpOk(R"({"kvs":"not a list"})"), Code::kDataLoss},
      {HttpOk(R"({"kvs":[{"key":"!!not base64!!"}]})"), Code::kDataLoss},
      {HttpOk(R"({"kvs":[{"key":"YQ==","mod_revision":{"x":1}}]})"), Code::kDataLoss},
      {HttpOk(std::string(100000, '[')), Code::kDataLoss},
      {"HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(big.size()) + "\r\n\r\n" + big,
       Code::kResourceExhausted},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + [&] {
         std::string chunks;
         for (int i = 0; i < 3; ++i) chunks += "100000\r\n" + std::string(1 << 20, 'y') + "\r\n";
         return chunks + "0\r\n\r\n";
       }(),
       Code::kResourceExhausted},
      {"HTTP/1.1 500 Oops\r\nContent-Length: 5\r\n\r\nhello", Code::kUnavailable},
      {"NOT HTTP AT ALL\r\n\r\n", Code::kUnavailable},
      {"", Code::kUnavailable},
  };
  for (const auto& tc : cases) {
    testing::FakeHttpServer server(tc.response);
    auto c = FakeClient(server);
    const Status s = c->Range("/sf/").status();
    INFO(tc.response.substr(0, 80) << " -> " << s.ToString());
    CHECK(s.code() == tc.code);
    CHECK(s.message().find("range") != std::string::npos);
  }
  // A watch stream that never ends its first line: bounded, refused.
  testing::FakeHttpServer endless("HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(big.size()) + "\r\n\r\n" +
                                  big);
  Events none;
  const Status w = FakeClient(endless)->Watch("/sf/", 0, none.Callback()).status();
  INFO(w.ToString());
  CHECK(w.code() == Code::kResourceExhausted);
  CHECK(w.message().find("watch") != std::string::npos);
  testing::FakeHttpServer wrong(HttpOk(R"({"result":{"created":false}})"));
  CHECK(FakeClient(wrong)->Watch("/sf/", 0, none.Callback()).status().code() == Code::kDataLoss);
  testing::FakeHttpServer lease(HttpOk(R"({"result":{"ID":"1","TTL":"1"}})"));
  CHECK(FakeClient(lease)->GrantLease(1).status().code() == Code::kDataLoss);
}

}  // namespace
}  // namespace sf
