#include <catch2/catch.hpp>

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "tests/support/temp_dir.h"
#include "shardflow/graph_io.h"
#include "graph/op_registry.h"
#include "proto/graph_def.capnp.h"
#include "shardflow/control_flow.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"

using namespace sf;
using sf::testing::TempDir;
using sf::testing::WriteFile;

namespace {



// The core ops plus "AttrHolder", an op taking any inputs and an attr of
// every kind, so one node can carry them all.
const OpRegistry& TestRegistry() {
  static const OpRegistry* reg = [] {
    auto* r = new OpRegistry();
    REQUIRE(RegisterCoreOps(*r).ok());
    OpBuilder holder("AttrHolder");
    holder.Inputs(0, -1);
    // Declared by name only: the test stores a value of every kind under them.
    for (const char* a : {"i", "f", "b", "s", "t", "ints", "floats", "shape", "unknown_shape", "scalar_shape",
                          "tensor_f64", "tensor_i32", "tensor_i64", "tensor_bool", "tensor_empty",
                          "tensor_invalid", "dtypes", "empty_ints"})
      holder.Attr(a, int64_t{0});
    REQUIRE(r->Register(holder
        .Shape([](InferenceContext& c) -> Status {
          c.set_output(0, DType::kFloat64, PartialShape({-1, 2}));
          c.set_output(1, DType::kInt32, PartialShape());
          return Status::OK();
        })
        .NotDifferentiable().Summary("Test op holding attrs.").Build()).ok());
    return r;
  }();
  return *reg;
}

bool SameTensor(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.bytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.bytes()) == 0);
}

bool SameAttr(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Tensor>) return SameTensor(x, std::get<Tensor>(b));
        else return x == std::get<T>(b);
      },
      a);
}

// Compares two graphs node by node (ids, names, edges, attrs, inferred types).
void CheckSameGraph(const Graph& a, const Graph& b) {
  REQUIRE(b.status().ok());
  REQUIRE(a.num_nodes() == b.num_nodes());
  for (int id = 0; id < a.num_nodes(); ++id) {
    const Node& x = a.node(id);
    const Node& y = b.node(id);
    INFO("node " << x.name);
    CHECK(x.name == y.name);
    CHECK(x.op == y.op);
    CHECK(x.device == y.device);
    CHECK(x.stateful == y.stateful);
    REQUIRE(x.inputs.size() == y.inputs.size());
    for (size_t i = 0; i < x.inputs.size(); ++i) {
      CHECK(x.inputs[i].node == y.inputs[i].node);
      CHECK(x.inputs[i].index == y.inputs[i].index);
      CHECK(y.inputs[i].graph == &b);
    }
    CHECK(x.control_inputs == y.control_inputs);
    CHECK(x.output_dtypes == y.output_dtypes);
    CHECK(x.output_shapes == y.output_shapes);
    REQUIRE(x.attrs.all().size() == y.attrs.all().size());
    for (const auto& [name, v] : x.attrs.all()) {
      INFO("attr " << name);
      const AttrValue* w = y.attrs.Find(name);
      REQUIRE(w != nullptr);
      CHECK(SameAttr(v, *w));
    }
  }
}

// A graph using every attr kind, name and device scopes and control edges.
void BuildAttrGraph(Graph& g) {
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 3}, "x");
  auto c = ops::Const(g, std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  AttrMap a;
  a.Set("i", int64_t{-42});
  a.Set("f", 2.5);
  a.Set("b", true);
  a.Set("s", std::string("SAME padding / with : odd chars"));
  a.Set("t", DType::kInt64);
  a.Set("ints", std::vector<int64_t>{1, -1, int64_t{1} << 40});
  a.Set("floats", std::vector<double>{0.5, -1e300});
  a.Set("shape", PartialShape({-1, 28, 28, 1}));
  a.Set("unknown_shape", PartialShape());
  a.Set("scalar_shape", PartialShape(Shape{}));
  a.Set("tensor_f64", Tensor::FromVector<double>({1.25, -3}, {2, 1}));
  a.Set("tensor_i32", Tensor::FromVector<int32_t>({7, 8, 9}));
  a.Set("tensor_i64", Tensor::Scalar<int64_t>(-5));
  a.Set("tensor_bool", Tensor::FromBools({true, false}, {2}));
  a.Set("tensor_empty", Tensor::Zeros(DType::kFloat32, {0, 4}));
  a.Set("tensor_invalid", Tensor());
  a.Set("dtypes", std::vector<DType>{DType::kFloat32, DType::kBool, DType::kResource});
  a.Set("empty_ints", std::vector<int64_t>{});
  int holder;
  {
    auto scope = g.NameScope("layer");
    auto dev = g.DeviceScope("/cpu:0");
    holder = g.AddNode("AttrHolder", {x, c}, a, "holder");
  }
  auto y = ops::Identity(g, Output(&g, holder, 1), "y");
  auto z = ops::Identity(g, c, "z");
  Operation noop = ops::NoOp(g, {y.node, z.node}, "group");
  REQUIRE(g.AddControlInput(z.node, x.node).ok());
  REQUIRE(noop.valid());
  REQUIRE(g.status().ok());
}

