// Hash against fixed embedding tables on bench_embedding's workload: a
// rows x 32 table (10M rows by default), batches of 4096 examples x 8 ids
// drawn from Zipf(1.1) over the rows (ranks scattered by the fixed
// permutation rank * 2654435761 mod rows), sum combiner, a linear layer
// 32 -> 1, logistic loss, trained by sparse SGD and by sparse Adagrad. The
// fixed table is rows x dim from the start; the hash table
// (NewHashEmbeddingTable) makes a row for each id on first sight. Both run in
// the same process, one after the other, with the same batches.
//
// One JSON line per (table, optimizer) (keys table, optimizer, shards,
// examples_per_sec, ms_per_step, rows_after) and a summary line with
// hash_examples_per_sec and fixed_examples_per_sec (the mean over the
// optimizers), their ratio, and each optimizer's pair.
//
// --cold: the cold tier instead. A stream of --steps + --warmup distinct
// batches, Zipf(--zipf, by default 1.05 here: the issue's) over --distinct-ids ids (drawn
// by rejection-inversion as each step needs them, untimed, so a stream of any
// length over any id space costs no memory), trains a hash table with Adagrad
// twice: all in RAM for the first --ram-steps steps (0: not at all, for
// streams whose table cannot fit), then with --ram-budget-mib per shard (or
// --ram-budget-gib for the whole table) and the rest in RocksDB under
// --cold-dir (a fresh directory under /tmp by default, removed at the end),
// with --ttl-steps expiry when given. The summary has peak_rss_bytes,
// hit_rate, examples_per_sec, ram_examples_per_sec, cold_rows, disk_bytes and
// seconds (the whole run, batches drawn included).
//
// --policies: the overhead of admission and eviction. The hash table runs
// with Adagrad as is and with min_count 2, ttl_steps 10 and max_rows of a
// quarter of the rows the plain run made per shard (LRU); the summary has
// plain_examples_per_sec, policies_examples_per_sec, their ratio, and the
// policies run's rows, rejected and evicted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <cmath>
#include <memory>
#include <random>

#include "bench/zipf_batches.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
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
  bool stream = false;           // --cold: batches drawn per step (bench::MakeStreamBatch)
  int64_t ram_budget_bytes = 0;  // --cold: per shard
  // --policies: admission and eviction on the hash table
  int64_t min_count = 0, ttl_steps = 0, max_rows = 0;
  std::string cold_dir;
};

struct BenchResult {
  double examples_per_sec = 0, ms_per_step = 0, init_secs = 0;
  int64_t rows_after = 0;  // the hash table's rows at the end (the fixed table's rows)
};

// The shared workload (bench/zipf_batches.h).
void MakeBatches(const BenchConfig& c, std::vector<Tensor>* ids, std::vector<Tensor>* labels) {
  bench::MakeZipfBatches(c.rows, c.zipf, c.num_batches, c.batch, c.ids_per_example, ids, labels);
}

Result<BenchResult> RunOne(const BenchConfig& c, int shards, bool hash, const std::string& optimizer,
                          const std::vector<Tensor>& ids, const std::vector<Tensor>& labels,
                          HashEmbeddingMetrics* sum = nullptr);

// The process's peak resident set (VmHWM), in bytes; 0 when unknown.
int64_t PeakRssBytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  long long kb = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
  std::fclose(f);
  return kb * 1024;
}

