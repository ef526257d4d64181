// SharedInputRun: two workers training from shared Criteo files on a local
// cluster (tests/cluster/chunk_queue*_test.cc), for tests that move, add or
// kill nodes under them and then check that every line was trained once.
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/local_cluster.h"
#include "kernels/criteo_format.h"
#include "shardflow/chunk_queue_ops.h"
#include "shardflow/cluster.h"
#include "shardflow/queue_runner.h"
#include "tests/support/criteo_files.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

namespace sf::testing {

// One worker: its graph, shared input, session, input runner and training thread.
struct SharedInputWorker {
  Graph g;
  ops::SharedCriteoInput in;
  std::unique_ptr<ClusterSession> session;
  std::unique_ptr<QueueRunner> runner;
  std::thread thread;
  int64_t steps = 0;
  Status error;
};

// Two workers (tasks 0 and 1, the chunk queue on task 0) training from
// shared Criteo files on a cluster, counting the lines each accepted
// report trained; a refused report (the worker's chunk went back) drops
// its batch, as DLRM does.
class SharedInputRun {
 public:
  static constexpr int kWorkers = 2;

  // Six files of lines_per_file lines each in a new temporary directory.
  explicit SharedInputRun(const std::string& tag, int lines_per_file = 1000) : dir_(tag) {
    for (int f = 0; f < 6; ++f) {
      std::string text;
      for (int i = 0; i < lines_per_file; ++i) text += CriteoLine(total_++) + "\n";
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
      auto wk = std::make_unique<SharedInputWorker>();
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

  // Waits until the workers made 20 steps, and requires the input to last
  // past them (the change a test makes next comes mid-epoch).
  void WaitMidEpoch() {
    REQUIRE(WaitFor([&] { return steps() >= 20 || finished(); }, 60000));
    REQUIRE(!finished());
  }

  // Waits up to timeout_ms for done(); its last answer.
  static bool WaitFor(const std::function<bool()>& done, int timeout_ms) {
    return testing::WaitFor(done, std::chrono::milliseconds(timeout_ms), std::chrono::milliseconds(20));
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
      SharedInputWorker& wk = *workers_[static_cast<size_t>(w)];
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
  void Train(SharedInputWorker& wk) {
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
  std::vector<std::unique_ptr<SharedInputWorker>> workers_;
  std::mutex mu_;
  std::map<int64_t, int> trained_;  // GUARDED_BY(mu_): line -> times
  std::atomic<int64_t> steps_{0}, lost_{0}, moved_{0}, unsure_rows_{0};
  std::atomic<int> finished_{0};
};

}  // namespace sf::testing
