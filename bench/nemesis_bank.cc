// nemesis_bank: no acknowledged update lost or applied twice while a
// nemesis kills, hangs, drains and adds nodes (issue 35's acceptance run).
//
// A cluster of `shardflow node` processes with --replicas 2 (LocalCluster,
// etcd on 127.0.0.1) and W workers, each its own ClusterSession (between-
// graph replication) on the same variables: a counter table whose rows count
// their increments (each step adds +1 to K random rows: the rows' sum of a
// lookup, descended by plain SGD at rate 1) and an Adagrad embedding beside
// it. Each worker logs the increments of the steps the cluster acknowledged
// (and, apart, those of steps that failed: they may or may not have applied).
// Every 2 to 5 s, once every slot has a synced backup again, the nemesis
// does one of: SIGKILL a node and start a new one; SIGSTOP one past its
// lease, then SIGCONT it; drain one and start a new one; add one.
//
// At the end it reads the table and compares every row with the log:
//   lost     increments acknowledged but not in the table
//   doubled  increments in the table beyond the acknowledged ones and those
//            of failed steps
// --json prints one line per fault {"fault", "node", "at_seconds"} and last
// the summary {"seconds", "nodes", "workers", "steps", "failed_steps",
// "retried_steps", "faults", "acked_increments", "counted_increments",
// "lost", "doubled", "replica_differences", "replica_variables",
// "replica_unsynced"}: after the run quiesced and the backups were synced
// again (30 s at most), the variables whose backup differs from its
// holder's, bit for bit (ClusterSession::CompareReplicas), how many were
// compared, and the slots whose backup was still being copied (not
// compared). Exit status 1 when lost, doubled or replica_differences is not 0.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"

using namespace sf;
using namespace sf::examples;

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Config {
  int64_t seconds = 60, nodes = 3, workers = 4, tasks = 4, rows = 1000, k = 8, shards = 4;
  uint32_t seed = 1;
  bool json = false;
};

// The workers' graph: the counter table and the Adagrad embedding.
struct Bank {
  Graph g;
  EmbeddingTable counts, emb;
  Operation train, init;
  std::vector<Output> shards;  // the counter's shard values
  explicit Bank(const Config& c) {
    auto ids = ops::Placeholder(g, DType::kInt64, {c.k, 1}, "ids");
    EmbeddingTableOptions co;
    co.num_shards = c.shards;
    co.initializer = "zeros";
    counts = NewEmbeddingTable(g, "counts", c.rows, 1, co);
    EmbeddingTableOptions eo;
    eo.num_shards = c.shards;
    eo.seed = 5;
    emb = NewEmbeddingTable(g, "emb", c.rows, 8, eo);
    // d(-sum)/d(row) = -1 per occurrence: SGD at rate 1 adds one.
    auto count_loss = ops::Neg(g, ops::Sum(g, ops::EmbeddingLookup(g, counts, ids, "sum")));
    auto e = ops::EmbeddingLookup(g, emb, ids, "sum");
    auto emb_loss = ops::Mean(g, e * e);
    std::vector<Output> count_vars(counts.shards.begin(), counts.shards.end());
    std::vector<Output> emb_vars(emb.shards.begin(), emb.shards.end());
    auto t1 = GradientDescentOptimizer(1.0).Minimize(g, count_loss, count_vars);
    auto t2 = AdagradOptimizer(0.1).Minimize(g, emb_loss, emb_vars);
    if (!t1.ok() || !t2.ok()) return;
    train = ops::NoOp(g, {*t1, *t2}, "train");
    init = ops::GlobalVariablesInitializer(g);
    for (const Output& s : counts.shards) shards.push_back(ops::ReadVariable(g, s, DType::kFloat32));
  }
};

bool WaitBackedUp(const LocalCluster& cluster, int slots, double timeout_s) {
  return cluster.WaitBackups(slots, static_cast<int>(timeout_s * 1000)).ok();
}

