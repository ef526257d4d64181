// The partition executor: runs the ops of one partition for many steps.
//
// Planning happens once (topological order, input slots, consumer lists,
// initial pending counts, one kernel per node); a step then only allocates its
// values and pending counters. Ready ops run on the ComputePool: the thread
// that finishes an op runs one newly ready op inline and schedules the others;
// async kernels (variables) continue when their callback runs. No message,
// lock or map lookup per op: only variable access leaves the executor.
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

class ComputePool;
class VariableService;
class EmbeddingShardService;
class ReplicationService;
class CollectiveService;
class QueueService;
class RendezvousService;
class CheckpointService;

namespace runtime {

class ControlFlowExecutor;

// What the executor is asked to run: `nodes` in topological order (every
// producer of a non-fed input among them); `fed` outputs come from the step's
// feeds (their nodes do not run); `fetches` are returned.
struct ExecutorSpec {
  std::vector<int> nodes;
  std::vector<Output> fed;
  std::vector<Output> fetches;
};

// What a partition's kernels run with: the kernels to build them from, the
// pool they run on, and the services they reach through KernelInit. Every
// pointer must outlive the executor.
struct ExecutorEnv {
  const KernelRegistry* kernels = nullptr;   // null: StandardKernelRegistry()
  ComputePool* pool = nullptr;               // required
  VariableService* variables = nullptr;      // null outside a session
  EmbeddingShardService* embeddings = nullptr;  // null outside a session
  ReplicationService* replication = nullptr;    // null outside a session
  CollectiveService* collectives = nullptr;     // null outside a session
  QueueService* queues = nullptr;            // null outside a session
  RendezvousService* rendezvous = nullptr;   // serves _Send/_Recv; null when the partition has none
  CheckpointService* checkpoints = nullptr;  // the in-graph checkpoint ops' store; may be null
};

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
  // InvalidArgument when feeds.size() differs from spec.fed.size()).
  void RunStep(int64_t step_id, std::vector<Tensor> feeds, DoneFn done);

  int num_nodes() const;

 private:
  struct Item;
  struct Step;
  Executor() = default;
  // Runs `n` and then, inline, one op made ready by it, until none is ready.
  void Process(Step* s, int n);
  void RunSync(Step* s, int n);
  void StartAsync(Step* s, int n);
  // Checks outputs after a kernel ran; records the first error in s.
  void Check(Step* s, int n, const Status& kernel_status);
  void Fail(Step* s, const Status& st);
  // Drops the inputs of n that no later op of the step reads, so a step holds
  // only the tensors still needed.
  void ReleaseInputs(Step* s, int n);
  // Marks n complete; schedules all but one newly ready consumer and returns
  // that one (-1 if none). Finishes the step after its last op.
  int Propagate(Step* s, int n);
  void Finish(Step* s);

  std::vector<Item> nodes_;
  std::vector<int> input_slots_;  // per node, the value slot of each input
  std::vector<int> consumers_;    // per node, the local ids of its consumers (one per edge)
  std::vector<int> roots_;        // nodes with no pending inputs
  std::vector<int> feed_slots_;
  std::vector<int> fetch_slots_;
  std::vector<int> slot_uses_;  // per slot, data edges reading it; 0 = keep (fetched)
  int num_slots_ = 0;
  ExecutorEnv env_;  // env_.rendezvous is aborted with a failing step
  // Set at plan time when the partition has control-flow ops: RunStep then
  // takes that path (runtime/control_flow_executor.cc) and the plain one
  // above stays free of dead-tensor and frame bookkeeping.
  std::shared_ptr<ControlFlowExecutor> control_flow_;
};

}  // namespace runtime
}  // namespace sf
