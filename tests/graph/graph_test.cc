// Graph::AddNode's checks that every node passes, whatever built it.
#include <catch2/catch.hpp>

#include "graph/op_registry.h"
#include "shardflow/ops.h"

using namespace sf;

TEST_CASE("A node with an attribute its op does not declare is refused, naming both", "[graph]") {
  Graph g;
  auto x = ops::Const(g, std::vector<float>{1, 2, 3}, {3});
  AttrMap a;
  a.Set("paddings", std::vector<int64_t>{1, 1});
  a.Set("modes", std::string("REFLECT"));
  CHECK(g.AddNode("Pad", {x}, a, "pad") < 0);
  CHECK(g.status().code() == Code::kInvalidArgument);
  CHECK(g.status().message() ==
        "node 'pad' (op Pad): unknown attribute 'modes' (Pad takes: paddings, mode)");

  Graph h;
  AttrMap t;
  t.Set("T", DType::kFloat32);
  CHECK(h.AddNode("Relu", {ops::Const(h, 1.0f)}, t, "relu") < 0);
  CHECK(h.status().message() == "node 'relu' (op Relu): unknown attribute 'T' (Relu takes no attributes)");
}

TEST_CASE("The runtime's own attributes are accepted on any op", "[graph]") {
  Graph g;
  auto x = ops::Const(g, Tensor::Scalar<float>(1), "x");
  AttrMap a;
  a.Set("_class", std::string("loc:@x"));
  CHECK(g.AddNode("Relu", {x}, a) >= 0);
  CHECK(g.status().ok());
  CHECK(IsRuntimeAttr("_class"));
  CHECK(IsRuntimeAttr("_initializer"));
  CHECK_FALSE(IsRuntimeAttr("class"));
  CHECK_FALSE(IsRuntimeAttr(""));
}
