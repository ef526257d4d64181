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
//
// Workers sharing one input (AddSharedDlrmInput, include/shardflow/chunk_queue_ops.h)
// take its chunks from a chunk queue; a step then also reports its rows
// trained (the input's `trained` op, in the training step's run), so a
// worker that dies has its chunk finished by another from the next row.
#pragma once

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "examples/common/dlrm_model.h"
#include "shardflow/chunk_queue_ops.h"
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
  // A shared input's (else ""): each row's chunk ticket and line, and the
  // report of rows trained (fed trained_ticket, trained_pos) and the release.
  std::string ticket, pos, trained_ticket, trained_pos, trained, release;
};

// Adds the reader (and queue) over files under `name`; the graph's error otherwise.
Result<DlrmInput> AddDlrmInput(Graph& g, const std::vector<std::string>& files, const DlrmInputOptions& o,
                               const std::string& name);
// Adds worker's input from the chunks of plan handed out by chunk_queue
// (o.batch rows per step; epochs are the chunk queue's; a run of the
// enqueue reads one chunk), its report of trained rows running after m's
// training update; the graph's error otherwise.
Result<DlrmInput> AddSharedDlrmInput(Graph& g, const DlrmModel& m, Output chunk_queue,
                                     const ops::CriteoChunkPlan& plan, const DlrmInputOptions& o, int64_t worker,
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
  DlrmTrainer(SessionInterface& session, const DlrmModel& model, const DlrmInput& input);
  ~DlrmTrainer();
  // Starts the queue runner (nothing without the queue).
  Status Start();
  // Dequeues one batch and trains on it; OutOfRange once the input ends. A
  // shared input's batch holding rows of a chunk this worker lost to another
  // (its lease ended) fails with ops::IsLostChunk true, having changed
  // nothing: the caller drops it and steps on.
  Result<DlrmStep> Step(bool fetch_loss = true, const RunOptions& options = {});
  // Dequeues one batch and drops it (resuming past batches a checkpoint trained on).
  Status Skip();
  // Stops the runner (and waits for the dequeue in flight); its error, if any.
  Status Stop();
  // A shared input: gives this worker's chunks back (a worker leaving before
  // the input ends); how many it held. 0 otherwise.
  Result<int64_t> Release();

 private:
  using Batch = Result<std::vector<Tensor>>;
  // Starts the dequeue of the next batch.
  void Prefetch();
  // The batch of the dequeue in flight (started now if none is), starting
  // the next one when it is a batch; *wait_secs: the time spent waiting.
  Batch NextBatch(double* wait_secs);

  SessionInterface& session_;
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
Result<DlrmEval> EvaluateDlrm(SessionInterface& session, const DlrmModel& model, const DlrmInput& input);

}  // namespace sf::examples
