// Session::Save and Session::Restore through variable shard actors.
#include <catch2/catch.hpp>

#include <map>

#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/checkpoint.h"
#include "shardflow/session.h"
#include "storage/checkpoint.h"
#include "tests/support/temp_dir.h"

using namespace sf;

namespace {

// A linear model trained with Adam, with a read op for every variable and slot.
struct Model {
  Graph g;
  Output x, y, loss;
  Operation train, init;
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

  // Runs `steps` training steps in s (after the initializer when init).
  void Train(Session& s, int steps, bool init = false) const {
    if (init) REQUIRE(s.Run({}, std::vector<Output>{}, {this->init}).ok());
    for (int i = 0; i < steps; ++i) REQUIRE(s.Run(Feeds(), std::vector<Output>{}, {train}).ok());
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
  m.Train(s, 3, /*init=*/true);
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

TEST_CASE("Restore writes into the variables' own memory unless a snapshot of them is held",
          "[session][checkpoint]") {
  sf::testing::TempDir dir("sf_ckpt_session");
  Model m;
  Session s(m.g);
  m.Train(s, 3, /*init=*/true);
  const auto saved = m.Values(s);
  auto id = s.Save(dir.path, 3);
  REQUIRE(id.ok());
  m.Train(s, 3);
  // Where w's value lives (a read shares the variable's buffer).
  auto where = [&] {
    auto r = s.Run({}, std::vector<Output>{m.reads.at("w")});
    REQUIRE(r.ok());
    return reinterpret_cast<uintptr_t>((*r)[0].raw_data());
  };
  const uintptr_t before = where();
  REQUIRE(before == where());
  REQUIRE(s.Restore(dir.path, *id).ok());
  CHECK(where() == before);  // the same memory, refilled
  CHECK(m.Values(s) == saved);
  // A value read before the restore keeps what it read: the variable gets
  // fresh memory instead.
  m.Train(s, 3);
  auto held = s.Run({}, std::vector<Output>{m.reads.at("w")});
  REQUIRE(held.ok());
  const std::vector<double> trained = (*held)[0].ToVector<double>();
  REQUIRE(trained != saved.at("w"));
  REQUIRE(s.Restore(dir.path, *id).ok());
  CHECK((*held)[0].ToVector<double>() == trained);
  CHECK(m.Values(s) == saved);
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

// ---- incremental checkpoints and restores into another shard count ----

namespace {

// A sharded embedding table (plus a dense bias) trained by a sparse optimizer,
// with a read op for every variable and slot and a lookup of every row.
struct EmbModel {
  Graph g;
  EmbeddingTable table;
  Output ids, c, all_rows;
  Operation train, init;
  std::map<std::string, Output> reads;  // by shared name

  EmbModel(int64_t rows, int64_t dim, int64_t shards, const std::string& partition,
           const std::string& optimizer = "adagrad") {
    EmbeddingTableOptions o;
    o.num_shards = shards;
    o.partition = partition;
    o.seed = 5;
    table = NewEmbeddingTable(g, "emb", rows, dim, o);
    ids = ops::Placeholder(g, DType::kInt64, {-1, 2}, "ids");
    c = ops::Placeholder(g, DType::kFloat32, {-1, dim}, "c");
    auto bias = ops::Variable(g, "bias", ops::Const(g, std::vector<float>(dim, 0.5f), {dim}));
    auto loss = ops::Sum(g, ops::Add(g, ops::EmbeddingLookup(g, table, ids, "sum"), bias) * c);
    std::unique_ptr<Optimizer> opt;
    if (optimizer == "adam") opt = std::make_unique<AdamOptimizer>(0.1);
    else opt = std::make_unique<AdagradOptimizer>(0.1);
    auto t = opt->Minimize(g, loss);
    REQUIRE(t.ok());
    train = *t;
    init = ops::GlobalVariablesInitializer(g);
    std::vector<int64_t> every(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) every[i] = i;
    all_rows = ops::EmbeddingLookup(g, table, ops::Const(g, Tensor::FromVector<int64_t>(every, {rows, 1})), "none");
    const int n = g.num_nodes();
    for (int i = 0; i < n; ++i) {
      if (g.node(i).op != "VarHandle") continue;
      const std::string name = *g.node(i).attrs.Get<std::string>("shared_name");
      reads[name] = ops::ReadVariable(g, Output(&g, i, 0), *g.node(i).attrs.Get<DType>("dtype"));
    }
    REQUIRE(g.status().ok());
  }

  // One training step touching the given ids (pairs per example).
  void Step(Session& s, const std::vector<int64_t>& batch) const {
    const int64_t n = static_cast<int64_t>(batch.size()) / 2, dim = table.dim;
    std::vector<float> cv(static_cast<size_t>(n * dim));
    for (size_t i = 0; i < cv.size(); ++i) cv[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
    REQUIRE(s.Run({{"ids", Tensor::FromVector<int64_t>(batch, {n, 2})}, {"c", Tensor::FromVector<float>(cv, {n, dim})}},
                  std::vector<Output>{}, {train})
                .ok());
  }

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

  // The table as [rows, dim] through a lookup of every id.
  std::vector<double> Rows(Session& s) const {
    auto r = s.Run({}, std::vector<Output>{all_rows});
    REQUIRE(r.ok());
    return (*r)[0].ToVector<double>();
  }

  // Shard variables "emb/part_<k><suffix>" reassembled into table order by
  // the documented layout (mod: id % K, id / K; range: contiguous, the first
  // rows % K shards one row longer), computed here independently.
  std::vector<double> Global(const std::map<std::string, std::vector<double>>& v, const std::string& suffix) const {
    const int64_t K = static_cast<int64_t>(table.shards.size()), rows = table.rows, dim = table.dim;
    std::vector<double> out(static_cast<size_t>(rows * dim));
    int64_t start = 0;
    for (int64_t k = 0; k < K; ++k) {
      const std::vector<double>& part = v.at("emb/part_" + std::to_string(k) + suffix);
      const int64_t n = static_cast<int64_t>(part.size()) / dim;
      for (int64_t r = 0; r < n; ++r) {
        const int64_t gid = table.partition == "mod" ? r * K + k : start + r;
        for (int64_t d = 0; d < dim; ++d) out[gid * dim + d] = part[r * dim + d];
      }
      start += n;
    }
    return out;
  }
};

}  // namespace

TEST_CASE("SaveIncremental: base + 2 increments restore exactly what a full checkpoint does",
          "[session][checkpoint][incremental]") {
  sf::testing::TempDir dir("sf_ckpt_inc"), full_dir("sf_ckpt_full");
  EmbModel m(23, 3, 2, "mod");
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
  m.Step(s, {0, 4, 9, 9});
  auto base = s.SaveIncremental(dir.path, 1);  // no earlier save: a full one
  REQUIRE(base.ok());
  m.Step(s, {1, 5, 5, 22});
  auto inc1 = s.SaveIncremental(dir.path, 2);
  REQUIRE(inc1.ok());
  const auto after_inc1 = m.Values(s);
  m.Step(s, {7, 22, 3, 3});
  auto inc2 = s.SaveIncremental(dir.path, 3);
  REQUIRE(inc2.ok());
  const auto want = m.Values(s);
  REQUIRE(s.Save(full_dir.path, 3).ok());

  {
    auto kv = OpenRocksDb(dir.path);
    REQUIRE(kv.ok());
    CheckpointReader r(kv->get());
    auto b = r.Manifest(*base), i2 = r.Manifest(*inc2);
    REQUIRE(b.ok());
    REQUIRE(i2.ok());
    CHECK(b->parent == -1);
    CHECK(i2->parent == *inc1);
    // Ids 7, 22, 3 over 2 mod shards: part_0 gets row 11, part_1 rows 3 and 1;
    // the slot changes in the same rows.
    REQUIRE(i2->Find("emb/part_0"));
    CHECK(i2->Find("emb/part_0")->stored_rows == 1);
    CHECK(i2->Find("emb/part_1")->stored_rows == 2);
    CHECK(i2->Find("emb/part_1/Adagrad/accumulator")->stored_rows == 2);
    CHECK(i2->Find("bias")->stored_rows == -1);  // dense updates rewrite the variable
    REQUIRE(i2->FindTable("emb"));
    CHECK(i2->FindTable("emb")->num_shards == 2);
  }

  Session fresh(m.g), from_full(m.g);
  int64_t step = -1;
  REQUIRE(fresh.Restore(dir.path, -1, &step).ok());
  CHECK(step == 3);
  REQUIRE(from_full.Restore(full_dir.path).ok());
  CHECK(m.Values(fresh) == want);
  CHECK(m.Values(from_full) == want);
  REQUIRE(fresh.Restore(dir.path, *inc1).ok());
  CHECK(m.Values(fresh) == after_inc1);

  // Compaction folds the chain into a full checkpoint with the same values.
  auto compact = Session::CompactCheckpoint(dir.path);
  REQUIRE(compact.ok());
  CHECK(*compact == *inc2 + 1);
  Session from_compact(m.g);
  REQUIRE(from_compact.Restore(dir.path, *compact, &step).ok());
  CHECK(step == 3);
  CHECK(m.Values(from_compact) == want);
  // Training goes on identically from the composed and the full restore.
  m.Step(from_compact, {2, 8, 8, 8});
  m.Step(from_full, {2, 8, 8, 8});
  CHECK(m.Values(from_compact) == m.Values(from_full));
}

TEST_CASE("SaveIncremental: a corrupt increment is named and the previous one restores",
          "[session][checkpoint][incremental]") {
  sf::testing::TempDir dir("sf_ckpt_inc");
  EmbModel m(23, 3, 2, "range");
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
  REQUIRE(s.SaveIncremental(dir.path, 1).ok());
  m.Step(s, {1, 20, 5, 5});
  REQUIRE(s.SaveIncremental(dir.path, 2).ok());
  const auto good = m.Values(s);
  m.Step(s, {2, 3, 4, 21});
  REQUIRE(s.SaveIncremental(dir.path, 3).ok());
  {
    auto kv = OpenRocksDb(dir.path);
    REQUIRE(kv.ok());
    auto keys = (*kv)->Keys("data/00000000000000000003/emb/part_0#0000#0");
    REQUIRE(keys.ok());
    REQUIRE(!keys->empty());
    std::string v = *(*kv)->Get((*keys)[0]);
    v.back() ^= 0x1;
    REQUIRE((*kv)->Put((*keys)[0], v).ok());
  }
  Session r(m.g);
  Status bad = r.Restore(dir.path, 3);
  CHECK(bad.code() == Code::kDataLoss);
  CHECK(bad.message().find("checkpoint 3 (an increment on checkpoint 2)") != std::string::npos);
  CHECK(bad.message().find("variable 'emb/part_0'") != std::string::npos);
  CHECK(bad.message().find("checkpoint 2 is the previous readable one") != std::string::npos);
  int64_t step = -1;
  REQUIRE(r.Restore(dir.path, -1, &step).ok());
  CHECK(step == 2);
  CHECK(m.Values(r) == good);
}

TEST_CASE("Saver::SaveIncremental keeps the base its increments need", "[session][checkpoint][incremental]") {
  sf::testing::TempDir dir("sf_ckpt_inc");
  EmbModel m(23, 3, 3, "mod", "adam");
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
  Saver saver(&s, dir.path, 1);
  REQUIRE(saver.Save(0).ok());  // 1: full
  m.Step(s, {1, 2, 3, 4});
  REQUIRE(saver.SaveIncremental(1).ok());  // 2 on 1
  m.Step(s, {5, 6, 7, 8});
  REQUIRE(saver.SaveIncremental(2).ok());  // 3 on 2
  const auto want = m.Values(s);
  {
    auto kv = OpenRocksDb(dir.path);
    REQUIRE(kv.ok());
    CHECK(*CheckpointReader(kv->get()).List() == std::vector<int64_t>{1, 2, 3});
  }
  REQUIRE(saver.Save(3).ok());  // 4: full, so the chain can go
  {
    auto kv = OpenRocksDb(dir.path);
    REQUIRE(kv.ok());
    CHECK(*CheckpointReader(kv->get()).List() == std::vector<int64_t>{4});
  }
  Session r(m.g);
  REQUIRE(r.Restore(dir.path).ok());
  CHECK(m.Values(r) == want);
}

TEST_CASE("Restore moves a K=4 table into K'=2 and K'=3 shards, mod and range", "[session][checkpoint][reshard]") {
  for (const std::string from_part : {"mod", "range"}) {
    for (const std::string to_part : {"mod", "range"}) {
      for (int64_t to_k : {2, 3}) {
        for (const std::string opt : {"adagrad", "adam"}) {
          INFO(from_part << " K=4 -> " << to_part << " K'=" << to_k << ", " << opt);
          sf::testing::TempDir dir("sf_ckpt_reshard");
          EmbModel saved(23, 3, 4, from_part, opt);
          Session s(saved.g);
          REQUIRE(s.Run({}, std::vector<Output>{}, {saved.init}).ok());
          saved.Step(s, {0, 7, 13, 22, 5, 5});
          REQUIRE(s.Save(dir.path, 1).ok());
          const auto v = saved.Values(s);
          const std::vector<double> rows = saved.Rows(s);
          CHECK(saved.Global(v, "") == rows);

          EmbModel target(23, 3, to_k, to_part, opt);
          Session t(target.g);
          REQUIRE(t.Restore(dir.path).ok());
          const auto w = target.Values(t);
          CHECK(target.Rows(t) == rows);
          CHECK(target.Global(w, "") == rows);
          const std::string slot = opt == "adam" ? "/Adam/m" : "/Adagrad/accumulator";
          REQUIRE(w.count("emb/part_0" + slot));
          CHECK(target.Global(w, slot) == saved.Global(v, slot));
          CHECK(w.at("bias") == v.at("bias"));
          if (opt == "adam") CHECK(w.at("emb/part_1/Adam/beta1_power") == v.at("emb/part_0/Adam/beta1_power"));
        }
      }
    }
  }
}

TEST_CASE("Restore into a table with other rows or width names the table", "[session][checkpoint][reshard]") {
  sf::testing::TempDir dir("sf_ckpt_reshard");
  {
    EmbModel m(23, 3, 4, "mod");
    Session s(m.g);
    REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
    REQUIRE(s.Save(dir.path, 1).ok());
  }
  for (int64_t k : {2, 4}) {
    EmbModel more_rows(24, 3, k, "mod");
    Session s(more_rows.g);
    Status st = s.Restore(dir.path);
    CHECK(st.code() == Code::kInvalidArgument);
    CHECK(st.message().find("embedding table 'emb'") != std::string::npos);
    CHECK(st.message().find("24 rows in the graph but 23") != std::string::npos);
  }
  EmbModel wider(23, 4, 2, "range");
  Session s(wider.g);
  Status st = s.Restore(dir.path);
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(st.message().find("embedding table 'emb'") != std::string::npos);
}

TEST_CASE("SaveIncremental writes a full checkpoint when it has no base", "[session][checkpoint][incremental]") {
  sf::testing::TempDir a("sf_ckpt_inc"), b("sf_ckpt_inc");
  EmbModel m(23, 3, 2, "mod");
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
  auto parent_of = [](const std::string& dir, int64_t id) {
    auto kv = OpenRocksDb(dir);
    REQUIRE(kv.ok());
    auto info = CheckpointReader(kv->get()).Manifest(id);
    REQUIRE(info.ok());
    return info->parent;
  };
  REQUIRE(s.Save(a.path, 0).ok());  // 1 in a
  m.Step(s, {1, 2, 3, 4});
  auto other = s.SaveIncremental(b.path, 1);  // another directory: full
  REQUIRE(other.ok());
  CHECK(parent_of(b.path, *other) == -1);
  m.Step(s, {5, 6, 7, 8});
  auto inc = s.SaveIncremental(b.path, 2);  // on b's 1
  REQUIRE(inc.ok());
  CHECK(parent_of(b.path, *inc) == *other);
  REQUIRE(s.Restore(a.path, 1).ok());
  auto after_restore = s.SaveIncremental(b.path, 3);  // restored since: full
  REQUIRE(after_restore.ok());
  CHECK(parent_of(b.path, *after_restore) == -1);
  // The restored values are what b's newest checkpoint holds.
  const auto want = m.Values(s);
  Session r(m.g);
  REQUIRE(r.Restore(b.path).ok());
  CHECK(m.Values(r) == want);
}
