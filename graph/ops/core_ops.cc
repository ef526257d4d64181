// Core ops: Const, Placeholder, Identity, NoOp, StopGradient, Assert.
#include "graph/op_registry.h"
#include "shardflow/ops.h"

namespace sf {

Status RegisterCoreOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Const").RequiredAttr<Tensor>("value").Inputs(0)
      .Shape([](InferenceContext& c) -> Status {
        SF_ASSIGN_OR_RETURN(Tensor v, c.Attr<Tensor>("value"));
        if (!v.valid()) return c.Error("Const needs a valid 'value' tensor");
        c.set_output(0, v.dtype(), PartialShape(v.shape()));
        return Status::OK();
      })
      .NotDifferentiable().Summary("A constant tensor (attr value).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Placeholder")
      .RequiredAttr<DType>("dtype").Attr("shape", PartialShape())
      .Inputs(0)
      .Shape([](InferenceContext& c) -> Status {
        SF_ASSIGN_OR_RETURN(DType t, c.Attr<DType>("dtype"));
        SF_ASSIGN_OR_RETURN(PartialShape s, c.AttrOr<PartialShape>("shape", PartialShape()));
        c.set_output(0, t, s);
        return Status::OK();
      })
      .NotDifferentiable().Summary("A value fed at run time (attrs dtype, shape).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Identity").Inputs(1).Shape(UnchangedShape)
      .Grad([](Graph&, const Node&, const std::vector<Output>& dy) { return std::vector<Output>{dy[0]}; })
      .Summary("Returns its input.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("NoOp").Inputs(0)
      .Shape([](InferenceContext&) { return Status::OK(); })
      .NotDifferentiable().Summary("Does nothing; groups control inputs.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("StopGradient").Inputs(1).Shape(UnchangedShape)
      .NotDifferentiable().Summary("Identity whose gradient is zero.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Assert").Inputs(1, -1).Stateful().Repeatable()
      .Attr("template", "").Attr("summarize", int64_t{3})
      .Shape([](InferenceContext& c) -> Status {
        if (c.input_dtype(0) != DType::kBool)
          return c.Error(std::string("Assert's condition must be bool, got ") + DTypeName(c.input_dtype(0)));
        const PartialShape& s = c.input_shape(0);
        if (s.fully_defined() && NumElements(s.dims()) != 1)
          return c.Error("Assert's condition must be a scalar, got shape " + s.ToString());
        SF_RETURN_IF_ERROR(c.AttrOr<std::string>("template", "").status());
        return c.AttrOr<int64_t>("summarize", 3).status();
      })
      .NotDifferentiable()
      .Summary("Fails the step (InvalidArgument \"assertion failed: ...\") when input 0, a bool scalar, is false; "
               "attr template's {} take the other inputs' first summarize values (negative: all).")
      .Build()));
  return Status::OK();
}

namespace ops {

Output Const(Graph& g, Tensor value, const std::string& name) {
  AttrMap a;
  a.Set("value", std::move(value));
  return g.Add1("Const", {}, std::move(a), name);
}
Output Const(Graph& g, float v) { return Const(g, Tensor::Scalar<float>(v)); }
Output Const(Graph& g, double v) { return Const(g, Tensor::Scalar<double>(v)); }
Output Const(Graph& g, int32_t v) { return Const(g, Tensor::Scalar<int32_t>(v)); }
Output Const(Graph& g, int64_t v) { return Const(g, Tensor::Scalar<int64_t>(v)); }
Output Const(Graph& g, const std::vector<float>& v, const Shape& shape) {
  if (NumElements(shape) != static_cast<int64_t>(v.size())) {
    g.RecordError(InvalidArgument("Const: " + std::to_string(v.size()) +
                                  " values do not fill shape " + ShapeString(shape)));
    return Output();
  }
  return Const(g, Tensor::FromVector(v, shape));
}
Output Const(Graph& g, const std::vector<int32_t>& v) { return Const(g, Tensor::FromVector(v)); }

Output ScalarLike(Graph& g, Output like, double v) {
  if (!like.valid()) return Output();
  switch (like.dtype()) {
    case DType::kFloat64: return Const(g, Tensor::Scalar<double>(v));
    case DType::kInt32: return Const(g, Tensor::Scalar<int32_t>(static_cast<int32_t>(v)));
    case DType::kInt64: return Const(g, Tensor::Scalar<int64_t>(static_cast<int64_t>(v)));
    case DType::kInt8: return Const(g, Tensor::Scalar<int8_t>(static_cast<int8_t>(v)));
    case DType::kInt16: return Const(g, Tensor::Scalar<int16_t>(static_cast<int16_t>(v)));
    case DType::kUInt8: return Const(g, Tensor::Scalar<uint8_t>(static_cast<uint8_t>(v)));
    default: return Const(g, Tensor::Scalar<float>(static_cast<float>(v)));
  }
}

Output Placeholder(Graph& g, DType dtype, PartialShape shape, const std::string& name) {
  AttrMap a;
  a.Set("dtype", dtype);
  a.Set("shape", std::move(shape));
  return g.Add1("Placeholder", {}, std::move(a), name);
}

Output Identity(Graph& g, Output x, const std::string& name) {
  return g.Add1("Identity", {x}, {}, name);
}

Operation NoOp(Graph& g, const ControlDeps& control_inputs, const std::string& name) {
  auto deps = control_inputs.NodesIn(g);
  if (!deps.ok()) {
    g.RecordError(deps.status().WithPrefix("NoOp '" + name + "'"));
    return Operation(&g, -1);
  }
  int id = g.AddNode("NoOp", {}, {}, name);
  if (id < 0) return Operation(&g, -1);
  for (int c : *deps) {
    Status s = g.AddControlInput(id, c);
    if (!s.ok()) {
      g.RecordError(s);
      return Operation(&g, -1);
    }
  }
  return Operation(&g, id);
}

Output StopGradient(Graph& g, Output x) { return g.Add1("StopGradient", {x}); }

}  // namespace ops
}  // namespace sf
