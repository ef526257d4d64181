#include <catch2/catch.hpp>

#include <future>

#include "actors/variable_shards.h"

using namespace sf;
using namespace sf::runtime;

namespace {

// Waits for an async VariableService answer (tests only).
Result<Tensor> Wait(std::function<void(std::function<void(Result<Tensor>)>)> call) {
  std::promise<Result<Tensor>> p;
  auto f = p.get_future();
  call([&p](Result<Tensor> r) { p.set_value(std::move(r)); });
  return f.get();
}

Status WaitApply(ActorVariables& vars, ApplyRequest req) {
  std::promise<Status> p;
  auto f = p.get_future();
  vars.Apply(std::move(req), [&p](Status s) { p.set_value(std::move(s)); });
  return f.get();
}

caf::actor_system_config& Configure(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.set("scheduler.max-threads", size_t{2});
  return cfg;
}

struct System {
  caf::actor_system_config cfg;
  caf::actor_system sys{Configure(cfg)};
};

}  // namespace

TEST_CASE("Variable shards: resolve, assign, read snapshots", "[variables]") {
  System s;
  ActorVariables vars(s.sys, {"w"});
  auto id = vars.Resolve("w", DType::kFloat32, PartialShape({2}));
  REQUIRE(id.ok());
  CHECK(*vars.Resolve("w", DType::kFloat32, PartialShape({-1})) == *id);
  auto bad = vars.Resolve("w", DType::kFloat64, PartialShape({2}));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("float32") != std::string::npos);
  CHECK(vars.NameOf(*id) == "w");

  auto r = Wait([&](auto done) { vars.Read(*id, done); });
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kFailedPrecondition);
  CHECK(r.status().message().find("'w'") != std::string::npos);

  Tensor init = Tensor::FromVector(std::vector<float>{1, 2});
  REQUIRE(Wait([&](auto done) { vars.Assign(*id, AssignMode::kAssign, init, done); }).ok());
  auto snap = Wait([&](auto done) { vars.Read(*id, done); });
  REQUIRE(snap.ok());
  auto add = Wait([&](auto done) {
    vars.Assign(*id, AssignMode::kAdd, Tensor::FromVector(std::vector<float>{10, 10}), done);
  });
  REQUIRE(add.ok());
  CHECK(add->ToVector<float>() == std::vector<float>{11, 12});
  // The earlier snapshot is unchanged (copy-on-write), and so is the caller's tensor.
  CHECK(snap->ToVector<float>() == std::vector<float>{1, 2});
  CHECK(init.ToVector<float>() == std::vector<float>{1, 2});
  auto wrong = Wait([&](auto done) {
    vars.Assign(*id, AssignMode::kAssign, Tensor::FromVector(std::vector<float>{1, 2, 3}), done);
  });
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().message().find("[3]") != std::string::npos);
  CHECK_FALSE(Wait([&](auto done) { vars.Read(12345, done); }).ok());
}

TEST_CASE("Variable shards: slots are colocated, updates are atomic", "[variables]") {
  System s;
  ActorVariables vars(s.sys, {"w", "other"});
  // The slot resolves first: colocation comes from the graph's variable names.
  auto accum = vars.Resolve("w/Momentum/momentum", DType::kFloat64, PartialShape({2}));
  auto w = vars.Resolve("w", DType::kFloat64, PartialShape({2}));
  auto other = vars.Resolve("other", DType::kFloat64, PartialShape({2}));
  REQUIRE((accum.ok() && w.ok() && other.ok()));
  auto set = [&](int64_t id, std::vector<double> v) {
    REQUIRE(Wait([&](auto done) { vars.Assign(id, AssignMode::kAssign, Tensor::FromVector(v), done); }).ok());
  };
  set(*w, {1, 2});
  set(*accum, {0, 0});
  set(*other, {0, 0});
  ApplyRequest req;
  req.optimizer = OptimizerKind::kMomentum;
  req.var_ids = {*w, *accum};
  req.scalars = {Tensor::Scalar<double>(0.1), Tensor::Scalar<double>(0.9)};
  req.grad = Tensor::FromVector(std::vector<double>{1, 1});
  // Many concurrent updates: each is serialized by the shard, none is lost.
  std::vector<std::future<Status>> fs;
  for (int i = 0; i < 20; ++i)
    fs.push_back(std::async(std::launch::async, [&] { return WaitApply(vars, req); }));
  for (auto& f : fs) CHECK(f.get().ok());
  auto a = Wait([&](auto done) { vars.Read(*accum, done); });
  REQUIRE(a.ok());
  // accum_n = 0.9 * accum_{n-1} + 1 after 20 updates.
  double want = 0;
  for (int i = 0; i < 20; ++i) want = 0.9 * want + 1;
  CHECK(a->ToVector<double>()[0] == Approx(want));

  req.var_ids = {*w, *other};
  Status st = WaitApply(vars, req);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("colocated") != std::string::npos);
}
