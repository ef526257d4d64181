// A chunk queue's state moves with its slot: the node holding the queue's
// task (slot 0) drains, or is killed (its backup promoted), mid-epoch while
// two workers train; the queue goes on at the new holder from where it was
// (tickets the workers hold stay valid), so every line is trained exactly
// once and the workers finish. Before the queue's state was a variable of
// its slot, the new holder started the epoch again: lines trained twice.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "examples/common/local_cluster.h"
#include "kernels/criteo_format.h"
#include "shardflow/chunk_queue_ops.h"
#include "shardflow/cluster.h"
#include "shardflow/queue_runner.h"
#include "tests/support/criteo_files.h"
#include "tests/support/temp_dir.h"

using namespace sf;
using sf::testing::CriteoLine;
using sf::testing::TempDir;
using sf::testing::WriteFile;

namespace {

struct Worker {
  Graph g;
  ops::SharedCriteoInput in;
  std::unique_ptr<ClusterSession> session;
  std::unique_ptr<QueueRunner> runner;
  std::thread thread;
  int64_t steps = 0;
  Status error;
};

}  // namespace

namespace {

// Two workers (tasks 0 and 1, the chunk queue on task 0) training from
// shared Criteo files on a cluster, counting the lines each accepted
// report trained; a refused report (the worker's chunk went back) drops
// its batch, as DLRM does. (As tests/cluster/chunk_queue_cluster_test.cc's.)
class SharedInputRun {
 public:
  static constexpr int kWorkers = 2;

  explicit SharedInputRun(const std::string& tag) : dir_(tag) {
    for (int f = 0; f < 6; ++f) {
      std::string text;
      for (int i = 0; i < 1000; ++i) text += CriteoLine(total_++) + "\n";
      WriteFile(dir_ / ("part" + std::to_string(f) + ".tsv"), text);
      files_.push_back(dir_ / ("part" + std::to_string(f) + ".tsv"));
    }
    for (int64_t i = 0; i < total_; ++i) line_of_[CriteoCategoricalId(0, static_cast<uint64_t>(i))] = i;
  }
  const std::string& dir() const { return dir_.path; }

  // Builds the workers' graphs and sessions on cluster (connecting to
  // `address`) and starts them.
  void Start(examples::LocalCluster& cluster, const std::string& address) {
    auto plan = ops::PlanCriteoChunks(files_, 16000);
    REQUIRE(plan.ok());
    for (std::string& f : plan->files) f = std::filesystem::path(f).filename().string();
    ClusterOptions co;
    co.address = address;
    co.tls_dir = cluster.tls_dir();
    co.tasks = 2;
    co.peer_timeout_ms = 5000;
    for (int w = 0; w < kWorkers; ++w) {
      auto wk = std::make_unique<Worker>();
      Output q;
      {
        auto on = wk->g.DeviceScope("/job:worker/task:0");
        q = ops::ChunkQueue(wk->g, plan->num_chunks(), {/*num_epochs=*/1, /*lease_ms=*/30000}, "chunks");
      }
      auto on = wk->g.DeviceScope("/job:worker/task:" + std::to_string(w));
      // A small row queue: the enqueue step is waiting on it at any time.
      wk->in = ops::SharedCriteoBatchQueue(wk->g, q, *plan, CriteoReaderOptions{}, /*worker=*/10 + w, 16, 32, "input");
      REQUIRE(wk->g.status().ok());
      auto s = ClusterSession::Connect(wk->g, co);
      REQUIRE(s.ok());
      wk->session = std::move(*s);
      QueueRunnerOptions r;
      r.close_target = wk->in.close.name();
      r.cancel_target = wk->in.cancel.name();
      r.restart_target = wk->in.release.name();
      wk->runner = std::make_unique<QueueRunner>(*wk->session, std::vector<std::string>{wk->in.enqueue.name()},
                                                 nullptr, r);
      workers_.push_back(std::move(wk));
    }
    for (auto& w : workers_) {
      REQUIRE(w->runner->Start().ok());
      w->thread = std::thread([this, wk = w.get()] { Train(*wk); });
    }
  }

