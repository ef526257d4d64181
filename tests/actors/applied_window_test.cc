#include <catch2/catch.hpp>

#include <algorithm>
#include <future>

#include "actors/applied_window.h"
#include "actors/variable_shards.h"
#include "tests/support/caf_system.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace sf::runtime;

TEST_CASE("AppliedWindow: remembers origins for kKeepMs, at most kMaxOrigins", "[variables][origin]") {
  AppliedWindow w;
  const UpdateOrigin a{5, 1}, b{5, 2}, none{};
  CHECK_FALSE(w.Seen(a));
  w.Record(a, 1000);
  w.Record(none, 1000);
  CHECK(w.Seen(a));
  CHECK_FALSE(w.Seen(b));
  CHECK_FALSE(w.Seen(none));
  CHECK(w.size() == 1);
  w.Record(b, 1000 + AppliedWindow::kKeepMs);  // a is exactly kKeepMs old: kept
  CHECK(w.Seen(a));
  w.Record(UpdateOrigin{6, 1}, 1001 + AppliedWindow::kKeepMs);  // now a is older: forgotten
  CHECK_FALSE(w.Seen(a));
  CHECK(w.Seen(b));
  // The count bound forgets the oldest first, whatever their age.
  AppliedWindow full;
  for (uint64_t i = 1; i <= AppliedWindow::kMaxOrigins + 1; ++i) full.Record(UpdateOrigin{i, 0}, 0);
  CHECK(full.size() == AppliedWindow::kMaxOrigins);
  CHECK_FALSE(full.Seen(UpdateOrigin{1, 0}));
  CHECK(full.Seen(UpdateOrigin{2, 0}));
}

