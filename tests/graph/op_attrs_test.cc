// The attributes each op declares (OpDef::attrs, what front ends build
// signatures from) are the ones its builders set: a graph built through
// every kind of builder holds no node attribute its op does not declare, of
// the declared kind, and no node lacks a required one.
#include <catch2/catch.hpp>

#include <limits>
#include <map>
#include <set>

#include "shardflow/control_flow.h"
#include "shardflow/embedding.h"
#include "shardflow/gradients.h"
#include "shardflow/op_registry.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/queue_ops.h"
#include "shardflow/replication.h"

using namespace sf;

namespace {

// Adds nodes of (nearly) every op family, through the builders and gradients.
void BuildEverything(Graph& g) {
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 4, 4, 2}, "x");
  auto labels = ops::Placeholder(g, DType::kInt32, {-1}, "labels");
  auto f = ops::Variable(g, "f", ops::TruncatedNormal(g, {3, 3, 2, 4}, 0.1));
  auto c = ops::Relu(g, ops::Conv2D(g, x, f));
  auto p = ops::MaxPool(g, c);
  auto a = ops::AvgPool(g, p, {{1, 1, 1, 1}, {1, 1, 1, 1}, "SAME"});
  auto flat = ops::Reshape(g, a, std::vector<int64_t>{-1, 16});
  auto w = ops::Variable(g, "w", ops::RandomUniform(g, {16, 3}, -0.1, 0.1));
  auto b = ops::Variable(g, "b", ops::Zeros(g, DType::kFloat32, {3}));
  auto logits = ops::BiasAdd(g, ops::MatMul(g, flat, w, {false, false}), b);
  auto sliced = ops::StridedSlice(g, ops::Transpose(g, logits, {1, 0}), {0}, {2}, {1});
  auto extra = ops::Sum(g, ops::Concat(g, {sliced, sliced}, 0), {0}, {true});
  auto loss = ops::Mean(g, ops::SparseSoftmaxCrossEntropyWithLogits(g, logits, labels)) +
              ops::Mean(g, ops::Dropout(g, extra, 0.5)) +
              ops::Mean(g, ops::Cast(g, ops::ArgMax(g, logits, 1), DType::kFloat32));
  auto cond = Cond(g, ops::Less(g, loss, ops::Const(g, 1.0f)),
                   [&](Graph& g) { return std::vector<Output>{ops::Square(g, loss)}; },
                   [&](Graph& g) { return std::vector<Output>{loss}; });
  auto loop = WhileLoop(
      g, [](Graph& g, const std::vector<Output>& v) { return ops::Less(g, v[0], ops::Const(g, 3)); },
      [&](Graph& g, const std::vector<Output>& v) {
        return std::vector<Output>{ops::Add(g, v[0], ops::Const(g, 1)), ops::Mul(g, v[1], cond[0])};
      },
      {ops::Const(g, 0), cond[0]});
  REQUIRE(loop.ok());
  auto total = (*loop)[1] + ops::Sum(g, ops::OneHot(g, labels, 3)) +
               ops::Sum(g, ops::Tile(g, ops::Slice(g, logits, {0, 0}, {1, 2}), {2, 1})) +
               ops::Sum(g, ops::Pad(g, ops::ExpandDims(g, ops::Squeeze(g, ops::ExpandDims(g, b, 0)), 0), {0, 0, 1, 1}));
  REQUIRE(MomentumOptimizer(0.1, 0.9, true).Minimize(g, total).ok());
  REQUIRE(AdamOptimizer().Minimize(g, total).ok());
  EmbeddingTableOptions eo;
  eo.num_shards = 2;
  auto table = NewEmbeddingTable(g, "items", 10, 4, eo);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 2}, "ids");
  auto emb = ops::Sum(g, ops::EmbeddingLookup(g, table, ids, "mean"));
  REQUIRE(AdagradOptimizer(0.1).Minimize(g, emb).ok());
  ops::QueueOptions qo;
  qo.shapes = {PartialShape({2})};
  qo.capacity = 4;
  auto q = ops::FIFOQueue(g, {DType::kFloat32}, qo);
  ops::QueueEnqueueMany(g, q, {ops::Zeros(g, DType::kFloat32, {3, 2})});
  ops::QueueDequeueMany(g, q, 2);
  ops::QueueDequeue(g, ops::RandomShuffleQueue(g, {DType::kInt32}, 4, 0, 1));
  ops::QueueClose(g, q);
  ops::QueueSize(g, q);
  ops::GlobalVariablesInitializer(g);
}

}  // namespace

TEST_CASE("Every attribute a builder sets is declared by its op, with its kind", "[graph]") {
  Graph g;
  BuildEverything(g);
  REQUIRE(g.status().ok());
  std::set<std::string> ops_seen;
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    const OpDef* def = g.registry().Find(n.op);
    REQUIRE(def != nullptr);
    ops_seen.insert(n.op);
    std::map<std::string, const AttrDef*> declared;
    for (const AttrDef& a : def->attrs) declared[a.name] = &a;
    for (const auto& [name, value] : n.attrs.all()) {
      if (name[0] == '_') continue;
      INFO("node " << n.name << " (op " << n.op << ") attribute " << name);
      auto it = declared.find(name);
      REQUIRE(it != declared.end());
      CHECK(std::string(AttrKindName(value)) == AttrKindName(it->second->default_value));
    }
    for (const AttrDef& a : def->attrs) {
      INFO("node " << n.name << " (op " << n.op << ") required attribute " << a.name);
      if (a.required) CHECK(n.attrs.Has(a.name));
    }
  }
  CHECK(ops_seen.size() > 50);
}

