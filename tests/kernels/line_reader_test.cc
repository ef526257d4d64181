// LineReader: chunks give every line once, long lines are skipped in bounded
// memory, gzip files are read whole and a truncated one fails naming it.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "kernels/line_reader.h"
#include "tests/support/criteo_files.h"
#include "tests/support/temp_dir.h"

using namespace sf;
using sf::testing::TempDir;
using sf::testing::WriteFile;
using sf::testing::WriteGzipFile;

namespace {

// Every line of a chunk ("<too long>" for a skipped one); fails the test on an error.
std::vector<std::string> ReadChunk(const LineChunk& c, int64_t max_line = 1 << 16) {
  auto r = LineReader::Open(c, max_line);
  REQUIRE(r.ok());
  std::vector<std::string> lines;
  std::string_view line;
  for (;;) {
    auto got = (*r)->Next(&line);
    REQUIRE(got.ok());
    if (*got == LineReader::Got::kEnd) return lines;
    lines.push_back(*got == LineReader::Got::kLine ? std::string(line) : "<too long>");
  }
}

Status FirstError(const LineChunk& c) {
  auto r = LineReader::Open(c, 1 << 16);
  if (!r.ok()) return r.status();
  std::string_view line;
  for (;;) {
    auto got = (*r)->Next(&line);
    if (!got.ok()) return got.status();
    if (*got == LineReader::Got::kEnd) return Status::OK();
  }
}

}  // namespace

TEST_CASE("Chunks cut anywhere give every line exactly once, in order", "[line_reader]") {
  TempDir dir("sf_lines");
  std::string text;
  std::vector<std::string> want;
  for (int i = 0; i < 200; ++i) {
    want.push_back(std::string(i % 7, 'a' + i % 26) + std::to_string(i));  // some empty-ish, varied lengths
    text += want.back() + "\n";
  }
  WriteFile(dir / "f.txt", text);
  for (int64_t chunk : {1, 2, 3, 5, 17, 64, 1000, 1 << 20}) {
    INFO("chunk_bytes " << chunk);
    auto chunks = PlanLineChunks({dir / "f.txt"}, chunk);
    REQUIRE(chunks.ok());
    std::vector<std::string> got;
    for (const LineChunk& c : *chunks)
      for (auto& l : ReadChunk(c)) got.push_back(l);
    CHECK(got == want);
  }
}

TEST_CASE("The last line needs no newline, an empty file has no line", "[line_reader]") {
  TempDir dir("sf_lines");
  WriteFile(dir / "a", "x\ny");
  CHECK(ReadChunk({dir / "a"}) == std::vector<std::string>{"x", "y"});
  WriteFile(dir / "empty", "");
  CHECK(ReadChunk({dir / "empty"}).empty());
  auto chunks = PlanLineChunks({dir / "empty"}, 10);
  REQUIRE(chunks.ok());
  CHECK(chunks->size() == 1);
}

TEST_CASE("A line over max_line_bytes is reported once and skipped, line numbers count it", "[line_reader]") {
  TempDir dir("sf_lines");
  WriteFile(dir / "f", "short\n" + std::string(5000, 'x') + "\nafter\n" + std::string(300, 'y'));
  CHECK(ReadChunk({dir / "f"}, 100) == std::vector<std::string>{"short", "<too long>", "after", "<too long>"});
  // The line number of a line in a chunk that starts inside the file is counted in the file.
  auto chunks = PlanLineChunks({dir / "f"}, 4000);
  REQUIRE(chunks.ok());
  REQUIRE(chunks->size() == 2);
  auto r = LineReader::Open((*chunks)[1], 100);
  REQUIRE(r.ok());
  std::string_view line;
  auto got = (*r)->Next(&line);
  REQUIRE(got.ok());
  CHECK(*got == LineReader::Got::kLine);
  CHECK(line == "after");
  CHECK((*r)->LineNumber().value() == 3);
}

