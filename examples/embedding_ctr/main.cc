// Click-through-rate prediction on sharded embedding tables, trained on a
// local cluster of node processes (or your own cluster, or in one process).
//
//   build/bin/embedding_ctr                        # 2 local nodes, 10M x 32 user table, 4 shards
//   build/bin/embedding_ctr --local --json         # the in-process Session
//   build/bin/embedding_ctr --cluster HOST:PORT --tls-dir DIR
//   build/bin/embedding_ctr --rows 100000 --steps 100 --json
//
// The synthetic click log (deterministic for a given --seed):
// - three sparse features, each with its own table: "user" (--rows rows),
//   "item" (rows / 10) and "category" (rows / 1000, at least 10). An example
//   holds a bag of 1..3 user ids, 1..4 item ids and 1..2 category ids (the
//   size uniform per example and feature).
// - ids are Zipf(--zipf, default 1.1) distributed: rank r (0-based) has
//   probability proportional to (r + 1)^-zipf. The CDF is computed once per
//   table and sampled by binary search; the rank is scattered over the rows
//   by the fixed permutation row = (rank * 2654435761 + 7919 * table) mod rows
//   (2654435761 is prime, so this is a bijection for rows < 2^31).
// - the click is drawn from a hidden logistic model: every (table, id) has a
//   hidden weight w in [-1, 1) given by a hash (splitmix64 of seed, table and
//   id), so no hidden table is stored; the example's logit is
//   -0.3 + sum over tables of scale_t * mean of w over its bag (scales 1.5,
//   2.0 and 1.5 for user, item, category) + N(0, --noise^2), and the click is
//   1 with probability sigmoid(logit). The "oracle_auc" printed is the AUC
//   of the noiseless hidden logit on the test set: the ceiling for a model.
// - training batches and the held-out test set come from two separate
//   mt19937_64 streams seeded from --seed.
//
// The model: one embedding table per feature (all sharded over --shards
// shards, "mod" partitioning), bag lookups ("mean" by default), the bags
// concatenated into [batch, 3 * dim], a ReLU layer of --hidden units and one
// logit; logistic loss. The tables get sparse Adagrad (or SGD) updates applied
// in their shard actors; the MLP gets dense Adam.
//
// --hash: every table is a hash table (NewHashEmbeddingTable) fed raw 64-bit
// feature ids, a hash of the feature string per (table, id), as a production
// log holds them; --rows then only sizes the hidden id space of the log. Ids
// get a row after --min-count sightings (2) and lose it after --ttl-steps
// steps unused (1000); --max-rows caps each shard. The summary adds "hash",
// "hash_rows", "hash_admitted", "hash_rejected", "hash_evicted", "hash_bytes".
//
// --json prints one line per evaluation {"step", "loss", "auc",
// "examples_per_sec"} and last a summary {"auc", "examples_per_sec", "rows",
// "shards", "nodes", "mode", "oracle_auc", "init_secs", "data_secs",
// "train_secs", "wall_secs", "steps", "batch", "final_loss", "start_step",
// "checkpoints", "replicas", "node_peak_rss_mb" (the largest peak RSS of
// the local cluster's nodes; 0 otherwise)}. With --checkpoint-dir DIR it checkpoints every
// --checkpoint-every steps (and/or --checkpoint-every-s seconds) and at the
// end, keeping three, and resumes from the newest one in DIR. examples/s
// counts training steps only (not making batches, initialising or
// evaluating); "nodes" is 0 with --local.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/local_cluster.h"
#include "examples/common/trace.h"
#include "examples/common/auc.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

using Clock = std::chrono::steady_clock;

// Seconds from t0 to now.
double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Prints the error; the exit status 1.
int Fail(const Status& s) {
  std::fprintf(stderr, "embedding_ctr: %s\n", s.ToString().c_str());
  return 1;
}

