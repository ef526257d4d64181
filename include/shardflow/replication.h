// Between-graph replication without a parameter server: N worker replicas
// share the variable shards, each running its own tower (in one process: a
// thread calling Session::Run on its own train op).
//
// Synchronous with backup workers (SyncReplicas): run N + b workers; each
// variable's shard averages the first N gradients tagged with its current
// step, applies the average once and advances the step; gradients tagged
// with an older step (the b slowest) are counted and dropped.
//
//   sf::GradientDescentOptimizer sgd(0.1);
//   sf::SyncReplicas sync(sgd, {/*replicas_to_aggregate=*/4, /*total_num_replicas=*/5});
//   auto t = sync.Minimize(g, loss_of_replica_r, r);          // once per replica
//   // each step of replica r:
//   int64_t token = session.Run({}, {t->global_step})->at(0).data<int64_t>()[0];
//   session.Run({{x, xb}, {t->step_tag, sf::Tensor::Scalar<int64_t>(token)}},
//               {t->counted_in[0]}, {t->train_op});           // -1: this gradient was stale
//
// Asynchronous: each gradient is applied on arrival, tagged with the version
// of the variable the worker read (ReadVariableWithVersion), so the shard
// records staleness = version at apply - version read (StalenessStats).
// Every update stays atomic in its shard actor; lock-free racy (Hogwild)
// updates of a shared buffer are not offered: async here is "Hogwild-style"
// (no locks, no waiting, updates interleave freely) but each update is whole.
//
// Stale-synchronous parallel: ops::StaleSyncWait(handle, clock, worker, N, s)
// at the start of a worker's step waits (a pending reply in the shard actor)
// while the worker is more than s clocks ahead of the slowest.
#pragma once

#include <string>
#include <vector>

#include "shardflow/graph.h"
#include "shardflow/optimizers.h"

namespace sf {

struct SyncReplicasOptions {
  int replicas_to_aggregate = 1;  // N: gradients averaged per step; >= 1
  int total_num_replicas = 1;     // N + b workers (b backup workers); >= N
  int64_t timeout_ms = 0;  // > 0: a worker's wait for its step fails (Unavailable) after this long
};

// What SyncReplicas::Minimize builds for one replica.
struct SyncReplicaTrainOp {
  Operation train_op;  // a NoOp running one ApplyGradientSync per variable
  Output step_tag;     // int64 scalar Placeholder: feed the token read at step start
  Output global_step;  // int64 scalar: steps applied so far (of the first variable) = the token
  std::vector<Output> handles;     // the trained variables
  std::vector<Output> counted_in;  // per variable: the step it counted in, -1 if dropped as stale
};

// Wraps an optimizer (GradientDescent, Momentum, Adagrad, Adam, RMSProp) so
// its updates are aggregated at the shards. Counters: ops::SyncReplicaStats.
class SyncReplicas {
 public:
  SyncReplicas(Optimizer& opt, SyncReplicasOptions options) : opt_(opt), o_(options) {}
  // Adds replica `replica`'s gradients of loss (w.r.t. var_list: reads made by
  // ops::Variable, or every trainable variable) and its synchronous updates.
  // InvalidArgument for N < 1, N + b < N, a replica out of range, or a loss
  // that depends on no variable; Unimplemented naming the table when the loss
  // looks up one trained embedding table twice. Embedding table shards among
  // the variables get synchronous sparse updates (EmbeddingSparseApplySync).
  Result<SyncReplicaTrainOp> Minimize(Graph& g, Output loss, int replica,
                                      const std::vector<Output>& var_list = {});

 private:
  Optimizer& opt_;
  SyncReplicasOptions o_;
};

// A variable's value and its version, read together.
struct VersionedRead {
  Output handle;   // the VarHandle
  Output value;    // the value (differentiate the loss with respect to it)
  Output version;  // int64 scalar: optimizer updates applied before this read
};
// Reads variable `handle` (a VarHandle or a read made by ops::Variable) with its version.
VersionedRead ReadVariableWithVersion(Graph& g, Output handle);

// Adds asynchronous updates of every read in `reads` by the gradient of
// loss with respect to its value, each tagged with the version read (so the
// shard records staleness). Returns a NoOp running them, or the error.
Result<Operation> MinimizeAsync(Graph& g, Optimizer& opt, Output loss, const std::vector<VersionedRead>& reads);

namespace ops {
// int64 [3]: applied steps (the global step), accepted and dropped gradients.
Output SyncReplicaStats(Graph& g, Output handle);
// float64 [3]: count, mean and max staleness of tagged asynchronous updates.
Output StalenessStats(Graph& g, Output handle);
// Fails the workers waiting on the variable's pending synchronous steps with
// Aborted (their gradients are counted as dropped); returns the node id.
Operation AbortSyncStep(Graph& g, Output handle);
// Stale-synchronous barrier for `worker` of num_workers starting `clock`
// (int64 scalar); returns the node id (use it as a control input).
Operation StaleSyncWait(Graph& g, Output handle, Output clock, int worker, int num_workers, int staleness);
// Ring all-reduce (sum, float32/float64) of x among the group_size ranks of
// group_key; this replica is `rank`. Each rank's k-th run joins the k-th
// reduction, so every rank must run it equally often.
Output AllReduce(Graph& g, Output x, const std::string& group_key, int group_size, int rank);
}  // namespace ops

}  // namespace sf