TEST_CASE("Declared attribute names are unique per op and never internal", "[graph]") {
  const OpRegistry& reg = StandardOpRegistry();
  for (const std::string& name : reg.Names()) {
    std::set<std::string> seen;
    for (const AttrDef& a : reg.Find(name)->attrs) {
      INFO("op " << name << " attribute " << a.name);
      CHECK(seen.insert(a.name).second);
      CHECK(a.name[0] != '_');
    }
  }
}

TEST_CASE("ClearError returns the recorded error and lets builders work again", "[graph]") {
  Graph g;
  auto a = ops::Const(g, std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto bad = ops::MatMul(g, a, a);
  CHECK_FALSE(bad.valid());
  const int nodes = g.num_nodes();
  Status s = g.ClearError();
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("MatMul") != std::string::npos);
  CHECK(g.status().ok());
  CHECK(g.num_nodes() == nodes);  // the failed node was not added
  auto ok = ops::MatMul(g, a, a, {false, true});
  CHECK(ok.valid());
  CHECK(g.ClearError().ok());
}

TEST_CASE("Declared input names fit the signature and clash with no attribute", "[graph]") {
  const OpRegistry& reg = StandardOpRegistry();
  int named = 0;
  for (const std::string& name : reg.Names()) {
    const OpDef* d = reg.Find(name);
    if (d->input_names.empty()) continue;
    ++named;
    INFO("op " << name);
    CHECK(static_cast<int>(d->input_names.size()) <= (d->max_inputs < 0 ? d->min_inputs : d->max_inputs));
    std::set<std::string> seen{"name"};  // front ends add a name= argument
    for (const AttrDef& a : d->attrs) seen.insert(a.name);
    for (const std::string& in : d->input_names) {
      INFO("input " << in);
      CHECK(!in.empty());
      CHECK(seen.insert(in).second);
    }
  }
  CHECK(named >= 10);
}

TEST_CASE("A node that leaves out an optional attribute gets its registered default", "[graph]") {
  const OpRegistry& reg = StandardOpRegistry();
  // Every op: the defaults land on the node's attributes, where shape
  // functions and kernels read them (one value: the registered one).
  int optional = 0;
  for (const std::string& name : reg.Names()) {
    const OpDef* d = reg.Find(name);
    AttrMap m;
    ApplyAttrDefaults(*d, &m);
    for (const AttrDef& a : d->attrs) {
      INFO("op " << name << " attr " << a.name);
      const DType* t = std::get_if<DType>(&a.default_value);
      if (a.required || (t && *t == DType::kInvalid)) {
        CHECK_FALSE(m.Has(a.name));
        continue;
      }
      ++optional;
      REQUIRE(m.Has(a.name));
      CHECK(AttrValueString(*m.Find(a.name)) == AttrValueString(a.default_value));
    }
    // A given value is kept.
    for (const AttrDef& a : d->attrs) {
      AttrMap given;
      given.Set(a.name, std::string("given"));
      ApplyAttrDefaults(*d, &given);
      CHECK(std::get<std::string>(*given.Find(a.name)) == "given");
    }
  }
  CHECK(optional >= 50);
  // The ops the report named: OneHot without dtype, MirrorPadGrad without mode.
  Graph g;
  auto idx = ops::Const(g, std::vector<int32_t>{0, 2});
  AttrMap oh;
  oh.Set("depth", int64_t{3});
  auto one_hot = g.Add1("OneHot", {idx}, oh);
  AttrMap mp;
  mp.Set("paddings", std::vector<int64_t>{1, 1});
  auto grad = g.Add1("MirrorPadGrad", {ops::Const(g, std::vector<float>{1, 2, 3, 4, 5}, {5})}, mp);
  REQUIRE(g.status().ok());
  CHECK(one_hot.dtype() == DType::kFloat32);
  CHECK(grad.shape() == PartialShape({3}));
  CHECK(g.node(grad.node).attrs.Get<std::string>("mode").value() == "REFLECT");
}

TEST_CASE("Split refuses a num_split past the output limit before making outputs", "[graph]") {
  for (int64_t num : {kMaxNodeOutputs + 1, int64_t{1} << 40, std::numeric_limits<int64_t>::max(), int64_t{0}}) {
    INFO("num_split " << num);
    Graph g;
    auto x = ops::Placeholder(g, DType::kFloat32, PartialShape::UnknownDims(2));
    AttrMap a;
    a.Set("num_split", num);
    a.Set("axis", int64_t{1});
    CHECK(g.AddNode("Split", {x}, a) < 0);
    CHECK(g.status().code() == Code::kInvalidArgument);
    CHECK(g.status().message().find("num_split") != std::string::npos);
  }
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, PartialShape::UnknownDims(2));
  AttrMap a;
  a.Set("num_split", kMaxNodeOutputs);
  a.Set("axis", int64_t{1});
  const int id = g.AddNode("Split", {x}, a);
  REQUIRE(id >= 0);
  CHECK(g.node(id).num_outputs() == kMaxNodeOutputs);
}
