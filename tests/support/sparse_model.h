// A small sparse model for cluster tests (recovery, elasticity, chaos): a
// 3-shard embedding table with Adagrad slots, a dense layer and a step
// counter that every training step adds one to, with deterministic batches.
#pragma once

#include <catch2/catch.hpp>

#include <vector>

#include "shardflow/graph.h"
#include "shardflow/session.h"

namespace sf::testing {

struct SparseModel {
  Graph g;
  Output loss;
  std::vector<Output> params;  // table shards, w, b, the counter
  Operation train, init;
  // Nothing is pinned: the placer spreads the variables over the tasks.
  SparseModel();
  // The feeds of training step `step` (the same for every run).
  FeedMap Batch(int step) const;
};

// Runs training step `step`; the loss, or the step's error.
Result<float> Step(SessionInterface& s, const SparseModel& m, int step);
// Every parameter, flattened in SparseModel::params order.
std::vector<float> Params(SessionInterface& s, const SparseModel& m);
// The parameters after undisturbed training of steps [0, n) in one process.
std::vector<float> Reference(const SparseModel& m, int n);
// The model's loss on batch `step` (no training).
float EvalLoss(SessionInterface& s, const SparseModel& m, int step);
// REQUIREs s's parameters to be n steps of training with every update
// applied once: the step counter exactly n, the rest within 1e-5 of one
// process's, or within loose_tol when `retried` steps ran again (a step run
// again reads what its first run had already updated on the shards that
// kept it, so its gradients may differ a little from one process's).
void RequireAppliedOnce(SessionInterface& s, const SparseModel& m, int n, int64_t retried, float loose_tol = 0.05f);
// REQUIREs a and b to differ by at most tol anywhere.
void RequireClose(const std::vector<float>& a, const std::vector<float>& b, float tol);

}  // namespace sf::testing