struct Log {
  std::mutex mu;
  std::vector<int64_t> acked, maybe;
  int64_t steps = 0, failed = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("seconds", 60, "how long the workers train under the nemesis")
      .Int("nodes", 3, "node processes (kept at this many)").Int("workers", 4, "worker sessions")
      .Int("tasks", 4, "logical tasks (map slots) the graph is placed over").Int("rows", 1000, "counter rows")
      .Int("k", 8, "rows incremented per step").Int("seed", 1, "the nemesis' and workers' seed")
      .Bool("json", "print JSON lines; the last is the summary");
  ParseOrExit(flags, argc, argv, "nemesis_bank");
  Config c;
  c.seconds = flags.GetInt("seconds");
  c.nodes = flags.GetInt("nodes");
  c.workers = flags.GetInt("workers");
  c.tasks = flags.GetInt("tasks");
  c.rows = flags.GetInt("rows");
  c.k = flags.GetInt("k");
  c.seed = static_cast<uint32_t>(flags.GetInt("seed"));
  c.json = flags.GetBool("json");
  c.shards = c.tasks;
  if (c.seconds < 1 || c.nodes < 3 || c.workers < 1 || c.tasks < 1 || c.rows < c.tasks || c.k < 1) {
    std::fprintf(stderr, "nemesis_bank: needs --seconds >= 1, --nodes >= 3, --workers >= 1, --tasks >= 1, "
                         "--rows >= --tasks, --k >= 1\n");
    return 2;
  }
  Bank bank(c);
  if (!bank.g.status().ok()) {
    std::fprintf(stderr, "nemesis_bank: %s\n", bank.g.status().ToString().c_str());
    return 1;
  }
  LocalCluster cluster;
  cluster.SetReplicas(2);
  if (Status s = cluster.Start(static_cast<int>(c.nodes), static_cast<double>(c.seconds) + 300); !s.ok()) {
    std::fprintf(stderr, "nemesis_bank: %s\n", s.ToString().c_str());
    return 1;
  }
  if (!WaitBackedUp(cluster, static_cast<int>(c.tasks), 30)) {
    std::fprintf(stderr, "nemesis_bank: the slots got no synced backups within 30 s\n");
    return 1;
  }
  auto connect = [&]() {
    ClusterOptions o;
    o.address = cluster.addresses()[0];
    o.tls_dir = cluster.tls_dir();
    o.tasks = static_cast<int>(c.tasks);
    return ClusterSession::Connect(bank.g, o);
  };
  std::vector<std::unique_ptr<ClusterSession>> sessions;
  for (int64_t w = 0; w < c.workers; ++w) {
    auto s = connect();
    if (!s.ok()) {
      std::fprintf(stderr, "nemesis_bank: worker %lld: %s\n", static_cast<long long>(w), s.status().ToString().c_str());
      return 1;
    }
    sessions.push_back(std::move(*s));
  }
  if (Status s = sessions[0]->Run({}, std::vector<Output>{}, {bank.init}).status(); !s.ok()) {
    std::fprintf(stderr, "nemesis_bank: initialising: %s\n", s.ToString().c_str());
    return 1;
  }

  Log log;
  log.acked.assign(static_cast<size_t>(c.rows), 0);
  log.maybe.assign(static_cast<size_t>(c.rows), 0);
  std::atomic<bool> stop_training{false};
  const auto t0 = Clock::now();
  std::vector<std::thread> workers;
  for (int64_t w = 0; w < c.workers; ++w) {
    workers.emplace_back([&, w] {
      std::mt19937_64 rng(c.seed * 1000003ull + static_cast<uint64_t>(w));
      std::uniform_int_distribution<int64_t> row(0, c.rows - 1);
      while (!stop_training) {
        std::vector<int64_t> ids(static_cast<size_t>(c.k));
        for (auto& id : ids) id = row(rng);
        auto r = sessions[static_cast<size_t>(w)]->Run({{"ids", Tensor::FromVector(ids, {c.k, 1})}},
                                                        std::vector<Output>{}, {bank.train});
        std::lock_guard<std::mutex> l(log.mu);
        ++log.steps;
        if (!r.ok() && ++log.failed <= 5)
          std::fprintf(stderr, "nemesis_bank: worker %lld: a step failed: %s\n", static_cast<long long>(w),
                       r.status().ToString().c_str());
        for (int64_t id : ids) ++(r.ok() ? log.acked : log.maybe)[static_cast<size_t>(id)];
      }
    });
  }

