// An elastic cluster, driven by a script: nodes join, drain and die while a
// sparse click model trains, and the session follows them.
//
//   build/bin/elastic_cluster
//   build/bin/elastic_cluster --script "train 40; add; train 40; kill 1; train 40" --json
//
// It starts one `shardflow node` process (examples/common/local_cluster.h)
// and a ClusterSession over --tasks logical tasks with elastic = true, then
// runs the script:
//   train N   N training steps (a checkpoint every --checkpoint-every steps,
//             ClusterSession::Save, keeping the newest 3)
//   add       starts one more node; before the next step the session moves
//             some tasks onto it, their variables by messages
//   drain I   asks node I (0: the first node, 1: the first added, ...) to
//             drain (sf::DrainMember, as `shardflow node drain --etcd`); before the
//             next step the session moves its tasks away and the node leaves
//   kill I    SIGKILLs node I; the session restores its tasks from the
//             checkpoint before its next step (a step under way runs again)
//             (unless the session saw the death first) and, before the step
//             after, the session moves its tasks to live nodes and restores
//             their variables from the newest checkpoint (the other tasks
//             keep their live state)
// The model (examples/common/zipf_clicks.h for the data): a --rows x --dim
// table in --shards shards, each example a bag of 4 Zipf ids, summed, a
// linear layer to one logit, logistic loss, Adagrad on everything.
//
// --workers N runs N sessions (data-parallel workers, between-graph
// replication) on the one model: each trains the script's steps at once
// with the others, every one following the cluster's shard map; worker 0
// writes the checkpoints and restores what a kill lost.
//
// Output: one line per event (start, add, drain, left, kill, step_failed,
// checkpoint), per ClusterChange the session made (lost, drained, added,
// moved and restored tasks, variables moved and restored, checkpoint step,
// seconds), and the mean loss every 10 steps. With --json these are JSON
// lines ({"event": ...}) and the last line is the summary {"steps",
// "final_loss", "first_loss", "events", "recoveries", "recovery_seconds_max",
// "members", "workers", "failed_steps", "changes", "worker_first_loss",
// "worker_final_loss", "every_worker_loss_fell", ...}; steps and
// changes count all workers'.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/checkpoint_dir.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/local_cluster.h"
#include "examples/common/trace.h"
#include "examples/common/zipf_clicks.h"
#include "examples/elastic_cluster/script.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kIdsPerExample = 4;
constexpr int64_t kLossEvery = 10;
// Seconds a node lives at most (it also dies with this program).
constexpr double kNodeLifetime = 3600;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Prints the error; the exit status 1.
int Fail(const Status& s) {
  std::fprintf(stderr, "elastic_cluster: %s\n", s.ToString().c_str());
  return 1;
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

std::vector<double> AsDoubles(const std::vector<int>& v) { return std::vector<double>(v.begin(), v.end()); }

// The click model; names of what the loop runs.
struct Model {
  Graph g;
  std::string init, train, loss;
};

Status BuildModel(int64_t rows, int64_t dim, int64_t shards, uint64_t seed, double lr, Model* m) {
  Graph& g = m->g;
  EmbeddingTableOptions o;
  o.num_shards = shards;
  o.seed = static_cast<int64_t>(seed * 16 + 1);
  EmbeddingTable table = NewEmbeddingTable(g, "clicks", rows, dim, o);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, kIdsPerExample}, "ids");
  auto y = ops::Placeholder(g, DType::kFloat32, {-1, 1}, "labels");
  auto e = ops::EmbeddingLookup(g, table, ids, "sum");
  auto w = ops::Variable(g, "w", ops::RandomUniform(g, {dim, 1}, -0.1, 0.1, static_cast<int64_t>(seed * 16 + 2)));
  auto b = ops::Variable(g, "b", ops::Zeros(g, DType::kFloat32, {1}));
  auto logits = ops::MatMul(g, e, w) + b;
  // Logistic loss, stable form: softplus(z) - y z.
  auto loss = ops::Identity(g, ops::Mean(g, ops::Softplus(g, logits) - y * logits), "loss");
  SF_RETURN_IF_ERROR(g.status());
  auto train = AdagradOptimizer(lr).Minimize(g, loss);
  if (!train.ok()) return train.status();
  const Operation init = ops::GlobalVariablesInitializer(g);
  SF_RETURN_IF_ERROR(g.status());
  m->init = init.name();
  m->train = train->name();
  m->loss = loss.name();
  return Status::OK();
}

// Workers print from their own threads: one line at a time.
std::mutex print_mu;

