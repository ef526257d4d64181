#include "kernels/criteo_format.h"

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

int64_t CriteoCategoricalId(int field, uint64_t value) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<unsigned char>(value >> (8 * i));
  return static_cast<int64_t>(XXH3_64bits_withSeed(bytes, sizeof bytes, static_cast<XXH64_hash_t>(field)));
}

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
  // The end of the field starting at p: the next tab, or the line's end.
  auto field_end = [&](const char* from) {
    const void* t = std::memchr(from, '\t', static_cast<size_t>(end - from));
    return t ? static_cast<const char*>(t) : end;
  };
  // Field 0: the label.
  const char* q = field_end(p);
  if (q == end) return CriteoLineError::kFieldCount;
  if (q - p != 1 || (*p != '0' && *p != '1')) {
    *bad_field = 0;
    return CriteoLineError::kLabel;
  }
  *label = *p == '1' ? 1.0f : 0.0f;
  p = q + 1;
  for (int i = 0; i < kCriteoDense; ++i) {
    q = field_end(p);
    if (q == end) return CriteoLineError::kFieldCount;
    int64_t v = 0;
    if (q != p) {
      auto r = std::from_chars(p, q, v);
      if (r.ec != std::errc() || r.ptr != q) {
        *bad_field = 1 + i;
        return CriteoLineError::kInteger;
      }
    }
    dense[i] = v > 0 ? static_cast<float>(v) : 0.0f;
    p = q + 1;
  }
  for (int j = 0; j < kCriteoCategorical; ++j) {
    q = field_end(p);
    const bool last = j == kCriteoCategorical - 1;
    if (last ? q != end : q == end) return CriteoLineError::kFieldCount;
    if (q == p) {
      categorical[j] = CriteoMissingId(j);
    } else {
      uint64_t v = 0;
      auto r = std::from_chars(p, q, v, 16);
      if (q - p > 16 || r.ec != std::errc() || r.ptr != q) {
        *bad_field = 1 + kCriteoDense + j;
        return CriteoLineError::kCategorical;
      }
      categorical[j] = CriteoCategoricalId(j, v);
    }
    p = q + 1;
  }
  return CriteoLineError::kOk;
}

void CriteoLog1p(float* dense, int64_t n) {
  Eigen::Map<Eigen::ArrayXf> a(dense, n);
  a = a.log1p();
}

}  // namespace sf
