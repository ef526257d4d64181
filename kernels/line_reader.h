// LineReader: the lines of one chunk of a text file, plain or gzip, in
// bounded memory. The readers of kernels/criteo_reader.h use it; nothing in
// it knows the Criteo format.
//
// A chunk is a byte range [begin, end) of a plain file; a line belongs to the
// chunk its first byte is in, so chunks cut anywhere in a file give every
// line exactly once (a reader of a chunk that starts inside a line skips to
// the next one, and finishes a line that runs past its end). A gzip file
// (found by its magic bytes, whatever its name) cannot be cut: it is one
// chunk, begin 0 and end kToEnd; concatenated gzip members are read in turn.
//
// Memory: one buffer of max_line_bytes plus 256 KiB (plus zlib's state for
// gzip), whatever the file holds. A line longer than max_line_bytes is
// reported as kTooLong and skipped to its end without being kept.
// Thread-compatible: one thread uses one reader.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardflow/status.h"

namespace sf {

// A byte range of a file (end kToEnd: to its end).
struct LineChunk {
  static constexpr int64_t kToEnd = -1;
  std::string path;
  int64_t begin = 0;
  int64_t end = kToEnd;
};

// The chunks of files: plain files cut every chunk_bytes (at least one
// chunk each, even empty), gzip files whole. NotFound or PermissionDenied
// naming a file that cannot be opened; InvalidArgument for chunk_bytes < 1.
Result<std::vector<LineChunk>> PlanLineChunks(const std::vector<std::string>& files, int64_t chunk_bytes);

// True when the file starts with gzip's magic bytes; an error naming the
// file when it cannot be opened or read.
Result<bool> IsGzipFile(const std::string& path);

// The 1-based number of the line starting at byte `offset` of a plain file
// (counts the newlines before it); an error naming the file when it cannot
// be read.
Result<int64_t> LineNumberAt(const std::string& path, int64_t offset);

class LineReader {
 public:
  enum class Got { kLine, kTooLong, kEnd };

  // Opens a chunk. NotFound / PermissionDenied / Unavailable naming the file
  // when it cannot be opened; InvalidArgument for a gzip file asked for a
  // part only, or max_line_bytes < 1.
  static Result<std::unique_ptr<LineReader>> Open(const LineChunk& chunk, int64_t max_line_bytes);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line of the chunk, without its '\n': kLine with *line valid
  // until the next call, kTooLong for a line over max_line_bytes (skipped),
  // kEnd after the last. Errors name the file: DataLoss for a truncated or
  // corrupt gzip file, Unavailable for a read that failed.
  Result<Got> Next(std::string_view* line);
  // The byte offset in the (uncompressed) file of the line Next last gave.
  int64_t line_offset() const { return line_offset_; }
  // The 1-based number, within the chunk, of the line Next last gave.
  int64_t line_in_chunk() const { return lines_; }
  bool gzip() const { return gzip_; }
  // The 1-based line number of the line Next last gave in its file: known
  // at once for gzip and for chunks that start the file, counted in the
  // file otherwise. An error naming the file when it cannot be read.
  Result<int64_t> LineNumber() const;

 private:
  class Source;
  class PlainSource;
  class GzipSource;
  LineReader() = default;
  // Reads more bytes after end_; false at the end of the input.
  Result<bool> Fill();

  LineChunk chunk_;
  std::unique_ptr<Source> source_;
  bool gzip_ = false;
  int64_t max_line_ = 0;
  std::vector<char> buf_;
  size_t pos_ = 0, end_ = 0, scanned_ = 0;  // unread bytes [pos_, end_); no '\n' in [pos_, scanned_)
  int64_t buf_offset_ = 0;                  // file offset of buf_[0]
  bool eof_ = false;
  bool skipping_ = false;  // discarding bytes up to the next '\n' (an over-long line, or the partial line before the chunk)
  int64_t line_offset_ = 0;
  int64_t lines_ = 0;
};

}  // namespace sf
