// The Criteo line format: parsed values, refused lines, the categorical hash.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "kernels/criteo_format.h"
#include "kernels/line_reader.h"

using namespace sf;

namespace {

struct Parsed {
  CriteoLineError error = CriteoLineError::kOk;
  int bad_field = -1;
  float label = -1;
  float dense[kCriteoDense];
  int64_t ids[kCriteoCategorical];
};

Parsed Parse(const std::string& line) {
  Parsed p;
  p.error = ParseCriteoLine(line, &p.label, p.dense, p.ids, &p.bad_field);
  CriteoLog1p(p.dense, kCriteoDense);
  return p;
}

// 40 fields: the label, 13 integers, 26 categoricals, each given or "1".
std::string Line(const std::string& label = "0", int int_field = -1, const std::string& int_value = "",
                 int cat_field = -1, const std::string& cat_value = "") {
  std::string s = label;
  for (int i = 0; i < kCriteoDense; ++i) s += "\t" + (i == int_field ? int_value : std::string("1"));
  for (int j = 0; j < kCriteoCategorical; ++j) s += "\t" + (j == cat_field ? cat_value : std::string("1"));
  return s;
}

}  // namespace

TEST_CASE("Categorical ids are XXH3 of the value with the field as seed, pinned", "[criteo]") {
  // Values from python3-xxhash (an implementation of its own):
  // xxh3_64_intdigest(struct.pack('<Q', v), seed=field), as int64.
  CHECK(CriteoCategoricalId(0, 0x68fd1e64) == 7384456582413320978LL);
  CHECK(CriteoCategoricalId(1, 0x80e26c9b) == 5022245562943669968LL);
  CHECK(CriteoCategoricalId(25, 0x9727dd16) == -4699978093680910022LL);
  CHECK(CriteoCategoricalId(4, 0xab) == -7381165873753042588LL);
  CHECK(CriteoCategoricalId(5, 0xab) == -5290520007784034071LL);
  CHECK(CriteoCategoricalId(7, 0xffffffffffffffffULL) == 4515201275042620865LL);
  CHECK(CriteoCategoricalId(3, 0) == -3104150607145498214LL);
  // A missing value: XXH3 of no bytes, same seed.
  CHECK(CriteoMissingId(0) == 3244421341483603138LL);
  CHECK(CriteoMissingId(21) == 6586551304257306160LL);
  CHECK(CriteoMissingId(25) == -468615976694135831LL);
}

TEST_CASE("One value gives a different id in every field, and missing differs from zero", "[criteo]") {
  std::set<int64_t> ids;
  for (int j = 0; j < kCriteoCategorical; ++j) {
    ids.insert(CriteoCategoricalId(j, 0x68fd1e64));
    ids.insert(CriteoMissingId(j));
    CHECK(CriteoMissingId(j) != CriteoCategoricalId(j, 0));
    CHECK(CriteoCategoricalId(j, 0x68fd1e64) == CriteoCategoricalId(j, 0x68fd1e64));
  }
  CHECK(ids.size() == 2 * kCriteoCategorical);
}

TEST_CASE("The sample file parses to the hand-computed values", "[criteo]") {
  auto in = LineReader::Open({std::string(SF_SOURCE_DIR) + "/tests/data/criteo_sample.tsv"}, 4096);
  REQUIRE(in.ok());
  std::vector<Parsed> rows;
  std::string_view line;
  for (;;) {
    auto got = (*in)->Next(&line);
    REQUIRE(got.ok());
    if (*got == LineReader::Got::kEnd) break;
    REQUIRE(*got == LineReader::Got::kLine);
    rows.push_back(Parse(std::string(line)));
    INFO("line " << rows.size());
    REQUIRE(rows.back().error == CriteoLineError::kOk);
  }
  REQUIRE(rows.size() == 4);
  // Line 1: label 0, I1..I13 = 1..13, a real Criteo line's categoricals (C22 empty).
  const float log1p_k[14] = {0.0f, 0.69314718f, 1.0986123f, 1.3862944f, 1.6094379f, 1.7917595f,
                             1.9459101f, 2.0794415f, 2.1972246f, 2.3025851f, 2.3978953f, 2.4849066f,
                             2.5649494f, 2.6390573f};
  CHECK(rows[0].label == 0.0f);
  for (int i = 0; i < kCriteoDense; ++i) CHECK(rows[0].dense[i] == Approx(log1p_k[i + 1]).epsilon(1e-6));
  CHECK(rows[0].ids[0] == 7384456582413320978LL);   // C1 68fd1e64
  CHECK(rows[0].ids[1] == 5022245562943669968LL);   // C2 80e26c9b
  CHECK(rows[0].ids[21] == 6586551304257306160LL);  // C22 missing
  CHECK(rows[0].ids[25] == -4699978093680910022LL); // C26 9727dd16
  // Line 2: label 1; I2 = -3 clamps to 0, I5 = 1e6, the rest missing (0);
  // C4 "0", C5 "00ab" and C6 "AB" (one value, two fields), C8 2^64 - 1.
  CHECK(rows[1].label == 1.0f);
  for (int i = 0; i < kCriteoDense; ++i)
    CHECK(rows[1].dense[i] == Approx(i == 4 ? 13.815511f : 0.0f).epsilon(1e-6));
  CHECK(rows[1].ids[3] == -3104150607145498214LL);
  CHECK(rows[1].ids[4] == -7381165873753042588LL);
  CHECK(rows[1].ids[5] == -5290520007784034071LL);
  CHECK(rows[1].ids[7] == 4515201275042620865LL);
  CHECK(rows[1].ids[0] == 3244421341483603138LL);  // C1 missing
  CHECK(rows[1].ids[25] == -468615976694135831LL);  // C26 missing
  // Line 3 ends in "\r\n": every integer 0, every categorical "1".
  CHECK(rows[2].label == 0.0f);
  for (int i = 0; i < kCriteoDense; ++i) CHECK(rows[2].dense[i] == 0.0f);
  for (int j = 0; j < kCriteoCategorical; ++j) CHECK(rows[2].ids[j] == CriteoCategoricalId(j, 1));
  // Line 4 has no final newline: label 1, every integer 7, every categorical 68fd1e64.
  CHECK(rows[3].label == 1.0f);
  for (int i = 0; i < kCriteoDense; ++i) CHECK(rows[3].dense[i] == Approx(log1p_k[7]).epsilon(1e-6));
  CHECK(rows[3].ids[0] == 7384456582413320978LL);
  CHECK(rows[3].ids[1] == CriteoCategoricalId(1, 0x68fd1e64));
}

