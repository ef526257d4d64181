// Three ways for N worker replicas to train one model whose variables live
// in shared shard actors (no parameter server):
//
//   sync   SyncReplicas: each variable's shard averages the first N - b
//          gradients tagged with its step and applies them once (b backup
//          workers' late gradients are counted and dropped).
//   async  Hogwild-style: each gradient is applied on arrival (each update
//          is atomic in its shard actor; nothing waits), tagged with the
//          version read, so the shards measure staleness.
//   ssp    Stale-synchronous parallel: async updates, but a worker more than
//          --staleness clocks ahead of the slowest waits at StaleSyncWait (a
//          pending reply in the shard actor, not a sleeping thread).
//
//   build/bin/async_algorithms                        # 4 workers, 150 steps each
//   build/bin/async_algorithms --workers 8 --steps 300 --staleness 3 --json
//
// The model is logistic regression (softmax over 2 classes) on a
// deterministic synthetic dataset: features from a seeded generator, labels
// from a fixed true weight vector with 5% flipped. Every worker is a thread
// calling Session::Run; worker r's k-th batch is batch (k * N + r) mod B.
// Worker 0 evaluates the loss and accuracy on the whole dataset every
// --eval_every of its steps, so the curves share one x axis (worker 0's
// steps) and wall time.
//
// Writes <out_dir>/losses.csv (algorithm, step, wall_s, loss, accuracy) and
// <out_dir>/curves.svg (loss against wall time and against steps). With
// --json it prints one line per algorithm and a summary last:
// {"workers", "steps", "sync_final_loss", "sync_accuracy", "sync_steps_per_sec", ... for
// async and ssp, "async_mean_staleness", "ssp_max_staleness", "sync_dropped"}.
#include <filesystem>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <system_error>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/trace.h"
#include "examples/common/svg_plot.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/replication.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

struct Dataset {
  int n = 0, dim = 0;
  std::vector<float> x;      // [n, dim]
  std::vector<int64_t> y;    // [n]
};

Dataset MakeDataset(int n, int dim, uint32_t seed) {
  Dataset d;
  d.n = n;
  d.dim = dim;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> truth(dim);
  for (auto& t : truth) t = normal(rng);
  for (int i = 0; i < n; ++i) {
    float z = 0.3f;
    for (int j = 0; j < dim; ++j) {
      const float v = normal(rng);
      d.x.push_back(v);
      z += v * truth[j];
    }
    int64_t label = z > 0 ? 1 : 0;
    if (uni(rng) < 0.05f) label = 1 - label;
    d.y.push_back(label);
  }
  return d;
}

struct Options {
  int workers, steps, batch, eval_every, staleness, backup;
  double lr;
  const TraceFlag* trace = nullptr;  // --trace: worker 0's step (each algorithm rewrites the file)
};

struct Point {
  int step;
  double wall_s, loss, accuracy;
};

struct Outcome {
  std::string algorithm;
  std::vector<Point> curve;
  double final_loss = 0, accuracy = 0, steps_per_sec = 0, wall_s = 0;
  int64_t worker_steps = 0;
  double mean_staleness = 0, max_staleness = 0;
  int64_t applied_steps = 0, dropped = 0;
  bool ok = true;
  std::string error;
};

// The model: logits = x w + b; loss = mean sparse softmax cross-entropy.
struct Model {
  Graph g;
  Output x, y, w, b, logits, loss;
  VersionedRead rw, rb;  // async/ssp: reads tagged with their version
  Operation init;

  Model(int dim, bool versioned) {
    x = ops::Placeholder(g, DType::kFloat32, {-1, dim}, "x");
    y = ops::Placeholder(g, DType::kInt64, {-1}, "y");
    w = ops::Variable(g, "w", ops::Zeros(g, DType::kFloat32, {dim, 2}));
    b = ops::Variable(g, "b", ops::Zeros(g, DType::kFloat32, {2}));
    Output wv = w, bv = b;
    if (versioned) {
      rw = ReadVariableWithVersion(g, w);
      rb = ReadVariableWithVersion(g, b);
      wv = rw.value;
      bv = rb.value;
    }
    logits = ops::BiasAdd(g, ops::MatMul(g, x, wv), bv);
    loss = ops::Mean(g, ops::SparseSoftmaxCrossEntropyWithLogits(g, logits, y));
    init = ops::GlobalVariablesInitializer(g);
  }
};

