// Training throughput of a sharded embedding model: a rows x 32 float table
// (10M rows by default) split over K shards, batches of 4096 examples x 8 ids
// drawn from Zipf(1.1) over the rows (ranks scattered by the fixed
// permutation rank * 2654435761 mod rows), sum combiner, a linear layer
// 32 -> 1, logistic loss, sparse SGD lr 0.1. One JSON line per shard count
// (keys shards, processes, examples_per_sec, lookups_per_sec, ms_per_step,
// and this process's cpu_ms_per_step and context_switches_per_step)
// and a summary line. bench/peers/embedding.py is the same workload in
// PyTorch; bench/compare_embedding runs both.
//
// RunEmbeddingBench takes a session factory: --processes 2 runs the same
// workload on a local cluster of two `shardflow node` processes (the shards
// spread over both, each lookup and sparse update on its shard's node).
// --trace FILE writes one step's timeline (the last shard count run wins).
// In one process the session has one CPU device by default, as a user's
// session does (the shards are still separate variable shards); --devices 0
// gives each shard its own device, whose partitions then trade the split ids,
// partials and gradients through the rendezvous (on 2 cores, 4 devices made
// the 4-shard step 1.0-1.15x the 1-shard step, one device 0.82-0.89x).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <random>

#include "bench/process_usage.h"
#include "bench/zipf_batches.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/local_cluster.h"
#include "examples/common/trace.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

struct BenchConfig {
  int64_t rows = 10'000'000, dim = 32, batch = 4096, ids_per_example = 8;
  int64_t steps = 30, warmup = 5, num_batches = 16;
  double zipf = 1.1;
};

struct BenchResult {
  double examples_per_sec = 0, lookups_per_sec = 0, ms_per_step = 0, init_secs = 0;
  double cpu_ms_per_step = 0, context_switches_per_step = 0;  // this process's (not the nodes')
};

// A session and, for cluster runs, the node processes it runs on (declared
// first, so they outlive the session).
struct Owned {
  std::unique_ptr<LocalCluster> cluster;
  std::unique_ptr<SessionInterface> session;
};
using SessionFactory = std::function<Result<Owned>(const Graph&, int shards)>;

// The shared workload (bench/zipf_batches.h).
void MakeBatches(const BenchConfig& c, std::vector<Tensor>* ids, std::vector<Tensor>* labels) {
  bench::MakeZipfBatches(c.rows, c.zipf, c.num_batches, c.batch, c.ids_per_example, ids, labels);
}

