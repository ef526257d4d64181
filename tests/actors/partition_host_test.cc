// The partition host actor on CAF's deterministic test coordinator: its
// messages are handled on the test's thread when the test runs them; the
// steps they start run on a compute pool, waited for with deadlines.
#include <catch2/catch.hpp>

#include <mutex>
#include <optional>

#include "actors/partition_host.h"
#include "kernels/compute_pool.h"
#include "runtime/plan.h"
#include "shardflow/ops.h"
#include "tests/support/deterministic.h"
#include "tests/support/wait.h"

using namespace sf;

namespace {

// A host on a deterministic system; stopped before it.
struct Deterministic : testing::Deterministic {
  explicit Deterministic(bool check_feeds) {
    runtime::PartitionHostOptions o;
    o.env.pool = &pool;
    o.env.rendezvous = &rdv;
    o.steps = &rdv;
    o.check_feeds = check_feeds;
    o.name = "node test";
    host = runtime::SpawnPartitionHost(sys, std::move(o));
  }
  ~Deterministic() {
    caf::anon_send_exit(host, caf::exit_reason::user_shutdown);
    host = nullptr;
    Run();
  }

  ComputePool pool{2};
  runtime::LocalRendezvous rdv;
  runtime::PartitionHostActor host;
};

// One step's answer, set from whichever thread finishes it.
struct Answer {
  void Set(Status s, std::vector<Tensor> out) {
    std::lock_guard<std::mutex> l(mu);
    status = std::move(s);
    fetches = std::move(out);
    flag.Set();
  }
  std::mutex mu;
  Status status;
  std::vector<Tensor> fetches;
  testing::Flag flag;
};

}  // namespace

TEST_CASE("Partition host actor: register, run, and errors naming the host", "[actors]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  auto y = ops::Mul(g, x, ops::Const(g, 4.0f));
  REQUIRE(g.status().ok());
  auto order = runtime::PruneAndSort(g, {x}, {y}, {});
  REQUIRE(order.ok());
  runtime::ExecutorSpec spec{*order, {x}, {y}};
  Deterministic d(/*check_feeds=*/true);

  std::optional<Status> registered;
  caf::anon_send(d.host, runtime::RegisterPartition{7, "/job:worker/task:0/device:CPU:0", &g, spec, nullptr,
                                                    [&](Status s) { registered.emplace(s); }});
  CHECK(!registered);  // nothing runs until the test lets it
  d.Run();
  REQUIRE(registered);
  REQUIRE(registered->ok());

  Answer ok;
  caf::anon_send(d.host, runtime::RunPartition{7, 1, {Tensor::FromVector(std::vector<float>{1, 2}, {2})},
                                               [&](Status s, std::vector<Tensor> out) { ok.Set(s, std::move(out)); }});
  d.Run();
  REQUIRE(ok.flag.WaitFor(std::chrono::seconds(30)));
  REQUIRE(ok.status.ok());
  CHECK(ok.fetches.at(0).ToVector<float>() == std::vector<float>{4, 8});

  // An unknown partition and a feed of the wrong dtype are refused at once,
  // on the actor's turn, before any op runs.
  Answer unknown, bad_feed;
  caf::anon_send(d.host, runtime::RunPartition{8, 2, {}, [&](Status s, std::vector<Tensor> out) {
                                                 unknown.Set(s, std::move(out));
                                               }});
  caf::anon_send(d.host, runtime::RunPartition{7, 3, {Tensor::FromVector(std::vector<int32_t>{1, 2}, {2})},
                                               [&](Status s, std::vector<Tensor> out) {
                                                 bad_feed.Set(s, std::move(out));
                                               }});
  d.Run();
  REQUIRE(unknown.flag.IsSet());
  CHECK(unknown.status.code() == Code::kNotFound);
  CHECK(unknown.status.message().find("node test") != std::string::npos);
  CHECK(unknown.status.message().find("partition 8") != std::string::npos);
  REQUIRE(bad_feed.flag.IsSet());
  CHECK(bad_feed.status.code() == Code::kInvalidArgument);
  CHECK(bad_feed.status.message().find("'x'") != std::string::npos);

  // A partition whose kernels cannot be built is refused naming its device.
  Graph bad;
  auto u = ops::Placeholder(bad, DType::kFloat32, {2}, "u");
  REQUIRE(bad.status().ok());
  runtime::ExecutorSpec wrong{{u.node}, {}, {Output(&bad, u.node, 3)}};
  std::optional<Status> refused;
  caf::anon_send(d.host, runtime::RegisterPartition{9, "/job:worker/task:1/device:CPU:0", &bad, wrong, nullptr,
                                                    [&](Status s) { refused.emplace(s); }});
  d.Run();
  REQUIRE(refused);
  CHECK(!refused->ok());
  CHECK(refused->message().find("task:1") != std::string::npos);
}

TEST_CASE("Partition host actor: abort fails the step's waits here; cleanup forgets the step", "[actors]") {
  Deterministic d(/*check_feeds=*/false);
  RendezvousKey key{5, "a:0->/job:worker/task:0/device:CPU:0", "", 0};
  caf::anon_send(d.host, runtime::AbortPartitionStep{5, Aborted("step 5 aborted: a peer failed")});
  d.Run();
  std::optional<Status> after_abort;
  d.rdv.RecvAsync(key, [&](Status s, Tensor, bool) { after_abort.emplace(s); });
  REQUIRE(after_abort);  // at once: the step is aborted here
  CHECK(after_abort->code() == Code::kAborted);
  caf::anon_send(d.host, runtime::CleanupPartitionStep{5});
  d.Run();
  // Forgotten: a new wait on the step waits again, until its tensor comes.
  std::optional<Status> after_cleanup;
  d.rdv.RecvAsync(key, [&](Status s, Tensor, bool) { after_cleanup.emplace(s); });
  CHECK(!after_cleanup);
  REQUIRE(d.rdv.Send(key, Tensor::Scalar<float>(1.f), false).ok());
  REQUIRE(after_cleanup);
  CHECK(after_cleanup->ok());
  d.rdv.Cleanup(5);
}