// A GraphDef message built by hand, for files shardflow itself never writes.
std::string HandMadeGraphDef(uint32_t version, const std::string& input_node) {
  capnp::MallocMessageBuilder m;
  auto gd = m.initRoot<proto::GraphDef>();
  gd.setFormatVersion(version);
  auto nodes = gd.initNodes(2);
  nodes[0].setName("a");
  nodes[0].setOp("Placeholder");
  auto attrs = nodes[0].initAttrs(1);
  attrs[0].setName("dtype");
  attrs[0].initValue().setDtypeValue(proto::DType::FLOAT32);
  nodes[1].setName("b");
  nodes[1].setOp("Identity");
  auto in = nodes[1].initInputs(1);
  in[0].setNode(input_node);
  in[0].setIndex(0);
  auto words = capnp::messageToFlatArray(m);
  return std::string(reinterpret_cast<const char*>(words.asBytes().begin()), words.asBytes().size());
}

}  // namespace

TEST_CASE("GraphDef round-trips every attr kind, scopes, devices and control edges", "[graph_def]") {
  Graph g(TestRegistry());
  BuildAttrGraph(g);
  TempDir tmp;
  const std::string path = tmp.path + "/attrs.capnp";
  REQUIRE(SaveGraph(g, path).ok());
  Graph g2(TestRegistry());
  Status s = LoadGraph(path, &g2);
  INFO(s.ToString());
  REQUIRE(s.ok());
  CheckSameGraph(g, g2);
  CHECK(g2.node(g2.FindNode("layer/holder").value()).device == "/cpu:0");
  auto bytes = GraphToBytes(g2);
  REQUIRE(bytes.ok());
  CHECK(*bytes == GraphToBytes(g).value());
}

TEST_CASE("A loaded graph evaluates like the original", "[graph_def]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 2}, "x");
  auto c = ops::Const(g, std::vector<float>{1.5, -2, 3, 4}, {2, 2});
  auto y = ops::Identity(g, ops::StopGradient(g, x), "y");
  ops::Sum(g, ops::Relu(g, ops::MatMul(g, x, c) + -20.0), {1});
  REQUIRE(g.status().ok());
  auto bytes = GraphToBytes(g);
  REQUIRE(bytes.ok());
  Graph g2;
  REQUIRE(GraphFromBytes(*bytes, &g2).ok());
  CheckSameGraph(g, g2);
  const Tensor feed = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  for (const Graph* gr : {static_cast<const Graph*>(&g), static_cast<const Graph*>(&g2)}) {
    auto yo = gr->FindOutput("y").value();
    auto r = testing::Eval(*gr, yo, {{gr->FindOutput("x").value(), feed}});
    REQUIRE(r.ok());
    CHECK(r->ToVector<float>() == feed.ToVector<float>());
    auto cr = testing::Eval(*gr, gr->FindOutput(c.name()).value());
    REQUIRE(cr.ok());
    CHECK(cr->ToVector<float>() == std::vector<float>{1.5, -2, 3, 4});
    // x @ c = [[7.5,6],[16.5,10],[25.5,14]]; relu(. - 20) summed over axis 1.
    auto sr = testing::Eval(*gr, gr->FindOutput("Sum").value(), {{gr->FindOutput("x").value(), feed}});
    REQUIRE(sr.ok());
    CHECK(sr->ToVector<float>() == std::vector<float>{0, 0, 5.5});
  }
  (void)y;
}