Result<BenchResult> RunEmbeddingBench(const BenchConfig& c, int shards, const SessionFactory& factory,
                                      const std::vector<Tensor>& ids, const std::vector<Tensor>& labels,
                                      const TraceFlag& trace) {
  Graph g;
  EmbeddingTableOptions o;
  o.num_shards = shards;
  o.seed = 1;
  auto table = NewEmbeddingTable(g, "table", c.rows, c.dim, o);
  auto x = ops::Placeholder(g, DType::kInt64, {c.batch, c.ids_per_example}, "ids");
  auto y = ops::Placeholder(g, DType::kFloat32, {c.batch, 1}, "labels");
  auto emb = ops::EmbeddingLookup(g, table, x, "sum");
  auto w = ops::Variable(g, "w", ops::RandomUniform(g, {c.dim, 1}, -0.1, 0.1, 2));
  auto b = ops::Variable(g, "b", ops::Zeros(g, DType::kFloat32, {1}));
  auto logits = ops::MatMul(g, emb, w) + b;
  // Logistic loss: softplus(z) - y z, averaged.
  auto loss = ops::Mean(g, ops::Softplus(g, logits) - y * logits);
  auto train = GradientDescentOptimizer(0.1).Minimize(g, loss);
  if (!train.ok()) return train.status();
  Operation init = ops::GlobalVariablesInitializer(g);
  SF_RETURN_IF_ERROR(g.status());
  SF_ASSIGN_OR_RETURN(Owned owned, factory(g, shards));
  SessionInterface* s = owned.session.get();
  auto t0 = std::chrono::steady_clock::now();
  auto ir = s->Run({}, Fetches{}, {init});
  if (!ir.ok()) return ir.status();
  BenchResult r;
  r.init_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t next = 0;
  auto step = [&]() -> Status {
    const size_t i = static_cast<size_t>(next++ % static_cast<int64_t>(ids.size()));
    auto res = s->Run({{"ids", ids[i]}, {"labels", labels[i]}}, Fetches{}, {*train}, trace.For(next - 1));
    return res.status();
  };
  for (int64_t i = 0; i < c.warmup; ++i) SF_RETURN_IF_ERROR(step());
  const bench::ProcessUsage used0 = bench::ReadProcessUsage();
  t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < c.steps; ++i) SF_RETURN_IF_ERROR(step());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bench::ProcessUsage used1 = bench::ReadProcessUsage();
  r.cpu_ms_per_step = 1000.0 * (used1.cpu_seconds - used0.cpu_seconds) / c.steps;
  r.context_switches_per_step = (used1.context_switches - used0.context_switches) / c.steps;
  r.ms_per_step = 1000.0 * secs / c.steps;
  r.examples_per_sec = c.batch * c.steps / secs;
  r.lookups_per_sec = r.examples_per_sec * c.ids_per_example;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("rows", 10'000'000, "table rows").Int("dim", 32, "embedding width")
      .Int("batch", 4096, "examples per batch").Int("ids", 8, "ids per example")
      .Int("steps", 30, "timed steps").Int("warmup", 5, "untimed steps")
      .String("shards", "1,2,4", "shard counts")
      .Int("devices", 1, "one process: num_cpu_devices (1: the session's default; 0: one per shard)")
      .String("processes", "1", "1: one process; 2: a local cluster of two node processes (e.g. 1,2)")
      .Bool("json", "print JSON lines");
  DeclareTraceFlags(flags);
  ParseOrExit(flags, argc, argv, "bench_embedding");
  const TraceFlag trace(flags);
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  BenchConfig c;
  c.rows = flags.GetInt("rows");
  c.dim = flags.GetInt("dim");
  c.batch = flags.GetInt("batch");
  c.ids_per_example = flags.GetInt("ids");
  c.steps = flags.GetInt("steps");
  c.warmup = flags.GetInt("warmup");
  std::vector<int> shard_counts;
  {
    std::string s = flags.GetString("shards");
    size_t pos = 0;
    while (pos <= s.size()) {
      size_t comma = s.find(',', pos);
      if (comma == std::string::npos) comma = s.size();
      if (comma > pos) shard_counts.push_back(std::atoi(s.substr(pos, comma - pos).c_str()));
      pos = comma + 1;
    }
  }
  std::vector<Tensor> ids, labels;
  MakeBatches(c, &ids, &labels);
  const bool json = flags.GetBool("json");
  const int devices = static_cast<int>(flags.GetInt("devices"));
  if (devices < 0) {
    std::fprintf(stderr, "bench_embedding: --devices must be >= 0, got %d\n", devices);
    return 2;
  }
  SessionFactory local = [devices](const Graph& g, int shards) -> Result<Owned> {
    SessionOptions so;
    so.num_cpu_devices = devices > 0 ? devices : shards;
    Owned o;
    o.session = std::make_unique<Session>(g, so);
    return o;
  };
  SessionFactory cluster = [](const Graph& g, int shards) -> Result<Owned> {
    Owned o;
    o.cluster = std::make_unique<LocalCluster>();
    SF_RETURN_IF_ERROR(o.cluster->Start(2, 3600));
    ClusterOptions co;
    co.address = o.cluster->addresses()[0];
    co.tls_dir = o.cluster->tls_dir();
    SF_ASSIGN_OR_RETURN(auto s, ClusterSession::Connect(g, co));
    o.session = std::move(s);
    return o;
  };
  std::vector<int> process_counts;
  for (char ch : flags.GetString("processes"))
    if (ch == '1' || ch == '2') process_counts.push_back(ch - '0');
  double best = 0;
  int best_shards = 0, best_processes = 1;
  for (int procs : process_counts)
  for (int k : shard_counts) {
    if (procs == 2 && k < 2) continue;  // one shard on two processes leaves one idle
    auto r = RunEmbeddingBench(c, k, procs == 1 ? local : cluster, ids, labels, trace);
    if (!r.ok()) {
      std::fprintf(stderr, "bench_embedding: %d shards: %s\n", k, r.status().ToString().c_str());
      return 1;
    }
    if (r->examples_per_sec > best) best = r->examples_per_sec, best_shards = k, best_processes = procs;
    if (json)
      JsonLine().Add("system", "shardflow").Add("shards", k).Add("processes", procs)
          .Add("devices", procs == 1 ? (devices > 0 ? devices : k) : 0).Add("rows", c.rows).Add("dim", c.dim).Add("batch", c.batch)
          .Add("examples_per_sec", r->examples_per_sec).Add("lookups_per_sec", r->lookups_per_sec)
          .Add("ms_per_step", r->ms_per_step).Add("cpu_ms_per_step", r->cpu_ms_per_step)
          .Add("context_switches_per_step", r->context_switches_per_step).Add("init_secs", r->init_secs).Print();
    else
      std::printf("%d process(es), %d shards: %.0f examples/s, %.0f lookups/s (%.2f ms/step; init %.1f s)\n", procs, k,
                  r->examples_per_sec, r->lookups_per_sec, r->ms_per_step, r->init_secs);
  }
  if (json)
    JsonLine().Add("system", "shardflow").Add("summary", true).Add("best_shards", best_shards)
        .Add("processes", best_processes).Add("examples_per_sec", best).Add("lookups_per_sec", best * c.ids_per_example)
        .Print();
  return 0;
}
