// The optimizer table (kernels/optimizer_spec.h) against everything built
// from it: every row has its update op with that many inputs and a kernel,
// its sparse op where it claims one (and none where it does not), no update
// op exists outside the table, and each optimizer class builds the row's op
// with the row's slots, densely, sparsely and replicated.
#include <catch2/catch.hpp>

#include <memory>
#include <set>

#include "kernels/optimizer_spec.h"
#include "shardflow/embedding.h"
#include "shardflow/kernel.h"
#include "shardflow/op_registry.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/replication.h"

using namespace sf;

namespace {

// One of each optimizer class (the test fails below when a kind has none).
std::vector<std::unique_ptr<Optimizer>> EveryOptimizer() {
  std::vector<std::unique_ptr<Optimizer>> o;
  o.push_back(std::make_unique<GradientDescentOptimizer>(0.1));
  o.push_back(std::make_unique<MomentumOptimizer>(0.1, 0.9, /*use_nesterov=*/true));
  o.push_back(std::make_unique<AdagradOptimizer>(0.1));
  o.push_back(std::make_unique<AdamOptimizer>(0.1));
  o.push_back(std::make_unique<RMSPropOptimizer>(0.1));
  o.push_back(std::make_unique<RowwiseAdagradOptimizer>(0.1));
  o.push_back(std::make_unique<FtrlOptimizer>(0.1, 0.01, 0.01));
  return o;
}

// The node of op `op` in g, or nullptr.
const Node* FindOp(const Graph& g, const std::string& op) {
  for (int i = 0; i < g.num_nodes(); ++i)
    if (g.node(i).op == op) return &g.node(i);
  return nullptr;
}

// Checks that n's first spec.handles inputs are the variable `var` and its
// slots "<var>/<name>/<slot>" in the spec's order.
void CheckHandles(const Graph& g, const Node& n, const OptimizerSpec& spec, const std::string& var) {
  REQUIRE(static_cast<int>(n.inputs.size()) >= spec.handles);
  for (int i = 0; i < spec.handles; ++i) {
    const Node& h = g.node(n.inputs[i].node);
    REQUIRE(h.op == "VarHandle");
    const std::string want = i == 0 ? var : var + "/" + spec.name + "/" + spec.slots[i - 1];
    CHECK(h.attrs.Get<std::string>("shared_name").value() == want);
  }
}

}  // namespace

TEST_CASE("Every optimizer in the table has its ops and kernels, and no update op is outside it",
          "[optimizer]") {
  const OpRegistry& ops = StandardOpRegistry();
  const KernelRegistry& kernels = StandardKernelRegistry();
  for (const OptimizerSpec& spec : kOptimizers) {
    INFO(spec.name);
    CHECK(FindOptimizer(spec.name) == &spec);
    CHECK(FindOptimizerByOp(spec.apply_op) == &spec);
    auto parsed = ParseOptimizer(spec.name);
    REQUIRE(parsed.ok());
    CHECK(*parsed == spec.kind);
    const OpDef* dense = ops.Find(spec.apply_op);
    REQUIRE(dense != nullptr);
    CHECK(dense->min_inputs == spec.handles + spec.scalars + 1);
    CHECK(dense->max_inputs == spec.handles + spec.scalars + 1);
    CHECK(dense->stateful);
    CHECK(dense->summary == spec.summary);
    CHECK(kernels.Has(spec.apply_op, DeviceType::kCPU, DType::kInvalid));
    const std::string sparse_name = std::string("EmbeddingSparseApply") + spec.name;
    if (spec.sparse_op) {
      CHECK(sparse_name == spec.sparse_op);
      CHECK(FindOptimizerByOp(spec.sparse_op) == &spec);
      const OpDef* sparse = ops.Find(spec.sparse_op);
      REQUIRE(sparse != nullptr);
      CHECK(sparse->min_inputs == spec.handles + spec.scalars + 2);  // ids, dy
      CHECK(sparse->max_inputs == spec.handles + spec.scalars + 4);  // split: rows, segments, weights, dy
      CHECK(sparse->stateful);
      CHECK(kernels.Has(spec.sparse_op, DeviceType::kCPU, DType::kInvalid));
    } else {
      CHECK(ops.Find(sparse_name) == nullptr);
      CHECK_FALSE(kernels.Has(sparse_name, DeviceType::kCPU, DType::kInvalid));
    }
  }
  for (const std::string& name : ops.Names()) {
    // The replicated forms name their optimizer in an attribute.
    const bool tagged =
        name == "ApplyGradientSync" || name == "ApplyGradientAsync" || name == "EmbeddingSparseApplySync";
    const bool update = !tagged && (name.rfind("Apply", 0) == 0 || name.rfind("EmbeddingSparseApply", 0) == 0);
    INFO(name);
    if (update) CHECK(FindOptimizerByOp(name) != nullptr);
  }
  CHECK_FALSE(ParseOptimizer("Nope").ok());
  CHECK(ParseOptimizer("Nope").status().message().find(OptimizerNames()) != std::string::npos);
  CHECK(FindOptimizer("Nope") == nullptr);
  CHECK(OptimizerNames(/*with_sparse_op=*/true) == "GradientDescent, Adagrad, Adam, RowwiseAdagrad or Ftrl");
}

