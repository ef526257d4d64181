#include "kernels/line_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace sf {
namespace {

constexpr size_t kReadBytes = 256 << 10;

// The error of a failed open/read of path, by errno.
Status FileError(const std::string& path, const char* what, int err) {
  std::string m = std::string("cannot ") + what + " '" + path + "': " + std::strerror(err);
  if (err == ENOENT || err == ENOTDIR) return NotFound(m);
  if (err == EACCES || err == EPERM) return PermissionDenied(m);
  return Unavailable(m);
}

// An open file descriptor, closed when it goes.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Opens a regular file for reading; an error naming it otherwise.
Result<Fd> OpenRegular(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return FileError(path, "open", errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return FileError(path, "stat", errno);
  if (S_ISDIR(st.st_mode)) return InvalidArgument("'" + path + "' is a directory, not a file");
  return fd;
}

// Reads up to n bytes at offset (short only at the end); an error naming path.
Result<size_t> ReadAt(int fd, const std::string& path, char* p, size_t n, int64_t offset) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, p + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return FileError(path, "read", errno);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

Result<bool> IsGzipFd(int fd, const std::string& path) {
  unsigned char magic[2];
  SF_ASSIGN_OR_RETURN(size_t n, ReadAt(fd, path, reinterpret_cast<char*>(magic), 2, 0));
  return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

}  // namespace

// Where the bytes come from: up to n bytes into p, 0 at the end.
class LineReader::Source {
 public:
  virtual ~Source() = default;
  virtual Result<size_t> Read(char* p, size_t n) = 0;
};

class LineReader::PlainSource : public Source {
 public:
  PlainSource(Fd fd, std::string path, int64_t offset) : fd_(std::move(fd)), path_(std::move(path)), offset_(offset) {}
  Result<size_t> Read(char* p, size_t n) override {
    SF_ASSIGN_OR_RETURN(size_t got, ReadAt(fd_.get(), path_, p, n, offset_));
    offset_ += static_cast<int64_t>(got);
    return got;
  }

 private:
  Fd fd_;
  std::string path_;
  int64_t offset_;
};

class LineReader::GzipSource : public Source {
 public:
  GzipSource(Fd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)), in_(new char[kReadBytes]) {}
  ~GzipSource() override {
    if (inited_) inflateEnd(&z_);
  }
  Status Init() {
    std::memset(&z_, 0, sizeof z_);
    if (inflateInit2(&z_, 15 + 16) != Z_OK) return ResourceExhausted("zlib could not start for '" + path_ + "'");
    inited_ = true;
    return Status::OK();
  }
  Result<size_t> Read(char* p, size_t n) override {
    z_.next_out = reinterpret_cast<Bytef*>(p);
    z_.avail_out = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    const uInt want = z_.avail_out;
    while (z_.avail_out == want) {
      if (z_.avail_in == 0 && !in_eof_) SF_RETURN_IF_ERROR(Refill());
      if (member_done_) {
        if (z_.avail_in == 0) return size_t{0};  // the input ends between members: a clean end
        inflateReset(&z_);  // another member follows
        member_done_ = false;
      }
      if (z_.avail_in == 0)
        return DataLoss("'" + path_ + "' is a truncated gzip file (it ends inside a compressed stream)");
      const int r = inflate(&z_, Z_NO_FLUSH);
      if (r == Z_STREAM_END) member_done_ = true;
      else if (r != Z_OK && r != Z_BUF_ERROR)
        return DataLoss("'" + path_ + "' is not a valid gzip file: " + (z_.msg ? z_.msg : "inflate failed"));
    }
    return static_cast<size_t>(want - z_.avail_out);
  }

 private:
  Status Refill() {
    SF_ASSIGN_OR_RETURN(size_t got, ReadAt(fd_.get(), path_, in_.get(), kReadBytes, in_offset_));
    in_offset_ += static_cast<int64_t>(got);
    if (got == 0) in_eof_ = true;
    z_.next_in = reinterpret_cast<Bytef*>(in_.get());
    z_.avail_in = static_cast<uInt>(got);
    return Status::OK();
  }

  Fd fd_;
  std::string path_;
  std::unique_ptr<char[]> in_;
  int64_t in_offset_ = 0;
  bool in_eof_ = false;
  bool member_done_ = false;
  bool inited_ = false;
  z_stream z_;
};

Result<bool> IsGzipFile(const std::string& path) {
  SF_ASSIGN_OR_RETURN(Fd fd, OpenRegular(path));
  return IsGzipFd(fd.get(), path);
}

Result<std::vector<LineChunk>> PlanLineChunks(const std::vector<std::string>& files, int64_t chunk_bytes) {
  if (chunk_bytes < 1) return InvalidArgument("chunk_bytes must be >= 1, got " + std::to_string(chunk_bytes));
  std::vector<LineChunk> chunks;
  for (const std::string& f : files) {
    SF_ASSIGN_OR_RETURN(Fd fd, OpenRegular(f));
    SF_ASSIGN_OR_RETURN(bool gz, IsGzipFd(fd.get(), f));
    struct stat st;
    if (::fstat(fd.get(), &st) != 0) return FileError(f, "stat", errno);
    const int64_t size = static_cast<int64_t>(st.st_size);
    if (gz || size <= chunk_bytes) {
      chunks.push_back({f, 0, LineChunk::kToEnd});
      continue;
    }
    for (int64_t b = 0; b < size; b += chunk_bytes)
      chunks.push_back({f, b, size - b <= chunk_bytes ? LineChunk::kToEnd : b + chunk_bytes});
  }
  return chunks;
}

Result<int64_t> LineNumberAt(const std::string& path, int64_t offset) {
  SF_ASSIGN_OR_RETURN(Fd fd, OpenRegular(path));
  std::unique_ptr<char[]> buf(new char[kReadBytes]);
  int64_t lines = 1;
  for (int64_t at = 0; at < offset;) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(kReadBytes, offset - at));
    SF_ASSIGN_OR_RETURN(size_t got, ReadAt(fd.get(), path, buf.get(), want, at));
    if (got == 0) break;
    lines += std::count(buf.get(), buf.get() + got, '\n');
    at += static_cast<int64_t>(got);
  }
  return lines;
}