TEST_CASE("A hostile 1 GB line is skipped without holding it in memory", "[line_reader]") {
  TempDir dir("sf_lines");
  const std::string path = dir / "huge";
  // A sparse file: "a\n", 1 GB of zeros without a newline, then "\nz\n".
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
  REQUIRE(fd >= 0);
  const int64_t huge = int64_t{1} << 30;
  REQUIRE(::pwrite(fd, "a\n", 2, 0) == 2);
  REQUIRE(::pwrite(fd, "\nz\n", 3, 2 + huge) == 3);
  ::close(fd);
  struct rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  CHECK(ReadChunk({path}, 1 << 16) == std::vector<std::string>{"a", "<too long>", "z"});
  getrusage(RUSAGE_SELF, &after);
  CHECK(after.ru_maxrss - before.ru_maxrss < 64 * 1024);  // KiB: far less than the line
}

TEST_CASE("Gzip files are found by their magic and read whole, members in turn", "[line_reader]") {
  TempDir dir("sf_lines");
  std::string text;
  for (int i = 0; i < 5000; ++i) text += std::to_string(i) + "\n";
  WriteGzipFile(dir / "data.bin", text, 3);  // no .gz in the name
  CHECK(IsGzipFile(dir / "data.bin").value());
  auto chunks = PlanLineChunks({dir / "data.bin"}, 100);
  REQUIRE(chunks.ok());
  REQUIRE(chunks->size() == 1);
  auto lines = ReadChunk((*chunks)[0]);
  REQUIRE(lines.size() == 5000);
  CHECK(lines[0] == "0");
  CHECK(lines[4999] == "4999");
  auto part = LineReader::Open({dir / "data.bin", 10, LineChunk::kToEnd}, 100);
  CHECK(part.status().code() == Code::kInvalidArgument);
}

TEST_CASE("A truncated or corrupt gzip file fails naming it, never a partial silent read", "[line_reader]") {
  TempDir dir("sf_lines");
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "line " + std::to_string(i) + "\n";
  WriteGzipFile(dir / "whole.gz", text);
  std::ifstream in(dir / "whole.gz", std::ios::binary);
  const std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(FirstError({dir / "whole.gz"}).ok());
  for (size_t cut : {size_t{4}, size_t{8}, gz.size() / 2, gz.size() - 12}) {
    INFO("cut " << cut << " bytes off " << gz.size());
    WriteFile(dir / "cut.gz", gz.substr(0, gz.size() - cut));
    Status s = FirstError({dir / "cut.gz"});
    CHECK(s.code() == Code::kDataLoss);
    CHECK(s.message().find(dir / "cut.gz") != std::string::npos);
    CHECK(s.message().find("truncated") != std::string::npos);
  }
  std::string bad = gz;
  for (size_t i = 100; i < 120; ++i) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
  WriteFile(dir / "bad.gz", bad);
  Status s = FirstError({dir / "bad.gz"});
  CHECK(s.code() == Code::kDataLoss);
  CHECK(s.message().find(dir / "bad.gz") != std::string::npos);
}

TEST_CASE("A missing file, a directory and an unreadable file fail naming them", "[line_reader]") {
  TempDir dir("sf_lines");
  auto missing = PlanLineChunks({dir / "nope.tsv"}, 100);
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK(missing.status().message().find(dir / "nope.tsv") != std::string::npos);
  CHECK(LineReader::Open({dir / "nope.tsv"}, 100).status().code() == Code::kNotFound);
  auto d = PlanLineChunks({dir.path}, 100);
  CHECK(d.status().code() == Code::kInvalidArgument);
  CHECK(d.status().message().find("is a directory") != std::string::npos);
  if (::geteuid() != 0) {  // root reads anything
    WriteFile(dir / "secret", "x\n");
    ::chmod((dir / "secret").c_str(), 0);
    CHECK(PlanLineChunks({dir / "secret"}, 100).status().code() == Code::kPermissionDenied);
  }
}
