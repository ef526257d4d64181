// The in-graph SaveCheckpoint and RestoreCheckpoint ops (paper section 4.3):
// they write the checkpoints Session::Save writes and read them back.
#include <catch2/catch.hpp>

#include <chrono>

#include "shardflow/checkpoint_ops.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"
#include "tests/support/sparse_model.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

using namespace sf;

namespace {
bool Contains(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }
}  // namespace

TEST_CASE("In-graph Save and Restore round-trip every variable and slot", "[checkpoint][ops]") {
  testing::TempDir dir("sf_ckpt_ops");
  testing::SparseModel m;
  auto step = ops::Placeholder(m.g, DType::kInt64, PartialShape{}, "global_step");
  Output save = ops::SaveVariables(m.g, dir.path, step);
  Output restored_step;
  const Operation restore = ops::RestoreVariables(m.g, dir.path, &restored_step);
  REQUIRE(m.g.status().ok());
  REQUIRE(save.valid());
  REQUIRE(restore.valid());
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
  for (int i = 0; i < 6; ++i) REQUIRE(testing::Step(s, m, i).ok());
  const std::vector<float> at6 = testing::Params(s, m);
  auto id = s.Run({{"global_step", Tensor::Scalar<int64_t>(6)}}, std::vector<Output>{save});
  INFO(id.status().ToString());
  REQUIRE(id.ok());
  for (int i = 6; i < 10; ++i) REQUIRE(testing::Step(s, m, i).ok());
  REQUIRE(testing::Params(s, m) != at6);
  auto r = s.Run({}, std::vector<Output>{restored_step}, {restore});
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<int64_t>()[0] == 6);
  testing::RequireClose(testing::Params(s, m), at6, 0.0f);
  // The same checkpoint through the session API: the format is one.
  CHECK(*Session::CheckpointStep(dir.path) == 6);
  Session other(m.g);
  REQUIRE(other.Restore(dir.path).ok());
  testing::RequireClose(testing::Params(other, m), at6, 0.0f);
}

TEST_CASE("In-graph Restore without a checkpoint, and bad Save inputs, are named errors", "[checkpoint][ops]") {
  testing::TempDir dir("sf_ckpt_ops_bad");
  testing::SparseModel m;
  const Operation restore = ops::RestoreVariables(m.g, dir.path + "/none");
  REQUIRE(restore.valid());
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
  auto r = s.Run({}, std::vector<Output>{}, {restore});
  REQUIRE(!r.ok());
  INFO(r.status().ToString());
  CHECK(r.status().code() == Code::kNotFound);
  CHECK(Contains(r.status(), "none"));

  Graph g;
  ops::Variable(g, "v", ops::Const(g, 1.0f));
  ops::SaveVariables(g, dir.path, ops::Const(g, 1.0f));  // a float step
  CHECK(!g.status().ok());
  CHECK(Contains(g.status(), "global_step must be int64"));
  Graph empty;
  ops::SaveVariables(empty, dir.path, ops::Const(empty, int64_t{1}));
  CHECK(Contains(empty.status(), "no variables"));
}

TEST_CASE("CheckpointSchedule is due every N steps or T seconds", "[checkpoint]") {
  CheckpointSchedule by_steps(10, 0);
  std::vector<int64_t> due;
  for (int64_t step = 1; step <= 35; ++step)
    if (by_steps.Due(step)) due.push_back(step);
  CHECK(due == std::vector<int64_t>{10, 20, 30});
  CheckpointSchedule resumed(10, 0);  // a run resumed at step 20
  due.clear();
  for (int64_t step = 21; step <= 40; ++step)
    if (resumed.Due(step)) due.push_back(step);
  CHECK(due == std::vector<int64_t>{30, 40});
  const auto t0 = std::chrono::steady_clock::now();
  CheckpointSchedule by_time(0, 0.05);
  CHECK(!by_time.Due(1));
  // Due once 50 ms have passed (a Due that answers false changes nothing),
  // and not before.
  CHECK(testing::WaitFor([&] { return by_time.Due(2); }, std::chrono::seconds(10)));
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(50));
  CHECK(!by_time.Due(3));  // the clock restarted
  CheckpointSchedule never(0, 0);
  for (int64_t step = 1; step < 100; ++step) CHECK(!never.Due(step));
}