// One sparse feature of the click log and its table.
struct Feature {
  std::string name;
  int64_t rows = 0;
  int64_t max_bag = 1;       // bag sizes are uniform in [1, max_bag]
  double hidden_scale = 1;   // weight of this feature in the hidden logit
  std::vector<double> cdf;   // Zipf CDF over ranks, cdf.back() == 1
};

struct Config {
  int64_t rows = 10'000'000, dim = 32, shards = 4, hidden = 64;
  int64_t steps = 2000, batch = 2048, test = 50'000, eval_every = 0;
  double zipf = 1.1, noise = 0.5, table_lr = 0.3, mlp_lr = 0.003;
  std::string combiner = "mean", table_optimizer = "adagrad";
  // --hash: hash tables fed raw 64-bit feature ids, with admission and a TTL.
  bool hash = false;
  int64_t min_count = 2, ttl_steps = 1000, max_rows = 0;
  uint64_t seed = 1;
  std::string checkpoint_dir;  // "" = no checkpoints
  int64_t checkpoint_every = 0;     // steps between checkpoints (0: steps / 4)
  double checkpoint_every_s = 0;    // seconds between checkpoints (0: off)
  const TraceFlag* trace = nullptr;  // --trace
};

// The three features of the log (see the top of the file).
std::vector<Feature> MakeFeatures(const Config& c) {
  std::vector<Feature> f = {{"user", c.rows, 3, 1.5, {}},
                            {"item", std::max<int64_t>(c.rows / 10, 10), 4, 2.0, {}},
                            {"category", std::max<int64_t>(c.rows / 1000, 10), 2, 1.5, {}}};
  for (Feature& x : f) {
    x.cdf.resize(x.rows);
    double total = 0;
    for (int64_t r = 0; r < x.rows; ++r) x.cdf[r] = (total += std::pow(static_cast<double>(r + 1), -c.zipf));
    for (double& v : x.cdf) v /= total;
    x.cdf.back() = 1.0;
  }
  return f;
}

// The splitmix64 finaliser: a well-mixed 64-bit hash of x.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The raw id a log would carry for value id of feature t: a hash of the
// feature string, any of 2^64 values (negative ones too).
uint64_t RawFeatureId(int t, int64_t id) {
  return SplitMix64(SplitMix64(0xfea7u + static_cast<uint64_t>(t)) ^ static_cast<uint64_t>(id));
}

// The hidden weight of id in table t, in [-1, 1).
double HiddenWeight(uint64_t seed, int t, int64_t id) {
  const uint64_t h = SplitMix64(SplitMix64(seed * 0x100000001b3ULL + static_cast<uint64_t>(t)) ^
                                static_cast<uint64_t>(id));
  return static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0;
}

// A uniform double in [0, 1) from a 64-bit generator (not through
// std::uniform_real_distribution, whose output may differ between libraries).
double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// A batch in the feed layout of EmbeddingLookupBag: per feature flat ids and
// bag offsets; labels [n, 1]; the hidden noiseless logit of each example.
struct Batch {
  int64_t n = 0;
  std::vector<std::vector<int64_t>> ids, offsets;
  std::vector<float> labels, hidden_logit;
};

// Draws n examples from rng (see the generator at the top of the file).
Batch MakeBatch(const std::vector<Feature>& features, const Config& c, int64_t n, std::mt19937_64& rng) {
  Batch b;
  b.n = n;
  b.ids.resize(features.size());
  b.offsets.resize(features.size());
  b.labels.resize(n);
  b.hidden_logit.resize(n);
  for (int64_t e = 0; e < n; ++e) {
    double logit = -0.3;
    for (size_t t = 0; t < features.size(); ++t) {
      const Feature& f = features[t];
      b.offsets[t].push_back(static_cast<int64_t>(b.ids[t].size()));
      const int64_t bag = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(f.max_bag));
      double sum = 0;
      for (int64_t k = 0; k < bag; ++k) {
        int64_t rank = std::upper_bound(f.cdf.begin(), f.cdf.end(), Uniform(rng)) - f.cdf.begin();
        rank = std::min(rank, f.rows - 1);
        const int64_t id = static_cast<int64_t>(
            (static_cast<unsigned __int128>(rank) * 2654435761u + 7919u * t) % static_cast<uint64_t>(f.rows));
        // --hash feeds what a production log holds: a 64-bit hash of the
        // feature's string ("<table>=<value>"), from an unbounded space.
        b.ids[t].push_back(c.hash ? static_cast<int64_t>(RawFeatureId(static_cast<int>(t), id)) : id);
        sum += HiddenWeight(c.seed, static_cast<int>(t), id);
      }
      logit += f.hidden_scale * sum / static_cast<double>(bag);
    }
    b.hidden_logit[e] = static_cast<float>(logit);
    // Box-Muller noise, then the click.
    const double u1 = 1.0 - Uniform(rng), u2 = Uniform(rng);
    logit += c.noise * std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
    b.labels[e] = Uniform(rng) < 1.0 / (1.0 + std::exp(-logit)) ? 1.0f : 0.0f;
  }
  return b;
}

