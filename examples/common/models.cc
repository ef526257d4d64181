#include "examples/common/models.h"

#include <cmath>
#include <functional>
#include <optional>

#include "shardflow/ops.h"
#include "shardflow/optimizers.h"

namespace sf::examples {

namespace {

// Makes the model's variables where ModelOptions asks (see variable_tasks,
// versioned_reads); the default is a plain ops::Variable.
class Params {
 public:
  explicit Params(const ModelOptions& o) : o_(o) {}
  // Variable `name` initialised by init(); the value the model computes with.
  Output Make(Graph& g, const std::string& name, const std::function<Output()>& init) {
    // A variable escapes the tower's device scope: "" = no request.
    std::string device;
    if (o_.variable_tasks > 0) device = "/job:worker/task:" + std::to_string(next_++ % o_.variable_tasks);
    auto d = g.DeviceScope(device);
    Output v = ops::Variable(g, name, init());
    if (!o_.versioned_reads) return v;
    VersionedRead r = ReadVariableWithVersion(g, v);
    o_.versioned_reads->push_back(r);
    return r.value;
  }

 private:
  const ModelOptions& o_;
  int next_ = 0;
};

// He-initialised weights and zero biases.
Output Dense(Graph& g, Params& p, Output in, int64_t fan_in, int64_t fan_out, const std::string& name,
             int64_t seed, bool relu) {
  auto scope = g.NameScope(name);
  auto w = p.Make(g, name + "/w", [&] {
    return ops::TruncatedNormal(g, {fan_in, fan_out}, std::sqrt(2.0 / fan_in), seed);
  });
  auto b = p.Make(g, name + "/b", [&] { return ops::Zeros(g, DType::kFloat32, {fan_out}); });
  // One kernel for product, bias and activation (same values and gradients).
  return ops::FusedMatMul(g, in, w, b, relu ? "relu" : "none");
}

Output Conv(Graph& g, Params& p, Output in, int64_t k, int64_t cin, int64_t cout, const std::string& name,
            int64_t seed) {
  auto scope = g.NameScope(name);
  auto w = p.Make(g, name + "/w", [&] {
    return ops::TruncatedNormal(g, {k, k, cin, cout}, std::sqrt(2.0 / (k * k * cin)), seed);
  });
  auto b = p.Make(g, name + "/b", [&] { return ops::Zeros(g, DType::kFloat32, {cout}); });
  // One kernel for convolution, bias and activation (same values and gradients).
  return ops::MaxPool(g, ops::FusedConv2D(g, in, w, b, "relu"));
}

}  // namespace

double LearningRateAt(double base, int64_t step, int64_t total) {
  if (total <= 0) return base;
  return base * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(step) / static_cast<double>(total)));
}

Status BuildClassifier(Graph& g, const ModelOptions& o, ClassifierModel* m) {
  Params p(o);
  std::optional<Graph::Scope> tower;
  if (!o.tower_device.empty()) tower.emplace(g.DeviceScope(o.tower_device));
  m->x = ops::Placeholder(g, DType::kFloat32, {-1, 784}, "x");
  m->labels = ops::Placeholder(g, DType::kInt32, {-1}, "labels");
  if (o.model == "mlp") {
    auto h1 = Dense(g, p, m->x, 784, 512, "fc1", o.seed, true);
    auto h2 = Dense(g, p, h1, 512, 256, "fc2", o.seed + 1, true);
    m->logits = Dense(g, p, h2, 256, 10, "fc3", o.seed + 2, false);
  } else if (o.model == "cnn") {
    auto img = ops::Reshape(g, m->x, std::vector<int64_t>{-1, 28, 28, 1});
    auto c1 = Conv(g, p, img, 5, 1, 32, "conv1", o.seed);       // [-1,14,14,32]
    auto c2 = Conv(g, p, c1, 5, 32, 64, "conv2", o.seed + 1);    // [-1,7,7,64]
    auto flat = ops::Reshape(g, c2, std::vector<int64_t>{-1, 7 * 7 * 64});
    auto fc = Dense(g, p, flat, 7 * 7 * 64, 1024, "fc1", o.seed + 2, true);
    m->logits = Dense(g, p, fc, 1024, 10, "fc2", o.seed + 3, false);
  } else {
    return InvalidArgument("unknown model '" + o.model + "' (expected mlp or cnn)");
  }
  m->loss = ops::Mean(g, ops::SparseSoftmaxCrossEntropyWithLogits(g, m->logits, m->labels));
  auto predicted = ops::ArgMax(g, m->logits, 1);
  auto correct = ops::Equal(g, predicted, ops::Cast(g, m->labels, DType::kInt64));
  m->accuracy = ops::Mean(g, ops::Cast(g, correct, DType::kFloat32));
  SF_RETURN_IF_ERROR(g.status());
  m->lr = ops::Placeholder(g, DType::kFloat32, PartialShape(Shape{}), "lr");
  if (o.build_optimizer) {
    MomentumOptimizer opt(o.learning_rate, o.momentum);
    opt.SetLearningRate(m->lr);
    SF_ASSIGN_OR_RETURN(m->train, opt.Minimize(g, m->loss));
  }
  m->init = ops::GlobalVariablesInitializer(g);
  return g.status();
}

}  // namespace sf::examples
