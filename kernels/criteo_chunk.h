// Reading one chunk of a Criteo-format file whole, for the workers that
// share an input through a chunk queue (kernels/chunk_leases.h): the
// CriteoChunkReader op reads the chunk a ChunkQueueTake handed it. Each row
// keeps its line's position in the chunk (1-based), which the worker reports
// as trained, so a chunk handed to another worker resumes after it.
// Thread-safety: pure functions over their arguments (and the file).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/line_reader.h"
#include "shardflow/criteo_reader_options.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

// The good lines of a chunk after its first `skip` lines.
struct CriteoChunkRows {
  Tensor label;        // [n] float32
  Tensor dense;        // [n, 13] float32, log(1 + x)
  Tensor categorical;  // [n, 26] int64
  Tensor pos;          // [n] int64: each row's line in the chunk (1-based)
  int64_t last_pos = 0;   // the line of the last row (0: none); >= skip when a row was read
  int64_t malformed = 0;  // lines skipped as malformed
  std::string first_malformed;  // where and why the first was refused ("" when none)
};

// The rows one chunk may hold (about 0.7 GB of tensors): a gzip file is one
// chunk, read whole, and must not take the process's memory.
constexpr int64_t kMaxCriteoChunkRows = int64_t{1} << 22;

// Reads chunk from line skip + 1 to its end, with options' max_line_bytes
// and skip_malformed (the other options are the threaded reader's). Errors
// name the file: NotFound / PermissionDenied when it cannot be opened,
// DataLoss for a truncated or corrupt gzip file, InvalidArgument naming the
// file, line and field for a malformed line when skip_malformed is false;
// ResourceExhausted past max_rows rows (cut the input into smaller gzip
// files, or use plain ones, which are cut into chunks); InvalidArgument for
// a negative skip.
Result<CriteoChunkRows> ReadCriteoChunk(const LineChunk& chunk, int64_t skip, const CriteoReaderOptions& options,
                                        int64_t max_rows = kMaxCriteoChunkRows);

// Where and why line the reader last gave was refused: "'f' line 12 (field
// I3): why". bad_field -1: none; e is a CriteoLineError. Never fails.
std::string DescribeMalformedLine(const LineReader& in, const std::string& path, int bad_field, int e,
                                  int64_t max_line_bytes);

// A chunk plan as one int64 list (the CriteoChunkReader's chunks attr): per
// chunk its file's index in files, its begin and its end (LineChunk::kToEnd
// for a whole file). EncodeChunkPlan never fails; DecodeChunkPlan gives
// InvalidArgument for a list that is not triples of a file index in range
// and a valid range.
std::vector<int64_t> EncodeChunkPlan(const std::vector<std::string>& files, const std::vector<LineChunk>& chunks);
Result<std::vector<LineChunk>> DecodeChunkPlan(const std::vector<std::string>& files, const std::vector<int64_t>& plan);

}  // namespace sf