// The feeds of a batch: "<feature>_ids", "<feature>_offsets" and, for
// training, "labels".
FeedMap Feeds(const std::vector<Feature>& features, const Batch& b, bool with_labels) {
  FeedMap feeds;
  for (size_t t = 0; t < features.size(); ++t) {
    feeds.emplace_back(features[t].name + "_ids", Tensor::FromVector<int64_t>(b.ids[t]));
    feeds.emplace_back(features[t].name + "_offsets", Tensor::FromVector<int64_t>(b.offsets[t]));
  }
  if (with_labels) feeds.emplace_back("labels", Tensor::FromVector<float>(b.labels, Shape{b.n, 1}));
  return feeds;
}

// Names of what the training loop runs.
struct CtrGraph {
  std::string init, train, loss, logits;  // logits: evaluation's, through read-only table views
  std::vector<std::string> metrics;  // --hash: each hash shard's metrics
};

// Builds the model of the top of the file; the graph's error on failure.
Status BuildGraph(Graph& g, const std::vector<Feature>& features, const Config& c, CtrGraph* cg) {
  std::vector<Output> bags, eval_bags;
  std::vector<Output> table_reads;  // for the table optimizer's var_list
  for (size_t t = 0; t < features.size(); ++t) {
    const Feature& f = features[t];
    EmbeddingTable table;
    if (c.hash) {
      HashEmbeddingTableOptions o;
      o.num_shards = c.shards;
      o.seed = static_cast<int64_t>(c.seed * 16 + t + 1);
      o.min_count = c.min_count;
      o.ttl_steps = c.ttl_steps;
      o.max_rows = c.max_rows;
      table = NewHashEmbeddingTable(g, f.name, c.dim, o);
    } else {
      EmbeddingTableOptions o;
      o.num_shards = std::min(c.shards, f.rows);
      o.seed = static_cast<int64_t>(c.seed * 16 + t + 1);  // nonzero: the same init in every mode
      table = NewEmbeddingTable(g, f.name, f.rows, c.dim, o);
    }
    SF_RETURN_IF_ERROR(g.status());
    auto ids = ops::Placeholder(g, DType::kInt64, {-1}, f.name + "_ids");
    auto offsets = ops::Placeholder(g, DType::kInt64, {-1}, f.name + "_offsets");
    bags.push_back(ops::EmbeddingLookupBag(g, table, ids, offsets, c.combiner));
    // Evaluation reads the tables through a view: it makes no hash row and
    // counts no sighting, so the held-out set never changes the model.
    eval_bags.push_back(ops::EmbeddingLookupBag(g, ReadOnlyView(table), ids, offsets, c.combiner));
    // Minimize takes variable reads; a read of the shard stands for it (it is
    // never run: nothing fetches it).
    // A hash table's shard handles stand for themselves.
    for (const Output& shard : table.shards)
      table_reads.push_back(c.hash ? shard : ops::ReadVariable(g, shard, DType::kFloat32));
    if (c.hash)
      for (const Output& m : ops::HashEmbeddingShardMetrics(g, table)) cg->metrics.push_back(m.name());
  }
  const int64_t width = c.dim * static_cast<int64_t>(features.size());
  const double a1 = std::sqrt(6.0 / static_cast<double>(width + c.hidden));
  auto w1 = ops::Variable(g, "mlp/w1", ops::RandomUniform(g, {width, c.hidden}, -a1, a1, c.seed * 16 + 8));
  auto b1 = ops::Variable(g, "mlp/b1", ops::Zeros(g, DType::kFloat32, {c.hidden}));
  const double a2 = std::sqrt(6.0 / static_cast<double>(c.hidden + 1));
  auto w2 = ops::Variable(g, "mlp/w2", ops::RandomUniform(g, {c.hidden, 1}, -a2, a2, c.seed * 16 + 9));
  auto b2 = ops::Variable(g, "mlp/b2", ops::Zeros(g, DType::kFloat32, {1}));
  auto mlp_logits = [&](const std::vector<Output>& in, const std::string& name) {
    auto h = ops::Relu(g, ops::MatMul(g, ops::Concat(g, in, 1), w1) + b1);
    return ops::Identity(g, ops::MatMul(g, h, w2) + b2, name);
  };
  auto logits = mlp_logits(bags, "logits");
  auto eval_logits = mlp_logits(eval_bags, "eval_logits");
  auto y = ops::Placeholder(g, DType::kFloat32, {-1, 1}, "labels");
  // Logistic loss, stable form: softplus(z) - y z.
  auto loss = ops::Identity(g, ops::Mean(g, ops::Softplus(g, logits) - y * logits), "loss");
  SF_RETURN_IF_ERROR(g.status());

  Result<Operation> tables = c.table_optimizer == "sgd"
                           ? GradientDescentOptimizer(c.table_lr).Minimize(g, loss, table_reads)
                           : AdagradOptimizer(c.table_lr).Minimize(g, loss, table_reads);
  if (!tables.ok()) return tables.status();
  auto mlp = AdamOptimizer(c.mlp_lr).Minimize(g, loss, {w1, b1, w2, b2});
  if (!mlp.ok()) return mlp.status();
  const Operation train = ops::NoOp(g, {*tables, *mlp}, "train");
  const Operation init = ops::GlobalVariablesInitializer(g);
  SF_RETURN_IF_ERROR(g.status());
  cg->init = init.name();
  cg->train = train.name();
  cg->loss = loss.name();
  cg->logits = eval_logits.name();
  return Status::OK();
}

