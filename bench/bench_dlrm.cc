// DLRM training throughput on Criteo-format files read and parsed as it
// trains (examples/common/dlrm_model.h, examples/common/dlrm_train.h), one
// process: synthetic files (examples/common/criteo_synth.h) are written
// first (or kept in --dir), then a phase at --batch-large (2048) and one at
// --batch (512), each a fresh session reading the files in a loop.
//
// JSON lines: one per phase, the last (batch 512) the summary:
// {"batch", "steps", "examples_per_sec", "examples_per_sec_per_core",
// "cores", "input_wait_fraction", "gemm_bound_examples_per_sec",
// "vs_gemm_bound", "gemm_gflops", "dense_mflops_per_example",
// "median_step_ms", "cpu_ms_per_step", "examples_per_cpu_second",
// "table_rows"}.
// - examples_per_sec: the timed steps' examples over their wall time, input
//   waits included.
// - input_wait_fraction: the share of that time a step waited for its batch
//   (the dequeue in flight, DlrmTrainer).
// - examples_per_cpu_second: examples over the process's CPU time (all
//   threads, spinning included): what the neighbours' load moves least.
// - gemm_bound_examples_per_sec: the step's dense flops (the MLPs' GEMMs,
//   forward and backward, and the interaction's) over the GEMM rate this
//   program measures on the step's own GEMM shapes with the kernels' GEMM
//   (nn::Gemm on a compute pool of the session's threads; the 10th
//   percentile pass, the faster of a measure before and one after the
//   phase): the examples/s of a step that cost only its dense math at that
//   rate.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "bench/process_usage.h"
#include "examples/common/checkpoint_dir.h"
#include "examples/common/criteo_synth.h"
#include "examples/common/dlrm_model.h"
#include "examples/common/dlrm_train.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/trace.h"
#include "kernels/compute_pool.h"
#include "kernels/cpu/nn_gemm.h"
#include "kernels/criteo_format.h"
#include "shardflow/precision.h"
#include "shardflow/reader_ops.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

[[noreturn]] void Die(const Status& s) {
  std::fprintf(stderr, "bench_dlrm: %s\n", s.ToString().c_str());
  std::exit(1);
}

// Seconds of one pass over the step's GEMMs on a pool of `threads` (the
// 10th percentile of 200 passes, warm: the rate the machine offers when the
// neighbours leave it alone, as a step's best minutes get) and its flops.
double GemmPassSeconds(const std::vector<DlrmGemm>& shapes, int threads, double* flops) {
  ComputePool pool(threads);
  std::vector<std::vector<float>> a, b, c;
  *flops = 0;
  for (const auto& s : shapes) {
    a.emplace_back(s.m * s.k, 0.5f);
    b.emplace_back(s.k * s.n, 0.25f);
    c.emplace_back(s.m * s.n);
    *flops += 2.0 * s.m * s.n * s.k;
  }
  std::vector<double> passes;
  for (int rep = 0; rep < 220; ++rep) {
    auto t0 = Clock::now();
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto& s = shapes[i];
      nn::Gemm<float>(&pool, a[i].data(), b[i].data(), c[i].data(), s.m, s.n, s.k, s.ta, s.tb);
    }
    if (rep >= 20) passes.push_back(Since(t0));
  }
  std::nth_element(passes.begin(), passes.begin() + passes.size() / 10, passes.end());
  return passes[passes.size() / 10];
}

struct Phase {
  int64_t batch = 0, steps = 0, table_rows = 0;
  double examples_per_sec = 0, wait_fraction = 0, median_step_ms = 0, cpu_ms_per_step = 0;
};

