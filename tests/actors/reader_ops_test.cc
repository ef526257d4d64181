// The CriteoReader op in a session: batches through a queue fed by a
// QueueRunner, errors that name file and line, and the builders' checks.
#include <catch2/catch.hpp>

#include <map>

#include "kernels/criteo_format.h"
#include "shardflow/ops.h"
#include "shardflow/queue_runner.h"
#include "shardflow/reader_ops.h"
#include "shardflow/session.h"
#include "tests/support/criteo_files.h"
#include "tests/support/temp_dir.h"

using namespace sf;
using sf::testing::CriteoLine;
using sf::testing::TempDir;
using sf::testing::WriteFile;
using sf::testing::WriteGzipFile;

TEST_CASE("CriteoBatchQueue: reader threads and a QueueRunner hand every line once to training steps",
          "[reader_ops]") {
  TempDir dir("sf_reader_ops");
  int64_t n = 0;
  for (int f = 0; f < 3; ++f) {
    std::string text;
    for (int i = 0; i < 700; ++i) text += CriteoLine(n++) + "\n";
    if (f == 1) WriteGzipFile(dir / "part1.gz", text);
    else WriteFile(dir / ("part" + std::to_string(f) + ".tsv"), text);
  }
  auto files = ops::CriteoFiles(dir.path);
  REQUIRE(files.ok());
  REQUIRE(files->size() == 3);
  Graph g;
  CriteoReaderOptions o;
  o.batch_size = 100;
  o.num_threads = 2;
  o.chunk_bytes = 5000;
  auto in = ops::CriteoBatchQueue(g, *files, o, 64);
  REQUIRE(g.status().ok());
  CHECK(in.dense.shape().ToString() == PartialShape(Shape{-1, kCriteoDense}).ToString());
  Session s(g);
  QueueRunnerOptions ro;
  ro.parallel = 2;
  ro.close_target = in.close.name();
  QueueRunner runner(s, {in.enqueue.name()}, nullptr, ro);
  REQUIRE(runner.Start().ok());
  std::map<int64_t, int64_t> id_to_line;
  for (int64_t i = 0; i < n; ++i) id_to_line[CriteoCategoricalId(0, static_cast<uint64_t>(i))] = i;
  std::map<int64_t, int> seen;
  int steps = 0;
  for (;;) {
    auto r = s.Run({}, Fetches{in.label, in.dense, in.categorical});
    if (!r.ok()) {
      CHECK(r.status().code() == Code::kOutOfRange);
      break;
    }
    ++steps;
    const Tensor& label = (*r)[0];
    const Tensor& ids = (*r)[2];
    REQUIRE(ids.shape().size() == 2);
    CHECK(ids.shape()[1] == kCriteoCategorical);
    CHECK(label.num_elements() <= 64);
    for (int64_t row = 0; row < ids.shape()[0]; ++row) {
      auto it = id_to_line.find(ids.data<int64_t>()[row * kCriteoCategorical]);
      REQUIRE(it != id_to_line.end());
      seen[it->second]++;
      CHECK(label.data<float>()[row] == static_cast<float>(it->second % 2));
    }
  }
  CHECK(runner.Join().ok());
  CHECK(steps >= n / 64);
  CHECK(seen.size() == static_cast<size_t>(n));
  for (auto& [line, count] : seen) CHECK(count == 1);
}

TEST_CASE("CriteoBatchQueue's cancel lets a QueueRunner over endless input stop while an enqueue waits on a full queue",
          "[reader_ops]") {
  TempDir dir("sf_reader_cancel");
  std::string text;
  for (int i = 0; i < 500; ++i) text += CriteoLine(i) + "\n";
  WriteFile(dir / "part0.tsv", text);
  Graph g;
  CriteoReaderOptions o;
  o.batch_size = 200;
  o.num_threads = 1;
  o.num_epochs = 0;  // the file in a loop: the runner never ends by itself
  auto in = ops::CriteoBatchQueue(g, {dir / "part0.tsv"}, o, 50, /*capacity=*/300);
  REQUIRE(g.status().ok());
  Session s(g);
  QueueRunnerOptions ro;
  ro.close_target = in.close.name();
  ro.cancel_target = in.cancel.name();
  QueueRunner runner(s, {in.enqueue.name()}, nullptr, ro);
  REQUIRE(runner.Start().ok());
  for (int i = 0; i < 20; ++i) REQUIRE(s.Run({}, Fetches{in.label}).ok());  // 1000 rows: past one epoch
  // The queue refills to its capacity and the next enqueue waits; Stop ends it.
  runner.Stop();
  CHECK(runner.Join().ok());
  // The queue is closed: what is left drains, then OutOfRange.
  Status end;
  for (int i = 0; i < 100 && end.ok(); ++i) end = s.Run({}, Fetches{in.label}).status();
  CHECK(end.code() == Code::kOutOfRange);
}

