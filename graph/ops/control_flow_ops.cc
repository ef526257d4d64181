// Control-flow ops (Switch, Merge, Enter, Exit, NextIteration, LoopCond) and
// the Cond / WhileLoop builders. The executor gives the ops their meaning
// (dead tensors, frames, iterations); see runtime/executor.cc.
#include "shardflow/control_flow.h"

#include <algorithm>
#include <map>
#include <set>

#include "graph/control_flow_grad.h"
#include "graph/op_registry.h"
#include "shardflow/gradients.h"
#include "shardflow/ops.h"

namespace sf {

namespace {

Status PredShape(InferenceContext& c, int i) {
  if (c.input_dtype(i) != DType::kBool)
    return c.Error(std::string("the predicate must be bool, got ") + DTypeName(c.input_dtype(i)));
  const PartialShape& s = c.input_shape(i);
  if (s.rank_known() && s.rank() != 0)
    return c.Error("the predicate must be a scalar, got shape " + s.ToString());
  return Status::OK();
}

// A stack index: int32, a scalar or a vector (one iteration per enclosing loop).
Status CheckStackIndex(InferenceContext& c, int i) {
  if (c.input_dtype(i) != DType::kInt32)
    return c.Error(std::string("the index must be int32, got ") + DTypeName(c.input_dtype(i)));
  const PartialShape& s = c.input_shape(i);
  if (s.rank_known() && s.rank() > 1)
    return c.Error("the index must be a scalar or a vector, got shape " + s.ToString());
  return Status::OK();
}

// The most specific shape every input satisfies: dims that differ become -1.
PartialShape CommonShape(const InferenceContext& c) {
  PartialShape s = c.input_shape(0);
  for (int i = 1; i < c.num_inputs(); ++i) {
    const PartialShape& o = c.input_shape(i);
    if (!s.rank_known() || !o.rank_known() || s.rank() != o.rank()) return PartialShape();
    Shape d = s.dims();
    for (int k = 0; k < o.rank(); ++k)
      if (d[k] != o.dim(k)) d[k] = -1;
    s = PartialShape(d);
  }
  return s;
}

}  // namespace

Status RegisterControlFlowOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Switch")
      .InputNames({"data", "pred"})
      .Inputs(2)
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(PredShape(c, 1));
        c.set_output(0, c.input_dtype(0), c.input_shape(0));
        c.set_output(1, c.input_dtype(0), c.input_shape(0));
        return Status::OK();
      })
      .Grad([](Graph& g, const Node&, const std::vector<Output>& dy) {
        // Only the taken output's gradient is live; Merge picks it.
        return std::vector<Output>{ops::Merge(g, {dy[0], dy[1]})[0], Output()};
      })
      .Summary("Forwards data to output 1 if pred else output 0; the other is dead.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Merge").Inputs(1, -1)
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(c.RequireSameDTypes());
        c.set_output(0, c.input_dtype(0), CommonShape(c));
        c.set_output(1, DType::kInt32, PartialShape({}));
        return Status::OK();
      })
      .Grad([](Graph& g, const Node& node, const std::vector<Output>& dy) {
        // Input i gets the gradient only when it was the one forwarded.
        std::vector<Output> dx;
        Output index(&g, node.id, 1);
        for (int i = 0; i < static_cast<int>(node.inputs.size()); ++i) {
          Output taken = ops::Equal(g, index, ops::Const(g, static_cast<int32_t>(i)));
          dx.push_back(ops::Switch(g, dy[0], taken)[1]);
        }
        return dx;
      })
      .Summary("Forwards its first live input and that input's index.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Enter")
      .RequiredAttr<std::string>("frame_name").Attr("is_constant", false)
      .Attr("parallel_iterations", int64_t{10})
      .Inputs(1).Shape(UnchangedShape).NotDifferentiable()
      .Summary("Moves a value into a loop frame (attrs frame_name, is_constant, "
               "parallel_iterations).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Exit").Inputs(1).Shape(UnchangedShape).NotDifferentiable()
      .Summary("Moves a value out of a loop frame to its parent.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("NextIteration").Inputs(1).Shape(UnchangedShape).NotDifferentiable()
      .Summary("Moves a value to the next iteration of its loop.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("LoopCond")
      .Attr("loop_name", "").Attr("maximum_iterations", int64_t{-1})
      .Inputs(1)
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(PredShape(c, 0));
        c.set_output(0, DType::kBool, PartialShape({}));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("A loop's predicate (attrs loop_name, maximum_iterations).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ControlTrigger").Inputs(0)
      .Shape([](InferenceContext&) { return Status::OK(); })
      .NotDifferentiable()
      .Summary("Runs after its control inputs and is never dead, even when they are.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("StackPush")
      .RequiredAttr<std::string>("stack_name")
      .Inputs(2).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(CheckStackIndex(c, 1));
        SF_RETURN_IF_ERROR(c.Attr<std::string>("stack_name").status());
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Saves a value for this step under (attr stack_name, index): a loop "
               "gradient's forward half. index: an int32 scalar, or a vector of one "
               "iteration number per enclosing loop.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("StackPop")
      .RequiredAttr<std::string>("stack_name").RequiredAttr<DType>("dtype")
      .Attr("shape", PartialShape())
      .Inputs(1).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(CheckStackIndex(c, 0));
        SF_RETURN_IF_ERROR(c.Attr<std::string>("stack_name").status());
        SF_ASSIGN_OR_RETURN(DType t, c.Attr<DType>("dtype"));
        SF_ASSIGN_OR_RETURN(PartialShape s, c.AttrOr<PartialShape>("shape", PartialShape()));
        c.set_output(0, t, s);
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Takes back the value StackPush saved under (attr stack_name, index) "
               "this step.").Build()));
  return Status::OK();
}

