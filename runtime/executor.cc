#include "runtime/executor.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "runtime/control_flow_executor.h"
#include "kernels/compute_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/rendezvous_service.h"

namespace sf {
namespace runtime {

struct Executor::Item {
  std::unique_ptr<OpKernel> kernel;  // null for fed nodes
  bool is_async = false;
  int input_begin = 0, num_inputs = 0;
  int output_begin = 0, num_outputs = 0;
  int consumer_begin = 0, consumer_end = 0;
  int initial_pending = 0;
  const DType* output_dtypes = nullptr;
  std::string where;  // "node 'N' (op OP)"
};

struct Executor::Step {
  int64_t id = 0;
  std::vector<Tensor> values;
  std::unique_ptr<std::atomic<int>[]> pending;
  std::unique_ptr<std::atomic<int>[]> uses;  // per slot, reads still to come
  std::atomic<int> remaining{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  Status status;  // GUARDED_BY(mu)
  DoneFn done;
};

Executor::~Executor() = default;

int Executor::num_nodes() const { return static_cast<int>(nodes_.size()); }

Result<std::unique_ptr<Executor>> Executor::Create(const Graph& g, const ExecutorSpec& spec,
                                                   const ExecutorEnv& env) {
  if (!env.pool) return Internal("an executor needs a compute pool");
  std::unique_ptr<Executor> ex(new Executor());
  ex->env_ = env;
  if (!ex->env_.kernels) ex->env_.kernels = &StandardKernelRegistry();
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
  ex->nodes_.resize(n);
  std::vector<std::vector<int>> consumers(n);
  int slots = 0;
  for (int i = 0; i < n; ++i) {
    Item& it = ex->nodes_[i];
    const Node& node = g.node(spec.nodes[i]);
    it.where = "node '" + node.name + "' (op " + node.op + ")";
    it.output_begin = slots;
    it.num_outputs = node.num_outputs();
    it.output_dtypes = node.output_dtypes.data();
    slots += it.num_outputs;
  }
  ex->num_slots_ = slots;
  const KernelRegistry& kernels = *ex->env_.kernels;
  for (int i = 0; i < n; ++i) {
    Item& it = ex->nodes_[i];
    const Node& node = g.node(spec.nodes[i]);
    if (fed_node[i]) continue;  // a fed node neither waits nor runs
    it.input_begin = static_cast<int>(ex->input_slots_.size());
    it.num_inputs = static_cast<int>(node.inputs.size());
    for (const Output& in : node.inputs) {
      auto p = local.find(in.node);
      if (p == local.end())
        return Internal(it.where + ": input '" + in.name() + "' is not in the partition");
      if (fed_node[p->second] && !fed_output[p->second][in.index])
        return InvalidArgument(it.where + " needs '" + in.name() +
                               "', which is not fed while other outputs of its node are");
      ex->input_slots_.push_back(ex->nodes_[p->second].output_begin + in.index);
      consumers[p->second].push_back(i);
      ++it.initial_pending;
    }
    for (int c : node.control_inputs) {
      auto p = local.find(c);
      if (p == local.end())
        return Internal(it.where + ": control input '" + g.node(c).name + "' is not in the partition");
      consumers[p->second].push_back(i);
      ++it.initial_pending;
    }
    auto factory = kernels.Find(node.op, DeviceType::kCPU, node.kernel_dtype());
    if (!factory.ok()) return factory.status().WithPrefix(it.where);
    KernelInit init;
    init.op = node.op;
    init.node_name = node.name;
    init.attrs = &node.attrs;
    for (const Output& in : node.inputs) init.input_dtypes.push_back(in.dtype());
    init.output_dtypes = node.output_dtypes;
    init.variables = env.variables;
    init.embeddings = env.embeddings;
    init.replication = env.replication;
    init.collectives = env.collectives;
    init.queues = env.queues;
    init.rendezvous = env.rendezvous;
    init.checkpoints = env.checkpoints;
    auto kernel = (**factory)(init);
    if (!kernel.ok()) return kernel.status().WithPrefix(it.where);
    it.kernel = std::move(kernel).value();
    it.is_async = it.kernel->IsAsync();
  }
  for (int i = 0; i < n; ++i) {
    Item& it = ex->nodes_[i];
    it.consumer_begin = static_cast<int>(ex->consumers_.size());
    ex->consumers_.insert(ex->consumers_.end(), consumers[i].begin(), consumers[i].end());
    it.consumer_end = static_cast<int>(ex->consumers_.size());
    if (it.initial_pending == 0) ex->roots_.push_back(i);
  }
  auto slot_of = [&](const Output& o) -> Result<int> {
    auto p = local.find(o.node);
    if (p == local.end()) return Internal("'" + o.name() + "' is not in the partition");
    return ex->nodes_[p->second].output_begin + o.index;
  };
  for (const Output& f : spec.fed) {
    SF_ASSIGN_OR_RETURN(int s, slot_of(f));
    ex->feed_slots_.push_back(s);
  }
  for (const Output& f : spec.fetches) {
    SF_ASSIGN_OR_RETURN(int s, slot_of(f));
    ex->fetch_slots_.push_back(s);
  }
  ex->slot_uses_.assign(slots, 0);
  for (int slot : ex->input_slots_) ++ex->slot_uses_[slot];
  for (int slot : ex->fetch_slots_) ex->slot_uses_[slot] = 0;
  if (ControlFlowExecutor::Needed(g, spec.nodes)) {
    std::vector<OpKernel*> kernels;
    for (const Item& it : ex->nodes_) kernels.push_back(it.kernel.get());
    SF_ASSIGN_OR_RETURN(ex->control_flow_,
                        ControlFlowExecutor::Create(g, spec, std::move(kernels), ex->env_));
  }
  return ex;
}

void Executor::RunStep(int64_t step_id, std::vector<Tensor> feeds, DoneFn done) {
  // A short list would leave fed slots empty (the control-flow path would read
  // past its feeds): refuse the step rather than run ops on missing values.
  if (feeds.size() != feed_slots_.size()) {
    done(InvalidArgument("the step has " + std::to_string(feeds.size()) + " feed value(s), the " +
                         "partition expects " + std::to_string(feed_slots_.size())),
         {});
    return;
  }
  if (control_flow_) {
    control_flow_->RunStep(step_id, std::move(feeds), std::move(done));
    return;
  }
  const int n = num_nodes();
  Step* s = new Step();
  s->id = step_id;
  s->done = std::move(done);
  s->values.resize(num_slots_);
  for (size_t i = 0; i < feed_slots_.size(); ++i) s->values[feed_slots_[i]] = std::move(feeds[i]);
  s->pending.reset(new std::atomic<int>[n]);
  for (int i = 0; i < n; ++i) s->pending[i].store(nodes_[i].initial_pending, std::memory_order_relaxed);
  s->uses.reset(new std::atomic<int>[num_slots_]);
  for (int i = 0; i < num_slots_; ++i) s->uses[i].store(slot_uses_[i], std::memory_order_relaxed);
  s->remaining.store(n, std::memory_order_release);
  if (n == 0) {
    Finish(s);
    return;
  }
  // Roots start on the pool (the caller is an actor thread, which must stay
  // free), dealt to one task per compute thread: a task per root costs a
  // pool round trip per constant.
  const int roots = static_cast<int>(roots_.size());
  const int tasks = std::max(1, std::min(roots, env_.pool->num_threads()));
  for (int t = 0; t < tasks; ++t) {
    env_.pool->Schedule([this, s, t, tasks, roots] {
      // s may be gone after the last Process: nothing touches it afterwards.
      for (int i = t; i < roots; i += tasks) Process(s, roots_[i]);
    });
  }
}

void Executor::Process(Step* s, int n) {
  while (n >= 0) {
    const Item& it = nodes_[n];
    if (it.kernel && !s->failed.load(std::memory_order_relaxed)) {
      if (it.is_async) {
        StartAsync(s, n);
        return;
      }
      RunSync(s, n);
    }
    n = Propagate(s, n);
  }
}

void Executor::RunSync(Step* s, int n) {
  const Item& it = nodes_[n];
  constexpr int kInline = 8;
  const Tensor* inline_inputs[kInline];
  std::vector<const Tensor*> heap_inputs;
  const Tensor** inputs = inline_inputs;
  if (it.num_inputs > kInline) {
    heap_inputs.resize(it.num_inputs);
    inputs = heap_inputs.data();
  }
  const int* slots = input_slots_.data() + it.input_begin;
  for (int i = 0; i < it.num_inputs; ++i) inputs[i] = &s->values[slots[i]];
  OpKernelContext ctx(inputs, it.num_inputs, s->values.data() + it.output_begin, it.num_outputs,
                      env_.pool, env_.variables, s->id, env_.queues,
                      env_.embeddings, env_.replication, env_.collectives);
  it.kernel->Compute(&ctx);
  Check(s, n, ctx.status());
  ReleaseInputs(s, n);
}

void Executor::ReleaseInputs(Step* s, int n) {
  const Item& it = nodes_[n];
  const int* slots = input_slots_.data() + it.input_begin;
  for (int i = 0; i < it.num_inputs; ++i) {
    const int slot = slots[i];
    const int u = slot_uses_[slot];
    // A slot read once needs no counter: this op was its only reader.
    if (u == 1 || (u > 1 && s->uses[slot].fetch_sub(1, std::memory_order_acq_rel) == 1))
      s->values[slot] = Tensor();
  }
}

void Executor::StartAsync(Step* s, int n) {
  const Item& it = nodes_[n];
  // The context and its input pointers outlive this call: the kernel finishes
  // later, on whatever thread answers it.
  struct Pending {
    std::vector<const Tensor*> inputs;
    std::unique_ptr<OpKernelContext> ctx;
  };
  auto* p = new Pending();
  p->inputs.resize(it.num_inputs);
  const int* slots = input_slots_.data() + it.input_begin;
  for (int i = 0; i < it.num_inputs; ++i) p->inputs[i] = &s->values[slots[i]];
  p->ctx = std::make_unique<OpKernelContext>(p->inputs.data(), it.num_inputs,
                                             s->values.data() + it.output_begin, it.num_outputs,
                                             env_.pool, env_.variables, s->id, env_.queues,
                                             env_.embeddings, env_.replication, env_.collectives);
  it.kernel->ComputeAsync(p->ctx.get(), [this, s, n, p] {
    Check(s, n, p->ctx->status());
    delete p;
    ReleaseInputs(s, n);
    // Continue on a compute thread: the callback may run on an actor thread.
    env_.pool->Schedule([this, s, n] {
      int next = Propagate(s, n);
      if (next >= 0) Process(s, next);
    });
  });
}

void Executor::Check(Step* s, int n, const Status& kernel_status) {
  const Item& it = nodes_[n];
  if (!kernel_status.ok()) {
    Fail(s, kernel_status.WithPrefix(it.where));
    return;
  }
  const Tensor* out = s->values.data() + it.output_begin;
  for (int i = 0; i < it.num_outputs; ++i) {
    if (out[i].dtype() != it.output_dtypes[i]) {
      Fail(s, Internal(it.where + ": output " + std::to_string(i) + " is " +
                       (out[i].valid() ? DTypeName(out[i].dtype()) : "unset") + ", declared " +
                       DTypeName(it.output_dtypes[i])));
      return;
    }
  }
}

void Executor::Fail(Step* s, const Status& st) {
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->status.ok()) s->status = st;
    s->failed.store(true, std::memory_order_relaxed);
  }
  if (env_.rendezvous) env_.rendezvous->Abort(s->id, st);
}

int Executor::Propagate(Step* s, int n) {
  const Item& it = nodes_[n];
  int next = -1;
  for (int c = it.consumer_begin; c < it.consumer_end; ++c) {
    const int k = consumers_[c];
    if (s->pending[k].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      if (next < 0) next = k;
      else env_.pool->Schedule([this, s, k] { Process(s, k); });
    }
  }
  if (s->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) Finish(s);
  return next;
}

void Executor::Finish(Step* s) {
  Status st;
  {
    std::lock_guard<std::mutex> l(s->mu);
    st = s->status;
  }
  std::vector<Tensor> out;
  if (st.ok()) {
    out.reserve(fetch_slots_.size());
    for (int slot : fetch_slots_) out.push_back(s->values[slot]);
  }
  DoneFn done = std::move(s->done);
  delete s;
  done(std::move(st), std::move(out));
}

}  // namespace runtime
}  // namespace sf
