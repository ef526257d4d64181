#include "kernels/criteo_reader.h"

#include <cstring>
#include <future>
#include <limits>

#include "kernels/criteo_chunk.h"
#include "kernels/criteo_format.h"

namespace sf {

Status ValidateCriteoReaderOptions(const CriteoReaderOptions& o) {
  auto range = [](const char* name, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi)
      return InvalidArgument(std::string(name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                             "], got " + std::to_string(v));
    return Status::OK();
  };
  SF_RETURN_IF_ERROR(range("batch_size", o.batch_size, 1, int64_t{1} << 20));
  SF_RETURN_IF_ERROR(range("num_threads", o.num_threads, 1, 64));
  SF_RETURN_IF_ERROR(range("prefetch_batches", o.prefetch_batches, 1, 1024));
  SF_RETURN_IF_ERROR(range("max_line_bytes", o.max_line_bytes, 1, int64_t{256} << 20));
  SF_RETURN_IF_ERROR(range("chunk_bytes", o.chunk_bytes, 1, std::numeric_limits<int64_t>::max()));
  // Rows held at once: the ready batches and one being filled per thread.
  const int64_t rows = (o.prefetch_batches + o.num_threads) * o.batch_size;
  if (rows > (int64_t{1} << 24))
    return InvalidArgument("(prefetch_batches + num_threads) * batch_size must be at most 2^24 rows held at once, got " +
                           std::to_string(rows));
  return Status::OK();
}

Result<CriteoReaderOptions> CriteoReaderOptionsFromAttrs(const AttrMap& attrs) {
  CriteoReaderOptions o;
  SF_ASSIGN_OR_RETURN(o.batch_size, attrs.GetOr<int64_t>("batch_size", o.batch_size));
  SF_ASSIGN_OR_RETURN(int64_t threads, attrs.GetOr<int64_t>("num_threads", o.num_threads));
  SF_ASSIGN_OR_RETURN(o.prefetch_batches, attrs.GetOr<int64_t>("prefetch_batches", o.prefetch_batches));
  SF_ASSIGN_OR_RETURN(std::string on_malformed, attrs.GetOr<std::string>("on_malformed", "skip"));
  SF_ASSIGN_OR_RETURN(o.max_line_bytes, attrs.GetOr<int64_t>("max_line_bytes", o.max_line_bytes));
  SF_ASSIGN_OR_RETURN(o.chunk_bytes, attrs.GetOr<int64_t>("chunk_bytes", o.chunk_bytes));
  SF_ASSIGN_OR_RETURN(o.num_epochs, attrs.GetOr<int64_t>("num_epochs", o.num_epochs));
  if (threads < 1 || threads > 64)
    return InvalidArgument("num_threads must be in [1, 64], got " + std::to_string(threads));
  o.num_threads = static_cast<int>(threads);
  if (on_malformed != "skip" && on_malformed != "fail")
    return InvalidArgument("on_malformed must be \"skip\" or \"fail\", got \"" + on_malformed + "\"");
  o.skip_malformed = on_malformed == "skip";
  SF_RETURN_IF_ERROR(ValidateCriteoReaderOptions(o));
  return o;
}

void CriteoReaderOptionsToAttrs(const CriteoReaderOptions& o, AttrMap* attrs) {
  attrs->Set("batch_size", o.batch_size);
  attrs->Set("num_threads", int64_t{o.num_threads});
  attrs->Set("prefetch_batches", o.prefetch_batches);
  attrs->Set("on_malformed", std::string(o.skip_malformed ? "skip" : "fail"));
  attrs->Set("max_line_bytes", o.max_line_bytes);
  attrs->Set("chunk_bytes", o.chunk_bytes);
  attrs->Set("num_epochs", o.num_epochs);
}

Result<std::vector<std::string>> SplitCriteoFiles(const std::string& joined) {
  std::vector<std::string> files;
  size_t from = 0;
  while (from <= joined.size()) {
    size_t nl = joined.find('\n', from);
    if (nl == std::string::npos) nl = joined.size();
    if (nl > from) files.push_back(joined.substr(from, nl - from));
    from = nl + 1;
  }
  if (files.empty()) return InvalidArgument("attr files names no file (one path per line)");
  return files;
}

Result<std::unique_ptr<CriteoReader>> CriteoReader::Create(std::vector<std::string> files,
                                                           CriteoReaderOptions options) {
  SF_RETURN_IF_ERROR(ValidateCriteoReaderOptions(options));
  if (files.empty()) return InvalidArgument("the Criteo reader has no files to read");
  SF_ASSIGN_OR_RETURN(std::vector<LineChunk> chunks, PlanLineChunks(files, options.chunk_bytes));
  return std::unique_ptr<CriteoReader>(new CriteoReader(std::move(chunks), options));
}

CriteoReader::CriteoReader(std::vector<LineChunk> chunks, CriteoReaderOptions options)
    : chunks_(std::move(chunks)), options_(options) {}

CriteoReader::~CriteoReader() {
  std::vector<std::thread> threads;
  std::deque<std::function<void(Result<CriteoBatch>)>> waiting;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
    threads.swap(threads_);
    room_.notify_all();
  }
  for (std::thread& t : threads) t.join();
  {
    std::lock_guard<std::mutex> l(mu_);
    waiting.swap(waiting_);
  }
  for (auto& w : waiting) w(Aborted("the Criteo reader was closed"));
}

