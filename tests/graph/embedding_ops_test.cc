// The embedding ops and builders: shapes and build-time errors, and the
// kernels on the reference evaluator (in-memory variables).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <memory>
#include <set>

#include "graph/placement.h"

#include "kernels/embedding_math.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "tests/support/eval_graph.h"

using namespace sf;

namespace {

bool Has(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("Embedding tables split rows over shards as documented", "[embedding]") {
  // mod: 10 rows over 3 shards hold 4, 3, 3; range: 4, 3, 3 as blocks.
  CHECK(EmbeddingShardRows(10, 3, 0, EmbeddingPartition::kMod) == 4);
  CHECK(EmbeddingShardRows(10, 3, 2, EmbeddingPartition::kMod) == 3);
  CHECK(EmbeddingShardRows(10, 3, 0, EmbeddingPartition::kRange) == 4);
  CHECK(EmbeddingShardRows(10, 3, 1, EmbeddingPartition::kRange) == 3);
  std::vector<int64_t> ids = {0, 3, 4, 6, 7, 9};
  std::vector<int64_t> local;
  EmbeddingShardSpec s{"t", 10, 3, 1, EmbeddingPartition::kRange};  // rows 4..6
  REQUIRE(LocalRowsOf(s, ids.data(), 6, &local).ok());
  CHECK(local == std::vector<int64_t>{-1, -1, 0, 2, -1, -1});
  s.partition = EmbeddingPartition::kMod;  // rows 1, 4, 7
  REQUIRE(LocalRowsOf(s, ids.data(), 6, &local).ok());
  CHECK(local == std::vector<int64_t>{-1, -1, 1, -1, 2, -1});
  std::vector<int64_t> bad = {10};
  Status st = LocalRowsOf(s, bad.data(), 1, &local);
  CHECK(Has(st, "'t'"));
  CHECK(Has(st, "id 10"));
}

TEST_CASE("Embedding builders: shapes and bad input", "[embedding]") {
  {
    Graph g;
    EmbeddingTableOptions o;
    o.num_shards = 3;
    auto t = NewEmbeddingTable(g, "emb", 100, 8, o);
    REQUIRE(t.valid());
    CHECK(t.shards.size() == 3);
    CHECK(*t.shards[1].op().attrs.Get<std::string>("shared_name") == "emb/part_1");
    CHECK(*t.shards[0].op().attrs.Get<PartialShape>("shape") == PartialShape(Shape{34, 8}));
    auto ids = ops::Placeholder(g, DType::kInt32, {16, 4}, "ids");
    CHECK(ops::EmbeddingLookup(g, t, ids, "mean").shape() == PartialShape(Shape{16, 8}));
    CHECK(ops::EmbeddingLookup(g, t, ids, "none").shape() == PartialShape(Shape{16, 4, 8}));
    auto flat = ops::Placeholder(g, DType::kInt64, {-1}, "flat");
    auto off = ops::Placeholder(g, DType::kInt64, {5}, "off");
    CHECK(ops::EmbeddingLookupBag(g, t, flat, off).shape() == PartialShape(Shape{5, 8}));
    CHECK(ops::EmbeddingLookupSegments(g, t, flat, flat, 7).shape() == PartialShape(Shape{7, 8}));
    REQUIRE(g.status().ok());
    // Float ids, a bad combiner, combiner none on bags: errors naming the table.
    auto fids = ops::Placeholder(g, DType::kFloat32, {2, 2}, "fids");
    CHECK(!ops::EmbeddingLookup(g, t, fids).valid());
    CHECK(Has(g.status(), "'emb'"));
    CHECK(Has(g.status(), "int32 or int64"));
  }
  {
    Graph g;
    auto t = NewEmbeddingTable(g, "emb", 10, 2);
    auto ids = ops::Placeholder(g, DType::kInt64, {2, 2}, "ids");
    CHECK(!ops::EmbeddingLookup(g, t, ids, "max").valid());
    CHECK(Has(g.status(), "unknown combiner 'max'"));
  }
  {
    Graph g;
    auto t = NewEmbeddingTable(g, "emb", 10, 2);
    auto ids = ops::Placeholder(g, DType::kInt64, {4}, "ids");
    CHECK(!ops::EmbeddingLookupBag(g, t, ids, ids, "none").valid());
    CHECK(Has(g.status(), "combiner none"));
  }
  {
    Graph g;
    EmbeddingTableOptions o;
    o.num_shards = 5;
    CHECK(!NewEmbeddingTable(g, "small", 3, 2, o).valid());
    CHECK(Has(g.status(), "'small'"));
    CHECK(Has(g.status(), "rows >= num_shards"));
  }
  {
    Graph g;
    EmbeddingTableOptions o;
    o.partition = "hash";
    CHECK(!NewEmbeddingTable(g, "t", 3, 2, o).valid());
    CHECK(Has(g.status(), "'hash'"));
  }
}

TEST_CASE("Embedding lookup and sparse SGD on the reference evaluator", "[embedding]") {
  Graph g;
  EmbeddingTableOptions o;
  o.num_shards = 2;
  o.initializer = "zeros";
  auto t = NewEmbeddingTable(g, "emb", 5, 2, o);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 2}, "ids");
  auto emb = ops::EmbeddingLookup(g, t, ids, "sum");
  auto loss = ops::Sum(g, emb);
  auto train = GradientDescentOptimizer(0.5).Minimize(g, loss);
  REQUIRE(train.ok());
  Operation init = ops::GlobalVariablesInitializer(g);
  auto r0 = ops::ReadVariable(g, t.shards[0], DType::kFloat32);
  auto r1 = ops::ReadVariable(g, t.shards[1], DType::kFloat32);
  REQUIRE(g.status().ok());
  InMemoryVariables vars;
  REQUIRE(testing::EvalGraph(g, {}, {}, {init}, &vars).ok());
  // ids 4 (twice) and 1: d loss / d row = count, so rows move by -0.5 * count.
  Tensor batch = Tensor::FromVector(std::vector<int64_t>{4, 4, 1, 4}, {2, 2});
  REQUIRE(testing::EvalGraph(g, {{ids, batch}}, {}, {*train}, &vars).ok());
  auto r = testing::EvalGraph(g, {{ids, batch}}, {emb, r0, r1}, {}, &vars);
  REQUIRE(r.ok());
  // shard 0 (mod) holds ids 0, 2, 4; shard 1 holds 1, 3.
  CHECK((*r)[1].ToVector<float>() == std::vector<float>{0, 0, 0, 0, -1.5f, -1.5f});
  CHECK((*r)[2].ToVector<float>() == std::vector<float>{-0.5f, -0.5f, 0, 0});
  CHECK((*r)[0].ToVector<float>() == std::vector<float>{-3, -3, -2, -2});
  // Out of range at run time.
  auto bad = testing::EvalGraph(g, {{ids, Tensor::FromVector(std::vector<int64_t>{0, 5}, {1, 2})}},
                                {emb}, {}, &vars);
  REQUIRE(!bad.ok());
  CHECK(Has(bad.status(), "'emb'"));
  CHECK(Has(bad.status(), "id 5"));
}

