#include "tests/support/gradient_checker.h"

#include <cmath>
#include <random>
#include <sstream>

#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"

namespace sf {
namespace testing {

Status RunGradCheck(const GradCheck& check, uint64_t seed) {
  const std::string what = check.op + " (" + check.name + ")";
  std::mt19937_64 rng(seed);
  Graph g;
  std::vector<Output> xs;
  std::vector<Tensor> values;
  for (size_t i = 0; i < check.input_shapes.size(); ++i) {
    xs.push_back(ops::Placeholder(g, DType::kFloat64, PartialShape(check.input_shapes[i]),
                                  "x" + std::to_string(i)));
    Tensor v(DType::kFloat64, check.input_shapes[i]);
    std::uniform_real_distribution<double> u(check.lo, check.hi);
    for (int64_t k = 0; k < v.num_elements(); ++k) v.data<double>()[k] = u(rng);
    values.push_back(v);
  }
  Output y = check.build(g, xs);
  SF_RETURN_IF_ERROR(g.status().WithPrefix(what));
  if (!y.valid()) return Internal(what + ": build returned no output");
  if (y.dtype() != DType::kFloat64) return InvalidArgument(what + ": y must be float64");

  auto feeds_of = [&](const std::vector<Tensor>& vals) {
    Feeds f;
    for (size_t i = 0; i < xs.size(); ++i) f.push_back({xs[i], vals[i]});
    return f;
  };
  auto y_val = Eval(g, y, feeds_of(values));
  SF_RETURN_IF_ERROR(y_val.status().WithPrefix(what + ": forward"));
  // loss = sum(y * w) with random w, so every element of dy/dx matters.
  Tensor w(DType::kFloat64, y_val->shape());
  std::uniform_real_distribution<double> uw(0.5, 1.5);
  for (int64_t k = 0; k < w.num_elements(); ++k) w.data<double>()[k] = uw(rng);
  Output loss = ops::Sum(g, ops::Mul(g, y, ops::Const(g, w)));
  auto grads = Gradients(g, {loss}, xs);
  SF_RETURN_IF_ERROR(grads.status().WithPrefix(what + ": Gradients"));
  auto symbolic = EvalGraph(g, feeds_of(values), *grads);
  SF_RETURN_IF_ERROR(symbolic.status().WithPrefix(what + ": backward"));

  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& sym = (*symbolic)[i];
    if (sym.shape() != values[i].shape())
      return InvalidArgument(what + ": gradient of input " + std::to_string(i) + " has shape " +
                             ShapeString(sym.shape()) + ", input has " + ShapeString(values[i].shape()));
    for (int64_t k = 0; k < values[i].num_elements(); ++k) {
      const double x0 = values[i].data<double>()[k];
      const double h = 1e-5 * std::max(1.0, std::abs(x0));
      std::vector<Tensor> plus = values, minus = values;
      plus[i] = values[i].Copy();
      minus[i] = values[i].Copy();
      plus[i].data<double>()[k] = x0 + h;
      minus[i].data<double>()[k] = x0 - h;
      auto fp = Eval(g, loss, feeds_of(plus));
      auto fm = Eval(g, loss, feeds_of(minus));
      SF_RETURN_IF_ERROR(fp.status());
      SF_RETURN_IF_ERROR(fm.status());
      const double numeric = (fp->data<double>()[0] - fm->data<double>()[0]) / (2 * h);
      const double s = sym.data<double>()[k];
      const double err = std::abs(s - numeric) / std::max(1.0, std::abs(numeric));
      if (!(err <= check.tolerance)) {
        std::ostringstream os;
        os << what << ": d loss / d input " << i << " element " << k << ": symbolic " << s
           << " vs numeric " << numeric << " (relative error " << err << ")";
        return InvalidArgument(os.str());
      }
    }
  }
  return Status::OK();
}

void AddCoreGradChecks(GradCheckTable& t) {
  t.push_back({"Identity", "identity", {{2, 3}},
               [](Graph& g, const std::vector<Output>& x) { return ops::Identity(g, x[0]); }});
}

}  // namespace testing
}  // namespace sf
