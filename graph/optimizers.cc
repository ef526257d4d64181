// Optimizers: gradients w.r.t. variable handles plus one Apply* op per
// variable; slots are variables named "<var>/<Optimizer>/<slot>", so the
// runtime places them in the shard of "<var>".
#include "shardflow/optimizers.h"

#include <map>

#include "graph/op_registry.h"
#include "shardflow/gradients.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

// The shared name of the variable behind a VarHandle output ("" if not one).
std::string SharedName(const Output& handle) {
  const Node& n = handle.op();
  if (n.op != "VarHandle") return "";
  auto s = n.attrs.Get<std::string>("shared_name");
  return s.ok() ? *s : "";
}

// A scalar hyperparameter constant of the gradient's dtype.
Output Hyper(Graph& g, Output grad, double v) { return ops::ScalarLike(g, grad, v); }

Result<int> AddApply(Graph& g, const std::string& op, std::vector<Output> inputs,
                     AttrMap attrs = {}) {
  int id = g.AddNode(op, inputs, std::move(attrs));
  if (id < 0) return g.status();
  return id;
}

// The slot variable handle with shared name full, or an invalid Output if none exists yet.
Output FindSlot(Graph& g, const std::string& full) {
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.op != "VarHandle") continue;
    auto s = n.attrs.GetOr<std::string>("shared_name", "");
    if (s.ok() && *s == full) return Output(&g, i, 0);
  }
  return Output();
}

// Adds slot variable full (handle, initial value, initializer); invalid Output on a graph error.
Output NewSlot(Graph& g, const std::string& full, Tensor value) {
  AttrMap ha;
  ha.Set("shared_name", full);
  ha.Set("dtype", value.dtype());
  ha.Set("shape", PartialShape(value.shape()));
  ha.Set("trainable", false);
  Output h = g.Add1("VarHandle", {}, std::move(ha), full + "/handle");
  Output v = ops::Const(g, std::move(value), full + "/init_value");
  AttrMap ia;
  ia.Set("_initializer", true);
  if (g.AddNode("Assign", {h, v}, std::move(ia), full + "/Assign") < 0) return Output();
  return h;
}

}  // namespace

Output Optimizer::LearningRate(Graph& g, Output grad, double constant) {
  if (!lr_tensor_.valid()) return Hyper(g, grad, constant);
  if (lr_tensor_.dtype() == grad.dtype()) return lr_tensor_;
  return ops::Cast(g, lr_tensor_, grad.dtype());
}

Result<Operation> Optimizer::Minimize(Graph& g, Output loss, const std::vector<Output>& var_list) {
  SF_RETURN_IF_ERROR(g.status());
  if (!loss.valid()) return InvalidArgument(name() + ".Minimize: the loss is invalid");
  std::vector<Output> handles;
  if (var_list.empty()) {
    for (int i = 0; i < g.num_nodes(); ++i) {
      const Node& n = g.node(i);
      auto t = n.attrs.GetOr<bool>("trainable", false);
      if (n.op == "VarHandle" && t.ok() && *t) handles.push_back(Output(&g, i, 0));
    }
  } else {
    for (const Output& read : var_list) {
      Output h = ops::VariableHandle(read);
      // A VarHandle itself (an embedding table's shard) names its variable too.
      if (!h.valid() && read.valid() && read.op().op == "VarHandle") h = read;
      if (!h.valid())
        return InvalidArgument(name() + ".Minimize: '" + (read.valid() ? read.name() : "?") +
                               "' is not a variable made by ops::Variable");
      handles.push_back(h);
    }
  }
  if (handles.empty()) return InvalidArgument(name() + ".Minimize: there are no variables to train");
  // Embedding shards: the gradient of each lookup's output becomes a sparse
  // update of the shard (the lookup itself passes no dense gradient back).
  std::vector<std::pair<size_t, int>> lookups;  // (index into handles, lookup node)
  std::map<Output, size_t> handle_index;
  for (size_t i = 0; i < handles.size(); ++i) handle_index.emplace(handles[i], i);
  const int graph_nodes = g.num_nodes();
  for (int n = 0; n < graph_nodes; ++n) {
    const Node& node = g.node(n);
    if (node.op != "EmbeddingShardLookup" || node.inputs.empty()) continue;
    auto it = handle_index.find(node.inputs[0]);
    if (it != handle_index.end()) lookups.emplace_back(it->second, n);
  }
  std::vector<Output> xs = handles;
  for (const auto& l : lookups) xs.push_back(Output(&g, l.second, 0));
  SF_ASSIGN_OR_RETURN(std::vector<Output> grads,
                      Gradients(g, {loss}, xs, {}, /*allow_unconnected=*/true));
  std::vector<int> updates;
  for (size_t i = 0; i < handles.size(); ++i) {
    if (!grads[i].valid()) continue;  // the loss does not depend on this variable
    SF_ASSIGN_OR_RETURN(int id, ApplyOne(g, handles[i], grads[i]));
    updates.push_back(id);
  }
  for (size_t j = 0; j < lookups.size(); ++j) {
    const Output dy = grads[handles.size() + j];
    if (!dy.valid()) continue;
    SF_ASSIGN_OR_RETURN(int id, ApplySparseOne(g, handles[lookups[j].first], lookups[j].second, dy));
    updates.push_back(id);
  }
  if (updates.empty())
    return InvalidArgument(name() + ".Minimize: the loss depends on none of the variables");
  Operation op = ops::NoOp(g, updates, name());
  if (!op.valid()) return g.status();
  return op;
}