Result<BenchResult> RunOne(const BenchConfig& c, int shards, bool hash, const std::string& optimizer,
                          const std::vector<Tensor>& ids, const std::vector<Tensor>& labels,
                          HashEmbeddingMetrics* sum) {
  Graph g;
  EmbeddingTable table;
  if (hash) {
    HashEmbeddingTableOptions o;
    o.num_shards = shards;
    o.seed = 1;
    o.ram_budget_bytes = c.ram_budget_bytes;
    o.cold_dir = c.cold_dir;
    o.min_count = c.min_count;
    o.ttl_steps = c.ttl_steps;
    o.max_rows = c.max_rows;
    table = NewHashEmbeddingTable(g, "table", c.dim, o);
  } else {
    EmbeddingTableOptions o;
    o.num_shards = shards;
    o.seed = 1;
    table = NewEmbeddingTable(g, "table", c.rows, c.dim, o);
  }
  auto x = ops::Placeholder(g, DType::kInt64, {c.batch, c.ids_per_example}, "ids");
  auto y = ops::Placeholder(g, DType::kFloat32, {c.batch, 1}, "labels");
  auto emb = ops::EmbeddingLookup(g, table, x, "sum");
  auto w = ops::Variable(g, "w", ops::RandomUniform(g, {c.dim, 1}, -0.1, 0.1, 2));
  auto b = ops::Variable(g, "b", ops::Zeros(g, DType::kFloat32, {1}));
  auto logits = ops::MatMul(g, emb, w) + b;
  auto loss = ops::Mean(g, ops::Softplus(g, logits) - y * logits);
  Result<Operation> train = optimizer == "adagrad" ? AdagradOptimizer(0.1).Minimize(g, loss)
                                                   : GradientDescentOptimizer(0.1).Minimize(g, loss);
  if (!train.ok()) return train.status();
  Operation init = ops::GlobalVariablesInitializer(g);
  std::vector<Output> metrics;
  if (hash) metrics = ops::HashEmbeddingShardMetrics(g, table);
  SF_RETURN_IF_ERROR(g.status());
  SessionOptions so;
  so.num_cpu_devices = shards;
  Session s(g, so);
  auto t0 = std::chrono::steady_clock::now();
  SF_RETURN_IF_ERROR(s.Run({}, Fetches{}, {init}).status());
  BenchResult r;
  r.init_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t next = 0;
  double run_secs = 0;  // a stream's time in Run, its batches' drawing left out
  auto step = [&]() -> Status {
    const size_t i = static_cast<size_t>(next++ % static_cast<int64_t>(ids.size()));
    return s.Run({{"ids", ids[i]}, {"labels", labels[i]}}, Fetches{}, {*train}).status();
  };
  const bench::ZipfSampler zipf(c.rows, c.zipf);
  Tensor batch_ids, batch_labels;
  auto stream_step = [&]() -> Status {
    bench::MakeStreamBatch(zipf, c.rows, next++, c.batch, c.ids_per_example, &batch_ids, &batch_labels);
    const auto start = std::chrono::steady_clock::now();
    Status st = s.Run({{"ids", batch_ids}, {"labels", batch_labels}}, Fetches{}, {*train}).status();
    run_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return st;
  };
  for (int64_t i = 0; i < c.warmup; ++i) SF_RETURN_IF_ERROR(c.stream ? stream_step() : step());
  t0 = std::chrono::steady_clock::now();
  run_secs = 0;
  for (int64_t i = 0; i < c.steps; ++i) SF_RETURN_IF_ERROR(c.stream ? stream_step() : step());
  const double secs = c.stream ? run_secs : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.ms_per_step = 1000.0 * secs / c.steps;
  r.examples_per_sec = c.batch * c.steps / secs;
  r.rows_after = c.rows;
  if (hash) {
    SF_ASSIGN_OR_RETURN(auto m, s.Run({}, metrics));
    r.rows_after = 0;
    for (const Tensor& t : m) {
      SF_ASSIGN_OR_RETURN(HashEmbeddingMetrics hm, HashEmbeddingMetricsOf(t));
      r.rows_after += hm.rows;
      if (sum) {
        sum->rows += hm.rows;
        sum->cold_rows += hm.cold_rows;
        sum->hot_hits += hm.hot_hits;
        sum->cold_hits += hm.cold_hits;
        sum->disk_bytes += hm.disk_bytes;
        sum->bytes += hm.bytes;
        sum->admitted += hm.admitted;
        sum->rejected += hm.rejected;
        sum->evicted += hm.evicted;
      }
    }
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("rows", 10'000'000, "id space (the fixed table's rows)").Int("dim", 32, "embedding width")
      .Int("batch", 4096, "examples per batch").Int("ids", 8, "ids per example")
      .Int("steps", 30, "timed steps").Int("warmup", 5, "untimed steps")
      .Int("shards", 2, "shards of each table (num_cpu_devices = shards)")
      .String("optimizers", "sgd,adagrad", "sparse optimizers to run: sgd, adagrad or both")
      .String("tables", "fixed,hash", "tables to run: fixed, hash or both (one alone: for profiles)")
      .Bool("cold", "benchmark the cold tier instead (see the top of the file)")
      .Bool("policies", "benchmark admission and eviction instead (see the top of the file)")
      .Int("distinct-ids", 20'000'000, "--cold: the id space of the Zipf stream")
      .Int("ram-budget-mib", 64, "--cold: RAM for hot rows per shard")
      .Double("ram-budget-gib", 0, "--cold: RAM for the whole table's hot rows, split over the shards (instead of --ram-budget-mib)")
      .Int("ram-steps", -1, "--cold: timed steps of the all-in-RAM run (-1: --steps; 0: none)")
      .Int("ttl-steps", 0, "--cold: the table's ttl_steps (0: no expiry)")
      .String("cold-dir", "", "--cold: where the RocksDB cold tiers go (default: a fresh /tmp directory)")
      .Double("zipf", 0, "Zipf exponent of the ids (default 1.1, with --cold 1.05: the issue's cold run)")
      .Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_hash_embedding");
  KeepTensorMemoryWarm();  // as bench_embedding: big tensors keep their pages
  BenchConfig c;
  c.rows = flags.GetInt("rows");
  c.dim = flags.GetInt("dim");
  c.batch = flags.GetInt("batch");
  c.ids_per_example = flags.GetInt("ids");
  c.steps = flags.GetInt("steps");
  c.warmup = flags.GetInt("warmup");
  const int shards = static_cast<int>(flags.GetInt("shards"));
  c.zipf = flags.GetDouble("zipf") > 0 ? flags.GetDouble("zipf") : flags.GetBool("cold") ? 1.05 : 1.1;
  if (flags.GetBool("policies")) {
    std::vector<Tensor> ids, labels;
    MakeBatches(c, &ids, &labels);
    HashEmbeddingMetrics plain_m, pol_m;
    auto plain = RunOne(c, shards, true, "adagrad", ids, labels, &plain_m);
    if (!plain.ok()) {
      std::fprintf(stderr, "bench_hash_embedding: plain: %s\n", plain.status().ToString().c_str());
      return 1;
    }
    BenchConfig p = c;
    p.min_count = 2;
    p.ttl_steps = 10;
    p.max_rows = std::max<int64_t>(16, plain_m.rows / shards / 4);
    auto pol = RunOne(p, shards, true, "adagrad", ids, labels, &pol_m);
    if (!pol.ok()) {
      std::fprintf(stderr, "bench_hash_embedding: policies: %s\n", pol.status().ToString().c_str());
      return 1;
    }
    JsonLine()
        .Add("system", "shardflow").Add("summary", true).Add("policies", true).Add("shards", shards)
        .Add("rows", c.rows).Add("max_rows", p.max_rows)
        .Add("plain_examples_per_sec", plain->examples_per_sec)
        .Add("policies_examples_per_sec", pol->examples_per_sec)
        .Add("policies_over_plain", plain->examples_per_sec > 0 ? pol->examples_per_sec / plain->examples_per_sec : 0.0)
        .Add("plain_rows", plain_m.rows).Add("policies_rows", pol_m.rows)
        .Add("policies_rejected", pol_m.rejected).Add("policies_evicted", pol_m.evicted)
        .Print();
    return 0;
  }
  if (flags.GetBool("cold")) {
    c.rows = flags.GetInt("distinct-ids");
    c.stream = true;
    c.ttl_steps = flags.GetInt("ttl-steps");
    const double gib = flags.GetDouble("ram-budget-gib");
    const int64_t per_shard = gib > 0 ? static_cast<int64_t>(gib * double(1 << 30)) / std::max(1, shards)
                                      : flags.GetInt("ram-budget-mib") << 20;
    const int64_t ram_steps = flags.GetInt("ram-steps") < 0 ? c.steps : flags.GetInt("ram-steps");
    if (c.rows < shards || shards < 1 || per_shard < (1 << 20) || c.ttl_steps < 0) {
      std::fprintf(stderr, "bench_hash_embedding: --cold needs --distinct-ids >= shards >= 1, a RAM budget of at "
                           "least 1 MiB per shard and --ttl-steps >= 0\n");
      return 2;
    }
    std::string dir = flags.GetString("cold-dir");
    bool made = false;
    if (dir.empty()) {
      char tmpl[] = "/tmp/sf_bench_cold_XXXXXX";
      if (!mkdtemp(tmpl)) {
        std::fprintf(stderr, "bench_hash_embedding: cannot make a directory under /tmp\n");
        return 1;
      }
      dir = tmpl;
      made = true;
    }
    const auto t0 = std::chrono::steady_clock::now();
    BenchResult ram;
    if (ram_steps > 0) {
      BenchConfig r = c;
      r.steps = ram_steps;
      auto rr = RunOne(r, shards, true, "adagrad", {}, {});
      if (!rr.ok()) {
        std::fprintf(stderr, "bench_hash_embedding: all in RAM: %s\n", rr.status().ToString().c_str());
        return 1;
      }
      ram = *rr;
    }
    BenchConfig cold = c;
    cold.ram_budget_bytes = per_shard;
    cold.cold_dir = dir;
    HashEmbeddingMetrics m;
    auto r = RunOne(cold, shards, true, "adagrad", {}, {}, &m);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (made) std::filesystem::remove_all(dir);
    if (!r.ok()) {
      std::fprintf(stderr, "bench_hash_embedding: cold tier: %s\n", r.status().ToString().c_str());
      return 1;
    }
    const double hits = static_cast<double>(m.hot_hits + m.cold_hits);
    JsonLine()
        .Add("system", "shardflow").Add("summary", true).Add("cold", true).Add("shards", shards)
        .Add("distinct_ids", c.rows).Add("zipf", c.zipf).Add("steps", c.steps).Add("ttl_steps", c.ttl_steps)
        .Add("ram_budget_bytes", cold.ram_budget_bytes * shards).Add("ram_budget_bytes_per_shard", cold.ram_budget_bytes)
        .Add("examples_per_sec", r->examples_per_sec).Add("ram_examples_per_sec", ram.examples_per_sec)
        .Add("cold_over_ram", ram.examples_per_sec > 0 ? r->examples_per_sec / ram.examples_per_sec : 0.0)
        .Add("hit_rate", hits > 0 ? static_cast<double>(m.hot_hits) / hits : 0.0)
        .Add("hot_rows", m.rows).Add("cold_rows", m.cold_rows).Add("evicted", m.evicted).Add("hot_bytes", m.bytes)
        .Add("disk_bytes", m.disk_bytes).Add("peak_rss_bytes", PeakRssBytes()).Add("seconds", secs)
        .Print();
    return 0;
  }
  if (c.rows < shards || shards < 1 || c.steps < 1) {
    std::fprintf(stderr, "bench_hash_embedding: need rows >= shards >= 1 and steps >= 1\n");
    return 2;
  }
  std::vector<std::string> optimizers;
  const std::string list = flags.GetString("optimizers");
  for (const char* o : {"sgd", "adagrad"})
    if (list.find(o) != std::string::npos) optimizers.push_back(o);
  if (optimizers.empty()) {
    std::fprintf(stderr, "bench_hash_embedding: --optimizers must name sgd and/or adagrad, got '%s'\n", list.c_str());
    return 2;
  }
  std::vector<Tensor> ids, labels;
  MakeBatches(c, &ids, &labels);
  const bool json = flags.GetBool("json");
  double hash_sum = 0, fixed_sum = 0;
  JsonLine summary;
  summary.Add("system", "shardflow").Add("summary", true).Add("shards", shards).Add("rows", c.rows);
  for (const std::string& opt : optimizers) {
    double eps[2] = {0, 0};
    for (const bool hash : {false, true}) {
      if (flags.GetString("tables").find(hash ? "hash" : "fixed") == std::string::npos) continue;
      auto r = RunOne(c, shards, hash, opt, ids, labels);
      if (!r.ok()) {
        std::fprintf(stderr, "bench_hash_embedding: %s %s: %s\n", hash ? "hash" : "fixed", opt.c_str(),
                     r.status().ToString().c_str());
        return 1;
      }
      eps[hash] = r->examples_per_sec;
      if (json)
        JsonLine().Add("system", "shardflow").Add("table", hash ? "hash" : "fixed").Add("optimizer", opt)
            .Add("shards", shards).Add("rows", c.rows).Add("dim", c.dim).Add("batch", c.batch)
            .Add("examples_per_sec", r->examples_per_sec).Add("ms_per_step", r->ms_per_step)
            .Add("init_secs", r->init_secs).Add("rows_after", r->rows_after).Print();
      else
        std::printf("%s table, %s: %.0f examples/s (%.2f ms/step; init %.1f s; %lld rows)\n", hash ? "hash" : "fixed",
                    opt.c_str(), r->examples_per_sec, r->ms_per_step, r->init_secs,
                    static_cast<long long>(r->rows_after));
    }
    fixed_sum += eps[0];
    hash_sum += eps[1];
    summary.Add(opt + "_fixed_examples_per_sec", eps[0]).Add(opt + "_hash_examples_per_sec", eps[1]);
  }
  const double n = static_cast<double>(optimizers.size());
  if (json)
    summary.Add("hash_examples_per_sec", hash_sum / n).Add("fixed_examples_per_sec", fixed_sum / n)
        .Add("hash_over_fixed", fixed_sum > 0 ? hash_sum / fixed_sum : 0.0).Print();
  else
    std::printf("hash %.0f vs fixed %.0f examples/s (ratio %.2f)\n", hash_sum / n, fixed_sum / n,
                fixed_sum > 0 ? hash_sum / fixed_sum : 0.0);
  return 0;
}
