// Recovery time after a node kill, for the 10M-row embedding model: a
// rows x 32 float table in 6 shards with Adagrad (its accumulator as big as
// the table), batches of 4096 examples x 8 Zipf ids (the ids of
// bench_embedding), sum lookup, a linear layer, logistic loss; trained by a
// ClusterSession over 3 `shardflow node` processes and 6 logical tasks
// (shard k pinned to task k, so the bytes restored are known).
//
// It trains a few steps, saves a full checkpoint (ClusterSession::Save) to a
// temporary directory, trains a few more, SIGKILLs the member running task 1
// and measures:
//   detect      the kill until the next step returns its Unavailable error
//   restore     ClusterSession::Recover(false): the dead member's tasks move
//               to live members and their shards come back from the
//               checkpoint (the other shards keep their live state)
//   first_step  the first step after the recovery (registers the new
//               partitions)
//   recovery    detect + restore + first_step
//   member_gone the kill until etcd no longer lists the killed node (a peer
//               that loses its connection to it ends its lease); polled
//               every 5 ms after the detect step, so it is the time the first
//               listing without it came back (detect's time included)
// and last, after the recovery, one more node is started and SIGSTOPped:
//   hung_detect the SIGSTOP until etcd no longer lists it (its lease of 1 s
//               expires; nothing reports a hung node)
// Either fails the benchmark when etcd still lists the node after 10 s.
// --json prints one line per phase {"phase", "seconds", ...} and last the
// summary {"rows", "shards", "nodes", "detect_seconds", "restore_seconds",
// "first_step_seconds", "recovery_seconds", "variables_restored",
// "restored_mb", ..., "member_gone_seconds", "hung_detect_seconds"}
// (MB = 10^6 bytes).
//
// --replicas 2 measures failover instead (shardflow node --replicas 2): no
// checkpoint; 2 worker sessions train at once, each step also adding one to
// a step counter, while the node holding task 1 (primaries of the table's
// shards on it) is SIGKILLed, then, once every slot has a synced backup
// again, the node now holding task 1 is SIGSTOPped (and SIGCONTed after its
// backup took over). Its summary {"replicas", "rows", "dim", "nodes",
// "steps", "failed_steps", "retried_steps", "lost_updates" (steps
// acknowledged minus the counter), "steps_blocked_seconds" and
// "stop_blocked_seconds" (the longest time no step of either worker ended,
// around the kill and around the stop), "resync_seconds" (until every slot
// had a synced backup again after the kill)}.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "examples/common/checkpoint_dir.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/local_cluster.h"
#include "examples/common/zipf_clicks.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int Fail(const Status& s) {
  std::fprintf(stderr, "bench_recovery: %s\n", s.ToString().c_str());
  return 1;
}

struct Config {
  int64_t rows = 10'000'000, dim = 32, shards = 6, nodes = 3, tasks = 6, batch = 4096, ids = 8;
  int64_t steps = 5, after = 3, replicas = 1;
  bool json = false;
};

// Rows of shard k of a "mod"-partitioned table: ids k, k + K, k + 2K, ...
int64_t ShardRows(const Config& c, int64_t k) { return (c.rows - k + c.shards - 1) / c.shards; }

// How long etcd may go on listing a killed or hung node.
constexpr double kGoneDeadlineS = 10;

// Polls the cluster's etcd every 5 ms until it lists a member at address
// (listed) or no longer does (!listed); the seconds from t0 until the first
// listing that showed it came back. DeadlineExceeded naming `what` after
// deadline_s; etcd's error when it cannot be read.
Result<double> WaitListed(const LocalCluster& cluster, const std::string& address, bool listed,
                          Clock::time_point t0, double deadline_s, const std::string& what) {
  while (true) {
    auto members = ListEtcdMembers(cluster.etcd_endpoint(), cluster.tls_dir(), "default", "", cluster.insecure());
    if (!members.ok()) return members.status().WithPrefix("listing the members in etcd");
    bool found = false;
    for (const MemberInfo& m : *members) found = found || m.address == address;
    const double seconds = SecondsSince(t0);
    if (found == listed) return seconds;
    if (seconds > deadline_s)
      return DeadlineExceeded(what + ": etcd " + (listed ? "did not list " : "still listed ") + address + " after " +
                              std::to_string(seconds) + " s");
    ::usleep(5 * 1000);
  }
}

