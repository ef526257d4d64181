#include "tests/support/eval_graph.h"

#include <condition_variable>
#include <map>
#include <mutex>

#include "runtime/executor.h"
#include "runtime/plan.h"
#include "kernels/compute_pool.h"
#include "kernels/cpu/cpu_kernels.h"

namespace sf {
namespace testing {

namespace {
ComputePool& TestPool() {
  static ComputePool* pool = new ComputePool(2);
  return *pool;
}

// Loops need frames and iterations: such graphs run on the partition
// executor (whose control-flow path the Cond handling below cross-checks).
Result<std::vector<Tensor>> EvalWithExecutor(const Graph& g, const Feeds& feeds,
                                             const std::vector<Output>& fetches,
                                             const std::vector<int>& targets,
                                             InMemoryVariables* vars) {
  std::vector<Output> fed;
  std::vector<Tensor> values;
  for (const auto& f : feeds) {
    fed.push_back(f.first);
    values.push_back(f.second);
  }
  SF_ASSIGN_OR_RETURN(std::vector<int> order, runtime::PruneAndSort(g, fed, fetches, targets));
  runtime::ExecutorSpec spec{order, fed, fetches};
  runtime::ExecutorEnv env;
  env.pool = &TestPool();
  env.variables = vars;
  env.embeddings = vars;
  SF_ASSIGN_OR_RETURN(auto ex, runtime::Executor::Create(g, spec, env));
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  Status status;
  std::vector<Tensor> out;
  ex->RunStep(1, std::move(values), [&](Status st, std::vector<Tensor> o) {
    std::lock_guard<std::mutex> l(mu);
    status = std::move(st);
    out = std::move(o);
    finished = true;
    cv.notify_all();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return finished; });
  SF_RETURN_IF_ERROR(status);
  return out;
}

bool IsControlFlowOp(const std::string& op) {
  return op == "Switch" || op == "Merge" || op == "Enter" || op == "Exit" ||
         op == "NextIteration" || op == "LoopCond" || op == "ControlTrigger" || op == "StackPop";
}
}  // namespace

Result<std::vector<Tensor>> EvalGraph(const Graph& g, const Feeds& feeds,
                                      const std::vector<Output>& fetches,
                                      const ControlDeps& target_deps, InMemoryVariables* vars) {
  SF_ASSIGN_OR_RETURN(const std::vector<int> targets, target_deps.NodesIn(g));
  SF_RETURN_IF_ERROR(g.status());
  InMemoryVariables local_vars;
  if (!vars) vars = &local_vars;
  std::map<std::pair<int, int>, Tensor> fed;
  for (const auto& f : feeds) fed[{f.first.node, f.first.index}] = f.second;

  // Topological order of what the fetches need (DFS; state 1 = on stack).
  std::vector<int> state(g.num_nodes(), 0), order;
  bool has_loop = false;
  std::function<Status(int)> visit = [&](int id) -> Status {
    if (has_loop) return Status::OK();  // the executor will order the nodes
    if (state[id] == 2) return Status::OK();
    if (state[id] == 1) return InvalidArgument("the graph has a cycle through node '" + g.node(id).name + "'");
    state[id] = 1;
    const Node& n = g.node(id);
    bool all_fed = n.num_outputs() > 0;
    for (int i = 0; i < n.num_outputs(); ++i) all_fed = all_fed && fed.count({id, i});
    if (n.op == "Enter") has_loop = true;
    if (has_loop) return Status::OK();
    if (!all_fed) {
      for (const Output& in : n.inputs) SF_RETURN_IF_ERROR(visit(in.node));
      for (int c : n.control_inputs) SF_RETURN_IF_ERROR(visit(c));
    }
    state[id] = 2;
    order.push_back(id);
    return Status::OK();
  };
  for (const Output& f : fetches) SF_RETURN_IF_ERROR(visit(f.node));
  for (int t : targets) SF_RETURN_IF_ERROR(visit(t));
  if (has_loop) return EvalWithExecutor(g, feeds, fetches, targets, vars);

  std::vector<std::vector<Tensor>> values(g.num_nodes());
  std::vector<char> dead(g.num_nodes(), 0);
  const KernelRegistry& kernels = StandardKernelRegistry();
  for (int id : order) {
    const Node& n = g.node(id);
    values[id].resize(n.num_outputs());
    bool all_fed = n.num_outputs() > 0;
    for (int i = 0; i < n.num_outputs(); ++i) {
      auto it = fed.find({id, i});
      if (it == fed.end()) all_fed = false;
      else values[id][i] = it->second;
    }
    if (all_fed) continue;
    const std::string where = "node '" + n.name + "' (op " + n.op + ")";
    // Dead values (a Switch's untaken output) are invalid tensors: they make
    // every consumer dead except a Merge, which is dead only when all are.
    bool any_live = false, any_dead = false;
    for (const Output& in : n.inputs) {
      if (values[in.node][in.index].valid()) any_live = true;
      else any_dead = true;
    }
    for (int c : n.control_inputs) any_dead = any_dead || dead[c];
    if (n.op == "ControlTrigger") any_dead = false;  // never dead
    if (n.op == "Merge" ? !any_live : any_dead) {
      dead[id] = 1;
      continue;
    }
    auto factory = kernels.Find(n.op, DeviceType::kCPU, n.kernel_dtype());
    if (!factory.ok()) return factory.status().WithPrefix(where);
    KernelInit init;
    init.op = n.op;
    init.node_name = n.name;
    init.attrs = &n.attrs;
    for (const Output& in : n.inputs) init.input_dtypes.push_back(in.dtype());
    init.output_dtypes = n.output_dtypes;
    init.variables = vars;
    init.embeddings = vars;
    auto kernel = (**factory)(init);
    if (!kernel.ok()) return kernel.status().WithPrefix(where);
    std::vector<const Tensor*> inputs;
    for (const Output& in : n.inputs) inputs.push_back(&values[in.node][in.index]);
    OpKernelContext ctx(inputs.data(), static_cast<int>(inputs.size()), values[id].data(),
                        n.num_outputs(), &TestPool(), &init, /*step_id=*/1);
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false;
    (*kernel)->ComputeAsync(&ctx, [&] {
      std::lock_guard<std::mutex> l(mu);
      finished = true;
      cv.notify_all();
    });
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return finished; });
    if (!ctx.status().ok()) return ctx.status().WithPrefix(where);
    for (int i = 0; i < n.num_outputs(); ++i) {
      const Tensor& t = values[id][i];
      if (!t.valid() && IsControlFlowOp(n.op)) continue;  // a dead output
      if (!t.valid()) return Internal(where + ": kernel left output " + std::to_string(i) + " unset");
      if (t.dtype() != n.output_dtypes[i])
        return Internal(where + ": kernel produced " + DTypeName(t.dtype()) + " for output " +
                        std::to_string(i) + " declared " + DTypeName(n.output_dtypes[i]));
      if (!n.output_shapes[i].CompatibleWith(t.shape()))
        return Internal(where + ": kernel produced shape " + ShapeString(t.shape()) +
                        " for output declared " + n.output_shapes[i].ToString());
    }
  }
  std::vector<Tensor> out;
  for (const Output& f : fetches) {
    if (!values[f.node][f.index].valid())
      return InvalidArgument("fetch '" + f.name() + "' is dead: it comes from a branch that was not taken");
    out.push_back(values[f.node][f.index]);
  }
  return out;
}

Result<Tensor> Eval(const Graph& g, Output fetch, const Feeds& feeds, InMemoryVariables* vars) {
  SF_ASSIGN_OR_RETURN(std::vector<Tensor> v, EvalGraph(g, feeds, {fetch}, {}, vars));
  return v[0];
}

}  // namespace testing
}  // namespace sf
