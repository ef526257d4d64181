// DLRM on a local cluster (build/bin/dlrm --nodes N --workers W): N node
// processes (LocalCluster) hold the model, W worker threads of this process
// train it, each with its own graph and ClusterSession (between-graph
// replication), sharing the training files through one chunk queue.
//
// Placement: the table's shard s and the MLPs' variables on tasks in turn
// (DlrmOptions::tasks = N, the same in every worker's graph), the chunk queue
// on task 0, worker w's reader, row queue and computation on task w % N. The
// files are cut into chunks of chunk_bytes (gzip files whole) that the chunk
// queue hands out with leases (include/shardflow/chunk_queue_ops.h): every
// training line is trained once per epoch, in no fixed order across workers.
// Worker 0 initialises the variables and evaluates on the held-out files
// when training ends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "examples/common/dlrm_model.h"
#include "examples/common/dlrm_train.h"

namespace sf::examples {

struct DlrmClusterOptions {
  // The directory holding every training and held-out file: the nodes' --data-dir
  // (a node reads no file outside it; the graphs name the files relative to it).
  std::string data_dir;
  int nodes = 2;                   // node processes of the local cluster
  int workers = 2;                 // training threads, each its own session
  int64_t chunk_bytes = 4 << 20;   // plain files are cut into chunks of this size
  int64_t lease_ms = 30000;        // a silent worker's chunks go to others after this
  int64_t max_steps = 0;           // steps over all workers (0: until the input ends)
  int64_t log_every = 200;         // steps (all workers) between progress lines
  int64_t add_node_at = 0;         // > 0: a node joins once the workers made this many steps
  bool json = false;
};

struct DlrmClusterResult {
  int64_t steps = 0, examples = 0;
  double train_secs = 0;         // the training loops, start to the last worker's end
  double input_wait_secs = 0;    // summed over workers
  double final_loss = 0;         // mean loss of the last log_every steps
  DlrmEval eval;
  HashEmbeddingMetrics table;
  int64_t chunks = 0;
  int64_t lost_batches = 0;  // batches dropped untrained: their chunk's lease had ended (another worker trains them)
  int64_t nodes_added = 0;   // by add_node_at
  int64_t steps_after_add = 0;  // steps the workers made after the added node joined
};

// Starts the cluster, trains on train (io.epochs passes, io.batch rows a
// step), evaluates on test; the first error (a node that does not start, a
// step, the input) otherwise.
Result<DlrmClusterResult> TrainDlrmOnCluster(const DlrmOptions& model, const DlrmInputOptions& io,
                                             const std::vector<std::string>& train,
                                             const std::vector<std::string>& test, const DlrmClusterOptions& o);

}  // namespace sf::examples
