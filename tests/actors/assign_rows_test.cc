// VariableService::AssignRows on the variable shards (the ResourceScatterUpdate
// op's one request): its message, applied once per origin, its rows marked
// for checkpoints and replicas, and atomic for concurrent readers.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "actors/variable_shards.h"
#include "tests/support/caf_system.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace sf::runtime;

namespace {

using testing::Await;

AssignRowsRequest RowsOf(int64_t id, std::vector<int64_t> indices, std::vector<float> rows, int64_t dim,
                         UpdateOrigin origin = {}) {
  AssignRowsRequest req;
  req.var_id = id;
  const int64_t n = static_cast<int64_t>(indices.size());
  req.indices = Tensor::FromVector(indices);
  req.rows = Tensor::FromVector(rows, Shape{n, dim});
  req.origin = origin;
  return req;
}

Status AssignRows(ActorVariables& vars, AssignRowsRequest req) {
  return Await<Status>([&](auto done) { vars.AssignRows(std::move(req), done); });
}

std::vector<float> ValueOf(ActorVariables& vars, int64_t id) {
  auto r = Await<Result<Tensor>>([&](auto done) { vars.Read(id, done); });
  REQUIRE(r.ok());
  return r->ToVector<float>();
}

}  // namespace

TEST_CASE("AssignRows: one message to the shard; an origin applied once; failures record nothing",
          "[variables][origin][scatter_update]") {
  testing::CafSystem s;
  ActorVariables vars(s.sys, {"t"});
  const int64_t t = *vars.Resolve("t", DType::kFloat32, PartialShape({3, 2}));
  REQUIRE(Await<Result<Tensor>>([&](auto done) {
            vars.Assign(t, AssignMode::kAssign, Tensor::FromVector(std::vector<float>{0, 0, 0, 0, 0, 0}, Shape{3, 2}),
                        done);
          }).ok());

  // The step's update applies; the same origin again (a step run again after
  // a later update of the row) changes nothing.
  const UpdateOrigin step7{7, 21};
  REQUIRE(AssignRows(vars, RowsOf(t, {1}, {5, 5}, 2, step7)).ok());
  REQUIRE(AssignRows(vars, RowsOf(t, {1}, {6, 6}, 2, UpdateOrigin{8, 21})).ok());
  REQUIRE(AssignRows(vars, RowsOf(t, {1}, {5, 5}, 2, step7)).ok());
  CHECK(ValueOf(vars, t) == std::vector<float>{0, 0, 6, 6, 0, 0});
  // No origin (a local session): applied every time.
  REQUIRE(AssignRows(vars, RowsOf(t, {0}, {1, 1}, 2)).ok());
  REQUIRE(AssignRows(vars, RowsOf(t, {0, 0}, {2, 2, 3, 3}, 2)).ok());
  CHECK(ValueOf(vars, t) == std::vector<float>{3, 3, 6, 6, 0, 0});

  // A refused update writes nothing and records nothing: it applies when it comes again and can.
  Status bad = AssignRows(vars, RowsOf(t, {2, 3}, {9, 9, 9, 9}, 2, UpdateOrigin{9, 21}));
  CHECK(bad.code() == Code::kInvalidArgument);
  CHECK(bad.message().find("'t'") != std::string::npos);
  CHECK(bad.message().find("index 3") != std::string::npos);
  CHECK(ValueOf(vars, t) == std::vector<float>{3, 3, 6, 6, 0, 0});
  REQUIRE(AssignRows(vars, RowsOf(t, {2}, {9, 9}, 2, UpdateOrigin{9, 21})).ok());
  CHECK(ValueOf(vars, t) == std::vector<float>{3, 3, 6, 6, 9, 9});
  CHECK(AssignRows(vars, RowsOf(12345, {0}, {1, 1}, 2)).code() == Code::kNotFound);

  // The actor's handler (the path a busy shard takes) does the same.
  VariableShardActor shard = SpawnVariableShard(s.sys);
  caf::anon_send(shard, DefineVariable{0, "m", DType::kFloat32, PartialShape({2, 1})});
  auto ask = [&](AssignRowsRequest req) {
    return Await<Status>([&](auto done) { caf::anon_send(shard, AssignVariableRows{std::move(req), done}); });
  };
  CHECK(ask(RowsOf(0, {0}, {1}, 1)).code() == Code::kFailedPrecondition);  // uninitialised
  CHECK(ask(RowsOf(4, {0}, {1}, 1)).code() == Code::kNotFound);
  REQUIRE(Await<Result<Tensor>>([&](auto done) {
            caf::anon_send(shard, AssignVariable{0, AssignMode::kAssign, Tensor::FromVector(std::vector<float>{0, 0}, Shape{2, 1}),
                                                 done});
          }).ok());
  REQUIRE(ask(RowsOf(0, {1}, {4}, 1, step7)).ok());
  REQUIRE(ask(RowsOf(0, {1}, {5}, 1, UpdateOrigin{8, 1})).ok());
  REQUIRE(ask(RowsOf(0, {1}, {4}, 1, step7)).ok());
  auto m = Await<Result<Tensor>>([&](auto done) { caf::anon_send(shard, runtime::ReadVariable{0, done}); });
  REQUIRE(m.ok());
  CHECK(m->ToVector<float>() == std::vector<float>{0, 5});
  vars.Shutdown();
}

