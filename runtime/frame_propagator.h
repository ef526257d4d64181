// FramePropagator: readiness for partitions that contain control-flow ops
// (Switch, Merge, Enter, Exit, NextIteration, LoopCond) or a _Recv, as in the
// TensorFlow paper: values can be dead, and ops run in frames (one per loop
// instance) and iterations. Executor::Create picks it at plan time only when
// the partition has such ops (Needed), so the plain path keeps its lock-free
// per-op cost. See runtime/executor_core.h for the interface.
//
// Per step, bookkeeping (pending counts, frames, iterations) is guarded by one
// step mutex; kernels run outside it on the ComputePool. The step's
// loop-gradient stacks live here and go with the step, finished or failed.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "runtime/executor_core.h"

namespace sf {
namespace runtime {

enum class FrameKind : uint8_t {
  kOther, kSwitch, kMerge, kEnter, kExit, kNextIteration, kLoopCond, kControlTrigger, kStackPop,
  kSend, kRecv
};

// Frames and control-flow kinds, built once per partition.
struct FramePlan {
  struct Node {
    FrameKind kind = FrameKind::kOther;
    bool has_kernel = false, is_async = false;  // as the node's NodeItem
    int num_inputs = 0;
    int input_begin = 0;  // input entries, within the frame's iterations
    int frame = 0;
    int local = 0;         // index among the frame's nodes
    int child_frame = -1;  // Enter: the frame it enters
    bool is_constant = false;
    std::vector<std::pair<int, int>> feeds;    // (output, feed index)
    std::vector<std::pair<int, int>> fetches;  // (output, fetch index)
  };
  struct StaticFrame {
    std::string name;  // "" for the root frame
    int parent = -1;
    int64_t parallel_iterations = 10;
    int64_t maximum_iterations = -1;
    int num_enters = 0;             // Enter nodes feeding one instance
    std::vector<int> nodes;         // nodes running in the frame
    std::vector<int> init_pending;  // per frame node: what it waits for in a new iteration
    int num_inputs = 0;             // input entries of one iteration
    std::vector<int> zero_pending;  // of those, nodes waiting for nothing
    std::vector<int> exits;
  };
  std::vector<Node> nodes;
  std::vector<StaticFrame> frames;
  std::vector<int> roots;  // root-frame nodes with nothing to wait for
  int num_fetches = 0;

  // True when any of `nodes` is a control-flow op or a _Recv (a value from
  // another partition may be dead).
  static bool Needed(const Graph& g, const std::vector<int>& nodes);
  // Plans frames over kp (whose control-flow nodes it marks: their outputs
  // may be unset, a _Recv's error is reported as is). InvalidArgument for a
  // malformed loop (NextIteration or Exit outside a loop, a node mixing
  // values of two frames), naming the node.
  static Result<FramePlan> Build(const Graph& g, const ExecutorSpec& spec, KernelPlan* kp);
};

class FramePropagator {
 public:
  using Plan = FramePlan;
  // One iteration of one frame instance: the inputs its ops received and what
  // they still wait for.
  struct Iter {
    std::vector<Tensor> inputs;  // per input entry of the frame's nodes; invalid = dead or not yet
    std::vector<int> pending;    // per frame node (FramePlan::Node::local)
    std::vector<int> dead;       // per frame node, dead inputs received
    int outstanding_ops = 0;     // ready or running
    int outstanding_frames = 0;  // child frame instances still alive
    size_t completed = 0;
  };

  // One instance of a loop (a static frame entered from one parent iteration).
  struct Frame {
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
  struct Task {
    int node;
    Frame* frame;
    int64_t iter;
    Iter* it;  // alive while the task is outstanding; read without the lock
    bool dead;
  };
  using OutBuf = std::vector<Tensor>;  // invalid = dead
  // The ops this thread runs next, and a buffer Propagate reuses for the
  // ops an op made ready (one allocation per thread's run, not per op).
  struct Local {
    std::vector<Task> next;
    std::vector<Task> ready;
  };

  FramePropagator(const KernelPlan& kp, const FramePlan& p, StepBase* step, std::vector<Tensor> feeds);
  ~FramePropagator();

  static int Node(const Task& t) { return t.node; }
  Tensor* PrepareOutputs(const Task& t, OutBuf* outs) {
    outs->assign(kp_.nodes[t.node].num_outputs, Tensor());
    return outs->data();
  }
  static Tensor* Outputs(const Task&, OutBuf* outs) { return outs->data(); }
  // A dead op is skipped (a dead _Send still runs: the receiving partition
  // learns the value is dead); a fed op's outputs are its feeds.
  bool ShouldRun(const Task& t, Tensor* outs) const {
    const FramePlan::Node& pn = p_.nodes[t.node];
    if (t.dead && pn.kind != FrameKind::kSend) return false;
    if (!pn.has_kernel) {
      for (const auto& f : pn.feeds) outs[f.first] = feeds_[f.second];
      return false;
    }
    return true;
  }
  void Inputs(const Task& t, const Tensor** in) const {
    static const Tensor* const kDead = new Tensor();
    const FramePlan::Node& pn = p_.nodes[t.node];
    for (int i = 0; i < pn.num_inputs; ++i) in[i] = t.dead ? kDead : &t.it->inputs[pn.input_begin + i];
  }
  StepFrame FrameOf(const Task& t) { return StepFrame{&t.frame->key, t.iter, &stacks_}; }
  // The inputs are read; free them now rather than with the iteration.
  void ReleaseInputs(const Task& t) {
    const FramePlan::Node& pn = p_.nodes[t.node];
    for (int i = 0; i < pn.num_inputs; ++i) t.it->inputs[pn.input_begin + i] = Tensor();
  }

