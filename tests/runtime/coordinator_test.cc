// runtime::Coordinator over test hosts that run real executors without any
// actor: what it registers where, what it caches, and what a step sends its
// hosts (runs, aborts, cleanups).
#include <catch2/catch.hpp>

#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>

#include "kernels/compute_pool.h"
#include "runtime/coordinator.h"
#include "runtime/plan.h"
#include "runtime/rendezvous.h"
#include "shardflow/ops.h"

using namespace sf;

namespace {

// A host in the test's thread pool: executors built at Register, run at Run;
// aborts and cleanups go to a rendezvous its partitions share with the
// other hosts'. Records every call.
class TestHost : public runtime::PartitionHost {
 public:
  TestHost(ComputePool* pool, runtime::LocalRendezvous* rdv) : rdv_(rdv) {
    env_.pool = pool;
    env_.rendezvous = rdv;
  }
  Status Register(uint64_t handle, const std::string& device, const Graph& g, const runtime::ExecutorSpec& spec,
                  std::shared_ptr<const void> keep) override {
    std::lock_guard<std::mutex> l(mu);
    registered.push_back(device);
    if (!fail_next.ok()) return std::exchange(fail_next, Status::OK());
    SF_ASSIGN_OR_RETURN(auto ex, runtime::Executor::Create(g, spec, env_));
    executors_[handle] = {std::move(keep), std::move(ex)};
    return Status::OK();
  }
  void Run(uint64_t handle, int64_t step_id, std::vector<Tensor> feeds, runtime::Executor::DoneFn done,
           StepTrace* trace, std::atomic<uint64_t>*) override {
    runtime::Executor* ex;
    {
      std::lock_guard<std::mutex> l(mu);
      ++runs;
      ex = executors_.at(handle).second.get();
    }
    ex->RunStep(step_id, std::move(feeds), std::move(done), trace);
  }
  void Abort(int64_t step_id, const Status& s) override {
    {
      std::lock_guard<std::mutex> l(mu);
      aborts.push_back(s);
    }
    rdv_->Abort(step_id, s);
  }
  void Cleanup(int64_t step_id) override {
    {
      std::lock_guard<std::mutex> l(mu);
      ++cleanups;
    }
    rdv_->Cleanup(step_id);
  }

  std::mutex mu;
  std::vector<std::string> registered;  // GUARDED_BY(mu): device per Register call
  Status fail_next;                     // GUARDED_BY(mu): the next Register's answer
  int runs = 0;                         // GUARDED_BY(mu)
  std::vector<Status> aborts;           // GUARDED_BY(mu)
  int cleanups = 0;                     // GUARDED_BY(mu)

 private:
  runtime::LocalRendezvous* rdv_;
  runtime::ExecutorEnv env_;
  std::map<uint64_t, std::pair<std::shared_ptr<const void>, std::unique_ptr<runtime::Executor>>> executors_;
};

const char* kDev0 = "/job:localhost/task:0/device:CPU:0";
const char* kDev1 = "/job:localhost/task:0/device:CPU:1";

// A coordinator whose devices each have their own TestHost.
struct Fixture {
  explicit Fixture(const Graph& g, int devices) {
    runtime::CoordinatorOptions o;
    for (int i = 0; i < devices; ++i) {
      o.devices.push_back(i == 0 ? kDev0 : kDev1);
      hosts[o.devices.back()] = std::make_shared<TestHost>(&pool, &rdv);
    }
    o.host_for = [this](const std::string& d) -> Result<std::shared_ptr<runtime::PartitionHost>> {
      auto it = hosts.find(d);
      if (it == hosts.end()) return NotFound("no host for " + d);
      return std::shared_ptr<runtime::PartitionHost>(it->second);
    };
    coordinator = std::make_unique<runtime::Coordinator>(g, std::move(o));
  }
  // Plans (or finds) and runs one step, waiting for its answer.
  Result<std::vector<Tensor>> Run(const NamedFeeds& feeds, const std::vector<std::string>& fetches) {
    auto plan = coordinator->PlanFor(feeds, fetches, {});
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Result<std::vector<Tensor>>> result;
    coordinator->StartStep(plan, feeds, [&](Result<std::vector<Tensor>> r) {
      std::lock_guard<std::mutex> l(mu);
      result.emplace(std::move(r));
      cv.notify_all();
    });
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return result.has_value(); });
    return std::move(*result);
  }
  TestHost& host(const char* d) { return *hosts.at(d); }

  ComputePool pool{2};
  runtime::LocalRendezvous rdv;
  std::map<std::string, std::shared_ptr<TestHost>> hosts;
  std::unique_ptr<runtime::Coordinator> coordinator;
};

Tensor Vec(std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::FromVector(std::move(v), {n});
}

}  // namespace