// Prints a phase line: {"phase", "seconds"} and the extra fields.
void Phase(const Config& c, const std::string& phase, double seconds, const JsonLine& extra = JsonLine()) {
  if (c.json) {
    // JsonLine prints "{...}": splice the extra fields in.
    std::string line = JsonLine().Add("phase", phase).Add("seconds", seconds).str();
    const std::string more = extra.str();
    if (more.size() > 2) line = line.substr(0, line.size() - 1) + ", " + more.substr(1);
    std::printf("%s\n", line.c_str());
  } else {
    const std::string more = extra.str();
    std::printf("%-11s %8.3f s  %s\n", phase.c_str(), seconds, more.size() > 2 ? more.c_str() : "");
  }
  std::fflush(stdout);
}

// Two workers train at once until `stop`; the times their steps ended.
struct Workers {
  std::mutex mu;
  std::vector<Clock::time_point> ends;
  int64_t acked = 0, failed = 0;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  // The longest time between two step ends in [from, to] (from and to
  // count as ends).
  double LongestGap(Clock::time_point from, Clock::time_point to) {
    std::lock_guard<std::mutex> l(mu);
    std::vector<Clock::time_point> t{from, to};
    for (auto e : ends)
      if (e > from && e < to) t.push_back(e);
    std::sort(t.begin(), t.end());
    double worst = 0;
    for (size_t i = 1; i < t.size(); ++i) worst = std::max(worst, std::chrono::duration<double>(t[i] - t[i - 1]).count());
    return worst;
  }
};

