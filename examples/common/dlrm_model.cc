// DLRM's graph (examples/common/dlrm_model.h).
#include "examples/common/dlrm_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/criteo_format.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"

namespace sf::examples {

namespace {

struct Layer {
  Output w, b;
};

// The device of the n-th variable or table shard: task n % tasks ("" without tasks).
std::string VariableDevice(const DlrmOptions& o, int64_t n) {
  return o.tasks > 0 ? "/job:worker/task:" + std::to_string(n % o.tasks) : "";
}

// A fully connected layer in -> out: Glorot-uniform weights, zero bias;
// both on `device` (its variables escape the tower's scope).
Layer MakeLayer(Graph& g, const std::string& name, int64_t in, int64_t out, uint64_t seed, const std::string& device) {
  auto on = g.DeviceScope(device);
  const double a = std::sqrt(6.0 / static_cast<double>(in + out));
  return {ops::Variable(g, name + "/w", ops::RandomUniform(g, {in, out}, -a, a, static_cast<int64_t>(seed))),
          ops::Variable(g, name + "/b", ops::Zeros(g, DType::kFloat32, {out}))};
}

// x through layers, ReLU after each but (when last_linear) the last.
Output Mlp(Graph& g, Output x, const std::vector<Layer>& layers, bool last_linear) {
  for (size_t i = 0; i < layers.size(); ++i) {
    const bool relu = !(last_linear && i + 1 == layers.size());
    x = ops::FusedMatMul(g, x, layers[i].w, layers[i].b, relu ? "relu" : "none");
  }
  return x;
}

}  // namespace

Status ValidateDlrmOptions(const DlrmOptions& o) {
  if (o.bottom.empty() || o.top.empty()) return InvalidArgument("DLRM: the bottom and top MLPs need a layer each");
  for (int64_t u : o.bottom)
    if (u < 1) return InvalidArgument("DLRM: a bottom layer has " + std::to_string(u) + " units");
  for (int64_t u : o.top)
    if (u < 1) return InvalidArgument("DLRM: a top layer has " + std::to_string(u) + " units");
  if (o.top.back() != 1) return InvalidArgument("DLRM: the top MLP must end in 1 unit (the logit)");
  if (o.shards < 1) return InvalidArgument("DLRM: shards must be at least 1, got " + std::to_string(o.shards));
  if (o.min_count < 0 || o.ttl_steps < 0 || o.max_rows < 0)
    return InvalidArgument("DLRM: min_count, ttl_steps and max_rows must be >= 0");
  if (!(o.table_lr > 0) || !(o.mlp_lr > 0)) return InvalidArgument("DLRM: learning rates must be positive");
  if (o.tasks < 0) return InvalidArgument("DLRM: tasks must be >= 0, got " + std::to_string(o.tasks));
  if (o.mlp_optimizer != "adam" && o.mlp_optimizer != "sgd")
    return InvalidArgument("DLRM: the MLP optimizer must be adam or sgd, got '" + o.mlp_optimizer + "'");
  return Status::OK();
}

Status BuildDlrm(Graph& g, const DlrmOptions& o, DlrmModel* m) {
  SF_RETURN_IF_ERROR(ValidateDlrmOptions(o));
  // Only the dense computation is put on the tower: ops that take a
  // variable's handle (lookups, updates, initialisers) go where it lives.
  const int64_t dim = o.bottom.back();
  Output dense, categorical, label;
  {
    auto tower = g.DeviceScope(o.tower_device);
    dense = ops::Placeholder(g, DType::kFloat32, {-1, kCriteoDense}, m->dense);
    categorical = ops::Placeholder(g, DType::kInt64, {-1, kCriteoCategorical}, m->categorical);
    label = ops::Placeholder(g, DType::kFloat32, {-1}, m->label);
  }

  HashEmbeddingTableOptions h;
  h.num_shards = o.shards;
  h.seed = static_cast<int64_t>(o.seed * 64 + 1);
  h.min_count = o.min_count;
  h.ttl_steps = o.ttl_steps;
  h.max_rows = o.max_rows;
  // DLRM draws rows from U(-1/sqrt(rows), 1/sqrt(rows)); hashed tables have
  // no row count, and a small scale keeps the first dot products near 0.
  h.scale = 0.05;
  EmbeddingTable table = NewHashEmbeddingTable(g, "emb", dim, h);
  SF_RETURN_IF_ERROR(g.status());
  for (size_t s = 0; s < table.shards.size(); ++s) g.mutable_node(table.shards[s].node).device = VariableDevice(o, s);

  std::vector<Layer> bottom, top;
  int64_t in = kCriteoDense;
  uint64_t seed = o.seed * 64 + 8;
  for (size_t i = 0; i < o.bottom.size(); ++i, ++seed) {
    bottom.push_back(MakeLayer(g, "bottom/" + std::to_string(i), in, o.bottom[i], seed, VariableDevice(o, seed)));
    in = o.bottom[i];
  }
  in = dim + (kCriteoCategorical + 1) * kCriteoCategorical / 2;
  for (size_t i = 0; i < o.top.size(); ++i, ++seed) {
    top.push_back(MakeLayer(g, "top/" + std::to_string(i), in, o.top[i], seed, VariableDevice(o, seed)));
    in = o.top[i];
  }
  auto logits_of = [&](const EmbeddingTable& t) {
    Output emb = ops::EmbeddingLookup(g, t, categorical, "none");                // [n, 26, dim]
    auto tower = g.DeviceScope(o.tower_device);
    Output v0 = Mlp(g, dense, bottom, /*last_linear=*/false);                     // [n, dim]
    return ops::Reshape(g, Mlp(g, ops::DotInteraction(g, v0, emb), top, true), std::vector<int64_t>{-1});
  };
  Output logits = logits_of(table);
  Output loss, eval_logits;
  {
    auto tower = g.DeviceScope(o.tower_device);
    // Logistic loss, stable form: softplus(z) - y z.
    loss = ops::Identity(g, ops::Mean(g, ops::Softplus(g, logits) - label * logits), "loss");
  }
  // Evaluation reads the table through a view: no row made, no sighting counted.
  Output view_logits = logits_of(ReadOnlyView(table));
  {
    auto tower = g.DeviceScope(o.tower_device);
    eval_logits = ops::Identity(g, view_logits, "eval_logits");
  }
  for (const Output& x : ops::HashEmbeddingShardMetrics(g, table)) m->metrics.push_back(x.name());
  SF_RETURN_IF_ERROR(g.status());

  std::vector<Output> vars;
  for (const auto* layers : {&bottom, &top})
    for (const Layer& l : *layers) {
      vars.push_back(l.w);
      vars.push_back(l.b);
    }
  for (const Output& shard : table.shards) vars.push_back(shard);
  AdagradOptimizer adagrad(o.table_lr);
  Result<Operation> train = [&]() -> Result<Operation> {
    if (o.mlp_optimizer == "sgd") {
      GradientDescentOptimizer sgd(o.mlp_lr);
      sgd.SetSparseOptimizer(&adagrad);
      return sgd.Minimize(g, loss, vars);
    }
    AdamOptimizer adam(o.mlp_lr);
    adam.SetSparseOptimizer(&adagrad);
    return adam.Minimize(g, loss, vars);
  }();
  if (!train.ok()) return train.status();
  const Operation init = ops::GlobalVariablesInitializer(g);
  SF_RETURN_IF_ERROR(g.status());
  m->loss = loss.name();
  m->eval_logits = eval_logits.name();
  m->train = train->name();
  m->init = init.name();
  return Status::OK();
}

std::vector<DlrmGemm> DlrmStepGemms(const DlrmOptions& o, int64_t batch) {
  std::vector<DlrmGemm> v;
  auto mlp = [&](int64_t in, const std::vector<int64_t>& units, bool first_has_dx) {
    for (size_t i = 0; i < units.size(); ++i) {
      v.push_back({batch, units[i], in, false, false});  // forward x w
      v.push_back({in, units[i], batch, true, false});   // dw = x^T dz
      if (i > 0 || first_has_dx) v.push_back({batch, in, units[i], false, true});  // dx = dz w^T
      in = units[i];
    }
  };
  mlp(kCriteoDense, o.bottom, false);
  mlp(o.bottom.back() + (kCriteoCategorical + 1) * kCriteoCategorical / 2, o.top, true);
  return v;
}

Result<HashEmbeddingMetrics> SumDlrmMetrics(const std::vector<Tensor>& fetched) {
  HashEmbeddingMetrics sum;
  for (const Tensor& t : fetched) {
    SF_ASSIGN_OR_RETURN(HashEmbeddingMetrics x, HashEmbeddingMetricsOf(t));
    sum.rows += x.rows;
    sum.capacity += x.capacity;
    sum.admitted += x.admitted;
    sum.rejected += x.rejected;
    sum.evicted += x.evicted;
    sum.bytes += x.bytes;
    sum.step = std::max(sum.step, x.step);
    sum.skipped += x.skipped;
  }
  return sum;
}

}  // namespace sf::examples