TEST_CASE("Coordinator: one device registers the whole pruned graph once per signature", "[runtime]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  ops::Identity(g, ops::Mul(g, x, ops::Const(g, 3.0f)), "y");
  ops::Identity(g, ops::Neg(g, x), "z");
  REQUIRE(g.status().ok());
  Fixture f(g, 1);
  const NamedFeeds feeds = {{"x", Vec({1, 2})}};
  CHECK(f.coordinator->Find(runtime::RunSignature(feeds, {"y"}, {})) == nullptr);
  for (int i = 0; i < 3; ++i) {
    auto r = f.Run(feeds, {"y"});
    REQUIRE(r.ok());
    CHECK((*r)[0].ToVector<float>() == std::vector<float>{3, 6});
  }
  CHECK(f.coordinator->Find(runtime::RunSignature(feeds, {"y"}, {})) != nullptr);
  REQUIRE(f.Run(feeds, {"z"}).ok());
  TestHost& h = f.host(kDev0);
  CHECK(h.registered == std::vector<std::string>{kDev0, kDev0});  // one per signature
  CHECK(h.runs == 4);
  // One partition: nothing to abort, nothing left in a rendezvous.
  CHECK(h.cleanups == 0);
  CHECK(h.aborts.empty());
  // A fed fetch is the fed value.
  auto fed = f.Run(feeds, {"x"});
  REQUIRE(fed.ok());
  CHECK((*fed)[0].ToVector<float>() == std::vector<float>{1, 2});
  // After a Reset the next run registers again.
  const size_t before = h.registered.size();
  f.coordinator->Reset();
  CHECK(f.coordinator->Find(runtime::RunSignature(feeds, {"y"}, {})) == nullptr);
  REQUIRE(f.Run(feeds, {"y"}).ok());
  CHECK(h.registered.size() == before + 1);
}

TEST_CASE("Coordinator: a step over two devices runs a partition on each host; cleanup once per host", "[runtime]") {
  Graph g;
  Output x, a;
  {
    auto s = g.DeviceScope("/device:CPU:0");
    x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
    a = ops::Identity(g, ops::Mul(g, x, ops::Const(g, 2.0f)), "a");
  }
  {
    auto s = g.DeviceScope("/device:CPU:1");
    ops::Identity(g, ops::Add(g, a, ops::Const(g, 1.0f)), "b");
  }
  REQUIRE(g.status().ok());
  Fixture f(g, 2);
  for (int i = 0; i < 2; ++i) {
    auto r = f.Run({{"x", Vec({1, 2})}}, {"b", "a"});
    REQUIRE(r.ok());
    CHECK((*r)[0].ToVector<float>() == std::vector<float>{3, 5});
    CHECK((*r)[1].ToVector<float>() == std::vector<float>{2, 4});
  }
  for (const char* d : {kDev0, kDev1}) {
    TestHost& h = f.host(d);
    CHECK(h.registered == std::vector<std::string>{d});
    CHECK(h.runs == 2);
    CHECK(h.cleanups == 2);
    CHECK(h.aborts.empty());
  }
  // Only device 0's share: one partition, on its host only.
  auto r = f.Run({{"x", Vec({1, 2})}}, {"a"});
  REQUIRE(r.ok());
  CHECK(f.host(kDev1).runs == 2);
}

TEST_CASE("Coordinator: the first failure aborts the step on every host; the cause is what the step returns",
          "[runtime]") {
  Graph g;
  Output x, a;
  {
    auto s = g.DeviceScope("/device:CPU:0");
    x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
    a = ops::Identity(g, x, "a");
  }
  {
    auto s = g.DeviceScope("/device:CPU:1");
    // Device 1 waits for a tensor device 0 never sends (its shape check
    // fails first), so only the abort can end it.
    auto shape = ops::Placeholder(g, DType::kInt32, {1}, "shape");
    ops::Identity(g, ops::Reshape(g, ops::Const(g, 1.0f), shape), "bad_reshape");
    ops::Identity(g, ops::Add(g, a, ops::Const(g, 1.0f)), "b");
  }
  REQUIRE(g.status().ok());
  Fixture f(g, 2);
  auto r = f.Run({{"x", Vec({1, 2})}, {"shape", Tensor::FromVector(std::vector<int32_t>{5}, {1})}},
                 {"b", "bad_reshape"});
  REQUIRE(!r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("Reshape") != std::string::npos);
  for (const char* d : {kDev0, kDev1}) {
    TestHost& h = f.host(d);
    REQUIRE(h.aborts.size() == 1);
    CHECK(h.aborts[0].code() == Code::kInvalidArgument);
    CHECK(h.cleanups == 1);
  }
}

TEST_CASE("Coordinator: plans that failed are kept, except when a host was unavailable", "[runtime]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  ops::Identity(g, ops::Neg(g, x), "y");
  REQUIRE(g.status().ok());
  Fixture f(g, 1);
  TestHost& h = f.host(kDev0);
  // An unknown fetch fails the plan before any host is asked, every time.
  for (int i = 0; i < 2; ++i) {
    auto r = f.Run({{"x", Vec({1, 2})}}, {"nope"});
    REQUIRE(!r.ok());
    CHECK(r.status().message().find("nope") != std::string::npos);
  }
  CHECK(h.registered.empty());
  // A host that is unavailable is asked again on the next run.
  h.fail_next = Unavailable("member went away");
  auto r = f.Run({{"x", Vec({1, 2})}}, {"y"});
  REQUIRE(r.status().code() == Code::kUnavailable);
  r = f.Run({{"x", Vec({1, 2})}}, {"y"});
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<float>() == std::vector<float>{-1, -2});
  CHECK(h.registered.size() == 2);
  // One that refused for good is not.
  h.fail_next = InvalidArgument("no kernel for that here");
  const NamedFeeds none;
  ops::Identity(g, ops::Neg(g, ops::Const(g, 1.0f)), "z");
  r = f.Run(none, {"z"});
  REQUIRE(r.status().code() == Code::kInvalidArgument);
  r = f.Run(none, {"z"});
  REQUIRE(r.status().code() == Code::kInvalidArgument);
  CHECK(h.registered.size() == 3);
  // A feed that does not match its placeholder fails the step, not the plan.
  r = f.Run({{"x", Vec({1, 2, 3})}}, {"y"});
  REQUIRE(r.status().code() == Code::kInvalidArgument);
  CHECK(h.registered.size() == 3);
}
