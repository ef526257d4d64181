// The Criteo click-log line format and what the readers make of it (DLRM's
// preprocessing), as pure functions with no I/O.
//
// A line is 40 tab-separated fields: the label (0 or 1), 13 integer fields
// (I1..I13, decimal, may be negative) and 26 categorical fields (C1..C26, hex
// strings such as "68fd1e64"); any integer or categorical field may be empty
// (missing). A trailing '\r' is ignored. What a parsed line becomes:
//  - label: 0.0f or 1.0f;
//  - dense[i] = log(1 + max(x, 0)) as float, missing x = 0 (so 0.0f), as
//    DLRM does (negative values clamp to 0 before the log);
//  - categorical[j] = CriteoCategoricalId(j, value): the hex value hashed
//    together with its field index j (0..25) into a 64-bit id.
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sf {

constexpr int kCriteoDense = 13;
constexpr int kCriteoCategorical = 26;
constexpr int kCriteoFields = 1 + kCriteoDense + kCriteoCategorical;  // 40

// Why a line was refused (kOk: it was not).
enum class CriteoLineError : uint8_t {
  kOk = 0,
  kFieldCount,   // not 40 tab-separated fields
  kLabel,        // the label is not 0 or 1
  kInteger,      // an integer field is not a decimal int64
  kCategorical,  // a categorical field is not 1 to 16 hex digits
  kTooLong,      // longer than the reader's max_line_bytes (set by the reader, not the parser)
};

// A short phrase for the error ("expected 40 tab-separated fields", ...).
const char* CriteoLineErrorText(CriteoLineError e);

// The 64-bit id of a categorical value: XXH3_64bits_withSeed over the 8
// little-endian bytes of the value read as a hex number, seeded with the
// field index (so one value in two fields gives two ids). "00ab" and "AB"
// are the same value. A missing value has its own id per field: XXH3 of no
// bytes with the same seed. Stable across runs, machines and versions of
// shardflow (tests pin values). Returns the id; never fails.
int64_t CriteoCategoricalId(int field, uint64_t value);
// The id of a missing value in categorical field `field`.
int64_t CriteoMissingId(int field);

// Parses one line (without its '\n'). On success fills *label, dense[13]
// with the clamped raw integers (max(x, 0) as float, missing 0: apply
// CriteoLog1p to the batch afterwards) and categorical[26] with ids; returns
// kOk. On failure returns why, sets *bad_field to the 0-based field at fault
// (-1 for a wrong field count) and leaves the outputs partly written.
CriteoLineError ParseCriteoLine(std::string_view line, float* label, float* dense, int64_t* categorical,
                                int* bad_field);

// dense[i] = log(1 + dense[i]) for n values, vectorized; the values must be >= 0.
void CriteoLog1p(float* dense, int64_t n);

// "I3", "C7", "label" for a 0-based field index of a line; never fails.
std::string CriteoFieldName(int field);

}  // namespace sf
