// Every registered op, and its gradient, on inputs with a dimension of 0 (as
// NumPy and PyTorch handle them): a result of the declared shape, or a clear
// error naming the node; never an abort.
//
// The registry is walked, so a new op is covered without touching this file
// when its inputs can be guessed: float32, bool or int32 placeholders of
// shape [2, 0] or [0], attributes from a table keyed by attribute name.
// Ops that need particular inputs have a maker below; ops that need a
// session's services (queues, replication, collectives, checkpoints, the
// rendezvous) are listed with the reason. An op in none of these fails the
// coverage check, naming it.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <optional>
#include <set>

#include "graph/op_registry.h"
#include "kernels/cpu_features.h"
#include "kernels/in_memory_variables.h"
#include "shardflow/control_flow.h"
#include "shardflow/embedding.h"
#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/precision.h"
#include "tests/support/eval_graph.h"

using namespace sf;

namespace {

using Ints = std::vector<int64_t>;

// One graph to run: setup targets first (initialisers), then targets and
// fetches on the same variables; xs are differentiated when the op has a
// gradient.
struct Case {
  testing::Feeds feeds;
  std::vector<Operation> setup, targets;
  std::vector<Output> fetches, xs;
};
using Maker = std::function<Case(Graph& g)>;

Output Feed(Graph& g, Case& c, DType t, const Shape& s, const std::string& name = "x") {
  Output p = ops::Placeholder(g, t, PartialShape(s), name);
  c.feeds.push_back({p, Tensor::Zeros(t, s)});
  return p;
}

// A value for a declared attribute, from its name and the first input's
// shape; nullopt leaves it unset (optional, or the op needs a maker).
std::optional<AttrValue> GenericAttr(const std::string& name, const Shape& s) {
  const int64_t r = static_cast<int64_t>(s.size());
  Ints reversed;
  for (int64_t i = r - 1; i >= 0; --i) reversed.push_back(i);
  static const std::map<std::string, AttrValue> fixed = {
      {"axis", int64_t{-1}}, {"axes", Ints{-1}}, {"keep_dims", false}, {"num_split", int64_t{1}},
      {"depth", int64_t{3}}, {"dtype", DType::kFloat32}, {"DstT", DType::kFloat64},
      {"rate", 0.5}, {"seed", int64_t{1}}, {"minval", 0.0}, {"maxval", 1.0}, {"mean", 0.0},
      {"stddev", 1.0}};
  if (auto it = fixed.find(name); it != fixed.end()) return it->second;
  if (name == "perm") return reversed;
  if (name == "begin") return Ints(r, 0);
  if (name == "size") return Ints(r, -1);
  if (name == "end") return Ints(r, 0);
  if (name == "end_mask") return (int64_t{1} << r) - 1;
  if (name == "strides") return Ints(r, 1);
  if (name == "multiples") return Ints(r, 2);
  if (name == "paddings") return Ints(2 * r, 1);  // also pads the empty dim: [2,0] -> [4,2]
  if (name == "shape") return PartialShape(s);
  if (name == "value") return Tensor::Zeros(DType::kFloat32, s);
  return std::nullopt;
}

// Overrides of GenericAttr for one op.
const std::map<std::string, std::map<std::string, AttrValue>>& AttrOverrides() {
  static const std::map<std::string, std::map<std::string, AttrValue>> o = {
      {"Squeeze", {{"axes", Ints{}}}},
      {"RandomUniform", {{"shape", Ints{2, 0}}}},
      {"RandomNormal", {{"shape", Ints{2, 0}}}},
      {"TruncatedNormal", {{"shape", Ints{2, 0}}}},
  };
  return o;
}

// The op alone on guessed inputs: n placeholders of dtype t and shape s.
Maker GenericMaker(const OpDef& def, DType t, Shape s) {
  return [&def, t, s](Graph& g) {
    Case c;
    const int n = def.min_inputs;
    std::vector<Output> in;
    for (int i = 0; i < n; ++i) in.push_back(Feed(g, c, t, s, "x" + std::to_string(i)));
    AttrMap a;
    const auto over = AttrOverrides().find(def.name);
    for (const AttrDef& d : def.attrs) {
      const std::string& name = d.name;
      if (over != AttrOverrides().end() && over->second.count(name)) {
        a.Set(name, over->second.at(name));
      } else if (auto v = GenericAttr(name, s)) {
        a.Set(name, *v);
      }
    }
    const int id = g.AddNode(def.name, in, std::move(a), "op");
    if (id < 0) return c;
    if (g.node(id).num_outputs() == 0) c.targets.push_back(Operation(&g, id));
    for (int i = 0; i < g.node(id).num_outputs(); ++i) c.fetches.emplace_back(&g, id, i);
    if (IsFloating(t)) c.xs = in;
    return c;
  };
}

Output IntConst(Graph& g, const std::vector<int32_t>& v) { return ops::Const(g, Tensor::FromVector(v)); }

// Every optimizer's dense and sparse updates of a [2, 0] variable and of a
// table looked up by no ids.
Case OptimizerCase(Graph& g, Optimizer& opt) {
  Case c;
  Output w = ops::Variable(g, "w", ops::Zeros(g, DType::kFloat32, {2, 0}));
  EmbeddingTable table = NewEmbeddingTable(g, "table", 4, 3);
  Output ids = Feed(g, c, DType::kInt32, {0}, "ids");
  Output offsets = ops::Const(g, Tensor::FromVector<int32_t>({0, 0}));
  Output looked = ops::EmbeddingLookupBag(g, table, ids, offsets);
  Output loss = ops::Sum(g, w) + ops::Sum(g, looked);
  auto train = opt.Minimize(g, loss);
  if (train.ok()) c.targets.push_back(*train);
  c.setup.push_back(ops::GlobalVariablesInitializer(g));  // after Minimize: with the slots
  c.fetches = {w, looked};
  return c;
}

// Makers, by the op they are for; the ops their graphs contain count as
// covered too (gradient helpers, Placeholder, Const, ...).
std::map<std::string, Maker> Makers() {
  std::map<std::string, Maker> m;
  m["Gather"] = [](Graph& g) {
    Case c;
    Output p = Feed(g, c, DType::kFloat32, {2, 0});
    c.fetches = {ops::Gather(g, p, IntConst(g, {1, 0, 1}))};
    c.xs = {p};
    return c;
  };
  m["UnsortedSegmentSum"] = [](Graph& g) {  // rows of no width, and no ids at all
    Case c;
    Output d = Feed(g, c, DType::kFloat32, {2, 0}), e = Feed(g, c, DType::kFloat32, {0, 3}, "e");
    c.fetches = {ops::UnsortedSegmentSum(g, d, IntConst(g, {1, 0}), ops::Const(g, int32_t{3})),
                 ops::UnsortedSegmentSum(g, e, ops::Const(g, Tensor(DType::kInt32, {0})), ops::Const(g, int32_t{2}))};
    c.xs = {d, e};
    return c;
  };
  m["Assert"] = [](Graph& g) {  // a true condition with zero-size data passes (no output: a target)
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {2, 0});
    AttrMap a;
    a.Set("template", std::string("[{}]"));
    const int n = g.AddNode("Assert", {ops::Const(g, Tensor::FromBools({true}, {})), x}, std::move(a), "check");
    c.targets = {Operation(&g, n)};
    return c;
  };
  for (const char* op : {"LogUniformCandidateSampler", "UniformCandidateSampler"}) {
    m[op] = [op](Graph& g) {  // no true classes at all: expected counts of shape [0, 1]
      Case c;
      Output t = Feed(g, c, DType::kInt64, {0, 1}, "true_classes");
      AttrMap a;
      a.Set("num_true", int64_t{1});
      a.Set("num_sampled", int64_t{2});
      a.Set("unique", true);
      a.Set("range_max", int64_t{5});
      const int n = g.AddNode(op, {t}, std::move(a), "sampler");
      c.fetches = {Output{&g, n, 0}, Output{&g, n, 1}, Output{&g, n, 2}};
      return c;
    };
  }
  m["Bitcast"] = [](Graph& g) {  // float32 [2, 0] as uint8 [2, 0, 4]
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {2, 0});
    AttrMap a;
    a.Set("type", DType::kUInt8);
    c.fetches = {g.Add1("Bitcast", {x}, std::move(a))};
    return c;
  };
  m["Select"] = [](Graph& g) {
    Case c;
    Output cond = Feed(g, c, DType::kBool, {2, 0}, "cond");
    Output a = Feed(g, c, DType::kFloat32, {2, 0}, "a"), b = Feed(g, c, DType::kFloat32, {0}, "b");
    c.fetches = {ops::Select(g, cond, a, b)};
    c.xs = {a, b};
    return c;
  };
  m["Fill"] = [](Graph& g) {
    Case c;
    c.fetches = {ops::Fill(g, IntConst(g, {2, 0}), ops::Const(g, 1.0f))};
    return c;
  };
  m["Range"] = [](Graph& g) {  // an empty range, with limits known only at run time
    Case c;
    Output lim = Feed(g, c, DType::kInt32, {}, "limit");
    c.fetches = {ops::Range(g, lim, lim, ops::Const(g, int32_t{1}))};
    return c;
  };
  m["Reshape"] = [](Graph& g) {
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {2, 0});
    c.fetches = {ops::Reshape(g, x, IntConst(g, {0, 5}))};
    c.xs = {x};
    return c;
  };
  m["SumToShape"] = [](Graph& g) {
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {2, 0});
    c.fetches = {ops::SumToShape(g, x, IntConst(g, {1, 0}))};
    c.xs = {x};
    return c;
  };
  m["ConcatGrad"] = [](Graph& g) {
    Case c;
    Output dy = Feed(g, c, DType::kFloat32, {2, 0});
    AttrMap a;
    a.Set("axis", int64_t{0});
    const int id = g.AddNode("ConcatGrad", {dy, IntConst(g, {1, 0}), IntConst(g, {1, 0})}, a);
    if (id >= 0) c.fetches = {Output(&g, id, 0), Output(&g, id, 1)};
    return c;
  };
  m["StridedSliceGrad"] = [](Graph& g) {
    Case c;
    Output dy = Feed(g, c, DType::kFloat32, {1, 0});
    AttrMap a;
    a.Set("begin", Ints{1, 0});
    a.Set("end", Ints{2, 0});
    a.Set("strides", Ints{1, 1});
    a.Set("end_mask", int64_t{2});
    c.fetches = {g.Add1("StridedSliceGrad", {dy, IntConst(g, {3, 0})}, a)};
    c.xs = {dy};
    return c;
  };
  m["GatherGrad"] = [](Graph& g) {
    Case c;
    Output dy = Feed(g, c, DType::kFloat32, {2, 0});
    c.fetches = {g.Add1("GatherGrad", {dy, IntConst(g, {1, 1}), IntConst(g, {3, 0})})};
    return c;
  };
  for (const char* mode : {"REFLECT", "SYMMETRIC"}) {
    m[std::string("Pad: ") + mode] = [mode](Graph& g) {
      Case c;
      Output x = Feed(g, c, DType::kFloat32, {3, 0});
      c.fetches = {ops::Pad(g, x, {2, 1, 0, 0}, mode)};
      c.xs = {x};
      return c;
    };
  }
  m["MatMul"] = [](Graph& g) {
    Case c;
    Output a = Feed(g, c, DType::kFloat32, {2, 0}, "a"), b = Feed(g, c, DType::kFloat32, {0, 3}, "b");
    c.fetches = {ops::MatMul(g, a, b)};
    c.xs = {a, b};
    return c;
  };
  m["BatchMatMul"] = [](Graph& g) {
    Case c;
    Output a = Feed(g, c, DType::kFloat32, {1, 2, 0}, "a");
    Output b = Feed(g, c, DType::kFloat32, {0, 3}, "b");
    c.fetches = {ops::BatchMatMul(g, a, b)};
    c.xs = {a, b};
    return c;
  };
  m["FusedMatMul"] = [](Graph& g) {
    Case c;
    Output a = Feed(g, c, DType::kFloat32, {2, 0}), b = Feed(g, c, DType::kFloat32, {0, 3}, "b");
    Output bias = Feed(g, c, DType::kFloat32, {3}, "bias");
    c.fetches = {ops::FusedMatMul(g, a, b, bias, "relu")};
    c.xs = {a, b, bias};
    return c;
  };
  m["DotInteraction"] = [](Graph& g) {
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {0, 4}), s = Feed(g, c, DType::kFloat32, {0, 3, 4}, "sparse");
    c.fetches = {ops::DotInteraction(g, x, s)};
    c.xs = {x, s};
    return c;
  };
  m["BiasAdd"] = [](Graph& g) {
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {2, 0}), b = Feed(g, c, DType::kFloat32, {0}, "bias");
    c.fetches = {ops::BiasAdd(g, x, b)};
    c.xs = {x, b};
    return c;
  };
  m["Conv2D"] = [](Graph& g) {
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {1, 3, 3, 0});
    Output f = Feed(g, c, DType::kFloat32, {2, 2, 0, 2}, "filter");
    c.fetches = {ops::Conv2D(g, x, f, ops::Conv2DAttrs{{1, 1, 1, 1}, "SAME"})};
    c.xs = {x, f};
    return c;
  };
  m["FusedConv2D"] = [](Graph& g) {
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {1, 3, 3, 0});
    Output f = Feed(g, c, DType::kFloat32, {2, 2, 0, 2}, "filter");
    Output b = Feed(g, c, DType::kFloat32, {2}, "bias");
    c.fetches = {ops::FusedConv2D(g, x, f, b, "relu", ops::Conv2DAttrs{{1, 1, 1, 1}, "SAME"})};
    c.xs = {x, f, b};
    return c;
  };
  m["FusedConv2D: no output channels"] = [](Graph& g) {
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {2, 4, 4, 3});
    Output f = Feed(g, c, DType::kFloat32, {3, 3, 3, 0}, "filter");
    Output b = Feed(g, c, DType::kFloat32, {0}, "bias");
    c.fetches = {ops::FusedConv2D(g, x, f, b, "relu", ops::Conv2DAttrs{{1, 1, 1, 1}, "SAME"})};
    c.xs = {x, f, b};
    return c;
  };
  // An empty batch: the float32 kernels' oneDNN engine hands it to Eigen.
  m["Conv2D: empty batch"] = [](Graph& g) {
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {0, 5, 5, 2});
    Output f = Feed(g, c, DType::kFloat32, {3, 3, 2, 4}, "filter");
    c.fetches = {ops::Conv2D(g, x, f, ops::Conv2DAttrs{{1, 2, 2, 1}, "SAME"})};
    c.xs = {x, f};
    return c;
  };
  // The bf16 kernels (precision.h) on the same inputs, where this machine runs them;
  // the gradients' products inherit the precision.
  if (Bf16Supported().ok()) {
    auto bf16 = [](Graph& g) { REQUIRE(SetComputePrecision(g, "bf16").ok()); };
    m["MatMul: bf16, k = 0"] = [bf16](Graph& g) {
      Case c;
      Output a = Feed(g, c, DType::kFloat32, {2, 0}, "a"), b = Feed(g, c, DType::kFloat32, {0, 3}, "b");
      c.fetches = {ops::MatMul(g, a, b)};
      c.xs = {a, b};
      bf16(g);
      return c;
    };
    m["MatMul: bf16, m = 0"] = [bf16](Graph& g) {
      Case c;
      Output a = Feed(g, c, DType::kFloat32, {0, 4}, "a"), b = Feed(g, c, DType::kFloat32, {4, 3}, "b");
      c.fetches = {ops::MatMul(g, a, b)};
      c.xs = {a, b};
      bf16(g);
      return c;
    };
    m["Conv2D: bf16, no channels"] = [bf16](Graph& g) {
      Case c;
      Output x = Feed(g, c, DType::kFloat32, {1, 3, 3, 0});
      Output f = Feed(g, c, DType::kFloat32, {2, 2, 0, 2}, "filter");
      c.fetches = {ops::Conv2D(g, x, f, ops::Conv2DAttrs{{1, 1, 1, 1}, "SAME"})};
      c.xs = {x, f};
      bf16(g);
      return c;
    };
    m["FusedConv2D: bf16, empty batch"] = [bf16](Graph& g) {
      Case c;
      Output x = Feed(g, c, DType::kFloat32, {0, 5, 5, 2});
      Output f = Feed(g, c, DType::kFloat32, {3, 3, 2, 4}, "filter");
      Output b = Feed(g, c, DType::kFloat32, {4}, "bias");
      c.fetches = {ops::FusedConv2D(g, x, f, b, "relu", ops::Conv2DAttrs{{1, 1, 1, 1}, "VALID"})};
      c.xs = {x, f, b};
      bf16(g);
      return c;
    };
    m["Conv2D: bf16, empty batch"] = [bf16](Graph& g) {
      Case c;
      Output x = Feed(g, c, DType::kFloat32, {0, 5, 5, 2});
      Output f = Feed(g, c, DType::kFloat32, {3, 3, 2, 4}, "filter");
      c.fetches = {ops::Conv2D(g, x, f, ops::Conv2DAttrs{{1, 1, 1, 1}, "VALID"})};
      c.xs = {x, f};
      bf16(g);
      return c;
    };
  }
  for (const char* pool : {"MaxPool", "AvgPool"}) {
    m[pool] = [pool](Graph& g) {
      Case c;
      Output x = Feed(g, c, DType::kFloat32, {1, 4, 4, 0});
      ops::PoolAttrs a{{1, 2, 2, 1}, {1, 2, 2, 1}, "VALID"};
      c.fetches = {std::string(pool) == "MaxPool" ? ops::MaxPool(g, x, a) : ops::AvgPool(g, x, a)};
      c.xs = {x};
      return c;
    };
  }
  m["SparseSoftmaxCrossEntropyWithLogits"] = [](Graph& g) {
    Case c;
    Output logits = Feed(g, c, DType::kFloat32, {0, 3}, "logits");
    c.fetches = {ops::SparseSoftmaxCrossEntropyWithLogits(g, logits, Feed(g, c, DType::kInt32, {0}, "labels"))};
    c.xs = {logits};
    return c;
  };
  m["Variables"] = [](Graph& g) {
    Case c;
    Output h = ops::VarHandle(g, "v", DType::kFloat32, PartialShape({2, 0}), "v");
    Output zeros = Feed(g, c, DType::kFloat32, {2, 0});
    c.setup.push_back(Operation(&g, ops::Assign(g, h, zeros).node));
    c.fetches = {ops::AssignAdd(g, h, zeros), ops::AssignSub(g, h, zeros),
                 ops::ReadVariable(g, h, DType::kFloat32)};
    // Rows of width 0, and no rows at all.
    c.targets = {ops::ResourceScatterUpdate(g, h, Feed(g, c, DType::kInt64, {1}, "row"), Feed(g, c, DType::kFloat32, {1, 0}, "upd")),
                 ops::ResourceScatterUpdate(g, h, Feed(g, c, DType::kInt32, {0}, "none"), Feed(g, c, DType::kFloat32, {0, 0}, "no_upd"))};
    return c;
  };
  m["Optimizers: GradientDescent"] = [](Graph& g) {
    GradientDescentOptimizer o(0.1);
    return OptimizerCase(g, o);
  };
  m["Optimizers: Momentum"] = [](Graph& g) {
    MomentumOptimizer o(0.1, 0.9);
    return OptimizerCase(g, o);
  };
  m["Optimizers: Adagrad"] = [](Graph& g) {
    AdagradOptimizer o(0.1);
    return OptimizerCase(g, o);
  };
  m["Optimizers: Adam"] = [](Graph& g) {
    AdamOptimizer o(0.1);
    return OptimizerCase(g, o);
  };
  m["Optimizers: RMSProp"] = [](Graph& g) {
    RMSPropOptimizer o(0.1);
    return OptimizerCase(g, o);
  };
  m["Optimizers: RowwiseAdagrad"] = [](Graph& g) {
    RowwiseAdagradOptimizer o(0.1);
    return OptimizerCase(g, o);
  };
  m["Optimizers: Ftrl"] = [](Graph& g) {
    FtrlOptimizer o(0.1, 0.01, 0.01);
    return OptimizerCase(g, o);
  };
  m["HashEmbeddingShardInit"] = [](Graph& g) {
    Case c;
    HashEmbeddingTableOptions o;
    o.num_shards = 2;
    EmbeddingTable table = NewHashEmbeddingTable(g, "hash", 3, o);
    Output looked = ops::EmbeddingLookup(g, table, Feed(g, c, DType::kInt32, {0, 2}, "ids"), "sqrtn");
    auto train = AdagradOptimizer(0.1).Minimize(g, ops::Sum(g, looked));
    if (train.ok()) c.targets.push_back(*train);
    c.setup.push_back(ops::GlobalVariablesInitializer(g));
    c.fetches = {looked};
    for (const Output& m : ops::HashEmbeddingShardMetrics(g, table)) c.fetches.push_back(m);
    return c;
  };
  m["EmbeddingShardLookup"] = [](Graph& g) {
    Case c;
    EmbeddingTable table = NewEmbeddingTable(g, "table", 4, 3, EmbeddingTableOptions{});
    c.setup.push_back(ops::GlobalVariablesInitializer(g));
    c.fetches = {ops::EmbeddingLookup(g, table, Feed(g, c, DType::kInt32, {0, 2}, "ids"))};
    return c;
  };
  m["EmbeddingSplitIds"] = [](Graph& g) {  // two shards: the ids are split first
    Case c;
    EmbeddingTableOptions o;
    o.num_shards = 2;
    EmbeddingTable table = NewEmbeddingTable(g, "table2", 4, 3, o);
    c.setup.push_back(ops::GlobalVariablesInitializer(g));
    c.fetches = {ops::EmbeddingLookup(g, table, Feed(g, c, DType::kInt32, {0, 2}, "ids"), "mean")};
    return c;
  };
  m["EmbeddingSparseGrad"] = [](Graph& g) {  // two lookups of one table: one merged update per shard
    Case c;
    EmbeddingTableOptions o;
    o.num_shards = 2;
    EmbeddingTable table = NewEmbeddingTable(g, "table3", 4, 3, o);
    Output a = ops::EmbeddingLookup(g, table, Feed(g, c, DType::kInt32, {0, 2}, "ids"), "mean");
    Output b = ops::EmbeddingLookup(g, table, Feed(g, c, DType::kInt64, {0, 1}, "ids2"));
    auto train = AdamOptimizer(0.1).Minimize(g, ops::Add(g, ops::Sum(g, a), ops::Sum(g, b)));
    if (train.ok()) c.targets.push_back(*train);
    c.setup.push_back(ops::GlobalVariablesInitializer(g));
    c.fetches = {a, b};
    return c;
  };
  m["Cond"] = [](Graph& g) {
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {2, 0});
    Output pred = ops::Placeholder(g, DType::kBool, PartialShape(Shape{}), "pred");
    c.feeds.push_back({pred, Tensor::FromBools({true}, {})});
    c.fetches = Cond(
        g, pred, [x](Graph&) { return std::vector<Output>{x * 2.0}; },
        [x](Graph&) { return std::vector<Output>{x}; });
    c.xs = {x};
    return c;
  };
  m["WhileLoop"] = [](Graph& g) {
    Case c;
    Output x = Feed(g, c, DType::kFloat32, {2, 0});
    auto out = WhileLoop(
        g,
        [](Graph& b, const std::vector<Output>& v) { return ops::Less(b, v[0], ops::Const(b, 3)); },
        [](Graph& b, const std::vector<Output>& v) {
          return std::vector<Output>{v[0] + ops::Const(b, 1), v[1] * 2.0};
        },
        {ops::Const(g, 0), x});
    if (out.ok()) c.fetches = {(*out)[1]};
    c.xs = {x};
    return c;
  };
  return m;
}