namespace ops {

std::vector<Output> Switch(Graph& g, Output data, Output pred, const std::string& name) {
  int id = g.AddNode("Switch", {data, pred}, {}, name);
  if (id < 0) return {Output(), Output()};
  return {Output(&g, id, 0), Output(&g, id, 1)};
}

std::vector<Output> Merge(Graph& g, const std::vector<Output>& inputs, const std::string& name) {
  int id = g.AddNode("Merge", inputs, {}, name);
  if (id < 0) return {Output(), Output()};
  return {Output(&g, id, 0), Output(&g, id, 1)};
}

Output Enter(Graph& g, Output data, const std::string& frame_name, bool is_constant,
             int64_t parallel_iterations, const std::string& name) {
  AttrMap a;
  a.Set("frame_name", frame_name);
  a.Set("is_constant", is_constant);
  a.Set("parallel_iterations", parallel_iterations);
  return g.Add1("Enter", {data}, std::move(a), name);
}

Output Exit(Graph& g, Output data, const std::string& name) { return g.Add1("Exit", {data}, {}, name); }

Output NextIteration(Graph& g, Output data, const std::string& name) {
  return g.Add1("NextIteration", {data}, {}, name);
}

Output LoopCond(Graph& g, Output pred, const std::string& loop_name, int64_t maximum_iterations,
                const std::string& name) {
  AttrMap a;
  a.Set("loop_name", loop_name);
  a.Set("maximum_iterations", maximum_iterations);
  return g.Add1("LoopCond", {pred}, std::move(a), name);
}

int StackPush(Graph& g, Output value, Output index, const std::string& stack_name) {
  AttrMap a;
  a.Set("stack_name", stack_name);
  return g.AddNode("StackPush", {value, index}, std::move(a), "stack_push");
}

Output StackPop(Graph& g, Output index, const std::string& stack_name, DType dtype,
                PartialShape shape) {
  AttrMap a;
  a.Set("stack_name", stack_name);
  a.Set("dtype", dtype);
  a.Set("shape", std::move(shape));
  return g.Add1("StackPop", {index}, std::move(a), "stack_pop");
}

}  // namespace ops