FeedMap BatchFeeds(const Dataset& d, int batch_index, int batch) {
  const int nb = d.n / batch;
  const int start = (batch_index % nb) * batch;
  std::vector<float> x(d.x.begin() + static_cast<size_t>(start) * d.dim,
                       d.x.begin() + static_cast<size_t>(start + batch) * d.dim);
  std::vector<int64_t> y(d.y.begin() + start, d.y.begin() + start + batch);
  return {{"x", Tensor::FromVector(x, {batch, d.dim})}, {"y", Tensor::FromVector(y, {batch})}};
}

// Full-dataset loss and accuracy (fetching the plain reads w, b: the graph's
// logits may be built on the versioned reads, which read the same values).
Status Evaluate(Session& s, Model& m, const Dataset& d, double* loss, double* acc) {
  FeedMap feeds{{"x", Tensor::FromVector(d.x, {d.n, d.dim})}, {"y", Tensor::FromVector(d.y, {d.n})}};
  auto r = s.Run(feeds, {m.loss, m.logits});
  if (!r.ok()) return r.status();
  *loss = (*r)[0].scalar_as<float>();
  const float* lg = (*r)[1].data<float>();
  int correct = 0;
  for (int i = 0; i < d.n; ++i) correct += ((lg[2 * i + 1] > lg[2 * i]) ? 1 : 0) == d.y[i];
  *acc = static_cast<double>(correct) / d.n;
  return Status::OK();
}

