// Training ops: one op per optimizer update (kernels/optimizer_spec.h lists
// them). Inputs are the resource handles of the variable and its slots, then
// the scalar hyperparameters, then the gradient; the kernel sends one
// VariableService::Apply so the update runs atomically where the variable
// lives. They have no outputs: a NoOp groups them.
#include "graph/op_registry.h"
#include "kernels/optimizer_spec.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

ShapeFn TrainingShape(int handles, int scalars) {
  return [handles, scalars](InferenceContext& c) -> Status {
    for (int i = 0; i < handles; ++i) {
      if (c.input_dtype(i) != DType::kResource)
        return c.Error("input " + std::to_string(i) + " must be a variable handle, got " +
                       DTypeName(c.input_dtype(i)));
    }
    const int grad = handles + scalars;
    const DType gt = c.input_dtype(grad);
    if (gt != DType::kFloat32 && gt != DType::kFloat64)
      return c.Error(std::string("the gradient must be float32 or float64, got ") + DTypeName(gt));
    for (int i = handles; i < grad; ++i) {
      if (c.input_dtype(i) != gt)
        return c.Error("hyperparameter input " + std::to_string(i) + " is " +
                       DTypeName(c.input_dtype(i)) + " but the gradient is " + DTypeName(gt));
      const PartialShape& s = c.input_shape(i);
      if (s.rank_known() && s.fully_defined() && NumElements(s.dims()) != 1)
        return c.Error("hyperparameter input " + std::to_string(i) + " must be a scalar, got " +
                       s.ToString());
    }
    const Node& var = c.graph().node(c.node().inputs[0].node);
    if (var.op == "VarHandle") {
      auto dt = var.attrs.Get<DType>("dtype");
      if (dt.ok() && *dt != gt)
        return c.Error("variable '" + var.name + "' is " + DTypeName(*dt) + " but the gradient is " +
                       DTypeName(gt));
      auto shape = var.attrs.GetOr<PartialShape>("shape", PartialShape());
      if (shape.ok() && !shape->CompatibleWith(c.input_shape(grad)))
        return c.Error("variable '" + var.name + "' has shape " + shape->ToString() +
                       " but the gradient has shape " + c.input_shape(grad).ToString());
    }
    return Status::OK();
  };
}

}  // namespace

Status RegisterTrainingOps(OpRegistry& reg) {
  for (const OptimizerSpec& op : kOptimizers) {
    const int n = op.handles + op.scalars + 1;
    OpBuilder b(op.apply_op);
    if (op.kind == OptimizerKind::kMomentum) b.Attr("use_nesterov", false);
    SF_RETURN_IF_ERROR(reg.Register(b.Inputs(n).Stateful().Repeatable()
        .Shape(TrainingShape(op.handles, op.scalars)).NotDifferentiable()
        .Summary(op.summary).Build()));
  }
  return Status::OK();
}

}  // namespace sf