TEST_CASE("Sparse optimizer math sums duplicates and refuses bad rows", "[embedding]") {
  Tensor var = Tensor::Zeros(DType::kFloat32, {3, 2});
  Tensor acc = Tensor::Zeros(DType::kFloat32, {3, 2});
  acc.flat<float>().setConstant(1.0f);
  SparseApplyRequest req;
  req.optimizer = OptimizerKind::kAdagrad;
  req.scalars = {Tensor::Scalar<float>(1.0f)};
  req.indices = Tensor::FromVector(std::vector<int64_t>{2, 0, 2});
  req.values = Tensor::FromVector(std::vector<float>{1, 2, 3, 4, 1, 1}, {3, 2});
  REQUIRE(ApplySparseOptimizerUpdate(req, {&var, &acc}).ok());
  // Row 2 gets grad (2, 3) once: acc = 1 + g^2, var = -g / sqrt(acc).
  auto a = acc.ToVector<float>();
  auto v = var.ToVector<float>();
  CHECK(a[4] == Approx(5.0f));
  CHECK(a[5] == Approx(10.0f));
  CHECK(v[4] == Approx(-2.0f / std::sqrt(5.0f)));
  CHECK(v[0] == Approx(-3.0f / std::sqrt(10.0f)));
  CHECK(v[2] == 0.0f);
  CHECK(a[2] == 1.0f);
  req.indices = Tensor::FromVector(std::vector<int64_t>{0, 3, 1});
  Status s = ApplySparseOptimizerUpdate(req, {&var, &acc});
  CHECK(Has(s, "row index 3"));
  CHECK(v == var.ToVector<float>());  // unchanged
}

