// Checkpoint throughput: save and restore MB/s of an embedding table plus one
// same-size optimizer slot (an Adagrad accumulator) held as variables in a
// Session, into a RocksDB checkpoint directory, against the disk's raw
// sequential write speed measured by this program on the same filesystem.
//
//   build/bin/bench_checkpoint                 # 2 GiB table + 2 GiB slot = 4 GiB
//   build/bin/bench_checkpoint --gib 1         # 1 GiB table + 1 GiB slot
//
// Both variables are random (RandomUniform), so RocksDB's block compression
// cannot shrink them much and the bytes counted are the bytes written.
// MB is 10^6 bytes; MB/s counts the variables' bytes (table + slot).
// raw_write_mb_per_sec writes a file of the same size in 64 MiB chunks and
// fsyncs it, timing both. The save is Session::Save: every variable shard's
// snapshot in 4 MiB checksummed blocks, then the synced manifest commit.
// The restore reads the checkpoint back (mostly from the page cache, as it
// was just written) and assigns both variables.
// The table is a one-shard embedding table trained by sparse Adagrad: after
// the full save one step updates --touched (default 1%) of the rows, chosen
// at random without repeats, and Session::SaveIncremental writes only those
// rows of the table and of the slot (incremental_save_seconds);
// incremental_restore_seconds restores that increment composed over the base.
// The checkpoint directory and the raw file live in a fresh folder under
// --dir (default /tmp), removed at the end.
//
//   build/bin/bench_checkpoint --nodes 3       # node checkpoints on a local cluster
//
// With --nodes N: a --rows x --dim table (default 10M x 32) in N shards with
// their Adagrad slots, trained by a ClusterSession over N node processes on
// 127.0.0.1 that share one --checkpoint-dir. ClusterSession::SaveOnNodes
// (every node writes its own shards) is timed against ClusterSession::Save
// (the old path: every value read into this process and written by it),
// and RestoreFromNodes after zeroing the variables; client_peak_rss_growth_bytes
// is how far this process's peak RSS rose during the node save
// (client_path_peak_rss_growth_bytes: during the old path's save).
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/local_cluster.h"
#include "shardflow/cluster.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_checkpoint: %s\n", what.c_str());
  std::exit(1);
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Seconds to write `bytes` to path sequentially and fsync it; exits on error.
double RawWriteSeconds(const std::string& path, int64_t bytes) {
  const int64_t chunk = int64_t{64} << 20;
  std::vector<char> buf(chunk);
  // Non-constant bytes, so a compressing or deduplicating disk gains nothing.
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < buf.size(); ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    buf[i] = static_cast<char>(x);
  }
  auto t0 = std::chrono::steady_clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) Die("cannot create " + path);
  for (int64_t done = 0; done < bytes;) {
    const int64_t n = std::min(chunk, bytes - done);
    const ssize_t w = ::write(fd, buf.data(), static_cast<size_t>(n));
    if (w <= 0) Die("write to " + path + " failed");
    done += w;
  }
  if (::fsync(fd) != 0) Die("fsync of " + path + " failed");
  ::close(fd);
  return Seconds(t0);
}

// This process's resident and peak resident bytes (/proc/self/status).
std::pair<int64_t, int64_t> Rss() {
  FILE* f = std::fopen("/proc/self/status", "r");
  int64_t rss = 0, hwm = 0;
  if (!f) return {0, 0};
  char line[256];
  while (std::fgets(line, sizeof(line), f)) {
    long long kb = 0;
    if (std::sscanf(line, "VmRSS: %lld kB", &kb) == 1) rss = kb * 1024;
    if (std::sscanf(line, "VmHWM: %lld kB", &kb) == 1) hwm = kb * 1024;
  }
  std::fclose(f);
  return {rss, hwm};
}

// Peak RSS growth of this process while fn runs: the peak is reset first
// (clear_refs 5), so growth counts from the resident bytes before.
template <class Fn>
int64_t PeakGrowth(Fn fn) {
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
  const int64_t before = Rss().first;
  fn();
  return std::max<int64_t>(0, Rss().second - before);
}

