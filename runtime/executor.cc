#include "runtime/executor.h"

#include <unordered_map>
#include <unordered_set>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/optimizer_spec.h"
#include "runtime/executor_core.h"
#include "runtime/frame_propagator.h"
#include "runtime/plain_propagator.h"

namespace sf {
namespace runtime {

namespace {

thread_local bool t_inline_cheap = false;

// Ops whose work is a hand-off (sends, receives, handles, reads) or in
// proportion to their inputs, so small inputs make them cheap enough for an
// I/O thread (InlineCheapOps).
bool IsCheapOp(const std::string& op) {
  static const std::unordered_set<std::string> kCheap = {
      "NoOp", "Const", "Identity", "_Send", "_Recv", "VarHandle", "ReadVariable", "Assign", "AssignAdd",
      "AssignSub", "AddN", "Add", "Sub", "Mul", "Neg", "Sum"};
  return kCheap.count(op) > 0 || FindOptimizerByOp(op) != nullptr;
}

// The one place a KernelInit is built.
KernelInit MakeKernelInit(const Node& node, const ExecutorEnv& env) {
  KernelInit init;
  init.op = node.op;
  init.node_name = node.name;
  init.attrs = &node.attrs;
  for (const Output& in : node.inputs) init.input_dtypes.push_back(in.dtype());
  init.output_dtypes = node.output_dtypes;
  static_cast<KernelServices&>(init) = env;
  return init;
}

// What an op's trace events are filed under, by what it does: transfers,
// variable and embedding shard calls, queue calls, or plain compute.
const char* TraceCategoryOf(const Node& node) {
  const std::string& op = node.op;
  if (op == "_Send") return "send";
  if (op == "_Recv") return "recv";
  if (op.find("Embedding") != std::string::npos) return "embedding";
  if (op.find("Queue") != std::string::npos) return "queue";
  if (op == "VarHandle") return "variable";
  for (const Output& in : node.inputs)
    if (in.dtype() == DType::kResource) return "variable";  // reads, assigns and updates of a variable
  return "op";
}

// The topology and kernels of spec.nodes: value slots, input slots, out-edges
// (each node's data edges, then its control edges) and one kernel per node
// that runs (a fed node neither waits nor runs).
Status BuildKernelPlan(const Graph& g, const ExecutorSpec& spec, KernelPlan* kp) {
  const int n = static_cast<int>(spec.nodes.size());
  std::unordered_map<int, int> local;  // graph id -> local index
  local.reserve(n * 2);
  for (int i = 0; i < n; ++i) local[spec.nodes[i]] = i;
  std::vector<char> fed_node(n, 0);
  std::vector<std::vector<char>> fed_output(n);
  for (const Output& f : spec.fed) {
    auto it = local.find(f.node);
    if (it == local.end()) continue;
    fed_node[it->second] = 1;
    fed_output[it->second].resize(g.node(f.node).num_outputs(), 0);
    fed_output[it->second][f.index] = 1;
  }
  kp->nodes.resize(n);
  kp->trace_info.resize(n);
  std::vector<std::vector<PlanEdge>> out_edges(n);
  int slots = 0;
  for (int i = 0; i < n; ++i) {
    NodeItem& it = kp->nodes[i];
    const Node& node = g.node(spec.nodes[i]);
    it.where = "node '" + node.name + "' (op " + node.op + ")";
    kp->trace_info[i] = NodeTraceInfo{node.name, node.op, TraceCategoryOf(node)};
    it.output_begin = slots;
    it.num_outputs = node.num_outputs();
    kp->output_dtypes.insert(kp->output_dtypes.end(), node.output_dtypes.begin(), node.output_dtypes.end());
    slots += it.num_outputs;
  }
  kp->num_slots = slots;
  const KernelRegistry& kernels = *kp->env.kernels;
  for (int i = 0; i < n; ++i) {
    NodeItem& it = kp->nodes[i];
    const Node& node = g.node(spec.nodes[i]);
    if (fed_node[i]) continue;
    it.input_begin = static_cast<int>(kp->input_slots.size());
    it.num_inputs = static_cast<int>(node.inputs.size());
    for (int k = 0; k < it.num_inputs; ++k) {
      const Output& in = node.inputs[k];
      auto p = local.find(in.node);
      if (p == local.end())
        return Internal(it.where + ": input '" + in.name() + "' is not in the partition");
      if (fed_node[p->second] && !fed_output[p->second][in.index])
        return InvalidArgument(it.where + " needs '" + in.name() +
                               "', which is not fed while other outputs of its node are");
      kp->input_slots.push_back(kp->nodes[p->second].output_begin + in.index);
      out_edges[p->second].push_back(PlanEdge{i, in.index, k});
      ++it.initial_pending;
    }
    for (int c : node.control_inputs) {
      auto p = local.find(c);
      if (p == local.end())
        return Internal(it.where + ": control input '" + g.node(c).name + "' is not in the partition");
      out_edges[p->second].push_back(PlanEdge{i, 0, -1});
      ++it.initial_pending;
    }
    auto factory = kernels.Find(node.op, DeviceType::kCPU, node.kernel_dtype());
    if (!factory.ok()) return factory.status().WithPrefix(it.where);
    auto kernel = (**factory)(MakeKernelInit(node, kp->env));
    if (!kernel.ok()) return kernel.status().WithPrefix(it.where);
    it.kernel = std::move(kernel).value();
    it.is_async = it.kernel->IsAsync();
    it.cheap = IsCheapOp(node.op);
  }
  for (int i = 0; i < n; ++i) {
    NodeItem& it = kp->nodes[i];
    it.edge_begin = static_cast<int>(kp->edges.size());
    kp->edges.insert(kp->edges.end(), out_edges[i].begin(), out_edges[i].end());
    it.edge_end = static_cast<int>(kp->edges.size());
  }
  auto slot_of = [&](const Output& o) -> Result<int> {
    auto p = local.find(o.node);
    if (p == local.end()) return Internal("'" + o.name() + "' is not in the partition");
    const NodeItem& it = kp->nodes[p->second];
    if (o.index < 0 || o.index >= it.num_outputs)
      return InvalidArgument(it.where + " has no output " + std::to_string(o.index));
    return it.output_begin + o.index;
  };
  for (const Output& f : spec.fed) {
    SF_ASSIGN_OR_RETURN(int s, slot_of(f));
    kp->feed_slots.push_back(s);
  }
  for (const Output& f : spec.fetches) {
    SF_ASSIGN_OR_RETURN(int s, slot_of(f));
    kp->fetch_slots.push_back(s);
  }
  return Status::OK();
}

}  // namespace

InlineCheapOps::InlineCheapOps(bool on) : prev_(t_inline_cheap) { t_inline_cheap = on; }
InlineCheapOps::~InlineCheapOps() { t_inline_cheap = prev_; }
bool InlineCheapOps::Active() { return t_inline_cheap; }

Status CheckOutputsSlow(const KernelPlan& plan, const NodeItem& item, const Tensor* outs) {
  const DType* declared = plan.output_dtypes.data() + item.output_begin;
  for (int i = 0; i < item.num_outputs; ++i) {
    if (!outs[i].valid() && item.outputs_may_be_unset) continue;
    if (outs[i].dtype() != declared[i])
      return Internal("output " + std::to_string(i) + " is " +
                      (outs[i].valid() ? DTypeName(outs[i].dtype()) : "unset") + ", declared " +
                      DTypeName(declared[i]));
  }
  return Status::OK();
}

Executor::~Executor() = default;

int Executor::num_nodes() const { return static_cast<int>(plan_->nodes.size()); }

Result<std::unique_ptr<Executor>> Executor::Create(const Graph& g, const ExecutorSpec& spec,
                                                   const ExecutorEnv& env) {
  if (!env.pool) return Internal("an executor needs a compute pool");
  std::unique_ptr<Executor> ex(new Executor());
  ex->plan_ = std::make_unique<KernelPlan>();
  KernelPlan& kp = *ex->plan_;
  kp.env = env;
  if (!kp.env.kernels) kp.env.kernels = &StandardKernelRegistry();
  SF_RETURN_IF_ERROR(BuildKernelPlan(g, spec, &kp));
  if (FramePlan::Needed(g, spec.nodes)) {
    SF_ASSIGN_OR_RETURN(FramePlan fp, FramePlan::Build(g, spec, &kp));
    ex->frame_ = std::make_unique<FramePlan>(std::move(fp));
  } else {
    ex->plain_ = std::make_unique<PlainPlan>(PlainPlan::Build(kp));
  }
  return ex;
}

void Executor::RunStep(int64_t step_id, std::vector<Tensor> feeds, DoneFn done, StepTrace* trace,
                       std::atomic<uint64_t>* progress) {
  // A short list would leave fed slots empty (the frame propagator would read
  // past its feeds): refuse the step rather than run ops on missing values.
  if (feeds.size() != plan_->feed_slots.size()) {
    done(InvalidArgument("the step has " + std::to_string(feeds.size()) + " feed value(s), the " +
                         "partition expects " + std::to_string(plan_->feed_slots.size())),
         {});
    return;
  }
  if (frame_) {
    RunFrameStep(*plan_, *frame_, step_id, std::move(feeds), std::move(done), trace, progress);
  } else {
    ExecutorState<PlainPropagator>::Run(*plan_, *plain_, step_id, std::move(feeds), std::move(done), trace,
                                        progress);
  }
}

}  // namespace runtime
}  // namespace sf