TEST_CASE("Every optimizer builds its table row's op and slots, dense, sparse and replicated",
          "[optimizer]") {
  std::set<OptimizerKind> seen;
  for (auto& opt : EveryOptimizer()) {
    INFO(opt->name());
    const OptimizerSpec* spec = FindOptimizer(opt->name());
    REQUIRE(spec != nullptr);
    seen.insert(spec->kind);
    {  // dense
      Graph g;
      auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1, 2, 3, 4}, {2, 2}));
      auto train = opt->Minimize(g, ops::Sum(g, ops::Mul(g, w, w)));
      REQUIRE(train.ok());
      const Node* n = FindOp(g, spec->apply_op);
      REQUIRE(n != nullptr);
      CHECK(static_cast<int>(n->inputs.size()) == spec->handles + spec->scalars + 1);
      CheckHandles(g, *n, *spec, "w");
    }
    {  // sparse: the embedding table's shard
      Graph g;
      auto t = NewEmbeddingTable(g, "emb", 10, 4);
      auto ids = ops::Placeholder(g, DType::kInt64, {-1, 2}, "ids");
      auto train = opt->Minimize(g, ops::Sum(g, ops::EmbeddingLookup(g, t, ids)));
      if (spec->sparse_op) {
        REQUIRE(train.ok());
        const Node* n = FindOp(g, spec->sparse_op);
        REQUIRE(n != nullptr);
        const std::string shard = g.node(n->inputs[0].node).attrs.Get<std::string>("shared_name").value();
        CheckHandles(g, *n, *spec, shard);
      } else {
        REQUIRE_FALSE(train.ok());
        CHECK(train.status().message().find(OptimizerNames(true)) != std::string::npos);
      }
    }
    {  // replicated: ApplyGradientSync names the optimizer and passes shape inference
      Graph g;
      auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1, 2}, {2}));
      SyncReplicasOptions so;
      so.replicas_to_aggregate = 2;
      so.total_num_replicas = 2;
      SyncReplicas sync(*opt, so);
      auto t = sync.Minimize(g, ops::Sum(g, ops::Mul(g, w, w)), 0);
      REQUIRE(t.ok());
      const Node* n = FindOp(g, "ApplyGradientSync");
      REQUIRE(n != nullptr);
      CHECK(n->attrs.Get<std::string>("optimizer").value() == spec->name);
      CHECK(static_cast<int>(n->inputs.size()) == spec->handles + spec->scalars + 2);
      CheckHandles(g, *n, *spec, "w");
    }
  }
  CHECK(static_cast<int>(seen.size()) == kNumOptimizers);
}
