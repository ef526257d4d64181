// State ops: VarHandle, ReadVariable, Assign, AssignAdd, AssignSub,
// ResourceScatterUpdate, and the Variable builders.
//
// A variable is a VarHandle (a resource scalar naming the session's variable)
// plus the ops that read or update it through the VariableService. Builders
// mark nodes with attrs instead of keeping side tables in the Graph:
// "_initializer" on the initializer Assign of ops::Variable and of optimizer
// slots, "trainable" on the VarHandle of ops::Variable.
#include "graph/op_registry.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

// The declared shape of the variable behind `handle` when its producer is a
// VarHandle, else unknown.
PartialShape HandleShape(const Graph& g, const Output& handle) {
  const Node& p = g.node(handle.node);
  if (p.op != "VarHandle") return PartialShape();
  auto s = p.attrs.GetOr<PartialShape>("shape", PartialShape());
  return s.ok() ? *s : PartialShape();
}

Status RequireHandle(InferenceContext& c, int i) {
  if (c.input_dtype(i) != DType::kResource)
    return c.Error("input " + std::to_string(i) + " must be a variable handle (resource), got " +
                   DTypeName(c.input_dtype(i)));
  return Status::OK();
}

Status AssignShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireHandle(c, 0));
  const Node& h = c.graph().node(c.node().inputs[0].node);
  if (h.op == "VarHandle") {
    auto dt = h.attrs.Get<DType>("dtype");
    if (dt.ok() && *dt != c.input_dtype(1))
      return c.Error("variable '" + h.name + "' is " + DTypeName(*dt) + ", cannot assign a " +
                     DTypeName(c.input_dtype(1)) + " value");
    PartialShape declared = HandleShape(c.graph(), c.node().inputs[0]);
    if (!declared.CompatibleWith(c.input_shape(1)))
      return c.Error("variable '" + h.name + "' has shape " + declared.ToString() +
                     ", cannot assign a value of shape " + c.input_shape(1).ToString());
  }
  c.set_output(0, c.input_dtype(1), c.input_shape(1));
  return Status::OK();
}

// ResourceScatterUpdate(resource, indices, updates): the dtypes, and the
// updates' shape against indices.shape + the variable's declared shape[1:]
// where both are known. No outputs.
Status ScatterUpdateShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireHandle(c, 0));
  const DType idx = c.input_dtype(1);
  if (idx != DType::kInt32 && idx != DType::kInt64)
    return c.Error("indices must be int32 or int64, got " + std::string(DTypeName(idx)));
  const Node& h = c.graph().node(c.node().inputs[0].node);
  if (h.op != "VarHandle") return Status::OK();
  auto dt = h.attrs.Get<DType>("dtype");
  if (dt.ok() && *dt != c.input_dtype(2))
    return c.Error("variable '" + h.name + "' is " + DTypeName(*dt) + ", cannot scatter " +
                   DTypeName(c.input_dtype(2)) + " updates into it");
  const PartialShape declared = HandleShape(c.graph(), c.node().inputs[0]);
  if (!declared.rank_known()) return Status::OK();
  if (declared.rank() == 0) return c.Error("variable '" + h.name + "' is a scalar: scatter updates need rank 1 or more");
  const PartialShape& indices = c.input_shape(1);
  if (!indices.rank_known()) return Status::OK();
  Shape want = indices.dims();
  want.insert(want.end(), declared.dims().begin() + 1, declared.dims().end());
  if (!PartialShape(want).CompatibleWith(c.input_shape(2)))
    return c.Error("variable '" + h.name + "' has shape " + declared.ToString() + ": updates for indices of shape " +
                   indices.ToString() + " need shape " + PartialShape(want).ToString() + ", got " +
                   c.input_shape(2).ToString());
  return Status::OK();
}

}  // namespace

