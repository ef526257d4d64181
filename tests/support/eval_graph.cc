#include "tests/support/eval_graph.h"

#include <condition_variable>
#include <map>
#include <mutex>

#include "kernels/compute_pool.h"
#include "kernels/cpu/cpu_kernels.h"

namespace sf {
namespace testing {

namespace {
ComputePool& TestPool() {
  static ComputePool* pool = new ComputePool(2);
  return *pool;
}
}  // namespace

Result<std::vector<Tensor>> EvalGraph(const Graph& g, const Feeds& feeds,
                                      const std::vector<Output>& fetches,
                                      const std::vector<int>& targets, InMemoryVariables* vars) {
  SF_RETURN_IF_ERROR(g.status());
  InMemoryVariables local_vars;
  if (!vars) vars = &local_vars;
  std::map<std::pair<int, int>, Tensor> fed;
  for (const auto& f : feeds) fed[{f.first.node, f.first.index}] = f.second;

  // Topological order of what the fetches need (DFS; state 1 = on stack).
  std::vector<int> state(g.num_nodes(), 0), order;
  std::function<Status(int)> visit = [&](int id) -> Status {
    if (state[id] == 2) return Status::OK();
    if (state[id] == 1) return InvalidArgument("the graph has a cycle through node '" + g.node(id).name + "'");
    state[id] = 1;
    const Node& n = g.node(id);
    bool all_fed = n.num_outputs() > 0;
    for (int i = 0; i < n.num_outputs(); ++i) all_fed = all_fed && fed.count({id, i});
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

  std::vector<std::vector<Tensor>> values(g.num_nodes());
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
    auto factory = kernels.Find(n.op, DeviceType::kCPU, n.kernel_dtype());
    if (!factory.ok()) return factory.status().WithPrefix(where);
    KernelInit init;
    init.op = n.op;
    init.node_name = n.name;
    init.attrs = &n.attrs;
    for (const Output& in : n.inputs) init.input_dtypes.push_back(in.dtype());
    init.output_dtypes = n.output_dtypes;
    init.variables = vars;
    auto kernel = (**factory)(init);
    if (!kernel.ok()) return kernel.status().WithPrefix(where);
    std::vector<const Tensor*> inputs;
    for (const Output& in : n.inputs) inputs.push_back(&values[in.node][in.index]);
    OpKernelContext ctx(inputs.data(), static_cast<int>(inputs.size()), values[id].data(),
                        n.num_outputs(), &TestPool(), vars, /*step_id=*/1);
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
  for (const Output& f : fetches) out.push_back(values[f.node][f.index]);
  return out;
}

Result<Tensor> Eval(const Graph& g, Output fetch, const Feeds& feeds, InMemoryVariables* vars) {
  SF_ASSIGN_OR_RETURN(std::vector<Tensor> v, EvalGraph(g, feeds, {fetch}, {}, vars));
  return v[0];
}

}  // namespace testing
}  // namespace sf
