// ClusterRendezvous: a partition's Flush answers once every send of its step
// on this node is over, whichever partition (and thread) sent them and
// however they went (at once, or after a dial).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "cluster/cluster_rendezvous.h"
#include "runtime/rendezvous.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kStep = 41;
const char* kSelf = "127.0.0.1:1";
const char* kOther = "127.0.0.1:2";

// A key sent from task 0 (this node) to task 1 (the other node).
RendezvousKey RemoteKey(const std::string& src) { return {kStep, src + ":0->/job:worker/task:1/device:CPU:0", "", 0}; }

Tensor Value() { return Tensor(DType::kFloat32, Shape{}); }

// Flush's answers, in order.
struct Flushed {
  std::mutex mu;
  std::vector<Status> answers;  // GUARDED_BY(mu)
  std::function<void(Status)> Callback() {
    return [this](Status s) {
      std::lock_guard<std::mutex> l(mu);
      answers.push_back(std::move(s));
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> l(mu);
    return answers.size();
  }
};

}  // namespace

TEST_CASE("ClusterRendezvous: a Flush that comes while another partition's send is under way answers when it ends",
          "[cluster][rendezvous]") {
  // The send blocks inside SendFn (a TLS write to the other node) until told
  // to go on; meanwhile the step's other partition here finishes and flushes.
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, go = false;  // GUARDED_BY(mu)
  runtime::LocalRendezvous local;
  auto rv = std::make_shared<runtime::ClusterRendezvous>(
      &local, kSelf, std::vector<std::string>{kSelf, kOther}, 7,
      [&](const std::string& to, net::SendTensor, std::function<void(Status)>) -> Result<bool> {
        CHECK(to == kOther);
        std::unique_lock<std::mutex> l(mu);
        entered = true;
        cv.notify_all();
        cv.wait(l, [&] { return go; });
        return false;  // went over a live connection
      });
  std::thread sender([&] { CHECK(rv->Send(RemoteKey("a"), Value(), false).ok()); });
  {
    std::unique_lock<std::mutex> l(mu);
    REQUIRE(cv.wait_for(l, 10s, [&] { return entered; }));
  }
  Flushed flushed;
  rv->Flush(kStep, flushed.Callback());
  CHECK(flushed.count() == 0);  // the send is not over yet
  {
    std::lock_guard<std::mutex> l(mu);
    go = true;
    cv.notify_all();
  }
  sender.join();
  // The partition that flushed finishes (before the fix it waited forever).
  REQUIRE(testing::WaitFor([&] { return flushed.count() == 1; }, 10s));
  std::lock_guard<std::mutex> l(flushed.mu);
  CHECK(flushed.answers[0].ok());
}

TEST_CASE("ClusterRendezvous: Flush waits for sends queued for a dial and reports the first failure",
          "[cluster][rendezvous]") {
  std::vector<std::function<void(Status)>> later;
  runtime::LocalRendezvous local;
  auto rv = std::make_shared<runtime::ClusterRendezvous>(
      &local, kSelf, std::vector<std::string>{kSelf, kOther}, 7,
      [&](const std::string&, net::SendTensor, std::function<void(Status)> l) -> Result<bool> {
        later.push_back(std::move(l));
        return true;  // waits for the dialer
      });
  REQUIRE(rv->Send(RemoteKey("a"), Value(), false).ok());
  REQUIRE(rv->Send(RemoteKey("b"), Value(), false).ok());
  REQUIRE(later.size() == 2);
  Flushed flushed;
  rv->Flush(kStep, flushed.Callback());
  later[0](Unavailable("dial failed"));
  CHECK(flushed.count() == 0);
  later[1](Status::OK());
  REQUIRE(flushed.count() == 1);
  CHECK(flushed.answers[0].code() == Code::kUnavailable);
  // The step's receives here were failed at once, not at its deadline.
  std::optional<Status> recv;
  local.RecvAsync({kStep, "x:0->/job:worker/task:0/device:CPU:0", "", 0},
                  [&](Status s, Tensor, bool) { recv = s; });
  REQUIRE(recv.has_value());
  CHECK(recv->code() == Code::kUnavailable);
}

TEST_CASE("ClusterRendezvous: with every send over, Flush answers at once", "[cluster][rendezvous]") {
  runtime::LocalRendezvous local;
  auto rv = std::make_shared<runtime::ClusterRendezvous>(
      &local, kSelf, std::vector<std::string>{kSelf, kOther}, 7,
      [&](const std::string&, net::SendTensor, std::function<void(Status)>) -> Result<bool> { return false; });
  REQUIRE(rv->Send(RemoteKey("a"), Value(), false).ok());
  // To this node itself: the local rendezvous, no message.
  REQUIRE(rv->Send({kStep, "c:0->/job:worker/task:0/device:CPU:0", "", 0}, Value(), false).ok());
  Flushed flushed;
  rv->Flush(kStep, flushed.Callback());
  REQUIRE(flushed.count() == 1);
  CHECK(flushed.answers[0].ok());
}
