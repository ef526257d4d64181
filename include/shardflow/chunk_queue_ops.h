// Sharing an input among workers: the chunks of the files go out from one
// chunk queue (an actor on the task it is placed on) to every worker that
// reads them, with a lease on each chunk handed out, so every example is
// trained once per epoch even when workers die (docs/USER_GUIDE.md,
// "Sharing the input among workers").
//
//   auto plan = ops::PlanCriteoChunks(files, 16 << 20);              // same files, same plan, every worker
//   Output q;
//   { auto on = g.DeviceScope("/job:worker/task:0");  q = ops::ChunkQueue(g, plan->num_chunks(), {}, "chunks"); }
//   auto in = ops::SharedCriteoBatchQueue(g, q, *plan, reader_options, /*worker=*/w, 512);
//   ... build the model on in.label, in.dense, in.categorical; train = opt.Minimize(...) ...
//   Status s = ops::ReportTrainedBefore(g, in, *train);               // the report gates the update
//   QueueRunnerOptions r;  r.close_target = in.close.name();  r.cancel_target = in.cancel.name();
//   QueueRunner runner(session, {in.enqueue.name()}, nullptr, r);  runner.Start();
//   // each step: dequeue label, dense, categorical, ticket, pos in one run, then train fed
//   // with them, running in.trained (fed ticket and pos) in the same run as train; a step
//   // failing with IsLostChunk changed nothing: drop its batch and go on
//   // at the end, or a worker leaving mid-epoch: run in.release
//
// A worker is a number the caller picks, distinct among the workers of one
// queue (a process id, a worker index). The queue hands a worker's chunks
// to others when it runs `release` or its lease ends: it called nothing
// (took, read or reported trained rows) for lease_ms, and when its `enqueue`
// reads into another row queue than before (its task moved to another node,
// whose row queue is new: the rows of the old one are read again), so two
// workers must never share a number. A chunk handed again
// resumes after the last row reported trained. What is exact: every row is
// read into some worker's batches until reported trained, and the report
// runs before the step's updates (ReportTrainedBefore), so a worker that
// lost its lease (a live one held up past lease_ms too) has its step refused
// before it changes anything. Only a step cut between its taken report and
// its updates (a worker killed mid-step) leaves its rows untrained.
// Builders record errors in the graph like every other builder (g.status()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardflow/criteo_reader_options.h"
#include "shardflow/graph.h"

namespace sf {
namespace ops {

struct ChunkQueueOptions {
  int64_t num_epochs = 1;    // passes over the chunks; <= 0: endless
  int64_t lease_ms = 30000;  // a worker silent this long loses its chunks to others
};

// The chunks of files: plain files cut every chunk_bytes, gzip files whole
// (kernels/line_reader.h), as the CriteoChunkReader op's attrs hold them.
struct CriteoChunkPlan {
  std::vector<std::string> files;
  std::vector<int64_t> chunks;  // per chunk: file index, begin, end (-1: to the end)
  int64_t num_chunks() const { return static_cast<int64_t>(chunks.size() / 3); }
};
// Plans the chunks; NotFound / PermissionDenied naming a file that cannot
// be opened, InvalidArgument for no file or chunk_bytes < 1.
Result<CriteoChunkPlan> PlanCriteoChunks(const std::vector<std::string>& files, int64_t chunk_bytes);

// Adds a ChunkQueue node: the chunk queue shared_name of num_chunks chunks
// (a resource handle; sessions and workers naming it on one task share it).
// Invalid on a graph error (bad options, an empty name).
Output ChunkQueue(Graph& g, int64_t num_chunks, const ChunkQueueOptions& options, const std::string& shared_name);

// One worker's input from a chunk queue: a FIFOQueue of rows (capacity
// rows; 0: 4 batches) that `enqueue` fills with one whole chunk per run, and
// a batch dequeued per run of its outputs: batch_size rows, or fewer when
// fewer are there (QueueDequeueAvailable: near the end of an epoch the
// rest of a batch may sit in chunks other workers are still training).
struct SharedCriteoInput {
  Output label, dense, categorical;  // [n], [n, 13], [n, 26]
  Output ticket, pos;                // [n] int64: each row's chunk ticket and line in the chunk
  Output trained_ticket, trained_pos;  // placeholders [?] int64 of `trained`: feed them the step's ticket and pos
  Operation enqueue;  // takes a chunk (waiting while others hold the last ones), reads it, enqueues its rows,
                      // reports it read; OutOfRange once every chunk of every epoch is done
  Operation close, cancel;  // close the row queue (cancel also fails a waiting enqueue)
  Operation trained;  // reports the fed rows trained: run it in the step that trains them
  Operation release;  // gives this worker's chunks back to the queue
};
// The reader, the row queue and the reports of `worker` over chunk_queue,
// whose chunks are plan's; the chunk queue's ops go on its device, the
// rest on the device scope in force. Invalid on a graph error.
SharedCriteoInput SharedCriteoBatchQueue(Graph& g, Output chunk_queue, const CriteoChunkPlan& plan,
                                         const CriteoReaderOptions& options, int64_t worker, int64_t batch_size,
                                         int64_t capacity = 0, const std::string& name = "shared_input");

// Makes every update `train` runs wait for in.trained: train itself, or the
// ops a group (a NoOp gathering control inputs, as Optimizer::Minimize
// returns) gathers, through nested groups. Run in.trained in the same run as
// train: a report the queue refuses (the worker's lease on a chunk ended and
// the chunk went to another worker, IsLostChunk) then fails the step before
// any variable changes, and the batch's rows are the new holder's alone to
// train. InvalidArgument for an input or op of another graph, or a report
// made to run after train.
Status ReportTrainedBefore(Graph& g, const SharedCriteoInput& in, Operation train);

// What a refused `trained` report's error holds (FailedPrecondition): the
// worker lost a chunk of its batch to another worker.
inline constexpr const char* kLostChunkText = "no longer holds";
// True for a step that failed on such a refusal: with ReportTrainedBefore it
// changed nothing, so the worker drops the batch and goes on. Never fails.
bool IsLostChunk(const Status& s);

}  // namespace ops
}  // namespace sf