namespace {

// While a branch or loop body is built, routes outside values into it and
// ties input-less nodes to the context's pivot (so they run, or are dead,
// with the branch / iteration). Restores the previous hook when destroyed;
// the routing nodes themselves are built under that previous hook, so a
// Cond in a loop routes an outside value through the loop's Enter first.
class BuildContext {
 public:
  // capture(v) builds the node that brings outside value v in.
  // Nodes with ids from `start` on are inside the context.
  BuildContext(Graph& g, int start, int pivot_node, std::function<Output(Output)> capture)
      : g_(g), start_(start), pivot_(pivot_node), capture_(std::move(capture)),
        prev_(g.node_hook()) {
    g_.set_node_hook([this](std::vector<Output>* inputs, std::vector<int>* controls) {
      bool only_captured = gate_captured_ && !inputs->empty();
      for (Output& in : *inputs) {
        if (in.valid() && in.graph == &g_ && in.node < start_) in = Capture(in);
        only_captured = only_captured && IsCaptured(in);
      }
      if ((inputs->empty() || only_captured) && pivot_ >= 0) controls->push_back(pivot_);
      return Status::OK();
    });
  }
  ~BuildContext() { g_.set_node_hook(prev_); }
  BuildContext(const BuildContext&) = delete;
  BuildContext& operator=(const BuildContext&) = delete;

  // The value inside the context standing for v (v itself when built inside).
  Output Capture(Output v) {
    if (!v.valid() || v.node >= start_) return v;
    auto it = captured_.find(v);
    if (it != captured_.end()) return it->second;
    Graph::NodeHook mine = g_.node_hook();
    g_.set_node_hook(prev_);
    Output c = capture_(v);
    g_.set_node_hook(mine);
    captured_[v] = c;
    captured_values_.insert(c);
    return c;
  }
  void set_pivot(int pivot) { pivot_ = pivot; }
  // In a loop, an outside value comes in through a constant Enter, alive in
  // every iteration, the last (whose condition is false) included: a node
  // fed by such values only must wait for the pivot too, or it runs in the
  // last iteration and starts one more.
  void set_gate_captured(bool on) { gate_captured_ = on; }
  // True when v is what Capture brought an outside value in as.
  bool IsCaptured(const Output& v) const { return captured_values_.count(v) > 0; }
  int start() const { return start_; }

 private:
  Graph& g_;
  int start_;
  int pivot_;
  std::function<Output(Output)> capture_;
  Graph::NodeHook prev_;
  std::map<Output, Output> captured_;
  std::set<Output> captured_values_;
  bool gate_captured_ = false;
};

Status LoopError(Graph& g, const std::string& msg) {
  Status s = InvalidArgument(msg);
  g.RecordError(s);
  return s;
}

}  // namespace

std::vector<Output> Cond(Graph& g, Output pred, BranchFn then_fn, BranchFn else_fn,
                         const std::string& name) {
  if (!g.status().ok()) return {};
  if (!pred.valid()) {
    g.RecordError(InvalidArgument("Cond '" + name + "': the predicate is not a valid output"));
    return {};
  }
  // A marker node reserves the unique name the branch nodes are scoped under.
  int marker = g.AddNode("NoOp", {}, {}, name.empty() ? "cond" : name);
  if (marker < 0) return {};
  const std::string full = g.node(marker).name;
  auto scope = g.NameScope(full.substr(full.rfind('/') + 1));
  // Pivots: nodes live only in their branch, for input-less branch nodes.
  auto pivots = ops::Switch(g, pred, pred, "switch_pred");
  Output pivot_f = ops::Identity(g, pivots[0], "pivot_f");
  Output pivot_t = ops::Identity(g, pivots[1], "pivot_t");
  if (!g.status().ok()) return {};
  auto build = [&](const BranchFn& fn, Output pivot, int side) -> std::vector<Output> {
    BuildContext ctx(g, g.num_nodes(), pivot.node, [&g, pred, side](Output v) {
      return ops::Switch(g, v, pred)[side];
    });
    auto branch_scope = g.NameScope(side ? "then" : "else");
    std::vector<Output> outs = fn(g);
    // A branch may return an outside value unchanged: it still has to be
    // dead when the branch is not taken.
    for (Output& o : outs) o = ctx.Capture(o);
    return outs;
  };
  std::vector<Output> t = build(then_fn, pivot_t, 1);
  std::vector<Output> e = build(else_fn, pivot_f, 0);
  if (!g.status().ok()) return {};
  if (t.size() != e.size()) {
    g.RecordError(InvalidArgument("Cond '" + name + "': then returns " + std::to_string(t.size()) +
                                  " values, else " + std::to_string(e.size())));
    return {};
  }
  std::vector<Output> out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!t[i].valid() || !e[i].valid()) {
      g.RecordError(InvalidArgument("Cond '" + name + "': branch output " + std::to_string(i) +
                                    " is not a valid output"));
      return {};
    }
    if (t[i].dtype() != e[i].dtype()) {
      g.RecordError(InvalidArgument("Cond '" + name + "': output " + std::to_string(i) + " is " +
                                    DTypeName(t[i].dtype()) + " in then, " +
                                    DTypeName(e[i].dtype()) + " in else"));
      return {};
    }
    out.push_back(ops::Merge(g, {e[i], t[i]}, "merge")[0]);
  }
  if (!g.status().ok()) return {};
  return out;
}

