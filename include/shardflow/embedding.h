// Sharded embedding tables: a `rows x dim` float32 table split over K shard
// variables "<table>/part_<k>", looked up where the rows live.
//
//   sf::EmbeddingTableOptions o;
//   o.num_shards = 4;                                    // one per device
//   auto table = sf::NewEmbeddingTable(g, "items", 10'000'000, 32, o);
//   auto ids = sf::ops::Placeholder(g, sf::DType::kInt64, {-1, 8}, "ids");
//   auto emb = sf::ops::EmbeddingLookup(g, table, ids, "sum");  // [batch, 32]
//   ...
//   auto train = sf::GradientDescentOptimizer(0.1).Minimize(g, loss);  // sparse for the table
//
// Each lookup adds one EmbeddingShardLookup per shard: it takes the shard's
// handle, so placement puts it on the shard's device, and the shard actor
// combines its own rows; the partials are summed on the caller. Minimize
// turns the gradient of each shard lookup into a sparse update (unique rows,
// duplicates summed) applied in the shard actor: GradientDescent, Adagrad,
// RowwiseAdagrad, lazy Adam and Ftrl support it.
//
// Partitioning (id -> shard, local row):
// - "mod":   shard id % K, row id / K (spreads hot low ids over shards);
// - "range": contiguous blocks, the first rows % K shards one row longer.
//
// Hash tables, for ids from an unbounded space (hashed feature ids):
//
//   sf::HashEmbeddingTableOptions h;
//   h.num_shards = 4;
//   h.min_count = 3;          // admission: an id gets a row once seen 3 times
//   h.ttl_steps = 10'000;     // eviction: rows unused for 10k steps go
//   h.max_rows = 1'000'000;   // per shard; LRU (or "lfu") beyond it
//   auto users = sf::NewHashEmbeddingTable(g, "users", 32, h);
//   auto emb = sf::ops::EmbeddingLookup(g, users, ids, "mean");  // any int64 ids
//
// An id lives in shard (splitmix64(id) * K) >> 64, in a hash table inside the shard
// actor that keeps each row and its optimizer slots side by side. Lookups are
// the same three builders; each shard receives its own ids of the batch,
// deduplicated, and sends back only the combined rows. An id not admitted
// (yet) reads zeros and allocates nothing. Minimize gives hash tables the same
// sparse updates (SGD, Adagrad, RowwiseAdagrad, lazy Adam, Ftrl); the first
// optimizer to update a table is its only one. Checkpoints save each shard's
// rows, slots, filter counts and last-seen steps (incremental saves: the rows
// touched since), and restore into another shard count.
// kernels/hash_embedding.h describes admission, steps and eviction exactly.
#pragma once

#include <string>
#include <vector>

#include "shardflow/graph.h"

