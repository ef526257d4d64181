// A whole take in pieces (ActorVariables::TakeChanges with pieces_over, a
// slot's copy to a new backup): big dense variables are read piece by piece
// as they are sent, so no buffer is shared with the copy and the next update
// writes in place (a shared one made a 10M-row table's next step copy the
// table and its accumulator whole: 0.1-0.8 s each, issue 35's
// bench_recovery); the pieces and the round after them rebuild the state.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "actors/variable_shards.h"
#include "tests/support/caf_system.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace sf::runtime;

namespace {

using testing::Await;

constexpr int64_t kRows = 130, kDim = 4;

// The address of variable id's buffer now (a snapshot shares it, and is
// dropped at once, so the buffer is the variable's alone again after).
const void* BufferOf(ActorVariables& vars, int64_t id) {
  auto r = Await<Result<Tensor>>([&](auto done) { vars.Read(id, done); });
  REQUIRE(r.ok());
  return r->raw_data();
}

std::vector<float> ValueOf(ActorVariables& vars, int64_t id) {
  auto r = Await<Result<Tensor>>([&](auto done) { vars.Read(id, done); });
  REQUIRE(r.ok());
  return r->ToVector<float>();
}

// An Adagrad update of rows of t (and its accumulator acc) with origin o.
void Update(ActorVariables& vars, int64_t t, int64_t acc, std::vector<int64_t> rows, UpdateOrigin o) {
  SparseApplyRequest sp;
  sp.optimizer = OptimizerKind::kAdagrad;
  sp.var_ids = {t, acc};
  sp.scalars = {Tensor::Scalar<float>(0.5f)};
  const int64_t n = static_cast<int64_t>(rows.size());
  sp.indices = Tensor::FromVector(rows);
  sp.values = Tensor(DType::kFloat32, Shape{n, kDim});
  for (int64_t i = 0; i < n * kDim; ++i) sp.values.data<float>()[i] = 1.0f + static_cast<float>(i);
  sp.indices_unique = true;
  sp.origin = o;
  REQUIRE(Await<Status>([&](auto done) { vars.SparseApply(sp, done); }).ok());
}

}  // namespace

TEST_CASE("Variable shards: a whole take in pieces shares no buffer, and with the next round rebuilds the state",
          "[variables][replicas]") {
  testing::CafSystem s;
  ActorVariables holder(s.sys, {"t"});
  ActorVariables backup(s.sys, {});
  const std::set<std::string> names{"t", "t/Adagrad/accumulator"};
  const int64_t t = *holder.Resolve("t", DType::kFloat32, PartialShape({kRows, kDim}));
  const int64_t acc = *holder.Resolve("t/Adagrad/accumulator", DType::kFloat32, PartialShape({kRows, kDim}));
  Tensor v0(DType::kFloat32, Shape{kRows, kDim}), a0(DType::kFloat32, Shape{kRows, kDim});
  for (int64_t i = 0; i < kRows * kDim; ++i) {
    v0.data<float>()[i] = 0.5f * static_cast<float>(i);
    a0.data<float>()[i] = 0.1f;
  }
  REQUIRE(Await<Result<Tensor>>([&](auto done) { holder.Assign(t, AssignMode::kAssign, v0, done); }).ok());
  REQUIRE(Await<Result<Tensor>>([&](auto done) { holder.Assign(acc, AssignMode::kAssign, a0, done); }).ok());
  const void* t_buffer = BufferOf(holder, t);
  const void* acc_buffer = BufferOf(holder, acc);

  // 2,080 bytes each, over 256: both left to be read in pieces.
  std::vector<VarChanges> whole = holder.TakeChanges(names, /*full=*/true, /*pieces_over=*/256);
  REQUIRE(whole.size() == 2);
  for (const auto& c : whole) {
    CHECK_FALSE(c.value.valid());
    CHECK(c.leading == kRows);
    REQUIRE(c.read_rows);
  }
  // An update while the copy is under way writes in place.
  Update(holder, t, acc, {1, 77}, UpdateOrigin{42, 7});
  CHECK(BufferOf(holder, t) == t_buffer);
  CHECK(BufferOf(holder, acc) == acc_buffer);

  // The pieces as SendSlotChanges cuts them (16 rows of 16 bytes in 256),
  // with one more update half way: a row read before it (3) and one after (100).
  int pieces = 0;
  for (auto& c : whole) {
    for (int64_t r0 = 0; r0 < kRows;) {
      if (c.name == "t" && r0 == 64) Update(holder, t, acc, {3, 100}, UpdateOrigin{43, 7});
      auto rows = c.read_rows(r0, 256);
      REQUIRE(rows.ok());
      const int64_t k = rows->dim(0);
      CHECK(k == std::min<int64_t>(16, kRows - r0));
      VarChanges piece;
      piece.name = c.name;
      piece.leading = kRows;
      piece.value = *rows;
      piece.rows = Tensor(DType::kInt64, Shape{k});
      for (int64_t i = 0; i < k; ++i) piece.rows.data<int64_t>()[i] = r0 + i;
      if (r0 == 0) piece.origins = c.origins;
      REQUIRE(Await<Status>([&](auto done) { backup.ApplyChanges({piece}, done); }).ok());
      r0 += k;
      ++pieces;
    }
  }
  CHECK(pieces == 2 * 9);
  Update(holder, t, acc, {5}, UpdateOrigin{44, 7});
  // The round after the copy (SyncWhole's catch-up) sends every row changed
  // since the take, with the origins: the backup then holds the holder's
  // state bit for bit.
  std::vector<VarChanges> rest = holder.TakeChanges(names, /*full=*/false);
  REQUIRE(rest.size() == 2);
  for (const auto& c : rest) CHECK(c.rows.ToVector<int64_t>() == std::vector<int64_t>{1, 3, 5, 77, 100});
  REQUIRE(Await<Status>([&](auto done) { backup.ApplyChanges(rest, done); }).ok());
  const int64_t bt = *backup.Resolve("t", DType::kFloat32, PartialShape({kRows, kDim}));
  const int64_t ba = *backup.Resolve("t/Adagrad/accumulator", DType::kFloat32, PartialShape({kRows, kDim}));
  CHECK(ValueOf(backup, bt) == ValueOf(holder, t));
  CHECK(ValueOf(backup, ba) == ValueOf(holder, acc));
  // Promoted, the backup applies each update once: a step run again changes nothing.
  const std::vector<float> before = ValueOf(backup, bt);
  Update(backup, bt, ba, {1, 77}, UpdateOrigin{42, 7});
  Update(backup, bt, ba, {3, 100}, UpdateOrigin{43, 7});
  CHECK(ValueOf(backup, bt) == before);

  // A whole take that shares the buffers (no pieces) makes the next update copy them.
  std::vector<VarChanges> shared = holder.TakeChanges(names, /*full=*/true);
  REQUIRE(shared.size() == 2);
  CHECK(shared[0].value.valid());
  const void* kept = BufferOf(holder, t);
  Update(holder, t, acc, {9}, UpdateOrigin{46, 7});
  CHECK(BufferOf(holder, t) != kept);
}
