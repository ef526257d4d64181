// fashion_mnist --workers N: between-graph replicated training on a cluster
// of node processes (a local one started here, or the user's own).
//
// Each worker is a thread with its own graph (the model with the same
// variable names, its computation pinned to task w % K of the K tasks) and
// its own ClusterSession; the variables live on the nodes and are shared by
// name. Variable i lives on task i % K in every graph, so all sessions see
// the same variables.
//
// --sync (default): N + b workers (b = --backup-workers); each variable's
// shard averages the first N gradients of a step, applies them once and
// advances the global step; the late ones are counted and dropped. An epoch
// is steps_per_epoch / N global steps (about one pass over the data in
// accepted gradients).
// --async: N workers; each gradient is applied on arrival, tagged with the
// variable version it read, so the shards record its staleness. An epoch is
// steps_per_epoch updates.
//
// Data: each worker shuffles the whole training set with its own stream
// (seed, epoch, worker) and walks through it batch by batch, so the workers
// see different batches and runs depend on thread timing only through which
// gradients arrive first.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "examples/common/fashion_mnist_data.h"
#include "examples/common/models.h"
#include "examples/common/trace.h"

namespace sf::examples {

struct WorkerTrainingOptions {
  ModelOptions model;        // the model and its optimizer settings (build_optimizer is ignored)
  int64_t epochs = 1;
  int64_t batch = 128;
  int64_t n_train = 0;       // training examples used (the first n_train)
  int workers = 1;           // N >= 1
  int backup_workers = 0;    // b >= 0, sync only
  bool async = false;        // false: synchronous with backup workers
  int nodes = 2;             // size of the local cluster (when cluster is "")
  std::string cluster;       // "": start a local cluster; else a member's HOST:PORT
  std::string tls_dir;       // the cluster's credentials directory (with cluster)
  std::string out = "runs";  // parent folder of the run folder
  bool json = false;         // JSON lines on stdout
  const TraceFlag* trace = nullptr;  // --trace: worker 0's step of that number (null: none)
};

// Trains with workers as described above and prints per-epoch results and
// the summary. Returns the process exit code (1 after printing the error).
int TrainWithWorkers(const WorkerTrainingOptions& o, const Dataset& train, const Dataset& test);

// Test-set accuracy and loss in batches of 1000, on a Session or a
// ClusterSession (anything with the Run(feeds, fetches) API).
template <class S>
Status EvaluateClassifier(S& s, const ClassifierModel& m, const Dataset& test, double* acc, double* loss) {
  std::vector<int64_t> order(test.size());
  std::iota(order.begin(), order.end(), 0);
  double correct = 0, total_loss = 0;
  for (int64_t b = 0; b < test.size(); b += 1000) {
    const int64_t n = std::min<int64_t>(1000, test.size() - b);
    Tensor xb, yb;
    MakeBatch(test, order, b, n, &xb, &yb);
    auto r = s.Run({{"x", xb}, {"labels", yb}}, {m.accuracy, m.loss});
    if (!r.ok()) return r.status();
    correct += (*r)[0].template scalar_as<double>() * n;
    total_loss += (*r)[1].template scalar_as<double>() * n;
  }
  *acc = correct / test.size();
  *loss = total_loss / test.size();
  return Status::OK();
}

}  // namespace sf::examples
