// A program's own op and kernel on a two-node cluster: nodes decode the
// partitions they are sent with the op registry they were started with and
// build them from their kernel registry.
#include <catch2/catch.hpp>

#include "shardflow/cluster.h"
#include "shardflow/gradients.h"
#include "tests/support/cube_op.h"
#include "tests/support/in_process_nodes.h"

using namespace sf;

TEST_CASE("Cluster: a program's own op and kernel run on two in-process nodes", "[cluster]") {
  OpRegistry ops;
  REQUIRE(testing::RegisterCubeOps(ops).ok());
  KernelRegistry kernels;
  REQUIRE(testing::RegisterCubeKernels(kernels).ok());

  NodeOptions no;
  no.ops = &ops;
  no.kernels = &kernels;
  auto nodes = testing::StartInProcessNodes(no);
  REQUIRE(nodes.ok());

  Graph g(ops);
  Output x, y, dx;
  {
    auto s = g.DeviceScope("/job:worker/task:0");
    x = ops::Placeholder(g, DType::kFloat32, {3}, "x");
  }
  {
    auto s = g.DeviceScope("/job:worker/task:1");
    y = g.Add1("Cube", {x}, {}, "y");
    auto grads = Gradients(g, {ops::Sum(g, y)}, {x});
    REQUIRE(grads.ok());
    dx = (*grads)[0];
  }
  REQUIRE(g.status().ok());
  auto s = ClusterSession::Connect(g, nodes->SessionOptions());
  REQUIRE(s.ok());
  REQUIRE((*s)->tasks().size() == 2);
  FeedMap feeds = {{"x", Tensor::FromVector(std::vector<float>{2, -1, 0.5f}, {3})}};
  auto out = (*s)->Run(feeds, {y.name(), dx.name()});
  REQUIRE(out.ok());
  CHECK((*out)[0].ToVector<float>() == std::vector<float>{8, -1, 0.125f});
  CHECK((*out)[1].ToVector<float>() == std::vector<float>{12, 3, 0.75f});

  // Nodes started without them cannot read a partition using Cube: the
  // error names the op.
  auto plain = testing::StartInProcessNodes();
  REQUIRE(plain.ok());
  auto ls = ClusterSession::Connect(g, plain->SessionOptions());
  Status err = ls.ok() ? (*ls)->Run(feeds, {y.name()}).status() : ls.status();
  REQUIRE(!err.ok());
  INFO(err.ToString());
  CHECK(err.ToString().find("Cube") != std::string::npos);
}
