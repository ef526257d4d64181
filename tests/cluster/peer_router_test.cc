// PeerRouter, without a network: a failed dial is not tried again for
// kRedialMs (a step sending to a node that is gone fails at once, naming
// the failure), a message for a member not connected waits for the dialer
// and its callback gets the dial's failure, the hub's messages (no
// callback) go to on_unsent, and Stop refuses new work.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <mutex>

#include "cluster/peer_router.h"
#include "tests/support/wait.h"

using namespace sf;
using cluster::PeerRouter;

namespace {

struct Router {
  std::atomic<int> dials{0};
  std::mutex mu;
  std::vector<std::pair<std::string, Status>> unsent;  // GUARDED_BY(mu)
  PeerRouter router{PeerRouter::Hooks{
      [] { return std::string("n1"); },
      [this](const std::string& addr) -> Result<net::ConnectionPtr> {
        ++dials;
        return Unavailable("connection refused by " + addr);
      },
      [this](const std::string& to, const Status& why) {
        std::lock_guard<std::mutex> l(mu);
        unsent.push_back({to, why});
      }}};
};

}  // namespace

TEST_CASE("PeerRouter: a failed dial is not tried again for a while, and the error names it", "[peer_router]") {
  Router r;
  const auto first = r.router.Peer("10.0.0.9:1");
  CHECK(first.status().code() == Code::kUnavailable);
  CHECK(first.status().message() == "connection refused by 10.0.0.9:1");
  const auto again = r.router.Peer("10.0.0.9:1");
  CHECK(again.status().code() == Code::kUnavailable);
  CHECK(again.status().message().find("connection refused by 10.0.0.9:1 (") == 0);
  CHECK(again.status().message().find("not dialed again for 2000 ms") != std::string::npos);
  CHECK(r.dials.load() == 1);
  // Another address is dialed as usual.
  CHECK(!r.router.Peer("10.0.0.9:2").ok());
  CHECK(r.dials.load() == 2);
  // After kRedialMs it is dialed again.
  REQUIRE(testing::WaitFor([&] {
    (void)r.router.Peer("10.0.0.9:1");
    return r.dials.load() == 3;
  }, std::chrono::seconds(10)));
  // Never connected: it was not lost.
  CHECK(!r.router.LostWithin("10.0.0.9:1", 60000));
}

TEST_CASE("PeerRouter: a message for a member not connected waits for the dialer, which reports its failure", "[peer_router]") {
  Router r;
  std::mutex mu;
  std::vector<Status> later;
  net::SendTensor t;
  t.step_id = 1;
  t.value = Tensor::Scalar<float>(1.0f);
  auto queued = r.router.SendOrQueue("10.0.0.9:3", t, [&](Status s) {
    std::lock_guard<std::mutex> l(mu);
    later.push_back(s);
  });
  REQUIRE(queued.ok());
  CHECK(*queued);  // it waits for the dialer: the caller did not dial
  REQUIRE(testing::WaitFor([&] {
    std::lock_guard<std::mutex> l(mu);
    return !later.empty();
  }, std::chrono::seconds(10)));
  {
    std::lock_guard<std::mutex> l(mu);
    CHECK(later.size() == 1);
    CHECK(later[0].message().find("connection refused by 10.0.0.9:3") != std::string::npos);
  }
  // The address failed just now: the next message is refused at once, not queued.
  const auto refused = r.router.SendOrQueue("10.0.0.9:3", t, nullptr);
  CHECK(refused.status().code() == Code::kUnavailable);

  // The hub's message (no callback) that cannot be sent goes to on_unsent.
  net::CollectiveAnnounce a;
  REQUIRE(r.router.SendOrQueue("10.0.0.9:4", a, nullptr).ok());
  REQUIRE(testing::WaitFor([&] {
    std::lock_guard<std::mutex> l(r.mu);
    return !r.unsent.empty();
  }, std::chrono::seconds(10)));
  std::lock_guard<std::mutex> l(r.mu);
  CHECK(r.unsent[0].first == "10.0.0.9:4");
  CHECK(r.unsent[0].second.message().find("connection refused by 10.0.0.9:4") != std::string::npos);
}

TEST_CASE("PeerRouter: after Stop nothing is dialed or queued", "[peer_router]") {
  Router r;
  r.router.Stop();
  r.router.Stop();  // twice: nothing
  const auto peer = r.router.Peer("10.0.0.9:5");
  CHECK(peer.status().code() == Code::kUnavailable);
  CHECK(peer.status().message() == "node n1 is stopping");
  net::SendTensor t;
  CHECK(r.router.SendOrQueue("10.0.0.9:5", t, nullptr).status().code() == Code::kUnavailable);
  CHECK(r.dials.load() == 0);
}