  int64_t steps() const { return steps_.load(); }
  int64_t unsure_rows() const { return unsure_rows_.load(); }
  bool finished() const { return finished_.load() == kWorkers; }
  int64_t restarts(int w) const { return workers_[static_cast<size_t>(w)]->runner->restarts(); }

  // Waits up to timeout_ms for done(); its last answer.
  static bool WaitFor(const std::function<bool()>& done, int timeout_ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!done() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return done();
  }

  // Checks that the workers go on after a change made at `at` steps and end
  // having trained every line once; a stalled run is ended by killing the
  // cluster's nodes.
  void CheckGoesOnAndTrainsEveryLineOnce(examples::LocalCluster& cluster, int64_t at) {
    const bool went_on = WaitFor([&] { return steps() >= at + 40 || finished(); }, 60000);
    CHECK(went_on);
    const bool ended = went_on && WaitFor([&] { return finished(); }, 120000);
    CHECK(ended);
    if (!ended)
      for (size_t i = 0; i < cluster.addresses().size(); ++i) cluster.Kill(static_cast<int>(i));
    for (int w = 0; w < kWorkers; ++w) {
      Worker& wk = *workers_[static_cast<size_t>(w)];
      wk.thread.join();
      INFO("worker " << w << ": " << wk.error.ToString());
      if (ended) CHECK(wk.error.ok());
      wk.runner->Stop();
      Status joined = wk.runner->Join();
      INFO("its runner: " << joined.ToString());
      if (ended) CHECK(joined.ok());
    }
    INFO("steps " << steps() << " (" << at << " at the change), " << lost_.load() << " batches lost, "
                  << unsure_rows_.load() << " rows of failed training steps");
    // Every line once, but for rows of training steps that failed with the queue's node.
    CHECK(trained_.size() <= static_cast<size_t>(total_));
    CHECK(static_cast<int64_t>(trained_.size()) + unsure_rows_.load() >= total_);
    int not_once = 0;
    for (const auto& [line, times] : trained_) not_once += times != 1;
    CHECK(not_once == 0);
  }

 private:
  void Train(Worker& wk) {
    for (;;) {
      auto b = wk.session->Run({}, Fetches{wk.in.categorical, wk.in.ticket, wk.in.pos});
      // A dequeue waiting at a moving slot's old holder ends as moved, having taken nothing;
      // one on a node that died took rows that died with its row queue (the
      // runner's restart hands their chunks back).
      if (!b.ok() && (IsStaleShardMap(b.status()) || b.status().code() == Code::kUnavailable) && ++moved_ < 100)
        continue;
      if (!b.ok()) {
        if (b.status().code() != Code::kOutOfRange) wk.error = b.status();
        break;
      }
      auto t = wk.session->Run({{wk.in.trained_ticket, (*b)[1]}, {wk.in.trained_pos, (*b)[2]}}, Fetches{},
                               {wk.in.trained});
      if (!t.ok() && t.status().code() == Code::kFailedPrecondition) {
        ++lost_;  // its chunk went back (a restart's release): others train these rows
        continue;
      }
      if (!t.ok() && (IsStaleShardMap(t.status()) || t.status().code() == Code::kUnavailable) && ++moved_ < 100) {
        // The step failed where the queue was (its node died): a report
        // the queue took before has its rows counted trained without this
        // batch (docs/CLUSTER.md), one it did not take sends them to others.
        unsure_rows_ += (*b)[0].shape()[0];
        continue;
      }
      if (!t.ok()) {
        wk.error = t.status();
        break;
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        const Tensor& ids = (*b)[0];
        for (int64_t row = 0; row < ids.shape()[0]; ++row)
          ++trained_[line_of_.at(ids.data<int64_t>()[row * kCriteoCategorical])];
      }
      ++wk.steps;
      ++steps_;
    }
    ++finished_;
  }

