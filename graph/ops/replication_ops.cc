// Replication ops: synchronous updates aggregated at the variable's shard
// (with backup workers), asynchronous updates tagged with the version the
// worker read (staleness), the stale-synchronous barrier, and their counters.
// Builders live in include/shardflow/replication.h; the bookkeeping in
// kernels/replica_state.h.
#include "graph/op_registry.h"
#include "kernels/optimizer_spec.h"

namespace sf {
namespace {

// The VarHandle node behind input i, or nullptr.
const Node* VarNode(InferenceContext& c, int i) {
  const Node& n = c.graph().node(c.node().inputs[i].node);
  return n.op == "VarHandle" ? &n : nullptr;
}

// "variable 'w'" for error messages (the handle's node name when unknown).
std::string VarWhere(InferenceContext& c, int i) {
  const Node* v = VarNode(c, i);
  const Node& n = v ? *v : c.graph().node(c.node().inputs[i].node);
  if (v) {
    auto s = v->attrs.GetOr<std::string>("shared_name", "");
    if (s.ok() && !s->empty()) return "variable '" + *s + "'";
  }
  return "variable '" + n.name + "'";
}

Status RequireHandleInput(InferenceContext& c, int i) {
  if (c.input_dtype(i) != DType::kResource)
    return c.Error("input " + std::to_string(i) + " must be a variable handle, got " +
                   DTypeName(c.input_dtype(i)));
  return Status::OK();
}

Status RequireInt64Scalar(InferenceContext& c, int i, const char* what) {
  if (c.input_dtype(i) != DType::kInt64)
    return c.Error(std::string(what) + " (input " + std::to_string(i) + ") must be int64, got " +
                   DTypeName(c.input_dtype(i)));
  const PartialShape& s = c.input_shape(i);
  if (s.rank_known() && s.fully_defined() && NumElements(s.dims()) != 1)
    return c.Error(std::string(what) + " must be a scalar, got " + s.ToString());
  return Status::OK();
}

// ApplyGradientSync / ApplyGradientAsync: handles, scalars, grad, int64 tag.
Status TaggedApplyShape(InferenceContext& c, bool sync) {
  auto opt = c.Attr<std::string>("optimizer");
  if (!opt.ok()) return opt.status();
  SF_ASSIGN_OR_RETURN(OptimizerKind kind, ParseOptimizer(*opt));
  const int handles = SpecOf(kind).handles, scalars = SpecOf(kind).scalars;
  const int grad = handles + scalars;
  if (c.num_inputs() != grad + 2)
    return c.Error(*opt + " takes " + std::to_string(handles) + " handle(s), " +
                   std::to_string(scalars) + " hyperparameter(s), the gradient and the " +
                   (sync ? "step tag" : "read version") + ": " + std::to_string(grad + 2) +
                   " inputs, got " + std::to_string(c.num_inputs()));
  for (int i = 0; i < handles; ++i) SF_RETURN_IF_ERROR(RequireHandleInput(c, i));
  const std::string where = VarWhere(c, 0);
  const DType gt = c.input_dtype(grad);
  if (gt != DType::kFloat32 && gt != DType::kFloat64)
    return c.Error(where + ": the gradient must be float32 or float64, got " + DTypeName(gt));
  for (int i = handles; i < grad; ++i) {
    if (c.input_dtype(i) != gt)
      return c.Error(where + ": hyperparameter input " + std::to_string(i) + " is " +
                     DTypeName(c.input_dtype(i)) + " but the gradient is " + DTypeName(gt));
  }
  if (const Node* var = VarNode(c, 0)) {
    auto dt = var->attrs.Get<DType>("dtype");
    if (dt.ok() && *dt != gt)
      return c.Error(where + " is " + DTypeName(*dt) + " but the gradient is " + DTypeName(gt));
    auto shape = var->attrs.GetOr<PartialShape>("shape", PartialShape());
    if (shape.ok() && !shape->CompatibleWith(c.input_shape(grad)))
      return c.Error(where + " has shape " + shape->ToString() + " but the gradient has shape " +
                     c.input_shape(grad).ToString());
  }
  SF_RETURN_IF_ERROR(RequireInt64Scalar(c, grad + 1, sync ? "the step tag" : "the read version"));
  if (sync) {
    auto n = c.Attr<int64_t>("num_required");
    if (!n.ok()) return c.Error(where + ": attr num_required is missing");
    if (*n < 1)
      return c.Error(where + ": synchronous replication needs num_required >= 1, got " +
                     std::to_string(*n));
    auto t = c.AttrOr<int64_t>("timeout_ms", 0);
    if (!t.ok() || *t < 0) return c.Error(where + ": timeout_ms must be an int >= 0");
    c.set_output(0, DType::kInt64, PartialShape(Shape{}));
  }
  return Status::OK();
}

}  // namespace

Status RegisterReplicationOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ApplyGradientSync")
      .RequiredAttr<std::string>("optimizer").RequiredAttr<int64_t>("num_required")
      .Attr("timeout_ms", int64_t{0}).Attr("use_nesterov", false)
      .Inputs(4, 12).Stateful().Repeatable()
      .Shape([](InferenceContext& c) { return TaggedApplyShape(c, true); }).NotDifferentiable()
      .Summary("Synchronous replication: adds this worker's gradient, tagged with the global step "
               "it read, to the step's aggregate at the variable's shard; the shard applies the "
               "average of the first num_required with attr optimizer and advances its step. "
               "Inputs: var, slots..., hyperparameters..., grad, step_tag. Output: the step it "
               "counted in, or -1 when stale (counted as dropped).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ApplyGradientAsync")
      .RequiredAttr<std::string>("optimizer").Attr("use_nesterov", false)
      .Inputs(4, 12).Stateful().Repeatable()
      .Shape([](InferenceContext& c) { return TaggedApplyShape(c, false); }).NotDifferentiable()
      .Summary("Asynchronous replication: applies the gradient on arrival with attr optimizer and "
               "records staleness = variable version now - read_version. Inputs: var, slots..., "
               "hyperparameters..., grad, read_version.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ReadVariableWithVersion")
      .RequiredAttr<DType>("dtype")
      .Inputs(1).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireHandleInput(c, 0));
        auto dt = c.Attr<DType>("dtype");
        if (!dt.ok()) return dt.status();
        PartialShape shape;
        if (const Node* v = VarNode(c, 0)) {
          auto s = v->attrs.GetOr<PartialShape>("shape", PartialShape());
          if (s.ok()) shape = *s;
        }
        c.set_output(0, *dt, shape);
        c.set_output(1, DType::kInt64, PartialShape(Shape{}));
        return Status::OK();
      }).NotDifferentiable()
      .Summary("The variable's value and its version (optimizer updates applied so far), read "
               "together. Attr dtype.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("SyncReplicaStats").Inputs(1).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireHandleInput(c, 0));
        c.set_output(0, DType::kInt64, PartialShape(Shape{4}));
        return Status::OK();
      }).NotDifferentiable()
      .Summary("int64 [applied_steps, accepted_gradients, dropped_gradients, pending_gradients] of "
               "a variable's synchronous replication; applied_steps is its global step, "
               "pending_gradients wait for their step's num_required.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("StalenessStats").Inputs(1).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireHandleInput(c, 0));
        c.set_output(0, DType::kFloat64, PartialShape(Shape{3}));
        return Status::OK();
      }).NotDifferentiable()
      .Summary("float64 [count, mean, max] of the staleness of a variable's tagged asynchronous "
               "updates.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("AbortSyncStep").Inputs(1).Stateful()
      .Shape([](InferenceContext& c) { return RequireHandleInput(c, 0); }).NotDifferentiable()
      .Summary("Fails every worker waiting on the variable's pending synchronous steps with "
               "Aborted and drops (counts) their gradients.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("StaleSyncWait")
      .RequiredAttr<int64_t>("worker").RequiredAttr<int64_t>("num_workers")
      .RequiredAttr<int64_t>("staleness")
      .Inputs(2).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireHandleInput(c, 0));
        SF_RETURN_IF_ERROR(RequireInt64Scalar(c, 1, "the clock"));
        const std::string where = VarWhere(c, 0);
        auto w = c.Attr<int64_t>("worker");
        auto n = c.Attr<int64_t>("num_workers");
        auto s = c.Attr<int64_t>("staleness");
        if (!w.ok() || !n.ok() || !s.ok())
          return c.Error(where + ": StaleSyncWait needs int attrs worker, num_workers, staleness");
        if (*n < 1 || *w < 0 || *w >= *n || *s < 0)
          return c.Error(where + ": StaleSyncWait needs 0 <= worker < num_workers and staleness >= 0, "
                         "got worker " + std::to_string(*w) + ", num_workers " + std::to_string(*n) +
                         ", staleness " + std::to_string(*s));
        return Status::OK();
      }).NotDifferentiable()
      .Summary("Stale-synchronous barrier: worker (attr) starts clock (input); completes once it "
               "is at most attr staleness clocks ahead of the slowest of num_workers.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("AllReduce")
      .RequiredAttr<std::string>("group_key").State(StateAttr::kName).RequiredAttr<int64_t>("group_size")
      .RequiredAttr<int64_t>("rank")
      .Inputs(1).Stateful()
      .Shape([](InferenceContext& c) -> Status {
        auto key = c.Attr<std::string>("group_key");
        auto n = c.Attr<int64_t>("group_size");
        auto r = c.Attr<int64_t>("rank");
        if (!key.ok() || !n.ok() || !r.ok())
          return c.Error("AllReduce needs attrs group_key (string), group_size and rank (ints)");
        if (*n < 1 || *r < 0 || *r >= *n)
          return c.Error("all-reduce group '" + *key + "': needs 0 <= rank < group_size, got rank " +
                         std::to_string(*r) + " of " + std::to_string(*n));
        const DType t = c.input_dtype(0);
        if (t != DType::kFloat32 && t != DType::kFloat64)
          return c.Error("all-reduce group '" + *key + "': sums float32 or float64, got " + DTypeName(t));
        c.set_output(0, t, c.input_shape(0));
        return Status::OK();
      }).NotDifferentiable()
      .Summary("Ring all-reduce: the sum of x over the group_size ranks of group_key (each rank's "
               "k-th run joins the k-th reduction); a ring of actors, reduce-scatter then all-gather.")
      .Build()));
  return Status::OK();
}

}  // namespace sf
