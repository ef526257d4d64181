// The partition executor: runs the ops of one partition for many steps.
//
// Planning happens once (topological order, input slots, consumer lists,
// initial pending counts, one kernel per node); a step then only allocates its
// per-step state. One core runs kernels, checks their outputs, fails and
// finishes steps (runtime/executor_core.h); a propagator chosen at plan time
// decides what is ready: the plain one (lock-free pending counts; no message,
// lock or map lookup per op) or, for partitions with control flow, the frame
// one (dead values, frames, iterations). Ready ops run on the ComputePool;
// async kernels (variables) continue when their callback runs.
// Thread-safety: RunStep may be called from many threads at once; steps are
// independent (kernels are shared and must be reentrant).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardflow/kernel.h"
#include "shardflow/graph.h"

namespace sf {

class StepTrace;

namespace runtime {

struct KernelPlan;
struct PlainPlan;
struct FramePlan;

// What the executor is asked to run: `nodes` in topological order (every
// producer of a non-fed input among them); `fed` outputs come from the step's
// feeds (their nodes do not run); `fetches` are returned.
struct ExecutorSpec {
  std::vector<int> nodes;
  std::vector<Output> fed;
  std::vector<Output> fetches;
};

// What a partition's kernels run with: the kernels to build them from, the
// pool they run on, and the services they reach (KernelInit and
// OpKernelContext carry these). Every pointer must outlive the executor.
struct ExecutorEnv : KernelServices {
  const KernelRegistry* kernels = nullptr;   // null: StandardKernelRegistry()
  ComputePool* pool = nullptr;               // required
  // The largest tensor a kernel may allocate (AllocationLimit); past it the
  // step fails with ResourceExhausted naming the node. 0: the process's.
  int64_t max_tensor_bytes = 0;
};

// While one lives on a thread, a step that resumes there when a _Recv gets
// its tensor runs its next ops there as long as they are cheap: sends,
// receives, variable handles, reads, small updates and small arithmetic
// (at most kInlineCheapElements input elements). Any other op goes to the
// pool. A node's I/O thread holds one while it hands a peer's tensor to the
// rendezvous: otherwise every tensor between nodes woke a compute thread,
// one wake-up per hop on a step's critical path. Work run inline under it
// sees none, so callbacks from that work take the pool as before: the
// executor holds InlineCheapOps(false) around it.
class InlineCheapOps {
 public:
  // on: set for this thread while alive; false: cleared while alive.
  explicit InlineCheapOps(bool on = true);
  ~InlineCheapOps();
  InlineCheapOps(const InlineCheapOps&) = delete;
  InlineCheapOps& operator=(const InlineCheapOps&) = delete;
  // True on a thread inside one (and not inside work run inline under it).
  static bool Active();

 private:
  bool prev_;
};
constexpr int64_t kInlineCheapElements = 4096;

class Executor {
 public:
  // Builds the plan and one kernel per node from env.kernels; the error names
  // the node and op (NotFound for an op with no kernel there).
  static Result<std::unique_ptr<Executor>> Create(const Graph& g, const ExecutorSpec& spec,
                                                  const ExecutorEnv& env);
  ~Executor();

  using DoneFn = std::function<void(Status, std::vector<Tensor>)>;
  // Runs one step with feed values in spec.fed order; done gets the fetches in
  // spec.fetches order, or the first error ("node 'N' (op OP): ..."). done runs
  // on a compute thread (or inline for an empty partition, or with
  // InvalidArgument when feeds.size() differs from spec.fed.size(), or on a
  // thread holding InlineCheapOps when the step's last ops ran there). With a
  // trace, each op that runs adds its event to it (and each asynchronous op
  // its wait) before done runs; null costs one branch per op. With progress,
  // an op that finishes (or is skipped) sets it to 1 (relaxed) when it is 0,
  // so a watcher that exchanges it back to 0 can tell a step that computes
  // from one that waits; it must outlive done.
  void RunStep(int64_t step_id, std::vector<Tensor> feeds, DoneFn done, StepTrace* trace = nullptr,
               std::atomic<uint64_t>* progress = nullptr);

  int num_nodes() const;

 private:
  Executor() = default;

  // Built once (runtime/executor_core.h): what every step shares.
  std::unique_ptr<KernelPlan> plan_;
  // Exactly one is set at plan time: partitions with control-flow ops (or a
  // _Recv) take the frame propagator (runtime/frame_propagator.h); the
  // others the plain one, free of dead-value and frame bookkeeping.
  std::unique_ptr<PlainPlan> plain_;
  std::unique_ptr<FramePlan> frame_;
};

}  // namespace runtime
}  // namespace sf
