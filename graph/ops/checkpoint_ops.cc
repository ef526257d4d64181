// Checkpoint ops: SaveCheckpoint and RestoreCheckpoint (kernels in
// kernels/cpu/checkpoint_kernels.cc), and their builders
// (include/shardflow/checkpoint_ops.h).
#include "graph/op_registry.h"
#include "kernels/checkpoint_service.h"
#include "shardflow/checkpoint_ops.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

// The names attr split (one variable per line); InvalidArgument for a name
// a checkpoint cannot hold.
Result<std::vector<std::string>> SplitNames(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(std::string joined, c.Attr<std::string>("names"));
  std::vector<std::string> out = SplitCheckpointNames(joined);
  for (const auto& n : out)
    if (n.empty() || n.find_first_of(" \t\r#") != std::string::npos)
      return c.Error("variable name '" + n + "' cannot be checkpointed (empty, whitespace or '#')");
  return out;
}

Status CheckDir(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(std::string dir, c.Attr<std::string>("dir"));
  if (dir.empty()) return c.Error("attr dir (the checkpoint directory) is empty");
  return Status::OK();
}

// Every variable of g: shared name, handle and dtype, in node order.
struct GraphVariable {
  std::string name;
  Output handle;
  DType dtype;
};
std::vector<GraphVariable> GraphVariables(Graph& g) {
  std::vector<GraphVariable> out;
  const int n = g.num_nodes();
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    if (node.op != "VarHandle") continue;
    auto name = node.attrs.Get<std::string>("shared_name");
    auto dtype = node.attrs.Get<DType>("dtype");
    if (name.ok() && dtype.ok()) out.push_back({*name, Output(&g, i, 0), *dtype});
  }
  return out;
}

std::string JoinNames(const std::vector<GraphVariable>& vars) {
  std::string joined;
  for (const auto& v : vars) joined += (joined.empty() ? "" : "\n") + v.name;
  return joined;
}

}  // namespace

Status RegisterCheckpointOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("SaveCheckpoint")
      .RequiredAttr<std::string>("dir").Path(PathAttr::kCheckpointDir).RequiredAttr<std::string>("names").State(StateAttr::kNames)
      .Inputs(1, 1 << 20).Stateful()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(CheckDir(c));
        if (c.input_dtype(0) != DType::kInt64)
          return c.Error(std::string("global_step must be int64, got ") + DTypeName(c.input_dtype(0)));
        SF_ASSIGN_OR_RETURN(auto names, SplitNames(c));
        if (static_cast<int>(names.size()) != c.num_inputs() - 1)
          return c.Error(std::to_string(names.size()) + " names for " + std::to_string(c.num_inputs() - 1) + " values");
        c.set_output(0, DType::kInt64, PartialShape{});
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Writes its inputs 1.. (attr names, one per line) as a committed checkpoint in attr dir under "
               "global step input 0; outputs the checkpoint id.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("RestoreCheckpoint")
      .RequiredAttr<std::string>("dir").Path(PathAttr::kCheckpointDir).RequiredAttr<std::string>("names").State(StateAttr::kNames)
      .RequiredAttr<std::vector<DType>>("dtypes")
      .Inputs(0).Stateful()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(CheckDir(c));
        SF_ASSIGN_OR_RETURN(auto names, SplitNames(c));
        SF_ASSIGN_OR_RETURN(auto dtypes, c.Attr<std::vector<DType>>("dtypes"));
        if (names.size() != dtypes.size())
          return c.Error(std::to_string(names.size()) + " names but " + std::to_string(dtypes.size()) + " dtypes");
        for (size_t i = 0; i < dtypes.size(); ++i) c.set_output(static_cast<int>(i), dtypes[i], PartialShape());
        c.set_output(static_cast<int>(dtypes.size()), DType::kInt64, PartialShape{});
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Reads the variables of attr names (dtypes attr dtypes) from the newest readable checkpoint in "
               "attr dir; the last output is its global step.")
      .Build()));
  return Status::OK();
}

namespace ops {

Output SaveVariables(Graph& g, const std::string& dir, Output global_step, const std::string& name) {
  if (!global_step.valid()) return Output();
  const auto vars = GraphVariables(g);
  if (vars.empty()) {
    g.RecordError(InvalidArgument("SaveVariables: the graph has no variables to save"));
    return Output();
  }
  std::vector<Output> inputs{global_step};
  for (const auto& v : vars) inputs.push_back(ReadVariable(g, v.handle, v.dtype));
  AttrMap a;
  a.Set("dir", dir);
  a.Set("names", JoinNames(vars));
  return g.Add1("SaveCheckpoint", inputs, std::move(a), name);
}

Operation RestoreVariables(Graph& g, const std::string& dir, Output* global_step, const std::string& name) {
  const Operation failed(&g, -1);
  const auto vars = GraphVariables(g);
  if (vars.empty()) {
    g.RecordError(InvalidArgument("RestoreVariables: the graph has no variables to restore"));
    return failed;
  }
  std::vector<DType> dtypes;
  for (const auto& v : vars) dtypes.push_back(v.dtype);
  AttrMap a;
  a.Set("dir", dir);
  a.Set("names", JoinNames(vars));
  a.Set("dtypes", dtypes);
  const int restore = g.AddNode("RestoreCheckpoint", {}, std::move(a), name);
  if (restore < 0) return failed;
  std::vector<int> assigns;
  for (size_t i = 0; i < vars.size(); ++i) {
    Output assigned = Assign(g, vars[i].handle, Output(&g, restore, static_cast<int>(i)));
    if (!assigned.valid()) return failed;
    assigns.push_back(assigned.node);
  }
  if (global_step) *global_step = Output(&g, restore, static_cast<int>(vars.size()));
  return NoOp(g, assigns, name + "/all");
}

}  // namespace ops
}  // namespace sf
