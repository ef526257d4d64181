// CriteoReader: batches of parsed Criteo lines (kernels/criteo_format.h)
// from a list of files, made ahead of need by reader threads of its own.
//
//   CriteoReaderOptions o;  o.batch_size = 512;  o.num_threads = 2;
//   auto r = CriteoReader::Create({"day_0.tsv.gz", "day_1.tsv"}, o);
//   for (auto b = (*r)->NextBlocking(); b.ok(); b = (*r)->NextBlocking()) { ... }
//   // OutOfRange once every line of every epoch has been handed out
//
// Work: plain files are cut into chunks of chunk_bytes, gzip files are one
// chunk each; threads claim chunks in order (every epoch in turn) and each
// fills its own batches, so every line of an epoch is in exactly one batch,
// in no fixed order across threads. A thread's last batch of the input may
// be short (fewer than batch_size rows).
//
// Memory is bounded whatever the input: at most prefetch_batches finished
// batches wait to be taken (threads park on a condition variable until one
// is), plus one batch being filled and one line buffer (max_line_bytes +
// 256 KiB) per thread.
//
// Bad input. A malformed line (not 40 fields, a label other than 0/1, a
// non-number, a line over max_line_bytes) is skipped and counted (stats()),
// or with skip_malformed false fails the reader with InvalidArgument naming
// the file, the line number and the field. A file that cannot be opened
// fails it naming the file (NotFound, PermissionDenied); a truncated or
// corrupt gzip file fails it with DataLoss naming the file. A failed reader
// answers every later Next with the same error.
//
// Thread-safety: Next, NextBlocking and stats may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kernels/line_reader.h"
#include "shardflow/attr.h"
#include "shardflow/criteo_reader_options.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {


// One batch: label [n] float32, dense [n, 13] float32 (log(1 + x)),
// categorical [n, 26] int64 ids.
struct CriteoBatch {
  Tensor label, dense, categorical;
  int64_t rows() const { return label.num_elements(); }
};

struct CriteoReaderStats {
  int64_t lines = 0;      // lines parsed into batches
  int64_t malformed = 0;  // lines skipped as malformed
  int64_t batches = 0;    // batches handed out
  std::string first_malformed;  // where and why the first skipped line was refused ("" when none)
};

// Checks options against their ranges; InvalidArgument naming the option.
Status ValidateCriteoReaderOptions(const CriteoReaderOptions& o);
// The options a CriteoReader node's attrs give (absent ones keep their
// defaults), checked; InvalidArgument naming the attr otherwise.
Result<CriteoReaderOptions> CriteoReaderOptionsFromAttrs(const AttrMap& attrs);
// The attrs that give options (all of them, on_malformed included).
void CriteoReaderOptionsToAttrs(const CriteoReaderOptions& o, AttrMap* attrs);
// The files attr: one path per line; InvalidArgument when it names none.
Result<std::vector<std::string>> SplitCriteoFiles(const std::string& joined);

class CriteoReader {
 public:
  // A reader of files (each read whole, in order of the list within an
  // epoch); starts no thread until the first Next. InvalidArgument for bad
  // options or an empty list; NotFound / PermissionDenied naming a file
  // that cannot be opened.
  static Result<std::unique_ptr<CriteoReader>> Create(std::vector<std::string> files, CriteoReaderOptions options);
  // Stops the threads; a Next still waiting gets Aborted.
  ~CriteoReader();
  CriteoReader(const CriteoReader&) = delete;
  CriteoReader& operator=(const CriteoReader&) = delete;

  // Calls done with the next batch once one is ready (at once when one is),
  // on the caller's or a reader thread; OutOfRange after the last batch, the
  // reader's error once it has failed. done runs exactly once.
  void Next(std::function<void(Result<CriteoBatch>)> done);
  // Next, waiting on the calling thread.
  Result<CriteoBatch> NextBlocking();
  CriteoReaderStats stats() const;

 private:
  CriteoReader(std::vector<LineChunk> chunks, CriteoReaderOptions options);
  void StartLocked();  // REQUIRES: mu_
  void ThreadMain();
  // Reads one chunk into *batch, pushing full batches; an error fails the reader.
  Status ReadChunk(const LineChunk& chunk, CriteoBatch* batch, int64_t* rows);
  // Hands a finished batch of `rows` rows to a waiting Next or the ready
  // queue, waiting while the queue is full; false when the reader stops.
  bool Push(CriteoBatch batch, int64_t rows);
  void Fail(Status s);
  CriteoBatch NewBatch() const;

  const std::vector<LineChunk> chunks_;
  const CriteoReaderOptions options_;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<int64_t> lines_seen_{0};   // lines read, good or malformed
  std::atomic<int64_t> chunks_done_{0};  // chunks read to their end

  mutable std::mutex mu_;
  std::condition_variable room_;  // a ready slot freed, or stop
  bool started_ = false;                                     // GUARDED_BY(mu_)
  bool stop_ = false;                                        // GUARDED_BY(mu_)
  int running_ = 0;                                          // GUARDED_BY(mu_): threads not yet done
  Status error_;                                             // GUARDED_BY(mu_)
  std::deque<CriteoBatch> ready_;                            // GUARDED_BY(mu_)
  std::deque<std::function<void(Result<CriteoBatch>)>> waiting_;  // GUARDED_BY(mu_)
  CriteoReaderStats stats_;                                  // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;                         // GUARDED_BY(mu_) until joined
};

}  // namespace sf
