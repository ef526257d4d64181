// DLRM on Criteo-format click logs, read and parsed in the graph as it trains
// (the model: examples/common/dlrm_model.h; the input and the step loop:
// examples/common/dlrm_train.h).
//
//   build/bin/dlrm --local --json                        # a synthetic log of --lines lines, made first
//   build/bin/criteo_synth --lines 10000000 --files 10 --out /data/c && build/bin/dlrm --data /data/c --json
//   build/bin/dlrm --data DIR --batch 2048 --epochs 2 --checkpoint-dir /tmp/dlrm-ckpt
//
// Data. --data DIR: DIR/train and DIR/test when both exist, else DIR's files
// (plain or gzip TSV, sorted by name) with the last --test-files held out.
// Without --data a synthetic log (examples/common/criteo_synth.h) of --lines
// lines is written into --synth-files files of a temporary directory, the
// last held out; the summary's planted_auc is then the planted model's AUC
// on the held-out lines: the ceiling a model can reach there.
//
// Training runs in one process (--local, the default): one pass per epoch
// over the training files, batches of --batch rows, until the input ends or
// --steps steps; then the held-out AUC and log loss. With --checkpoint-dir
// it saves every --checkpoint-every steps and at the end, and resumes from
// the newest checkpoint there (skipping the batches it had trained on).
// --nodes N --workers W trains on a local cluster of N node processes with W
// worker sessions sharing the training files through a chunk queue
// (examples/common/dlrm_cluster.h; every line once per epoch); the summary's
// "mode" is then "cluster" and it adds "nodes", "workers" and "chunks".
// --checkpoint-dir works with --local only.
//
// --json prints {"step", "loss", "examples_per_sec"} every --log-every steps
// and last the summary {"mode", "steps", "batch", "examples", "train_secs",
// "examples_per_sec", "input_wait_fraction", "final_loss", "auc", "logloss",
// "test_examples", "planted_auc" (synthetic data only), "table_rows",
// "table_bytes", "start_step", "checkpoints", "wall_secs"}. examples/s
// counts the training loop (input waits included), not initialisation or
// evaluation.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "examples/common/auc.h"
#include "examples/common/checkpoint_dir.h"
#include "examples/common/criteo_synth.h"
#include "examples/common/dlrm_cluster.h"
#include "examples/common/dlrm_model.h"
#include "examples/common/dlrm_train.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/progress.h"
#include "shardflow/precision.h"
#include "shardflow/reader_ops.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int Fail(const Status& s) {
  std::fprintf(stderr, "dlrm: %s\n", s.ToString().c_str());
  return 1;
}

struct DataSet {
  std::vector<std::string> train, test;
  double planted_auc = -1;  // synthetic only
};

// The training and held-out files of --data DIR (see the top of the file).
Result<DataSet> FilesOf(const std::string& dir, int64_t test_files) {
  DataSet d;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(dir + "/train", ec) && fs::is_directory(dir + "/test", ec)) {
    SF_ASSIGN_OR_RETURN(d.train, ops::CriteoFiles(dir + "/train"));
    SF_ASSIGN_OR_RETURN(d.test, ops::CriteoFiles(dir + "/test"));
    return d;
  }
  SF_ASSIGN_OR_RETURN(std::vector<std::string> files, ops::CriteoFiles(dir));
  if (static_cast<int64_t>(files.size()) <= test_files)
    return InvalidArgument("--data " + dir + " holds " + std::to_string(files.size()) +
                           " file(s): it needs more than --test-files " + std::to_string(test_files) +
                           " (or train/ and test/ subdirectories)");
  d.train.assign(files.begin(), files.end() - test_files);
  d.test.assign(files.end() - test_files, files.end());
  return d;
}