// --nodes N: node checkpoints against the client path on a local cluster.
int RunNodes(const Flags& flags, const std::string& scratch) {
  const int nodes = static_cast<int>(flags.GetInt("nodes"));
  const int64_t rows = flags.GetInt("rows"), dim = flags.GetInt("dim");
  if (rows < nodes || dim < 1) Die("--rows must be at least --nodes and --dim positive");
  Graph g;
  EmbeddingTableOptions o;
  o.num_shards = nodes;
  o.scale = 0.05;
  o.seed = 1;
  EmbeddingTable emb = NewEmbeddingTable(g, "embedding", rows, dim, o);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 1}, "ids");
  auto loss = ops::Sum(g, ops::EmbeddingLookup(g, emb, ids, "sum"));
  auto train = AdagradOptimizer(0.01).Minimize(g, loss);
  if (!train.ok()) Die(train.status().ToString());
  Operation init = ops::GlobalVariablesInitializer(g);
  // Random accumulators (the initializer's constant would compress) and a
  // probe summing every variable, to check the restore brought them back.
  std::vector<Operation> fill, zero;
  std::vector<Output> sums;
  for (int i = 0; i < g.num_nodes(); ++i) {
    if (g.node(i).op != "VarHandle") continue;
    const Output v(&g, i, 0);
    auto shape = g.node(i).attrs.Get<PartialShape>("shape");
    if (!shape.ok() || !shape->fully_defined() || shape->dims().size() != 2) Die("variable without a 2-D shape");
    const Shape s = shape->dims();
    if (g.node(i).attrs.Get<std::string>("shared_name").value().find("accumulator") != std::string::npos)
      fill.push_back(Operation(&g, ops::Assign(g, v, ops::RandomUniform(g, s, 0.1, 1.0, 2 + i)).node));
    auto dims = ops::Const(g, std::vector<int32_t>{static_cast<int32_t>(s[0]), static_cast<int32_t>(s[1])});
    zero.push_back(Operation(&g, ops::Assign(g, v, ops::Fill(g, dims, ops::Const(g, 0.0f))).node));
    sums.push_back(ops::Sum(g, ops::ReadVariable(g, v, DType::kFloat32)));
  }
  Output probe = sums[0];
  for (size_t i = 1; i < sums.size(); ++i) probe = ops::Add(g, probe, sums[i]);
  if (!g.status().ok()) Die(g.status().ToString());

  const std::string root = scratch + "/nodes";
  std::filesystem::create_directories(root);
  examples::LocalCluster cluster;
  cluster.SetNodeArgs({"--checkpoint-dir", root});
  Status started = cluster.Start(nodes, 3600);
  if (!started.ok()) Die(started.ToString());
  ClusterOptions co;
  co.address = cluster.addresses()[0];
  co.tls_dir = cluster.tls_dir();
  co.tasks = nodes;
  auto s = ClusterSession::Connect(g, co);
  if (!s.ok()) Die(s.status().ToString());
  auto r = (*s)->Run({}, Fetches{}, {init});
  if (r.ok()) r = (*s)->Run({}, Fetches{}, fill);
  if (!r.ok()) Die(r.status().ToString());
  auto before = (*s)->Run({}, Fetches{probe});
  if (!before.ok()) Die(before.status().ToString());
  const int64_t bytes = 2 * rows * dim * 4;

  Result<int64_t> id = Unavailable("not saved");
  auto t0 = std::chrono::steady_clock::now();
  const int64_t node_growth = PeakGrowth([&] { id = (*s)->SaveOnNodes("ck", 1); });
  const double node_save_s = Seconds(t0);
  if (!id.ok()) Die(id.status().ToString());
  Result<int64_t> client_id = Unavailable("not saved");
  t0 = std::chrono::steady_clock::now();
  const int64_t client_growth = PeakGrowth([&] { client_id = (*s)->Save(scratch + "/client_ckpt", 1); });
  const double client_save_s = Seconds(t0);
  if (!client_id.ok()) Die(client_id.status().ToString());

  r = (*s)->Run({}, Fetches{}, zero);
  if (!r.ok()) Die(r.status().ToString());
  t0 = std::chrono::steady_clock::now();
  Status restored = (*s)->RestoreFromNodes("ck", *id);
  const double node_restore_s = Seconds(t0);
  if (!restored.ok()) Die(restored.ToString());
  auto after = (*s)->Run({}, Fetches{probe});
  if (!after.ok()) Die(after.status().ToString());
  if ((*after)[0].scalar_as<double>() != (*before)[0].scalar_as<double>())
    Die("the variables restored by the nodes differ from the saved ones");
  s->reset();  // the session before its nodes (the cluster stops them with the object)
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);

  const double mb = bytes / 1e6;
  if (!flags.GetBool("json"))
    std::printf("%d nodes, %lld x %lld table + Adagrad slot (%.2f GB): node save %.0f MB/s (%.1f s, client peak RSS "
                "+%.1f MB), client save %.0f MB/s (%.1f s, +%.1f MB), node restore %.0f MB/s (%.1f s)\n",
                nodes, (long long)rows, (long long)dim, bytes / 1e9, mb / node_save_s, node_save_s,
                node_growth / 1e6, mb / client_save_s, client_save_s, client_growth / 1e6, mb / node_restore_s,
                node_restore_s);
  JsonLine line;
  line.Add("nodes", static_cast<int64_t>(nodes)).Add("rows", rows).Add("dim", dim).Add("bytes", bytes)
      .Add("node_save_seconds", node_save_s).Add("node_save_mb_per_sec", mb / node_save_s)
      .Add("client_save_seconds", client_save_s).Add("client_save_mb_per_sec", mb / client_save_s)
      .Add("node_vs_client_save", client_save_s / node_save_s)
      .Add("node_restore_seconds", node_restore_s).Add("node_restore_mb_per_sec", mb / node_restore_s)
      .Add("client_peak_rss_growth_bytes", node_growth)
      .Add("client_path_peak_rss_growth_bytes", client_growth);
  line.Print();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Double("gib", 2.0, "GiB of the embedding table (the Adagrad slot adds as much again)")
      .Int("dim", 32, "embedding width (float32 columns)")
      .Double("touched", 0.01, "fraction of rows one training step updates before the incremental save")
      .String("dir", "/tmp", "parent folder of the scratch folder (checkpoint and raw file)")
      .Int("nodes", 0, "> 0: node checkpoints of a sharded table on this many local nodes (see above)")
      .Int("rows", 10000000, "with --nodes: the table's rows")
      .Bool("json", "print the result as one JSON line");
  ParseOrExit(flags, argc, argv, "bench_checkpoint");
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  const int64_t dim = flags.GetInt("dim");
  const double gib = flags.GetDouble("gib");
  if (dim < 1 || !(gib > 0)) Die("--dim and --gib must be positive");
  const int64_t rows = static_cast<int64_t>(std::llround(gib * (1 << 30) / (4.0 * dim)));
  if (rows < 1 || rows > INT32_MAX) Die("--gib gives " + std::to_string(rows) + " rows; 1 to 2^31-1 fit");
  const int64_t table_bytes = rows * dim * 4, total_bytes = 2 * table_bytes;

  std::string tmpl = flags.GetString("dir") + "/sf_bench_checkpoint_XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) Die("cannot create a scratch folder in " + flags.GetString("dir"));
  const std::string scratch = tmpl, ckpt_dir = scratch + "/ckpt";
  if (flags.GetInt("nodes") > 0) return RunNodes(flags, scratch);

  const double touched = flags.GetDouble("touched");
  if (!(touched > 0 && touched <= 1)) Die("--touched must be in (0, 1]");
  const int64_t num_touched = std::max<int64_t>(1, static_cast<int64_t>(std::llround(touched * rows)));

  Graph g;
  EmbeddingTableOptions o;
  o.scale = 0.05;
  o.seed = 1;
  EmbeddingTable emb = NewEmbeddingTable(g, "embedding", rows, dim, o);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 1}, "ids");
  auto loss = ops::Sum(g, ops::EmbeddingLookup(g, emb, ids, "sum"));
  auto train = AdagradOptimizer(0.01).Minimize(g, loss);
  if (!train.ok()) Die(train.status().ToString());
  Output table = emb.shards[0], accum;
  for (int i = 0; i < g.num_nodes(); ++i)
    if (g.node(i).op == "VarHandle" && g.node(i).attrs.Get<std::string>("shared_name").value() ==
                                           "embedding/part_0/Adagrad/accumulator")
      accum = Output(&g, i, 0);
  if (!accum.valid()) Die("no Adagrad accumulator in the graph");
  Operation init = ops::GlobalVariablesInitializer(g);
  const Shape shape{rows, dim};
  // Random accumulator values (the initializer's constant would compress).
  auto fill_accum = ops::Assign(g, accum, ops::RandomUniform(g, shape, 0.1, 1.0, 2));
  // Zeroes both variables, so the restore has to bring the values back.
  auto dims = ops::Const(g, std::vector<int32_t>{static_cast<int32_t>(rows), static_cast<int32_t>(dim)});
  auto zero_table = ops::Assign(g, table, ops::Fill(g, dims, ops::Const(g, 0.0f)));
  auto zero_accum = ops::Assign(g, accum, ops::Fill(g, dims, ops::Const(g, 0.0f)));
  // A read of every row's first elements, to check the restores assigned them.
  auto probe = ops::Add(g, ops::Sum(g, ops::ReadVariable(g, table, DType::kFloat32)),
                        ops::Sum(g, ops::ReadVariable(g, accum, DType::kFloat32)));
  if (!g.status().ok()) Die(g.status().ToString());

  double save_s = 0, restore_s = 0, raw_s = 0, inc_save_s = 0, inc_restore_s = 0;
  {
    Session s(g);
    auto t0 = std::chrono::steady_clock::now();
    auto r = s.Run({}, Fetches{}, {init, fill_accum.node});
    if (!r.ok()) Die(r.status().ToString());
    const double init_s = Seconds(t0);
    auto before = s.Run({}, Fetches{probe});
    if (!before.ok()) Die(before.status().ToString());
    if (!flags.GetBool("json"))
      std::printf("%lld rows x %lld float32 (%.2f GiB) + Adagrad slot, initialised in %.1f s\n",
                  (long long)rows, (long long)dim, table_bytes / double(1 << 30), init_s);

    t0 = std::chrono::steady_clock::now();
    auto id = s.Save(ckpt_dir, 1);
    save_s = Seconds(t0);
    if (!id.ok()) Die(id.status().ToString());

    // One sparse step over num_touched distinct random rows.
    std::vector<int64_t> perm(static_cast<size_t>(rows));
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(7);
    for (int64_t i = 0; i < num_touched; ++i)
      std::swap(perm[i], perm[i + static_cast<int64_t>(rng() % static_cast<uint64_t>(rows - i))]);
    perm.resize(static_cast<size_t>(num_touched));
    r = s.Run({{"ids", Tensor::FromVector<int64_t>(perm, {num_touched, 1})}}, Fetches{}, {*train});
    if (!r.ok()) Die(r.status().ToString());
    auto stepped = s.Run({}, Fetches{probe});
    if (!stepped.ok()) Die(stepped.status().ToString());
    t0 = std::chrono::steady_clock::now();
    auto inc = s.SaveIncremental(ckpt_dir, 2);
    inc_save_s = Seconds(t0);
    if (!inc.ok()) Die(inc.status().ToString());

    r = s.Run({}, Fetches{}, {zero_table.node, zero_accum.node});
    if (!r.ok()) Die(r.status().ToString());
    t0 = std::chrono::steady_clock::now();
    Status rs = s.Restore(ckpt_dir, *id);
    restore_s = Seconds(t0);
    if (!rs.ok()) Die(rs.ToString());
    auto after = s.Run({}, Fetches{probe});
    if (!after.ok()) Die(after.status().ToString());
    if ((*after)[0].scalar_as<double>() != (*before)[0].scalar_as<double>())
      Die("the restored variables differ from the saved ones");

    r = s.Run({}, Fetches{}, {zero_table.node, zero_accum.node});
    if (!r.ok()) Die(r.status().ToString());
    t0 = std::chrono::steady_clock::now();
    rs = s.Restore(ckpt_dir, *inc);
    inc_restore_s = Seconds(t0);
    if (!rs.ok()) Die(rs.ToString());
    after = s.Run({}, Fetches{probe});
    if (!after.ok()) Die(after.status().ToString());
    if ((*after)[0].scalar_as<double>() != (*stepped)[0].scalar_as<double>())
      Die("the variables restored from the increment differ from the saved ones");
  }
  std::error_code ec;
  const uintmax_t ckpt_bytes = [&] {
    uintmax_t n = 0;
    for (auto& e : std::filesystem::recursive_directory_iterator(ckpt_dir, ec))
      if (e.is_regular_file()) n += e.file_size();
    return n;
  }();
  std::filesystem::remove_all(ckpt_dir, ec);
  raw_s = RawWriteSeconds(scratch + "/raw", total_bytes);
  std::filesystem::remove_all(scratch, ec);

  const double mb = total_bytes / 1e6;
  JsonLine line;
  line.Add("bytes", total_bytes).Add("checkpoint_dir_bytes", static_cast<int64_t>(ckpt_bytes))
      .Add("save_mb_per_sec", mb / save_s).Add("restore_mb_per_sec", mb / restore_s)
      .Add("raw_write_mb_per_sec", mb / raw_s).Add("full_save_seconds", save_s)
      .Add("restore_seconds", restore_s).Add("raw_write_seconds", raw_s)
      .Add("save_vs_raw", raw_s / save_s).Add("touched_rows", num_touched)
      .Add("incremental_save_seconds", inc_save_s).Add("incremental_vs_full", inc_save_s / save_s)
      .Add("incremental_restore_seconds", inc_restore_s);
  if (!flags.GetBool("json"))
    std::printf("save %.0f MB/s (%.1f s), restore %.0f MB/s (%.1f s), raw write+fsync %.0f MB/s (%.1f s); "
                "save at %.0f%% of raw\n", mb / save_s, save_s, mb / restore_s, restore_s, mb / raw_s, raw_s,
                100 * raw_s / save_s);
  if (!flags.GetBool("json"))
    std::printf("incremental save of %lld touched rows %.3f s (%.2f%% of the full save); restore of base + "
                "increment %.1f s\n", (long long)num_touched, inc_save_s, 100 * inc_save_s / save_s, inc_restore_s);
  line.Print();
  return 0;
}
