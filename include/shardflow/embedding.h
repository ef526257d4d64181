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
// duplicates summed) applied in the shard actor: GradientDescent, Adagrad and
// lazy Adam support it.
//
// Partitioning (id -> shard, local row):
// - "mod":   shard id % K, row id / K (spreads hot low ids over shards);
// - "range": contiguous blocks, the first rows % K shards one row longer.
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

// A table in a graph: its shards' VarHandles in shard order.
struct EmbeddingTable {
  std::string name;                // unique scoped name; shards are "<name>/part_<k>"
  int64_t rows = 0;
  int64_t dim = 0;
  std::string partition = "mod";
  std::vector<Output> shards;      // VarHandle per shard
  bool valid() const { return !shards.empty(); }
};

// Adds a table: K VarHandles and K initializer Assigns (run by
// ops::GlobalVariablesInitializer). On bad options (rows < K, dim < 1, an
// unknown partition or initializer) the graph records InvalidArgument naming
// the table and the result is invalid.
EmbeddingTable NewEmbeddingTable(Graph& g, const std::string& name, int64_t rows, int64_t dim,
                                 const EmbeddingTableOptions& options = {});

// The number of rows shard k holds.
int64_t EmbeddingTableShardRows(const EmbeddingTable& t, int64_t k);

namespace ops {

// ids [batch, k] (int32 or int64) -> [batch, dim] with combiner "sum" or
// "mean", or [batch, k, dim] with "none". An id outside [0, rows) is a
// run-time InvalidArgument naming the table and the id.
Output EmbeddingLookup(Graph& g, const EmbeddingTable& table, Output ids,
                       const std::string& combiner = "sum");
// Bags (PyTorch's EmbeddingBag): ids [n] and offsets [batch]; bag b is
// ids[offsets[b] : offsets[b+1]) (the last runs to n; offsets[0] == 0).
// -> [batch, dim], "sum" or "mean"; an empty bag gives zeros.
Output EmbeddingLookupBag(Graph& g, const EmbeddingTable& table, Output ids, Output offsets,
                          const std::string& combiner = "sum");
// Bags given by the example of each id: segment_ids [n] in [0, num_segments).
Output EmbeddingLookupSegments(Graph& g, const EmbeddingTable& table, Output ids,
                               Output segment_ids, int64_t num_segments,
                               const std::string& combiner = "sum");

}  // namespace ops
}  // namespace sf
