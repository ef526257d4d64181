// Optimizers: gradients w.r.t. variable handles plus one Apply* op per
// variable; slots are variables named "<var>/<Optimizer>/<slot>", so the
// runtime places them in the shard of "<var>". Which op, which slots and how
// many hyperparameters each optimizer takes come from its row of
// kernels/optimizer_spec.h; the classes below only give the values.
#include "shardflow/optimizers.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "graph/op_registry.h"
#include "kernels/optimizer_spec.h"
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

// Optimizer::Slot of optimizer `opt`: a variable-shaped slot starting at init.
Output DenseSlot(Graph& g, const std::string& opt, Output handle, const std::string& slot_name,
                 double init) {
  const std::string var = SharedName(handle);
  if (var.empty()) {
    g.RecordError(InvalidArgument(opt + ": slot '" + slot_name + "' needs a VarHandle"));
    return Output();
  }
  const std::string full = var + "/" + opt + "/" + slot_name;
  if (Output existing = FindSlot(g, full); existing.valid()) return existing;
  const Node& vn = handle.op();
  auto dtype = vn.attrs.Get<DType>("dtype");
  auto shape = vn.attrs.GetOr<PartialShape>("shape", PartialShape());
  if (!dtype.ok() || !shape.ok() || !shape->fully_defined()) {
    g.RecordError(InvalidArgument(opt + ": slot '" + full +
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

// Optimizer::ScalarSlot of optimizer `opt`.
Output ScalarSlotOf(Graph& g, const std::string& opt, Output handle, const std::string& slot_name,
                    Tensor value) {
  const std::string full = SharedName(handle) + "/" + opt + "/" + slot_name;
  if (Output existing = FindSlot(g, full); existing.valid()) return existing;
  return NewSlot(g, full, std::move(value));
}

// Optimizer::FilledSlot of optimizer `opt`: float32, filled at run time.
Output FilledSlotOf(Graph& g, const std::string& opt, Output handle, const std::string& slot_name,
                    double init) {
  const std::string var = SharedName(handle);
  const std::string full = var + "/" + opt + "/" + slot_name;
  if (Output existing = FindSlot(g, full); existing.valid()) return existing;
  auto shape = handle.op().attrs.GetOr<PartialShape>("shape", PartialShape());
  if (var.empty() || !shape.ok() || !shape->fully_defined()) {
    g.RecordError(InvalidArgument(opt + ": slot '" + full + "' needs a variable of known shape"));
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

// The handles of one update of `kind` by optimizer `opt`: handle, then its
// slots in the spec's order, made once per graph, slot i starting at init[i].
// A dense update's slots are constants of the variable's dtype (scalar slots:
// of dtype dt); a sparse one's (an embedding shard) are float32, filled at
// run time. Invalid Outputs (the error recorded on g) when a slot cannot be made.
std::vector<Output> UpdateHandles(Graph& g, const std::string& opt, OptimizerKind kind,
                                  Output handle, DType dt, const std::vector<double>& init,
                                  bool sparse) {
  const OptimizerSpec& spec = SpecOf(kind);
  const int slots = spec.handles - 1;
  if (static_cast<int>(init.size()) != slots) {
    g.RecordError(Internal(opt + ": " + std::to_string(init.size()) + " slot values for " +
                           std::to_string(slots) + " slots"));
    return {};
  }
  // A hash table's shard keeps each row's slots beside the row, in its own
  // arena: the update names the shard for every slot.
  if (sparse && handle.op().attrs.Has("_hash_embedding"))
    return std::vector<Output>(static_cast<size_t>(spec.handles), handle);
  std::vector<Output> handles = {handle};
  for (int i = 0; i < slots; ++i) {
    const std::string name = spec.slots[i];
    if (i >= slots - spec.scalar_slots) {
      const DType sdt = sparse ? DType::kFloat32 : dt;
      handles.push_back(ScalarSlotOf(g, opt, handle, name,
                                     sdt == DType::kFloat64
                                         ? Tensor::Scalar<double>(init[i])
                                         : Tensor::Scalar<float>(static_cast<float>(init[i]))));
    } else {
      handles.push_back(sparse ? FilledSlotOf(g, opt, handle, name, init[i])
                               : DenseSlot(g, opt, handle, name, init[i]));
    }
  }
  return handles;
}

// Adds the dense update of `kind`: handles (UpdateHandles), the scalar
// hyperparameters, the gradient.
Result<int> AddUpdate(Graph& g, OptimizerKind kind, std::vector<Output> handles,
                      const std::vector<Output>& scalars, Output grad, AttrMap attrs = {}) {
  const OptimizerSpec& spec = SpecOf(kind);
  if (static_cast<int>(handles.size()) != spec.handles ||
      static_cast<int>(scalars.size()) != spec.scalars)
    return Internal(std::string(spec.name) + " builds " + std::to_string(handles.size()) +
                    " handles and " + std::to_string(scalars.size()) + " hyperparameters");
  std::vector<Output> in = std::move(handles);
  in.insert(in.end(), scalars.begin(), scalars.end());
  in.push_back(grad);
  return AddApply(g, spec.apply_op, std::move(in), std::move(attrs));
}

// Makes each dense update wait for the step's other readers of its
// variable's snapshot. A variable's shard updates in place only when no
// reader still holds the value it read; otherwise it copies the whole
// variable first (copy-on-write), and the readers of the backward pass (the
// input gradient of a layer, x dy * w^T) often ran after the update: the
// CNN's 3.2M-float dense weights were copied, into fresh pages, in a quarter
// of its steps. Only readers the step runs anyway (ancestors of an update)
// and on the variable's requested device (a control edge between devices is
// a message) are added, and nothing is added to a graph with control flow
// among them (a reader in an untaken branch is dead, and would kill the
// update). Readers through Identity and Reshape hold the same buffer and
// count too. Nothing depends on the updates yet, so no cycle can form.
Status OrderUpdatesAfterReaders(Graph& g, const std::vector<std::pair<Output, int>>& updates) {
  if (updates.empty()) return Status::OK();
  // The step's nodes: every ancestor of an update.
  std::vector<bool> in_step(g.num_nodes(), false);
  std::vector<int> stack;
  for (const auto& u : updates) stack.push_back(u.second);
  while (!stack.empty()) {
    const int id = stack.back();
    stack.pop_back();
    if (in_step[id]) continue;
    in_step[id] = true;
    const Node& n = g.node(id);
    static const std::set<std::string> kControlFlow = {"Switch", "Merge", "Enter", "Exit", "NextIteration",
                                                       "LoopCond"};
    if (kControlFlow.count(n.op)) return Status::OK();
    for (const Output& in : n.inputs) stack.push_back(in.node);
    for (int c : n.control_inputs) stack.push_back(c);
  }
  // Each step node's data consumers.
  std::vector<std::vector<int>> consumers(g.num_nodes());
  for (int id = 0; id < g.num_nodes(); ++id) {
    if (!in_step[id]) continue;
    for (const Output& in : g.node(id).inputs) consumers[in.node].push_back(id);
  }
  static const std::set<std::string> kSameBuffer = {"Identity", "Reshape"};
  for (const auto& [handle, update] : updates) {
    const std::string& device = g.node(handle.node).device;
    std::set<int> readers;
    std::vector<int> holders;  // nodes whose output may be the snapshot's buffer
    for (int c : consumers[handle.node])
      if (g.node(c).op == "ReadVariable") holders.push_back(c);
    for (size_t k = 0; k < holders.size(); ++k) {
      for (int c : consumers[holders[k]]) {
        if (c == update) continue;
        if (kSameBuffer.count(g.node(c).op)) holders.push_back(c);
        else if (g.node(c).device == device) readers.insert(c);
      }
    }
    const std::vector<int>& have = g.node(update).control_inputs;
    for (int r : readers)
      if (std::find(have.begin(), have.end(), r) == have.end()) SF_RETURN_IF_ERROR(g.AddControlInput(update, r));
  }
  return Status::OK();
}

}  // namespace

Output Optimizer::LearningRate(Graph& g, Output grad, double constant) {
  if (!lr_tensor_.valid()) return Hyper(g, grad, constant);
  if (lr_tensor_.dtype() == grad.dtype()) return lr_tensor_;
  return ops::Cast(g, lr_tensor_, grad.dtype());
}

Result<Operation> Optimizer::Minimize(Graph& g, Output loss, const std::vector<Output>& var_list) {
  SF_RETURN_IF_ERROR(g.status());
  SF_RETURN_IF_ERROR(Validate());
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
  // Each trained shard's lookups, in the order first seen; checked before
  // any update or slot is added.
  std::vector<size_t> shard_order;
  std::map<size_t, std::pair<std::vector<int>, std::vector<Output>>> per_shard;
  for (size_t j = 0; j < lookups.size(); ++j) {
    const Output dy = grads[handles.size() + j];
    if (!dy.valid()) continue;  // a lookup the loss does not use
    const Node& lookup = g.node(lookups[j].second);
    auto read_only = lookup.attrs.GetOr<bool>("read_only", false);
    if (!read_only.ok() || *read_only) {
      auto table = lookup.attrs.GetOr<std::string>("table", "?");
      return InvalidArgument(name() + ".Minimize: the loss reads embedding table '" + (table.ok() ? *table : "?") +
                             "' through a read-only view (" + lookup.name +
                             "), which cannot train it: look it up through the table itself");
    }
    auto& entry = per_shard[lookups[j].first];
    if (entry.first.empty()) shard_order.push_back(lookups[j].first);
    entry.first.push_back(lookups[j].second);
    entry.second.push_back(dy);
  }
  std::vector<int> updates;
  std::vector<std::pair<Output, int>> dense;
  for (size_t i = 0; i < handles.size(); ++i) {
    if (!grads[i].valid()) continue;  // the loss does not depend on this variable
    SF_ASSIGN_OR_RETURN(int id, ApplyOne(g, handles[i], grads[i]));
    updates.push_back(id);
    dense.emplace_back(handles[i], id);
  }
  SF_RETURN_IF_ERROR(OrderUpdatesAfterReaders(g, dense));
  for (size_t h : shard_order) {
    const auto& [shard_lookups, dys] = per_shard[h];
    SF_ASSIGN_OR_RETURN(ShardSparseGradient sg, ShardGradient(g, shard_lookups, dys));
    Optimizer& sparse = sparse_ ? *sparse_ : *this;
    SF_RETURN_IF_ERROR(sparse.Validate());
    SF_ASSIGN_OR_RETURN(int id, sparse.ApplySparseOne(g, handles[h], sg));
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
  SF_RETURN_IF_ERROR(Validate());
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

std::string Optimizer::SlotScope(Graph& g, Output handle) {
  const std::string var = SharedName(handle);
  const auto key = std::make_pair(static_cast<const Graph*>(&g), var);
  auto it = slot_scopes_.find(key);
  if (it != slot_scopes_.end()) return it->second;
  // Taken: some slot variable of var is named under the scope already.
  auto taken = [&](const std::string& scope) {
    const std::string prefix = var + "/" + scope + "/";
    for (int i = 0; i < g.num_nodes(); ++i) {
      const Node& n = g.node(i);
      if (n.op != "VarHandle") continue;
      auto s = n.attrs.GetOr<std::string>("shared_name", "");
      if (s.ok() && s->compare(0, prefix.size(), prefix) == 0) return true;
    }
    return false;
  };
  std::string scope = name();
  for (int k = 1; !var.empty() && taken(scope); ++k) scope = name() + "_" + std::to_string(k);
  slot_scopes_.emplace(key, scope);
  return scope;
}

Output Optimizer::Slot(Graph& g, Output handle, const std::string& slot_name, double init) {
  return DenseSlot(g, SlotScope(g, handle), handle, slot_name, init);
}

Output Optimizer::ScalarSlot(Graph& g, Output handle, const std::string& slot_name, Tensor value) {
  return ScalarSlotOf(g, SlotScope(g, handle), handle, slot_name, std::move(value));
}

// ---- sparse updates of embedding shards ------------------------------------

Result<ShardSparseGradient> ShardGradient(Graph& g, const std::vector<int>& lookups, const std::vector<Output>& dys) {
  SF_RETURN_IF_ERROR(g.status());
  if (lookups.empty() || lookups.size() != dys.size())
    return InvalidArgument("ShardGradient: " + std::to_string(lookups.size()) + " lookups and " +
                           std::to_string(dys.size()) + " gradients");
  const Node& first = g.node(lookups[0]);
  ShardSparseGradient sg;
  auto table = first.attrs.GetOr<std::string>("table", "?");
  sg.table = table.ok() ? *table : "?";
  sg.attrs = first.attrs;
  sg.attrs.Erase("read_only");  // the lookup's, not the update's
  if (lookups.size() == 1) {
    sg.inputs.assign(first.inputs.begin() + 1, first.inputs.end());
    sg.inputs.push_back(dys[0]);
    sg.grad = dys[0];
    return sg;
  }
  // Each lookup's rows and row gradients beside the shard, then one update
  // of them all: the shard sums a row read by several lookups once.
  std::vector<Output> rows, values;
  for (size_t i = 0; i < lookups.size(); ++i) {
    const Node& l = g.node(lookups[i]);
    if (l.inputs.empty() || !(l.inputs[0] == first.inputs[0]))
      return InvalidArgument("ShardGradient: lookups '" + first.name + "' and '" + l.name +
                             "' read different shards");
    std::vector<Output> in = l.inputs;
    in.push_back(dys[i]);
    const int id = g.AddNode("EmbeddingSparseGrad", in, l.attrs, l.name + "/sparse_grad");
    if (id < 0) return g.status();
    rows.push_back(Output(&g, id, 0));
    values.push_back(Output(&g, id, 1));
  }
  sg.inputs = {ops::Concat(g, rows, 0), ops::Concat(g, values, 0)};
  SF_RETURN_IF_ERROR(g.status());
  sg.attrs.Set("segments", std::string("rows"));
  sg.attrs.Set("combiner", std::string("sum"));
  sg.grad = sg.inputs[1];
  return sg;
}

Result<int> Optimizer::ApplySparseOne(Graph&, Output, const ShardSparseGradient& grad) {
  return Unimplemented(name() + " has no sparse update for embedding table '" + grad.table + "' (use " +
                       OptimizerNames(/*with_sparse_op=*/true) + ")");
}

Result<int> Optimizer::AddSparseApply(Graph& g, const std::string& op, std::vector<Output> handles,
                                      std::vector<Output> scalars, const ShardSparseGradient& grad,
                                      const std::vector<double>& slot_init) {
  SF_RETURN_IF_ERROR(g.status());
  std::vector<Output> in = std::move(handles);
  for (auto& s : scalars) in.push_back(s);
  for (const auto& x : grad.inputs) in.push_back(x);
  AttrMap attrs = grad.attrs;
  if (!slot_init.empty()) attrs.Set("slot_init", slot_init);
  return AddApply(g, op, std::move(in), std::move(attrs));
}

Output Optimizer::FilledSlot(Graph& g, Output handle, const std::string& slot_name, double init) {
  return FilledSlotOf(g, SlotScope(g, handle), handle, slot_name, init);
}

// ---- each optimizer: its slots' initial values and its hyperparameters ------

// Plain gradient descent has no slots: no scope to find for them.
Result<int> GradientDescentOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  auto h = UpdateHandles(g, name(), OptimizerKind::kGradientDescent, handle, grad.dtype(), {}, false);
  return AddUpdate(g, OptimizerKind::kGradientDescent, std::move(h), {LearningRate(g, grad, lr_)},
                   grad);
}

Result<int> GradientDescentOptimizer::ApplySparseOne(Graph& g, Output handle, const ShardSparseGradient& sg) {
  const Output dy = sg.grad;
  auto h = UpdateHandles(g, name(), OptimizerKind::kGradientDescent, handle, dy.dtype(), {}, true);
  return AddSparseApply(g, SpecOf(OptimizerKind::kGradientDescent).sparse_op, std::move(h),
                        {LearningRate(g, dy, lr_)}, sg);
}

Result<int> MomentumOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  auto h = UpdateHandles(g, SlotScope(g, handle), OptimizerKind::kMomentum, handle, grad.dtype(), {0.0}, false);
  AttrMap a;
  a.Set("use_nesterov", nesterov_);
  return AddUpdate(g, OptimizerKind::kMomentum, std::move(h),
                   {LearningRate(g, grad, lr_), Hyper(g, grad, momentum_)}, grad, std::move(a));
}

// An accumulator that starts at 0 divides 0 by 0 where a gradient is 0 (NaN
// rows); TensorFlow refuses it too.
static Status PositiveAccumulator(const std::string& opt, double init) {
  if (init > 0 && std::isfinite(init)) return Status::OK();
  return InvalidArgument(opt + ": initial_accumulator_value must be positive and finite, got " + std::to_string(init));
}

Status AdagradOptimizer::Validate() const { return PositiveAccumulator(name(), init_); }
Status RowwiseAdagradOptimizer::Validate() const { return PositiveAccumulator(name(), init_); }
Status FtrlOptimizer::Validate() const {
  if (!(init_ >= 0) || !std::isfinite(init_))
    return InvalidArgument(name() + ": initial_accumulator_value must be >= 0 and finite, got " + std::to_string(init_));
  if (!(power_ <= 0))
    return InvalidArgument(name() + ": learning_rate_power must be <= 0, got " + std::to_string(power_));
  return Status::OK();
}

Result<int> AdagradOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  auto h = UpdateHandles(g, SlotScope(g, handle), OptimizerKind::kAdagrad, handle, grad.dtype(), {init_}, false);
  return AddUpdate(g, OptimizerKind::kAdagrad, std::move(h), {LearningRate(g, grad, lr_)}, grad);
}

Result<int> AdagradOptimizer::ApplySparseOne(Graph& g, Output handle, const ShardSparseGradient& sg) {
  const Output dy = sg.grad;
  auto h = UpdateHandles(g, SlotScope(g, handle), OptimizerKind::kAdagrad, handle, dy.dtype(), {init_}, true);
  return AddSparseApply(g, SpecOf(OptimizerKind::kAdagrad).sparse_op, std::move(h),
                        {LearningRate(g, dy, lr_)}, sg, {init_});
}

Result<int> AdamOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  // m and v start at zero; the beta powers at beta (the power after one
  // step), advanced by the update itself beside the variable: no separate op
  // races them.
  const DType dt = grad.valid() ? grad.dtype() : DType::kFloat32;
  auto h = UpdateHandles(g, SlotScope(g, handle), OptimizerKind::kAdam, handle, dt, {0.0, 0.0, beta1_, beta2_},
                         false);
  return AddUpdate(g, OptimizerKind::kAdam, std::move(h),
                   {LearningRate(g, grad, lr_), Hyper(g, grad, beta1_), Hyper(g, grad, beta2_),
                    Hyper(g, grad, eps_)},
                   grad);
}

Result<int> AdamOptimizer::ApplySparseOne(Graph& g, Output handle, const ShardSparseGradient& sg) {
  const Output dy = sg.grad;
  auto h = UpdateHandles(g, SlotScope(g, handle), OptimizerKind::kAdam, handle, DType::kFloat32,
                         {0.0, 0.0, beta1_, beta2_}, true);
  return AddSparseApply(g, SpecOf(OptimizerKind::kAdam).sparse_op, std::move(h),
                        {LearningRate(g, dy, lr_), Hyper(g, dy, beta1_), Hyper(g, dy, beta2_),
                         Hyper(g, dy, eps_)},
                        sg, {0.0, 0.0, beta1_, beta2_});
}

Result<int> RowwiseAdagradOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  auto h = UpdateHandles(g, SlotScope(g, handle), OptimizerKind::kRowwiseAdagrad, handle, grad.dtype(), {init_}, false);
  return AddUpdate(g, OptimizerKind::kRowwiseAdagrad, std::move(h), {LearningRate(g, grad, lr_)}, grad);
}

Result<int> RowwiseAdagradOptimizer::ApplySparseOne(Graph& g, Output handle, const ShardSparseGradient& sg) {
  const Output dy = sg.grad;
  auto h = UpdateHandles(g, SlotScope(g, handle), OptimizerKind::kRowwiseAdagrad, handle, dy.dtype(), {init_}, true);
  return AddSparseApply(g, SpecOf(OptimizerKind::kRowwiseAdagrad).sparse_op, std::move(h),
                        {LearningRate(g, dy, lr_)}, sg, {init_});
}

Result<int> FtrlOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  auto h = UpdateHandles(g, SlotScope(g, handle), OptimizerKind::kFtrl, handle, grad.dtype(), {init_, 0.0}, false);
  return AddUpdate(g, OptimizerKind::kFtrl, std::move(h),
                   {LearningRate(g, grad, lr_), Hyper(g, grad, l1_), Hyper(g, grad, l2_),
                    Hyper(g, grad, power_)},
                   grad);
}

Result<int> FtrlOptimizer::ApplySparseOne(Graph& g, Output handle, const ShardSparseGradient& sg) {
  const Output dy = sg.grad;
  auto h = UpdateHandles(g, SlotScope(g, handle), OptimizerKind::kFtrl, handle, dy.dtype(), {init_, 0.0}, true);
  return AddSparseApply(g, SpecOf(OptimizerKind::kFtrl).sparse_op, std::move(h),
                        {LearningRate(g, dy, lr_), Hyper(g, dy, l1_), Hyper(g, dy, l2_),
                         Hyper(g, dy, power_)},
                        sg, {init_, 0.0});
}

Result<int> RMSPropOptimizer::ApplyOne(Graph& g, Output handle, Output grad) {
  // TF1's RMSPropOptimizer starts the mean square at one.
  auto h = UpdateHandles(g, SlotScope(g, handle), OptimizerKind::kRMSProp, handle, grad.dtype(), {1.0, 0.0},
                         false);
  return AddUpdate(g, OptimizerKind::kRMSProp, std::move(h),
                   {LearningRate(g, grad, lr_), Hyper(g, grad, rho_), Hyper(g, grad, momentum_),
                    Hyper(g, grad, eps_)},
                   grad);
}

}  // namespace sf