TEST_CASE("Variables and their initializers survive a round trip", "[graph_def]") {
  Graph g;
  auto w = ops::Variable(g, "w", ops::Const(g, Tensor::FromVector<float>({1, 2, 3}), "w_init"));
  ops::Identity(g, w, "y");
  REQUIRE(g.status().ok());
  Graph g2;
  REQUIRE(GraphFromBytes(GraphToBytes(g).value(), &g2).ok());
  CheckSameGraph(g, g2);
  const Operation init = ops::GlobalVariablesInitializer(g2);
  REQUIRE(init.valid());
  REQUIRE(g2.node(init.node).control_inputs.size() == 1);
  InMemoryVariables vars;
  REQUIRE(testing::EvalGraph(g2, {}, {}, {init}, &vars).ok());
  auto y = testing::Eval(g2, g2.FindOutput("y").value(), {}, &vars);
  REQUIRE(y.ok());
  CHECK(y->ToVector<float>() == std::vector<float>{1, 2, 3});
}

TEST_CASE("A big tensor survives the traversal limit", "[graph_def]") {
  Graph g;
  // 80 MiB: above Cap'n Proto's default 64 MiB traversal limit.
  Tensor big = Tensor::Zeros(DType::kFloat64, {10 * 1024 * 1024});
  big.data<double>()[12345] = 7;
  ops::Const(g, big, "big");
  auto bytes = GraphToBytes(g);
  REQUIRE(bytes.ok());
  Graph g2;
  REQUIRE(GraphFromBytes(*bytes, &g2).ok());
  const Tensor& t = std::get<Tensor>(*g2.node(0).attrs.Find("value"));
  CHECK(t.shape() == big.shape());
  CHECK(t.data<double>()[12345] == 7);
}

TEST_CASE("A GraphDef whose pointers alias one blob is refused, not decoded to many copies", "[graph_def]") {
  // 200 Consts of 8 bytes and one of 16 KiB; then every small one's data
  // pointer is rewritten to name the big blob. The file stays ~30 KB while
  // a decoder that follows each pointer would copy 200 x 16 KiB: a hostile
  // file or peer multiplies its size by thousands this way.
  Graph g;
  Tensor big = Tensor::Zeros(DType::kFloat64, {2048});
  ops::Const(g, big, "big");
  constexpr int kSmall = 200;
  for (int i = 0; i < kSmall; ++i) ops::Const(g, Tensor::Scalar<double>(i + 0.5), "c" + std::to_string(i));
  const std::string bytes = GraphToBytes(g).value();
  kj::Array<capnp::word> in = kj::heapArray<capnp::word>(bytes.size() / 8);
  std::memcpy(in.begin(), bytes.data(), bytes.size());
  capnp::FlatArrayMessageReader reader(in);
  // One segment, so every pointer is a near pointer with a plain offset.
  capnp::MallocMessageBuilder one(1 << 16, capnp::AllocationStrategy::FIXED_SIZE);
  one.setRoot(reader.getRoot<proto::GraphDef>());
  auto segments = one.getSegmentsForOutput();
  REQUIRE(segments.size() == 1);
  auto* words = const_cast<uint64_t*>(reinterpret_cast<const uint64_t*>(segments[0].begin()));
  const size_t nwords = segments[0].size();
  // Where a node's tensor struct starts (its data section, one word).
  auto tensor_of = [&](int node) -> size_t {
    for (auto a : one.getRoot<proto::GraphDef>().getNodes()[node].getAttrs())
      if (a.getValue().isTensorValue()) {
        capnp::AnyStruct::Builder any(a.getValue().getTensorValue());
        return reinterpret_cast<const uint64_t*>(any.getDataSection().begin()) - words;
      }
    FAIL("no tensor attr");
    return 0;
  };
  const size_t big_struct = tensor_of(0);
  int aliased = 0;
  for (int n = 1; n <= kSmall; ++n) {
    const size_t target = tensor_of(n);
    for (size_t q = 0; q < nwords; ++q) {
      const uint64_t w = words[q];
      const int32_t offset = static_cast<int32_t>(static_cast<uint32_t>(w)) >> 2;
      // A struct pointer (tag 0) of one data word and two pointers at target.
      if ((w & 3) != 0 || ((w >> 32) & 0xffff) != 1 || (w >> 48) != 2) continue;
      if (static_cast<int64_t>(q) + 1 + offset != static_cast<int64_t>(target)) continue;
      const int64_t to_big = static_cast<int64_t>(big_struct) - static_cast<int64_t>(q) - 1;
      words[q] = (w & ~uint64_t{0xffffffff}) | static_cast<uint32_t>(to_big << 2);
      ++aliased;
      break;
    }
  }
  REQUIRE(aliased == kSmall);
  auto flat = capnp::messageToFlatArray(one);
  const std::string hostile(reinterpret_cast<const char*>(flat.asBytes().begin()), flat.asBytes().size());
  Graph out;
  Status s = GraphFromBytes(hostile, &out, "aliased.capnp");
  INFO(s.ToString());
  CHECK(s.code() == Code::kDataLoss);
  CHECK(s.message().find("aliased.capnp") != std::string::npos);
  CHECK(s.message().find("traversal limit") != std::string::npos);
}

