// The optimizer updates, TensorFlow's formulas (tf.raw_ops.Apply*), written as
// whole-tensor Eigen expressions on the variable and its slots in place.
#include "kernels/optimizer_math.h"

#include <cmath>

namespace sf {
namespace {

struct Spec {
  const char* name;
  int vars;     // the variable and its slots
  int scalars;  // hyperparameters
  int scalar_slots;  // trailing slots that are scalars (Adam's beta powers)
};

constexpr Spec kSpecs[] = {
    {"GradientDescent", 1, 1, 0}, {"Momentum", 2, 2, 0}, {"Adagrad", 2, 1, 0},
    {"Adam", 5, 4, 2},            {"RMSProp", 3, 4, 0},
};

template <typename T>
void Update(const ApplyRequest& req, const std::vector<Tensor*>& v) {
  auto var = v[0]->flat<T>();
  auto g = req.grad.flat<T>();
  auto s = [&](int i) { return req.scalars[i].scalar_as<T>(); };
  const std::string& o = req.optimizer;
  if (o == "GradientDescent") {
    var -= g * s(0);
  } else if (o == "Momentum") {
    auto accum = v[1]->flat<T>();
    const T lr = s(0), momentum = s(1);
    accum = accum * momentum + g;
    if (req.use_nesterov) var -= g * lr + accum * (momentum * lr);
    else var -= accum * lr;
  } else if (o == "Adagrad") {
    auto accum = v[1]->flat<T>();
    accum += g.square();
    var -= g * s(0) / accum.sqrt();
  } else if (o == "Adam") {
    auto m = v[1]->flat<T>();
    auto vv = v[2]->flat<T>();
    T* beta1_power = v[3]->data<T>();
    T* beta2_power = v[4]->data<T>();
    const T lr = s(0), beta1 = s(1), beta2 = s(2), eps = s(3);
    const T alpha = lr * std::sqrt(T(1) - *beta2_power) / (T(1) - *beta1_power);
    m += (g - m) * (T(1) - beta1);
    vv += (g.square() - vv) * (T(1) - beta2);
    var -= (m * alpha) / (vv.sqrt() + eps);
    *beta1_power *= beta1;
    *beta2_power *= beta2;
  } else if (o == "RMSProp") {
    auto ms = v[1]->flat<T>();
    auto mom = v[2]->flat<T>();
    const T lr = s(0), rho = s(1), momentum = s(2), eps = s(3);
    ms += (g.square() - ms) * (T(1) - rho);
    mom = mom * momentum + g * lr / (ms + eps).sqrt();
    var -= mom;
  }
}

}  // namespace

Status ApplyOptimizerUpdate(const ApplyRequest& req, const std::vector<Tensor*>& vars) {
  const Spec* spec = nullptr;
  for (const Spec& s : kSpecs)
    if (req.optimizer == s.name) spec = &s;
  const std::string who = "optimizer " + req.optimizer;
  if (!spec) return InvalidArgument("unknown " + who);
  if (static_cast<int>(vars.size()) != spec->vars)
    return InvalidArgument(who + " needs " + std::to_string(spec->vars) +
                           " variables (the variable and its slots), got " +
                           std::to_string(vars.size()));
  if (static_cast<int>(req.scalars.size()) != spec->scalars)
    return InvalidArgument(who + " needs " + std::to_string(spec->scalars) +
                           " hyperparameters, got " + std::to_string(req.scalars.size()));
  const DType dt = req.grad.dtype();
  if (dt != DType::kFloat32 && dt != DType::kFloat64)
    return InvalidArgument(who + ": the gradient must be float32 or float64, got " +
                           DTypeName(dt));
  const Shape& shape = req.grad.shape();
  for (int i = 0; i < spec->vars; ++i) {
    const Tensor* t = vars[i];
    const std::string what = i == 0 ? std::string("the variable") : "slot " + std::to_string(i);
    if (!t || !t->valid()) return InvalidArgument(who + ": " + what + " has no value");
    if (t->dtype() != dt)
      return InvalidArgument(who + ": " + what + " is " + DTypeName(t->dtype()) +
                             " but the gradient is " + DTypeName(dt));
    const bool scalar_slot = i >= spec->vars - spec->scalar_slots;
    if (scalar_slot ? t->num_elements() != 1 : t->shape() != shape)
      return InvalidArgument(who + ": " + what + " has shape " + ShapeString(t->shape()) +
                             (scalar_slot ? std::string(", expected a scalar")
                                          : " but the gradient has shape " + ShapeString(shape)));
  }
  for (size_t i = 0; i < req.scalars.size(); ++i) {
    const Tensor& t = req.scalars[i];
    if (!t.valid() || t.num_elements() != 1 ||
        (t.dtype() != DType::kFloat32 && t.dtype() != DType::kFloat64))
      return InvalidArgument(who + ": hyperparameter " + std::to_string(i) +
                             " must be a float32 or float64 scalar, got " + t.DebugString(0));
  }
  if (dt == DType::kFloat32) Update<float>(req, vars);
  else Update<double>(req, vars);
  return Status::OK();
}

}  // namespace sf
