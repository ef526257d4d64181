// Symbolic reverse-mode differentiation.
//
// Node ids are a topological order (a node's inputs always exist before it),
// so walking the nodes between xs and ys from the highest id down visits each
// node after every consumer has contributed its gradient: the breadth-first
// walk back from ys with pending counts, without the bookkeeping.
#include "shardflow/gradients.h"

#include <map>
#include <set>

#include "graph/control_flow_grad.h"
#include "graph/op_registry.h"
#include "shardflow/ops.h"

namespace sf {

namespace {

bool CarriesGradient(DType t) { return IsFloating(t) || t == DType::kResource; }

}  // namespace

Result<std::vector<Output>> Gradients(Graph& g, const std::vector<Output>& ys,
                                      const std::vector<Output>& xs,
                                      const std::vector<Output>& grad_ys, bool allow_unconnected) {
  return internal::GradientsWithin(g, ys, xs, grad_ys, allow_unconnected, nullptr);
}

namespace internal {

Result<std::vector<Output>> GradientsWithin(Graph& g, const std::vector<Output>& ys,
                                            const std::vector<Output>& xs,
                                            const std::vector<Output>& grad_ys, bool allow_unconnected,
                                            const std::set<int>* within) {
  SF_RETURN_IF_ERROR(g.status());
  if (ys.empty()) return InvalidArgument("Gradients needs at least one y");
  if (!grad_ys.empty() && grad_ys.size() != ys.size())
    return InvalidArgument("Gradients got " + std::to_string(grad_ys.size()) + " grad_ys for " +
                           std::to_string(ys.size()) + " ys");
  for (const Output& o : ys)
    if (!o.valid() || o.graph != &g) return InvalidArgument("Gradients: a y is not an output of this graph");
  for (const Output& o : xs)
    if (!o.valid() || o.graph != &g) return InvalidArgument("Gradients: an x is not an output of this graph");

  const int n = g.num_nodes();
  // Nodes that reach some y through data edges, and nodes reached from some
  // x. A loop's back edges (NextIteration into Merge) point from a higher id
  // to a lower one, so the passes repeat until nothing changes: a value
  // entering a loop reaches only the loop variables that depend on it.
  std::vector<char> to_y(n, 0), from_x(n, 0);
  auto inside = [within](int id) { return !within || within->count(id) > 0; };
  for (const Output& y : ys) to_y[y.node] = 1;
  for (bool changed = true; changed;) {
    changed = false;
    for (int id = n - 1; id >= 0; --id) {
      if (!to_y[id]) continue;
      for (const Output& in : g.node(id).inputs)
        if (!to_y[in.node] && inside(in.node)) {
          to_y[in.node] = 1;
          changed = changed || in.node > id;
        }
    }
  }
  for (const Output& x : xs) from_x[x.node] = 1;
  bool back_edges = false;
  for (int id = 0; id < n && !back_edges; ++id)
    for (const Output& in : g.node(id).inputs) back_edges = back_edges || in.node > id;
  // Forward, a back edge's consumer was passed before its producer was
  // marked: with back edges, passes repeat while they mark anything.
  for (bool changed = true; changed;) {
    changed = false;
    for (int id = 0; id < n; ++id) {
      if (from_x[id] || !inside(id)) continue;
      for (const Output& in : g.node(id).inputs)
        if (from_x[in.node]) {
          from_x[id] = 1;
          changed = back_edges;
          break;
        }
    }
  }

  // A loop's gradient reads the forward values back from stacks (StackPush
  // in the loop, StackPop in the gradient's loop), joined by a stack name,
  // not a data edge. A gradient through such values (a second-order
  // gradient through a while loop) would leave them out, a wrong answer
  // without an error: refuse it.
  std::set<std::string> pushed_from_x;
  for (int id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    if (node.op == "StackPush" && !node.inputs.empty() && from_x[node.inputs[0].node])
      pushed_from_x.insert(node.attrs.GetOr<std::string>("stack_name", "").value());
  }
  for (int id = 0; id < n && !pushed_from_x.empty(); ++id) {
    const Node& node = g.node(id);
    if (node.op != "StackPop" || !to_y[id]) continue;
    const std::string stack = node.attrs.GetOr<std::string>("stack_name", "").value();
    if (pushed_from_x.count(stack))
      return Unimplemented("the gradient goes through the values a while loop stored for its own gradient (node '" +
                           node.name + "', stack '" + stack +
                           "'): second-order gradients through while loops are not supported");
  }

  std::map<Output, std::vector<Output>> contributions;
  for (size_t i = 0; i < ys.size(); ++i) {
    Output seed = grad_ys.empty() ? ops::OnesLike(g, ys[i]) : grad_ys[i];
    if (!seed.valid()) return g.status().ok() ? Internal("cannot seed the gradient of " + ys[i].name()) : g.status();
    contributions[ys[i]].push_back(seed);
  }

  auto sum_of = [&](const Output& o) -> Output {
    auto it = contributions.find(o);
    if (it == contributions.end() || it->second.empty()) return Output();
    if (it->second.size() == 1) return it->second[0];
    Output s = ops::AddN(g, it->second);
    it->second = {s};
    return s;
  };

  int lowest_x = n;
  for (const Output& x : xs) lowest_x = std::min(lowest_x, x.node);
  std::vector<char> in_loop(n, 0);  // forward loop nodes, differentiated as a unit
  for (int id = n - 1; id >= lowest_x; --id) {
    if (!to_y[id] || !from_x[id] || in_loop[id]) continue;
    const Node& node = g.node(id);
    if (node.op == "Exit") {
      SF_ASSIGN_OR_RETURN(internal::LoopGradient lg,
                          internal::BuildWhileLoopGradient(g, id, [&](Output o) { return sum_of(o); }));
      for (int m : lg.loop_nodes) in_loop[m] = 1;
      // Only a value that reaches y through the loop gets its gradient.
      for (const auto& ig : lg.input_grads)
        if (ig.second.valid() && ig.first.node < n && from_x[ig.first.node] && to_y[ig.first.node] &&
            CarriesGradient(ig.first.dtype()))
          contributions[ig.first].push_back(ig.second);
      continue;
    }
    std::vector<Output> dys(node.num_outputs());
    bool any = false;
    for (int i = 0; i < node.num_outputs(); ++i) {
      dys[i] = sum_of(Output(&g, id, i));
      any = any || dys[i].valid();
    }
    if (!any) continue;
    const OpDef* def = g.registry().Find(node.op);
    if (!def || !def->differentiable) continue;  // the gradient stops here
    for (int i = 0; i < node.num_outputs(); ++i)
      if (!dys[i].valid() && CarriesGradient(node.output_dtypes[i]))
        dys[i] = ops::ZerosLike(g, Output(&g, id, i));
    // Nodes are held by pointer, so node stays valid while the gradient function adds nodes.
    std::vector<Output> dxs = def->grad_fn(g, node, dys);
    SF_RETURN_IF_ERROR(g.status().WithPrefix("building the gradient of node '" + node.name + "'"));
    if (dxs.size() != node.inputs.size())
      return Internal("the gradient of op " + node.op + " returned " + std::to_string(dxs.size()) +
                      " values for " + std::to_string(node.inputs.size()) + " inputs");
    for (size_t i = 0; i < dxs.size(); ++i) {
      const Output& in = node.inputs[i];
      if (!dxs[i].valid() || !from_x[in.node] || !CarriesGradient(in.dtype())) continue;
      contributions[in].push_back(dxs[i]);
    }
  }

  std::vector<Output> out;
  for (const Output& x : xs) {
    Output gx = sum_of(x);
    if (!gx.valid() && !allow_unconnected)
      return InvalidArgument("'" + x.name() + "' is not connected to the ys by differentiable ops");
    out.push_back(gx);
  }
  SF_RETURN_IF_ERROR(g.status());
  return out;
}

}  // namespace internal
}  // namespace sf
