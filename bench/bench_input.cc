// Criteo input throughput: lines parsed and hashed per second
// (kernels/criteo_format.h), in memory on one thread, and read from files by
// CriteoReader (the CriteoReader op's engine) on --threads reader threads,
// plain and gzip. The files are synthetic (examples/common/criteo_synth.h),
// written first into --dir and read from the page cache: this measures
// parsing and decompression, not the disk.
//
// JSON lines: one per mode {"mode", "threads", "lines", "seconds",
// "lines_per_sec", "mb_per_sec"}; the last, the summary: {"lines", "threads",
// "parse_lines_per_sec_per_thread", "plain_lines_per_sec",
// "gzip_lines_per_sec", "lines_per_sec"}, the last being the slower of plain
// and gzip. --dir DIR keeps the files (DIR/plain, DIR/gzip); a later run
// given the same --dir and --lines reads them again without writing them,
// which makes a clean profile of the reading: perf record bench_input --dir DIR.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/criteo_synth.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "kernels/criteo_format.h"
#include "kernels/criteo_reader.h"
#include "shardflow/reader_ops.h"

using namespace sf;
using namespace sf::examples;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Rate {
  int64_t lines = 0;
  double seconds = 1e30;
  int64_t bytes = 0;
};

// Every line of files through a CriteoReader; the best of reps.
Rate ReadAll(const std::vector<std::string>& files, int threads, int64_t uncompressed_bytes, int reps) {
  Rate best;
  for (int r = 0; r < reps; ++r) {
    CriteoReaderOptions o;
    o.batch_size = 4096;
    o.num_threads = threads;
    o.prefetch_batches = 8;
    o.chunk_bytes = 16 << 20;
    auto reader = CriteoReader::Create(files, o);
    if (!reader.ok()) {
      std::fprintf(stderr, "bench_input: %s\n", reader.status().ToString().c_str());
      std::exit(1);
    }
    const double t0 = Now();
    int64_t lines = 0;
    for (;;) {
      auto b = (*reader)->NextBlocking();
      if (!b.ok()) {
        if (b.status().code() != Code::kOutOfRange) {
          std::fprintf(stderr, "bench_input: %s\n", b.status().ToString().c_str());
          std::exit(1);
        }
        break;
      }
      lines += b->rows();
    }
    const double s = Now() - t0;
    if (s < best.seconds) best = {lines, s, uncompressed_bytes};
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("lines", 2000000, "lines in the synthetic log")
      .Int("files", 4, "files it is split over")
      .Int("threads", 0, "reader threads (0: one per core)")
      .Int("reps", 3, "timed repetitions per mode (best reported)")
      .String("dir", "", "where to write the files (default: a new directory under /tmp, removed after)")
      .Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_input");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = flags.GetInt("threads") > 0 ? static_cast<int>(flags.GetInt("threads")) : cores;
  const int reps = static_cast<int>(std::max<int64_t>(1, flags.GetInt("reps")));
  const bool json = flags.GetBool("json");
  std::string dir = flags.GetString("dir");
  const bool temp = dir.empty();
  if (temp) {
    char tmpl[] = "/tmp/sf_bench_input.XXXXXX";
    if (!::mkdtemp(tmpl)) {
      std::perror("bench_input: mkdtemp");
      return 1;
    }
    dir = tmpl;
  }
  CriteoSynthOptions so;
  so.lines = flags.GetInt("lines");
  so.files = static_cast<int>(flags.GetInt("files"));
  so.max_cardinality = 1000000;
  // Reuses the files of an earlier run with the same --dir, --lines and --files.
  auto kept = [&](const std::string& sub) -> std::vector<std::string> {
    auto files = ops::CriteoFiles(dir + "/" + sub);
    if (!files.ok() || static_cast<int>(files->size()) != so.files) return {};
    std::ifstream lines_file(dir + "/lines");
    int64_t lines = -1;
    lines_file >> lines;
    return lines == so.lines ? *files : std::vector<std::string>{};
  };
  std::vector<std::string> plain_files = kept("plain"), gz_files = kept("gzip");
  if (temp || plain_files.empty() || gz_files.empty()) {
    auto plain = WriteCriteoSynth(dir + "/plain", so);
    so.gzip = true;
    auto gz = plain.ok() ? WriteCriteoSynth(dir + "/gzip", so) : plain;
    if (!plain.ok() || !gz.ok()) {
      std::fprintf(stderr, "bench_input: %s\n", (plain.ok() ? gz : plain).status().ToString().c_str());
      return 1;
    }
    plain_files.clear();
    gz_files.clear();
    for (const auto& f : plain->files) plain_files.push_back(f.path);
    for (const auto& f : gz->files) gz_files.push_back(f.path);
    std::ofstream(dir + "/lines") << so.lines << "\n";
  }
  int64_t bytes = 0;
  for (const auto& f : plain_files) bytes += static_cast<int64_t>(std::filesystem::file_size(f));

  auto report = [&](const char* mode, int t, const Rate& r) {
    const double lps = r.lines / r.seconds;
    if (json) {
      JsonLine().Add("mode", mode).Add("threads", t).Add("lines", r.lines).Add("seconds", r.seconds)
          .Add("lines_per_sec", lps).Add("mb_per_sec", r.bytes / r.seconds / 1e6).Print();
    } else {
      std::printf("%-16s %d thread(s): %lld lines in %.3f s, %.0f lines/s, %.0f MB/s of text\n", mode, t,
                  static_cast<long long>(r.lines), r.seconds, lps, r.bytes / r.seconds / 1e6);
    }
    return lps;
  };

  // In memory, one thread: the parser and the hash alone.
  std::string text;
  {
    std::FILE* f = std::fopen(plain_files[0].c_str(), "rb");
    char buf[1 << 16];
    for (size_t n; f && (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    if (f) std::fclose(f);
  }
  Rate mem;
  for (int r = 0; r < reps; ++r) {
    float label, dense[kCriteoDense];
    int64_t ids[kCriteoCategorical];
    int64_t lines = 0, sink = 0;
    const double t0 = Now();
    for (size_t pos = 0; pos < text.size();) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) nl = text.size();
      int bad;
      if (ParseCriteoLine(std::string_view(text.data() + pos, nl - pos), &label, dense, ids, &bad) ==
          CriteoLineError::kOk) {
        sink += ids[0];
        ++lines;
      }
      pos = nl + 1;
    }
    const double s = Now() - t0;
    if (s < mem.seconds) mem = {lines, s, static_cast<int64_t>(text.size())};
    if (sink == 42) std::printf(" ");
  }
  const double parse = report("parse_in_memory", 1, mem);
  const double plain_lps = report("plain", threads, ReadAll(plain_files, threads, bytes, reps));
  const double gzip_lps = report("gzip", threads, ReadAll(gz_files, threads, bytes, reps));
  if (json) {
    JsonLine().Add("lines", so.lines).Add("threads", threads).Add("cores", cores)
        .Add("parse_lines_per_sec_per_thread", parse).Add("plain_lines_per_sec", plain_lps)
        .Add("gzip_lines_per_sec", gzip_lps).Add("lines_per_sec", std::min(plain_lps, gzip_lps)).Print();
  }
  if (temp) {
    for (const auto& f : plain_files) std::remove(f.c_str());
    for (const auto& f : gz_files) std::remove(f.c_str());
    std::remove((dir + "/lines").c_str());
    ::rmdir((dir + "/plain").c_str());
    ::rmdir((dir + "/gzip").c_str());
    ::rmdir(dir.c_str());
  }
  return 0;
}
