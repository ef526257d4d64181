// Trains one step of a tiny model through the installed public headers and
// libraries; exit code 0 when the loss went down, 1 naming the error.
#include <cstdio>

#include "shardflow/graph.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"

int main() {
  using namespace sf;
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 2}, "x");
  auto w = ops::Variable(g, "w", ops::Ones(g, DType::kFloat32, {2, 1}));
  auto loss = ops::Mean(g, ops::Square(g, ops::MatMul(g, x, w)));
  auto train = GradientDescentOptimizer(0.01).Minimize(g, loss);
  auto init = ops::GlobalVariablesInitializer(g);
  if (!g.status().ok() || !train.ok()) {
    std::fprintf(stderr, "consumer: %s\n", g.status().ToString().c_str());
    return 1;
  }
  Session s(g);
  Tensor xb = Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2});
  auto r0 = s.Run({}, {}, {init});
  auto before = s.Run({{x, xb}}, {loss}, {*train});
  auto after = s.Run({{x, xb}}, {loss});
  if (!r0.ok() || !before.ok() || !after.ok()) {
    std::fprintf(stderr, "consumer: a step failed\n");
    return 1;
  }
  const float b = (*before)[0].scalar_as<float>(), a = (*after)[0].scalar_as<float>();
  std::printf("loss %g -> %g\n", b, a);
  return a < b ? 0 : 1;
}
