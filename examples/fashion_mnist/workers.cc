#include "examples/fashion_mnist/workers.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "examples/common/json.h"
#include "examples/common/local_cluster.h"
#include "examples/common/svg_plot.h"
#include "shardflow/cluster.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/replication.h"

namespace sf::examples {
namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "fashion_mnist: %s\n", s.ToString().c_str());
  return 1;
}

// One worker: its graph, its training op and its session.
struct Worker {
  Graph g;
  ClassifierModel m;
  SyncReplicaTrainOp sync;           // --sync
  Operation async_train;              // --async
  std::vector<VersionedRead> reads;  // --async: the model's versioned reads
  std::unique_ptr<ClusterSession> session;
  std::vector<int64_t> order;        // this worker's shuffle of the training set
};

// Builds worker w's graph: the model on task w % tasks, the variables pinned
// alike in every graph, and its replicated updates.
Status BuildWorker(const WorkerTrainingOptions& o, int w, int tasks, Worker* wk) {
  ModelOptions mo = o.model;
  mo.build_optimizer = false;
  mo.variable_tasks = tasks;
  mo.tower_device = "/job:worker/task:" + std::to_string(w % tasks);
  mo.versioned_reads = o.async ? &wk->reads : nullptr;
  SF_RETURN_IF_ERROR(BuildClassifier(wk->g, mo, &wk->m));
  MomentumOptimizer opt(mo.learning_rate, mo.momentum);
  opt.SetLearningRate(wk->m.lr);
  if (o.async) {
    SF_ASSIGN_OR_RETURN(wk->async_train, MinimizeAsync(wk->g, opt, wk->m.loss, wk->reads));
  } else {
    // A worker whose step never completes (a peer failed) gives up after a minute.
    SyncReplicas sync(opt, {o.workers, o.workers + o.backup_workers, /*timeout_ms=*/60000});
    SF_ASSIGN_OR_RETURN(wk->sync, sync.Minimize(wk->g, wk->m.loss, w));
  }
  return wk->g.status();
}

// The trainable variables' handles of g, in creation order.
std::vector<Output> TrainableHandles(Graph& g) {
  std::vector<Output> out;
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    auto tr = n.attrs.GetOr<bool>("trainable", false);
    if (n.op == "VarHandle" && tr.ok() && *tr) out.push_back(Output(&g, i, 0));
  }
  return out;
}

// Remembers the first error of the worker threads.
class FirstError {
 public:
  void Set(const Status& s) {
    std::lock_guard<std::mutex> l(mu_);
    if (status_.ok()) status_ = s;
    failed_ = true;
  }
  bool failed() const { return failed_; }
  Status status() {
    std::lock_guard<std::mutex> l(mu_);
    return status_;
  }

 private:
  std::mutex mu_;
  Status status_;  // GUARDED_BY(mu_)
  std::atomic<bool> failed_{false};
};

}  // namespace

