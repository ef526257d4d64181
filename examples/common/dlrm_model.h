// DLRM (Naumov et al., 2019) in its Criteo Kaggle shape, shared by
// examples/dlrm and bench/bench_dlrm:
//
//   dense [n, 13] -> bottom MLP 13-512-256-64-16 (ReLU) -> v_0 [n, 16]
//   categorical [n, 26] -> 26 embedding tables of width 16 -> v_1..v_26
//   dot interaction: [v_0, v_i . v_j for 0 <= j < i <= 26] -> [n, 16 + 351]
//   -> top MLP 367-512-256-1 (ReLU, then the logit) -> logistic loss
//
// The 26 tables are one hash embedding table (NewHashEmbeddingTable) with
// `shards` shards: the reader hashes each categorical value with its field
// (kernels/criteo_format.h), so the fields' ids are disjoint 64-bit keys and
// every field keeps its own rows, admission and eviction counts; a step
// makes one lookup and one sparse update per shard, not 26. The tables get
// sparse Adagrad; the MLPs Adam or SGD (with one backward pass for both:
// Optimizer::SetSparseOptimizer). MLP layers are FusedMatMul (bias and
// ReLU in the product's kernel); the interaction is ops::DotInteraction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardflow/embedding.h"
#include "shardflow/graph.h"

namespace sf::examples {

struct DlrmOptions {
  std::vector<int64_t> bottom = {512, 256, 64, 16};  // after the 13 dense inputs; the last is the table width
  std::vector<int64_t> top = {512, 256, 1};          // after the interaction; the last must be 1
  int64_t shards = 2;                                // shards of the embedding table
  // Admission and eviction of the hash table (HashEmbeddingTableOptions; per shard).
  int64_t min_count = 0, ttl_steps = 0, max_rows = 0;
  double table_lr = 0.05;          // Adagrad on the tables
  double mlp_lr = 0.001;           // the MLPs' optimizer
  std::string mlp_optimizer = "adam";  // "adam" or "sgd"
  uint64_t seed = 1;
  // On a cluster (between-graph workers, each building this graph): with
  // tasks > 0 the table's shard s lives on "/job:worker/task:s % tasks" and
  // the MLPs' variables on tasks in turn, the same in every worker's graph,
  // and the computation goes to tower_device (the worker's task). 0: no
  // device requested (one process).
  int tasks = 0;
  std::string tower_device;
};

// What a program runs; every name is a node or tensor name of the graph.
struct DlrmModel {
  std::string dense = "dense";              // float32 [-1, 13] placeholder
  std::string categorical = "categorical";  // int64 [-1, 26] placeholder
  std::string label = "label";              // float32 [-1] placeholder (0 or 1)
  std::string loss;         // mean logistic loss of the batch
  std::string eval_logits;  // [-1] logits through a read-only view of the table (changes nothing)
  std::string train;        // one training step
  std::string init;         // initialises every variable and the table
  std::vector<std::string> metrics;  // each table shard's HashEmbeddingShardMetrics
};

// Checks options; InvalidArgument naming the bad one.
Status ValidateDlrmOptions(const DlrmOptions& o);

// Builds the model into g; the first error (options, graph) otherwise.
Status BuildDlrm(Graph& g, const DlrmOptions& o, DlrmModel* m);

// One GEMM of a training step as the kernels run it: op(A) [m, k] x op(B) [k, n].
struct DlrmGemm {
  int64_t m, n, k;
  bool ta, tb;
};
// The GEMMs of one training step at `batch`: per MLP layer the forward
// product, the weight gradient and (but for the first bottom layer) the
// input gradient. Their flops are the step's dense flops but for the
// interaction (ops::DotInteraction: about 2% of them) and the elementwise work.
std::vector<DlrmGemm> DlrmStepGemms(const DlrmOptions& o, int64_t batch);

// The table's metrics: the fetched values of DlrmModel::metrics summed over
// the shards; InvalidArgument for a value that is not a shard's metrics.
Result<HashEmbeddingMetrics> SumDlrmMetrics(const std::vector<Tensor>& fetched);

}  // namespace sf::examples
