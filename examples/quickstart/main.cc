// The README's first program, kept compiling and running by tests/examples.
#include <cstdio>

#include "shardflow/graph.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"
using namespace sf;

int main() {
  Graph g;                                              // a graph over the standard ops
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 784}, "x");
  auto labels = ops::Placeholder(g, DType::kInt32, {-1}, "labels");
  auto w1 = ops::Variable(g, "w1", ops::TruncatedNormal(g, {784, 256}, 0.05, /*seed=*/1));
  auto b1 = ops::Variable(g, "b1", ops::Zeros(g, DType::kFloat32, {256}));
  auto w2 = ops::Variable(g, "w2", ops::TruncatedNormal(g, {256, 10}, 0.05, /*seed=*/2));
  auto h = ops::Relu(g, ops::MatMul(g, x, w1) + b1);   // reads like the math
  auto logits = ops::MatMul(g, h, w2);
  auto loss = ops::Mean(g, ops::SparseSoftmaxCrossEntropyWithLogits(g, logits, labels));
  auto train = MomentumOptimizer(0.05, 0.9).Minimize(g, loss);  // autodiff + update ops
  auto init = ops::GlobalVariablesInitializer(g);
  if (!g.status().ok() || !train.ok()) return 1;       // shape errors name node, op and shapes

  Session session(g);                                   // in-process actor runtime
  session.Run({}, {}, {init});
  Tensor xb = Tensor::Zeros(DType::kFloat32, {128, 784}), yb = Tensor::Zeros(DType::kInt32, {128});
  auto r = session.Run({{x, xb}, {labels, yb}}, {loss}, {*train});
  if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().ToString().c_str()), 1;  // errors are values
  std::printf("{\"loss\": %g}\n", (*r)[0].scalar_as<float>());  // one JSON line: ln 10 on zeros
}