  TempDir dir_;
  int64_t total_ = 0;
  std::vector<std::string> files_;
  std::map<int64_t, int64_t> line_of_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::mutex mu_;
  std::map<int64_t, int> trained_;  // GUARDED_BY(mu_): line -> times
  std::atomic<int64_t> steps_{0}, lost_{0}, moved_{0}, unsure_rows_{0};
  std::atomic<int> finished_{0};
};

}  // namespace

namespace {

// The cluster's map once slot 0 has a synced backup (its state on a second node).
Result<ShardMapInfo> SyncedMap(examples::LocalCluster& cluster) {
  Result<ShardMapInfo> map = Unavailable("no map read");
  SharedInputRun::WaitFor(
      [&] {
        map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
        return map.ok() && map->holder.size() >= 2 && map->synced.size() >= 1 && map->synced[0] &&
               !map->holder[0].empty() && map->moving_from[0].empty();
      },
      60000);
  return map;
}

int IndexOf(const examples::LocalCluster& cluster, const std::string& address) {
  for (size_t i = 0; i < cluster.addresses().size(); ++i)
    if (cluster.addresses()[i] == address) return static_cast<int>(i);
  return -1;
}

// An address of the cluster other than `not_this` (the sessions' first contact).
std::string OtherThan(const examples::LocalCluster& cluster, const std::string& not_this) {
  for (const std::string& a : cluster.addresses())
    if (a != not_this) return a;
  return "";
}

}  // namespace

TEST_CASE("A chunk queue's state moves with its slot: the queue's node drains mid-epoch, every line trained once",
          "[cluster][chunk_queue][chunk_queue_move]") {
  SharedInputRun run("sf_chunk_move_drain");
  examples::LocalCluster cluster;
  cluster.SetReplicas(2);
  cluster.SetNodeArgs({"--data-dir", run.dir()});
  REQUIRE(cluster.Start(3, 180).ok());
  REQUIRE(cluster.WaitMembers(3, 30000).ok());
  auto before = SyncedMap(cluster);
  REQUIRE(before.ok());
  run.Start(cluster, OtherThan(cluster, before->holder[0]));
  REQUIRE(SharedInputRun::WaitFor([&] { return run.steps() >= 20 || run.finished(); }, 60000));
  REQUIRE(!run.finished());  // the input outlasts the move
  auto map = SyncedMap(cluster);
  REQUIRE(map.ok());
  const std::string from = map->holder[0];
  INFO("slot 0 on " << from << ", its backup " << map->backup[0]);
  REQUIRE(DrainMember(cluster.etcd_endpoint(), cluster.tls_dir(), from, 0, "default", "", cluster.insecure()).ok());
  run.CheckGoesOnAndTrainsEveryLineOnce(cluster, run.steps());
  auto after = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
  REQUIRE(after.ok());
  CHECK(after->holder[0] != from);  // the queue did move
  CHECK(run.unsure_rows() == 0);      // a handover fails no training step
}

TEST_CASE("A chunk queue's state survives its node's death: the backup goes on mid-epoch, every line trained once",
          "[cluster][chunk_queue][chunk_queue_move]") {
  SharedInputRun run("sf_chunk_move_kill");
  examples::LocalCluster cluster;
  cluster.SetReplicas(2);
  cluster.SetNodeArgs({"--data-dir", run.dir()});
  REQUIRE(cluster.Start(3, 180).ok());
  REQUIRE(cluster.WaitMembers(3, 30000).ok());
  auto before = SyncedMap(cluster);
  REQUIRE(before.ok());
  run.Start(cluster, OtherThan(cluster, before->holder[0]));
  REQUIRE(SharedInputRun::WaitFor([&] { return run.steps() >= 20 || run.finished(); }, 60000));
  REQUIRE(!run.finished());
  auto map = SyncedMap(cluster);
  REQUIRE(map.ok());
  const std::string from = map->holder[0];
  INFO("slot 0 on " << from << ", its backup " << map->backup[0]);
  const int victim = IndexOf(cluster, from);
  REQUIRE(victim >= 0);
  cluster.Kill(victim);
  run.CheckGoesOnAndTrainsEveryLineOnce(cluster, run.steps());
}