namespace sf {

struct EmbeddingTableOptions {
  int64_t num_shards = 1;          // K >= 1 shard variables (<= rows)
  std::string partition = "mod";   // "mod" or "range" (see above)
  // "uniform": U(-scale, scale); "truncated_normal": stddev scale; "zeros".
  // Each shard fills its own rows with one random op (no dense constant).
  std::string initializer = "uniform";
  double scale = -1.0;             // < 0: 1 / sqrt(dim)
  int64_t seed = 0;                // 0: derived from node names; else shard k uses seed + k
  bool trainable = true;           // found by Optimizer::Minimize
};

// A hash table's options (NewHashEmbeddingTable); every limit is per shard.
struct HashEmbeddingTableOptions {
  int64_t num_shards = 1;          // K >= 1
  std::string initializer = "uniform";  // of each new row: "uniform", "truncated_normal", "zeros"
  double scale = -1.0;             // < 0: 1 / sqrt(dim)
  int64_t seed = 0;                // a row's initial value depends on (seed, id) only
  bool trainable = true;           // found by Optimizer::Minimize
  // Admission: an id gets a row once seen min_count times (0 or 1: at once),
  // counted in a count-min sketch of filter_depth x filter_width counters;
  // then with probability admit_probability (1: always).
  int64_t min_count = 0;
  double admit_probability = 1.0;
  int64_t filter_width = 1 << 16;
  int64_t filter_depth = 4;
  // Eviction: rows not touched for more than ttl_steps steps (0: never), and
  // beyond max_rows rows (0: no limit) the least recently ("lru") or least
  // frequently ("lfu") used ones.
  int64_t ttl_steps = 0;
  int64_t max_rows = 0;
  std::string eviction = "lru";
  // Cold tier: with ram_budget_bytes > 0 each shard keeps at most that much
  // of rows (their floats, metadata and index) in RAM and the rest in a
  // RocksDB database under cold_dir (required then), one per shard; a
  // lookup's misses are read in one batch and come back hot. The databases
  // are a cache: initialising or restoring the table empties them.
  int64_t ram_budget_bytes = 0;
  std::string cold_dir;
};

// A table in a graph: its shards' VarHandles in shard order.
struct EmbeddingTable {
  std::string name;                // unique scoped name; shards are "<name>/part_<k>"
  int64_t rows = 0;                // 0 for a hash table
  int64_t dim = 0;
  std::string partition = "mod";   // "hash" for a hash table
  std::vector<Output> shards;      // VarHandle per shard
  bool hash = false;               // made by NewHashEmbeddingTable
  // Lookups through this view only read (ReadOnlyView).
  bool read_only = false;
  bool valid() const { return !shards.empty(); }
};

// The same table for evaluation or serving: its lookups read the rows as
// they are and change nothing. A hash table makes no row for an id it does
// not hold (reading its default value, zeros), counts no sighting for
// admission, expires nothing and moves no row's last step or frequency, so
// evaluating between training steps leaves the table as it was. A loss
// that reads a table through a view cannot train it (Minimize refuses).
EmbeddingTable ReadOnlyView(const EmbeddingTable& table);

// Adds a table: K VarHandles and K initializer Assigns (run by
// ops::GlobalVariablesInitializer). On bad options (rows < K, dim < 1, an
// unknown partition or initializer) the graph records InvalidArgument naming
// the table and the result is invalid.
EmbeddingTable NewEmbeddingTable(Graph& g, const std::string& name, int64_t rows, int64_t dim,
                                 const EmbeddingTableOptions& options = {});

// The number of rows shard k holds (0 for a hash table: it varies).
int64_t EmbeddingTableShardRows(const EmbeddingTable& t, int64_t k);

// Adds a hash table of dim-wide rows keyed by any int64 id: K VarHandles
// and K initializers (ops::GlobalVariablesInitializer) that make each shard
// an empty table. On bad options (dim < 1, K < 1, a negative min_count,
// ttl_steps, max_rows or ram_budget_bytes, a budget without a cold_dir or
// the other way round, admit_probability outside (0, 1], an unknown
// initializer or eviction) the graph records InvalidArgument naming the
// table and the result is invalid.
EmbeddingTable NewHashEmbeddingTable(Graph& g, const std::string& name, int64_t dim,
                                     const HashEmbeddingTableOptions& options = {});

// One hash table shard's counters, as HashEmbeddingMetricsOf reads them
// (hit rate: hot_hits / (hot_hits + cold_hits)).
struct HashEmbeddingMetrics {
  int64_t rows = 0;      // rows held now
  int64_t capacity = 0;  // row slots allocated
  int64_t admitted = 0;  // rows created
  int64_t rejected = 0;  // lookups of ids not admitted (each id once per lookup)
  int64_t evicted = 0;   // rows deleted by ttl_steps or max_rows
  int64_t bytes = 0;     // RAM of rows, slots, index and filter
  int64_t step = 0;      // sparse updates applied
  int64_t skipped = 0;   // gradient rows of ids that had no row
  int64_t cold_rows = 0;  // rows in the cold tier
  int64_t hot_hits = 0;   // lookups of ids found in RAM
  int64_t cold_hits = 0;  // lookups of ids read back from the cold tier
  int64_t disk_bytes = 0; // the cold tier's bytes on disk
};
// The metrics in a fetched value of ops::HashEmbeddingShardMetrics;
// InvalidArgument for a tensor that is not one.
Result<HashEmbeddingMetrics> HashEmbeddingMetricsOf(const Tensor& t);

// What a checkpoint holds of one hash table shard (the saved value of its
// variable "<table>/part_<k>"), as `shardflow ckpt inspect` prints it.
struct HashEmbeddingShardSummary {
  int64_t dim = 0, num_shards = 0, shard = 0;
  HashEmbeddingMetrics metrics;
  std::string optimizer;  // "" before the first update
  struct Row {
    int64_t id = 0, last_seen = 0, freq = 0;
    std::vector<float> values;  // the value (dim), then each optimizer slot (dim each)
  };
  std::vector<Row> rows;  // the smallest ids first
};
// Summarizes a saved hash table shard with up to max_rows of its rows;
// InvalidArgument when t is not a hash table shard's state, DataLoss when it
// is inconsistent.
Result<HashEmbeddingShardSummary> SummarizeHashEmbeddingShard(const Tensor& t, int64_t max_rows);

namespace ops {

// ids [batch, k] (int32 or int64) -> [batch, dim] with combiner "sum",
// "mean" or "sqrtn" (each id weighs 1/sqrt(the example's id count)), or
// [batch, k, dim] with "none". An id outside [0, rows) of a fixed table is
// a run-time InvalidArgument naming the table and the id; a hash table
// takes any id. An unknown combiner is a graph error naming the table.
Output EmbeddingLookup(Graph& g, const EmbeddingTable& table, Output ids,
                       const std::string& combiner = "sum");
// Bags (PyTorch's EmbeddingBag): ids [n] and offsets [batch]; bag b is
// ids[offsets[b] : offsets[b+1]) (the last runs to n; offsets[0] == 0).
// -> [batch, dim], "sum", "mean" or "sqrtn"; an empty bag gives zeros.
Output EmbeddingLookupBag(Graph& g, const EmbeddingTable& table, Output ids, Output offsets,
                          const std::string& combiner = "sum");
// Bags given by the example of each id: segment_ids [n] in [0, num_segments).
Output EmbeddingLookupSegments(Graph& g, const EmbeddingTable& table, Output ids,
                               Output segment_ids, int64_t num_segments,
                               const std::string& combiner = "sum");

// One int64 [12] output per shard of a hash table: its metrics now (read
// them with HashEmbeddingMetricsOf). Records InvalidArgument on g for a
// table that is not a hash table.
std::vector<Output> HashEmbeddingShardMetrics(Graph& g, const EmbeddingTable& table);

}  // namespace ops
}  // namespace sf
