// The paper's null-step microbenchmark (OSDI'16 section 6.2, figure 7):
// step time of a null training step when N workers share parameters held by
// 16 shards, on a local cluster of node processes.
//
// A worker's step reads every shard, does a trivial computation on its own
// task (the "gradient" is the read times zero), and sends an update of the
// same size back to every shard (AssignAdd where the shard lives). Workers
// run their steps together (synchronous: a step ends when every worker's
// has); each worker is its own ClusterSession (between-graph replication),
// pinned to task w % nodes. Parameters: a scalar per shard, or 100 MB dense
// split over the shards (6.25 MB each).
// Keys: workers, shards, bytes (total parameter bytes), step_ms (median),
// step_ms_p90, nodes. The paper's anchor: 1.8 ms for one worker and a
// scalar over 16 PS tasks.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "shardflow/ops.h"

using namespace sf;
using namespace sf::examples;

namespace {

void Die(const std::string& what) {
  std::fprintf(stderr, "bench_sync_step: %s\n", what.c_str());
  std::exit(1);
}

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::atoll(item.c_str()));
  return out;
}

// One worker's graph: the shards (placed round-robin over the tasks) and
// the worker's null step on its own task.
struct WorkerGraph {
  Graph g;
  Operation init;
  Operation step;
  Output fetch;
  WorkerGraph(int shards, int64_t elems_per_shard, int nodes, int worker) {
    std::vector<Output> handles, reads;
    for (int s = 0; s < shards; ++s) {
      auto d = g.DeviceScope("/job:worker/task:" + std::to_string(s % nodes));
      // Named by size too: the nodes keep variables between configurations.
      auto v = ops::Variable(g, "shard_" + std::to_string(elems_per_shard) + "_" + std::to_string(s),
                             ops::Zeros(g, DType::kFloat32, {elems_per_shard}));
      reads.push_back(v);
      handles.push_back(ops::VariableHandle(v));
    }
    init = ops::GlobalVariablesInitializer(g);
    std::vector<int> updates;
    std::vector<Output> sums, grads;
    {
      auto d = g.DeviceScope("/job:worker/task:" + std::to_string(worker % nodes));
      auto zero = ops::Const(g, 0.0f);
      for (int s = 0; s < shards; ++s) {
        grads.push_back(ops::Mul(g, reads[s], zero));  // the trivial computation
        sums.push_back(ops::Sum(g, grads.back(), {0}));
      }
      fetch = ops::AddN(g, sums);
    }
    // The updates run where their shard lives (colocated with its handle).
    for (int s = 0; s < shards; ++s) updates.push_back(ops::AssignAdd(g, handles[s], grads[s]).node);
    step = ops::NoOp(g, updates);
    if (!g.status().ok()) Die(g.status().ToString());
  }
};

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("nodes", 2, "node processes of the local cluster")
      .Int("shards", 16, "parameter shards")
      .String("workers", "1,2,4,8", "worker counts")
      .String("bytes", "4,100000000", "total parameter bytes (4 = one scalar per shard)")
      .Int("steps", 30, "timed steps per configuration (100 MB runs use a fifth)")
      .Bool("insecure", "nodes and sessions in plaintext (default: mutual TLS)")
      .Int("step-progress-timeout-ms", 60000, "ClusterOptions::step_progress_timeout_ms (0: no deadline)")
      .String("trace", "", "write the last timed step of the first configuration as Chrome trace-event JSON")
      .Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_sync_step");
  KeepTensorMemoryWarm();
  const bool json = flags.GetBool("json");
  const int nodes = static_cast<int>(flags.GetInt("nodes"));
  const int shards = static_cast<int>(flags.GetInt("shards"));

  LocalCluster cluster;
  cluster.SetInsecure(flags.GetBool("insecure"));
  Status st = cluster.Start(nodes, 3600);
  if (!st.ok()) Die(st.ToString());
  ClusterOptions co;
  co.address = cluster.addresses()[0];
  co.tls_dir = cluster.tls_dir();
  co.insecure = flags.GetBool("insecure");
  co.step_progress_timeout_ms = static_cast<int>(flags.GetInt("step-progress-timeout-ms"));

  double anchor_ms = 0;
  bool traced = flags.GetString("trace").empty();  // true once written (or not asked for)
  for (int64_t total : ParseList(flags.GetString("bytes"))) {
    const int64_t per_shard = total <= 4 ? 1 : std::max<int64_t>(1, total / 4 / shards);
    const int steps = total <= 4 ? static_cast<int>(flags.GetInt("steps"))
                                 : std::max<int>(3, static_cast<int>(flags.GetInt("steps")) / 5);
    for (int64_t workers : ParseList(flags.GetString("workers"))) {
      std::vector<std::unique_ptr<WorkerGraph>> graphs;
      std::vector<std::unique_ptr<ClusterSession>> sessions;
      for (int w = 0; w < workers; ++w) {
        graphs.push_back(std::make_unique<WorkerGraph>(shards, per_shard, nodes, w));
        auto s = ClusterSession::Connect(graphs.back()->g, co);
        if (!s.ok()) Die(s.status().ToString());
        sessions.push_back(std::move(*s));
      }
      auto r = sessions[0]->Run({}, Fetches{}, {graphs[0]->init});
      if (!r.ok()) Die(r.status().ToString());
      std::vector<double> times;
      for (int i = -2; i < steps; ++i) {  // two warm-up steps register the partitions
        RunOptions options;
        if (i == steps - 1 && !traced) options.trace_file = flags.GetString("trace");
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> threads;
        std::vector<Status> results(workers);
        auto run = [&](int w) {
          auto out = sessions[w]->Run({}, Fetches{graphs[w]->fetch}, {graphs[w]->step},
                                      w == 0 ? options : RunOptions());
          results[w] = out.status();
        };
        // Worker 0 steps on this thread: starting a thread is the bench's cost, not the step's.
        for (int w = 1; w < workers; ++w) threads.emplace_back(run, w);
        run(0);
        for (auto& t : threads) t.join();
        for (const Status& s : results)
          if (!s.ok()) Die(s.ToString());
        if (i >= 0) times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      traced = true;
      std::sort(times.begin(), times.end());
      const double median = times[times.size() / 2];
      const double p90 = times[std::min(times.size() - 1, times.size() * 9 / 10)];
      if (total <= 4 && workers == 1) anchor_ms = median;
      const int64_t bytes = per_shard * 4 * shards;
      if (json) {
        JsonLine().Add("workers", workers).Add("shards", shards).Add("bytes", bytes)
            .Add("step_ms", median).Add("step_ms_p90", p90).Add("nodes", nodes).Add("steps", steps).Print();
      } else {
        std::printf("%lld workers, %d shards, %12lld bytes: %9.3f ms median, %9.3f ms p90\n",
                    static_cast<long long>(workers), shards, static_cast<long long>(bytes), median, p90);
      }
    }
  }
  if (json) {
    JsonLine().Add("summary", true).Add("scalar_one_worker_step_ms", anchor_ms)
        .Add("paper_anchor_ms", 1.8).Add("nodes", nodes).Add("shards", shards).Print();
  } else {
    std::printf("one worker, scalar shards: %.3f ms (the paper: 1.8 ms)\n", anchor_ms);
  }
  return 0;
}