Result<Operation> Optimizer::ApplyGradients(Graph& g,
                                      const std::vector<std::pair<Output, Output>>& grads_and_vars) {
  SF_RETURN_IF_ERROR(g.status());
  std::vector<int> updates;
  for (const auto& gv : grads_and_vars) {
    Output h = ops::VariableHandle(gv.second);
    if (!h.valid() && gv.second.valid() && gv.second.op().op == "VarHandle") h = gv.second;
    if (!h.valid())
      return InvalidArgument(name() + ".ApplyGradients: '" +
                             (gv.second.valid() ? gv.second.name() : "?") +
                             "' is not a variable made by ops::Variable");
    if (!gv.first.valid()) continue;
    SF_ASSIGN_OR_RETURN(int id, ApplyOne(g, h, gv.first));
    updates.push_back(id);
  }
  Operation op = ops::NoOp(g, updates, name());
  if (!op.valid()) return g.status();
  return op;
}

Output Optimizer::Slot(Graph& g, Output handle, const std::string& slot_name, double init) {
  const std::string var = SharedName(handle);
  if (var.empty()) {
    g.RecordError(InvalidArgument(name() + ": slot '" + slot_name + "' needs a VarHandle"));
    return Output();
  }
  const std::string full = var + "/" + name() + "/" + slot_name;
  if (Output existing = FindSlot(g, full); existing.valid()) return existing;
  const Node& vn = handle.op();
  auto dtype = vn.attrs.Get<DType>("dtype");
  auto shape = vn.attrs.GetOr<PartialShape>("shape", PartialShape());
  if (!dtype.ok() || !shape.ok() || !shape->fully_defined()) {
    g.RecordError(InvalidArgument(name() + ": slot '" + full +
                                  "' needs the variable's shape fully defined, got " +
                                  (shape.ok() ? shape->ToString() : "none")));
    return Output();
  }
  Tensor value = Tensor::Zeros(*dtype, shape->dims());
  if (init != 0.0) {
    DispatchNumeric(*dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      value.flat<T>().setConstant(static_cast<T>(init));
    });
  }
  return NewSlot(g, full, std::move(value));
}

Output Optimizer::ScalarSlot(Graph& g, Output handle, const std::string& slot_name, Tensor value) {
  const std::string full = SharedName(handle) + "/" + name() + "/" + slot_name;
  if (Output existing = FindSlot(g, full); existing.valid()) return existing;
  return NewSlot(g, full, std::move(value));
}

// ---- sparse updates of embedding shards ------------------------------------

Result<int> Optimizer::ApplySparseOne(Graph& g, Output handle, int lookup, Output) {
  (void)handle;
  auto table = g.node(lookup).attrs.GetOr<std::string>("table", "?");
  return Unimplemented(name() + " has no sparse update for embedding table '" +
                       (table.ok() ? *table : std::string("?")) +
                       "' (use GradientDescent, Adagrad or Adam)");
}

Result<int> Optimizer::AddSparseApply(Graph& g, const std::string& op, std::vector<Output> handles,
                                      std::vector<Output> scalars, int lookup, Output dy) {
  SF_RETURN_IF_ERROR(g.status());
  const Node& l = g.node(lookup);
  std::vector<Output> in = std::move(handles);
  for (auto& s : scalars) in.push_back(s);
  for (size_t i = 1; i < l.inputs.size(); ++i) in.push_back(l.inputs[i]);
  in.push_back(dy);
  AttrMap attrs = l.attrs;
  return AddApply(g, op, std::move(in), std::move(attrs));
}