int TrainWithWorkers(const WorkerTrainingOptions& o, const Dataset& train, const Dataset& test) {
  if (o.workers < 1) return Fail(InvalidArgument("--workers must be at least 1, got " + std::to_string(o.workers)));
  if (o.backup_workers < 0)
    return Fail(InvalidArgument("--backup-workers must not be negative, got " + std::to_string(o.backup_workers)));
  if (o.async && o.backup_workers > 0)
    return Fail(InvalidArgument("--backup-workers needs --sync (asynchronous workers never wait for each other)"));
  if (o.cluster.empty() && o.nodes < 1)
    return Fail(InvalidArgument("--nodes must be at least 1, got " + std::to_string(o.nodes)));
  if (!o.cluster.empty() && o.tls_dir.empty())
    return Fail(InvalidArgument("--cluster " + o.cluster + " needs --tls-dir (the cluster's credentials)"));
  const int64_t steps_per_epoch = o.n_train / o.batch;  // drop the last partial batch
  if (steps_per_epoch < 1) return Fail(InvalidArgument("--batch is larger than the training set"));

  LocalCluster local;
  ClusterOptions co;
  // Workers, nodes and this client may share few cores: a second of
  // silence is not yet a dead peer.
  co.peer_timeout_ms = 5000;
  if (o.cluster.empty()) {
    Status s = local.Start(o.nodes, 3600);
    if (!s.ok()) return Fail(s);
    co.address = local.addresses()[0];
    co.tls_dir = local.tls_dir();
  } else {
    co.address = o.cluster;
    co.tls_dir = o.tls_dir;
  }

  // The number of tasks decides where each variable lives; ask the cluster.
  Graph probe;
  ops::Const(probe, 0.0f);
  auto probe_session = ClusterSession::Connect(probe, co);
  if (!probe_session.ok()) return Fail(probe_session.status());
  const int tasks = static_cast<int>((*probe_session)->tasks().size());
  probe_session->reset();
  if (tasks < 1) return Fail(Unavailable("the cluster at " + co.address + " lists no members"));

  const int n_workers = o.workers + (o.async ? 0 : o.backup_workers);
  std::vector<std::unique_ptr<Worker>> workers;
  for (int w = 0; w < n_workers; ++w) {
    auto wk = std::make_unique<Worker>();
    Status s = BuildWorker(o, w, tasks, wk.get());
    if (!s.ok()) return Fail(s.WithPrefix("worker " + std::to_string(w)));
    auto session = ClusterSession::Connect(wk->g, co);
    if (!session.ok()) return Fail(session.status());
    wk->session = std::move(*session);
    wk->order.resize(o.n_train);
    workers.push_back(std::move(wk));
  }
  // One initializer, run once: it covers the optimizer's slots too.
  const Operation init = ops::GlobalVariablesInitializer(workers[0]->g, "init_replicated");
  if (!workers[0]->g.status().ok()) return Fail(workers[0]->g.status());
  if (auto r = workers[0]->session->Run({}, {}, {init}); !r.ok()) return Fail(r.status());

  // The evaluator: the same model and variables, no updates.
  Graph eg;
  ClassifierModel em;
  ModelOptions emo = o.model;
  emo.build_optimizer = false;
  emo.variable_tasks = tasks;
  if (Status s = BuildClassifier(eg, emo, &em); !s.ok()) return Fail(s);
  std::vector<Output> stats;
  for (const Output& h : TrainableHandles(eg))
    stats.push_back(o.async ? ops::StalenessStats(eg, h) : ops::SyncReplicaStats(eg, h));
  if (!eg.status().ok()) return Fail(eg.status());
  auto evaluator = ClusterSession::Connect(eg, co);
  if (!evaluator.ok()) return Fail(evaluator.status());
  // The initializer resets the values but not the shards' counters: on a
  // cluster that trained these variables before, the global step and the
  // counters start where that run left them. Steps and counters are taken
  // relative to these.
  auto before = (*evaluator)->Run({}, stats);
  if (!before.ok()) return Fail(before.status());
  const int64_t base_step = o.async ? 0 : (*before)[0].data<int64_t>()[0];

  const std::string mode = o.async ? "async" : "sync";
  const std::string run_dir = o.out + "/fashion_mnist_" + o.model.model + "_seed" + std::to_string(o.model.seed) +
                              "_" + mode + "_w" + std::to_string(o.workers);
  std::filesystem::create_directories(run_dir);
  std::ofstream csv(run_dir + "/metrics.csv");
  csv << "epoch,train_loss,test_loss,test_accuracy,steps_per_sec,epoch_seconds\n";
  // Sync: a global step takes N batches, so an epoch has steps_per_epoch / N of them.
  const int64_t epoch_steps = o.async ? steps_per_epoch : std::max<int64_t>(1, steps_per_epoch / o.workers);
  const int64_t total_steps = o.epochs * epoch_steps;
  if (!o.json)
    std::printf("training %s with %d %s workers (%d backup) on %d tasks, %lld examples, batch %lld, "
                "%lld steps per epoch; run folder %s\n",
                o.model.model.c_str(), o.workers, mode.c_str(), o.async ? 0 : o.backup_workers, tasks,
                (long long)o.n_train, (long long)o.batch, (long long)epoch_steps, run_dir.c_str());

  Series train_curve{"train loss", {}, {}}, test_curve{"test loss", {}, {}}, acc_curve{"test accuracy", {}, {}};
  std::vector<double> epoch_secs;
  double total_secs = 0, last_acc = 0;
  FirstError error;
  for (int64_t epoch = 1; epoch <= o.epochs; ++epoch) {
    const int64_t begin = base_step + (epoch - 1) * epoch_steps, end = base_step + epoch * epoch_steps;
    std::atomic<int64_t> next_async{begin};  // --async: the next update's number
    std::mutex loss_mu;
    double loss_sum = 0;  // GUARDED_BY(loss_mu)
    int64_t losses = 0;   // GUARDED_BY(loss_mu)
    auto run_worker = [&](int w) {
      Worker& wk = *workers[w];
      std::iota(wk.order.begin(), wk.order.end(), 0);
      std::seed_seq seed{static_cast<uint64_t>(o.model.seed), static_cast<uint64_t>(epoch),
                         static_cast<uint64_t>(w) + 1};
      std::mt19937_64 rng(seed);
      std::shuffle(wk.order.begin(), wk.order.end(), rng);
      Tensor xb, yb;
      for (int64_t k = 0; !error.failed(); ++k) {
        int64_t t = 0;  // the step (sync: the token) this gradient is for
        if (o.async) {
          t = next_async.fetch_add(1);
        } else {
          auto tok = wk.session->Run({}, {wk.sync.global_step});
          if (!tok.ok()) return error.Set(tok.status().WithPrefix("worker " + std::to_string(w)));
          t = (*tok)[0].data<int64_t>()[0];
        }
        if (t >= end) return;
        MakeBatch(train, wk.order, (k % steps_per_epoch) * o.batch, o.batch, &xb, &yb);
        FeedMap feeds{{"x", xb}, {"labels", yb},
                      {"lr", Tensor::Scalar<float>(static_cast<float>(
                                 LearningRateAt(o.model.learning_rate, t - base_step, total_steps)))}};
        if (!o.async) feeds.emplace_back(wk.sync.step_tag.name(), Tensor::Scalar<int64_t>(t));
        const RunOptions ro = w == 0 && o.trace ? o.trace->For(k) : RunOptions{};
        auto r = wk.session->Run(feeds, {wk.m.loss}, {o.async ? wk.async_train : wk.sync.train_op}, ro);
        if (!r.ok()) return error.Set(r.status().WithPrefix("worker " + std::to_string(w)));
        std::lock_guard<std::mutex> l(loss_mu);
        loss_sum += (*r)[0].scalar_as<double>();
        ++losses;
      }
    };
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int w = 0; w < n_workers; ++w) threads.emplace_back(run_worker, w);
    for (auto& t : threads) t.join();
    if (error.failed()) return Fail(error.status());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double acc = 0, test_loss = 0;
    if (Status s = EvaluateClassifier(**evaluator, em, test, &acc, &test_loss); !s.ok()) return Fail(s);
    const double train_loss = losses > 0 ? loss_sum / losses : 0.0, sps = epoch_steps / secs;
    total_secs += secs;
    epoch_secs.push_back(secs);
    last_acc = acc;
    csv << epoch << "," << train_loss << "," << test_loss << "," << acc << "," << sps << "," << secs << "\n";
    csv.flush();
    train_curve.x.push_back(epoch); train_curve.y.push_back(train_loss);
    test_curve.x.push_back(epoch); test_curve.y.push_back(test_loss);
    acc_curve.x.push_back(epoch); acc_curve.y.push_back(acc);
    if (o.json) {
      JsonLine().Add("epoch", epoch).Add("train_loss", train_loss).Add("test_loss", test_loss)
          .Add("test_accuracy", acc).Add("steps_per_sec", sps).Add("epoch_seconds", secs).Print();
    } else {
      std::printf("epoch %lld: train loss %.4f, test loss %.4f, test accuracy %.4f, %.1f steps/s, %.1f s\n",
                  (long long)epoch, train_loss, test_loss, acc, sps, secs);
    }
  }
  Status ps = WriteSvgPlot(run_dir + "/curves.svg",
                           {Panel{"loss", "epoch", {train_curve, test_curve}},
                            Panel{"test accuracy", "epoch", {acc_curve}}});
  if (!ps.ok()) return Fail(ps);

  auto st = (*evaluator)->Run({}, stats);
  if (!st.ok()) return Fail(st.status());
  const double sps = total_secs > 0 ? total_steps / total_secs : 0.0;
  JsonLine line;
  line.Add("model", o.model.model).Add("epochs", o.epochs).Add("test_accuracy", last_acc)
      .Add("train_steps_per_sec", sps).Add("epoch_seconds", epoch_secs)
      .Add("workers", o.workers).Add("backup_workers", o.async ? 0 : o.backup_workers)
      .Add("mode", mode).Add("tasks", tasks);
  if (o.async) {
    // Every variable records its own staleness: combine them. Each update
    // touches every variable, so the first one counts the updates.
    // The max cannot be taken relative to an earlier run: it is since the
    // variables' creation.
    const int64_t updates = static_cast<int64_t>((*st)[0].data<double>()[0] - (*before)[0].data<double>()[0]);
    double count = 0, weighted = 0, max = 0;
    for (size_t i = 0; i < st->size(); ++i) {
      const double* v = (*st)[i].data<double>();
      const double* b = (*before)[i].data<double>();
      count += v[0] - b[0];
      weighted += v[0] * v[1] - b[0] * b[1];
      max = std::max(max, v[2]);
    }
    const double mean = count > 0 ? weighted / count : 0.0;
    line.Add("applied_updates", updates).Add("staleness_mean", mean).Add("staleness_max", max);
    if (!o.json)
      std::printf("final test accuracy %.4f (%.1f updates/s); %lld updates, staleness mean %.2f, max %.0f\n",
                  last_acc, sps, (long long)updates, mean, max);
  } else {
    // The first variable's counters: every variable counts the same steps.
    const int64_t* now = (*st)[0].data<int64_t>();
    const int64_t* b = (*before)[0].data<int64_t>();
    const int64_t c[3] = {now[0] - b[0], now[1] - b[1], now[2] - b[2]};
    line.Add("applied_steps", c[0]).Add("accepted_gradients", c[1]).Add("dropped_gradients", c[2]);
    if (!o.json)
      std::printf("final test accuracy %.4f (%.1f steps/s); %lld steps applied, %lld gradients accepted, "
                  "%lld dropped\n", last_acc, sps, (long long)c[0], (long long)c[1], (long long)c[2]);
  }
  if (o.json) line.Print();
  else std::printf("metrics in %s/metrics.csv, plot in %s/curves.svg\n", run_dir.c_str(), run_dir.c_str());
  return 0;
}

}  // namespace sf::examples