Result<std::vector<Output>> WhileLoop(Graph& g, LoopCondFn cond_fn, LoopBodyFn body_fn,
                                      const std::vector<Output>& loop_vars,
                                      WhileLoopOptions options) {
  SF_RETURN_IF_ERROR(g.status());
  // A marker node reserves the loop's unique name, which is also its frame name.
  int marker = g.AddNode("NoOp", {}, {}, options.name.empty() ? "while" : options.name);
  SF_RETURN_IF_ERROR(g.status());
  const std::string frame = g.node(marker).name;
  const std::string where = "WhileLoop '" + frame + "'";
  if (loop_vars.empty()) return LoopError(g, where + " needs at least one loop variable");
  for (size_t i = 0; i < loop_vars.size(); ++i)
    if (!loop_vars[i].valid() || loop_vars[i].graph != &g)
      return LoopError(g, where + ": loop variable " + std::to_string(i) + " is not a valid output");
  if (options.parallel_iterations < 1)
    return LoopError(g, where + ": parallel_iterations must be >= 1, got " +
                            std::to_string(options.parallel_iterations));
  auto scope = g.NameScope(frame.substr(frame.rfind('/') + 1));
  const int64_t par = options.parallel_iterations;
  std::vector<Output> enters, merges;
  for (const Output& v : loop_vars) enters.push_back(ops::Enter(g, v, frame, false, par, "enter"));
  SF_RETURN_IF_ERROR(g.status());
  // The Merge's second input is patched to the NextIteration once the body exists.
  for (const Output& e : enters) merges.push_back(ops::Merge(g, {e, e}, "merge")[0]);
  SF_RETURN_IF_ERROR(g.status());
  std::vector<Output> exits;
  std::vector<Output> body_out;
  {
    BuildContext ctx(g, enters[0].node, merges[0].node, [&g, frame, par](Output v) {
      return ops::Enter(g, v, frame, /*is_constant=*/true, par, "enter_const");
    });
    Output pred = cond_fn(g, merges);
    SF_RETURN_IF_ERROR(g.status().WithPrefix(where + " condition"));
    if (!pred.valid() || pred.dtype() != DType::kBool)
      return LoopError(g, where + ": the condition must return a bool scalar");
    pred = ctx.Capture(pred);
    Output loop_cond = ops::LoopCond(g, pred, frame, options.maximum_iterations, "loop_cond");
    std::vector<Output> body_in;
    for (size_t i = 0; i < merges.size(); ++i) {
      auto sw = ops::Switch(g, merges[i], loop_cond, "switch");
      exits.push_back(sw[0]);
      body_in.push_back(ops::Identity(g, sw[1], "body_in"));
    }
    SF_RETURN_IF_ERROR(g.status());
    ctx.set_pivot(body_in[0].node);
    ctx.set_gate_captured(true);
    body_out = body_fn(g, body_in);
    SF_RETURN_IF_ERROR(g.status().WithPrefix(where + " body"));
    if (body_out.size() != loop_vars.size())
      return LoopError(g, where + ": the body returns " + std::to_string(body_out.size()) +
                              " values for " + std::to_string(loop_vars.size()) + " loop variables");
    for (size_t i = 0; i < body_out.size(); ++i) {
      const std::string var = where + " loop variable " + std::to_string(i) + " ('" +
                              loop_vars[i].name() + "')";
      if (!body_out[i].valid()) return LoopError(g, var + ": the body returned an invalid output");
      if (body_out[i].dtype() != loop_vars[i].dtype())
        return LoopError(g, var + " is " + DTypeName(loop_vars[i].dtype()) + " but the body returns " +
                                DTypeName(body_out[i].dtype()));
      if (!body_out[i].shape().CompatibleWith(loop_vars[i].shape()))
        return LoopError(g, var + " has shape " + loop_vars[i].shape().ToString() +
                                " but the body returns shape " + body_out[i].shape().ToString());
      body_out[i] = ctx.Capture(body_out[i]);
      // The body returned an outside value itself: pass it through a node
      // that waits for the pivot (the hook adds the control input).
      if (ctx.IsCaptured(body_out[i])) body_out[i] = ops::Identity(g, body_out[i], "body_out");
    }
    for (size_t i = 0; i < body_out.size(); ++i) {
      Output next = ops::NextIteration(g, body_out[i], "next_iteration");
      SF_RETURN_IF_ERROR(g.status());
      g.mutable_node(merges[i].node).inputs[1] = next;
    }
  }
  std::vector<Output> out;
  for (const Output& e : exits) out.push_back(ops::Exit(g, e, "exit"));
  SF_RETURN_IF_ERROR(g.status());
  return out;
}

}  // namespace sf

