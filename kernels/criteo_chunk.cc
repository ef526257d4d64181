#include "kernels/criteo_chunk.h"

#include <cstring>

#include "kernels/criteo_format.h"

namespace sf {

std::string DescribeMalformedLine(const LineReader& in, const std::string& path, int bad_field, int e,
                                  int64_t max_line_bytes) {
  std::string where = "'" + path + "' line ";
  auto number = in.LineNumber();
  where += number.ok() ? std::to_string(*number) : "at byte " + std::to_string(in.line_offset());
  if (bad_field >= 0) where += " (field " + CriteoFieldName(bad_field) + ")";
  const auto err = static_cast<CriteoLineError>(e);
  where += std::string(": ") + CriteoLineErrorText(err);
  if (err == CriteoLineError::kTooLong) where += " (" + std::to_string(max_line_bytes) + ")";
  return where;
}

Result<CriteoChunkRows> ReadCriteoChunk(const LineChunk& chunk, int64_t skip, const CriteoReaderOptions& options,
                                        int64_t max_rows) {
  if (skip < 0) return InvalidArgument("reading '" + chunk.path + "': skip must be >= 0, got " + std::to_string(skip));
  SF_ASSIGN_OR_RETURN(std::unique_ptr<LineReader> in, LineReader::Open(chunk, options.max_line_bytes));
  std::vector<float> label, dense;
  std::vector<int64_t> cat, pos;
  CriteoChunkRows out;
  std::string_view line;
  float l, d[kCriteoDense];
  int64_t c[kCriteoCategorical];
  for (;;) {
    SF_ASSIGN_OR_RETURN(LineReader::Got got, in->Next(&line));
    if (got == LineReader::Got::kEnd) break;
    const int64_t at = in->line_in_chunk();
    if (at <= skip) continue;  // trained before this chunk came back
    int bad_field = -1;
    CriteoLineError e = CriteoLineError::kTooLong;
    if (got == LineReader::Got::kLine) e = ParseCriteoLine(line, &l, d, c, &bad_field);
    if (e != CriteoLineError::kOk) {
      std::string where = DescribeMalformedLine(*in, chunk.path, bad_field, static_cast<int>(e), options.max_line_bytes);
      if (!options.skip_malformed) return InvalidArgument("malformed Criteo line: " + where);
      if (out.malformed++ == 0) out.first_malformed = where;
      continue;
    }
    if (static_cast<int64_t>(label.size()) >= max_rows)
      return ResourceExhausted("a chunk of '" + chunk.path + "' holds more than " + std::to_string(max_rows) +
                               " lines, which one run reads whole: cut the input into smaller gzip files (a gzip "
                               "file is one chunk) or use plain files, which are cut into chunks");
    label.push_back(l);
    dense.insert(dense.end(), d, d + kCriteoDense);
    cat.insert(cat.end(), c, c + kCriteoCategorical);
    pos.push_back(at);
    out.last_pos = at;
  }
  const int64_t n = static_cast<int64_t>(label.size());
  out.label = Tensor(DType::kFloat32, {n});
  out.dense = Tensor(DType::kFloat32, {n, kCriteoDense});
  out.categorical = Tensor(DType::kInt64, {n, kCriteoCategorical});
  out.pos = Tensor(DType::kInt64, {n});
  if (n > 0) {
    std::memcpy(out.label.data<float>(), label.data(), n * sizeof(float));
    std::memcpy(out.dense.data<float>(), dense.data(), dense.size() * sizeof(float));
    std::memcpy(out.categorical.data<int64_t>(), cat.data(), cat.size() * sizeof(int64_t));
    std::memcpy(out.pos.data<int64_t>(), pos.data(), n * sizeof(int64_t));
    CriteoLog1p(out.dense.data<float>(), n * kCriteoDense);
  }
  return out;
}

std::vector<int64_t> EncodeChunkPlan(const std::vector<std::string>& files, const std::vector<LineChunk>& chunks) {
  std::vector<int64_t> plan;
  plan.reserve(3 * chunks.size());
  size_t f = 0;
  for (const LineChunk& c : chunks) {
    // Chunks come file by file (PlanLineChunks), so the index only moves on.
    while (f < files.size() && files[f] != c.path) ++f;
    plan.push_back(static_cast<int64_t>(f));
    plan.push_back(c.begin);
    plan.push_back(c.end);
  }
  return plan;
}

Result<std::vector<LineChunk>> DecodeChunkPlan(const std::vector<std::string>& files, const std::vector<int64_t>& plan) {
  if (plan.empty() || plan.size() % 3 != 0)
    return InvalidArgument("a chunk plan holds (file, begin, end) triples, got " + std::to_string(plan.size()) +
                           " values");
  std::vector<LineChunk> chunks;
  chunks.reserve(plan.size() / 3);
  for (size_t i = 0; i < plan.size(); i += 3) {
    const int64_t f = plan[i], begin = plan[i + 1], end = plan[i + 2];
    const std::string which = "chunk " + std::to_string(i / 3) + " of the plan";
    if (f < 0 || f >= static_cast<int64_t>(files.size()))
      return InvalidArgument(which + " names file " + std::to_string(f) + " of " + std::to_string(files.size()));
    if (begin < 0 || (end != LineChunk::kToEnd && end < begin))
      return InvalidArgument(which + " has the bad range [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
    chunks.push_back(LineChunk{files[f], begin, end});
  }
  return chunks;
}

}  // namespace sf
