// The math of sharded embedding tables, shared by the in-memory variable
// service and the variable shard actors: which shard holds a global id, the
// gather-and-combine of one shard's rows into per-example partial sums, and
// sparse optimizer updates (duplicates summed first).
//
// A table of `rows` rows is split over K shard variables. Partitioning:
// - mod:   id lives in shard id % K at local row id / K;
// - range: shard k holds a contiguous block; the first rows % K shards hold
//          one row more (TF's "div" strategy).
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/optimizer_spec.h"
#include "kernels/update_origin.h"
#include "shardflow/attr.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

class ComputePool;

// kHash: a hash table (kernels/hash_embedding.h) keyed by any int64 id; id
// lives in shard HashShardOf(id, K) and is its own key there (rows is 0).
enum class EmbeddingPartition : uint8_t { kMod = 0, kRange = 1, kHash = 2 };
// kSqrtn: each id weighs 1/sqrt(the example's id count) (TF's "sqrtn").
enum class EmbeddingCombiner : uint8_t { kSum = 0, kMean = 1, kSqrtn = 2 };

// The shard of a hash table that holds id: splitmix64's finalizer (a
// bijective mix of all 64 bits) mapped onto [0, num_shards) by its high
// bits (Lemire's multiply-shift: no division per id), so neighbouring and
// negative ids spread evenly. Inside a shard, use the mix's low bits.
// REQUIRES: num_shards >= 1.
inline uint64_t MixId(int64_t id) {
  uint64_t z = static_cast<uint64_t>(id) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
inline int64_t HashShardOf(int64_t id, int64_t num_shards) {
  return static_cast<int64_t>((static_cast<unsigned __int128>(MixId(id)) * static_cast<uint64_t>(num_shards)) >> 64);
}

// Where one shard sits in its table.
struct EmbeddingShardSpec {
  std::string table;  // for error messages
  int64_t rows = 0;   // rows of the whole table
  int64_t num_shards = 1;
  int64_t shard = 0;
  EmbeddingPartition partition = EmbeddingPartition::kMod;
};

// Parses "mod", "range" or "hash"; InvalidArgument naming the value otherwise.
Result<EmbeddingPartition> ParseEmbeddingPartition(const std::string& s);
// Parses "sum", "mean" or "sqrtn"; InvalidArgument naming the value otherwise.
Result<EmbeddingCombiner> ParseEmbeddingCombiner(const std::string& s);
// OK when rows >= num_shards >= 1 (any rows for kHash) and 0 <= shard <
// num_shards; else InvalidArgument naming the table.
Status CheckShardSpec(const EmbeddingShardSpec& s);
// The number of rows shard k of the table holds.
int64_t EmbeddingShardRows(int64_t rows, int64_t num_shards, int64_t shard,
                           EmbeddingPartition partition);

// Maps global ids to local rows of one shard: local row for ids it holds,
// -1 for ids of other shards. InvalidArgument naming the table and the
// first id outside [0, rows).
Status LocalRowsOf(const EmbeddingShardSpec& s, const int64_t* ids, int64_t n,
                   std::vector<int64_t>* local);

// One gather-and-combine: every id with its example (segment) number.
struct EmbeddingGather {
  Tensor ids;          // int64 [n] global ids
  Tensor segment_ids;  // int64 [n], each in [0, num_segments)
  int64_t num_segments = 0;
  EmbeddingCombiner combiner = EmbeddingCombiner::kSum;
  // A hash shard's deduplicated gather (BuildHashShardGather): ids are the
  // shard's unique ids [m]; position i of the shard's part of the batch is
  // example segment_ids[i] reading ids[unique_index[i]] (int32 [n']); weights
  // (float32 [num_segments]) were taken over the whole batch. Invalid else.
  Tensor unique_index;
  Tensor weights;
  int64_t step_id = 0;  // the step that looks up (a hash shard pins its rows)
  // ids are this shard's local rows already, split out of the batch once for
  // every shard by EmbeddingSplitIds (segments "split"), with weights taken
  // over the whole batch: the shard reads only its own ids.
  bool local_rows = false;
  // An evaluation's lookup (EmbeddingTable::read_only): a hash shard makes
  // no row, counts no sighting and moves no row's last step or frequency.
  bool read_only = false;
  // A counting lookup of a hash shard changes it (sightings, new rows): the
  // shard does that once per origin, and only reads for a step run again.
  UpdateOrigin origin;
};

// The deduplicated gather a hash shard receives: the ids of q that shard
// s.shard holds, each once, with where each occurrence goes (see
// EmbeddingGather). InvalidArgument naming the table for a bad segment id.
Status BuildHashShardGather(const EmbeddingShardSpec& s, const EmbeddingGather& q, EmbeddingGather* out);

// The shard's partial [num_segments, dim] result: the sum, over ids held by
// this shard, of its row times the example's weight (1 for sum, 1/count for
// mean, count taken over ALL ids of the example, so summing the partials of
// every shard gives the mean). Examples with no id are zero. table: the
// shard's value [shard_rows, dim], float32. Errors name the table and id.
// The shard first picks its own ids out of the batch in one pass; all later
// work touches only those. With a pool, a large gather (8192 or more of the
// shard's ids) whose segment ids never decrease (every lookup builder's) is
// split over the intra-op threads at segment boundaries: the row fetches are
// cache misses, and two threads overlap twice as many.
Status EmbeddingGatherCombine(const EmbeddingShardSpec& s, const EmbeddingGather& q,
                              const Tensor& table, Tensor* out, ComputePool* pool = nullptr);

// The per-id weight of each segment (1, or 1/count for mean; 0 for empty).
std::vector<float> SegmentWeights(const EmbeddingGather& q);

// The shard's sparse gradient from the gradient of its partial dy
// [num_segments, dim]: unique local rows (int64 [m], in first-seen order)
// and their summed gradients (float32 [m, dim]). Errors name the table and
// id. With a pool, the sums of many unique rows are split over the intra-op
// threads (each row is summed by one thread, in batch order: same results).
Status EmbeddingSparseGrad(const EmbeddingShardSpec& s, const EmbeddingGather& q,
                           const Tensor& dy, Tensor* rows, Tensor* values,
                           ComputePool* pool = nullptr);

// Unique keys of keys[0..n) in first-seen order, and for each key its index
// into unique (an open-addressing hash: linear in n).
void UniqueRows(const int64_t* keys, int64_t n, std::vector<int64_t>* unique,
                std::vector<int32_t>* index);

// One sparse optimizer update, applied where the variable lives.
struct SparseApplyRequest {
  // Any kind (kernels/optimizer_spec.h); the ops exist for those with a
  // sparse_op. Lazy: only the touched rows of the slots move (Adam's beta
  // powers advance once).
  OptimizerKind optimizer = OptimizerKind::kGradientDescent;
  std::vector<int64_t> var_ids;  // the variable first, then its slots
  std::vector<Tensor> scalars;   // hyperparameters as in the dense op
  bool use_nesterov = false;     // Momentum
  Tensor indices;                // int64 [m] local rows of the variable
  Tensor values;                 // float32 [m, dim]
  // True when the caller guarantees no duplicate index (EmbeddingSparseGrad's
  // output): the apply skips merging. A false claim double-applies rows.
  bool indices_unique = false;
  // A hash shard's update: indices are ids; slot_init gives the slots'
  // starting values (the optimizer's); step_id is the step that looked them up.
  std::vector<double> slot_init;
  int64_t step_id = 0;
  // Who made it (kernels/update_origin.h): a shard applies each origin once.
  UpdateOrigin origin;
};

// Applies req to vars (variable then slots, rank 2 [rows, dim]; Adam's beta
// powers are scalars). Duplicate indices are summed first, so each row gets
// one update, by the same formula as the dense update of that row
// (kernels/optimizer_math.h). Lazy: only the touched rows' slots move; the
// beta powers advance once per call. InvalidArgument naming the optimizer,
// index or shape on bad input; vars are unchanged then.
// With a pool, the per-row updates (rows are unique by then) are split over
// the intra-op threads.
Status ApplySparseOptimizerUpdate(const SparseApplyRequest& req, const std::vector<Tensor*>& vars,
                                  ComputePool* pool = nullptr);

// ---- the attributes and inputs of the embedding ops (graph/ops/embedding_ops.cc)

// How a lookup groups its ids into examples.
enum class EmbeddingSegments : uint8_t {
  kDense = 0,       // ids [batch, k]: example b holds row b
  kOffsets = 1,     // ids [n] + offsets [batch]: bag b is ids[offsets[b] : offsets[b+1])
  kSegmentIds = 2,  // ids [n] + segment ids [n] in [0, attr num_segments)
  // One shard's part of a lookup, split once for all shards (EmbeddingSplitIds):
  // local rows [n_k], their segment ids [n_k], the weights [num_segments].
  kSplit = 3,
  // A sparse update's rows and their gradients, rows [n] and values [n, dim]
  // (several lookups' EmbeddingSparseGrad outputs, concatenated): duplicate
  // rows are summed into one update. Sparse updates only, never a lookup.
  kRows = 4,
};

// The parsed attributes of an EmbeddingShardLookup / EmbeddingSparseApply* node.
struct EmbeddingOpAttrs {
  EmbeddingShardSpec spec;
  EmbeddingCombiner combiner = EmbeddingCombiner::kSum;
  bool no_combiner = false;  // combiner "none": every id its own output row (dense only)
  EmbeddingSegments segments = EmbeddingSegments::kDense;
  int64_t num_segments = -1;  // kSegmentIds
  bool read_only = false;     // EmbeddingShardLookup of a read-only table view
};

// Reads attrs table, table_rows, num_shards, shard (0 when absent: the
// split op has none), partition, combiner ("sum", "mean", "sqrtn", "none"),
// segments ("dense", "offsets", "segment_ids", "split") and num_segments;
// InvalidArgument naming the attribute that is wrong.
Result<EmbeddingOpAttrs> ParseEmbeddingOpAttrs(const AttrMap& attrs);

// A lookup's ids split by shard (the EmbeddingSplitIds op): per shard, the
// local rows of its ids and their segment ids, in batch order; the weights
// of each segment over the whole batch (1 for sum: SegmentWeights).
struct EmbeddingIdSplit {
  std::vector<Tensor> rows;      // int64 [n_k] per shard
  std::vector<Tensor> segments;  // int64 [n_k] per shard
  Tensor weights;                // float32 [num_segments]
};

// Splits one lookup's ids (inputs as for BuildEmbeddingGather; a.spec.shard
// is ignored) over the table's fixed shards in two passes over the ids
// (count each shard's ids, then write each shard's part), so that each shard
// op then reads only its own; big batches in chunks on pool's threads (null
// or small batches: the caller's). InvalidArgument naming the table for an id out of range, a
// bad segment or offset, a hash table or combiner none.
Status SplitEmbeddingIds(const EmbeddingOpAttrs& a, const Tensor& ids, const Tensor* segments,
                         EmbeddingIdSplit* out, ComputePool* pool = nullptr);

// The gather of one shard from its part of a split (segments "split": local
// rows, segment ids, weights), checked as far as it can be without the shard
// (dtypes, sizes); the rows and segments are checked where they are read.
// InvalidArgument naming the table.
Status BuildSplitShardGather(const EmbeddingOpAttrs& a, const Tensor& rows, const Tensor& segments,
                             const Tensor& weights, EmbeddingGather* q);

// Builds the gather of one lookup from its run-time inputs (ids int32 or
// int64; segments: offsets or segment ids, null for dense), and the shape of
// the lookup's output without the trailing dim. InvalidArgument naming the
// table and the bad offset, segment or shape.
Status BuildEmbeddingGather(const EmbeddingOpAttrs& a, const Tensor& ids, const Tensor* segments,
                            EmbeddingGather* q, Shape* out_prefix);

}  // namespace sf