// Ops the reference evaluator cannot run: it has no queue, replication,
// collective, checkpoint or rendezvous service. Each is listed with the
// reason, so the list is read when an op is added. (The queue ops run on
// zero-size elements in a session in tests/actors/queue_test.cc.)
const std::map<std::string, std::string>& NeedsSession() {
  static const std::map<std::string, std::string> m = {
      {"FIFOQueue", "queue service"}, {"RandomShuffleQueue", "queue service"},
      {"PaddingFIFOQueue", "queue service"}, {"QueueEnqueue", "queue service"},
      {"QueueEnqueueMany", "queue service"}, {"QueueDequeue", "queue service"},
      {"QueueDequeueMany", "queue service"}, {"QueueDequeueUpTo", "queue service"},
      {"QueueClose", "queue service"},
      {"QueueSize", "queue service"}, {"QueueIncarnation", "queue service"},
      {"ApplyGradientSync", "replication service"}, {"ApplyGradientAsync", "replication service"},
      {"EmbeddingSparseApplySync", "replication service"},
      {"ReadVariableWithVersion", "replication service"}, {"SyncReplicaStats", "replication service"},
      {"StalenessStats", "replication service"}, {"AbortSyncStep", "replication service"},
      {"StaleSyncWait", "replication service"}, {"AllReduce", "collective service"},
      {"SaveCheckpoint", "checkpoint service"}, {"RestoreCheckpoint", "checkpoint service"},
      {"_Send", "rendezvous"}, {"_Recv", "rendezvous"},
      {"CriteoReader", "no inputs: it reads files (tests/kernels/criteo_reader_test.cc, tests/actors/reader_ops_test.cc)"},
      {"ChunkQueue", "chunk queue service (tests/actors/chunk_queue_test.cc)"},
      {"ChunkQueueTake", "chunk queue service"}, {"ChunkQueueReport", "chunk queue service"},
      {"ChunkQueueRelease", "chunk queue service"},
      {"CriteoChunkReader", "scalar inputs naming a chunk of its files (tests/actors/chunk_queue_test.cc)"},
  };
  return m;
}

