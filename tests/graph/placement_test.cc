#include <catch2/catch.hpp>

#include "graph/placement.h"
#include "shardflow/optimizers.h"
#include "shardflow/ops.h"

using namespace sf;

namespace {

const std::string kW0 = "/job:worker/task:0/device:CPU:0";
const std::string kW1 = "/job:worker/task:1/device:CPU:0";
const std::string kPs0 = "/job:ps/task:0/device:CPU:0";
const std::string kPs1 = "/job:ps/task:1/device:CPU:0";

bool HasText(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

std::string DeviceOf(const Graph& g, const std::vector<std::string>& p, const std::string& name) {
  return p[g.FindNode(name).value()];
}

}  // namespace

TEST_CASE("Place honours device scopes, partial requests and shorthand", "[placement]") {
  Graph g;
  Output a, b, c;
  {
    auto s = g.DeviceScope("/job:worker/task:1");
    a = ops::Placeholder(g, DType::kFloat32, {2}, "a");
  }
  {
    auto s = g.DeviceScope("/job:ps/task:0/cpu:0");
    b = ops::Placeholder(g, DType::kFloat32, {2}, "b");
  }
  c = ops::Add(g, a, a);
  REQUIRE(g.status().ok());
  auto p = Place(g, {kW0, kW1, "/job:ps/task:0/cpu:0"});
  REQUIRE(p.ok());
  CHECK(DeviceOf(g, *p, "a") == kW1);
  CHECK(DeviceOf(g, *p, "b") == kPs0);  // canonical, though listed in shorthand
  CHECK((*p)[c.node] == kW1);            // compute follows its inputs
}

TEST_CASE("Every node gets a device; one device takes everything", "[placement]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2, 2}, "x");
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1, 2, 3, 4}, {2, 2}));
  auto loss = ops::Sum(g, ops::MatMul(g, x, w));
  REQUIRE(GradientDescentOptimizer(0.1).Minimize(g, loss).ok());
  auto p = Place(g, {kW0});
  REQUIRE(p.ok());
  REQUIRE(static_cast<int>(p->size()) == g.num_nodes());
  for (const auto& d : *p) CHECK(d == kW0);
}

TEST_CASE("A variable is colocated with the ops that read and update it", "[placement]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {1, 2}, "x");
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1, 2}, {2, 1}));
  auto v = ops::Variable(g, "v", ops::Const(g, std::vector<float>{3}, {1, 1}));
  auto loss = ops::Sum(g, ops::MatMul(g, ops::MatMul(g, x, w), v));
  REQUIRE(MomentumOptimizer(0.1, 0.9).Minimize(g, loss).ok());
  REQUIRE(g.status().ok());
  auto groups = ColocationGroups(g);
  REQUIRE(groups.ok());
  auto p = Place(g, {kPs0, kPs1});
  REQUIRE(p.ok());
  const std::string wdev = DeviceOf(g, *p, "w/handle"), vdev = DeviceOf(g, *p, "v/handle");
  CHECK(wdev != vdev);  // two variables spread over two devices
  int w_members = 0;
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    bool reads_w = false, reads_v = false;
    for (const Output& in : n.inputs) {
      if (in.dtype() != DType::kResource) continue;
      reads_w |= g.node(in.node).name == "w/handle";
      reads_v |= g.node(in.node).name == "v/handle";
    }
    INFO(n.name << " (" << n.op << ")");
    if (reads_w) {
      ++w_members;
      CHECK((*groups)[id] == (*groups)[g.FindNode("w/handle").value()]);
      CHECK((*p)[id] == wdev);
    }
    if (reads_v && !reads_w) CHECK((*p)[id] == vdev);
  }
  // The read, the initializer, ApplyMomentum (and its accumulator's ops).
  CHECK(w_members >= 3);
  CHECK(DeviceOf(g, *p, "w/Assign") == wdev);
  CHECK(DeviceOf(g, *p, "w") == wdev);
}

