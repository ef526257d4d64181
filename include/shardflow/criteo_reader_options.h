// CriteoReaderOptions: how a Criteo reader (the CriteoReader op,
// shardflow/reader_ops.h) reads its files. Thread-safety: a value.
#pragma once

#include <cstdint>

namespace sf {

// How a Criteo reader reads; each field's default in its comment. The node's
// attributes of the same names hold them (skip_malformed as on_malformed
// "skip" or "fail").
struct CriteoReaderOptions {
  int64_t batch_size = 1024;       // rows per batch read, 1..2^20
  int num_threads = 2;             // reader threads, 1..64
  int64_t prefetch_batches = 4;    // finished batches kept ready, 1..1024
  bool skip_malformed = true;      // false: a malformed line fails the step, naming file and line
  int64_t max_line_bytes = 65536;  // a longer line is malformed; 1..256 MiB
  int64_t chunk_bytes = 64 << 20;  // plain files are cut into chunks of this size for the threads
  int64_t num_epochs = 1;          // passes over the files; <= 0: until the session ends
};

}  // namespace sf