Output Optimizer::FilledSlot(Graph& g, Output handle, const std::string& slot_name, double init) {
  const std::string var = SharedName(handle);
  const std::string full = var + "/" + name() + "/" + slot_name;
  if (Output existing = FindSlot(g, full); existing.valid()) return existing;
  auto shape = handle.op().attrs.GetOr<PartialShape>("shape", PartialShape());
  if (var.empty() || !shape.ok() || !shape->fully_defined()) {
    g.RecordError(InvalidArgument(name() + ": slot '" + full + "' needs a variable of known shape"));
    return Output();
  }
  AttrMap ha;
  ha.Set("shared_name", full);
  ha.Set("dtype", DType::kFloat32);
  ha.Set("shape", *shape);
  ha.Set("trainable", false);
  Output h = g.Add1("VarHandle", {}, std::move(ha), full + "/handle");
  Output v = ops::Fill(g, ops::Const(g, Tensor::FromVector(shape->dims())),
                       ops::Const(g, static_cast<float>(init)));
  AttrMap ia;
  ia.Set("_initializer", true);
  if (g.AddNode("Assign", {h, v}, std::move(ia), full + "/Assign") < 0) return Output();
  return h;
}

Result<int> GradientDescentOptimizer::ApplySparseOne(Graph& g, Output handle, int lookup, Output dy) {
  return AddSparseApply(g, "EmbeddingSparseApplyGradientDescent", {handle},
                        {LearningRate(g, dy, lr_)}, lookup, dy);
}

Result<int> AdagradOptimizer::ApplySparseOne(Graph& g, Output handle, int lookup, Output dy) {
  Output accum = FilledSlot(g, handle, "accumulator", init_);
  return AddSparseApply(g, "EmbeddingSparseApplyAdagrad", {handle, accum},
                        {LearningRate(g, dy, lr_)}, lookup, dy);
}

Result<int> AdamOptimizer::ApplySparseOne(Graph& g, Output handle, int lookup, Output dy) {
  Output m = FilledSlot(g, handle, "m");
  Output v = FilledSlot(g, handle, "v");
  Output b1 = ScalarSlot(g, handle, "beta1_power", Tensor::Scalar<float>(static_cast<float>(beta1_)));
  Output b2 = ScalarSlot(g, handle, "beta2_power", Tensor::Scalar<float>(static_cast<float>(beta2_)));
  return AddSparseApply(g, "EmbeddingSparseApplyAdam", {handle, m, v, b1, b2},
                        {LearningRate(g, dy, lr_), Hyper(g, dy, beta1_), Hyper(g, dy, beta2_),
                         Hyper(g, dy, eps_)},
                        lookup, dy);
}

Result<int> GradientDescentOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  return AddApply(g, "ApplyGradientDescent", {handle, LearningRate(g, grad, lr_), grad});
}

Result<int> MomentumOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  Output accum = Slot(g, handle, "momentum");
  AttrMap a;
  a.Set("use_nesterov", nesterov_);
  return AddApply(g, "ApplyMomentum",
                  {handle, accum, LearningRate(g, grad, lr_), Hyper(g, grad, momentum_), grad},
                  std::move(a));
}

Result<int> AdagradOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  Output accum = Slot(g, handle, "accumulator", init_);
  return AddApply(g, "ApplyAdagrad", {handle, accum, LearningRate(g, grad, lr_), grad});
}

Result<int> AdamOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  Output m = Slot(g, handle, "m");
  Output v = Slot(g, handle, "v");
  // The beta powers start at beta (the power after one step) and are advanced
  // by the update itself, beside the variable: no separate op races them.
  const DType dt = grad.valid() ? grad.dtype() : DType::kFloat32;
  auto scalar = [&](double x) {
    return dt == DType::kFloat64 ? Tensor::Scalar<double>(x)
                                 : Tensor::Scalar<float>(static_cast<float>(x));
  };
  Output b1 = ScalarSlot(g, handle, "beta1_power", scalar(beta1_));
  Output b2 = ScalarSlot(g, handle, "beta2_power", scalar(beta2_));
  return AddApply(g, "ApplyAdam",
                  {handle, m, v, b1, b2, LearningRate(g, grad, lr_), Hyper(g, grad, beta1_),
                   Hyper(g, grad, beta2_), Hyper(g, grad, eps_), grad});
}

Result<int> RMSPropOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  // TF1's RMSPropOptimizer starts the mean square at one.
  Output ms = Slot(g, handle, "rms", 1.0);
  Output mom = Slot(g, handle, "momentum");
  return AddApply(g, "ApplyRMSProp",
                  {handle, ms, mom, LearningRate(g, grad, lr_), Hyper(g, grad, rho_),
                   Hyper(g, grad, momentum_), Hyper(g, grad, eps_), grad});
}

}  // namespace sf