  // The nemesis: on this (main) thread, which started the nodes and so
  // outlives every one it adds (a node dies with its starting thread).
  std::mt19937 rng(c.seed);
  int faults = 0;
  std::vector<int> alive;
  for (int i = 0; i < static_cast<int>(c.nodes); ++i) alive.push_back(i);
  auto fault_line = [&](const std::string& fault, const std::string& node) {
    ++faults;
    if (c.json)
      std::printf("%s\n", JsonLine().Add("fault", fault).Add("node", node).Add("at_seconds", SecondsSince(t0)).str().c_str());
    else
      std::printf("%7.2f s  %-5s %s\n", SecondsSince(t0), fault.c_str(), node.c_str());
    std::fflush(stdout);
  };
  auto add = [&]() {
    auto a = cluster.AddNode(static_cast<double>(c.seconds) + 300);
    if (a.ok()) alive.push_back(static_cast<int>(cluster.addresses().size()) - 1);
    return a;
  };
  while (SecondsSince(t0) < static_cast<double>(c.seconds)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(2000, 5000)(rng)));
    if (SecondsSince(t0) >= static_cast<double>(c.seconds)) break;
    // One failure at a time: replication 2 survives any single one.
    if (!WaitBackedUp(cluster, static_cast<int>(c.tasks), 30)) {
      std::fprintf(stderr, "nemesis_bank: the slots got no synced backups again within 30 s\n");
      break;
    }
    const size_t pick = std::uniform_int_distribution<size_t>(0, alive.size() - 1)(rng);
    const int victim = alive[pick];
    const std::string addr = cluster.addresses()[static_cast<size_t>(victim)];
    switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
      case 0:
        alive.erase(alive.begin() + static_cast<long>(pick));
        cluster.Kill(victim);
        fault_line("kill", addr);
        (void)add();
        break;
      case 1:
        ::kill(cluster.pid(victim), SIGSTOP);
        fault_line("stop", addr);
        std::this_thread::sleep_for(std::chrono::milliseconds(3500));  // past its lease and stall threshold
        ::kill(cluster.pid(victim), SIGCONT);
        break;
      case 2:
        if (DrainMember(cluster.etcd_endpoint(), cluster.tls_dir(), addr, 0, "default", "", cluster.insecure()).ok()) {
          alive.erase(alive.begin() + static_cast<long>(pick));
          fault_line("drain", addr);
          (void)add();
        }
        break;
      default:
        if (alive.size() < static_cast<size_t>(c.nodes) + 1) {
          auto a = add();
          if (a.ok()) fault_line("add", *a);
        }
        break;
    }
  }
  stop_training = true;
  for (auto& t : workers) t.join();
  const double seconds = SecondsSince(t0);
  (void)WaitBackedUp(cluster, static_cast<int>(c.tasks), 30);
  auto values = sessions[0]->Run({}, bank.shards);
  if (!values.ok()) {
    std::fprintf(stderr, "nemesis_bank: reading the counter table: %s\n", values.status().ToString().c_str());
    return 1;
  }
  // "mod" partition: row r is row r / K of shard r % K.
  int64_t acked = 0, counted = 0, lost = 0, doubled = 0;
  for (int64_t r = 0; r < c.rows; ++r) {
    const Tensor& shard = (*values)[static_cast<size_t>(r % c.shards)];
    const auto v = static_cast<int64_t>(std::llround(shard.data<float>()[r / c.shards]));
    const int64_t a = log.acked[static_cast<size_t>(r)], m = log.maybe[static_cast<size_t>(r)];
    acked += a;
    counted += v;
    lost += std::max<int64_t>(0, a - v);
    doubled += std::max<int64_t>(0, v - a - m);
  }
  int64_t retried = 0;
  for (const auto& s : sessions) retried += s->retried_steps();
  int64_t differences = -1, compared = 0, unsynced = 0;
  if (auto map = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir()); map.ok()) {
    auto cmp = sessions[0]->CompareReplicas(*map);
    if (cmp.ok()) {
      differences = static_cast<int64_t>(cmp->differences.size());
      unsynced = static_cast<int64_t>(cmp->unsynced.size());
      compared = cmp->variables;
      for (const auto& d : cmp->differences) std::fprintf(stderr, "nemesis_bank: replicas differ: %s\n", d.c_str());
      for (int t : cmp->unsynced) std::fprintf(stderr, "nemesis_bank: slot %d's backup is not synced\n", t);
    } else {
      std::fprintf(stderr, "nemesis_bank: comparing replicas: %s\n", cmp.status().ToString().c_str());
    }
  }
  JsonLine summary;
  summary.Add("seconds", seconds).Add("nodes", c.nodes).Add("workers", c.workers).Add("steps", log.steps)
      .Add("failed_steps", log.failed).Add("retried_steps", retried).Add("faults", static_cast<int64_t>(faults))
      .Add("acked_increments", acked).Add("counted_increments", counted).Add("lost", lost).Add("doubled", doubled)
      .Add("replica_differences", differences).Add("replica_variables", compared).Add("replica_unsynced", unsynced);
  std::printf("%s\n", summary.str().c_str());
  return lost == 0 && doubled == 0 && differences == 0 ? 0 : 1;
}
