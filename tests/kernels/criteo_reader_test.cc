// CriteoReader: several threads hand out every line once; malformed lines are
// skipped and counted or fail naming file and line; bad files fail naming them.
#include <catch2/catch.hpp>

#include <map>
#include <thread>

#include "kernels/criteo_format.h"
#include "kernels/criteo_reader.h"
#include "tests/support/criteo_files.h"
#include "tests/support/temp_dir.h"

using namespace sf;
using sf::testing::CriteoLine;
using sf::testing::TempDir;
using sf::testing::WriteFile;
using sf::testing::WriteGzipFile;

namespace {

// Every batch until the end; *error gets the status that ended it.
std::vector<CriteoBatch> ReadAll(CriteoReader& r, Status* error) {
  std::vector<CriteoBatch> out;
  for (;;) {
    auto b = r.NextBlocking();
    if (!b.ok()) {
      *error = b.status();
      return out;
    }
    out.push_back(std::move(b).value());
  }
}

// How often each line number (by its C1 id) came out; -1 for an unknown id.
std::map<int64_t, int> LineCounts(const std::vector<CriteoBatch>& batches, int64_t lines) {
  std::map<int64_t, int64_t> id_to_line;
  for (int64_t n = 0; n < lines; ++n) id_to_line[CriteoCategoricalId(0, static_cast<uint64_t>(n))] = n;
  std::map<int64_t, int> counts;
  for (const CriteoBatch& b : batches)
    for (int64_t r = 0; r < b.rows(); ++r) {
      auto it = id_to_line.find(b.categorical.data<int64_t>()[r * kCriteoCategorical]);
      const int64_t n = it == id_to_line.end() ? -1 : it->second;
      counts[n]++;
      if (n >= 0) {
        CHECK(b.label.data<float>()[r] == static_cast<float>(n % 2));
        CHECK(b.dense.data<float>()[r * kCriteoDense] == Approx(std::log1p(static_cast<double>(n % 100))));
      }
    }
  return counts;
}

}  // namespace

TEST_CASE("Several reader threads over plain and gzip files give every line exactly once", "[criteo_reader]") {
  TempDir dir("sf_criteo");
  // Five files: three plain cut into many chunks, two gzip; 7,000 lines.
  std::vector<std::string> files;
  int64_t n = 0;
  for (int f = 0; f < 5; ++f) {
    std::string text;
    for (int i = 0; i < 1400; ++i) text += CriteoLine(n++) + "\n";
    files.push_back(dir / ("part" + std::to_string(f)));
    if (f % 2) WriteGzipFile(files.back(), text, f);
    else WriteFile(files.back(), text);
  }
  for (int threads : {1, 3}) {
    for (int64_t batch : {1, 64, 1000}) {
      INFO(threads << " threads, batch " << batch);
      CriteoReaderOptions o;
      o.num_threads = threads;
      o.batch_size = batch;
      o.prefetch_batches = 2;
      o.chunk_bytes = 4093;  // cuts lines everywhere
      auto r = CriteoReader::Create(files, o);
      REQUIRE(r.ok());
      Status end;
      auto batches = ReadAll(**r, &end);
      CHECK(end.code() == Code::kOutOfRange);
      auto counts = LineCounts(batches, n);
      CHECK(counts.size() == static_cast<size_t>(n));
      CHECK(counts.count(-1) == 0);
      int64_t total = 0;
      for (auto& [line, c] : counts) total += c;
      CHECK(total == n);
      for (const CriteoBatch& b : batches) CHECK(b.rows() <= batch);
      CHECK((*r)->stats().lines == n);
      CHECK((*r)->stats().malformed == 0);
      // A finished reader keeps answering OutOfRange.
      CHECK((*r)->NextBlocking().status().code() == Code::kOutOfRange);
    }
  }
}

TEST_CASE("Epochs repeat the files, batches wait for a reader that is slow to be asked", "[criteo_reader]") {
  TempDir dir("sf_criteo");
  std::string text;
  for (int i = 0; i < 100; ++i) text += CriteoLine(i) + "\n";
  WriteFile(dir / "a", text);
  CriteoReaderOptions o;
  o.num_epochs = 3;
  o.batch_size = 7;
  o.num_threads = 2;
  o.prefetch_batches = 1;
  auto r = CriteoReader::Create({dir / "a"}, o);
  REQUIRE(r.ok());
  Status end;
  auto counts = LineCounts(ReadAll(**r, &end), 100);
  CHECK(end.code() == Code::kOutOfRange);
  REQUIRE(counts.size() == 100);
  for (auto& [line, c] : counts) CHECK(c == 3);
}

