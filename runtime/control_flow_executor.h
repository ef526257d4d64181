// The executor path for partitions that contain control-flow ops (Switch,
// Merge, Enter, Exit, NextIteration, LoopCond), as in the TensorFlow paper:
// values can be dead, and ops run in frames (one per loop instance) and
// iterations. Executor::Create picks it at plan time only when the partition
// has such ops, so the plain path keeps its lock-free per-op cost.
//
// Per step, bookkeeping (pending counts, frames, iterations) is guarded by one
// step mutex; kernels run outside it on the ComputePool.
// Thread-safety: RunStep may be called from many threads at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/executor.h"

namespace sf {
namespace runtime {

class ControlFlowExecutor {
 public:
  // True when any of `nodes` is a control-flow op or a _Recv (a value from
  // another partition may be dead).
  static bool Needed(const Graph& g, const std::vector<int>& nodes);
  // Plans frames and edges; kernels[i] is spec.nodes[i]'s kernel (null for a
  // fed node), owned by the caller and outliving this. InvalidArgument for a
  // malformed loop (NextIteration or Exit outside a loop, a node mixing
  // values of two frames), naming the node.
  static Result<std::shared_ptr<ControlFlowExecutor>> Create(
      const Graph& g, const ExecutorSpec& spec, std::vector<OpKernel*> kernels, const ExecutorEnv& env);
  ~ControlFlowExecutor();

  // As Executor::RunStep.
  void RunStep(int64_t step_id, std::vector<Tensor> feeds, Executor::DoneFn done);

 private:
  struct PlanNode;
  struct Edge;
  struct StaticFrame;
  struct Iter;
  struct Frame;
  struct Step;
  struct Task;
  ControlFlowExecutor() = default;

  void Process(Step* s, Task t);
  // True for a ready op cheaper to run inline than to hand to the pool: dead
  // ops, control-flow forwards and ops on small tensors.
  bool Cheap(const Task& t) const;
  // Runs t's kernel into outs (nothing for a dead op, the feeds for a fed
  // one); false when an async kernel took over (it calls Complete later).
  bool RunKernel(Step* s, const Task& t, std::vector<Tensor>* outs, Status* st);
  // Records a finished op (outputs `outs`, invalid = dead) and continues
  // with the ops it made ready.
  void Complete(Step* s, const Task& t, std::vector<Tensor>* outs, const Status& st);
  // The following run with s->mu held.
  void Propagate(Step* s, const Task& t, std::vector<Tensor>* outs, bool dead,
                 std::vector<Task>* ready);
  void Deliver(Step* s, Frame* f, int64_t iter, int src, const std::vector<Tensor>& outs,
               bool dead, std::vector<Task>* ready);
  Iter* NewIteration(Step* s, Frame* f, std::vector<Task>* ready);
  Frame* ChildFrame(Step* s, Frame* parent, int64_t iter, int sframe, std::vector<Task>* ready);
  void Cleanup(Step* s, Frame* f, std::vector<Task>* ready);
  void FailLocked(Step* s, const Status& st);
  void Finish(Step* s);
  void Schedule(Step* s, std::vector<Task>* ready, size_t from);

  std::vector<PlanNode> nodes_;
  std::vector<Edge> edges_;
  std::vector<StaticFrame> frames_;
  std::vector<int> roots_;  // root-frame nodes with nothing to wait for
  std::vector<int> feed_nodes_;   // per feed, the local node (-1 if not here)
  std::vector<int> feed_outputs_;
  int num_fetches_ = 0;
  ExecutorEnv env_;
};

}  // namespace runtime
}  // namespace sf