CriteoBatch CriteoReader::NewBatch() const {
  const int64_t n = options_.batch_size;
  return CriteoBatch{Tensor(DType::kFloat32, {n}), Tensor(DType::kFloat32, {n, kCriteoDense}),
                     Tensor(DType::kInt64, {n, kCriteoCategorical})};
}

void CriteoReader::StartLocked() {
  started_ = true;
  running_ = options_.num_threads;
  for (int i = 0; i < options_.num_threads; ++i) threads_.emplace_back([this] { ThreadMain(); });
}

void CriteoReader::Next(std::function<void(Result<CriteoBatch>)> done) {
  std::unique_lock<std::mutex> l(mu_);
  if (!started_) StartLocked();
  if (!ready_.empty()) {
    CriteoBatch b = std::move(ready_.front());
    ready_.pop_front();
    ++stats_.batches;
    room_.notify_one();
    l.unlock();
    return done(std::move(b));
  }
  if (!error_.ok()) {
    Status e = error_;
    l.unlock();
    return done(e);
  }
  if (running_ == 0 || stop_) {
    const int64_t lines = stats_.lines;
    l.unlock();
    return done(OutOfRange("end of the Criteo input: " + std::to_string(lines) + " lines read"));
  }
  waiting_.push_back(std::move(done));
  // A thread parked in Push holds a finished batch: the slots freed since it
  // parked may all have gone to batches handed straight to waiting calls.
  room_.notify_one();
}

Result<CriteoBatch> CriteoReader::NextBlocking() {
  std::promise<Result<CriteoBatch>> p;
  auto f = p.get_future();
  Next([&p](Result<CriteoBatch> r) { p.set_value(std::move(r)); });
  return f.get();
}

CriteoReaderStats CriteoReader::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void CriteoReader::Fail(Status s) {
  std::deque<std::function<void(Result<CriteoBatch>)>> waiting;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!error_.ok()) return;
    error_ = s;
    stop_ = true;
    ready_.clear();
    waiting.swap(waiting_);
    room_.notify_all();
  }
  for (auto& w : waiting) w(s);
}