  // Records a finished op (outputs *outs) and takes the ops it made ready:
  // cheap ones (see Cheap) all stay on this thread, with at most one other
  // op; the rest go to sched. True after the step's last op.
  template <typename Sched>
  bool Propagate(const Task& t, OutBuf* outs, Local* local, Sched&& sched) {
    std::vector<Task>& ready = local->ready;
    ready.clear();
    if (Complete(t, outs, &ready)) return true;
    bool have_other = false;
    for (const Task& r : local->next) have_other = have_other || !Cheap(r);
    for (const Task& r : ready) {
      const bool cheap = Cheap(r);
      if (cheap || !have_other) {
        local->next.push_back(r);
        have_other = have_other || !cheap;
      } else {
        sched(r);
      }
    }
    return false;
  }

  static bool Pop(Local* l, Task* t) {
    if (l->next.empty()) return false;
    *t = l->next.back();
    l->next.pop_back();
    return true;
  }

  template <typename Sched, typename RunInline>
  bool Start(Sched&& sched, RunInline&&) {
    std::vector<Task> ready;
    StartRoots(&ready);
    for (const Task& t : ready) sched(t);
    return !ready.empty();
  }

  void Finish(Status* st, std::vector<Tensor>* out);

 private:
  // True for a ready op cheaper to run inline than to hand to the pool: dead
  // ops, control-flow forwards and ops on small tensors.
  bool Cheap(const Task& t) const {
    const FramePlan::Node& pn = p_.nodes[t.node];
    if (t.dead || pn.kind != FrameKind::kOther || !pn.has_kernel) return true;
    // Ops on small tensors (loop counters, scalars) cost less than a pool
    // round trip; the inputs of a ready op are all in place.
    constexpr int64_t kSmall = 1024;
    int64_t elements = 0;
    for (int i = 0; i < pn.num_inputs; ++i) elements += t.it->inputs[pn.input_begin + i].num_elements();
    return elements <= kSmall && !pn.is_async;
  }
  void StartRoots(std::vector<Task>* ready);
  // Takes mu_; true when the step has no op left.
  bool Complete(const Task& t, OutBuf* outs, std::vector<Task>* ready);
  // The following run with mu_ held.
  void Propagate(const Task& t, OutBuf* outs, bool dead, std::vector<Task>* ready);
  void Deliver(Frame* f, int64_t iter, int src, const std::vector<Tensor>& outs, bool dead,
               std::vector<Task>* ready);
  // Deliver of one value (an invariant, a deferred NextIteration, a dead Exit).
  void DeliverOne(Frame* f, int64_t iter, int src, const Tensor& value, bool dead, std::vector<Task>* ready);
  // Keeps a finished iteration for NewIteration to reuse (or frees it).
  void Recycle(Iter* it);
  Iter* NewIteration(Frame* f, std::vector<Task>* ready);
  Frame* ChildFrame(Frame* parent, int64_t iter, int sframe, std::vector<Task>* ready);
  void Cleanup(Frame* f, std::vector<Task>* ready);

  const KernelPlan& kp_;
  const FramePlan& p_;
  StepBase* const step_;
  std::mutex mu_;
  std::unique_ptr<Frame> root_;
  int64_t outstanding_ = 0;  // GUARDED_BY(mu_)
  std::vector<Tensor> feeds_;
  std::vector<Tensor> fetched_;
  std::vector<char> fetched_dead_;
  StepStacks stacks_;  // the loop-gradient stacks, gone with the step
  // Finished iterations kept for the next ones (GUARDED_BY(mu_)): a loop
  // step would otherwise allocate an Iter and its three vectors per iteration.
  std::vector<std::unique_ptr<Iter>> spare_iters_;
  std::vector<Tensor> one_;  // GUARDED_BY(mu_): a single value being delivered
};

// Runs one step with the core over this propagator (instantiated in
// frame_propagator.cc, beside the propagator, so its calls inline).
void RunFrameStep(const KernelPlan& kp, const FramePlan& p, int64_t step_id, std::vector<Tensor> feeds,
                  Executor::DoneFn done, StepTrace* trace, std::atomic<uint64_t>* progress);

}  // namespace runtime
}  // namespace sf