// Prints an event line (JSON or text); `fill` adds the event's fields.
template <typename F>
void Event(bool json, const std::string& event, const std::string& text, F fill) {
  std::lock_guard<std::mutex> l(print_mu);
  if (json) {
    JsonLine line;
    line.Add("event", event);
    fill(line);
    line.Print();
  } else {
    std::printf("[%s] %s\n", event.c_str(), text.c_str());
    std::fflush(stdout);
  }
}

}  // namespace

// Waits (at most 30 s) until the cluster's map gives one of the first
// `tasks` slots to the node at address, handed over.
void WaitForSlotOn(const LocalCluster& cluster, const std::string& address, int tasks) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    auto m = ReadClusterMap(cluster.etcd_endpoint(), cluster.tls_dir());
    if (m.ok())
      for (int t = 0; t < tasks && t < static_cast<int>(m->holder.size()); ++t)
        if (m->holder[t] == address && m->moving_from[t].empty()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int main(int argc, char** argv) {
  Flags flags;
  flags.String("script", "train 40; add; train 40; add; train 40; drain 1; train 40; kill 0; train 40",
               "commands separated by ';': train N, add, drain I, kill I (I: node index, 0 = the first)")
      .Int("rows", 1'000'000, "rows of the embedding table")
      .Int("dim", 16, "embedding width")
      .Int("shards", 6, "shards of the table")
      .Int("tasks", 6, "logical tasks the graph is placed over (they move between nodes)")
      .Int("batch", 512, "examples per step")
      .Int("checkpoint-every", 20, "steps between checkpoints")
      .String("checkpoint-dir", "", "where checkpoints go (default: a temporary directory removed at exit)")
      .Double("lr", 0.2, "Adagrad learning rate")
      .Int("seed", 1, "seed of the data and the initialisation")
      .Int("workers", 1, "sessions training the model at once (data-parallel workers)")
      .Int("replicas", 1,
           "the nodes' --replicas: 1 restores a killed node's tasks from the checkpoint, 2 from their backups")
      .Bool("json", "print JSON lines on stdout; the last is the summary");
  DeclareTraceFlags(flags);
  ParseOrExit(flags, argc, argv, "elastic_cluster");
  const TraceFlag trace(flags);
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  const int64_t rows = flags.GetInt("rows"), dim = flags.GetInt("dim"), shards = flags.GetInt("shards");
  const int64_t tasks = flags.GetInt("tasks"), batch = flags.GetInt("batch");
  const int64_t ckpt_every = flags.GetInt("checkpoint-every");
  const uint64_t seed = static_cast<uint64_t>(flags.GetInt("seed"));
  const bool json = flags.GetBool("json");
  const int64_t num_workers = flags.GetInt("workers");
  std::string bad;
  auto script = ParseScript(flags.GetString("script"));
  if (!script.ok()) bad = "--script: " + script.status().message();
  else if (rows < 10 || rows >= (int64_t{1} << 31)) bad = "--rows must be in [10, 2^31), got " + std::to_string(rows);
  else if (dim < 1) bad = "--dim must be at least 1, got " + std::to_string(dim);
  else if (shards < 1 || shards > rows) bad = "--shards must be in [1, rows], got " + std::to_string(shards);
  else if (tasks < 1 || tasks > 64) bad = "--tasks must be in [1, 64], got " + std::to_string(tasks);
  else if (batch < 1) bad = "--batch must be at least 1, got " + std::to_string(batch);
  else if (ckpt_every < 1) bad = "--checkpoint-every must be at least 1, got " + std::to_string(ckpt_every);
  else if (!(flags.GetDouble("lr") > 0)) bad = "--lr must be positive";
  else if (num_workers < 1 || num_workers > 64) bad = "--workers must be in [1, 64], got " + std::to_string(num_workers);
  if (!bad.empty()) {
    std::fprintf(stderr, "elastic_cluster: %s (see --help)\n", bad.c_str());
    return 2;
  }
  // Node indices are checked against the nodes the script has started by then.
  {
    int64_t nodes = 1;
    for (const ScriptCommand& c : *script) {
      if (c.op == "add") ++nodes;
      if ((c.op == "drain" || c.op == "kill") && c.arg >= nodes) {
        std::fprintf(stderr,
                     "elastic_cluster: --script: command '%s': node %lld does not exist yet (nodes 0..%lld)\n",
                     c.text.c_str(), (long long)c.arg, (long long)(nodes - 1));
        return 2;
      }
    }
  }

  CheckpointDir temp;
  Status made = temp.Init(flags.GetString("checkpoint-dir"), "elastic_cluster");
  if (!made.ok()) return Fail(made);
  const std::string ckpt_dir = temp.path();

  Model m;
  Status built = BuildModel(rows, dim, shards, seed, flags.GetDouble("lr"), &m);
  if (!built.ok()) return Fail(built);
  const ZipfClicks data(rows, 1.1, seed, 1.5);
  std::mt19937_64 rng(seed);

  LocalCluster cluster;
  cluster.SetReplicas(static_cast<int>(flags.GetInt("replicas")));
  Status started = cluster.Start(1, kNodeLifetime);
  if (!started.ok()) return Fail(started.WithPrefix("starting the first node"));
  std::vector<bool> alive = {true};
  ClusterOptions co;
  co.address = cluster.addresses()[0];
  co.tls_dir = cluster.tls_dir();
  co.tasks = static_cast<int>(tasks);
  co.elastic = true;
  co.request_timeout_ms = 120000;  // initialising a big table takes a while
  // One session per worker; only worker 0 restores lost variables (each
  // session restores what it placed, so one is enough) and checkpoints.
  struct Worker {
    std::unique_ptr<ClusterSession> s;
    std::mt19937_64 rng;
    int64_t steps = 0, failed = 0, loss_n = 0;
    double loss_sum = 0, first_loss = -1, final_loss = -1;
    size_t changes_seen = 0;
  };
  std::vector<Worker> workers(static_cast<size_t>(num_workers));
  for (int64_t w = 0; w < num_workers; ++w) {
    ClusterOptions wo = co;
    if (w == 0) wo.checkpoint_dir = ckpt_dir;
    auto session = ClusterSession::Connect(m.g, wo);
    if (!session.ok()) return Fail(session.status().WithPrefix("connecting worker " + std::to_string(w) + " to " + co.address));
    workers[w].s = std::move(*session);
    workers[w].rng.seed(seed * 1000 + static_cast<uint64_t>(w));
  }
  ClusterSession& s = *workers[0].s;
  auto t0 = Clock::now();
  auto init = s.Run({}, {}, {m.init});
  if (!init.ok()) return Fail(init.status().WithPrefix("initialising the variables"));
  const double init_secs = SecondsSince(t0);
  Event(json, "start", "node 0 at " + co.address + ", " + std::to_string(tasks) + " tasks, " +
                           std::to_string(num_workers) + " workers, variables initialised in " +
                           std::to_string(init_secs) + " s",
        [&](JsonLine& l) {
          l.Add("node", 0).Add("address", co.address).Add("tasks", tasks).Add("workers", num_workers)
              .Add("init_seconds", init_secs);
        });

  std::mutex stats_mu;  // the counters below, from the workers' threads
  int64_t events = 0, recoveries = 0;
  int64_t added = 0, drained = 0, lost = 0;
  double recovery_max = 0;
  std::vector<int> draining;  // node indices asked to drain that have not left yet
  Clock::time_point kill_time;
  bool killed = false;

  // Prints worker w's reconfigurations not printed yet.
  auto report_changes = [&](int64_t w) {
    Worker& wk = workers[w];
    const std::vector<ClusterChange> changes = wk.s->Changes();
    for (; wk.changes_seen < changes.size(); ++wk.changes_seen) {
      const ClusterChange& c = changes[wk.changes_seen];
      {
        std::lock_guard<std::mutex> l(stats_mu);
        added += static_cast<int64_t>(c.added.size());
        drained += static_cast<int64_t>(c.drained.size());
        lost += static_cast<int64_t>(c.lost.size());
        if (!c.lost.empty()) {
          ++recoveries;
          recovery_max = std::max(recovery_max, c.seconds);
        }
      }
      std::string text = "worker " + std::to_string(w) + " before its step " + std::to_string(wk.steps + 1) + ":";
      if (!c.lost.empty()) text += " lost " + Join(c.lost) + ";";
      if (!c.drained.empty()) text += " drained " + Join(c.drained) + ";";
      if (!c.added.empty()) text += " added " + Join(c.added) + ";";
      char more[256];
      std::snprintf(more, sizeof more, " %zu tasks moved (%lld variables by this session's messages)",
                    c.moved_tasks.size(), (long long)c.variables_moved);
      text += more;
      if (!c.restored_tasks.empty()) {
        std::snprintf(more, sizeof more, ", %zu restored (%lld variables from the checkpoint of step %lld)",
                      c.restored_tasks.size(), (long long)c.variables_restored, (long long)c.global_step);
        text += more;
      }
      std::snprintf(more, sizeof more, " in %.3f s", c.seconds);
      text += more;
      Event(json, "change", text, [&](JsonLine& l) {
        l.Add("worker", w).Add("before_step", wk.steps + 1).Add("lost", Join(c.lost)).Add("drained", Join(c.drained))
            .Add("added", Join(c.added)).Add("moved_tasks", AsDoubles(c.moved_tasks))
            .Add("restored_tasks", AsDoubles(c.restored_tasks)).Add("variables_moved", c.variables_moved)
            .Add("variables_restored", c.variables_restored).Add("checkpoint_step", c.global_step)
            .Add("seconds", c.seconds);
      });
    }
  };

  // Reports drained nodes that have left since the last call.
  auto report_left = [&](int wait_ms) {
    for (auto it = draining.begin(); it != draining.end();) {
      if (!cluster.WaitExit(*it, wait_ms)) {
        ++it;
        continue;
      }
      const int i = *it;
      alive[i] = false;
      Event(json, "left", "node " + std::to_string(i) + " (" + cluster.addresses()[i] + ") left after its drain",
            [&](JsonLine& l) { l.Add("node", i).Add("address", cluster.addresses()[i]); });
      it = draining.erase(it);
    }
  };

  // One training step of worker w; a failed step is reported and tried
  // again (the elastic session reconfigures before it), up to 10 times in a
  // row, waiting a little longer each time.
  auto train_step = [&](int64_t w) -> Status {
    Worker& wk = workers[w];
    Tensor ids, labels;
    data.Batch(batch, kIdsPerExample, wk.rng, &ids, &labels);
    for (int attempt = 0;; ++attempt) {
      auto r = wk.s->Run({{"ids", ids}, {"labels", labels}}, {m.loss}, {m.train}, trace.For(wk.steps));
      report_changes(w);
      if (r.ok()) {
        ++wk.steps;
        const double loss = (*r)[0].data<float>()[0];
        wk.loss_sum += loss;
        ++wk.loss_n;
        break;
      }
      ++wk.failed;
      const std::string err = r.status().ToString();
      double since_kill = -1.0;
      {
        std::lock_guard<std::mutex> l(stats_mu);
        if (killed) since_kill = SecondsSince(kill_time);
      }
      Event(json, "step_failed", "worker " + std::to_string(w) + " step " + std::to_string(wk.steps + 1) +
                                     " failed: " + err, [&](JsonLine& l) {
        l.Add("worker", w).Add("step", wk.steps + 1).Add("error", err).Add("seconds_since_kill", since_kill);
      });
      if (attempt == 9)
        return r.status().WithPrefix("worker " + std::to_string(w) + " step " + std::to_string(wk.steps + 1) +
                                     " failed 10 times");
      // After a kill the other workers may reach the lost slots before
      // worker 0 restored them (uninitialised): give it a moment.
      std::this_thread::sleep_for(std::chrono::milliseconds(100 * (attempt + 1)));
    }
    if (wk.loss_n == kLossEvery) {
      const double mean = wk.loss_sum / static_cast<double>(wk.loss_n);
      if (wk.first_loss < 0) wk.first_loss = mean;
      wk.final_loss = mean;
      char text[160];
      std::snprintf(text, sizeof text, "worker %lld steps %lld-%lld: mean loss %.4f", (long long)w,
                    (long long)(wk.steps - kLossEvery + 1), (long long)wk.steps, mean);
      Event(json, "loss", text, [&](JsonLine& l) { l.Add("worker", w).Add("step", wk.steps).Add("loss", mean); });
      wk.loss_sum = 0;
      wk.loss_n = 0;
    }
    if (w == 0 && wk.steps % ckpt_every == 0) {
      const auto c0 = Clock::now();
      auto id = wk.s->Save(ckpt_dir, wk.steps, 3);
      if (!id.ok()) return id.status().WithPrefix("checkpoint at step " + std::to_string(wk.steps));
      const double secs = SecondsSince(c0);
      char text[160];
      std::snprintf(text, sizeof text, "checkpoint %lld of step %lld in %.3f s", (long long)*id,
                    (long long)wk.steps, secs);
      Event(json, "checkpoint", text,
            [&](JsonLine& l) { l.Add("step", wk.steps).Add("id", *id).Add("seconds", secs); });
    }
    return Status::OK();
  };

  // Every worker trains n steps, all at once.
  auto train_all = [&](int64_t n) -> Status {
    std::vector<Status> results(workers.size());
    std::vector<std::thread> threads;
    for (size_t w = 0; w < workers.size(); ++w)
      threads.emplace_back([&, w] {
        for (int64_t i = 0; i < n && results[w].ok(); ++i) results[w] = train_step(static_cast<int64_t>(w));
      });
    for (auto& t : threads) t.join();
    report_left(0);
    for (const Status& st : results)
      if (!st.ok()) return st;
    return Status::OK();
  };

  for (const ScriptCommand& c : *script) {
    if (c.op == "train") {
      Status st = train_all(c.arg);
      if (!st.ok()) return Fail(st);
      continue;
    }
    {
      std::lock_guard<std::mutex> l(stats_mu);
      ++events;
    }
    const int i = static_cast<int>(c.arg);
    if (c.op == "add") {
      auto addr = cluster.AddNode(kNodeLifetime);
      if (!addr.ok()) return Fail(addr.status().WithPrefix("script command 'add'"));
      alive.push_back(true);
      const int node = static_cast<int>(alive.size()) - 1;
      Event(json, "add", "node " + std::to_string(node) + " joined at " + *addr,
            [&](JsonLine& l) { l.Add("node", node).Add("address", *addr); });
      // The leader moves slots onto it once copied there (their old holders
      // serve them meanwhile): the next step follows.
      WaitForSlotOn(cluster, *addr, static_cast<int>(tasks));
    } else if (!alive[i]) {
      return Fail(FailedPrecondition("script command '" + c.text + "': node " + std::to_string(i) + " (" +
                                     cluster.addresses()[i] + ") is not running any more"));
    } else if (c.op == "drain") {
      Status st = DrainMember(cluster.etcd_endpoint(), cluster.tls_dir(), cluster.addresses()[i], 0, "default", "",
                              cluster.insecure());
      if (!st.ok()) return Fail(st.WithPrefix("script command '" + c.text + "'"));
      draining.push_back(i);
      Event(json, "drain", "node " + std::to_string(i) + " (" + cluster.addresses()[i] + ") asked to drain",
            [&](JsonLine& l) { l.Add("node", i).Add("address", cluster.addresses()[i]); });
    } else {  // kill
      cluster.Kill(i);
      {
        std::lock_guard<std::mutex> l(stats_mu);
        kill_time = Clock::now();
        killed = true;
      }
      alive[i] = false;
      Event(json, "kill", "node " + std::to_string(i) + " (" + cluster.addresses()[i] + ") killed with SIGKILL",
            [&](JsonLine& l) { l.Add("node", i).Add("address", cluster.addresses()[i]); });
    }
    // A join or drain reaches the session by a message from the node; give
    // it a moment so the next step follows it (a later one would otherwise).
    if (c.op != "kill") std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  report_left(10000);

  const std::vector<std::string> used = s.tasks();
  const int64_t members = static_cast<int64_t>(std::set<std::string>(used.begin(), used.end()).size());
  int64_t step = 0, failed_steps = 0, changes = 0;
  bool every_fell = true;
  std::vector<double> first_losses, final_losses;
  for (const Worker& wk : workers) {
    step += wk.steps;
    failed_steps += wk.failed;
    changes += static_cast<int64_t>(wk.changes_seen);
    first_losses.push_back(wk.first_loss);
    final_losses.push_back(wk.final_loss);
    every_fell = every_fell && wk.first_loss > 0 && wk.final_loss < wk.first_loss;
  }
  const double first_loss = workers[0].first_loss, final_loss = workers[0].final_loss;
  if (json) {
    JsonLine()
        .Add("summary", true)
        .Add("workers", num_workers)
        .Add("steps", step)
        .Add("first_loss", first_loss)
        .Add("final_loss", final_loss)
        .Add("worker_first_loss", first_losses)
        .Add("worker_final_loss", final_losses)
        .Add("every_worker_loss_fell", every_fell)
        .Add("events", events)
        .Add("recoveries", recoveries)
        .Add("recovery_seconds_max", recovery_max)
        .Add("members", members)
        .Add("changes", changes)
        .Add("added", added)
        .Add("drained", drained)
        .Add("lost", lost)
        .Add("failed_steps", failed_steps)
        .Add("rows", rows)
        .Add("shards", shards)
        .Add("tasks", tasks)
        .Print();
  } else {
    std::printf("%lld workers, %lld steps in all (%lld failed), worker 0's mean loss %.4f -> %.4f (every worker's "
                "fell: %s); %lld events, %lld reconfigurations (%lld recoveries, the longest %.3f s); %lld members "
                "at the end\n",
                (long long)num_workers, (long long)step, (long long)failed_steps, first_loss, final_loss,
                every_fell ? "yes" : "no", (long long)events, (long long)changes, (long long)recoveries,
                recovery_max, (long long)members);
  }
  return 0;
}