Status RegisterStateOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("VarHandle")
      .RequiredAttr<std::string>("shared_name").State(StateAttr::kName).RequiredAttr<DType>("dtype")
      .Attr("shape", PartialShape()).Attr("trainable", false)
      .Inputs(0).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        SF_ASSIGN_OR_RETURN(std::string name, c.Attr<std::string>("shared_name"));
        if (name.empty()) return c.Error("VarHandle needs a non-empty shared_name");
        SF_ASSIGN_OR_RETURN(DType t, c.Attr<DType>("dtype"));
        if (t == DType::kInvalid || t == DType::kResource)
          return c.Error(std::string("a variable cannot hold dtype ") + DTypeName(t));
        SF_RETURN_IF_ERROR(c.AttrOr<PartialShape>("shape", PartialShape()).status());
        c.set_output(0, DType::kResource, PartialShape(Shape{}));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("A handle to the session's variable shared_name (attrs shared_name, dtype, shape).")
      .Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ReadVariable")
      .RequiredAttr<DType>("dtype")
      .Inputs(1).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireHandle(c, 0));
        SF_ASSIGN_OR_RETURN(DType t, c.Attr<DType>("dtype"));
        c.set_output(0, t, HandleShape(c.graph(), c.node().inputs[0]));
        return Status::OK();
      })
      // The gradient goes to the handle: Gradients(loss, {handle}) is how
      // optimizers get the gradient of a variable.
      .Grad([](Graph&, const Node&, const std::vector<Output>& dy) {
        return std::vector<Output>{dy[0]};
      })
      .Summary("A snapshot of a variable's value (attr dtype).").Build()));

  for (const char* op : {"Assign", "AssignAdd", "AssignSub"}) {
    SF_RETURN_IF_ERROR(reg.Register(OpBuilder(op).InputNames({"resource", "value"})
        .Inputs(2).Stateful().Repeatable().Shape(AssignShape).NotDifferentiable()
        .Summary(std::string(op) + " a value to a variable; returns the new value.").Build()));
  }
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ResourceScatterUpdate").InputNames({"resource", "indices", "updates"})
      .Inputs(3).Stateful().Repeatable().Shape(ScatterUpdateShape).NotDifferentiable()
      .Summary("TF's ScatterUpdate: variable[indices[i], ...] = updates[i, ...] (rows of dim 0; of duplicate indices "
               "the last wins), written in place where the variable lives as one update (a read never sees part "
               "of it). Any variable dtype; indices int32 or int64; an index out of range fails naming the variable "
               "and the index, with nothing written. No outputs.")
      .Build()));
  return Status::OK();
}

namespace ops {

Output VarHandle(Graph& g, const std::string& shared_name, DType dtype, PartialShape shape,
                 const std::string& name) {
  AttrMap a;
  a.Set("shared_name", shared_name);
  a.Set("dtype", dtype);
  a.Set("shape", std::move(shape));
  return g.Add1("VarHandle", {}, std::move(a), name);
}

Output ReadVariable(Graph& g, Output handle, DType dtype) {
  AttrMap a;
  a.Set("dtype", dtype);
  return g.Add1("ReadVariable", {handle}, std::move(a));
}

Output Assign(Graph& g, Output handle, Output value) { return g.Add1("Assign", {handle, value}); }
Output AssignAdd(Graph& g, Output handle, Output value) {
  return g.Add1("AssignAdd", {handle, value});
}
Output AssignSub(Graph& g, Output handle, Output value) {
  return g.Add1("AssignSub", {handle, value});
}

Operation ResourceScatterUpdate(Graph& g, Output handle, Output indices, Output updates) {
  return Operation(&g, g.AddNode("ResourceScatterUpdate", {handle, indices, updates}));
}

Output Variable(Graph& g, const std::string& name, Output initial_value) {
  if (!initial_value.valid()) {
    g.RecordError(InvalidArgument("Variable '" + name + "': the initial value is invalid"));
    return Output();
  }
  // The read takes the user's name (fetching "w" gives its value); the handle
  // and the initializer sit under it. The shared name is the unique scoped
  // name, so two variables never share state by accident.
  const std::string unique = g.ScopedName(name);
  const std::string prefix = g.ScopedName("");
  const std::string base = unique.substr(prefix.size());
  AttrMap ha;
  ha.Set("shared_name", unique);
  ha.Set("dtype", initial_value.dtype());
  ha.Set("shape", initial_value.shape());
  ha.Set("trainable", true);
  Output h = g.Add1("VarHandle", {}, std::move(ha), base + "/handle");
  if (!h.valid()) return Output();
  AttrMap ia;
  ia.Set("_initializer", true);
  if (g.AddNode("Assign", {h, initial_value}, std::move(ia), base + "/Assign") < 0) return Output();
  AttrMap ra;
  ra.Set("dtype", initial_value.dtype());
  return g.Add1("ReadVariable", {h}, std::move(ra), base);
}

Output VariableHandle(Output read) {
  if (!read.valid() || read.op().op != "ReadVariable") return Output();
  return read.op().inputs[0];
}

Operation GlobalVariablesInitializer(Graph& g, const std::string& name) {
  std::vector<int> inits;
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    auto v = n.attrs.GetOr<bool>("_initializer", false);
    if (v.ok() && *v) inits.push_back(i);
  }
  return NoOp(g, inits, name);
}

}  // namespace ops
}  // namespace sf