// Ops for which an empty input is itself invalid: a clear error is the
// right answer.
const std::map<std::string, std::string>& ExpectedErrors() {
  static const std::map<std::string, std::string> m = {
      {"ArgMax", "the index of the largest of no values"},
      {"ArgMin", "the index of the smallest of no values"},
  };
  return m;
}

// A failure must be an error value naming a node, never our own bug.
bool ClearError(const Status& s) {
  return s.code() != Code::kInternal && s.message().find("node '") != std::string::npos;
}

struct Outcome {
  bool built = false;  // the maker's graph has no construction error
  Status status;       // of building the gradient and running everything
};

Outcome Run(Graph& g, const Case& c, bool differentiable) {
  Outcome o;
  if (!g.status().ok()) {
    o.status = g.status();
    return o;
  }
  o.built = true;
  InMemoryVariables vars;
  if (!c.setup.empty()) {
    auto s = testing::EvalGraph(g, c.feeds, {}, c.setup, &vars);
    if (!s.ok()) {
      o.status = s.status();
      return o;
    }
  }
  std::vector<Output> fetches = c.fetches;
  std::vector<Output> ys;
  for (const Output& f : c.fetches)
    if (IsFloating(f.dtype())) ys.push_back(f);
  // (x's shape as fed, its gradient) for each x that gets one.
  std::vector<std::pair<Shape, Output>> grads;
  if (differentiable && !c.xs.empty() && !ys.empty()) {
    auto gr = Gradients(g, ys, c.xs, {}, /*allow_unconnected=*/true);
    if (!gr.ok()) {
      o.status = gr.status();
      return o;
    }
    for (size_t i = 0; i < gr->size(); ++i) {
      if (!(*gr)[i].valid()) continue;
      for (const auto& f : c.feeds)
        if (f.first == c.xs[i]) grads.push_back({f.second.shape(), (*gr)[i]});
      fetches.push_back((*gr)[i]);
    }
  }
  auto r = testing::EvalGraph(g, c.feeds, fetches, c.targets, &vars);
  if (!r.ok()) {
    o.status = r.status();
    return o;
  }
  // EvalGraph checked each kernel's outputs against the declared shapes; a
  // gradient must also have its x's shape.
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& dx = (*r)[c.fetches.size() + i];
    if (dx.shape() != grads[i].first)
      o.status = Internal("the gradient '" + grads[i].second.name() + "' has shape " +
                          ShapeString(dx.shape()) + " for an x of shape " + ShapeString(grads[i].first));
  }
  return o;
}

}  // namespace