Outcome Train(const std::string& algorithm, const Dataset& d, const Options& o) {
  Outcome out;
  out.algorithm = algorithm;
  const bool sync = algorithm == "sync";
  Model m(d.dim, !sync);
  GradientDescentOptimizer sgd(o.lr);
  std::vector<SyncReplicaTrainOp> towers;
  Operation async_train;
  std::vector<Operation> waits;
  std::vector<Output> clocks;
  Output stats, stale;
  if (sync) {
    const int required = o.workers - o.backup;
    SyncReplicas replicas(sgd, {required, o.workers, /*timeout_ms=*/30000});
    for (int r = 0; r < o.workers; ++r) {
      auto t = replicas.Minimize(m.g, m.loss, r);
      if (!t.ok()) return out.ok = false, out.error = t.status().ToString(), out;
      towers.push_back(*t);
    }
    stats = ops::SyncReplicaStats(m.g, m.w);
  } else {
    auto t = MinimizeAsync(m.g, sgd, m.loss, {m.rw, m.rb});
    if (!t.ok()) return out.ok = false, out.error = t.status().ToString(), out;
    async_train = *t;
    stale = ops::StalenessStats(m.g, m.w);
    if (algorithm == "ssp") {
      for (int r = 0; r < o.workers; ++r) {
        clocks.push_back(ops::Placeholder(m.g, DType::kInt64, PartialShape(Shape{}), "clock" + std::to_string(r)));
        waits.push_back(ops::StaleSyncWait(m.g, m.w, clocks.back(), r, o.workers, o.staleness));
      }
    }
  }
  if (!m.g.status().ok()) return out.ok = false, out.error = m.g.status().ToString(), out;
  Session s(m.g);
  if (auto r = s.Run({}, {}, {m.init}); !r.ok())
    return out.ok = false, out.error = r.status().ToString(), out;

  std::mutex mu;
  std::string first_error;
  std::atomic<int64_t> worker_steps{0};
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto fail = [&](const Status& st) {
    std::lock_guard<std::mutex> l(mu);
    if (first_error.empty()) first_error = st.ToString();
  };
  auto record = [&](int step) {
    double loss = 0, acc = 0;
    Status st = Evaluate(s, m, d, &loss, &acc);
    if (!st.ok()) return fail(st);
    std::lock_guard<std::mutex> l(mu);
    out.curve.push_back(Point{step, seconds(), loss, acc});
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < o.workers; ++r) {
    threads.emplace_back([&, r] {
      // Sync ends at the global step (with backup workers a worker's own
      // count is less); async and ssp after each worker's own steps.
      for (int k = 0; sync || k < o.steps; ++k) {
        {
          std::lock_guard<std::mutex> l(mu);
          if (!first_error.empty()) return;
        }
        if (r == 0 && k % o.eval_every == 0) record(k);
        FeedMap feeds = BatchFeeds(d, k * o.workers + r, o.batch);
        if (sync) {
          auto tok = s.Run({}, {towers[r].global_step});
          if (!tok.ok()) return fail(tok.status());
          const int64_t token = (*tok)[0].data<int64_t>()[0];
          if (token >= o.steps) break;
          feeds.emplace_back(towers[r].step_tag.name(), Tensor::Scalar<int64_t>(token));
          auto res = s.Run(feeds, {}, {towers[r].train_op}, r == 0 ? o.trace->For(k) : RunOptions{});
          if (!res.ok()) return fail(res.status());
        } else {
          if (!waits.empty()) {
            auto w = s.Run({{clocks[r].name(), Tensor::Scalar<int64_t>(k)}}, {}, {waits[r]});
            if (!w.ok()) return fail(w.status());
          }
          auto res = s.Run(feeds, {}, {async_train}, r == 0 ? o.trace->For(k) : RunOptions{});
          if (!res.ok()) return fail(res.status());
        }
        ++worker_steps;
      }
      if (!waits.empty()) {
        // Done: let the others through (a finished worker holds nobody back).
        auto w = s.Run({{clocks[r].name(), Tensor::Scalar<int64_t>(int64_t{1} << 40)}},
                       {}, {waits[r]});
        if (!w.ok()) fail(w.status());
      }
    });
  }
  for (auto& t : threads) t.join();
  out.wall_s = seconds();
  if (!first_error.empty()) return out.ok = false, out.error = first_error, out;
  record(o.steps);
  out.worker_steps = worker_steps;
  out.steps_per_sec = worker_steps / out.wall_s;
  if (!out.curve.empty()) {
    out.final_loss = out.curve.back().loss;
    out.accuracy = out.curve.back().accuracy;
  }
  if (sync) {
    auto r = s.Run({}, {stats});
    if (r.ok()) {
      out.applied_steps = (*r)[0].data<int64_t>()[0];
      out.dropped = (*r)[0].data<int64_t>()[2];
    }
  } else {
    auto r = s.Run({}, {stale});
    if (r.ok()) {
      out.mean_staleness = (*r)[0].data<double>()[1];
      out.max_staleness = (*r)[0].data<double>()[2];
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("workers", 4, "worker replicas (threads)")
      .Int("steps", 150, "steps per worker (sync: global steps)")
      .Int("batch", 32, "examples per worker step")
      .Int("examples", 4096, "synthetic dataset size")
      .Int("dim", 20, "features")
      .Int("eval_every", 10, "worker 0 evaluates every this many of its steps")
      .Int("staleness", 2, "ssp: the most clocks a worker may run ahead of the slowest")
      .Int("backup", 0, "sync: backup workers b (N - b gradients are averaged per step)")
      .Double("lr", 0.5, "learning rate")
      .String("algorithms", "sync,async,ssp", "comma-separated subset of sync, async, ssp")
      .String("out_dir", "runs/async_algorithms", "where losses.csv and curves.svg go (runs/ is ignored by git)")
      .Bool("json", "print JSON lines (one per algorithm, then the summary)");
  DeclareTraceFlags(flags);
  ParseOrExit(flags, argc, argv, "async_algorithms");
  const TraceFlag trace(flags);
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  Options o{static_cast<int>(flags.GetInt("workers")), static_cast<int>(flags.GetInt("steps")),
            static_cast<int>(flags.GetInt("batch")), static_cast<int>(flags.GetInt("eval_every")),
            static_cast<int>(flags.GetInt("staleness")), static_cast<int>(flags.GetInt("backup")),
            flags.GetDouble("lr"), &trace};
  const int examples = static_cast<int>(flags.GetInt("examples"));
  if (o.workers < 1 || o.steps < 1 || o.batch < 1 || o.eval_every < 1 || o.staleness < 0 ||
      o.backup < 0 || o.backup >= o.workers || examples < o.batch || flags.GetInt("dim") < 1) {
    std::fprintf(stderr, "async_algorithms: need workers >= 1, steps >= 1, 1 <= batch <= examples, "
                         "eval_every >= 1, staleness >= 0, 0 <= backup < workers, dim >= 1\n");
    return 2;
  }
  const bool json = flags.GetBool("json");
  const Dataset d = MakeDataset(examples, static_cast<int>(flags.GetInt("dim")), 20161102u);

  std::vector<std::string> algorithms;
  const std::string list = flags.GetString("algorithms") + ",";
  for (size_t p = 0, q; (q = list.find(',', p)) != std::string::npos; p = q + 1) {
    std::string a = list.substr(p, q - p);
    if (a.empty()) continue;
    if (a != "sync" && a != "async" && a != "ssp") {
      std::fprintf(stderr, "async_algorithms: unknown algorithm '%s' (sync, async, ssp)\n", a.c_str());
      return 2;
    }
    algorithms.push_back(a);
  }
  std::vector<Outcome> outcomes;
  for (const auto& a : algorithms) {
    Outcome r = Train(a, d, o);
    if (!r.ok) {
      std::fprintf(stderr, "async_algorithms: %s failed: %s\n", a.c_str(), r.error.c_str());
      return 1;
    }
    if (json) {
      JsonLine()
          .Add("algorithm", a)
          .Add("final_loss", r.final_loss)
          .Add("accuracy", r.accuracy)
          .Add("steps_per_sec", r.steps_per_sec)
          .Add("worker_steps", r.worker_steps)
          .Add("wall_s", r.wall_s)
          .Add("mean_staleness", r.mean_staleness)
          .Add("max_staleness", r.max_staleness)
          .Add("applied_steps", r.applied_steps)
          .Add("dropped_gradients", r.dropped)
          .Print();
    } else {
      std::printf("%-5s final loss %.4f  accuracy %.3f  %.1f worker steps/s  staleness mean %.2f max %.0f"
                  "  dropped %lld\n",
                  a.c_str(), r.final_loss, r.accuracy, r.steps_per_sec, r.mean_staleness,
                  r.max_staleness, static_cast<long long>(r.dropped));
    }
    outcomes.push_back(std::move(r));
  }

  const std::string dir = flags.GetString("out_dir");
  std::error_code mkdir_error;
  std::filesystem::create_directories(dir, mkdir_error);  // a failure shows as the fopen's below
  const std::string csv = dir + "/losses.csv";
  FILE* f = std::fopen(csv.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "async_algorithms: cannot write %s\n", csv.c_str());
    return 1;
  }
  std::fprintf(f, "algorithm,step,wall_s,loss,accuracy\n");
  Panel by_time{"full-data loss", "wall time (s)", {}}, by_step{"full-data loss", "worker 0 steps", {}};
  for (const auto& r : outcomes) {
    Series t{r.algorithm, {}, {}}, st{r.algorithm, {}, {}};
    for (const auto& p : r.curve) {
      std::fprintf(f, "%s,%d,%.6f,%.6f,%.6f\n", r.algorithm.c_str(), p.step, p.wall_s, p.loss, p.accuracy);
      t.x.push_back(p.wall_s);
      t.y.push_back(p.loss);
      st.x.push_back(p.step);
      st.y.push_back(p.loss);
    }
    by_time.series.push_back(t);
    by_step.series.push_back(st);
  }
  std::fclose(f);
  Status ps = WriteSvgPlot(dir + "/curves.svg", {by_time, by_step});
  if (!ps.ok()) {
    std::fprintf(stderr, "async_algorithms: %s\n", ps.ToString().c_str());
    return 1;
  }
  if (!json) std::printf("wrote %s and %s/curves.svg\n", csv.c_str(), dir.c_str());
  if (json) {
    JsonLine s;
    s.Add("workers", o.workers).Add("steps", o.steps).Add("staleness", o.staleness).Add("backup", o.backup);
    for (const auto& r : outcomes) {
      s.Add(r.algorithm + "_final_loss", r.final_loss)
          .Add(r.algorithm + "_accuracy", r.accuracy)
          .Add(r.algorithm + "_steps_per_sec", r.steps_per_sec);
      if (r.algorithm == "sync") s.Add("sync_dropped", r.dropped).Add("sync_applied_steps", r.applied_steps);
      else s.Add(r.algorithm + "_mean_staleness", r.mean_staleness).Add(r.algorithm + "_max_staleness", r.max_staleness);
    }
    s.Print();
  }
  return 0;
}
