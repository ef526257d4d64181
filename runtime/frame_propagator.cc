#include "runtime/frame_propagator.h"

#include <algorithm>
#include <unordered_map>

namespace sf {
namespace runtime {

namespace {

using Kind = FrameKind;

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

bool FramePlan::Needed(const Graph& g, const std::vector<int>& nodes) {
  for (int id : nodes) {
    const Kind k = KindOf(g.node(id).op);
    if (k != Kind::kOther && k != Kind::kSend) return true;
  }
  return false;
}

Result<FramePlan> FramePlan::Build(const Graph& g, const ExecutorSpec& spec, KernelPlan* kp) {
  FramePlan p;
  const int n = static_cast<int>(spec.nodes.size());
  std::unordered_map<int, int> local;
  for (int i = 0; i < n; ++i) local[spec.nodes[i]] = i;
  p.nodes.resize(n);
  std::vector<char> fed(n, 0);
  for (size_t f = 0; f < spec.fed.size(); ++f) {
    auto it = local.find(spec.fed[f].node);
    if (it == local.end()) continue;
    fed[it->second] = 1;
    p.nodes[it->second].feeds.push_back({spec.fed[f].index, static_cast<int>(f)});
  }
  for (size_t f = 0; f < spec.fetches.size(); ++f) {
    auto it = local.find(spec.fetches[f].node);
    if (it == local.end()) return Internal("fetch '" + spec.fetches[f].name() + "' is not in the partition");
    p.nodes[it->second].fetches.push_back({spec.fetches[f].index, static_cast<int>(f)});
  }
  p.num_fetches = static_cast<int>(spec.fetches.size());

  // Frames: a node runs in the frame its inputs come from; Enter's outputs
  // are in its child frame, Exit's in its parent. The nodes are in
  // topological order apart from NextIteration -> Merge back edges.
  p.frames.push_back(StaticFrame());
  std::map<std::pair<int, std::string>, int> frame_ids;
  std::vector<int> out_frame(n, -1);
  for (int i = 0; i < n; ++i) {
    Node& pn = p.nodes[i];
    NodeItem& item = kp->nodes[i];
    const sf::Node& node = g.node(spec.nodes[i]);
    pn.kind = KindOf(node.op);
    item.outputs_may_be_unset = pn.kind != Kind::kOther;
    item.error_as_is = pn.kind == Kind::kRecv;
    pn.num_inputs = item.num_inputs;
    pn.has_kernel = item.kernel != nullptr;
    pn.is_async = item.is_async;
    int frame = -1;
    auto take = [&](int producer) -> Status {
      if (out_frame[producer] < 0) return Status::OK();  // a back edge
      if (frame < 0) frame = out_frame[producer];
      else if (frame != out_frame[producer])
        return InvalidArgument(item.where + " mixes values of loop frames '" + p.frames[frame].name +
                               "' and '" + p.frames[out_frame[producer]].name +
                               "' (use a value from outside a loop inside it only through its builder)");
      return Status::OK();
    };
    int initial_pending = 0;
    if (!fed[i]) {
      for (const Output& in : node.inputs) SF_RETURN_IF_ERROR(take(local.at(in.node)));
      for (int c : node.control_inputs) SF_RETURN_IF_ERROR(take(local.at(c)));
      if (pn.kind == Kind::kMerge) {
        initial_pending = 1 + 2 * static_cast<int>(node.control_inputs.size());
      } else {
        initial_pending = item.initial_pending;
      }
    }
    if (frame < 0) frame = 0;
    pn.frame = frame;
    out_frame[i] = frame;
    StaticFrame* sf = &p.frames[frame];
    if (pn.kind == Kind::kEnter) {
      auto name = node.attrs.Get<std::string>("frame_name");
      if (!name.ok() || name->empty())
        return InvalidArgument(item.where + " needs a non-empty 'frame_name' attribute");
      auto key = std::make_pair(frame, *name);
      auto it = frame_ids.find(key);
      if (it == frame_ids.end()) {
        it = frame_ids.emplace(key, static_cast<int>(p.frames.size())).first;
        StaticFrame child;
        child.name = *name;
        child.parent = frame;
        p.frames.push_back(child);
        sf = &p.frames[frame];
      }
      pn.child_frame = it->second;
      auto is_constant = node.attrs.GetOr<bool>("is_constant", false);
      auto par = node.attrs.GetOr<int64_t>("parallel_iterations", 10);
      if (!is_constant.ok() || !par.ok())
        return InvalidArgument(item.where + ": bad attribute: " +
                               (is_constant.ok() ? par.status() : is_constant.status()).ToString());
      pn.is_constant = *is_constant;
      StaticFrame& cf = p.frames[pn.child_frame];
      cf.parallel_iterations = std::max<int64_t>(1, *par);
      ++cf.num_enters;
      out_frame[i] = pn.child_frame;
    } else if (pn.kind == Kind::kExit || pn.kind == Kind::kNextIteration) {
      if (frame == 0)
        return InvalidArgument(item.where + " is not inside a loop (its input comes from no Enter)");
      if (pn.kind == Kind::kExit) {
        sf->exits.push_back(i);
        out_frame[i] = sf->parent;
      }
    } else if (pn.kind == Kind::kLoopCond) {
      if (frame == 0) return InvalidArgument(item.where + " is not inside a loop");
      auto max_iter = node.attrs.GetOr<int64_t>("maximum_iterations", -1);
      if (!max_iter.ok()) return max_iter.status().WithPrefix(item.where);
      sf->maximum_iterations = *max_iter;
    }
    pn.local = static_cast<int>(sf->nodes.size());
    pn.input_begin = sf->num_inputs;
    sf->num_inputs += item.num_inputs;
    sf->nodes.push_back(i);
    sf->init_pending.push_back(initial_pending);
    if (initial_pending == 0) {
      if (pn.frame == 0) p.roots.push_back(i);
      else sf->zero_pending.push_back(i);
    }
  }
  for (int i = 0; i < n; ++i) {
    if (!p.nodes[i].fetches.empty() && out_frame[i] != 0)
      return InvalidArgument("cannot fetch an output of " + kp->nodes[i].where + ": it is inside loop '" +
                             p.frames[out_frame[i]].name + "' (fetch the loop's results instead)");
  }
  return p;
}

FramePropagator::FramePropagator(const KernelPlan& kp, const FramePlan& p, StepBase* step,
                                 std::vector<Tensor> feeds)
    : kp_(kp), p_(p), step_(step), root_(new Frame()), feeds_(std::move(feeds)) {
  fetched_.resize(p.num_fetches);
  fetched_dead_.assign(p.num_fetches, 0);
}

FramePropagator::~FramePropagator() = default;

void FramePropagator::StartRoots(std::vector<Task>* ready) {
  std::lock_guard<std::mutex> l(mu_);
  NewIteration(root_.get(), ready);
  Iter* it = root_->iter(0);
  for (int r : p_.roots) {
    ++it->outstanding_ops;
    ++outstanding_;
    ready->push_back(Task{r, root_.get(), 0, it, false});
  }
}

bool FramePropagator::Complete(const Task& t, OutBuf* outs, std::vector<Task>* ready) {
  std::lock_guard<std::mutex> l(mu_);
  bool dead = t.dead;
  if (step_->failed()) dead = true;  // drain: what is left runs dead
  if (dead) {
    for (auto& o : *outs) o = Tensor();
  }
  Propagate(t, outs, dead, ready);
  Iter* it = t.it;
  --it->outstanding_ops;
  ++it->completed;
  --outstanding_;
  Cleanup(t.frame, ready);
  return outstanding_ == 0;
}

void FramePropagator::Propagate(const Task& t, OutBuf* outs, bool dead, std::vector<Task>* ready) {
  const FramePlan::Node& pn = p_.nodes[t.node];
  Frame* f = t.frame;
  switch (pn.kind) {
    case Kind::kEnter: {
      Frame* child = ChildFrame(f, t.iter, pn.child_frame, ready);
      --child->pending_enters;
      if (pn.is_constant) {
        child->invariants.push_back({t.node, dead ? Tensor() : (*outs)[0]});
        for (int64_t i = child->base_iter; i <= child->iteration_count; ++i)
          Deliver(child, i, t.node, *outs, dead, ready);
      } else {
        Deliver(child, 0, t.node, *outs, dead, ready);
      }
      Cleanup(child, ready);
      return;
    }
    case Kind::kExit:
      // A dead Exit is dropped: the loop's frame sends one dead value per
      // Exit that never produced a live one when the frame finishes.
      if (dead || !(*outs)[0].valid()) return;
      f->live_exits.insert(t.node);
      Deliver(f->parent, f->parent_iter, t.node, *outs, false, ready);
      return;
    case Kind::kNextIteration: {
      if (dead || !(*outs)[0].valid()) return;  // the loop ends here
      const int64_t next = t.iter + 1;
      if (next <= f->iteration_count) {
        Deliver(f, next, t.node, *outs, false, ready);
      } else if (next - f->base_iter < p_.frames[f->sframe].parallel_iterations) {
        NewIteration(f, ready);
        Deliver(f, next, t.node, *outs, false, ready);
      } else {
        f->deferred.push_back({t.node, (*outs)[0]});
      }
      return;
    }
    case Kind::kLoopCond: {
      const FramePlan::StaticFrame& sf = p_.frames[f->sframe];
      if (!dead && sf.maximum_iterations >= 0 && t.iter >= sf.maximum_iterations &&
          (*outs)[0].valid() && (*outs)[0].flat<bool>()(0)) {
        step_->Fail(InvalidArgument("loop '" + sf.name + "' exceeded its maximum_iterations (" +
                                    std::to_string(sf.maximum_iterations) + ")"));
        for (auto& o : *outs) o = Tensor();
        dead = true;
      }
      break;
    }
    default:
      break;
  }
  Deliver(f, t.iter, t.node, *outs, dead, ready);
}

void FramePropagator::Deliver(Frame* f, int64_t iter, int src, const std::vector<Tensor>& outs, bool dead,
                              std::vector<Task>* ready) {
  const NodeItem& si = kp_.nodes[src];
  const FramePlan::Node& sn = p_.nodes[src];
  Iter* it = f->iter(iter);
  if (f == root_.get()) {
    // Fetches are root-frame values (an Exit's lands here when its loop ends).
    for (const auto& fe : sn.fetches) {
      if (dead || !outs[fe.first].valid()) fetched_dead_[fe.second] = 1;
      else fetched_[fe.second] = outs[fe.first];
    }
  }
  for (int e = si.edge_begin; e < si.edge_end; ++e) {
    const PlanEdge& edge = kp_.edges[e];
    const int d = edge.dst;
    const FramePlan::Node& dn = p_.nodes[d];
    const int dn_inputs = dn.num_inputs;
    const bool control = edge.dst_input < 0;
    const bool in_dead = dead || (!control && !outs[edge.src_output].valid());
    bool fire = false, fire_dead = false;
    int& pending = it->pending[dn.local];
    int& dead_count = it->dead[dn.local];
    if (dn.kind == Kind::kMerge) {
      if (control) {
        pending -= 2;
        fire_dead = dead_count == dn_inputs;
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
        fire_dead = dead_count == dn_inputs || sn.kind == Kind::kEnter;
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
      ++outstanding_;
      ready->push_back(Task{d, f, iter, it, fire_dead});
    }
  }
}

void FramePropagator::DeliverOne(Frame* f, int64_t iter, int src, const Tensor& value, bool dead,
                                 std::vector<Task>* ready) {
  one_.resize(1);
  one_[0] = value;
  Deliver(f, iter, src, one_, dead, ready);
  one_[0] = Tensor();  // the value lives in its consumers' inputs, not here
}

void FramePropagator::Recycle(Iter* it) {
  constexpr size_t kMaxSpare = 64;  // iterations in flight at once rarely pass parallel_iterations
  if (spare_iters_.size() >= kMaxSpare) {
    delete it;
    return;
  }
  // Inputs no op read (dead branches) are dropped now, not when reused.
  for (Tensor& t : it->inputs) t = Tensor();
  it->outstanding_ops = 0;
  it->outstanding_frames = 0;
  it->completed = 0;
  spare_iters_.emplace_back(it);
}

FramePropagator::Iter* FramePropagator::NewIteration(Frame* f, std::vector<Task>* ready) {
  Iter* it;
  if (spare_iters_.empty()) {
    it = new Iter();
  } else {
    it = spare_iters_.back().release();
    spare_iters_.pop_back();
  }
  const FramePlan::StaticFrame& sf = p_.frames[f->sframe];
  it->inputs.resize(sf.num_inputs);  // a spare's inputs were cleared when it was kept
  it->pending = sf.init_pending;
  it->dead.assign(sf.nodes.size(), 0);
  f->iters.push_back(it);
  const int64_t i = ++f->iteration_count;
  if (f != root_.get()) {
    for (const auto& inv : f->invariants) DeliverOne(f, i, inv.first, inv.second, !inv.second.valid(), ready);
    for (int z : sf.zero_pending) {
      ++it->outstanding_ops;
      ++outstanding_;
      ready->push_back(Task{z, f, i, it, false});
    }
  }
  return it;
}

FramePropagator::Frame* FramePropagator::ChildFrame(Frame* parent, int64_t iter, int sframe,
                                                    std::vector<Task>* ready) {
  auto key = std::make_pair(iter, sframe);
  auto it = parent->children.find(key);
  if (it != parent->children.end()) return it->second;
  Frame* f = new Frame();
  f->sframe = sframe;
  f->parent = parent;
  f->parent_iter = iter;
  f->key = parent->key + "/" + p_.frames[sframe].name + "@" + std::to_string(iter);
  f->pending_enters = p_.frames[sframe].num_enters;
  parent->children[key] = f;
  ++parent->iter(iter)->outstanding_frames;
  NewIteration(f, ready);
  return f;
}

void FramePropagator::Cleanup(Frame* f, std::vector<Task>* ready) {
  while (f != root_.get()) {
    const FramePlan::StaticFrame& sf = p_.frames[f->sframe];
    while (!f->iters.empty()) {
      Iter* it = f->iters.front();
      if (it->outstanding_ops > 0 || it->outstanding_frames > 0) return;
      if (f->base_iter == 0 && f->pending_enters > 0) return;
      if (it->completed != sf.nodes.size() && !step_->failed()) {
        // Some op never got its inputs: report it instead of hanging.
        for (int nd : sf.nodes) {
          if (it->pending[p_.nodes[nd].local] != 0) {
            step_->Fail(InvalidArgument("in loop '" + sf.name + "' iteration " + std::to_string(f->base_iter) +
                                        ", " + kp_.nodes[nd].where +
                                        " never received its inputs (a Merge with no live input, or a "
                                        "value entering the loop without a constant Enter)"));
            break;
          }
        }
      }
      Recycle(it);
      f->iters.pop_front();
      ++f->base_iter;
      if (!f->deferred.empty()) {
        std::vector<std::pair<int, Tensor>> deferred = std::move(f->deferred);
        f->deferred.clear();
        NewIteration(f, ready);
        for (auto& d : deferred) DeliverOne(f, f->iteration_count, d.first, d.second, false, ready);
      }
    }
    if (f->pending_enters > 0 || !f->deferred.empty()) return;
    // The loop instance is over.
    Frame* parent = f->parent;
    const int64_t piter = f->parent_iter;
    for (int x : sf.exits)
      if (!f->live_exits.count(x)) DeliverOne(parent, piter, x, Tensor(), true, ready);
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

void RunFrameStep(const KernelPlan& kp, const FramePlan& p, int64_t step_id, std::vector<Tensor> feeds,
                  Executor::DoneFn done, StepTrace* trace, std::atomic<uint64_t>* progress) {
  ExecutorState<FramePropagator>::Run(kp, p, step_id, std::move(feeds), std::move(done), trace, progress);
}

void FramePropagator::Finish(Status* status, std::vector<Tensor>* out) {
  std::lock_guard<std::mutex> l(mu_);
  Status& st = *status;
  Frame* root = root_.get();
  // Loops that could not go on (their ops wait for inputs that never
  // come) are the usual reason for a stall: name the waiting op.
  Status stall;
  DeleteFrames(root, true, [&](Frame* f) {
    if (f == root || !stall.ok() || f->iters.empty()) return;
    const FramePlan::StaticFrame& sf = p_.frames[f->sframe];
    for (int nd : sf.nodes) {
      if (f->iters.front()->pending[p_.nodes[nd].local] != 0) {
        stall = InvalidArgument("in loop '" + sf.name + "' iteration " + std::to_string(f->base_iter) + ", " +
                                kp_.nodes[nd].where + " never received its inputs (a Merge with no live input?)");
        return;
      }
    }
  });
  if (st.ok() && !stall.ok()) st = stall;
  Iter* it = root->iters.empty() ? nullptr : root->iters.front();
  if (st.ok() && it && it->completed != p_.frames[0].nodes.size()) {
    for (int nd : p_.frames[0].nodes) {
      if (it->pending[p_.nodes[nd].local] != 0) {
        st = InvalidArgument("the step cannot finish: " + kp_.nodes[nd].where +
                             " never received its inputs (a Merge with no live input?)");
        break;
      }
    }
    if (st.ok()) st = Internal("the step ended with ops that did not run");
  }
  if (st.ok()) {
    for (int i = 0; i < p_.num_fetches; ++i) {
      if (fetched_dead_[i]) {
        st = InvalidArgument("fetch " + std::to_string(i) + " is dead: it comes from a branch that was not taken");
        break;
      }
    }
  }
  if (st.ok()) *out = std::move(fetched_);
  for (Iter* r : root->iters) delete r;
  root->iters.clear();
}

}  // namespace runtime
}  // namespace sf