TEST_CASE("AssignRows marks only its rows: incremental checkpoints and replicas take them",
          "[variables][replicas][scatter_update]") {
  testing::CafSystem s;
  ActorVariables holder(s.sys, {"t"});
  ActorVariables backup(s.sys, {});
  const int64_t t = *holder.Resolve("t", DType::kFloat32, PartialShape({130, 1}));
  Tensor init(DType::kFloat32, Shape{130, 1});
  for (int i = 0; i < 130; ++i) init.data<float>()[i] = static_cast<float>(i);
  REQUIRE(Await<Result<Tensor>>([&](auto done) { holder.Assign(t, AssignMode::kAssign, init, done); }).ok());
  auto whole = holder.TakeChanges({"t"}, /*full=*/true);
  REQUIRE(whole.size() == 1);
  REQUIRE(Await<Status>([&](auto done) { backup.ApplyChanges(whole, done); }).ok());

  REQUIRE(AssignRows(holder, RowsOf(t, {129, 3, 64}, {-1, -2, -3}, 1, UpdateOrigin{11, 2})).ok());
  auto delta = holder.TakeChanges({"t"}, /*full=*/false);
  REQUIRE(delta.size() == 1);
  REQUIRE(delta[0].rows.valid());
  CHECK(delta[0].rows.ToVector<int64_t>() == std::vector<int64_t>{3, 64, 129});
  REQUIRE(delta[0].origins.size() == 1);
  CHECK(delta[0].origins[0] == UpdateOrigin{11, 2});
  REQUIRE(Await<Status>([&](auto done) { backup.ApplyChanges(delta, done); }).ok());
  const int64_t bt = *backup.Resolve("t", DType::kFloat32, PartialShape({130, 1}));
  CHECK(ValueOf(backup, bt) == ValueOf(holder, t));
  // Promoted, the backup applies the step run again once: nothing changes.
  REQUIRE(AssignRows(backup, RowsOf(bt, {3}, {100}, 1, UpdateOrigin{11, 2})).ok());
  CHECK(ValueOf(backup, bt)[3] == -2.0f);
  // An incremental checkpoint (the same record of rows) takes only the rows written since.
  REQUIRE(AssignRows(holder, RowsOf(t, {7, 5, 7}, {1, 2, 3}, 1)).ok());
  auto dirty = holder.SnapshotDirty();
  REQUIRE(dirty.size() == 1);
  CHECK_FALSE(dirty[0].all_dirty);
  CHECK(dirty[0].dirty_rows == std::vector<int64_t>{5, 7});
  holder.Shutdown();
  backup.Shutdown();
}

TEST_CASE("AssignRows is atomic: a concurrent read sees all of an update or none of it",
          "[variables][scatter_update]") {
  testing::CafSystem s;
  ActorVariables vars(s.sys, {"t"});
  constexpr int64_t kRows = 64, kDim = 32;
  const int64_t t = *vars.Resolve("t", DType::kFloat32, PartialShape({kRows, kDim}));
  REQUIRE(Await<Result<Tensor>>([&](auto done) {
            vars.Assign(t, AssignMode::kAssign, Tensor::FromVector(std::vector<float>(kRows * kDim, 0.0f), Shape{kRows, kDim}),
                        done);
          }).ok());
  std::vector<int64_t> every(kRows);
  for (int64_t r = 0; r < kRows; ++r) every[r] = (r * 37) % kRows;  // every row, out of order
  std::atomic<bool> writing{true};
  std::atomic<int> torn{0}, reads{0};
  std::vector<std::thread> readers;
  for (int k = 0; k < 2; ++k) {
    readers.emplace_back([&] {
      float last = 0;
      while (writing.load()) {
        auto r = Await<Result<Tensor>>([&](auto done) { vars.Read(t, done); });
        if (!r.ok()) continue;
        const float* p = r->data<float>();
        bool whole = p[0] >= last;  // a later read never sees an earlier update
        for (int64_t i = 1; i < kRows * kDim && whole; ++i) whole = p[i] == p[0];
        torn += !whole;
        last = p[0];
        ++reads;
      }
    });
  }
  // Update k sets every row to k: a read between rows would see two values,
  // or one below what it read before. Updates go on until the readers have
  // read many times among them.
  int k = 0;
  while (k < 300 || reads.load() < 200)
    REQUIRE(AssignRows(vars, RowsOf(t, every, std::vector<float>(kRows * kDim, static_cast<float>(++k)), kDim)).ok());
  writing = false;
  for (auto& r : readers) r.join();
  CHECK(torn.load() == 0);
  CHECK(ValueOf(vars, t) == std::vector<float>(kRows * kDim, static_cast<float>(k)));
  vars.Shutdown();
}
