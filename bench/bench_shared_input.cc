// What sharing an input among workers costs (include/shardflow/chunk_queue_ops.h):
// Criteo lines per second through one process's session, read by
// ops::CriteoBatchQueue (reader threads, the one-worker input) and by
// --workers workers of ops::SharedCriteoBatchQueue taking chunks of
// --chunk-mb from one chunk queue, each dequeuing batches of --batch rows
// and reporting them trained (ChunkQueueReport) as a training step would,
// without the model. The files are synthetic (examples/common/criteo_synth.h)
// in a temporary directory, read from the page cache.
//
// JSON lines: one per mode {"mode", "workers", "lines", "batches",
// "seconds", "lines_per_sec"}; the last, the summary: {"lines", "workers",
// "chunks", "threaded_lines_per_sec", "shared_lines_per_sec",
// "shared_over_threaded", "reports_per_sec"}.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/checkpoint_dir.h"
#include "examples/common/criteo_synth.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "shardflow/chunk_queue_ops.h"
#include "shardflow/queue_runner.h"
#include "shardflow/reader_ops.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

[[noreturn]] void Die(const Status& s) {
  std::fprintf(stderr, "bench_shared_input: %s\n", s.ToString().c_str());
  std::exit(1);
}

struct Rate {
  int64_t lines = 0, batches = 0;
  double seconds = 0;
};

// One worker's input in a thread of reader threads: every line once.
Rate Threaded(const std::vector<std::string>& files, int64_t batch) {
  Graph g;
  CriteoReaderOptions o;
  o.batch_size = 4096;
  o.num_threads = 2;
  auto in = ops::CriteoBatchQueue(g, files, o, batch);
  if (!g.status().ok()) Die(g.status());
  Session s(g);
  QueueRunnerOptions r;
  r.close_target = in.close.name();
  r.cancel_target = in.cancel.name();
  QueueRunner runner(s, {in.enqueue.name()}, nullptr, r);
  Rate rate;
  const double t0 = Now();
  if (Status st = runner.Start(); !st.ok()) Die(st);
  for (;;) {
    auto b = s.Run({}, Fetches{in.label, in.dense, in.categorical});
    if (!b.ok()) {
      if (b.status().code() != Code::kOutOfRange) Die(b.status());
      break;
    }
    rate.lines += (*b)[0].num_elements();
    ++rate.batches;
  }
  rate.seconds = Now() - t0;
  if (Status st = runner.Join(); !st.ok()) Die(st);
  return rate;
}

// workers sharing the files through one chunk queue, each reporting its batches trained.
Rate Shared(const ops::CriteoChunkPlan& plan, int workers, int64_t batch) {
  Graph g;
  Output q = ops::ChunkQueue(g, plan.num_chunks(), {}, "chunks");
  std::vector<ops::SharedCriteoInput> ins;
  for (int w = 0; w < workers; ++w)
    ins.push_back(ops::SharedCriteoBatchQueue(g, q, plan, CriteoReaderOptions{}, w + 1, batch, 0,
                                              "worker" + std::to_string(w)));
  if (!g.status().ok()) Die(g.status());
  Session s(g);
  std::vector<std::unique_ptr<QueueRunner>> runners;
  std::atomic<int64_t> lines{0}, batches{0};
  const double t0 = Now();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    QueueRunnerOptions r;
    r.close_target = ins[w].close.name();
    r.cancel_target = ins[w].cancel.name();
    runners.push_back(std::make_unique<QueueRunner>(s, std::vector<std::string>{ins[w].enqueue.name()}, nullptr, r));
    if (Status st = runners.back()->Start(); !st.ok()) Die(st);
    threads.emplace_back([&, w] {
      const ops::SharedCriteoInput& in = ins[w];
      for (;;) {
        auto b = s.Run({}, Fetches{in.label, in.dense, in.categorical, in.ticket, in.pos});
        if (!b.ok()) {
          if (b.status().code() != Code::kOutOfRange) Die(b.status());
          return;
        }
        auto t = s.Run({{in.trained_ticket, (*b)[3]}, {in.trained_pos, (*b)[4]}}, Fetches{}, {in.trained});
        if (!t.ok()) Die(t.status());
        lines += (*b)[0].num_elements();
        ++batches;
      }
    });
  }
  for (auto& t : threads) t.join();
  Rate rate;
  rate.seconds = Now() - t0;
  rate.lines = lines;
  rate.batches = batches;
  for (auto& r : runners)
    if (Status st = r->Join(); !st.ok()) Die(st);
  return rate;
}

void Print(const char* mode, int workers, const Rate& r, bool json) {
  if (json)
    JsonLine().Add("mode", mode).Add("workers", int64_t{workers}).Add("lines", r.lines).Add("batches", r.batches)
        .Add("seconds", r.seconds).Add("lines_per_sec", r.lines / r.seconds).Print();
  else
    std::printf("%-9s %d worker(s): %lld lines in %.2f s, %.0f lines/s\n", mode, workers, (long long)r.lines,
                r.seconds, r.lines / r.seconds);
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("lines", 500000, "lines of the synthetic log")
      .Int("files", 4, "files of the log")
      .Int("workers", 2, "workers sharing the input")
      .Int("batch", 512, "rows per dequeued batch")
      .Int("chunk-mb", 4, "chunk size of the shared input, MiB")
      .Bool("json", "print JSON lines on stdout; the last is the summary");
  ParseOrExit(flags, argc, argv, "bench_shared_input");
  const bool json = flags.GetBool("json");
  const int workers = static_cast<int>(flags.GetInt("workers"));
  const int64_t batch = flags.GetInt("batch");
  if (workers < 1 || workers > 64 || batch < 1 || flags.GetInt("lines") < 1 || flags.GetInt("files") < 1 ||
      flags.GetInt("chunk-mb") < 1) {
    std::fprintf(stderr, "bench_shared_input: --workers in [1, 64], --batch, --lines, --files, --chunk-mb >= 1\n");
    return 2;
  }
  CheckpointDir dir;
  if (Status s = dir.Init("", "bench-shared-input"); !s.ok()) Die(s);
  CriteoSynthOptions so;
  so.lines = flags.GetInt("lines");
  so.files = static_cast<int>(flags.GetInt("files"));
  so.max_cardinality = 200000;
  auto written = WriteCriteoSynth(dir.path(), so);
  if (!written.ok()) Die(written.status());
  std::vector<std::string> files;
  for (const auto& f : written->files) files.push_back(f.path);
  auto plan = ops::PlanCriteoChunks(files, flags.GetInt("chunk-mb") << 20);
  if (!plan.ok()) Die(plan.status());

  const Rate threaded = Threaded(files, batch);
  Print("threaded", 1, threaded, json);
  const Rate shared = Shared(*plan, workers, batch);
  Print("shared", workers, shared, json);
  if (shared.lines != threaded.lines)
    Die(Internal("the shared input gave " + std::to_string(shared.lines) + " lines, the threaded reader " +
                 std::to_string(threaded.lines)));
  const double t = threaded.lines / threaded.seconds, sh = shared.lines / shared.seconds;
  if (json)
    JsonLine().Add("lines", shared.lines).Add("workers", int64_t{workers}).Add("chunks", plan->num_chunks())
        .Add("threaded_lines_per_sec", t).Add("shared_lines_per_sec", sh).Add("shared_over_threaded", sh / t)
        .Add("reports_per_sec", shared.batches / shared.seconds).Print();
  return 0;
}