TEST_CASE("Malformed lines are refused with the field at fault", "[criteo]") {
  CHECK(Parse(Line()).error == CriteoLineError::kOk);
  CHECK(Parse("").error == CriteoLineError::kFieldCount);
  CHECK(Parse(Line() + "\textra").error == CriteoLineError::kFieldCount);
  CHECK(Parse(Line().substr(0, Line().rfind('\t'))).error == CriteoLineError::kFieldCount);
  auto label = Parse(Line("2"));
  CHECK(label.error == CriteoLineError::kLabel);
  CHECK(label.bad_field == 0);
  CHECK(Parse(Line("")).error == CriteoLineError::kLabel);
  CHECK(Parse(Line("01")).error == CriteoLineError::kLabel);
  for (const char* bad : {"abc", "1.5", "+3", "12x", " 4", "99999999999999999999", "-"}) {
    INFO(bad);
    auto p = Parse(Line("1", 2, bad));
    CHECK(p.error == CriteoLineError::kInteger);
    CHECK(p.bad_field == 3);
    CHECK(CriteoFieldName(p.bad_field) == "I3");
  }
  for (const char* bad : {"xyz", "0x12", "-1", "12345678901234567", "ab cd", "g"}) {
    INFO(bad);
    auto p = Parse(Line("1", -1, "", 6, bad));
    CHECK(p.error == CriteoLineError::kCategorical);
    CHECK(p.bad_field == 1 + kCriteoDense + 6);
    CHECK(CriteoFieldName(p.bad_field) == "C7");
  }
  // Large but valid values.
  CHECK(Parse(Line("1", 0, "9223372036854775807")).error == CriteoLineError::kOk);
  CHECK(Parse(Line("1", 0, "-9223372036854775808")).error == CriteoLineError::kOk);
  CHECK(Parse(Line("1", -1, "", 0, "FFFFFFFFFFFFFFFF")).error == CriteoLineError::kOk);
}

TEST_CASE("Lines cut short or run long anywhere are refused, never read past their end", "[criteo]") {
  const std::string good = Line("1", 3, "-17", 9, "dead");
  REQUIRE(Parse(good).error == CriteoLineError::kOk);
  // Every prefix ending at a tab or inside a field: too few fields (or a bad
  // last value); every extension by a field: too many. Copied into an exact
  // buffer so a read past the end would show under a sanitizer.
  for (size_t n = 0; n + 1 < good.size(); ++n) {  // (all but the last byte: C26 empty is a valid line)
    INFO("prefix of " << n << " bytes");
    std::string cut = good.substr(0, n);
    auto p = Parse(cut);
    CHECK(p.error != CriteoLineError::kOk);
  }
  CHECK(Parse(good + "\t").error == CriteoLineError::kFieldCount);
  CHECK(Parse(good + "\t1").error == CriteoLineError::kFieldCount);
  CHECK(Parse("0").error == CriteoLineError::kFieldCount);
  CHECK(Parse("1\t").error == CriteoLineError::kFieldCount);
  // Empty last field: missing.
  auto last_missing = Parse(Line("1", -1, "", 25, ""));
  CHECK(last_missing.error == CriteoLineError::kOk);
  CHECK(last_missing.ids[25] == CriteoMissingId(25));
}

TEST_CASE("CriteoLog1p gives a value the same float wherever it sits in the batch", "[criteo]") {
  // Eigen's packet path and its scalar head and tail differ by an ulp on
  // some values (3.0f among them): batches of other sizes gave one line
  // other floats (the threaded reader against a chunk read whole).
  std::vector<float> values;
  for (int v = 0; v < 200; ++v) values.push_back(static_cast<float>(v));
  for (float v : values) {
    float alone = v;
    CriteoLog1p(&alone, 1);
    for (int64_t n : {int64_t{13}, int64_t{17}, int64_t{64}, int64_t{300}, int64_t{831}}) {
      std::vector<float> batch(n + 1, 5.0f);
      for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
        std::vector<float> b = batch;
        b[at + 1] = v;  // + 1: an unaligned start as well
        CriteoLog1p(b.data() + 1, n);
        INFO("value " << v << " at " << at << " of " << n);
        REQUIRE(b[at + 1] == alone);
      }
    }
  }
}