// --replicas 2: failover under training (see the header). The graph's
// `train` also adds one to `counter`.
int RunReplicated(const Config& c, Graph& g, Operation train, Output counter, const Operation& init,
                  const std::vector<Tensor>& batch_ids, const std::vector<Tensor>& batch_labels) {
  LocalCluster cluster;
  cluster.SetReplicas(2);
  auto t0 = Clock::now();
  Status st = cluster.Start(static_cast<int>(c.nodes), 3600);
  if (!st.ok()) return Fail(st);
  st = cluster.WaitBackups(static_cast<int>(c.tasks), 60000);
  if (!st.ok()) return Fail(st);
  Phase(c, "start", SecondsSince(t0), JsonLine().Add("nodes", c.nodes).Add("replicas", int64_t{2}));
  std::vector<std::unique_ptr<ClusterSession>> sessions;
  for (int w = 0; w < 2; ++w) {
    ClusterOptions co;
    co.address = cluster.addresses()[static_cast<size_t>(w)];
    co.tls_dir = cluster.tls_dir();
    co.tasks = static_cast<int>(c.tasks);
    co.request_timeout_ms = 300000;
    auto s = ClusterSession::Connect(g, co);
    if (!s.ok()) return Fail(s.status());
    sessions.push_back(std::move(*s));
  }
  t0 = Clock::now();
  // The initial values reach the backups with the init step.
  auto r = sessions[0]->Run({}, Fetches{}, {init});
  if (!r.ok()) return Fail(r.status().WithPrefix("initialising"));
  Phase(c, "init", SecondsSince(t0));
  int64_t warm = 0;
  for (int w = 0; w < 2; ++w, ++warm) {
    r = sessions[static_cast<size_t>(w)]->Run({{"ids", batch_ids[0]}, {"labels", batch_labels[0]}}, Fetches{}, {train});
    if (!r.ok()) return Fail(r.status().WithPrefix("the first step"));
  }
  Workers workers;
  for (int w = 0; w < 2; ++w) {
    workers.threads.emplace_back([&, w] {
      size_t i = static_cast<size_t>(w);
      while (!workers.stop) {
        i = (i + 1) % batch_ids.size();
        auto res = sessions[static_cast<size_t>(w)]->Run({{"ids", batch_ids[i]}, {"labels", batch_labels[i]}},
                                                        Fetches{}, {train});
        std::lock_guard<std::mutex> l(workers.mu);
        workers.ends.push_back(Clock::now());
        ++(res.ok() ? workers.acked : workers.failed);
        if (!res.ok() && workers.failed <= 3)
          std::fprintf(stderr, "bench_recovery: worker %d: a step failed: %s\n", w, res.status().ToString().c_str());
      }
    });
  }
  auto holder_of_task1 = [&]() -> int {
    const std::string addr = sessions[0]->tasks()[1];
    for (size_t i = 0; i < cluster.addresses().size(); ++i)
      if (cluster.addresses()[i] == addr && cluster.pid(static_cast<int>(i)) > 0) return static_cast<int>(i);
    return -1;
  };
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const int victim = holder_of_task1();
  if (victim < 0) return Fail(Internal("task 1 runs on no node of the local cluster"));
  const auto killed_at = Clock::now();
  cluster.Kill(victim);
  Phase(c, "kill", 0, JsonLine().Add("node", cluster.addresses()[static_cast<size_t>(victim)]));
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const double kill_gap = workers.LongestGap(killed_at, Clock::now());
  Phase(c, "steps_blocked", kill_gap, JsonLine().Add("fault", "kill"));
  (void)cluster.AddNode(3600);  // back to `nodes` members
  t0 = Clock::now();
  // The map spans the new node (its slots moved there) before the backups are waited for.
  st = cluster.WaitMembers(static_cast<int>(c.nodes), 600000);
  if (st.ok()) st = cluster.WaitBackups(static_cast<int>(c.tasks), 600000);
  const double resync_s = SecondsSince(t0);
  if (!st.ok()) return Fail(st.WithPrefix("waiting for synced backups after the kill"));
  Phase(c, "resync", resync_s);
  const int hung = holder_of_task1();
  if (hung < 0) return Fail(Internal("task 1 runs on no node of the local cluster"));
  const auto stopped_at = Clock::now();
  ::kill(cluster.pid(hung), SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(6));
  ::kill(cluster.pid(hung), SIGCONT);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double stop_gap = workers.LongestGap(stopped_at, Clock::now());
  Phase(c, "steps_blocked", stop_gap, JsonLine().Add("fault", "stop"));
  workers.stop = true;
  for (auto& t : workers.threads) t.join();
  auto counted = sessions[0]->Run({}, Fetches{counter});
  if (!counted.ok()) return Fail(counted.status().WithPrefix("reading the step counter"));
  const auto count = static_cast<int64_t>(std::llround((*counted)[0].data<float>()[0]));
  const int64_t acked = workers.acked + warm;
  int64_t retried = 0;
  for (const auto& s : sessions) retried += s->retried_steps();
  JsonLine summary;
  summary.Add("summary", true).Add("replicas", int64_t{2}).Add("rows", c.rows).Add("dim", c.dim)
      .Add("nodes", c.nodes).Add("tasks", c.tasks).Add("steps", acked).Add("failed_steps", workers.failed)
      .Add("retried_steps", retried).Add("lost_updates", std::max<int64_t>(0, acked - count))
      .Add("doubled_updates", std::max<int64_t>(0, count - acked - workers.failed))
      .Add("steps_blocked_seconds", kill_gap).Add("stop_blocked_seconds", stop_gap).Add("resync_seconds", resync_s);
  if (c.json) summary.Print();
  else std::printf("%s\n", summary.str().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("rows", 10'000'000, "table rows").Int("dim", 32, "embedding width")
      .Int("shards", 6, "table shards (shard k on task k mod tasks)").Int("nodes", 3, "node processes")
      .Int("tasks", 6, "logical tasks").Int("batch", 4096, "examples per step").Int("ids", 8, "ids per example")
      .Int("steps", 5, "steps before the checkpoint").Int("after", 3, "steps between the checkpoint and the kill")
      .Int("replicas", 1, "2: measure failover to backups (no checkpoint) instead of recovery from one")
      .String("checkpoint-dir", "", "where the checkpoint goes (default: a temporary directory, removed)")
      .Bool("json", "print JSON lines; the last is the summary");
  ParseOrExit(flags, argc, argv, "bench_recovery");
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  Config c;
  c.rows = flags.GetInt("rows");
  c.dim = flags.GetInt("dim");
  c.shards = flags.GetInt("shards");
  c.nodes = flags.GetInt("nodes");
  c.tasks = flags.GetInt("tasks");
  c.batch = flags.GetInt("batch");
  c.ids = flags.GetInt("ids");
  c.steps = flags.GetInt("steps");
  c.after = flags.GetInt("after");
  c.replicas = flags.GetInt("replicas");
  c.json = flags.GetBool("json");
  std::string bad;
  if (c.rows < 10 || c.rows >= (int64_t{1} << 31)) bad = "--rows must be in [10, 2^31)";
  else if (c.shards < 1 || c.shards > c.rows) bad = "--shards must be in [1, rows]";
  else if (c.nodes < 2) bad = "--nodes must be at least 2 (one is killed)";
  else if (c.tasks < 2) bad = "--tasks must be at least 2 (task 1's member is killed)";
  else if (c.replicas < 1 || c.replicas > 2) bad = "--replicas must be 1 or 2";
  else if (c.replicas == 2 && c.nodes < 3) bad = "--replicas 2 needs --nodes >= 3 (one is killed, then one stopped)";
  else if (c.dim < 1 || c.batch < 1 || c.ids < 1 || c.steps < 1 || c.after < 0)
    bad = "--dim, --batch, --ids, --steps must be positive and --after >= 0";
  if (!bad.empty()) {
    std::fprintf(stderr, "bench_recovery: %s\n", bad.c_str());
    return 2;
  }

  CheckpointDir temp;
  Status made = temp.Init(flags.GetString("checkpoint-dir"), "bench_recovery");
  if (!made.ok()) return Fail(made);
  const std::string dir = temp.path();

  // The model; shard k pinned to task k mod tasks (its Adagrad slot is
  // colocated with it).
  Graph g;
  EmbeddingTableOptions o;
  o.num_shards = c.shards;
  o.seed = 1;
  EmbeddingTable table = NewEmbeddingTable(g, "table", c.rows, c.dim, o);
  for (int64_t k = 0; k < c.shards; ++k)
    g.mutable_node(table.shards[k].node).device = "/job:worker/task:" + std::to_string(k % c.tasks);
  auto ids = ops::Placeholder(g, DType::kInt64, {c.batch, c.ids}, "ids");
  auto y = ops::Placeholder(g, DType::kFloat32, {c.batch, 1}, "labels");
  auto e = ops::EmbeddingLookup(g, table, ids, "sum");
  auto w = ops::Variable(g, "w", ops::RandomUniform(g, {c.dim, 1}, -0.1, 0.1, 2));
  auto b = ops::Variable(g, "b", ops::Zeros(g, DType::kFloat32, {1}));
  auto logits = ops::MatMul(g, e, w) + b;
  auto loss = ops::Mean(g, ops::Softplus(g, logits) - y * logits);
  auto train = AdagradOptimizer(0.1).Minimize(g, loss);
  if (!train.ok()) return Fail(train.status());
  Output counter;
  if (c.replicas == 2) {
    // Counts the steps applied: each adds one once.
    counter = ops::Variable(g, "step_counter", ops::Const(g, 0.0f));
    auto add = ops::AssignAdd(g, ops::VariableHandle(counter), ops::Const(g, 1.0f));
    train = ops::NoOp(g, {*train, Operation(&g, add.node)}, "train_and_count");
  }
  const Operation init = ops::GlobalVariablesInitializer(g);
  if (!g.status().ok()) return Fail(g.status());

  // A few batches, reused in turn.
  std::vector<Tensor> batch_ids(4), batch_labels(4);
  {
    const ZipfClicks data(c.rows, 1.1, 42);
    std::mt19937_64 rng(42);
    for (size_t i = 0; i < batch_ids.size(); ++i) data.Batch(c.batch, c.ids, rng, &batch_ids[i], &batch_labels[i]);
  }

  if (c.replicas == 2) return RunReplicated(c, g, *train, counter, init, batch_ids, batch_labels);

  LocalCluster cluster;
  cluster.SetReplicas(1);  // recovery from the checkpoint
  auto t0 = Clock::now();
  Status st = cluster.Start(static_cast<int>(c.nodes), 3600);
  if (!st.ok()) return Fail(st);
  ClusterOptions co;
  co.address = cluster.addresses()[0];
  co.tls_dir = cluster.tls_dir();
  co.tasks = static_cast<int>(c.tasks);
  co.checkpoint_dir = dir;
  co.elastic = false;  // the benchmark calls Recover itself, to time it
  co.request_timeout_ms = 300000;
  auto session = ClusterSession::Connect(g, co);
  if (!session.ok()) return Fail(session.status());
  ClusterSession& s = **session;
  Phase(c, "start", SecondsSince(t0), JsonLine().Add("nodes", c.nodes));

  t0 = Clock::now();
  auto r = s.Run({}, Fetches{}, {init});
  if (!r.ok()) return Fail(r.status().WithPrefix("initialising"));
  Phase(c, "init", SecondsSince(t0));

  int64_t next = 0;
  auto step = [&]() -> Status {
    const size_t i = static_cast<size_t>(next++ % static_cast<int64_t>(batch_ids.size()));
    return s.Run({{"ids", batch_ids[i]}, {"labels", batch_labels[i]}}, Fetches{}, {*train}).status();
  };
  // Steps timed after one warm-up step (which registers the partitions).
  auto steps = [&](int64_t n, const std::string& phase) -> Status {
    SF_RETURN_IF_ERROR(step());
    const auto s0 = Clock::now();
    for (int64_t i = 1; i < n; ++i) SF_RETURN_IF_ERROR(step());
    if (n > 1) Phase(c, phase, SecondsSince(s0) / static_cast<double>(n - 1), JsonLine().Add("per", "step"));
    return Status::OK();
  };
  st = steps(c.steps, "train");
  if (!st.ok()) return Fail(st.WithPrefix("training"));

  const double table_mb = static_cast<double>(c.rows * c.dim * 4) * 2 / 1e6;  // table + accumulator
  t0 = Clock::now();
  auto id = s.Save(dir, next, 1);
  if (!id.ok()) return Fail(id.status().WithPrefix("saving"));
  const double save_s = SecondsSince(t0);
  Phase(c, "save", save_s, JsonLine().Add("mb", table_mb).Add("mb_per_sec", table_mb / save_s));
  for (int64_t i = 0; i < c.after; ++i) {
    st = step();
    if (!st.ok()) return Fail(st.WithPrefix("training after the checkpoint"));
  }

  const std::string victim_addr = s.tasks()[1];
  int victim = -1;
  for (size_t i = 0; i < cluster.addresses().size(); ++i)
    if (cluster.addresses()[i] == victim_addr) victim = static_cast<int>(i);
  if (victim < 0) return Fail(Internal("task 1 runs on " + victim_addr + ", not a node of the local cluster"));
  std::vector<int> victim_tasks;
  for (size_t t = 0; t < s.tasks().size(); ++t)
    if (s.tasks()[t] == victim_addr) victim_tasks.push_back(static_cast<int>(t));

  const auto killed_at = Clock::now();
  cluster.Kill(victim);
  t0 = Clock::now();
  st = step();
  const double detect_s = SecondsSince(t0);
  if (st.ok()) return Fail(Internal("the step after killing " + victim_addr + " succeeded"));
  Phase(c, "detect", detect_s, JsonLine().Add("error", st.ToString()));
  // After the detect step, so that polling etcd does not share the CPUs with it.
  auto gone = WaitListed(cluster, victim_addr, false, killed_at, kGoneDeadlineS, "the killed node stayed a member");
  if (!gone.ok()) return Fail(gone.status());
  const double member_gone_s = *gone;
  Phase(c, "member_gone", member_gone_s, JsonLine().Add("lost", victim_addr));

  t0 = Clock::now();
  auto change = s.Recover(false);
  const double restore_s = SecondsSince(t0);
  if (!change.ok()) return Fail(change.status().WithPrefix("recovering"));
  double restored_mb = 0;
  for (int t : change->restored_tasks)
    for (int64_t k = 0; k < c.shards; ++k)
      if (k % c.tasks == t) restored_mb += static_cast<double>(ShardRows(c, k) * c.dim * 4) * 2 / 1e6;
  std::vector<double> restored_tasks(change->restored_tasks.begin(), change->restored_tasks.end());
  Phase(c, "restore", restore_s,
        JsonLine().Add("change_seconds", change->seconds).Add("restored_tasks", restored_tasks)
            .Add("variables_restored", change->variables_restored).Add("restored_mb", restored_mb)
            .Add("checkpoint_step", change->global_step).Add("lost", victim_addr));

  t0 = Clock::now();
  st = step();
  const double first_s = SecondsSince(t0);
  if (!st.ok()) return Fail(st.WithPrefix("the first step after the recovery"));
  Phase(c, "first_step", first_s);
  st = steps(4, "train_after");
  if (!st.ok()) return Fail(st.WithPrefix("training after the recovery"));

  // A hung node: one more node, SIGSTOPped once etcd lists it; it is gone
  // when its lease expires. SIGCONT lets the cluster stop it at the end.
  auto hung_addr = cluster.AddNode(3600);
  if (!hung_addr.ok()) return Fail(hung_addr.status().WithPrefix("starting the node to hang"));
  const int hung = static_cast<int>(cluster.addresses().size()) - 1;
  auto listed = WaitListed(cluster, *hung_addr, true, Clock::now(), kGoneDeadlineS, "the added node did not register");
  if (!listed.ok()) return Fail(listed.status());
  t0 = Clock::now();
  ::kill(cluster.pid(hung), SIGSTOP);
  auto hung_gone = WaitListed(cluster, *hung_addr, false, t0, kGoneDeadlineS, "the hung node stayed a member");
  ::kill(cluster.pid(hung), SIGCONT);
  if (!hung_gone.ok()) return Fail(hung_gone.status());
  const double hung_s = *hung_gone;
  Phase(c, "hung_detect", hung_s, JsonLine().Add("hung", *hung_addr));

  const double total = detect_s + restore_s + first_s;
  if (c.json) {
    JsonLine()
        .Add("summary", true)
        .Add("rows", c.rows)
        .Add("dim", c.dim)
        .Add("shards", c.shards)
        .Add("nodes", c.nodes)
        .Add("tasks", c.tasks)
        .Add("detect_seconds", detect_s)
        .Add("restore_seconds", restore_s)
        .Add("first_step_seconds", first_s)
        .Add("recovery_seconds", total)
        .Add("variables_restored", change->variables_restored)
        .Add("restored_mb", restored_mb)
        .Add("save_seconds", save_s)
        .Add("lost_tasks", static_cast<int64_t>(victim_tasks.size()))
        .Add("member_gone_seconds", member_gone_s)
        .Add("hung_detect_seconds", hung_s)
        .Print();
  } else {
    std::printf("recovery %.3f s: detect %.3f + restore %.3f (%lld variables, %.0f MB) + first step %.3f\n", total,
                detect_s, restore_s, (long long)change->variables_restored, restored_mb, first_s);
    std::printf("etcd dropped the killed node %.3f s after its kill, the hung node %.3f s after its SIGSTOP\n",
                member_gone_s, hung_s);
  }
  return 0;
}
