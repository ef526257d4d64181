// Training and evaluating DLRM (examples/common/dlrm_model.h) on
// Criteo-format files read in the graph, shared by examples/dlrm and
// bench/bench_dlrm.
//
//   Graph g;  DlrmModel m;  BuildDlrm(g, options, &m);
//   DlrmInput in = AddDlrmInput(g, train_files, input_options, "train");
//   DlrmInput test = AddDlrmInput(g, test_files, test_options, "test");
//   Session s(g);  s.Run({}, {}, {m.init});
//   DlrmTrainer t(s, m, in);  t.Start();
//   while (true) { auto r = t.Step(); if (!r.ok()) break; ... }  // OutOfRange at the end
//   auto e = EvaluateDlrm(s, m, test);
//
// The input: a CriteoReader op (reader threads parsing ahead) feeding a
// FIFOQueue (ops::CriteoBatchQueue) kept full by a QueueRunner. The next
// batch is dequeued by a run of its own (RunAsync) started as soon as a step
// has its batch, so it overlaps that step's training; a step waits only when
// that dequeue has not finished (the queue ran dry), and that wait is its
// input wait. Thread-safety: a DlrmTrainer is used from one thread.
#pragma once

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "examples/common/dlrm_model.h"
#include "shardflow/queue_runner.h"
#include "shardflow/reader_ops.h"
#include "shardflow/session.h"

namespace sf::examples {

struct DlrmInputOptions {
  int64_t batch = 512;           // rows per step
  int reader_threads = 1;        // parsing threads
  int64_t reader_batch = 4096;   // rows a reader thread parses per batch
  int64_t prefetch_batches = 4;  // parsed batches kept ready per reader
  int64_t epochs = 1;            // passes over the files (<= 0: until stopped)
  bool queue = true;             // through a FIFOQueue (false: a run takes the reader's batch itself; batch == reader_batch)
};

// The input nodes of one file set.
struct DlrmInput {
  std::string label, dense, categorical;  // one batch per run
  std::string enqueue, close, cancel;     // "" without the queue
};

// Adds the reader (and queue) over files under `name`; the graph's error otherwise.
Result<DlrmInput> AddDlrmInput(Graph& g, const std::vector<std::string>& files, const DlrmInputOptions& o,
                               const std::string& name);

struct DlrmStep {
  int64_t rows = 0;
  double loss = 0;        // the batch's mean loss (when fetched)
  double wait_secs = 0;   // waiting for the batch
  double train_secs = 0;  // the training step
};

class DlrmTrainer {
 public:
  // REQUIRES: session, model and input outlive the trainer.
  DlrmTrainer(Session& session, const DlrmModel& model, const DlrmInput& input);
  ~DlrmTrainer();
  // Starts the queue runner (nothing without the queue).
  Status Start();
  // Dequeues one batch and trains on it; OutOfRange once the input ends.
  Result<DlrmStep> Step(bool fetch_loss = true, const RunOptions& options = {});
  // Dequeues one batch and drops it (resuming past batches a checkpoint trained on).
  Status Skip();
  // Stops the runner (and waits for the dequeue in flight); its error, if any.
  Status Stop();

 private:
  using Batch = Result<std::vector<Tensor>>;
  // Starts the dequeue of the next batch.
  void Prefetch();
  // The batch of the dequeue in flight (started now if none is), starting
  // the next one when it is a batch; *wait_secs: the time spent waiting.
  Batch NextBatch(double* wait_secs);

  Session& session_;
  const DlrmModel& model_;
  const DlrmInput& input_;
  std::unique_ptr<QueueRunner> runner_;
  std::future<Batch> pending_;  // the dequeue in flight; invalid when none is
};

struct DlrmEval {
  int64_t examples = 0;
  double auc = 0, logloss = 0;
};
// Reads `input` to its end and scores every example with the model's
// evaluation logits (the table read-only): AUC and mean log loss.
Result<DlrmEval> EvaluateDlrm(Session& session, const DlrmModel& model, const DlrmInput& input);

}  // namespace sf::examples