TEST_CASE("Placement puts each shard's lookup and sparse update on the shard's device",
          "[embedding]") {
  Graph g;
  EmbeddingTableOptions o;
  o.num_shards = 4;
  auto t = NewEmbeddingTable(g, "emb", 40, 4, o);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 2}, "ids");
  auto loss = ops::Sum(g, ops::EmbeddingLookup(g, t, ids));
  auto train = AdagradOptimizer(0.1).Minimize(g, loss);
  REQUIRE(train.ok());
  std::vector<std::string> devices;
  for (int i = 0; i < 4; ++i) devices.push_back("/job:localhost/task:0/device:CPU:" + std::to_string(i));
  auto p = Place(g, devices);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  std::set<std::string> shard_devices;
  for (int k = 0; k < 4; ++k) shard_devices.insert((*p)[t.shards[k].node]);
  CHECK(shard_devices.size() == 4);  // spread over the devices
  int lookups = 0, applies = 0;
  for (int n = 0; n < g.num_nodes(); ++n) {
    const Node& node = g.node(n);
    if (node.op != "EmbeddingShardLookup" && node.op != "EmbeddingSparseApplyAdagrad") continue;
    (node.op == "EmbeddingShardLookup" ? lookups : applies)++;
    CHECK((*p)[n] == (*p)[node.inputs[0].node]);  // beside its shard
    if (node.op == "EmbeddingSparseApplyAdagrad") CHECK((*p)[n] == (*p)[node.inputs[1].node]);
  }
  CHECK(lookups == 4);
  CHECK(applies == 4);
}

TEST_CASE("Minimize with a var_list of table shards trains only them", "[embedding]") {
  Graph g;
  EmbeddingTableOptions o;
  o.num_shards = 2;
  o.initializer = "zeros";
  auto t = NewEmbeddingTable(g, "emb", 4, 1, o);
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{2.0f}, {1, 1}));
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 1}, "ids");
  auto loss = ops::Sum(g, ops::MatMul(g, ops::EmbeddingLookup(g, t, ids, "mean"), w));
  auto train = GradientDescentOptimizer(1.0).Minimize(g, loss, t.shards);
  REQUIRE(train.ok());
  Operation init = ops::GlobalVariablesInitializer(g);
  auto r1 = ops::ReadVariable(g, t.shards[1], DType::kFloat32);
  REQUIRE(g.status().ok());
  InMemoryVariables vars;
  REQUIRE(testing::EvalGraph(g, {}, {}, {init}, &vars).ok());
  Tensor batch = Tensor::FromVector(std::vector<int64_t>{3, 1, 3}, {3, 1});
  REQUIRE(testing::EvalGraph(g, {{ids, batch}}, {}, {*train}, &vars).ok());
  auto r = testing::EvalGraph(g, {}, {w, r1}, {}, &vars);
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<float>() == std::vector<float>{2.0f});      // not in var_list
  CHECK((*r)[1].ToVector<float>() == std::vector<float>{-2.0f, -4.0f});  // ids 1 and 3 (x2)
}