TEST_CASE("Every op and its gradient handle zero-size inputs", "[kernels][zero_size]") {
  const OpRegistry& reg = StandardOpRegistry();
  // The ops of graphs that ran (or failed as expected), and those of the
  // makers' graphs alone: inputs chosen for the op, where an error is a bug.
  std::set<std::string> covered, made;
  const std::map<std::string, Maker> makers = Makers();
  std::vector<std::string> failures;
  int runs = 0;
  auto record = [&](const std::string& label, Graph& g, const Outcome& o, bool expect_error) {
    const bool passed = o.status.ok() ? !expect_error : ClearError(o.status) && expect_error;
    if (passed)
      for (int id = 0; id < g.num_nodes(); ++id) covered.insert(g.node(id).op);
    if (o.status.ok()) ++runs;
    if (!passed) failures.push_back(label + (o.status.ok() ? ": expected an error, ran" : ": " + o.status.ToString()));
  };
  for (const auto& [label, make] : makers) {
    Graph g;
    Case c = make(g);
    const OpDef* def = reg.Find(label);
    Outcome o = Run(g, c, def == nullptr || def->differentiable);
    if (!o.built) failures.push_back(label + " maker: " + o.status.ToString());
    else record(label, g, o, ExpectedErrors().count(label) > 0);
    for (int id = 0; id < g.num_nodes(); ++id) made.insert(g.node(id).op);
  }
  // Every op without a maker alone on each guessed shape, with the first
  // dtype whose graph builds. A clear error is only a misfit of the guesses
  // when a maker's graph runs the op; an op no guesses fit must be in one.
  for (const std::string& name : reg.Names()) {
    if (makers.count(name) || NeedsSession().count(name)) continue;
    const OpDef& def = *reg.Find(name);
    for (const Shape& s : {Shape{2, 0}, Shape{0}}) {
      for (DType t : {DType::kFloat32, DType::kBool, DType::kInt32}) {
        Graph g;
        Case c = GenericMaker(def, t, s)(g);
        Outcome o = Run(g, c, def.differentiable);
        if (!o.built) continue;
        if (!o.status.ok() && ClearError(o.status) && made.count(name)) break;
        record(name + " on " + DTypeName(t) + ShapeString(s), g, o, ExpectedErrors().count(name) > 0);
        break;
      }
    }
  }
  std::string missing;
  for (const std::string& name : reg.Names())
    if (!covered.count(name) && !NeedsSession().count(name)) missing += name + " ";
  std::string all;
  for (const std::string& f : failures) all += f + "\n";
  INFO(all);
  CHECK(failures.empty());
  INFO("not covered (add a maker): " << missing);
  CHECK(missing.empty());
  // Most ops run here; the list of those that need a session stays short.
  CHECK(NeedsSession().size() < reg.Names().size() / 4);
  size_t registered_covered = 0;
  for (const std::string& name : reg.Names()) registered_covered += covered.count(name);
  WARN(std::to_string(registered_covered) + " of " + std::to_string(reg.Names().size()) +
       " ops run on zero-size inputs (" + std::to_string(NeedsSession().size()) + " need a session); " +
       std::to_string(runs) + " graphs ran");
}