struct Report {
  double auc = 0, oracle_auc = 0, final_loss = 0;
  double init_secs = 0, train_secs = 0, data_secs = 0;
  int64_t start_step = 0;  // steps a restored checkpoint had done
  int64_t checkpoints = 0; // checkpoints written
  HashEmbeddingMetrics hash;  // --hash: summed over every shard of every table
};

// AUC of the model's logits on the test batches.
template <typename S>
Result<double> Evaluate(S& s, const CtrGraph& cg, const std::vector<Feature>& features,
                        const std::vector<Batch>& test) {
  std::vector<float> scores, labels;
  for (const Batch& b : test) {
    auto r = s.Run(Feeds(features, b, false), {cg.logits});
    if (!r.ok()) return r.status().WithPrefix("evaluating");
    const float* z = (*r)[0].template data<float>();
    scores.insert(scores.end(), z, z + b.n);
    labels.insert(labels.end(), b.labels.begin(), b.labels.end());
  }
  return Auc(scores, labels);
}

// Initialises the variables, trains on batches drawn from train_rng (made
// step by step, so the log is never held in memory) and evaluates on `test`;
// S is Session or ClusterSession (the same Run API). The first error.
template <typename S>
Status Train(S& s, const CtrGraph& cg, const std::vector<Feature>& features, const Config& c,
             std::mt19937_64& train_rng, const std::vector<Batch>& test, bool json, Report* rep) {
  auto t0 = Clock::now();
  auto init = s.Run({}, {}, {cg.init});
  if (!init.ok()) return init.status().WithPrefix("initialising the variables");
  rep->init_secs = SecondsSince(t0);
  if (!json) std::printf("initialised the variables in %.2f s\n", rep->init_secs);
  if (!c.checkpoint_dir.empty() && Session::CheckpointStep(c.checkpoint_dir).ok()) {
    // Resume: the newest committed checkpoint that reads back, and the data
    // stream advanced past the batches it already trained on.
    Status r = s.RestoreCheckpoint(c.checkpoint_dir, -1, &rep->start_step);
    if (!r.ok()) return r.WithPrefix("resuming from " + c.checkpoint_dir);
    if (rep->start_step > c.steps)
      return InvalidArgument("the checkpoint in " + c.checkpoint_dir + " is at step " +
                             std::to_string(rep->start_step) + ", past --steps " + std::to_string(c.steps));
    for (int64_t step = 1; step <= rep->start_step; ++step) MakeBatch(features, c, c.batch, train_rng);
    if (!json) std::printf("resumed from %s at step %lld\n", c.checkpoint_dir.c_str(), (long long)rep->start_step);
  }
  CheckpointSchedule schedule(c.checkpoint_every > 0 ? c.checkpoint_every : std::max<int64_t>(c.steps / 4, 1),
                              c.checkpoint_every_s);
  auto checkpoint = [&](int64_t step) -> Status {
    auto id = s.SaveCheckpoint(c.checkpoint_dir, step, /*keep_last=*/3);
    if (!id.ok()) return id.status().WithPrefix("checkpointing step " + std::to_string(step));
    ++rep->checkpoints;
    if (json) JsonLine().Add("checkpoint", *id).Add("step", step).Print();
    else std::printf("checkpoint %lld at step %lld\n", (long long)*id, (long long)step);
    return Status::OK();
  };
  double loss_sum = 0;
  int64_t loss_n = 0;
  for (int64_t step = rep->start_step + 1; step <= c.steps; ++step) {
    t0 = Clock::now();
    const Batch b = MakeBatch(features, c, c.batch, train_rng);
    rep->data_secs += SecondsSince(t0);
    t0 = Clock::now();
    auto r = s.Run(Feeds(features, b, true), {cg.loss}, {cg.train}, c.trace->For(step - rep->start_step - 1));
    if (!r.ok()) return r.status().WithPrefix("step " + std::to_string(step));
    rep->train_secs += SecondsSince(t0);
    loss_sum += (*r)[0].template data<float>()[0];
    ++loss_n;
    const bool last = step == c.steps;
    if (last || (c.eval_every > 0 && step % c.eval_every == 0)) {
      auto auc = Evaluate(s, cg, features, test);
      if (!auc.ok()) return auc.status();
      rep->auc = *auc;
      rep->final_loss = loss_sum / static_cast<double>(loss_n);
      const double eps = static_cast<double>((step - rep->start_step) * c.batch) / rep->train_secs;
      if (json)
        JsonLine().Add("step", step).Add("loss", rep->final_loss).Add("auc", *auc).Add("examples_per_sec", eps).Print();
      else
        std::printf("step %5lld  train loss %.4f  test AUC %.4f  %.0f examples/s\n", (long long)step,
                    rep->final_loss, *auc, eps);
      std::fflush(stdout);
      loss_sum = 0;
      loss_n = 0;
    }
    if (!c.checkpoint_dir.empty() && (step == c.steps || schedule.Due(step))) SF_RETURN_IF_ERROR(checkpoint(step));
  }
  if (!c.checkpoint_dir.empty() && rep->start_step == c.steps) {
    // Nothing left to train: report the restored model.
    auto auc = Evaluate(s, cg, features, test);
    if (!auc.ok()) return auc.status();
    rep->auc = *auc;
  }
  if (!cg.metrics.empty()) {
    auto m = s.Run({}, cg.metrics);
    if (!m.ok()) return m.status().WithPrefix("reading the hash tables' metrics");
    for (const Tensor& t : *m) {
      SF_ASSIGN_OR_RETURN(HashEmbeddingMetrics x, HashEmbeddingMetricsOf(t));
      rep->hash.rows += x.rows;
      rep->hash.admitted += x.admitted;
      rep->hash.rejected += x.rejected;
      rep->hash.evicted += x.evicted;
      rep->hash.bytes += x.bytes;
    }
  }
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  const auto wall0 = Clock::now();
  Flags flags;
  flags.Int("rows", 10'000'000, "rows of the user table (item: rows/10, category: rows/1000)")
      .Int("dim", 32, "embedding width")
      .Int("shards", 4, "shards per table")
      .Int("hidden", 64, "units of the MLP's hidden layer")
      .Int("steps", 2000, "training steps")
      .Int("batch", 2048, "examples per step")
      .Int("test", 50'000, "held-out examples for the AUC")
      .Int("eval-every", 0, "evaluate every N steps (0: steps / 4)")
      .Int("seed", 1, "seed of the data and the initialisation")
      .Double("zipf", 1.1, "Zipf exponent of the ids")
      .Double("noise", 0.5, "stddev of the noise added to the hidden logit")
      .Double("table-lr", 0.3, "learning rate of the tables' optimizer")
      .Double("mlp-lr", 0.003, "Adam learning rate of the MLP")
      .String("combiner", "mean", "bag combiner: sum, mean or sqrtn")
      .Bool("hash", "hash tables fed raw 64-bit feature ids (--rows sizes only the log's hidden id space)")
      .Int("min-count", 2, "--hash: sightings before an id gets a row")
      .Int("ttl-steps", 1000, "--hash: rows unused this many steps are deleted (0: never)")
      .Int("max-rows", 0, "--hash: rows per shard at most (0: no limit)")
      .String("checkpoint-dir", "", "checkpoint into DIR (periodically and at the end) and resume from its newest")
      .Int("checkpoint-every", 0, "steps between checkpoints (0: steps / 4)")
      .Double("checkpoint-every-s", 0, "also checkpoint when this many seconds passed (0: off)")
      .String("table-optimizer", "adagrad", "sparse optimizer of the tables: adagrad or sgd")
      .Int("nodes", 2, "node processes of the local cluster")
      .Int("replicas", 2, "2: the local cluster keeps a backup of every slot (shardflow node --replicas); 1: none")
      .String("cluster", "", "HOST:PORT of a member of your own cluster (instead of a local one)")
      .String("tls-dir", "", "the cluster's credentials directory (with --cluster; shardflow certs init)")
      .Bool("local", "train in-process with a Session (no cluster)")
      .Bool("json", "print JSON lines on stdout; the last is the summary");
  DeclareTraceFlags(flags);
  ParseOrExit(flags, argc, argv, "embedding_ctr");
  const TraceFlag trace(flags);
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  Config c;
  c.rows = flags.GetInt("rows");
  c.dim = flags.GetInt("dim");
  c.shards = flags.GetInt("shards");
  c.hidden = flags.GetInt("hidden");
  c.steps = flags.GetInt("steps");
  c.batch = flags.GetInt("batch");
  c.test = flags.GetInt("test");
  c.eval_every = flags.GetInt("eval-every");
  c.seed = static_cast<uint64_t>(flags.GetInt("seed"));
  c.zipf = flags.GetDouble("zipf");
  c.noise = flags.GetDouble("noise");
  c.table_lr = flags.GetDouble("table-lr");
  c.mlp_lr = flags.GetDouble("mlp-lr");
  c.combiner = flags.GetString("combiner");
  c.hash = flags.GetBool("hash");
  c.min_count = flags.GetInt("min-count");
  c.ttl_steps = flags.GetInt("ttl-steps");
  c.max_rows = flags.GetInt("max-rows");
  c.table_optimizer = flags.GetString("table-optimizer");
  c.checkpoint_dir = flags.GetString("checkpoint-dir");
  c.checkpoint_every = flags.GetInt("checkpoint-every");
  c.checkpoint_every_s = flags.GetDouble("checkpoint-every-s");
  c.trace = &trace;
  const int64_t nodes = flags.GetInt("nodes");
  const int64_t replicas = flags.GetInt("replicas");
  const std::string cluster_addr = flags.GetString("cluster");
  const std::string tls_dir = flags.GetString("tls-dir");
  const bool local = flags.GetBool("local"), json = flags.GetBool("json");
  std::string bad;
  if (c.rows < 10 || c.rows > (int64_t{1} << 31))
    bad = "--rows must be in [10, 2^31], got " + std::to_string(c.rows);
  else if (c.dim < 1) bad = "--dim must be at least 1, got " + std::to_string(c.dim);
  else if (c.shards < 1 || c.shards > c.rows) bad = "--shards must be in [1, rows], got " + std::to_string(c.shards);
  else if (c.hidden < 1) bad = "--hidden must be at least 1, got " + std::to_string(c.hidden);
  else if (c.steps < 1) bad = "--steps must be at least 1, got " + std::to_string(c.steps);
  else if (c.batch < 1) bad = "--batch must be at least 1, got " + std::to_string(c.batch);
  else if (c.test < 2) bad = "--test must be at least 2, got " + std::to_string(c.test);
  else if (c.eval_every < 0) bad = "--eval-every must be >= 0, got " + std::to_string(c.eval_every);
  else if (c.checkpoint_every < 0 || c.checkpoint_every_s < 0)
    bad = "--checkpoint-every and --checkpoint-every-s must be >= 0";
  else if (!(c.zipf > 0)) bad = "--zipf must be positive";
  else if (!(c.noise >= 0)) bad = "--noise must be >= 0";
  else if (c.combiner != "sum" && c.combiner != "mean" && c.combiner != "sqrtn")
    bad = "--combiner must be sum, mean or sqrtn, got '" + c.combiner + "'";
  else if (c.min_count < 0 || c.ttl_steps < 0 || c.max_rows < 0)
    bad = "--min-count, --ttl-steps and --max-rows must be >= 0";
  else if (c.table_optimizer != "adagrad" && c.table_optimizer != "sgd")
    bad = "--table-optimizer must be adagrad or sgd, got '" + c.table_optimizer + "'";
  else if (!local && cluster_addr.empty() && (nodes < 1 || nodes > 16))
    bad = "--nodes must be in [1, 16], got " + std::to_string(nodes);
  else if (replicas < 1 || replicas > 2)
    bad = "--replicas must be 1 or 2, got " + std::to_string(replicas);
  else if (!cluster_addr.empty() && tls_dir.empty())
    bad = "--cluster needs --tls-dir (the cluster's credentials)";
  else if (!cluster_addr.empty() && local)
    bad = "--cluster and --local exclude each other";
  if (!bad.empty()) {
    std::fprintf(stderr, "embedding_ctr: %s (see --help)\n", bad.c_str());
    return 2;
  }
  if (c.eval_every == 0) c.eval_every = std::max<int64_t>(1, c.steps / 4);

  // The data, before any session: its cost is reported apart.
  auto t0 = Clock::now();
  const std::vector<Feature> features = MakeFeatures(c);
  std::mt19937_64 train_rng(c.seed), test_rng(c.seed ^ 0x5eed7e57ULL);
  std::vector<Batch> test;
  std::vector<float> hidden, test_labels;
  for (int64_t done = 0; done < c.test;) {
    const int64_t n = std::min<int64_t>(8192, c.test - done);
    test.push_back(MakeBatch(features, c, n, test_rng));
    hidden.insert(hidden.end(), test.back().hidden_logit.begin(), test.back().hidden_logit.end());
    test_labels.insert(test_labels.end(), test.back().labels.begin(), test.back().labels.end());
    done += n;
  }
  Report rep;
  rep.data_secs = SecondsSince(t0);
  rep.oracle_auc = Auc(hidden, test_labels);
  if (!json)
    std::printf("made the Zipf tables and %lld test examples in %.2f s (oracle AUC %.4f)\n", (long long)c.test,
                rep.data_secs, rep.oracle_auc);

  Graph g;
  CtrGraph cg;
  Status built = BuildGraph(g, features, c, &cg);
  if (!built.ok()) return Fail(built);

  std::string mode;
  int64_t used_nodes = 0;
  double node_peak_mb = 0;  // the largest peak RSS of the local cluster's nodes
  Status trained;
  if (local) {
    mode = "local";
    SessionOptions so;
    so.num_cpu_devices = static_cast<int>(c.shards);
    Session s(g, so);
    trained = Train(s, cg, features, c, train_rng, test, json, &rep);
  } else {
    LocalCluster cluster;
    ClusterOptions co;
    if (cluster_addr.empty()) {
      mode = "local_cluster";
      cluster.SetReplicas(static_cast<int>(replicas));
      Status st = cluster.Start(static_cast<int>(nodes));
      if (!st.ok()) return Fail(st.WithPrefix("starting the local cluster"));
      if (replicas > 1 && nodes > 1) {
        st = cluster.WaitBackups(static_cast<int>(nodes), 30000);
        if (!st.ok()) return Fail(st.WithPrefix("waiting for the slots' backups"));
      }
      co.address = cluster.addresses()[0];
      co.tls_dir = cluster.tls_dir();
    } else {
      mode = "cluster";
      co.address = cluster_addr;
      co.tls_dir = tls_dir;
    }
    // Initialising a big table takes longer than the default request timeout.
    co.request_timeout_ms = 120000;
    auto s = ClusterSession::Connect(g, co);
    if (!s.ok()) return Fail(s.status().WithPrefix("connecting to " + co.address));
    used_nodes = static_cast<int64_t>((*s)->tasks().size());
    if (!json) std::printf("training on %lld nodes (%s)\n", (long long)used_nodes, co.address.c_str());
    trained = Train(**s, cg, features, c, train_rng, test, json, &rep);
    for (size_t i = 0; i < cluster.addresses().size(); ++i)
      node_peak_mb = std::max(node_peak_mb, static_cast<double>(cluster.PeakRssBytes(static_cast<int>(i))) / 1e6);
  }
  if (!trained.ok()) return Fail(trained);

  // Only the steps this run trained (a resumed run skips the restored ones).
  const double eps = rep.train_secs > 0 ? static_cast<double>((c.steps - rep.start_step) * c.batch) / rep.train_secs : 0;
  const double wall = SecondsSince(wall0);
  if (json) {
    JsonLine()
        .Add("mode", mode)
        .Add("steps", c.steps)
        .Add("batch", c.batch)
        .Add("dim", c.dim)
        .Add("final_loss", rep.final_loss)
        .Add("oracle_auc", rep.oracle_auc)
        .Add("init_secs", rep.init_secs)
        .Add("data_secs", rep.data_secs)
        .Add("train_secs", rep.train_secs)
        .Add("wall_secs", wall)
        .Add("auc", rep.auc)
        .Add("examples_per_sec", eps)
        .Add("rows", c.rows)
        .Add("start_step", rep.start_step)
        .Add("checkpoints", rep.checkpoints)
        .Add("shards", c.shards)
        .Add("nodes", used_nodes)
        .Add("replicas", replicas)
        .Add("node_peak_rss_mb", node_peak_mb)
        .Add("hash", c.hash)
        .Add("hash_rows", rep.hash.rows)
        .Add("hash_admitted", rep.hash.admitted)
        .Add("hash_rejected", rep.hash.rejected)
        .Add("hash_evicted", rep.hash.evicted)
        .Add("hash_bytes", rep.hash.bytes)
        .Print();
  } else {
    std::printf("test AUC %.4f (oracle %.4f), %.0f examples/s; init %.2f s, data %.2f s, wall %.1f s\n", rep.auc,
                rep.oracle_auc, eps, rep.init_secs, rep.data_secs, wall);
  }
  return 0;
}
