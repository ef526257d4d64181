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

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Double("gib", 2.0, "GiB of the embedding table (the Adagrad slot adds as much again)")
      .Int("dim", 32, "embedding width (float32 columns)")
      .Double("touched", 0.01, "fraction of rows one training step updates before the incremental save")
      .String("dir", "/tmp", "parent folder of the scratch folder (checkpoint and raw file)")
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