TEST_CASE("Unconstrained variables go round-robin, constrained ones stay", "[placement]") {
  Graph g;
  std::vector<Output> reads;
  for (int i = 0; i < 4; ++i)
    reads.push_back(ops::Variable(g, "v" + std::to_string(i), ops::Const(g, static_cast<float>(i))));
  {
    auto s = g.DeviceScope("/job:ps/task:1");
    reads.push_back(ops::Variable(g, "pinned", ops::Const(g, 5.0f)));
  }
  reads.push_back(ops::Variable(g, "v4", ops::Const(g, 4.0f)));
  REQUIRE(g.status().ok());
  auto p = Place(g, {kPs0, kPs1, kW0});
  REQUIRE(p.ok());
  CHECK(DeviceOf(g, *p, "v0") == kPs0);
  CHECK(DeviceOf(g, *p, "v1") == kPs1);
  CHECK(DeviceOf(g, *p, "v2") == kW0);
  CHECK(DeviceOf(g, *p, "v3") == kPs0);
  CHECK(DeviceOf(g, *p, "pinned") == kPs1);
  CHECK(DeviceOf(g, *p, "pinned/Assign") == kPs1);
  CHECK(DeviceOf(g, *p, "v4") == kPs1);
  // The initial values (Consts) sit with the Assign that uses them.
  const Node& init = g.node(g.FindNode("v2/Assign").value());
  CHECK((*p)[init.inputs[1].node] == kW0);

  // A partial request spreads among the devices it allows.
  Graph g2;
  for (int i = 0; i < 3; ++i) {
    auto s = g2.DeviceScope("/job:ps");
    ops::Variable(g2, "p" + std::to_string(i), ops::Const(g2, 1.0f));
  }
  auto p2 = Place(g2, {kW0, kPs0, kPs1});
  REQUIRE(p2.ok());
  CHECK(DeviceOf(g2, *p2, "p0") == kPs0);
  CHECK(DeviceOf(g2, *p2, "p1") == kPs1);
  CHECK(DeviceOf(g2, *p2, "p2") == kPs0);

  PlacementOptions packed;
  packed.spread_resources = false;
  auto p3 = Place(g2, {kPs0, kPs1}, packed);
  REQUIRE(p3.ok());
  for (const auto& d : *p3) CHECK(d == kPs0);
}

TEST_CASE("Compute goes with its inputs and constants with their consumers", "[placement]") {
  Graph g;
  Output a, b;
  {
    auto s = g.DeviceScope(kW1);
    a = ops::Placeholder(g, DType::kFloat32, {2}, "a");
  }
  auto k = ops::Const(g, std::vector<float>{1, 2}, {2});
  auto y = ops::Mul(g, a, k);
  auto z = ops::Neg(g, y);
  {
    auto s = g.DeviceScope(kW0);
    b = ops::Add(g, z, z);
  }
  auto after = ops::Square(g, b);
  REQUIRE(g.status().ok());
  auto p = Place(g, {kW0, kW1});
  REQUIRE(p.ok());
  CHECK((*p)[k.node] == kW1);
  CHECK((*p)[y.node] == kW1);
  CHECK((*p)[z.node] == kW1);
  CHECK((*p)[b.node] == kW0);
  CHECK((*p)[after.node] == kW0);
}

TEST_CASE("The _class attr colocates nodes", "[placement]") {
  Graph g;
  Output a;
  {
    auto s = g.DeviceScope(kW1);
    a = ops::Placeholder(g, DType::kFloat32, {2}, "a");
  }
  AttrMap attrs;
  attrs.Set("dtype", DType::kFloat32);
  attrs.Set("_class", std::string("loc:@a"));
  const int b = g.AddNode("Placeholder", {}, attrs, "b");
  attrs.Set("_class", std::string("loc:@zzz, loc:@b"));
  REQUIRE(g.AddNode("Placeholder", {}, attrs, "zzz") >= 0);
  REQUIRE(g.status().ok());
  auto p = Place(g, {kW0, kW1});
  REQUIRE(p.ok());
  CHECK((*p)[b] == kW1);
  CHECK(DeviceOf(g, *p, "zzz") == kW1);

  Graph bad;
  attrs.Set("_class", std::string("loc:@nowhere"));
  bad.AddNode("Placeholder", {}, attrs, "c");
  auto r = Place(bad, {kW0});
  REQUIRE_FALSE(r.ok());
  CHECK(HasText(r.status(), "node 'c'"));
  CHECK(HasText(r.status(), "'loc:@nowhere' names no node"));
  Graph bad2;
  ops::Placeholder(bad2, DType::kFloat32, {2}, "c");
  attrs.Set("_class", std::string("c"));
  bad2.AddNode("Placeholder", {}, attrs, "d");
  auto groups = ColocationGroups(bad2);
  REQUIRE_FALSE(groups.ok());
  CHECK(HasText(groups.status(), "node 'd': _class entry 'c' is not loc:@NAME"));
  attrs.Set("_class", int64_t{3});
  Graph bad3;
  bad3.AddNode("Placeholder", {}, attrs, "e");
  CHECK(HasText(ColocationGroups(bad3).status(), "attr _class must be a string"));
}