TEST_CASE("Malformed lines are counted and skipped, or fail naming file and line", "[criteo_reader]") {
  TempDir dir("sf_criteo");
  std::string text;
  text += CriteoLine(0) + "\n";
  text += CriteoLine(1) + "\textra\n";                     // line 2: 41 fields
  text += CriteoLine(2) + "\n";
  std::string bad_int = CriteoLine(3);
  bad_int.replace(bad_int.find('\t', 2), 2, "\tx");         // line 4: I2 is not a number
  text += bad_int + "\n";
  text += std::string(500, '1') + "\n";                    // line 5: over max_line_bytes
  text += CriteoLine(5) + "\n";
  WriteFile(dir / "mixed.tsv", text);
  CriteoReaderOptions o;
  o.max_line_bytes = 400;
  o.num_threads = 1;
  SECTION("skip") {
    auto r = CriteoReader::Create({dir / "mixed.tsv"}, o);
    REQUIRE(r.ok());
    Status end;
    auto batches = ReadAll(**r, &end);
    CHECK(end.code() == Code::kOutOfRange);
    auto counts = LineCounts(batches, 6);
    CHECK(counts == std::map<int64_t, int>{{0, 1}, {2, 1}, {5, 1}});
    CHECK((*r)->stats().malformed == 3);
    CHECK((*r)->stats().lines == 3);
    CHECK((*r)->stats().first_malformed.find("mixed.tsv' line 2") != std::string::npos);
  }
  SECTION("fail") {
    o.skip_malformed = false;
    auto r = CriteoReader::Create({dir / "mixed.tsv"}, o);
    REQUIRE(r.ok());
    Status end;
    ReadAll(**r, &end);
    CHECK(end.code() == Code::kInvalidArgument);
    CHECK(end.message().find(dir / "mixed.tsv") != std::string::npos);
    CHECK(end.message().find("line 2") != std::string::npos);
    CHECK(end.message().find("40 tab-separated fields") != std::string::npos);
    // The error stays.
    CHECK((*r)->NextBlocking().status().code() == Code::kInvalidArgument);
  }
  SECTION("fail names the field and counts lines across chunks") {
    o.skip_malformed = false;
    std::string t;
    for (int i = 0; i < 300; ++i) t += CriteoLine(i) + "\n";
    t += bad_int + "\n";  // line 301
    WriteFile(dir / "late.tsv", t);
    o.chunk_bytes = 1000;
    o.num_threads = 2;
    auto r = CriteoReader::Create({dir / "late.tsv"}, o);
    REQUIRE(r.ok());
    Status end;
    ReadAll(**r, &end);
    CHECK(end.code() == Code::kInvalidArgument);
    CHECK(end.message().find("late.tsv' line 301 (field I2)") != std::string::npos);
  }
}

TEST_CASE("A missing file, a truncated gzip and bad options fail naming what is wrong", "[criteo_reader]") {
  TempDir dir("sf_criteo");
  auto missing = CriteoReader::Create({dir / "absent.tsv"}, {});
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK(missing.status().message().find(dir / "absent.tsv") != std::string::npos);
  CHECK(CriteoReader::Create({}, {}).status().code() == Code::kInvalidArgument);

  std::string text;
  for (int i = 0; i < 3000; ++i) text += CriteoLine(i) + "\n";
  WriteGzipFile(dir / "t.gz", text);
  std::ifstream in(dir / "t.gz", std::ios::binary);
  const std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  WriteFile(dir / "t.gz", gz.substr(0, gz.size() / 2));
  CriteoReaderOptions o;
  o.batch_size = 100;
  auto r = CriteoReader::Create({dir / "t.gz"}, o);
  REQUIRE(r.ok());
  Status end;
  ReadAll(**r, &end);
  CHECK(end.code() == Code::kDataLoss);
  CHECK(end.message().find(dir / "t.gz") != std::string::npos);

  CriteoReaderOptions bad;
  bad.batch_size = 0;
  CHECK(CriteoReader::Create({dir / "t.gz"}, bad).status().message().find("batch_size") != std::string::npos);
  bad = {};
  bad.max_line_bytes = int64_t{1} << 40;
  CHECK(CriteoReader::Create({dir / "t.gz"}, bad).status().message().find("max_line_bytes") != std::string::npos);
  bad = {};
  bad.batch_size = 1 << 20;
  bad.prefetch_batches = 1024;
  CHECK(CriteoReader::Create({dir / "t.gz"}, bad).status().code() == Code::kInvalidArgument);
}

TEST_CASE("A reader closed while reads wait and threads are parked ends cleanly", "[criteo_reader]") {
  TempDir dir("sf_criteo");
  std::string text;
  for (int i = 0; i < 5000; ++i) text += CriteoLine(i) + "\n";
  WriteFile(dir / "a", text);
  CriteoReaderOptions o;
  o.batch_size = 10;
  o.prefetch_batches = 1;
  o.num_epochs = 0;  // for ever: the threads park on the full queue
  auto r = CriteoReader::Create({dir / "a"}, o);
  REQUIRE(r.ok());
  REQUIRE((*r)->NextBlocking().ok());
  r->reset();  // joins the parked threads
  SUCCEED();
}
