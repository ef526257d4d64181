// Reader ops: input read, parsed and batched inside the graph, as in the
// TensorFlow paper (reader ops feeding queues). Today one format: Criteo
// click logs (plain or gzip TSV: label, 13 integer fields, 26 hex
// categorical fields; docs/USER_GUIDE.md, "Reading Criteo data").
//
//   auto files = ops::CriteoFiles("/data/criteo");            // sorted regular files
//   CriteoReaderOptions o;  o.batch_size = 4096;  o.num_threads = 2;
//   auto in = ops::CriteoBatchQueue(g, *files, o, 512);       // tf.train.batch-like
//   ... build the model on in.label [?], in.dense [?, 13], in.categorical [?, 26] ...
//   QueueRunnerOptions r;  r.parallel = 2;  r.close_target = in.close.name();
//   r.cancel_target = in.cancel.name();
//   QueueRunner runner(session, {in.enqueue.name()}, nullptr, r);
//   runner.Start();   // steps now dequeue ready batches; OutOfRange at the end
//
// The CriteoReader op's kernel owns reader threads (num_threads) that parse
// ahead of the steps (prefetch_batches); a run of the op takes one batch. Its
// state lives with the node's kernel: run it from one run signature (the
// enqueue target of a QueueRunner), as each signature plans its own kernels.
// Builders record errors in the graph like every other builder (g.status()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardflow/criteo_reader_options.h"
#include "shardflow/graph.h"

namespace sf {
namespace ops {

// The outputs of one run of a CriteoReader node: label [n] float32 (0/1),
// dense [n, 13] float32 (log(1 + max(x, 0)), missing = 0), categorical
// [n, 26] int64 (field-hashed ids, kernels/criteo_format.h), malformed: int64
// scalar, lines skipped as malformed so far. n is batch_size except for a
// reader thread's last batch. All invalid on a graph error.
struct CriteoColumns {
  Output label, dense, categorical, malformed;
};

// Adds a CriteoReader node over files (read in order within an epoch). A run
// fails with OutOfRange once the input is exhausted; with a file that cannot
// be read, a truncated gzip file, or (skip_malformed false) a malformed
// line, with an error naming the file (and line).
CriteoColumns CriteoReader(Graph& g, const std::vector<std::string>& files, const CriteoReaderOptions& options = {},
                           const std::string& name = "criteo_reader");

// TF 1.x's tf.train.batch over a CriteoReader: a FIFOQueue (capacity
// elements, i.e. rows) that `enqueue` fills with one reader batch per run,
// and label/dense/categorical dequeuing `batch_size` rows per run
// (QueueDequeueUpTo: the last batch of the input may be short; OutOfRange
// after it). Run `enqueue` from a QueueRunner with close_target `close`
// and cancel_target `cancel` (closes the queue and fails an enqueue waiting
// on it while full, so QueueRunner::Stop returns before the input ends).
// All invalid on a graph error (batch_size outside [1, 2^31), bad options).
struct CriteoInput {
  Output label, dense, categorical;
  Operation enqueue, close, cancel;
};
CriteoInput CriteoBatchQueue(Graph& g, const std::vector<std::string>& files, const CriteoReaderOptions& options,
                             int64_t batch_size, int64_t capacity = 0, const std::string& name = "criteo_input");

// The regular files of dir whose names do not start with '.', sorted by
// name: a data set's files. NotFound naming dir when it cannot be listed or
// holds no such file.
Result<std::vector<std::string>> CriteoFiles(const std::string& dir);

}  // namespace ops
}  // namespace sf