TEST_CASE("Two lookups of one table make one update by their summed gradient, for every sparse optimizer",
          "[embedding]") {
  // Lookup a: ids [2, 2] summed, weighted element-wise; lookup b: ids [1, 3]
  // averaged, weighted by cb; row 1 is read by both, row 4 twice by a.
  const int64_t rows = 6, dim = 2;
  const std::vector<int64_t> ids_a = {1, 4, 4, 0}, ids_b = {1, 5, 1};
  const std::vector<float> cb = {-1.5f, 2.5f};
  struct Case {
    OptimizerKind kind;
    std::function<std::unique_ptr<Optimizer>()> make;
    std::vector<float> hypers, slot_init;
  };
  const std::vector<Case> cases = {
      {OptimizerKind::kGradientDescent, [] { return std::make_unique<GradientDescentOptimizer>(0.5); }, {0.5f}, {}},
      {OptimizerKind::kAdagrad, [] { return std::make_unique<AdagradOptimizer>(0.5, 0.1); }, {0.5f}, {0.1f}},
      {OptimizerKind::kAdam, [] { return std::make_unique<AdamOptimizer>(0.5, 0.9, 0.999, 1e-8); },
       {0.5f, 0.9f, 0.999f, 1e-8f}, {0, 0, 0.9f, 0.999f}},
      {OptimizerKind::kRowwiseAdagrad, [] { return std::make_unique<RowwiseAdagradOptimizer>(0.5, 0.1); }, {0.5f}, {0.1f}},
      {OptimizerKind::kFtrl, [] { return std::make_unique<FtrlOptimizer>(0.5, 0.01, 0.02, -0.5, 0.1); },
       {0.5f, 0.01f, 0.02f, -0.5f}, {0.1f, 0}},
  };
  for (const Case& c : cases) {
    for (const int64_t shards : {1, 3}) {
      INFO(OptimizerName(c.kind) << ", " << shards << " shard(s)");
      Graph g;
      EmbeddingTableOptions o;
      o.num_shards = shards;
      o.initializer = "zeros";
      auto t = NewEmbeddingTable(g, "emb", rows, dim, o);
      auto a = ops::EmbeddingLookup(g, t, ops::Const(g, Tensor::FromVector(ids_a, {2, 2})), "sum");
      auto b = ops::EmbeddingLookup(g, t, ops::Const(g, Tensor::FromVector(ids_b, {1, 3})), "mean");
      auto wb = ops::Const(g, std::vector<float>{cb[0], cb[1]}, {1, 2});
      auto loss = ops::Add(g, ops::Sum(g, ops::Mul(g, a, ops::Const(g, std::vector<float>{1, -2, 0.5f, 3}, {2, 2}))),
                           ops::Sum(g, ops::Mul(g, b, wb)));
      auto opt = c.make();
      auto train = opt->Minimize(g, loss);
      REQUIRE(train.ok());
      int applies = 0;
      for (int n = 0; n < g.num_nodes(); ++n)
        if (g.node(n).op == SpecOf(c.kind).sparse_op) ++applies;
      CHECK(applies == shards);  // one update per shard, however many lookups read it
      Operation init = ops::GlobalVariablesInitializer(g);
      std::vector<Output> reads;
      for (const auto& s : t.shards) reads.push_back(ops::ReadVariable(g, s, DType::kFloat32));
      REQUIRE(g.status().ok());
      InMemoryVariables vars;
      REQUIRE(testing::EvalGraph(g, {}, {}, {init}, &vars).ok());
      // The reference: the whole table updated once per step by every id's
      // gradient row (duplicates summed by the sparse update itself).
      Tensor table = Tensor::Zeros(DType::kFloat32, {rows, dim});
      const OptimizerSpec& spec = SpecOf(c.kind);
      const int row_slots = spec.handles - 1 - spec.scalar_slots;
      std::vector<Tensor> slots;
      for (int i = 0; i < row_slots; ++i) {
        slots.push_back(Tensor::Zeros(DType::kFloat32, {rows, dim}));
        slots.back().flat<float>().setConstant(c.slot_init[i]);
      }
      for (int i = 0; i < spec.scalar_slots; ++i) slots.push_back(Tensor::Scalar<float>(c.slot_init[row_slots + i]));
      // Lookup a's [2, 2] output is weighted element-wise by [[1, -2], [0.5, 3]]: example e's row gradient.
      const std::vector<std::vector<float>> ga = {{1, -2}, {0.5f, 3}};
      std::vector<int64_t> idx;
      std::vector<float> val;
      for (int e = 0; e < 2; ++e)
        for (int k = 0; k < 2; ++k) {
          idx.push_back(ids_a[e * 2 + k]);
          val.insert(val.end(), ga[e].begin(), ga[e].end());
        }
      for (int64_t id : ids_b) {
        idx.push_back(id);
        val.push_back(cb[0] / 3);
        val.push_back(cb[1] / 3);
      }
      for (int step = 0; step < 3; ++step) {
        REQUIRE(testing::EvalGraph(g, {}, {}, {*train}, &vars).ok());
        SparseApplyRequest req;
        req.optimizer = c.kind;
        for (float h : c.hypers) req.scalars.push_back(Tensor::Scalar<float>(h));
        req.indices = Tensor::FromVector(idx);
        req.values = Tensor::FromVector(val, {static_cast<int64_t>(idx.size()), dim});
        std::vector<Tensor*> ptrs = {&table};
        for (auto& s : slots) ptrs.push_back(&s);
        REQUIRE(ApplySparseOptimizerUpdate(req, ptrs).ok());
      }
      auto r = testing::EvalGraph(g, {}, reads, {}, &vars);
      REQUIRE(r.ok());
      for (int64_t row = 0; row < rows; ++row) {
        const Tensor& shard = (*r)[row % shards];
        const int64_t local = row / shards;
        for (int64_t j = 0; j < dim; ++j) {
          INFO("row " << row << " column " << j);
          CHECK(shard.data<float>()[local * dim + j] == Approx(table.data<float>()[row * dim + j]).epsilon(1e-5));
        }
      }
    }
  }
}

