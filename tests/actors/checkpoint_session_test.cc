// Session::Save and Session::Restore through variable shard actors.
#include <catch2/catch.hpp>

#include <map>

#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"
#include "storage/checkpoint.h"
#include "tests/support/temp_dir.h"

using namespace sf;

namespace {

// A linear model trained with Adam, with a read op for every variable and slot.
struct Model {
  Graph g;
  Output x, y, loss;
  int train = -1, init = -1;
  std::map<std::string, Output> reads;  // by shared name

  explicit Model(int64_t w_rows = 2) {
    x = ops::Placeholder(g, DType::kFloat32, {-1, w_rows}, "x");
    y = ops::Placeholder(g, DType::kFloat32, {-1, 1}, "y");
    auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>(w_rows, 0.0f), {w_rows, 1}));
    auto b = ops::Variable(g, "b", ops::Const(g, std::vector<float>{0.0f}, {1}));
    loss = ops::Mean(g, ops::Square(g, ops::Sub(g, ops::Add(g, ops::MatMul(g, x, w), b), y)));
    AdamOptimizer opt(0.1);
    auto t = opt.Minimize(g, loss);
    REQUIRE(t.ok());
    train = *t;
    init = ops::GlobalVariablesInitializer(g);
    const int n = g.num_nodes();
    for (int i = 0; i < n; ++i) {
      if (g.node(i).op != "VarHandle") continue;
      const std::string name = *g.node(i).attrs.Get<std::string>("shared_name");
      reads[name] = ops::ReadVariable(g, Output(&g, i, 0), *g.node(i).attrs.Get<DType>("dtype"));
    }
    REQUIRE(g.status().ok());
  }

  FeedMap Feeds() const {
    return {{"x", Tensor::FromVector<float>({1, 2, 3, 4, -1, 0.5f}, {3, 2})},
            {"y", Tensor::FromVector<float>({1, 0, 2}, {3, 1})}};
  }

  // Every variable's and slot's value as doubles, by name.
  std::map<std::string, std::vector<double>> Values(Session& s) const {
    std::vector<Output> fetches;
    for (const auto& kv : reads) fetches.push_back(kv.second);
    auto r = s.Run({}, fetches);
    REQUIRE(r.ok());
    std::map<std::string, std::vector<double>> out;
    size_t i = 0;
    for (const auto& kv : reads) out[kv.first] = (*r)[i++].ToVector<double>();
    return out;
  }
};

}  // namespace

TEST_CASE("Session Save and Restore round-trip variables and optimizer slots", "[session][checkpoint]") {
  sf::testing::TempDir dir("sf_ckpt_session");
  Model m;
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
  for (int i = 0; i < 3; ++i) REQUIRE(s.Run(m.Feeds(), std::vector<Output>{}, {m.train}).ok());
  const auto saved = m.Values(s);
  REQUIRE(saved.size() >= 4);  // w, b and Adam's slots
  bool has_slot = false;
  for (const auto& kv : saved) has_slot |= kv.first.find("/Adam/") != std::string::npos;
  CHECK(has_slot);

  auto id = s.Save(dir.path, 3);
  REQUIRE(id.ok());
  CHECK(*id == 1);
  CHECK(*Session::CheckpointStep(dir.path) == 3);

  for (int i = 0; i < 3; ++i) REQUIRE(s.Run(m.Feeds(), std::vector<Output>{}, {m.train}).ok());
  CHECK(m.Values(s) != saved);

  REQUIRE(s.Restore(dir.path).ok());
  CHECK(m.Values(s) == saved);

  // A fresh session of the same graph restores without running the initializer.
  Session s2(m.g);
  REQUIRE(s2.Restore(dir.path, *id).ok());
  CHECK(m.Values(s2) == saved);
  // And training continues identically from the restored state.
  REQUIRE(s.Run(m.Feeds(), std::vector<Output>{}, {m.train}).ok());
  REQUIRE(s2.Run(m.Feeds(), std::vector<Output>{}, {m.train}).ok());
  CHECK(m.Values(s) == m.Values(s2));
}

TEST_CASE("Restore into a graph with another variable shape names the variable", "[session][checkpoint]") {
  sf::testing::TempDir dir("sf_ckpt_session");
  {
    Model m(2);
    Session s(m.g);
    REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
    REQUIRE(s.Save(dir.path, 0).ok());
  }
  Model other(3);
  Session s(other.g);
  Status st = s.Restore(dir.path);
  REQUIRE(!st.ok());
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message().find("'w") != std::string::npos);
  CHECK(st.message().find("[2,1]") != std::string::npos);
}

TEST_CASE("Restore errors: no store, corrupt checkpoint falls back to the previous one", "[session][checkpoint]") {
  sf::testing::TempDir dir("sf_ckpt_session");
  Model m;
  Session s(m.g);
  Status none = s.Restore(dir / "nothing");
  CHECK(none.code() == Code::kNotFound);
  CHECK(none.message().find(dir / "nothing") != std::string::npos);

  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
  REQUIRE(s.Save(dir.path, 0).ok());
  const auto first = m.Values(s);
  REQUIRE(s.Run(m.Feeds(), std::vector<Output>{}, {m.train}).ok());
  REQUIRE(s.Save(dir.path, 1).ok());
  {
    // Corrupt a block of checkpoint 2.
    auto kv = OpenRocksDb(dir.path);
    REQUIRE(kv.ok());
    auto keys = (*kv)->Keys("data/00000000000000000002/w#");
    REQUIRE(keys.ok());
    REQUIRE(!keys->empty());
    std::string v = *(*kv)->Get((*keys)[0]);
    v.back() ^= 0x1;
    REQUIRE((*kv)->Put((*keys)[0], v).ok());
  }
  Status bad = s.Restore(dir.path, 2);
  CHECK(bad.code() == Code::kDataLoss);
  CHECK(bad.message().find("variable 'w'") != std::string::npos);
  CHECK(bad.message().find("checkpoint 1 is the previous readable one") != std::string::npos);
  // Latest falls back past the corrupt one, and says which step it restored.
  int64_t step = -1;
  REQUIRE(s.Restore(dir.path, -1, &step).ok());
  CHECK(m.Values(s) == first);
  CHECK(step == 0);
}

TEST_CASE("Saver keeps the newest checkpoints", "[session][checkpoint]") {
  sf::testing::TempDir dir("sf_ckpt_session");
  Model m;
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
  Saver saver(&s, dir.path, 2);
  for (int i = 0; i < 4; ++i) REQUIRE(saver.Save(i * 10).ok());
  auto kv = OpenRocksDb(dir.path);
  REQUIRE(kv.ok());
  CHECK(*CheckpointReader(kv->get()).List() == std::vector<int64_t>{3, 4});
}