// Writes a synthetic log into dir; the last file is held out, and its
// planted AUC computed from the generator's probabilities.
Result<DataSet> Synthesize(const std::string& dir, const CriteoSynthOptions& o) {
  SF_ASSIGN_OR_RETURN(CriteoSynthResult r, WriteCriteoSynth(dir, o));
  DataSet d;
  for (const auto& f : r.files) d.train.push_back(f.path);
  d.test.push_back(d.train.back());
  d.train.pop_back();
  const CriteoSynth synth(o);
  const int64_t test_lines = r.files.back().lines;
  std::vector<float> p, y;
  std::string line;
  for (int64_t i = r.lines - test_lines; i < r.lines; ++i) {
    line.clear();
    const CriteoSynthLabel l = synth.AppendLine(i, &line);
    p.push_back(static_cast<float>(l.probability));
    y.push_back(l.label ? 1.0f : 0.0f);
  }
  d.planted_auc = Auc(p, y);
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  const auto wall0 = Clock::now();
  Flags flags;
  flags.String("data", "", "a directory of Criteo-format files (see --help's top comment); none: a synthetic log")
      .Int("test-files", 1, "with --data: files held out at the end of the sorted list")
      .Int("lines", 300000, "without --data: lines of the synthetic log")
      .Int("synth-files", 5, "without --data: files of the synthetic log (the last held out)")
      .Int("max-cardinality", 200000, "without --data: cap on each field's cardinality (0: Criteo Kaggle's)")
      .Int("batch", 512, "examples per step")
      .Int("epochs", 1, "passes over the training files")
      .Int("steps", 0, "stop after this many steps (0: when the input ends)")
      .Int("shards", 2, "shards of the embedding table")
      .Int("reader-threads", 1, "threads parsing the input")
      .Double("table-lr", 0.05, "Adagrad learning rate of the tables")
      .Double("mlp-lr", 0.001, "learning rate of the MLPs")
      .String("mlp-optimizer", "adam", "the MLPs' optimizer: adam or sgd")
      .Int("min-count", 0, "sightings before an id gets a row (admission)")
      .Int("ttl-steps", 0, "rows unused this many steps are deleted (0: never)")
      .Int("max-rows", 0, "rows per table shard at most (0: no limit)")
      .Int("seed", 1, "seed of the initialisation and the synthetic log")
      .String("checkpoint-dir", "", "checkpoint into DIR and resume from its newest checkpoint")
      .Int("checkpoint-every", 0, "steps between checkpoints (0: only at the end)")
      .Int("log-every", 200, "steps between progress lines")
      .Bool("local", "train in this process (the default)")
      .Int("nodes", 0, "train on a local cluster of this many node processes (with --workers)")
      .Int("workers", 0, "with --nodes: worker sessions sharing the training files")
      .Int("chunk-mb", 4, "with --nodes: the training files are handed to workers in chunks of this many MiB")
      .Int("lease-ms", 30000, "with --nodes: a silent worker's chunks go to the others after this long")
      .Int("add-node-at", 0, "with --nodes: a node joins the cluster once the workers made this many steps")
      .Bool("json", "print JSON lines on stdout; the last is the summary");
  ParseOrExit(flags, argc, argv, "dlrm");
  KeepTensorMemoryWarm();
  FlushDenormalsToZero();  // before any thread: Adam's squared gradients reach denormals
  const bool json = flags.GetBool("json");
  DlrmOptions mo;
  mo.shards = flags.GetInt("shards");
  mo.table_lr = flags.GetDouble("table-lr");
  mo.mlp_lr = flags.GetDouble("mlp-lr");
  mo.mlp_optimizer = flags.GetString("mlp-optimizer");
  mo.min_count = flags.GetInt("min-count");
  mo.ttl_steps = flags.GetInt("ttl-steps");
  mo.max_rows = flags.GetInt("max-rows");
  mo.seed = static_cast<uint64_t>(flags.GetInt("seed"));
  DlrmInputOptions io;
  io.batch = flags.GetInt("batch");
  io.epochs = flags.GetInt("epochs");
  io.reader_threads = static_cast<int>(flags.GetInt("reader-threads"));
  const int64_t max_steps = flags.GetInt("steps"), log_every = flags.GetInt("log-every");
  const int64_t checkpoint_every = flags.GetInt("checkpoint-every");
  const std::string checkpoint_dir = flags.GetString("checkpoint-dir");
  std::string bad;
  const bool cluster = flags.GetInt("nodes") != 0 || flags.GetInt("workers") != 0;
  if (cluster && flags.GetBool("local")) bad = "--local trains in this process: drop --nodes and --workers";
  else if (cluster && (flags.GetInt("nodes") < 1 || flags.GetInt("workers") < 1))
    bad = "--nodes and --workers must both be at least 1";
  else if (cluster && !checkpoint_dir.empty()) bad = "--checkpoint-dir works with --local only";
  else if (cluster && (flags.GetInt("chunk-mb") < 1 || flags.GetInt("lease-ms") < 1))
    bad = "--chunk-mb and --lease-ms must be at least 1";
  else if (flags.GetInt("add-node-at") < 0 || (!cluster && flags.GetInt("add-node-at") > 0))
    bad = "--add-node-at takes a step count of 0 or more, with --nodes";
  else if (io.batch < 1 || io.batch > (int64_t{1} << 20)) bad = "--batch must be in [1, 2^20]";
  else if (io.epochs < 1) bad = "--epochs must be at least 1";
  else if (io.reader_threads < 1 || io.reader_threads > 64) bad = "--reader-threads must be in [1, 64]";
  else if (max_steps < 0 || log_every < 1 || checkpoint_every < 0)
    bad = "--steps and --checkpoint-every must be >= 0, --log-every >= 1";
  else if (flags.GetInt("test-files") < 1) bad = "--test-files must be at least 1";
  else if (flags.GetInt("synth-files") < 2 || flags.GetInt("lines") < flags.GetInt("synth-files"))
    bad = "--synth-files must be at least 2 and --lines at least --synth-files";
  else if (Status v = ValidateDlrmOptions(mo); !v.ok()) bad = v.message();
  if (!bad.empty()) {
    std::fprintf(stderr, "dlrm: %s (see --help)\n", bad.c_str());
    return 2;
  }

  // The data.
  CheckpointDir synth_dir;  // a temporary directory for the synthetic log, removed at the end
  Result<DataSet> data = InvalidArgument("no data");
  const auto data0 = Clock::now();
  if (!flags.GetString("data").empty()) {
    data = FilesOf(flags.GetString("data"), flags.GetInt("test-files"));
  } else {
    Status made = synth_dir.Init("", "dlrm-data");
    if (!made.ok()) return Fail(made);
    CriteoSynthOptions so;
    so.lines = flags.GetInt("lines");
    so.files = static_cast<int>(flags.GetInt("synth-files"));
    so.max_cardinality = flags.GetInt("max-cardinality");
    so.seed = mo.seed;
    data = Synthesize(synth_dir.path(), so);
  }
  if (!data.ok()) return Fail(data.status());
  const double data_secs = SecondsSince(data0);
  if (!json)
    std::printf("%zu training file(s), %zu held out%s (%.1f s)\n", data->train.size(), data->test.size(),
                data->planted_auc >= 0 ? ", synthetic" : "", data_secs);

  if (cluster) {
    DlrmClusterOptions co;
    co.nodes = static_cast<int>(flags.GetInt("nodes"));
    co.workers = static_cast<int>(flags.GetInt("workers"));
    co.chunk_bytes = flags.GetInt("chunk-mb") << 20;
    co.lease_ms = flags.GetInt("lease-ms");
    co.add_node_at = flags.GetInt("add-node-at");
    co.max_steps = max_steps;
    co.log_every = log_every;
    co.json = json;
    co.data_dir = flags.GetString("data").empty() ? synth_dir.path() : flags.GetString("data");
    auto r = TrainDlrmOnCluster(mo, io, data->train, data->test, co);
    if (!r.ok()) return Fail(r.status());
    const double eps = r->train_secs > 0 ? r->examples / r->train_secs : 0;
    const double wait = r->train_secs > 0 ? r->input_wait_secs / (r->train_secs * co.workers) : 0;
    if (json) {
      JsonLine line;
      line.Add("mode", "cluster").Add("nodes", int64_t{co.nodes}).Add("workers", int64_t{co.workers})
          .Add("chunks", r->chunks).Add("lost_batches", r->lost_batches).Add("steps", r->steps).Add("batch", io.batch).Add("examples", r->examples)
          .Add("nodes_added", r->nodes_added).Add("steps_after_add", r->steps_after_add)
          .Add("train_secs", r->train_secs).Add("examples_per_sec", eps).Add("input_wait_fraction", wait)
          .Add("final_loss", r->final_loss).Add("auc", r->eval.auc).Add("logloss", r->eval.logloss)
          .Add("test_examples", r->eval.examples);
      if (data->planted_auc >= 0) line.Add("planted_auc", data->planted_auc);
      line.Add("table_rows", r->table.rows).Add("table_bytes", r->table.bytes).Add("data_secs", data_secs)
          .Add("wall_secs", SecondsSince(wall0)).Print();
    } else {
      std::printf("%d nodes, %d workers: %lld steps, %.0f examples/s; held-out AUC %.4f, log loss %.4f on %lld "
                  "examples\n", co.nodes, co.workers, (long long)r->steps, eps, r->eval.auc, r->eval.logloss,
                  (long long)r->eval.examples);
    }
    return 0;
  }

  Graph g;
  DlrmModel m;
  Status built = BuildDlrm(g, mo, &m);
  if (!built.ok()) return Fail(built);
  auto train_in = AddDlrmInput(g, data->train, io, "train_input");
  if (!train_in.ok()) return Fail(train_in.status());
  DlrmInputOptions to = io;
  to.epochs = 1;
  to.queue = false;
  to.batch = 8192;
  auto test_in = AddDlrmInput(g, data->test, to, "test_input");
  if (!test_in.ok()) return Fail(test_in.status());

  SessionOptions so;
  so.num_cpu_devices = static_cast<int>(mo.shards);
  Session s(g, so);
  auto init = s.Run({}, {}, {m.init});
  if (!init.ok()) return Fail(init.status().WithPrefix("initialising"));
  int64_t start_step = 0, checkpoints = 0;
  DlrmTrainer trainer(s, m, *train_in);
  Status started = trainer.Start();
  if (!started.ok()) return Fail(started);
  if (!checkpoint_dir.empty() && Session::CheckpointStep(checkpoint_dir).ok()) {
    Status r = s.RestoreCheckpoint(checkpoint_dir, -1, &start_step);
    if (!r.ok()) return Fail(r.WithPrefix("resuming from " + checkpoint_dir));
    for (int64_t i = 0; i < start_step; ++i) {
      Status k = trainer.Skip();
      if (!k.ok()) return Fail(k.WithPrefix("skipping the batches the checkpoint trained on"));
    }
    if (!json) std::printf("resumed from %s at step %lld\n", checkpoint_dir.c_str(), (long long)start_step);
  }
  auto checkpoint = [&](int64_t step) -> Status {
    auto id = s.SaveCheckpoint(checkpoint_dir, step, /*keep_last=*/3);
    if (!id.ok()) return id.status().WithPrefix("checkpointing step " + std::to_string(step));
    ++checkpoints;
    if (json) JsonLine().Add("checkpoint", *id).Add("step", step).Print();
    return Status::OK();
  };

  ProgressBar bar(max_steps > 0 ? max_steps : 0, "dlrm");
  int64_t step = start_step, examples = 0;
  double wait = 0, train_secs = 0, loss_sum = 0, final_loss = 0;
  int64_t loss_n = 0;
  const auto loop0 = Clock::now();
  while (max_steps == 0 || step < max_steps) {
    auto r = trainer.Step();
    if (!r.ok()) {
      if (r.status().code() == Code::kOutOfRange) break;
      return Fail(r.status().WithPrefix("step " + std::to_string(step + 1)));
    }
    ++step;
    examples += r->rows;
    wait += r->wait_secs;
    loss_sum += r->loss;
    ++loss_n;
    if (!json) bar.Update(step, r->loss);
    if (step % log_every == 0) {
      final_loss = loss_sum / loss_n;
      const double eps = examples / SecondsSince(loop0);
      if (json) JsonLine().Add("step", step).Add("loss", final_loss).Add("examples_per_sec", eps).Print();
      loss_sum = 0;
      loss_n = 0;
    }
    if (!checkpoint_dir.empty() && checkpoint_every > 0 && step % checkpoint_every == 0) {
      Status c = checkpoint(step);
      if (!c.ok()) return Fail(c);
    }
  }
  train_secs = SecondsSince(loop0);
  if (loss_n > 0) final_loss = loss_sum / loss_n;
  if (!json) bar.Finish();
  Status stopped = trainer.Stop();
  if (!stopped.ok()) return Fail(stopped.WithPrefix("the input"));
  if (!checkpoint_dir.empty() && step > start_step) {
    Status c = checkpoint(step);
    if (!c.ok()) return Fail(c);
  }
  auto eval = EvaluateDlrm(s, m, *test_in);
  if (!eval.ok()) return Fail(eval.status());
  auto metrics = s.Run({}, m.metrics);
  if (!metrics.ok()) return Fail(metrics.status().WithPrefix("reading the table's metrics"));
  auto table = SumDlrmMetrics(*metrics);
  if (!table.ok()) return Fail(table.status());
  const double eps = train_secs > 0 ? examples / train_secs : 0;
  if (json) {
    JsonLine line;
    line.Add("mode", "local").Add("steps", step).Add("batch", io.batch).Add("examples", examples)
        .Add("train_secs", train_secs).Add("examples_per_sec", eps)
        .Add("input_wait_fraction", train_secs > 0 ? wait / train_secs : 0.0).Add("final_loss", final_loss)
        .Add("auc", eval->auc).Add("logloss", eval->logloss).Add("test_examples", eval->examples);
    if (data->planted_auc >= 0) line.Add("planted_auc", data->planted_auc);
    line.Add("table_rows", table->rows).Add("table_bytes", table->bytes).Add("start_step", start_step)
        .Add("checkpoints", checkpoints).Add("data_secs", data_secs).Add("wall_secs", SecondsSince(wall0)).Print();
  } else {
    std::printf("%lld steps, %.0f examples/s (input wait %.1f%%); held-out AUC %.4f%s, log loss %.4f on %lld examples\n",
                (long long)step, eps, 100.0 * (train_secs > 0 ? wait / train_secs : 0), eval->auc,
                data->planted_auc >= 0 ? (" (planted " + std::to_string(data->planted_auc).substr(0, 6) + ")").c_str() : "",
                eval->logloss, (long long)eval->examples);
  }
  return 0;
}