TEST_CASE("Impossible placements are errors naming nodes and devices", "[placement]") {
  SECTION("a requested device not in the list") {
    Graph g;
    {
      auto s = g.DeviceScope("/job:ps/task:3");
      ops::Placeholder(g, DType::kFloat32, {2}, "x");
    }
    auto r = Place(g, {kW0, kPs0});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(HasText(r.status(), "node 'x' requests device '/job:ps/task:3'"));
    CHECK(HasText(r.status(), kW0));
    CHECK(HasText(r.status(), kPs0));
  }
  SECTION("colocated nodes requesting different devices") {
    Graph g;
    Output w;
    {
      auto s = g.DeviceScope("/job:ps/task:0");
      w = ops::Variable(g, "w", ops::Const(g, 1.0f));
    }
    {
      auto s = g.DeviceScope("/job:ps/task:1");
      ops::AssignAdd(g, ops::VariableHandle(w), ops::Const(g, 2.0f));
    }
    REQUIRE(g.status().ok());
    auto r = Place(g, {kPs0, kPs1});
    REQUIRE_FALSE(r.ok());
    CHECK(HasText(r.status(), "'w/handle'"));
    CHECK(HasText(r.status(), "'AssignAdd'"));
    CHECK(HasText(r.status(), "'/job:ps/task:0'"));
    CHECK(HasText(r.status(), "'/job:ps/task:1'"));
  }
  SECTION("a malformed request names the node") {
    Graph g;
    {
      auto s = g.DeviceScope("/job:ps/tusk:0");
      ops::Placeholder(g, DType::kFloat32, {2}, "x");
    }
    auto r = Place(g, {kPs0});
    REQUIRE_FALSE(r.ok());
    CHECK(HasText(r.status(), "node 'x'"));
    CHECK(HasText(r.status(), "'/job:ps/tusk:0'"));
  }
  SECTION("bad device lists") {
    Graph g;
    ops::Placeholder(g, DType::kFloat32, {2}, "x");
    CHECK(HasText(Place(g, {}).status(), "at least one device"));
    CHECK(HasText(Place(g, {kW0, "/job:worker/task:0/cpu:0"}).status(), "listed twice"));
    CHECK(HasText(Place(g, {"/job:worker"}).status(), "not a full device name"));
  }
}

TEST_CASE("Resource edges colocate through an Identity of a handle, also on GPUs", "[placement]") {
  const std::string kGpu0 = "/job:worker/task:0/device:GPU:0";
  const std::string kGpu1 = "/job:worker/task:0/device:GPU:1";
  Graph g;
  auto w = ops::Variable(g, "w", ops::Const(g, 1.0f));
  Output read;
  {
    auto s = g.DeviceScope("/gpu:1");
    auto h = ops::Identity(g, ops::VariableHandle(w), "h");
    read = ops::ReadVariable(g, h, DType::kFloat32);
  }
  REQUIRE(g.status().ok());
  auto p = Place(g, {kGpu0, kGpu1, kW0});
  REQUIRE(p.ok());
  CHECK(DeviceOf(g, *p, "w/handle") == kGpu1);
  CHECK(DeviceOf(g, *p, "h") == kGpu1);
  CHECK((*p)[read.node] == kGpu1);
  CHECK(DeviceOf(g, *p, "w") == kGpu1);
}
