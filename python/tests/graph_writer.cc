// Writes a small graph saved by C++ (sf::SaveGraph), for the Python tests
// that load it: y = relu(x @ w + b) with constant w [3,2] and b [2], and a
// variable v (initialised to w) with z = sum(x @ v).
// Usage: sf_pytest_graph_writer OUT.capnp; exit code 1 naming the error.
#include <cstdio>

#include "shardflow/graph.h"
#include "shardflow/graph_io.h"
#include "shardflow/ops.h"

int main(int argc, char** argv) {
  using namespace sf;
  if (argc != 2) {
    std::fprintf(stderr, "usage: sf_pytest_graph_writer OUT.capnp\n");
    return 2;
  }
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 3}, "x");
  auto w = ops::Const(g, std::vector<float>{1, -1, 2, 0.5f, -3, 1}, {3, 2});
  auto b = ops::Const(g, std::vector<float>{0.25f, -0.5f}, {2});
  ops::Identity(g, ops::Relu(g, ops::MatMul(g, x, w) + b), "y");
  auto v = ops::Variable(g, "v", w);
  ops::Identity(g, ops::Sum(g, ops::MatMul(g, x, v)), "z");
  ops::GlobalVariablesInitializer(g);
  Status s = g.status().ok() ? SaveGraph(g, argv[1]) : g.status();
  if (!s.ok()) {
    std::fprintf(stderr, "sf_pytest_graph_writer: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
