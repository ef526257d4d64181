// The sparse test model (tests/support/sparse_model.h).
#include "tests/support/sparse_model.h"

#include <algorithm>
#include <cmath>

#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"

namespace sf::testing {

SparseModel::SparseModel() {
  auto ids = ops::Placeholder(g, DType::kInt64, {8, 3}, "ids");
  auto y = ops::Placeholder(g, DType::kFloat32, {8, 1}, "y");
  EmbeddingTableOptions eo;
  eo.num_shards = 3;
  eo.seed = 7;
  EmbeddingTable table = NewEmbeddingTable(g, "emb", 100, 4, eo);
  auto e = ops::EmbeddingLookup(g, table, ids, "sum");
  auto w = ops::Variable(g, "w", ops::TruncatedNormal(g, {4, 1}, 0.5, 3));
  auto b = ops::Variable(g, "b", ops::Const(g, std::vector<float>{0.0f}, {1}));
  auto d = ops::MatMul(g, e, w) + b - y;
  loss = ops::Mean(g, d * d);
  auto steps = ops::Variable(g, "steps", ops::Const(g, 0.0f));
  auto count = ops::AssignAdd(g, ops::VariableHandle(steps), ops::Const(g, 1.0f));
  auto t = AdagradOptimizer(0.2).Minimize(g, loss);
  REQUIRE(t.ok());
  train = ops::NoOp(g, {*t, Operation(&g, count.node)}, "train_and_count");
  init = ops::GlobalVariablesInitializer(g);
  for (const Output& shard : table.shards) params.push_back(ops::ReadVariable(g, shard, DType::kFloat32));
  params.push_back(w);
  params.push_back(b);
  params.push_back(steps);
  REQUIRE(g.status().ok());
}

FeedMap SparseModel::Batch(int step) const {
  std::vector<int64_t> ids(24);
  std::vector<float> ys(8);
  for (int i = 0; i < 24; ++i) ids[i] = (step * 7 + i * 13 + (i % 3) * 5) % 100;
  for (int i = 0; i < 8; ++i) ys[i] = std::sin(0.3f * (i + 1) + 0.05f * step);
  return {{"ids", Tensor::FromVector(ids, {8, 3})}, {"y", Tensor::FromVector(ys, {8, 1})}};
}

Result<float> Step(SessionInterface& s, const SparseModel& m, int step) {
  auto r = s.Run(m.Batch(step), std::vector<Output>{m.loss}, {m.train});
  if (!r.ok()) return r.status();
  return (*r)[0].ToVector<float>()[0];
}

std::vector<float> Params(SessionInterface& s, const SparseModel& m) {
  auto r = s.Run({}, m.params);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  std::vector<float> out;
  for (const Tensor& t : *r)
    for (float v : t.ToVector<float>()) out.push_back(v);
  return out;
}

std::vector<float> Reference(const SparseModel& m, int n) {
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());
  for (int i = 0; i < n; ++i) REQUIRE(Step(s, m, i).ok());
  return Params(s, m);
}

float EvalLoss(SessionInterface& s, const SparseModel& m, int step) {
  auto r = s.Run(m.Batch(step), std::vector<Output>{m.loss});
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  return (*r)[0].ToVector<float>()[0];
}

void RequireAppliedOnce(SessionInterface& s, const SparseModel& m, int n, int64_t retried, float loose_tol) {
  std::vector<float> got = Params(s, m);
  const std::vector<float> want = Reference(m, n);
  REQUIRE(!got.empty());
  CHECK(got.back() == static_cast<float>(n));  // the step counter: each step's AssignAdd once
  INFO(retried << " steps ran again");
  RequireClose(got, want, retried > 0 ? loose_tol : 1e-5f);
}

void RequireClose(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  REQUIRE(a.size() == b.size());
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  INFO("largest difference " << worst);
  REQUIRE(worst <= tol);
}

}  // namespace sf::testing
