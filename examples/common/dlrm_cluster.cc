// DLRM on a local cluster (examples/common/dlrm_cluster.h).
#include "examples/common/dlrm_cluster.h"

#include <atomic>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "examples/common/json.h"
#include "examples/common/local_cluster.h"
#include "shardflow/chunk_queue_ops.h"
#include "shardflow/cluster.h"
#include "shardflow/reader_ops.h"

namespace sf::examples {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxLostInARow = 1000;

struct Worker {
  Graph g;
  DlrmModel m;
  DlrmInput in, test;
  std::unique_ptr<ClusterSession> session;
  std::unique_ptr<DlrmTrainer> trainer;
  int64_t steps = 0, examples = 0, lost_batches = 0;
  double wait = 0;
  Status error;
};

// Builds worker w's graph: the model on its task, the shared input, and for
// worker 0 the held-out reader.
Status BuildWorker(const DlrmOptions& model, const DlrmInputOptions& io, const ops::CriteoChunkPlan& plan,
                   const std::vector<std::string>& test, const DlrmClusterOptions& o, int w, Worker* wk) {
  DlrmOptions mo = model;
  mo.tasks = o.nodes;
  mo.tower_device = "/job:worker/task:" + std::to_string(w % o.nodes);
  SF_RETURN_IF_ERROR(BuildDlrm(wk->g, mo, &wk->m));
  Output queue;
  {
    auto on = wk->g.DeviceScope("/job:worker/task:0");
    ops::ChunkQueueOptions qo;
    qo.num_epochs = io.epochs;
    qo.lease_ms = o.lease_ms;
    queue = ops::ChunkQueue(wk->g, plan.num_chunks(), qo, "dlrm_chunks");
  }
  auto tower = wk->g.DeviceScope(mo.tower_device);
  SF_ASSIGN_OR_RETURN(wk->in, AddSharedDlrmInput(wk->g, wk->m, queue, plan, io, /*worker=*/w + 1, "train_input"));
  if (w == 0) {
    DlrmInputOptions to = io;
    to.epochs = 1;
    to.queue = false;
    to.batch = 8192;
    SF_ASSIGN_OR_RETURN(wk->test, AddDlrmInput(wk->g, test, to, "test_input"));
  }
  return wk->g.status();
}

// paths relative to dir; InvalidArgument naming a path outside it.
Result<std::vector<std::string>> RelativeTo(const std::string& dir, const std::vector<std::string>& paths) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    const std::string r = fs::relative(fs::absolute(p, ec), fs::absolute(dir, ec), ec).string();
    if (ec || r.empty() || r.rfind("..", 0) == 0)
      return InvalidArgument("'" + p + "' is not under the data directory '" + dir + "' the nodes read from");
    out.push_back(r);
  }
  return out;
}

}  // namespace