bool CriteoReader::Push(CriteoBatch batch, int64_t rows) {
  if (rows < options_.batch_size) {
    // A short last batch: copy its rows into tensors of its size.
    CriteoBatch s{Tensor(DType::kFloat32, {rows}), Tensor(DType::kFloat32, {rows, kCriteoDense}),
                  Tensor(DType::kInt64, {rows, kCriteoCategorical})};
    std::memcpy(s.label.data<float>(), batch.label.data<float>(), rows * sizeof(float));
    std::memcpy(s.dense.data<float>(), batch.dense.data<float>(), rows * kCriteoDense * sizeof(float));
    std::memcpy(s.categorical.data<int64_t>(), batch.categorical.data<int64_t>(),
                rows * kCriteoCategorical * sizeof(int64_t));
    batch = std::move(s);
  }
  CriteoLog1p(batch.dense.data<float>(), rows * kCriteoDense);
  std::unique_lock<std::mutex> l(mu_);
  stats_.lines += rows;
  // Checked again after every wait: while this thread waited for room, a
  // Next may have emptied the queue and started waiting itself.
  for (;;) {
    if (stop_) return false;
    if (!waiting_.empty()) {
      auto w = std::move(waiting_.front());
      waiting_.pop_front();
      ++stats_.batches;
      l.unlock();
      w(std::move(batch));
      return true;
    }
    if (static_cast<int64_t>(ready_.size()) < options_.prefetch_batches) {
      ready_.push_back(std::move(batch));
      return true;
    }
    room_.wait(l);
  }
}

Status CriteoReader::ReadChunk(const LineChunk& chunk, CriteoBatch* batch, int64_t* rows) {
  SF_ASSIGN_OR_RETURN(std::unique_ptr<LineReader> in, LineReader::Open(chunk, options_.max_line_bytes));
  const int64_t n = options_.batch_size;
  std::string_view line;
  int64_t seen = 0;
  for (;;) {
    SF_ASSIGN_OR_RETURN(LineReader::Got got, in->Next(&line));
    if (got == LineReader::Got::kEnd) break;
    ++seen;
    const int64_t r = *rows;
    int bad_field = -1;
    CriteoLineError e = CriteoLineError::kTooLong;
    if (got == LineReader::Got::kLine)
      e = ParseCriteoLine(line, batch->label.data<float>() + r, batch->dense.data<float>() + r * kCriteoDense,
                          batch->categorical.data<int64_t>() + r * kCriteoCategorical, &bad_field);
    if (e == CriteoLineError::kOk) {
      if (++*rows == n) {
        if (!Push(std::move(*batch), n)) break;
        *batch = NewBatch();
        *rows = 0;
      }
      continue;
    }
    std::string where = DescribeMalformedLine(*in, chunk.path, bad_field, static_cast<int>(e), options_.max_line_bytes);
    if (!options_.skip_malformed) return InvalidArgument("malformed Criteo line: " + where);
    std::lock_guard<std::mutex> l(mu_);
    if (stats_.malformed++ == 0) stats_.first_malformed = where;
  }
  lines_seen_ += seen;
  return Status::OK();
}

void CriteoReader::ThreadMain() {
  const int64_t nchunks = static_cast<int64_t>(chunks_.size());
  CriteoBatch batch = NewBatch();
  int64_t rows = 0;
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (stop_) break;
    }
    const int64_t c = next_chunk_++;
    const int64_t epoch = c / nchunks;
    if (options_.num_epochs > 0 && epoch >= options_.num_epochs) break;
    // Files with no line in them, once read whole, would repeat for ever.
    if (epoch > 0 && chunks_done_.load() >= nchunks && lines_seen_.load() == 0) break;
    Status s = ReadChunk(chunks_[c % nchunks], &batch, &rows);
    ++chunks_done_;
    if (!s.ok()) {
      Fail(s);
      break;
    }
  }
  bool stopped;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped = stop_;
  }
  if (rows > 0 && !stopped) Push(std::move(batch), rows);
  std::deque<std::function<void(Result<CriteoBatch>)>> waiting;
  int64_t lines = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (--running_ == 0 && ready_.empty() && error_.ok()) waiting.swap(waiting_);
    lines = stats_.lines;
  }
  for (auto& w : waiting) w(OutOfRange("end of the Criteo input: " + std::to_string(lines) + " lines read"));
}

}  // namespace sf