TEST_CASE("A CriteoReader step fails naming the file (and the line), and never hangs", "[reader_ops]") {
  TempDir dir("sf_reader_ops");
  std::string text = CriteoLine(0) + "\n" + CriteoLine(1) + "\n" + "1\t2\t3\n" + CriteoLine(3) + "\n";
  WriteFile(dir / "bad.tsv", text);
  SECTION("on_malformed fail") {
    Graph g;
    CriteoReaderOptions o;
    o.skip_malformed = false;
    auto cols = ops::CriteoReader(g, {dir / "bad.tsv"}, o);
    REQUIRE(g.status().ok());
    Session s(g);
    auto r = s.Run({}, Fetches{cols.label});
    REQUIRE(!r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(r.status().message().find("bad.tsv' line 3") != std::string::npos);
  }
  SECTION("on_malformed skip counts") {
    Graph g;
    auto cols = ops::CriteoReader(g, {dir / "bad.tsv"});
    Session s(g);
    auto r = s.Run({}, Fetches{cols.label, cols.malformed});
    REQUIRE(r.ok());
    CHECK((*r)[0].num_elements() == 3);
    CHECK((*r)[1].scalar_as<int64_t>() == 1);
    CHECK(s.Run({}, Fetches{cols.label}).status().code() == Code::kOutOfRange);
  }
  SECTION("a missing file") {
    Graph g;
    auto cols = ops::CriteoReader(g, {dir / "bad.tsv", dir / "gone.tsv"});
    Session s(g);
    auto r = s.Run({}, Fetches{cols.label});
    CHECK(r.status().code() == Code::kNotFound);
    CHECK(r.status().message().find("gone.tsv") != std::string::npos);
  }
  SECTION("a truncated gzip file") {
    std::string big;
    for (int i = 0; i < 2000; ++i) big += CriteoLine(i) + "\n";
    WriteGzipFile(dir / "t.gz", big);
    std::ifstream in(dir / "t.gz", std::ios::binary);
    const std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    WriteFile(dir / "t.gz", gz.substr(0, gz.size() - 100));
    Graph g;
    CriteoReaderOptions o;
    o.batch_size = 4096;
    auto cols = ops::CriteoReader(g, {dir / "t.gz"}, o);
    Session s(g);
    auto r = s.Run({}, Fetches{cols.label});
    CHECK(r.status().code() == Code::kDataLoss);
    CHECK(r.status().message().find("t.gz") != std::string::npos);
  }
}

TEST_CASE("CriteoReader's attrs are checked when the graph is built", "[reader_ops]") {
  TempDir dir("sf_reader_ops");
  {
    Graph g;
    CriteoReaderOptions o;
    o.num_threads = 0;
    ops::CriteoReader(g, {"x"}, o);
    CHECK(g.status().message().find("num_threads") != std::string::npos);
  }
  {
    Graph g;
    ops::CriteoReader(g, {});
    CHECK(g.status().message().find("no file") != std::string::npos);
  }
  {
    Graph g;
    ops::CriteoReader(g, {"a\nb"});
    CHECK(!g.status().ok());
  }
  {
    Graph g;
    AttrMap a;
    a.Set("files", std::string("x"));
    a.Set("on_malformed", std::string("ignore"));
    CHECK(g.AddNode("CriteoReader", {}, a) < 0);
    CHECK(g.status().message().find("on_malformed") != std::string::npos);
  }
  {
    Graph g;
    ops::CriteoBatchQueue(g, {"x"}, {}, 0);
    CHECK(g.status().message().find("batch_size") != std::string::npos);
  }
  CHECK(ops::CriteoFiles(dir.path).status().code() == Code::kNotFound);
  CHECK(ops::CriteoFiles(dir / "none").status().code() == Code::kNotFound);
}
