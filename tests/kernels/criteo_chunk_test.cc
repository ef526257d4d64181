// ReadCriteoChunk: a chunk's good lines after `skip`, each with its line in
// the chunk; chunks cut anywhere give every line once; bad input named; and
// the chunk plan's encoding.
#include <catch2/catch.hpp>

#include "kernels/criteo_chunk.h"
#include "kernels/criteo_format.h"
#include "tests/support/criteo_files.h"
#include "tests/support/temp_dir.h"

using namespace sf;
using sf::testing::CriteoLine;
using sf::testing::TempDir;
using sf::testing::WriteFile;
using sf::testing::WriteGzipFile;

TEST_CASE("ReadCriteoChunk: every line of a file once over its chunks, each row with its line", "[criteo_chunk]") {
  TempDir dir("sf_criteo_chunk");
  std::string text;
  for (int i = 0; i < 100; ++i) text += (i == 40 ? std::string("1\t2\t3") : CriteoLine(i)) + "\n";
  WriteFile(dir / "a.tsv", text);
  auto chunks = PlanLineChunks({dir / "a.tsv"}, 1000);
  REQUIRE(chunks.ok());
  REQUIRE(chunks->size() > 3);
  int64_t rows = 0, malformed = 0;
  for (const LineChunk& c : *chunks) {
    auto r = ReadCriteoChunk(c, 0, CriteoReaderOptions{});
    REQUIRE(r.ok());
    rows += r->label.num_elements();
    malformed += r->malformed;
    for (int64_t i = 1; i < r->pos.num_elements(); ++i) CHECK(r->pos.data<int64_t>()[i] > r->pos.data<int64_t>()[i - 1]);
    if (r->pos.num_elements() > 0) CHECK(r->last_pos == r->pos.data<int64_t>()[r->pos.num_elements() - 1]);
  }
  CHECK(rows == 99);
  CHECK(malformed == 1);
  // Resuming after line 3 of the first chunk skips its first three rows.
  auto all = ReadCriteoChunk((*chunks)[0], 0, CriteoReaderOptions{});
  auto rest = ReadCriteoChunk((*chunks)[0], 3, CriteoReaderOptions{});
  REQUIRE((all.ok() && rest.ok()));
  CHECK(rest->label.num_elements() == all->label.num_elements() - 3);
  CHECK(rest->pos.data<int64_t>()[0] == 4);
  CHECK(rest->categorical.data<int64_t>()[0] == CriteoCategoricalId(0, 3));
}

TEST_CASE("ReadCriteoChunk: bad input fails naming the file", "[criteo_chunk]") {
  TempDir dir("sf_criteo_chunk_bad");
  std::string text;
  for (int i = 0; i < 50; ++i) text += CriteoLine(i) + "\n";
  WriteGzipFile(dir / "a.gz", text);
  CriteoReaderOptions o;
  auto gone = ReadCriteoChunk(LineChunk{dir / "gone.tsv", 0, 100}, 0, o);
  CHECK(gone.status().code() == Code::kNotFound);
  CHECK_THAT(gone.status().message(), Catch::Contains("gone.tsv"));
  auto big = ReadCriteoChunk(LineChunk{dir / "a.gz", 0, LineChunk::kToEnd}, 0, o, /*max_rows=*/20);
  CHECK(big.status().code() == Code::kResourceExhausted);
  CHECK_THAT(big.status().message(), Catch::Contains("a.gz"));
  CHECK(ReadCriteoChunk(LineChunk{dir / "a.gz", 0, LineChunk::kToEnd}, -1, o).status().code() ==
        Code::kInvalidArgument);
  WriteFile(dir / "bad.tsv", CriteoLine(0) + "\n1\tx\n");
  o.skip_malformed = false;
  auto bad = ReadCriteoChunk(LineChunk{dir / "bad.tsv", 0, LineChunk::kToEnd}, 0, o);
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK_THAT(bad.status().message(), Catch::Contains("bad.tsv' line 2"));
}

TEST_CASE("Chunk plans encode as (file, begin, end) triples and refuse bad ones", "[criteo_chunk]") {
  const std::vector<std::string> files = {"a", "b"};
  const std::vector<LineChunk> chunks = {{"a", 0, 10}, {"a", 10, 20}, {"b", 0, LineChunk::kToEnd}};
  auto plan = EncodeChunkPlan(files, chunks);
  CHECK(plan == std::vector<int64_t>{0, 0, 10, 0, 10, 20, 1, 0, -1});
  auto back = DecodeChunkPlan(files, plan);
  REQUIRE(back.ok());
  CHECK((*back)[1].begin == 10);
  CHECK((*back)[2].path == "b");
  CHECK(DecodeChunkPlan(files, {0, 0}).status().code() == Code::kInvalidArgument);
  CHECK_THAT(DecodeChunkPlan(files, {2, 0, 10}).status().message(), Catch::Contains("file 2 of 2"));
  CHECK(DecodeChunkPlan(files, {0, 10, 5}).status().code() == Code::kInvalidArgument);
}