TEST_CASE("SetSparseOptimizer: one backward pass, the tables' updates by the sparse optimizer, the rest by this one",
          "[embedding]") {
  // A table feeding a dense layer: Adam on the layer, Adagrad on the table.
  auto build = [](Graph& g, bool split) -> Result<Operation> {
    EmbeddingTableOptions o;
    o.num_shards = 2;
    auto t = NewEmbeddingTable(g, "emb", 40, 4, o);
    auto ids = ops::Placeholder(g, DType::kInt64, {-1, 2}, "ids");
    auto w = ops::Variable(g, "w", ops::Ones(g, DType::kFloat32, {4, 3}));
    auto loss = ops::Sum(g, ops::MatMul(g, ops::EmbeddingLookup(g, t, ids), w));
    std::vector<Output> vars = {w, t.shards[0], t.shards[1]};
    AdamOptimizer adam(0.01);
    AdagradOptimizer adagrad(0.1);
    if (split) adam.SetSparseOptimizer(&adagrad);
    return adam.Minimize(g, loss, vars);
  };
  auto count = [](const Graph& g, const std::string& op) {
    int n = 0;
    for (int i = 0; i < g.num_nodes(); ++i) n += g.node(i).op == op;
    return n;
  };
  Graph split, plain;
  REQUIRE(build(split, true).ok());
  REQUIRE(build(plain, false).ok());
  CHECK(count(split, "EmbeddingSparseApplyAdagrad") == 2);
  CHECK(count(split, "EmbeddingSparseApplyAdam") == 0);
  CHECK(count(split, "ApplyAdam") == 1);
  CHECK(count(plain, "EmbeddingSparseApplyAdam") == 2);
  // The same backward: as many products as with one optimizer.
  CHECK(count(split, "MatMul") == count(plain, "MatMul"));
}