TEST_CASE("Bad GraphDef files give clear errors, never a crash", "[graph_def]") {
  TempDir tmp;
  const std::string dir = tmp.path;
  Graph g(TestRegistry());
  BuildAttrGraph(g);
  const std::string good = GraphToBytes(g).value();

  auto load = [&](const std::string& name, const std::string& bytes, const OpRegistry& reg) {
    WriteFile(dir + "/" + name, bytes);
    Graph out(reg);
    return LoadGraph(dir + "/" + name, &out);
  };
  auto mentions = [](const Status& s, const std::string& text) {
    INFO(s.ToString());
    return !s.ok() && s.message().find(text) != std::string::npos;
  };

  Status s = load("truncated.capnp", good.substr(0, good.size() - 64), TestRegistry());
  CHECK(s.code() == Code::kDataLoss);
  CHECK(mentions(s, "truncated.capnp"));
  CHECK(mentions(s, "corrupt or truncated"));

  s = load("odd.capnp", good.substr(0, 13), TestRegistry());
  CHECK(s.code() == Code::kDataLoss);
  CHECK(mentions(s, "not a whole number of 8-byte"));

  s = load("empty.capnp", "", TestRegistry());
  CHECK(mentions(s, "empty"));

  s = load("trailing.capnp", good + std::string(16, '\0'), TestRegistry());
  CHECK(mentions(s, "16 unexpected bytes"));

  s = load("unknown_op.capnp", good, StandardOpRegistry());
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(mentions(s, "unknown_op.capnp"));
  CHECK(mentions(s, "node 'layer/holder': unknown op 'AttrHolder'"));

  s = load("missing_input.capnp", HandMadeGraphDef(GraphDefFormatVersion(), "nope"), StandardOpRegistry());
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(mentions(s, "node 'b': input 0 ('nope:0') names a node that is not in the graph"));

  s = load("forward.capnp", HandMadeGraphDef(GraphDefFormatVersion(), "b"), StandardOpRegistry());
  CHECK(mentions(s, "names a node defined after it"));

  s = load("version.capnp", HandMadeGraphDef(99, "a"), StandardOpRegistry());
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(mentions(s, "format version 99"));

  CHECK(load("ok.capnp", HandMadeGraphDef(GraphDefFormatVersion(), "a"), StandardOpRegistry()).ok());

  Graph fresh;
  s = LoadGraph(dir + "/absent.capnp", &fresh);
  CHECK(s.code() == Code::kNotFound);
  CHECK(mentions(s, "absent.capnp"));

  Graph nonempty;
  ops::Const(nonempty, 1.0f);
  s = GraphFromBytes(good, &nonempty);
  CHECK(mentions(s, "empty Graph"));

  // Overwrite each word in turn with garbage: every load must return, OK or not.
  int errors = 0;
  for (size_t w = 0; w < good.size() / 8; ++w) {
    std::string bad = good;
    std::memset(&bad[w * 8], 0xA5, 8);
    Graph out(TestRegistry());
    if (!GraphFromBytes(bad, &out).ok()) ++errors;
  }
  CHECK(errors > 0);

  // Random byte flips and every truncation: errors or graphs, never a crash.
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    std::string bad = good;
    const int flips = 1 + trial % 4;
    for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    Graph out(TestRegistry());
    (void)GraphFromBytes(bad, &out);
  }
  for (size_t len = 8; len < good.size(); len += 8) {
    Graph out(TestRegistry());
    CHECK_FALSE(GraphFromBytes(good.substr(0, len), &out).ok());
  }
}

