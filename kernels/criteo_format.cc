#include "kernels/criteo_format.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include <Eigen/Core>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace sf {

const char* CriteoLineErrorText(CriteoLineError e) {
  switch (e) {
    case CriteoLineError::kOk: return "ok";
    case CriteoLineError::kFieldCount: return "expected 40 tab-separated fields";
    case CriteoLineError::kLabel: return "the label is not 0 or 1";
    case CriteoLineError::kInteger: return "an integer field is not a decimal integer";
    case CriteoLineError::kCategorical: return "a categorical field is not 1 to 16 hex digits";
    case CriteoLineError::kTooLong: return "the line is longer than max_line_bytes";
  }
  return "unknown";
}

namespace {

// XXH3 of the value's 8 little-endian bytes, seeded with the field; inlined
// into the parser.
inline int64_t Id(int field, uint64_t value) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
  return static_cast<int64_t>(XXH3_64bits_withSeed(bytes, sizeof bytes, static_cast<XXH64_hash_t>(field)));
}

}  // namespace

int64_t CriteoCategoricalId(int field, uint64_t value) { return Id(field, value); }

int64_t CriteoMissingId(int field) {
  return static_cast<int64_t>(XXH3_64bits_withSeed(nullptr, 0, static_cast<XXH64_hash_t>(field)));
}

std::string CriteoFieldName(int field) {
  if (field <= 0) return "label";
  if (field <= kCriteoDense) return "I" + std::to_string(field);
  return "C" + std::to_string(field - kCriteoDense);
}

CriteoLineError ParseCriteoLine(std::string_view line, float* label, float* dense, int64_t* categorical,
                                int* bad_field) {
  const char* p = line.data();
  const char* end = p + line.size();
  if (p != end && end[-1] == '\r') --end;
  *bad_field = -1;
  // Each field is parsed where it starts: std::from_chars stops at the tab
  // that ends it, so no separate scan for tabs. A field ends well when the
  // parse stopped at a tab (at the line's end for the last field).
  if (end - p < 2 || p[1] != '\t') {
    if (std::memchr(p, '\t', static_cast<size_t>(end - p)) == nullptr) return CriteoLineError::kFieldCount;
    *bad_field = 0;
    return CriteoLineError::kLabel;
  }
  if (*p != '0' && *p != '1') {
    *bad_field = 0;
    return CriteoLineError::kLabel;
  }
  *label = *p == '1' ? 1.0f : 0.0f;
  p += 2;
  for (int i = 0; i < kCriteoDense; ++i) {
    if (p >= end) return CriteoLineError::kFieldCount;
    int64_t v = 0;
    if (*p != '\t') {
      auto r = std::from_chars(p, end, v);
      if (r.ec != std::errc() || r.ptr == end || *r.ptr != '\t') {
        // A bad value, or a line that ends after it (too few fields).
        if (r.ec == std::errc() && r.ptr == end) return CriteoLineError::kFieldCount;
        *bad_field = 1 + i;
        return CriteoLineError::kInteger;
      }
      p = r.ptr;
    }
    dense[i] = v > 0 ? static_cast<float>(v) : 0.0f;
    ++p;  // the tab
  }
  for (int j = 0; j < kCriteoCategorical; ++j) {
    const bool last = j == kCriteoCategorical - 1;
    if (p > end || (p == end && !last)) return CriteoLineError::kFieldCount;
    if (p == end || *p == '\t') {
      categorical[j] = CriteoMissingId(j);
    } else {
      uint64_t v = 0;
      auto r = std::from_chars(p, end, v, 16);
      const bool ended = last ? r.ptr == end : r.ptr != end && *r.ptr == '\t';
      if (r.ec != std::errc() || r.ptr - p > 16 || !ended) {
        if (r.ec == std::errc() && r.ptr - p <= 16 && !last && r.ptr == end) return CriteoLineError::kFieldCount;
        if (r.ec == std::errc() && r.ptr - p <= 16 && last && *r.ptr == '\t') return CriteoLineError::kFieldCount;
        *bad_field = 1 + kCriteoDense + j;
        return CriteoLineError::kCategorical;
      }
      categorical[j] = Id(j, v);
      p = r.ptr;
    }
    if (last) {
      if (p != end) return CriteoLineError::kFieldCount;
    } else {
      ++p;  // the tab
    }
  }
  return CriteoLineError::kOk;
}

void CriteoLog1p(float* dense, int64_t n) {
  // Eigen's packet path and its scalar head and tail (an unaligned start, a
  // length off the packet size) round differently by an ulp, so a value's
  // transform would depend on where it sits in a batch: the threaded reader
  // and a chunk read whole gave one line different floats. Every value goes
  // through the packet path, in aligned blocks of a fixed size.
  constexpr int64_t kBlock = 256;
  Eigen::Array<float, kBlock, 1> block;
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t m = std::min(kBlock, n - at);
    std::copy_n(dense + at, m, block.data());
    std::fill(block.data() + m, block.data() + kBlock, 0.0f);
    block = block.log1p();
    std::copy_n(block.data(), m, dense + at);
  }
}

}  // namespace sf