Result<DlrmClusterResult> TrainDlrmOnCluster(const DlrmOptions& model, const DlrmInputOptions& io,
                                             const std::vector<std::string>& train,
                                             const std::vector<std::string>& test, const DlrmClusterOptions& o) {
  if (o.nodes < 1 || o.workers < 1)
    return InvalidArgument("--nodes and --workers must be at least 1, got " + std::to_string(o.nodes) + " and " +
                           std::to_string(o.workers));
  // Planned here from the files' sizes; the nodes read them under --data-dir.
  SF_ASSIGN_OR_RETURN(ops::CriteoChunkPlan plan, ops::PlanCriteoChunks(train, o.chunk_bytes));
  SF_ASSIGN_OR_RETURN(plan.files, RelativeTo(o.data_dir, plan.files));
  SF_ASSIGN_OR_RETURN(std::vector<std::string> test_files, RelativeTo(o.data_dir, test));
  LocalCluster cluster;
  // One replica of each slot: this example measures training, not failover.
  cluster.SetReplicas(1);
  cluster.SetNodeArgs({"--data-dir", o.data_dir});
  SF_RETURN_IF_ERROR(cluster.Start(o.nodes, 3600));
  ClusterOptions co;
  co.address = cluster.addresses()[0];
  co.tls_dir = cluster.tls_dir();
  co.tasks = o.nodes;
  // Nodes, workers and this client share few cores: a second of silence is
  // not yet a dead peer.
  co.peer_timeout_ms = 5000;

  std::vector<std::unique_ptr<Worker>> workers;
  for (int w = 0; w < o.workers; ++w) {
    auto wk = std::make_unique<Worker>();
    Status s = BuildWorker(model, io, plan, test_files, o, w, wk.get());
    if (!s.ok()) return s.WithPrefix("worker " + std::to_string(w));
    SF_ASSIGN_OR_RETURN(wk->session, ClusterSession::Connect(wk->g, co));
    workers.push_back(std::move(wk));
  }
  if (auto r = workers[0]->session->Run({}, {}, {workers[0]->m.init}); !r.ok())
    return r.status().WithPrefix("initialising");

  std::atomic<int64_t> steps{0};
  std::mutex mu;
  double loss_sum = 0, final_loss = 0;  // GUARDED_BY(mu)
  int64_t loss_n = 0;                   // GUARDED_BY(mu)
  const auto t0 = Clock::now();
  auto run = [&](Worker* wk) {
    wk->trainer = std::make_unique<DlrmTrainer>(*wk->session, wk->m, wk->in);
    wk->error = wk->trainer->Start();
    int64_t lost_in_a_row = 0;
    while (wk->error.ok() && (o.max_steps == 0 || steps.load() < o.max_steps)) {
      auto r = wk->trainer->Step();
      if (ops::IsLostChunk(r.status())) {
        ++wk->lost_batches;  // its rows are another worker's now; nothing was applied
        // Draining a lost chunk costs tens of batches; this many in a row is
        // a lease shorter than a step, every batch lost before it trains.
        if (++lost_in_a_row < kMaxLostInARow) continue;
        wk->error = r.status().WithPrefix("no batch trained in " + std::to_string(kMaxLostInARow) +
                                          " steps, each lost with its chunk's lease (raise --lease-ms)");
        break;
      }
      lost_in_a_row = 0;
      if (!r.ok()) {
        if (r.status().code() != Code::kOutOfRange) wk->error = r.status();
        break;
      }
      ++wk->steps;
      wk->examples += r->rows;
      wk->wait += r->wait_secs;
      const int64_t done = ++steps;
      std::lock_guard<std::mutex> l(mu);
      loss_sum += r->loss;
      ++loss_n;
      if (done % o.log_every == 0) {
        final_loss = loss_sum / loss_n;
        loss_sum = 0;
        loss_n = 0;
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        if (o.json) JsonLine().Add("step", done).Add("loss", final_loss).Add("secs", secs).Print();
        else std::printf("step %lld: loss %.4f (%.1f s)\n", (long long)done, final_loss, secs);
      }
    }
    // A worker stopping before the input ends (--steps) hands its chunks on,
    // before its runner stops too: the runner's Take may wait for a chunk
    // another stopping worker holds. What its last Take got goes after.
    Status released = wk->trainer->Release().status();
    Status stopped = wk->trainer->Stop();
    if (released.ok()) released = wk->trainer->Release().status();
    if (wk->error.ok()) wk->error = !stopped.ok() ? stopped : released;
  };
  std::vector<std::thread> threads;
  for (auto& wk : workers) threads.emplace_back(run, wk.get());
  // A node joins mid-run, as an operator adds one: the sessions follow the
  // new map while their input waits on full row queues.
  std::atomic<bool> training{true};
  std::atomic<int64_t> joined_at{-1};
  Status added;
  std::thread adder;
  if (o.add_node_at > 0)
    adder = std::thread([&] {
      while (training.load() && steps.load() < o.add_node_at) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      if (!training.load()) return;
      auto a = cluster.AddNode(3600);
      if (a.ok()) added = cluster.WaitMembers(o.nodes + 1, 60000);
      else added = a.status();
      if (!added.ok()) return;
      joined_at = steps.load();
      if (o.json) JsonLine().Add("event", "node_added").Add("address", *a).Add("step", joined_at.load()).Print();
      else std::printf("node %s joined at step %lld\n", a->c_str(), (long long)joined_at.load());
    });
  for (auto& t : threads) t.join();
  training = false;
  if (adder.joinable()) adder.join();
  if (!added.ok()) return added.WithPrefix("adding a node");
  DlrmClusterResult res;
  res.train_secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (joined_at.load() >= 0) {
    res.nodes_added = 1;
    res.steps_after_add = steps.load() - joined_at.load();
  }
  for (size_t w = 0; w < workers.size(); ++w) {
    if (!workers[w]->error.ok()) return workers[w]->error.WithPrefix("worker " + std::to_string(w));
    res.steps += workers[w]->steps;
    res.examples += workers[w]->examples;
    res.input_wait_secs += workers[w]->wait;
    res.lost_batches += workers[w]->lost_batches;
  }
  res.final_loss = loss_n > 0 ? loss_sum / loss_n : final_loss;
  res.chunks = plan.num_chunks();
  Worker& first = *workers[0];
  SF_ASSIGN_OR_RETURN(res.eval, EvaluateDlrm(*first.session, first.m, first.test));
  auto metrics = first.session->Run({}, first.m.metrics);
  if (!metrics.ok()) return metrics.status().WithPrefix("reading the table's metrics");
  SF_ASSIGN_OR_RETURN(res.table, SumDlrmMetrics(*metrics));
  for (auto& wk : workers) wk->trainer.reset();
  return res;
}

}  // namespace sf::examples
