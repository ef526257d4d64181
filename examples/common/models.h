// The Fashion-MNIST models shared by the example and the benchmarks.
#pragma once

#include <string>
#include <vector>

#include "shardflow/graph.h"
#include "shardflow/replication.h"

namespace sf::examples {

struct ClassifierModel {
  Output x;         // float32 [-1, 784] placeholder "x"
  Output labels;    // int32 [-1] placeholder "labels"
  Output logits;    // [-1, 10]
  Output loss;      // mean cross entropy
  Output accuracy;  // fraction of correct predictions in the batch
  Output lr;        // float32 scalar placeholder "lr": the learning rate of each step
  Operation train;  // the training op (SGD with momentum)
  Operation init;   // initialises every variable
};

struct ModelOptions {
  std::string model = "mlp";  // "mlp" (784-512-256-10) or "cnn"
  double learning_rate = 0.05;  // the default fed to "lr" (see LearningRateAt)
  double momentum = 0.9;
  int64_t seed = 1;
  // Replicated training (fashion_mnist --workers): one graph per worker on a cluster.
  bool build_optimizer = true;  // false: m->train stays -1 (the caller adds replicated updates)
  int variable_tasks = 0;       // > 0: variable i lives on "/job:worker/task:<i % variable_tasks>",
                                // so every worker's graph places each variable alike
  std::string tower_device;     // "" = placement decides; else where the model's computation runs
  // Non-null: the model reads each variable with its version
  // (ReadVariableWithVersion, for MinimizeAsync); the reads are appended here.
  std::vector<VersionedRead>* versioned_reads = nullptr;
};

// The learning rate of step `step` of `total`: cosine decay from `base` to 0,
// so training ends on small, stable steps.
double LearningRateAt(double base, int64_t step, int64_t total);

// Builds the model into g; an error names what went wrong (unknown model, or
// the graph's first construction error).
Status BuildClassifier(Graph& g, const ModelOptions& options, ClassifierModel* m);

}  // namespace sf::examples