namespace sf {
namespace internal {

namespace {

// A loop gradient being built on this thread. A loop inside its body builds
// its own gradient inside this one's backward body, and reads this one's
// iteration numbers: its stacks are indexed by the iterations of every
// enclosing loop (outermost first) and its own, so each forward run of the
// inner loop keeps its own values.
struct LoopGradScope {
  std::set<int>* fwd = nullptr;  // forward nodes whose values the backward pops
  Output fwd_iter;               // the forward iteration number (int32 scalar, forward frame)
  std::function<Output()> fwd_index;  // the push index in the forward frame (built when first asked)
  Output bwd_index;              // the pop index in the backward body (set while it is built)
};
thread_local std::vector<LoopGradScope*> loop_grad_scopes;

// The index `own` (an iteration number) extended by the index of the
// enclosing loops, `outer` (an int32 scalar or vector in the same frame):
// [outer..., own]. Invalid outer: own itself.
Output NestedIndex(Graph& g, Output outer, Output own) {
  if (!outer.valid()) return own;
  if (outer.shape().rank_known() && outer.shape().rank() == 0) outer = ops::ExpandDims(g, outer, 0);
  return ops::Concat(g, {outer, ops::ExpandDims(g, own, 0)}, 0);
}

// The structure of one WhileLoop, found from its LoopCond.
struct LoopParts {
  std::string frame;
  int64_t parallel_iterations = 10;
  Output loop_cond;
  std::vector<int> switches, merges, enters, next_iterations, exits;
  std::vector<Output> body_in, body_out;
  std::vector<int> const_enters;
  std::set<int> nodes;  // every forward node in the loop's frame
};

Result<LoopParts> FindLoop(Graph& g, int exit_id) {
  LoopParts p;
  const Node& exit = g.node(exit_id);
  const Node& sw0 = g.node(exit.inputs[0].node);
  if (sw0.op != "Switch" || g.node(sw0.inputs[1].node).op != "LoopCond")
    return InvalidArgument("Exit node '" + exit.name + "' does not leave a loop built by WhileLoop");
  p.loop_cond = sw0.inputs[1];
  const int n = g.num_nodes();
  for (int id = 0; id < n; ++id) {
    const Node& node = g.node(id);
    if (node.op == "Switch" && node.inputs[1] == p.loop_cond) p.switches.push_back(id);
  }
  int lo = n, hi = -1;
  for (int sw : p.switches) {
    const int m = g.node(sw).inputs[0].node;
    const Node& merge = g.node(m);
    if (merge.op != "Merge" || merge.inputs.size() != 2 || g.node(merge.inputs[0].node).op != "Enter" ||
        g.node(merge.inputs[1].node).op != "NextIteration")
      return InvalidArgument("the loop of Exit node '" + exit.name + "' was not built by WhileLoop");
    p.merges.push_back(m);
    p.enters.push_back(merge.inputs[0].node);
    p.next_iterations.push_back(merge.inputs[1].node);
    p.body_out.push_back(g.node(merge.inputs[1].node).inputs[0]);
    p.body_in.push_back(Output());
    p.exits.push_back(-1);
    lo = std::min(lo, merge.inputs[0].node);
  }
  const Node& enter0 = g.node(p.enters[0]);
  p.frame = enter0.attrs.GetOr<std::string>("frame_name", "").value();
  p.parallel_iterations = enter0.attrs.GetOr<int64_t>("parallel_iterations", 10).value();
  for (int id = lo; id < n; ++id) {
    const Node& node = g.node(id);
    for (size_t i = 0; i < p.switches.size(); ++i) {
      if (node.inputs.size() != 1 || node.inputs[0].node != p.switches[i]) continue;
      if (node.op == "Identity" && node.inputs[0].index == 1) p.body_in[i] = Output(&g, id);
      if (node.op == "Exit" && node.inputs[0].index == 0) p.exits[i] = id;
    }
    if (node.op == "Enter" && node.attrs.GetOr<std::string>("frame_name", "").value() == p.frame) {
      p.nodes.insert(id);
      if (node.attrs.GetOr<bool>("is_constant", false).value()) p.const_enters.push_back(id);
    }
  }
  for (size_t i = 0; i < p.switches.size(); ++i) {
    if (!p.body_in[i].valid() || p.exits[i] < 0)
      return InvalidArgument("the loop '" + p.frame + "' was not built by WhileLoop");
    hi = std::max(hi, p.exits[i]);
  }
  // The frame's nodes: everything between the first Enter and the last Exit
  // that reads a value of the frame (or waits for one).
  for (int id = lo; id <= hi; ++id) {
    const Node& node = g.node(id);
    if (p.nodes.count(id)) continue;
    bool in = false;
    for (const Output& i : node.inputs) in = in || p.nodes.count(i.node);
    for (int c : node.control_inputs) in = in || p.nodes.count(c);
    if (node.op == "Merge" && std::find(p.merges.begin(), p.merges.end(), id) != p.merges.end()) in = true;
    if (in) p.nodes.insert(id);
  }
  return p;
}

}  // namespace

Result<LoopGradient> BuildWhileLoopGradient(Graph& g, int exit_id,
                                            const std::function<Output(Output)>& grad_of) {
  SF_ASSIGN_OR_RETURN(LoopParts p, FindLoop(g, exit_id));
  // The loop whose backward body is being built around this one, if any.
  LoopGradScope* outer = loop_grad_scopes.empty() ? nullptr : loop_grad_scopes.back();
  if (outer) {
    const int first_input = g.node(p.enters[0]).inputs[0].node;
    if (!outer->fwd->count(first_input) || !outer->bwd_index.valid())
      return Internal("WhileLoop '" + p.frame + "': its gradient is built inside another loop's "
                      "gradient, but the loop is not in that loop's body");
  }
  // Build the forward half outside any branch or loop the caller may be
  // building; the backward loop of a nested loop goes inside the enclosing
  // backward body (the caller's hook), a top-level one outside everything.
  Graph::NodeHook saved_hook = g.node_hook();
  g.set_node_hook(nullptr);
  struct HookRestore {
    Graph& g;
    Graph::NodeHook h;
    ~HookRestore() { g.set_node_hook(h); }
  } restore{g, saved_hook};

  LoopGradient out;
  out.loop_nodes.assign(p.nodes.begin(), p.nodes.end());
  auto scope = g.NameScope(p.frame.substr(p.frame.rfind('/') + 1) + "_grad");

  // The forward iteration counter, a loop variable added to the forward
  // frame: it indexes the stacks, and its Exit (the iteration count) is only
  // produced once every push of every iteration is done (the pushes are
  // control inputs of the counter's next value), so the backward loop,
  // which reads it, pops only what was pushed.
  const int first_forward = g.num_nodes();
  // Zero in every iteration of the enclosing forward loop (a Const would be
  // outside it, alive once).
  Output zero = outer ? ops::ZerosLike(g, outer->fwd_iter) : ops::Const(g, int32_t{0});
  Output c_enter = ops::Enter(g, zero, p.frame, false, p.parallel_iterations, "count_enter");
  Output c_merge = ops::Merge(g, {c_enter, c_enter}, "count_merge")[0];
  auto c_switch = ops::Switch(g, c_merge, p.loop_cond, "count_switch");
  Output c_index = ops::Identity(g, c_switch[1], "count_index");
  Output c_anchor = ops::Identity(g, ops::Add(g, c_index, ops::OnesLike(g, c_index)), "count_next");
  Output c_next = ops::NextIteration(g, c_anchor, "count_next_iteration");
  SF_RETURN_IF_ERROR(g.status());
  g.mutable_node(c_merge.node).inputs[1] = c_next;
  Output count = ops::Exit(g, c_switch[0], "count");
  SF_RETURN_IF_ERROR(g.status());
  // The count is a value of the enclosing forward loop that this backward
  // loop reads: the enclosing gradient pops it like the body's own values.
  if (outer)
    for (int id = first_forward; id < g.num_nodes(); ++id) outer->fwd->insert(id);

  LoopGradScope self;
  self.fwd = &p.nodes;
  self.fwd_iter = c_index;
  Output push_index;
  // Built with no hook (the forward frame), on the first push.
  self.fwd_index = [&]() -> Output {
    if (push_index.valid()) return push_index;
    Graph::NodeHook h = g.node_hook();
    g.set_node_hook(nullptr);
    Output o;
    if (outer) o = ops::Enter(g, outer->fwd_index(), p.frame, /*is_constant=*/true, p.parallel_iterations,
                              "outer_index");
    push_index = NestedIndex(g, o, c_index);
    g.set_node_hook(h);
    return push_index;
  };
  loop_grad_scopes.push_back(&self);
  struct ScopePop {
    ~ScopePop() { loop_grad_scopes.pop_back(); }
  } scope_pop;
  if (outer) g.set_node_hook(saved_hook);

  // Which loop variables and read values carry a gradient.
  std::vector<size_t> vars;  // float loop variables
  for (size_t i = 0; i < p.switches.size(); ++i)
    if (IsFloating(p.body_out[i].dtype())) vars.push_back(i);
  std::vector<int> caps;  // float constant Enters
  for (int e : p.const_enters)
    if (IsFloating(g.node(e).output_dtypes[0])) caps.push_back(e);

  std::vector<Output> init;
  init.push_back(ops::Const(g, int32_t{0}));
  for (size_t i : vars) {
    Output dy = grad_of(Output(&g, p.exits[i]));
    if (!dy.valid()) dy = ops::ZerosLike(g, Output(&g, p.exits[i]));
    init.push_back(dy);
  }
  for (int e : caps) init.push_back(ops::ZerosLike(g, g.node(e).inputs[0]));
  SF_RETURN_IF_ERROR(g.status());

  const std::set<int>& fwd = p.nodes;  // grows when a nested loop adds its count
  // The body's gradient walks this loop's nodes (nested loops' included)
  // without its back edges.
  std::set<int> body = p.nodes;
  for (int id : p.next_iterations) body.erase(id);
  int trigger = -1;  // the ControlTrigger between the pushes and the count
  WhileLoopOptions opt;
  opt.name = "backward";
  opt.parallel_iterations = p.parallel_iterations;
  Status body_status;
  auto loop = WhileLoop(
      g, [count](Graph& g, const std::vector<Output>& v) { return ops::Less(g, v[0], count); },
      [&](Graph& g, const std::vector<Output>& v) -> std::vector<Output> {
        Output c = v[0];
        // The forward iteration this backward iteration undoes.
        Output r = ops::Sub(g, ops::Sub(g, count, c), ops::OnesLike(g, c));
        // Nested: [the enclosing backward loops' iterations..., r], the
        // enclosing index brought in by this body's context.
        self.bwd_index = NestedIndex(g, outer ? outer->bwd_index : Output(), r);
        // Forward values the gradient reads come from the stacks; a loop
        // invariant is read from outside directly.
        std::map<Output, Output> popped;
        Graph::NodeHook loop_hook = g.node_hook();
        g.set_node_hook([&](std::vector<Output>* inputs, std::vector<int>* controls) -> Status {
          for (Output& in : *inputs) {
            if (!in.valid() || !fwd.count(in.node)) continue;
            const Node& src = g.node(in.node);
            if (src.op == "Enter" && src.attrs.GetOr<bool>("is_constant", false).value()) {
              in = src.inputs[0];
              continue;
            }
            auto it = popped.find(in);
            if (it != popped.end()) {
              in = it->second;
              continue;
            }
            Graph::NodeHook mine = g.node_hook();
            const std::string stack = p.frame + "/stack_" + std::to_string(g.num_nodes());
            g.set_node_hook(nullptr);
            int push = ops::StackPush(g, in, self.fwd_index(), stack);
            // A push in an untaken branch is dead; the trigger is not, so
            // it orders the pushes before the count without killing it.
            if (push >= 0 && trigger < 0) {
              trigger = g.AddNode("ControlTrigger", {}, {}, "pushes_done");
              if (trigger >= 0) {
                Status s = g.AddControlInput(c_anchor.node, trigger);
                if (!s.ok()) g.RecordError(s);
              }
            }
            if (push >= 0 && trigger >= 0) {
              Status s = g.AddControlInput(trigger, push);
              if (!s.ok()) g.RecordError(s);
            }
            g.set_node_hook(loop_hook);
            Output pop = ops::StackPop(g, self.bwd_index, stack, in.dtype(), in.shape());
            g.set_node_hook(mine);
            // The stacks belong to the step's state in one partition: the
            // pop runs where its push does.
            if (push >= 0 && pop.valid()) {
              Node& pn = g.mutable_node(pop.node);
              pn.device = g.node(push).device;
              pn.attrs.Set("_class", std::string("loc:@") + g.node(push).name);
            }
            popped[in] = pop;
            in = pop;
          }
          return loop_hook ? loop_hook(inputs, controls) : Status::OK();
        });
        std::vector<Output> ys, seeds, xs;
        for (size_t k = 0; k < vars.size(); ++k) {
          ys.push_back(p.body_out[vars[k]]);
          seeds.push_back(v[1 + k]);
          xs.push_back(p.body_in[vars[k]]);
        }
        for (int e : caps) xs.push_back(Output(&g, e));
        auto grads = GradientsWithin(g, ys, xs, seeds, /*allow_unconnected=*/true, &body);
        g.set_node_hook(loop_hook);
        if (!grads.ok()) {
          body_status = grads.status();
          return {};
        }
        std::vector<Output> next{ops::Add(g, c, ops::OnesLike(g, c))};
        for (size_t k = 0; k < vars.size(); ++k) {
          Output d = (*grads)[k];
          next.push_back(d.valid() ? d : ops::ZerosLike(g, v[1 + k]));
        }
        for (size_t k = 0; k < caps.size(); ++k) {
          Output d = (*grads)[vars.size() + k];
          Output acc = v[1 + vars.size() + k];
          next.push_back(d.valid() ? ops::Add(g, acc, d) : acc);
        }
        return next;
      },
      init, opt);
  if (!body_status.ok()) return body_status;
  if (!loop.ok()) return loop.status();
  for (size_t k = 0; k < vars.size(); ++k)
    out.input_grads.push_back({g.node(p.enters[vars[k]]).inputs[0], (*loop)[1 + k]});
  for (size_t k = 0; k < caps.size(); ++k)
    out.input_grads.push_back({g.node(caps[k]).inputs[0], (*loop)[1 + vars.size() + k]});
  SF_RETURN_IF_ERROR(g.status());
  return out;
}

}  // namespace internal
}  // namespace sf
