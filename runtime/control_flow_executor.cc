#include "runtime/control_flow_executor.h"

#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "kernels/compute_pool.h"
#include "kernels/rendezvous_service.h"
#include "kernels/step_stacks.h"

namespace sf {
namespace runtime {

namespace {

enum class Kind : uint8_t {
  kOther, kSwitch, kMerge, kEnter, kExit, kNextIteration, kLoopCond, kControlTrigger, kStackPop,
  kSend, kRecv
};

Kind KindOf(const std::string& op) {
  if (op == "Switch") return Kind::kSwitch;
  if (op == "Merge") return Kind::kMerge;
  if (op == "Enter") return Kind::kEnter;
  if (op == "Exit") return Kind::kExit;
  if (op == "NextIteration") return Kind::kNextIteration;
  if (op == "LoopCond") return Kind::kLoopCond;
  if (op == "ControlTrigger") return Kind::kControlTrigger;
  if (op == "StackPop") return Kind::kStackPop;
  if (op == "_Send") return Kind::kSend;
  if (op == "_Recv") return Kind::kRecv;
  return Kind::kOther;
}

}  // namespace

struct ControlFlowExecutor::PlanNode {
  OpKernel* kernel = nullptr;  // null for a fed node
  bool is_async = false;
  Kind kind = Kind::kOther;
  int input_begin = 0, num_inputs = 0;  // input entries, within the frame's iterations
  int frame = 0;
  int local = 0;  // index among the frame's nodes
  int child_frame = -1;  // Enter: the frame it enters
  bool is_constant = false;
  int edge_begin = 0, edge_end = 0;
  int initial_pending = 0;
  std::vector<DType> output_dtypes;
  std::vector<std::pair<int, int>> feeds;    // (output, feed index)
  std::vector<std::pair<int, int>> fetches;  // (output, fetch index)
  std::string where;
};

struct ControlFlowExecutor::Edge {
  int dst;
  int src_output;
  int dst_input;  // -1: a control edge
};

struct ControlFlowExecutor::StaticFrame {
  std::string name;  // "" for the root frame
  int parent = -1;
  int64_t parallel_iterations = 10;
  int64_t maximum_iterations = -1;
  int num_enters = 0;           // Enter nodes feeding one instance
  std::vector<int> nodes;       // nodes running in the frame
  std::vector<int> init_pending;  // per frame node: what it waits for in a new iteration
  int num_inputs = 0;             // input entries of one iteration
  std::vector<int> zero_pending;  // of those, nodes waiting for nothing
  std::vector<int> exits;
};

// One iteration of one frame instance: the inputs its ops received and what
// they still wait for.
struct ControlFlowExecutor::Iter {
  std::vector<Tensor> inputs;  // per input entry of the frame's nodes; invalid = dead or not yet
  std::vector<int> pending;    // per frame node (PlanNode::local)
  std::vector<int> dead;       // per frame node, dead inputs received
  int outstanding_ops = 0;     // ready or running
  int outstanding_frames = 0;  // child frame instances still alive
  size_t completed = 0;
};

// One instance of a loop (a static frame entered from one parent iteration).
struct ControlFlowExecutor::Frame {
  int sframe = 0;
  Frame* parent = nullptr;
  int64_t parent_iter = 0;
  // Names the instance the same way in every partition (frame names and
  // parent iterations), so _Send/_Recv of one iteration meet.
  std::string key;
  std::deque<Iter*> iters;
  int64_t base_iter = 0;         // iteration number of iters.front()
  int64_t iteration_count = -1;  // highest iteration created
  int pending_enters = 0;
  std::vector<std::pair<int, Tensor>> invariants;  // constant Enters: (node, value)
  std::vector<std::pair<int, Tensor>> deferred;    // NextIteration values for iteration_count+1
  std::set<int> live_exits;
  std::map<std::pair<int64_t, int>, Frame*> children;  // (iteration, static frame)
  Iter* iter(int64_t i) { return iters[static_cast<size_t>(i - base_iter)]; }
};

struct ControlFlowExecutor::Task {
  int node;
  Frame* frame;
  int64_t iter;
  Iter* it;  // alive while the task is outstanding; read without the lock
  bool dead;
};

struct ControlFlowExecutor::Step {
  int64_t id = 0;
  std::mutex mu;
  Frame root;
  int64_t outstanding = 0;  // GUARDED_BY(mu)
  bool failed = false;      // GUARDED_BY(mu)
  std::atomic<bool> failed_hint{false};
  Status status;            // GUARDED_BY(mu)
  std::vector<Tensor> feeds;
  std::vector<Tensor> fetched;
  std::vector<char> fetched_dead;
  StepStacks stacks;  // the loop-gradient stacks, gone with the step
  Executor::DoneFn done;
};

ControlFlowExecutor::~ControlFlowExecutor() = default;

bool ControlFlowExecutor::Needed(const Graph& g, const std::vector<int>& nodes) {
  for (int id : nodes) {
    const Kind k = KindOf(g.node(id).op);
    if (k != Kind::kOther && k != Kind::kSend) return true;
  }
  return false;
}

Result<std::shared_ptr<ControlFlowExecutor>> ControlFlowExecutor::Create(
    const Graph& g, const ExecutorSpec& spec, std::vector<OpKernel*> kernels, const ExecutorEnv& env) {
  std::shared_ptr<ControlFlowExecutor> ex(new ControlFlowExecutor());
  ex->env_ = env;
  const int n = static_cast<int>(spec.nodes.size());
  std::unordered_map<int, int> local;
  for (int i = 0; i < n; ++i) local[spec.nodes[i]] = i;
  ex->nodes_.resize(n);
  std::vector<char> fed(n, 0);
  for (size_t f = 0; f < spec.fed.size(); ++f) {
    auto it = local.find(spec.fed[f].node);
    if (it == local.end()) continue;
    fed[it->second] = 1;
    ex->nodes_[it->second].feeds.push_back({spec.fed[f].index, static_cast<int>(f)});
  }
  for (size_t f = 0; f < spec.fetches.size(); ++f) {
    auto it = local.find(spec.fetches[f].node);
    if (it == local.end()) return Internal("fetch '" + spec.fetches[f].name() + "' is not in the partition");
    ex->nodes_[it->second].fetches.push_back({spec.fetches[f].index, static_cast<int>(f)});
  }
  ex->num_fetches_ = static_cast<int>(spec.fetches.size());

  // Frames: a node runs in the frame its inputs come from; Enter's outputs
  // are in its child frame, Exit's in its parent. The nodes are in
  // topological order apart from NextIteration -> Merge back edges.
  ex->frames_.push_back(StaticFrame());
  std::map<std::pair<int, std::string>, int> frame_ids;
  std::vector<int> out_frame(n, -1);
  std::vector<std::vector<Edge>> out_edges(n);
  for (int i = 0; i < n; ++i) {
    PlanNode& pn = ex->nodes_[i];
    const Node& node = g.node(spec.nodes[i]);
    pn.where = "node '" + node.name + "' (op " + node.op + ")";
    pn.kernel = kernels[i];
    pn.is_async = pn.kernel && pn.kernel->IsAsync();
    pn.kind = KindOf(node.op);
    pn.output_dtypes = node.output_dtypes;
    int frame = -1;
    auto take = [&](int producer) -> Status {
      if (out_frame[producer] < 0) return Status::OK();  // a back edge
      if (frame < 0) frame = out_frame[producer];
      else if (frame != out_frame[producer])
        return InvalidArgument(pn.where + " mixes values of loop frames '" + ex->frames_[frame].name +
                               "' and '" + ex->frames_[out_frame[producer]].name +
                               "' (use a value from outside a loop inside it only through its builder)");
      return Status::OK();
    };
    if (!fed[i]) {
      pn.num_inputs = static_cast<int>(node.inputs.size());
      for (int k = 0; k < pn.num_inputs; ++k) {
        const Output& in = node.inputs[k];
        const int p = local.at(in.node);
        SF_RETURN_IF_ERROR(take(p));
        out_edges[p].push_back(Edge{i, in.index, k});
      }
      for (int c : node.control_inputs) {
        const int p = local.at(c);
        SF_RETURN_IF_ERROR(take(p));
        out_edges[p].push_back(Edge{i, 0, -1});
      }
      if (pn.kind == Kind::kMerge) {
        pn.initial_pending = 1 + 2 * static_cast<int>(node.control_inputs.size());
      } else {
        pn.initial_pending = pn.num_inputs + static_cast<int>(node.control_inputs.size());
      }
    }
    if (frame < 0) frame = 0;
    pn.frame = frame;
    out_frame[i] = frame;
    StaticFrame* sf = &ex->frames_[frame];
    if (pn.kind == Kind::kEnter) {
      auto name = node.attrs.Get<std::string>("frame_name");
      if (!name.ok() || name->empty())
        return InvalidArgument(pn.where + " needs a non-empty 'frame_name' attribute");
      auto key = std::make_pair(frame, *name);
      auto it = frame_ids.find(key);
      if (it == frame_ids.end()) {
        it = frame_ids.emplace(key, static_cast<int>(ex->frames_.size())).first;
        StaticFrame child;
        child.name = *name;
        child.parent = frame;
        ex->frames_.push_back(child);
        sf = &ex->frames_[frame];
      }
      pn.child_frame = it->second;
      auto is_constant = node.attrs.GetOr<bool>("is_constant", false);
      auto par = node.attrs.GetOr<int64_t>("parallel_iterations", 10);
      if (!is_constant.ok() || !par.ok())
        return InvalidArgument(pn.where + ": bad attribute: " +
                               (is_constant.ok() ? par.status() : is_constant.status()).ToString());
      pn.is_constant = *is_constant;
      StaticFrame& cf = ex->frames_[pn.child_frame];
      cf.parallel_iterations = std::max<int64_t>(1, *par);
      ++cf.num_enters;
      out_frame[i] = pn.child_frame;
    } else if (pn.kind == Kind::kExit || pn.kind == Kind::kNextIteration) {
      if (frame == 0)
        return InvalidArgument(pn.where + " is not inside a loop (its input comes from no Enter)");
      if (pn.kind == Kind::kExit) {
        sf->exits.push_back(i);
        out_frame[i] = sf->parent;
      }
    } else if (pn.kind == Kind::kLoopCond) {
      if (frame == 0) return InvalidArgument(pn.where + " is not inside a loop");
      auto max_iter = node.attrs.GetOr<int64_t>("maximum_iterations", -1);
      if (!max_iter.ok()) return max_iter.status().WithPrefix(pn.where);
      sf->maximum_iterations = *max_iter;
    }
    pn.local = static_cast<int>(sf->nodes.size());
    pn.input_begin = sf->num_inputs;
    sf->num_inputs += pn.num_inputs;
    sf->nodes.push_back(i);
    sf->init_pending.push_back(pn.initial_pending);
  }
  for (int i = 0; i < n; ++i) {
    if (!ex->nodes_[i].fetches.empty() && out_frame[i] != 0)
      return InvalidArgument("cannot fetch an output of " + ex->nodes_[i].where + ": it is inside loop '" +
                             ex->frames_[out_frame[i]].name + "' (fetch the loop's results instead)");
  }
  for (int i = 0; i < n; ++i) {
    PlanNode& pn = ex->nodes_[i];
    pn.edge_begin = static_cast<int>(ex->edges_.size());
    ex->edges_.insert(ex->edges_.end(), out_edges[i].begin(), out_edges[i].end());
    pn.edge_end = static_cast<int>(ex->edges_.size());
    if (pn.initial_pending == 0) {
      if (pn.frame == 0) ex->roots_.push_back(i);
      else ex->frames_[pn.frame].zero_pending.push_back(i);
    }
  }
  return ex;
}

void ControlFlowExecutor::RunStep(int64_t step_id, std::vector<Tensor> feeds, Executor::DoneFn done) {
  Step* s = new Step();
  s->id = step_id;
  s->done = std::move(done);
  s->feeds = std::move(feeds);
  s->fetched.resize(num_fetches_);
  s->fetched_dead.assign(num_fetches_, 0);
  std::vector<Task> ready;
  {
    std::lock_guard<std::mutex> l(s->mu);
    NewIteration(s, &s->root, &ready);
    Iter* it = s->root.iter(0);
    for (int r : roots_) {
      ++it->outstanding_ops;
      ++s->outstanding;
      ready.push_back(Task{r, &s->root, 0, it, false});
    }
  }
  if (ready.empty()) {
    Finish(s);
    return;
  }
  // The caller is an actor thread: every op starts on the pool.
  Schedule(s, &ready, 0);
}

void ControlFlowExecutor::Schedule(Step* s, std::vector<Task>* ready, size_t from) {
  for (size_t i = from; i < ready->size(); ++i) {
    Task t = (*ready)[i];
    env_.pool->Schedule([this, s, t] { Process(s, t); });
  }
}

void ControlFlowExecutor::Process(Step* s, Task t) {
  std::vector<Tensor> outs;
  Status st;
  if (RunKernel(s, t, &outs, &st)) Complete(s, t, &outs, st);
}

bool ControlFlowExecutor::RunKernel(Step* s, const Task& t, std::vector<Tensor>* outs, Status* st) {
  const PlanNode& pn = nodes_[t.node];
  outs->assign(pn.output_dtypes.size(), Tensor());
  *st = Status::OK();
  if (s->failed_hint.load(std::memory_order_relaxed)) return true;
  // A dead _Send still runs: the receiving partition learns the value is dead.
  if (t.dead && pn.kind != Kind::kSend) return true;
  if (!pn.kernel) {
    for (const auto& f : pn.feeds) (*outs)[f.first] = s->feeds[f.second];
    return true;
  }
  Iter* it = t.it;
  constexpr int kInline = 8;
  const Tensor* inline_inputs[kInline];
  std::vector<const Tensor*> heap_inputs;
  const Tensor** inputs = inline_inputs;
  if (pn.num_inputs > kInline) {
    heap_inputs.resize(pn.num_inputs);
    inputs = heap_inputs.data();
  }
  static const Tensor* const kDead = new Tensor();
  for (int i = 0; i < pn.num_inputs; ++i) inputs[i] = t.dead ? kDead : &it->inputs[pn.input_begin + i];
  if (pn.is_async) {
    struct Pending {
      std::vector<const Tensor*> inputs;
      std::vector<Tensor> outs;
      std::unique_ptr<OpKernelContext> ctx;
    };
    auto* p = new Pending();
    p->inputs.assign(inputs, inputs + pn.num_inputs);
    p->outs.resize(pn.output_dtypes.size());
    p->ctx = std::make_unique<OpKernelContext>(p->inputs.data(), pn.num_inputs, p->outs.data(),
                                               static_cast<int>(p->outs.size()), env_.pool, env_.variables,
                                               s->id, env_.queues, env_.embeddings, env_.replication,
                                               env_.collectives);
    p->ctx->set_frame(&t.frame->key, t.iter);
    p->ctx->set_step_stacks(&s->stacks);
    pn.kernel->ComputeAsync(p->ctx.get(), [this, s, t, p] {
      // Continue on a compute thread: the callback may run on an actor thread.
      env_.pool->Schedule([this, s, t, p] {
        Status kst = p->ctx->status();
        std::vector<Tensor> o = std::move(p->outs);
        delete p;
        Complete(s, t, &o, kst);
      });
    });
    return false;
  }
  OpKernelContext ctx(inputs, pn.num_inputs, outs->data(), static_cast<int>(outs->size()), env_.pool,
                      env_.variables, s->id, env_.queues, env_.embeddings, env_.replication,
                      env_.collectives);
  ctx.set_frame(&t.frame->key, t.iter);
  ctx.set_step_stacks(&s->stacks);
  pn.kernel->Compute(&ctx);
  *st = ctx.status();
  return true;
}

void ControlFlowExecutor::Complete(Step* s, const Task& first, std::vector<Tensor>* first_outs,
                                   const Status& first_st) {
  Task t = first;
  std::vector<Tensor> outs = std::move(*first_outs);
  Status st = first_st;
  // Ops this thread runs next: cheap ones (see Cheap) all stay here, with at
  // most one other op; the rest go to the pool.
  std::vector<Task> local;
  while (true) {
    const PlanNode& pn = nodes_[t.node];
    bool dead = t.dead;
    if (!dead && st.ok() && pn.kernel) {
      // Control-flow kernels leave dead outputs unset; other kernels set all.
      for (size_t i = 0; i < outs.size(); ++i) {
        if (!outs[i].valid() && pn.kind != Kind::kOther) continue;
        if (outs[i].dtype() != pn.output_dtypes[i]) {
          st = Internal("output " + std::to_string(i) + " is " +
                        (outs[i].valid() ? DTypeName(outs[i].dtype()) : "unset") + ", declared " +
                        DTypeName(pn.output_dtypes[i]));
          break;
        }
      }
    }
    if (pn.kernel) {
      // The inputs are read; free them now rather than with the iteration.
      Iter* it = t.it;
      for (int i = 0; i < pn.num_inputs; ++i) it->inputs[pn.input_begin + i] = Tensor();
    }
    std::vector<Task> ready;
    bool finish = false;
    {
      std::lock_guard<std::mutex> l(s->mu);
      // A failed _Recv carries another partition's error: report it as is.
      if (!st.ok()) FailLocked(s, pn.kind == Kind::kRecv ? st : st.WithPrefix(pn.where));
      if (s->failed) dead = true;  // drain: what is left runs dead
      if (dead) {
        for (auto& o : outs) o = Tensor();
      }
      Propagate(s, t, &outs, dead, &ready);
      Iter* it = t.it;
      --it->outstanding_ops;
      ++it->completed;
      --s->outstanding;
      Cleanup(s, t.frame, &ready);
      finish = s->outstanding == 0;
    }
    if (finish) {
      Finish(s);
      return;
    }
    bool have_other = false;
    for (const Task& r : local) have_other = have_other || !Cheap(r);
    for (const Task& r : ready) {
      const bool cheap = Cheap(r);
      if (cheap || !have_other) {
        local.push_back(r);
        have_other = have_other || !cheap;
      } else {
        env_.pool->Schedule([this, s, r] { Process(s, r); });
      }
    }
    while (true) {
      if (local.empty()) return;
      t = local.back();
      local.pop_back();
      if (RunKernel(s, t, &outs, &st)) break;  // else it continues asynchronously
    }
  }
}

bool ControlFlowExecutor::Cheap(const Task& t) const {
  const PlanNode& pn = nodes_[t.node];
  if (t.dead || pn.kind != Kind::kOther || !pn.kernel) return true;
  // Ops on small tensors (loop counters, scalars) cost less than a pool
  // round trip; the inputs of a ready op are all in place.
  constexpr int64_t kSmall = 1024;
  int64_t elements = 0;
  for (int i = 0; i < pn.num_inputs; ++i) elements += t.it->inputs[pn.input_begin + i].num_elements();
  return elements <= kSmall && !pn.is_async;
}

void ControlFlowExecutor::FailLocked(Step* s, const Status& st) {
  // Pending receives of every partition of the step fail too; their
  // callbacks only schedule work, so calling out under s->mu is safe.
  if (s->status.ok() && env_.rendezvous) env_.rendezvous->Abort(s->id, st);
  if (s->status.ok()) s->status = st;
  s->failed = true;
  s->failed_hint.store(true, std::memory_order_relaxed);
}

void ControlFlowExecutor::Propagate(Step* s, const Task& t, std::vector<Tensor>* outs, bool dead,
                                    std::vector<Task>* ready) {
  const PlanNode& pn = nodes_[t.node];
  Frame* f = t.frame;
  switch (pn.kind) {
    case Kind::kEnter: {
      Frame* child = ChildFrame(s, f, t.iter, pn.child_frame, ready);
      --child->pending_enters;
      if (pn.is_constant) {
        child->invariants.push_back({t.node, dead ? Tensor() : (*outs)[0]});
        for (int64_t i = child->base_iter; i <= child->iteration_count; ++i)
          Deliver(s, child, i, t.node, *outs, dead, ready);
      } else {
        Deliver(s, child, 0, t.node, *outs, dead, ready);
      }
      Cleanup(s, child, ready);
      return;
    }
    case Kind::kExit:
      // A dead Exit is dropped: the loop's frame sends one dead value per
      // Exit that never produced a live one when the frame finishes.
      if (dead || !(*outs)[0].valid()) return;
      f->live_exits.insert(t.node);
      Deliver(s, f->parent, f->parent_iter, t.node, *outs, false, ready);
      return;
    case Kind::kNextIteration: {
      if (dead || !(*outs)[0].valid()) return;  // the loop ends here
      const int64_t next = t.iter + 1;
      if (next <= f->iteration_count) {
        Deliver(s, f, next, t.node, *outs, false, ready);
      } else if (next - f->base_iter < frames_[f->sframe].parallel_iterations) {
        NewIteration(s, f, ready);
        Deliver(s, f, next, t.node, *outs, false, ready);
      } else {
        f->deferred.push_back({t.node, (*outs)[0]});
      }
      return;
    }
    case Kind::kLoopCond: {
      const StaticFrame& sf = frames_[f->sframe];
      if (!dead && sf.maximum_iterations >= 0 && t.iter >= sf.maximum_iterations &&
          (*outs)[0].valid() && (*outs)[0].flat<bool>()(0)) {
        FailLocked(s, InvalidArgument("loop '" + sf.name + "' exceeded its maximum_iterations (" +
                                      std::to_string(sf.maximum_iterations) + ")"));
        for (auto& o : *outs) o = Tensor();
        dead = true;
      }
      break;
    }
    default:
      break;
  }
  Deliver(s, f, t.iter, t.node, *outs, dead, ready);
}

void ControlFlowExecutor::Deliver(Step* s, Frame* f, int64_t iter, int src,
                                  const std::vector<Tensor>& outs, bool dead,
                                  std::vector<Task>* ready) {
  const PlanNode& sn = nodes_[src];
  Iter* it = f->iter(iter);
  if (f == &s->root) {
    // Fetches are root-frame values (an Exit's lands here when its loop ends).
    for (const auto& fe : sn.fetches) {
      if (dead || !outs[fe.first].valid()) s->fetched_dead[fe.second] = 1;
      else s->fetched[fe.second] = outs[fe.first];
    }
  }
  for (int e = sn.edge_begin; e < sn.edge_end; ++e) {
    const Edge& edge = edges_[e];
    const int d = edge.dst;
    const PlanNode& dn = nodes_[d];
    const bool control = edge.dst_input < 0;
    const bool in_dead = dead || (!control && !outs[edge.src_output].valid());
    bool fire = false, fire_dead = false;
    int& pending = it->pending[dn.local];
    int& dead_count = it->dead[dn.local];
    if (dn.kind == Kind::kMerge) {
      if (control) {
        pending -= 2;
        fire_dead = dead_count == dn.num_inputs;
        fire = pending == 0 || (pending == 1 && fire_dead);
        if (fire && fire_dead) pending = 0;
      } else if (!in_dead) {
        // Only the first live input counts; the Merge fires once.
        if (pending & 1) {
          it->inputs[dn.input_begin + edge.dst_input] = outs[edge.src_output];
          pending -= 1;
          fire = pending == 0;
        }
      } else {
        ++dead_count;
        // A dead Enter kills a loop Merge at once: its back edge cannot
        // bring a value into iteration 0.
        fire_dead = dead_count == dn.num_inputs || sn.kind == Kind::kEnter;
        fire = pending == 1 && fire_dead;
        if (fire) pending = 0;
      }
    } else {
      if (in_dead) ++dead_count;
      else if (!control) it->inputs[dn.input_begin + edge.dst_input] = outs[edge.src_output];
      fire = --pending == 0;
      fire_dead = dead_count > 0 && dn.kind != Kind::kControlTrigger;
    }
    if (fire) {
      ++it->outstanding_ops;
      ++s->outstanding;
      ready->push_back(Task{d, f, iter, it, fire_dead});
    }
  }
}

ControlFlowExecutor::Iter* ControlFlowExecutor::NewIteration(Step* s, Frame* f,
                                                             std::vector<Task>* ready) {
  Iter* it = new Iter();
  const StaticFrame& sf = frames_[f->sframe];
  it->inputs.resize(sf.num_inputs);
  it->pending = sf.init_pending;
  it->dead.assign(sf.nodes.size(), 0);
  f->iters.push_back(it);
  const int64_t i = ++f->iteration_count;
  if (f != &s->root) {
    for (const auto& inv : f->invariants)
      Deliver(s, f, i, inv.first, {inv.second}, !inv.second.valid(), ready);
    for (int z : frames_[f->sframe].zero_pending) {
      ++it->outstanding_ops;
      ++s->outstanding;
      ready->push_back(Task{z, f, i, it, false});
    }
  }
  return it;
}

ControlFlowExecutor::Frame* ControlFlowExecutor::ChildFrame(Step* s, Frame* parent, int64_t iter,
                                                            int sframe, std::vector<Task>* ready) {
  auto key = std::make_pair(iter, sframe);
  auto it = parent->children.find(key);
  if (it != parent->children.end()) return it->second;
  Frame* f = new Frame();
  f->sframe = sframe;
  f->parent = parent;
  f->parent_iter = iter;
  f->key = parent->key + "/" + frames_[sframe].name + "@" + std::to_string(iter);
  f->pending_enters = frames_[sframe].num_enters;
  parent->children[key] = f;
  ++parent->iter(iter)->outstanding_frames;
  NewIteration(s, f, ready);
  return f;
}

void ControlFlowExecutor::Cleanup(Step* s, Frame* f, std::vector<Task>* ready) {
  while (f != &s->root) {
    const StaticFrame& sf = frames_[f->sframe];
    while (!f->iters.empty()) {
      Iter* it = f->iters.front();
      if (it->outstanding_ops > 0 || it->outstanding_frames > 0) return;
      if (f->base_iter == 0 && f->pending_enters > 0) return;
      if (it->completed != sf.nodes.size() && !s->failed) {
        // Some op never got its inputs: report it instead of hanging.
        for (int nd : sf.nodes) {
          if (it->pending[nodes_[nd].local] != 0) {
            FailLocked(s, InvalidArgument(
                              "in loop '" + sf.name + "' iteration " + std::to_string(f->base_iter) +
                              ", " + nodes_[nd].where +
                              " never received its inputs (a Merge with no live input, or a "
                              "value entering the loop without a constant Enter)"));
            break;
          }
        }
      }
      delete it;
      f->iters.pop_front();
      ++f->base_iter;
      if (!f->deferred.empty()) {
        std::vector<std::pair<int, Tensor>> deferred = std::move(f->deferred);
        f->deferred.clear();
        NewIteration(s, f, ready);
        for (auto& d : deferred)
          Deliver(s, f, f->iteration_count, d.first, {d.second}, false, ready);
      }
    }
    if (f->pending_enters > 0 || !f->deferred.empty()) return;
    // The loop instance is over.
    Frame* parent = f->parent;
    const int64_t piter = f->parent_iter;
    for (int x : sf.exits)
      if (!f->live_exits.count(x)) Deliver(s, parent, piter, x, {Tensor()}, true, ready);
    parent->children.erase(std::make_pair(piter, f->sframe));
    --parent->iter(piter)->outstanding_frames;
    delete f;
    f = parent;
  }
}

namespace {

template <typename FrameT, typename Describe>
void DeleteFrames(FrameT* f, bool is_root, Describe&& describe) {
  for (auto& c : f->children) DeleteFrames(c.second, false, describe);
  f->children.clear();
  describe(f);
  if (is_root) return;  // the caller still reads the root iteration
  for (auto* it : f->iters) delete it;
  delete f;
}

}  // namespace

void ControlFlowExecutor::Finish(Step* s) {
  Status st;
  std::vector<Tensor> out;
  {
    std::lock_guard<std::mutex> l(s->mu);
    st = s->status;
    // Loops that could not go on (their ops wait for inputs that never
    // come) are the usual reason for a stall: name the waiting op.
    Status stall;
    DeleteFrames(&s->root, true, [&](Frame* f) {
      if (f == &s->root || !stall.ok() || f->iters.empty()) return;
      const StaticFrame& sf = frames_[f->sframe];
      for (int nd : sf.nodes) {
        if (f->iters.front()->pending[nodes_[nd].local] != 0) {
          stall = InvalidArgument("in loop '" + sf.name + "' iteration " +
                                  std::to_string(f->base_iter) + ", " + nodes_[nd].where +
                                  " never received its inputs (a Merge with no live input?)");
          return;
        }
      }
    });
    if (st.ok() && !stall.ok()) st = stall;
    Iter* root = s->root.iters.empty() ? nullptr : s->root.iters.front();
    if (st.ok() && root && root->completed != frames_[0].nodes.size()) {
      for (int nd : frames_[0].nodes) {
        if (root->pending[nodes_[nd].local] != 0) {
          st = InvalidArgument("the step cannot finish: " + nodes_[nd].where +
                               " never received its inputs (a Merge with no live input?)");
          break;
        }
      }
      if (st.ok()) st = Internal("the step ended with ops that did not run");
    }
    if (st.ok()) {
      for (int i = 0; i < num_fetches_; ++i) {
        if (s->fetched_dead[i]) {
          st = InvalidArgument("fetch " + std::to_string(i) +
                               " is dead: it comes from a branch that was not taken");
          break;
        }
      }
    }
    if (st.ok()) out = std::move(s->fetched);
    for (Iter* it : s->root.iters) delete it;
    s->root.iters.clear();
  }
  Executor::DoneFn done = std::move(s->done);
  delete s;
  done(std::move(st), std::move(out));
}

}  // namespace runtime
}  // namespace sf