LineReader::~LineReader() = default;

Result<std::unique_ptr<LineReader>> LineReader::Open(const LineChunk& chunk, int64_t max_line_bytes) {
  if (max_line_bytes < 1) return InvalidArgument("max_line_bytes must be >= 1, got " + std::to_string(max_line_bytes));
  SF_ASSIGN_OR_RETURN(Fd fd, OpenRegular(chunk.path));
  SF_ASSIGN_OR_RETURN(bool gz, IsGzipFd(fd.get(), chunk.path));
  std::unique_ptr<LineReader> r(new LineReader());
  r->chunk_ = chunk;
  r->gzip_ = gz;
  r->max_line_ = max_line_bytes;
  if (gz) {
    if (chunk.begin != 0 || chunk.end != LineChunk::kToEnd)
      return InvalidArgument("'" + chunk.path + "' is gzip: it can only be read whole, not from byte " +
                             std::to_string(chunk.begin));
    auto g = std::make_unique<GzipSource>(std::move(fd), chunk.path);
    SF_RETURN_IF_ERROR(g->Init());
    r->source_ = std::move(g);
  } else {
    // A chunk that starts inside the file starts one byte early: if that byte
    // ends a line, the chunk's first line starts exactly at begin.
    const int64_t from = chunk.begin > 0 ? chunk.begin - 1 : 0;
    r->source_ = std::make_unique<PlainSource>(std::move(fd), chunk.path, from);
    r->buf_offset_ = from;
    r->skipping_ = chunk.begin > 0;
  }
  r->buf_.resize(static_cast<size_t>(max_line_bytes) + kReadBytes);
  return r;
}

Result<bool> LineReader::Fill() {
  SF_ASSIGN_OR_RETURN(size_t got, source_->Read(buf_.data() + end_, buf_.size() - end_));
  end_ += got;
  if (got == 0) eof_ = true;
  return got > 0;
}

Result<LineReader::Got> LineReader::Next(std::string_view* line) {
  char* const b = buf_.data();
  for (;;) {
    if (skipping_) {
      if (const void* nl = std::memchr(b + pos_, '\n', end_ - pos_)) {
        pos_ = scanned_ = static_cast<size_t>(static_cast<const char*>(nl) - b) + 1;
        skipping_ = false;
        continue;
      }
      buf_offset_ += static_cast<int64_t>(end_);  // drop what was read: it is all skipped
      pos_ = end_ = scanned_ = 0;
      if (eof_) return Got::kEnd;
      SF_RETURN_IF_ERROR(Fill().status());
      continue;
    }
    const int64_t start = buf_offset_ + static_cast<int64_t>(pos_);
    if (chunk_.end != LineChunk::kToEnd && start >= chunk_.end) return Got::kEnd;
    if (const void* nlp = std::memchr(b + scanned_, '\n', end_ - scanned_)) {
      const size_t nl = static_cast<size_t>(static_cast<const char*>(nlp) - b);
      const size_t len = nl - pos_;
      line_offset_ = start;
      ++lines_;
      const size_t from = pos_;
      pos_ = scanned_ = nl + 1;
      if (static_cast<int64_t>(len) > max_line_) return Got::kTooLong;
      *line = std::string_view(b + from, len);
      return Got::kLine;
    }
    scanned_ = end_;
    if (static_cast<int64_t>(end_ - pos_) > max_line_) {
      // Over-long and no end in sight: report it, then skip to its '\n'.
      line_offset_ = start;
      ++lines_;
      skipping_ = true;
      buf_offset_ += static_cast<int64_t>(end_);
      pos_ = end_ = scanned_ = 0;
      return Got::kTooLong;
    }
    if (eof_) {
      if (pos_ == end_) return Got::kEnd;
      line_offset_ = start;  // the last line, without a '\n'
      ++lines_;
      *line = std::string_view(b + pos_, end_ - pos_);
      pos_ = scanned_ = end_;
      return Got::kLine;
    }
    if (pos_ > 0) {
      std::memmove(b, b + pos_, end_ - pos_);
      buf_offset_ += static_cast<int64_t>(pos_);
      end_ -= pos_;
      scanned_ -= pos_;
      pos_ = 0;
    }
    SF_RETURN_IF_ERROR(Fill().status());
  }
}

Result<int64_t> LineReader::LineNumber() const {
  if (gzip_ || chunk_.begin == 0) return lines_;
  return LineNumberAt(chunk_.path, line_offset_);
}

}  // namespace sf