TEST_CASE("Saving a broken graph or a bad path is an error", "[graph_def]") {
  Graph g;
  ops::Placeholder(g, DType::kFloat32, {2}, "x");
  g.AddNode("NoSuchOp", {});
  REQUIRE_FALSE(g.status().ok());
  TempDir tmp;
  Status s = SaveGraph(g, tmp.path + "/broken.capnp");
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("construction error") != std::string::npos);

  Graph ok;
  ops::Const(ok, 1.0f);
  CHECK(SaveGraph(ok, "/nonexistent_dir/g.capnp").code() == Code::kUnavailable);
}

TEST_CASE("A loaded node with an attribute its op does not declare is refused", "[graph_def]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {3}, "x");
  ops::Pad(g, x, {2, 2}, "REFLECT");
  REQUIRE(g.status().ok());
  auto good = GraphToBytes(g);
  REQUIRE(good.ok());
  // The REFLECT mode survives the round trip (it was once dropped as unknown).
  Graph loaded;
  REQUIRE(GraphFromBytes(*good, &loaded).ok());
  auto r = testing::Eval(loaded, loaded.FindOutput("Pad").value(),
                         {{loaded.FindOutput("x").value(), Tensor::FromVector<float>({1, 2, 3})}});
  REQUIRE(r.ok());
  CHECK(r->ToVector<float>() == std::vector<float>{3, 2, 1, 2, 3, 2, 1});

  // A writer's misspelt attribute: the saved graph is edited after the check.
  g.mutable_node(g.FindNode("Pad").value()).attrs.Set("pad_mode", std::string("REFLECT"));
  auto bad = GraphToBytes(g);
  REQUIRE(bad.ok());
  Graph refused;
  Status s = GraphFromBytes(*bad, &refused, "pads.capnp");
  CHECK(s.code() == Code::kInvalidArgument);
  INFO(s.ToString());
  CHECK(s.message().find("pads.capnp") != std::string::npos);
  CHECK(s.message().find("node 'Pad' (op Pad): unknown attribute 'pad_mode' (Pad takes: paddings, mode)") !=
        std::string::npos);
}

TEST_CASE("A loaded WhileLoop whose body changes a loop variable's shape is refused", "[graph_def]") {
  // The loop the WhileLoop builder refuses to build, put together by hand as
  // a file from elsewhere could hold it: x [2] becomes Concat(x, x) [4].
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  auto enter = ops::Enter(g, x, "loop", false, 10, "loop/enter");
  auto merge = ops::Merge(g, {enter, enter}, "loop/merge")[0];
  auto pred = ops::LoopCond(g, ops::Const(g, Tensor::FromBools({false}, {})), "loop", -1, "loop/cond");
  auto sw = ops::Switch(g, merge, pred, "loop/switch");
  auto body = ops::Concat(g, {ops::Identity(g, sw[1], "loop/body_in"), sw[1]}, 0);
  auto next = ops::NextIteration(g, body, "loop/next");
  g.mutable_node(merge.node).inputs[1] = next;
  ops::Exit(g, sw[0], "loop/exit");
  REQUIRE(g.status().ok());
  auto bytes = GraphToBytes(g);
  REQUIRE(bytes.ok());
  Graph loaded;
  Status s = GraphFromBytes(*bytes, &loaded, "loop.capnp");
  CHECK(s.code() == Code::kInvalidArgument);
  INFO(s.ToString());
  CHECK(s.message().find("loop.capnp") != std::string::npos);
  CHECK(s.message().find("WhileLoop 'loop' loop variable 'x' (Merge 'loop/merge') has shape [2] but the "
                         "body returns shape [4]") != std::string::npos);
}
