// criteo_synth writes a log the Criteo reader reads back whole, with a
// planted model's AUC that means something.
#include <catch2/catch.hpp>

#include <set>

#include "examples/common/criteo_synth.h"
#include "kernels/criteo_format.h"
#include "kernels/criteo_reader.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

using namespace sf;
using namespace sf::examples;
using sf::testing::JsonNumber;
using sf::testing::LastLine;
using sf::testing::RunCommand;
using sf::testing::TempDir;

TEST_CASE("criteo_synth --json writes gzip files the reader reads whole and prints planted_auc last",
          "[examples][criteo]") {
  TempDir dir("sf_synth");
  auto r = RunCommand(std::string(SF_BIN_DIR) + "/criteo_synth --lines 20000 --files 3 --gzip --json --out " +
                      dir.path);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string summary = LastLine(r.out);
  CHECK(JsonNumber(summary, "lines") == 20000);
  CHECK(JsonNumber(summary, "files") == 3);
  const double auc = JsonNumber(summary, "planted_auc");
  CHECK(auc > 0.7);
  CHECK(auc < 0.95);
  const double pos = JsonNumber(summary, "positive_fraction");
  CHECK(pos > 0.15);
  CHECK(pos < 0.4);
  CriteoReaderOptions o;
  o.skip_malformed = false;
  auto reader = CriteoReader::Create({dir / "part-00000.tsv.gz", dir / "part-00001.tsv.gz", dir / "part-00002.tsv.gz"}, o);
  REQUIRE(reader.ok());
  int64_t lines = 0;
  for (auto b = (*reader)->NextBlocking(); b.ok(); b = (*reader)->NextBlocking()) lines += b->rows();
  CHECK(lines == 20000);
  CHECK((*reader)->stats().malformed == 0);

  auto bad = RunCommand(std::string(SF_BIN_DIR) + "/criteo_synth --lines 10 2>&1");
  CHECK(bad.code == 2);
  CHECK(bad.out.find("--out") != std::string::npos);
}

TEST_CASE("A synthetic line depends on the seed and its number only, ids follow the capped cardinality",
          "[examples][criteo]") {
  CriteoSynthOptions a;
  a.max_cardinality = 50;
  CriteoSynth s1(a), s2(a);
  std::string x, y;
  s1.AppendLine(12345, &x);
  s2.AppendLine(12345, &y);
  CHECK(x == y);
  a.seed = 2;
  std::string z;
  CriteoSynth(a).AppendLine(12345, &z);
  CHECK(z != x);
  // Field C3 (Kaggle: 10M values) capped at 50: at most 50 distinct values.
  std::set<std::string> c3;
  for (int64_t i = 0; i < 5000; ++i) {
    std::string line;
    s1.AppendLine(i, &line);
    float label, dense[kCriteoDense];
    int64_t ids[kCriteoCategorical];
    int bad;
    REQUIRE(ParseCriteoLine(line, &label, dense, ids, &bad) == CriteoLineError::kOk);
    size_t p = 0;
    for (int f = 0; f < 1 + kCriteoDense + 2; ++f) p = line.find('\t', p) + 1;
    c3.insert(line.substr(p, line.find('\t', p) - p));
  }
  CHECK(c3.size() <= 51);  // 50 values and missing
  CHECK(c3.size() > 10);
  CHECK(s1.cardinality(2) == 50);
  CHECK(s1.cardinality(8) == 3);
}