namespace {

using testing::Await;

// A [n, 1] float tensor.
Tensor Column(const std::vector<float>& v) {
  Tensor t(DType::kFloat32, Shape{static_cast<int64_t>(v.size()), 1});
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

float First(ActorVariables& vars, int64_t id) {
  auto r = Await<Result<Tensor>>([&](auto done) { vars.Read(id, done); });
  REQUIRE(r.ok());
  return r->data<float>()[0];
}

}  // namespace

TEST_CASE("Variable shards: an update whose origin was applied changes nothing", "[variables][origin]") {
  testing::CafSystem s;
  ActorVariables vars(s.sys, {"w", "t"});
  const int64_t w = *vars.Resolve("w", DType::kFloat32, PartialShape({2}));
  const int64_t t = *vars.Resolve("t", DType::kFloat32, PartialShape({4, 1}));
  REQUIRE(Await<Result<Tensor>>([&](auto done) {
            vars.Assign(w, AssignMode::kAssign, Tensor::FromVector(std::vector<float>{0, 0}), done);
          }).ok());
  REQUIRE(Await<Result<Tensor>>([&](auto done) {
            vars.Assign(t, AssignMode::kAssign, Column({0, 0, 0, 0}),
                        done);
          }).ok());
  const UpdateOrigin step7_add{7, 11}, step7_sgd{7, 12}, step7_sparse{7, 13}, step8_add{8, 11};

  // AssignAdd: twice with one origin adds once; the second answers the value as it is.
  auto add = [&](UpdateOrigin o) {
    return Await<Result<Tensor>>([&](auto done) {
      vars.Assign(w, AssignMode::kAdd, Tensor::FromVector(std::vector<float>{1, 1}), done, o);
    });
  };
  REQUIRE(add(step7_add).ok());
  auto again = add(step7_add);
  REQUIRE(again.ok());
  CHECK(again->data<float>()[0] == 1.0f);
  REQUIRE(add(step8_add).ok());
  REQUIRE(add(UpdateOrigin{}).ok());  // no origin: applied every time
  REQUIRE(add(UpdateOrigin{}).ok());
  CHECK(First(vars, w) == 4.0f);

  // A dense optimizer update.
  ApplyRequest sgd;
  sgd.optimizer = OptimizerKind::kGradientDescent;
  sgd.var_ids = {w};
  sgd.scalars = {Tensor::Scalar<float>(1.0f)};
  sgd.grad = Tensor::FromVector(std::vector<float>{-10, -10});
  sgd.origin = step7_sgd;
  for (int i = 0; i < 3; ++i)
    REQUIRE(Await<Status>([&](auto done) { vars.Apply(sgd, done); }).ok());
  CHECK(First(vars, w) == 14.0f);

  // A sparse update (the counter of nemesis tests).
  SparseApplyRequest sp;
  sp.optimizer = OptimizerKind::kGradientDescent;
  sp.var_ids = {t};
  sp.scalars = {Tensor::Scalar<float>(1.0f)};
  sp.indices = Tensor::FromVector(std::vector<int64_t>{0});
  sp.values = Column({-1});
  sp.indices_unique = true;
  sp.origin = step7_sparse;
  for (int i = 0; i < 3; ++i)
    REQUIRE(Await<Status>([&](auto done) { vars.SparseApply(sp, done); }).ok());
  CHECK(First(vars, t) == 1.0f);
  // A failed update records nothing: it applies when it comes again and can.
  sp.origin = UpdateOrigin{9, 1};
  sp.indices = Tensor::FromVector(std::vector<int64_t>{99});
  CHECK_FALSE(Await<Status>([&](auto done) { vars.SparseApply(sp, done); }).ok());
  sp.indices = Tensor::FromVector(std::vector<int64_t>{0});
  REQUIRE(Await<Status>([&](auto done) { vars.SparseApply(sp, done); }).ok());
  CHECK(First(vars, t) == 2.0f);
  vars.Shutdown();
}

namespace {

std::vector<float> Values(ActorVariables& vars, const std::string& name) {
  std::promise<std::vector<std::pair<std::string, Tensor>>> p;
  auto f = p.get_future();
  vars.ReadNamed({name}, [&p](std::vector<std::pair<std::string, Tensor>> v) { p.set_value(std::move(v)); });
  auto v = f.get();
  REQUIRE(v.size() == 1);
  return v[0].second.ToVector<float>();
}

}  // namespace

TEST_CASE("Variable shards: a backup store applies a holder's changes, slots colocated, origins once",
          "[variables][origin][replicas]") {
  testing::CafSystem s;
  ActorVariables holder(s.sys, {"t"});
  ActorVariables backup(s.sys, {});  // a backup knows no graph: it learns the variables from the changes
  const std::set<std::string> names{"t", "t/Adagrad/accumulator"};
  const int64_t t = *holder.Resolve("t", DType::kFloat32, PartialShape({4, 2}));
  const int64_t acc = *holder.Resolve("t/Adagrad/accumulator", DType::kFloat32, PartialShape({4, 2}));
  Tensor v0(DType::kFloat32, Shape{4, 2}), a0(DType::kFloat32, Shape{4, 2});
  for (int i = 0; i < 8; ++i) {
    v0.data<float>()[i] = 0.5f * i;
    a0.data<float>()[i] = 0.1f;
  }
  REQUIRE(Await<Result<Tensor>>([&](auto done) { holder.Assign(t, AssignMode::kAssign, v0, done); }).ok());
  REQUIRE(Await<Result<Tensor>>([&](auto done) { holder.Assign(acc, AssignMode::kAssign, a0, done); }).ok());

  // The whole state, applied one variable at a time (as if cut into several
  // messages): the variable comes first, so its slot joins its shard.
  std::vector<VarChanges> whole = holder.TakeChanges(names, /*full=*/true);
  REQUIRE(whole.size() == 2);
  CHECK(whole[0].name == "t");
  for (auto& c : whole) {
    CHECK_FALSE(c.rows.valid());
    REQUIRE(Await<Status>([&](auto done) { backup.ApplyChanges({c}, done); }).ok());
  }
  // An update on the holder: only its row travels, with its origin.
  SparseApplyRequest sp;
  sp.optimizer = OptimizerKind::kAdagrad;
  sp.var_ids = {t, acc};
  sp.scalars = {Tensor::Scalar<float>(0.5f)};
  sp.indices = Tensor::FromVector(std::vector<int64_t>{1});
  sp.values = Tensor(DType::kFloat32, Shape{1, 2});
  sp.values.data<float>()[0] = 1.0f;
  sp.values.data<float>()[1] = -2.0f;
  sp.indices_unique = true;
  sp.origin = UpdateOrigin{42, 7};
  REQUIRE(Await<Status>([&](auto done) { holder.SparseApply(sp, done); }).ok());
  std::vector<VarChanges> delta = holder.TakeChanges(names, /*full=*/false);
  REQUIRE(delta.size() == 2);
  for (const auto& c : delta) {
    REQUIRE(c.rows.valid());
    CHECK(c.rows.ToVector<int64_t>() == std::vector<int64_t>{1});
  }
  CHECK(delta[0].origins.size() + delta[1].origins.size() == 1);
  REQUIRE(Await<Status>([&](auto done) { backup.ApplyChanges(delta, done); }).ok());
  // Bit for bit, and nothing left to send.
  for (const auto& n : names) CHECK(Values(backup, n) == Values(holder, n));
  CHECK(holder.TakeChanges(names, false).empty());
  // Promoted, the backup applies the same update (a step run again) once:
  // nothing changes; a new one applies, with its slot beside it.
  auto bt = backup.Resolve("t", DType::kFloat32, PartialShape({4, 2}));
  auto ba = backup.Resolve("t/Adagrad/accumulator", DType::kFloat32, PartialShape({4, 2}));
  REQUIRE(bt.ok());
  REQUIRE(ba.ok());
  SparseApplyRequest again = sp;
  again.var_ids = {*bt, *ba};
  const std::vector<float> before = Values(backup, "t");
  REQUIRE(Await<Status>([&](auto done) { backup.SparseApply(again, done); }).ok());
  CHECK(Values(backup, "t") == before);
  again.origin = UpdateOrigin{43, 7};
  REQUIRE(Await<Status>([&](auto done) { backup.SparseApply(again, done); }).ok());  // colocated, or this fails
  CHECK(Values(backup, "t") != before);
  // Rows for a variable the backup does not hold are refused by name.
  VarChanges stray{"nope", Tensor::FromVector(std::vector<float>{1}), Tensor::FromVector(std::vector<int64_t>{0}), {}};
  Status refused = Await<Status>([&](auto done) { backup.ApplyChanges({stray}, done); });
  CHECK(refused.code() == Code::kFailedPrecondition);
  CHECK(refused.message().find("'nope'") != std::string::npos);
  // A piece that names a leading dimension no memory holds is refused, not allocated.
  VarChanges huge{"huge", Column({1}),
                  Tensor::FromVector(std::vector<int64_t>{0}), {}, int64_t{1} << 50};
  Status too_big = Await<Status>([&](auto done) { backup.ApplyChanges({huge}, done); });
  CHECK(too_big.code() == Code::kResourceExhausted);
  CHECK(too_big.message().find("'huge'") != std::string::npos);
  // SSP clocks that do not fit the variable's barrier refuse the whole
  // change: its rows are not written either.
  VarChanges two = delta[0];
  two.clocks = {3, 4};
  REQUIRE(Await<Status>([&](auto done) { backup.ApplyChanges({two}, done); }).ok());
  VarChanges three = delta[0];
  three.value = three.value.Copy();
  three.value.data<float>()[0] = 1234.0f;
  three.clocks = {5, 6, 7};
  const std::vector<float> kept = Values(backup, "t");
  Status misfit = Await<Status>([&](auto done) { backup.ApplyChanges({three}, done); });
  CHECK(misfit.code() == Code::kInvalidArgument);
  CHECK(misfit.message().find("3 stale-synchronous clocks") != std::string::npos);
  CHECK(Values(backup, "t") == kept);
  holder.Shutdown();
  backup.Shutdown();
}
