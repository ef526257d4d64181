// Graphs as an attacker writes them (a peer registering partitions, a file
// given to `shardflow run`): sizes that overflow, or that ask for more
// memory than the machine or the configured limit has, fail the step with
// an error naming the node; the process and the session go on.
#include <catch2/catch.hpp>

#include <limits>

#include "shardflow/graph_io.h"
#include "shardflow/ops.h"
#include "shardflow/session.h"

using namespace sf;

namespace {

bool Has(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

}  // namespace

TEST_CASE("A Pad of 2^40 asks for more than the machine has: ResourceExhausted naming the node", "[actors]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2, 3}, "x");
  auto padded = ops::Identity(g, ops::Pad(g, x, {0, 2, int64_t{1} << 40, 0}), "padded");
  REQUIRE(g.status().ok());
  Session s(g);
  const FeedMap feed = {{"x", Tensor::Zeros(DType::kFloat32, {2, 3})}};
  auto r = s.Run(feed, std::vector<Output>{padded});
  REQUIRE(!r.ok());
  CHECK(r.status().code() == Code::kResourceExhausted);
  CHECK(Has(r.status(), "Pad"));
  CHECK(Has(r.status(), "allocation limit"));
  // The session still works.
  auto ok = s.Run(feed, std::vector<Output>{x});
  REQUIRE(ok.ok());
}

TEST_CASE("Paddings whose sum overflows int64 are refused naming the op", "[actors]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  const int64_t big = std::numeric_limits<int64_t>::max() - 1;
  ops::Pad(g, x, {big, big});
  REQUIRE(!g.status().ok());
  CHECK(Has(g.status(), "overflows int64"));
  // Unknown dims at graph time: the kernel refuses it the same way.
  Graph h;
  auto y = ops::Placeholder(h, DType::kFloat32, PartialShape({-1}), "y");
  auto p = ops::Identity(h, ops::Pad(h, y, {big, big}), "p");
  REQUIRE(h.status().ok());
  Session s(h);
  auto r = s.Run({{"y", Tensor::Zeros(DType::kFloat32, {2})}}, std::vector<Output>{p});
  REQUIRE(!r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(Has(r.status(), "overflows int64"));
}

TEST_CASE("SessionOptions::max_tensor_bytes: a tensor past it fails the step, smaller ones run", "[actors]") {
  SessionOptions o;
  o.max_tensor_bytes = 16 << 20;  // 16 MiB
  auto run = [&](std::vector<int64_t> multiples) {
    Graph g;
    auto x = ops::Placeholder(g, DType::kFloat32, {1, 1024}, "x");
    auto tiled = ops::Identity(g, ops::Tile(g, x, multiples), "tiled");
    REQUIRE(g.status().ok());
    Session s(g, o);
    return s.Run({{"x", Tensor::Zeros(DType::kFloat32, {1, 1024})}}, std::vector<Output>{tiled});
  };
  auto small = run({1024, 1});  // 4 MiB
  REQUIRE(small.ok());
  CHECK(small->at(0).num_elements() == 1024 * 1024);
  auto big = run({8192, 1});  // 32 MiB
  REQUIRE(!big.ok());
  CHECK(big.status().code() == Code::kResourceExhausted);
  CHECK(Has(big.status(), "Tile"));
  CHECK(Has(big.status(), "16777216"));
  // Element counts past 2^63 are refused, not wrapped around.
  auto huge = run({int64_t{1} << 40, int64_t{1} << 40});
  REQUIRE(!huge.ok());
  CHECK(huge.status().code() == Code::kResourceExhausted);
  CHECK(Has(huge.status(), "2^63"));
}

TEST_CASE("A graph file whose Pad attribute was edited to 2^40 loads and fails its step cleanly", "[actors]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2, 3}, "x");
  ops::Identity(g, ops::Pad(g, x, {0, 2, 1, 0}), "padded");
  REQUIRE(g.status().ok());
  // Edit the attribute as a hostile writer would, then load what it wrote.
  Graph edited;
  for (int i = 0; i < g.num_nodes(); ++i) {
    Node n = g.node(i);
    if (n.op == "Pad") n.attrs.Set("paddings", std::vector<int64_t>{0, 2, int64_t{1} << 40, 0});
    std::vector<Output> inputs;
    for (const Output& in : n.inputs) inputs.push_back(Output(&edited, in.node, in.index));
    edited.AddNode(n.op, inputs, n.attrs, n.name);
  }
  REQUIRE(edited.status().ok());
  auto bytes = GraphToBytes(edited);
  REQUIRE(bytes.ok());
  Graph loaded;
  REQUIRE(GraphFromBytes(*bytes, &loaded, "edited.sfg").ok());
  Session s(loaded);
  auto r = s.Run({{"x", Tensor::Zeros(DType::kFloat32, {2, 3})}}, std::vector<std::string>{"padded"});
  REQUIRE(!r.ok());
  CHECK(r.status().code() == Code::kResourceExhausted);
}