// Trains `steps` timed steps (after `warmup`) at `batch` on the files, in a fresh session.
Phase RunPhase(const std::vector<std::string>& files, const DlrmOptions& mo, DlrmInputOptions io, int64_t warmup,
               int64_t steps, const SessionOptions& so, const TraceFlag& trace) {
  Graph g;
  DlrmModel m;
  if (Status b = BuildDlrm(g, mo, &m); !b.ok()) Die(b);
  io.epochs = 0;  // the files in a loop
  auto in = AddDlrmInput(g, files, io, "input");
  if (!in.ok()) Die(in.status());
  Session s(g, so);
  if (auto r = s.Run({}, {}, {m.init}); !r.ok()) Die(r.status());
  DlrmTrainer trainer(s, m, *in);
  if (Status st = trainer.Start(); !st.ok()) Die(st);
  for (int64_t i = 0; i < warmup; ++i)
    if (auto r = trainer.Step(false); !r.ok()) Die(r.status());
  Phase p;
  p.batch = io.batch;
  p.steps = steps;
  std::vector<double> step_ms;
  double wait = 0;
  int64_t examples = 0;
  const bench::ProcessUsage u0 = bench::ReadProcessUsage();
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    auto r = trainer.Step(false, trace.For(i));
    if (!r.ok()) Die(r.status());
    wait += r->wait_secs;
    examples += r->rows;
    step_ms.push_back(1000 * (r->wait_secs + r->train_secs));
  }
  const double secs = Since(t0);
  const bench::ProcessUsage u1 = bench::ReadProcessUsage();
  std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2, step_ms.end());
  p.median_step_ms = step_ms[step_ms.size() / 2];
  p.examples_per_sec = examples / secs;
  p.wait_fraction = wait / secs;
  p.cpu_ms_per_step = 1000 * (u1.cpu_seconds - u0.cpu_seconds) / steps;
  auto metrics = s.Run({}, m.metrics);
  if (!metrics.ok()) Die(metrics.status());
  auto t = SumDlrmMetrics(*metrics);
  if (!t.ok()) Die(t.status());
  p.table_rows = t->rows;
  if (Status st = trainer.Stop(); !st.ok()) Die(st);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  FlushDenormalsToZero();  // before any thread: Adam's squared gradients reach denormals
  Flags flags;
  flags.Int("lines", 1000000, "lines of the synthetic log (read in a loop)")
      .Int("files", 4, "files it is split over")
      .Bool("gzip", "write gzip files")
      .Int("max-cardinality", 1000000, "cap on each field's cardinality")
      .Int("batch", 512, "batch of the second (summary) phase")
      .Int("batch-large", 2048, "batch of the first phase (0: skip it)")
      .Int("examples", 400000, "timed examples per phase")
      .Int("warmup-examples", 100000, "untimed examples per phase before it")
      .Int("shards", 2, "shards of the embedding table")
      .Int("reader-threads", 1, "threads parsing the input")
      .Int("threads", 0, "compute threads (0: one per core)")
      .Int("devices", 0, "CPU devices the graph is placed over (0: one per table shard)")
      .Int("scheduler-threads", 0, "actor scheduler threads (0: the session's default)")
      .Bool("direct", "steps take the reader's batches (no FIFOQueue between)")
      .String("dir", "", "where the files are written (kept; reused when --lines and --files match)")
      .Bool("json", "print JSON lines");
  DeclareTraceFlags(flags);
  ParseOrExit(flags, argc, argv, "bench_dlrm");
  const TraceFlag trace(flags);
  KeepTensorMemoryWarm();
  const bool json = flags.GetBool("json");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = flags.GetInt("threads") > 0 ? static_cast<int>(flags.GetInt("threads")) : cores;
  CriteoSynthOptions so;
  so.lines = flags.GetInt("lines");
  so.files = static_cast<int>(flags.GetInt("files"));
  so.gzip = flags.GetBool("gzip");
  so.max_cardinality = flags.GetInt("max-cardinality");
  if (so.lines < 1000 || so.files < 1 || flags.GetInt("batch") < 1 || flags.GetInt("batch-large") < 0 ||
      flags.GetInt("examples") < 1 || flags.GetInt("warmup-examples") < 0) {
    std::fprintf(stderr, "bench_dlrm: --lines >= 1000, --files >= 1, --batch >= 1, --examples >= 1 (see --help)\n");
    return 2;
  }
  CheckpointDir dir;  // the files' directory: --dir, or a temporary one removed at the end
  if (Status d = dir.Init(flags.GetString("dir"), "bench-dlrm"); !d.ok()) Die(d);
  const std::string sub = dir.path() + (so.gzip ? "/gzip" : "/plain");
  std::vector<std::string> files;
  {
    auto kept = ops::CriteoFiles(sub);
    std::ifstream lines_file(sub + ".lines");
    int64_t lines = -1;
    lines_file >> lines;
    if (kept.ok() && static_cast<int>(kept->size()) == so.files && lines == so.lines) files = *kept;
  }
  if (files.empty()) {
    auto w = WriteCriteoSynth(sub, so);
    if (!w.ok()) Die(w.status());
    for (const auto& f : w->files) files.push_back(f.path);
    std::ofstream(sub + ".lines") << so.lines << "\n";
  }

  DlrmOptions mo;
  mo.shards = flags.GetInt("shards");
  DlrmInputOptions io;
  io.reader_threads = static_cast<int>(flags.GetInt("reader-threads"));
  io.queue = !flags.GetBool("direct");
  std::vector<int64_t> batches;
  if (flags.GetInt("batch-large") > 0) batches.push_back(flags.GetInt("batch-large"));
  batches.push_back(flags.GetInt("batch"));
  for (int64_t batch : batches) {
    io.batch = batch;
    if (!io.queue) io.reader_batch = batch;
    const int64_t steps = std::max<int64_t>(10, flags.GetInt("examples") / batch);
    // The GEMM rate before and after the phase, the faster of the two: on a
    // shared machine the neighbours' load moves it within minutes, and the
    // faster one gives the higher (stricter) bound.
    double gemm_flops = 0;
    double gemm_secs = GemmPassSeconds(DlrmStepGemms(mo, batch), threads, &gemm_flops);
    SessionOptions sess;
    sess.num_cpu_devices = static_cast<int>(flags.GetInt("devices") > 0 ? flags.GetInt("devices") : mo.shards);
    sess.compute_threads = threads;
    sess.scheduler_threads = static_cast<int>(flags.GetInt("scheduler-threads"));
    const Phase p = RunPhase(files, mo, io, flags.GetInt("warmup-examples") / batch, steps, sess, trace);
    gemm_secs = std::min(gemm_secs, GemmPassSeconds(DlrmStepGemms(mo, batch), threads, &gemm_flops));
    const double gemm_rate = gemm_flops / gemm_secs;
    // The interaction: m(m+1)/2 dot products of width d forward, twice that backward.
    const int64_t d = mo.bottom.back(), pairs = (kCriteoCategorical + 1) * kCriteoCategorical / 2;
    const double dense_flops = gemm_flops + 3.0 * 2.0 * pairs * d * batch;
    const double bound = batch * gemm_rate / dense_flops;
    if (json) {
      JsonLine()
          .Add("system", "shardflow").Add("batch", batch).Add("steps", p.steps)
          .Add("examples_per_sec", p.examples_per_sec).Add("examples_per_sec_per_core", p.examples_per_sec / cores)
          .Add("cores", cores).Add("compute_threads", threads).Add("input_wait_fraction", p.wait_fraction)
          .Add("gemm_bound_examples_per_sec", bound).Add("vs_gemm_bound", p.examples_per_sec / bound)
          .Add("gemm_gflops", gemm_rate / 1e9).Add("dense_mflops_per_example", dense_flops / batch / 1e6)
          .Add("median_step_ms", p.median_step_ms).Add("cpu_ms_per_step", p.cpu_ms_per_step)
          .Add("examples_per_cpu_second", 1000.0 * batch / p.cpu_ms_per_step)
          .Add("table_rows", p.table_rows).Add("shards", mo.shards).Add("queue", io.queue).Add("gzip", so.gzip)
          .Print();
    } else {
      std::printf("batch %lld: %.0f examples/s (%.0f per core), input wait %.1f%%; GEMM bound %.0f examples/s "
                  "(%.1f GFLOP/s): %.2f of it; median step %.2f ms\n",
                  (long long)batch, p.examples_per_sec, p.examples_per_sec / cores, 100 * p.wait_fraction, bound,
                  gemm_rate / 1e9, p.examples_per_sec / bound, p.median_step_ms);
    }
  }
  return 0;
}
