// Sharded embedding tables: shard variables with per-shard initializers, and
// lookups as one EmbeddingShardLookup per shard summed on the caller (for a
// fixed table of several shards, after one EmbeddingSplitIds of the ids).
#include "shardflow/embedding.h"

#include <algorithm>
#include <cmath>

#include "kernels/embedding_math.h"
#include "kernels/hash_embedding.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

Output Lookup(Graph& g, const EmbeddingTable& t, Output ids, Output segments,
              const std::string& segments_kind, int64_t num_segments, const std::string& combiner) {
  if (!t.valid()) {
    g.RecordError(InvalidArgument("embedding lookup: the table '" + t.name + "' is not valid"));
    return Output();
  }
  if (combiner != "sum" && combiner != "mean" && combiner != "sqrtn" && combiner != "none") {
    g.RecordError(InvalidArgument("embedding table '" + t.name + "': unknown combiner '" + combiner +
                                  "' (expected sum, mean, sqrtn or none)"));
    return Output();
  }
  // A fixed table of several shards gets its ids split once, so each shard's
  // lookup (and sparse update) reads only its own ids instead of the batch.
  const int64_t K = static_cast<int64_t>(t.shards.size());
  int split = -1;
  if (K > 1 && t.partition != "hash" && combiner != "none") {
    AttrMap a;
    a.Set("table", t.name);
    a.Set("table_rows", t.rows);
    a.Set("num_shards", K);
    a.Set("partition", t.partition);
    a.Set("combiner", combiner);
    a.Set("segments", segments_kind);
    if (num_segments >= 0) a.Set("num_segments", num_segments);
    std::vector<Output> in = {ids};
    if (segments.valid()) in.push_back(segments);
    split = g.AddNode("EmbeddingSplitIds", in, std::move(a), t.name + "/split_ids");
    if (split < 0) return Output();
  }
  std::vector<Output> partials;
  for (size_t k = 0; k < t.shards.size(); ++k) {
    AttrMap a;
    a.Set("table", t.name);
    a.Set("table_rows", t.rows);
    a.Set("num_shards", static_cast<int64_t>(t.shards.size()));
    a.Set("shard", static_cast<int64_t>(k));
    a.Set("partition", t.partition);
    a.Set("combiner", combiner);
    a.Set("segments", split >= 0 ? "split" : segments_kind);
    if (num_segments >= 0) a.Set("num_segments", num_segments);
    if (t.read_only) a.Set("read_only", true);
    std::vector<Output> in = {t.shards[k], ids};
    if (segments.valid()) in.push_back(segments);
    if (split >= 0)
      in = {t.shards[k], Output(&g, split, static_cast<int>(2 * k)), Output(&g, split, static_cast<int>(2 * k + 1)),
            Output(&g, split, static_cast<int>(2 * K))};
    Output p = g.Add1("EmbeddingShardLookup", in, std::move(a),
                      t.name + "/lookup_" + std::to_string(k));
    if (!p.valid()) return Output();
    partials.push_back(p);
  }
  // Each id lives in exactly one shard, so the partials add up to the lookup.
  return partials.size() == 1 ? partials[0] : ops::AddN(g, partials);
}

}  // namespace

EmbeddingTable ReadOnlyView(const EmbeddingTable& table) {
  EmbeddingTable v = table;
  v.read_only = true;
  return v;
}

int64_t EmbeddingTableShardRows(const EmbeddingTable& t, int64_t k) {
  if (t.hash) return 0;
  auto p = ParseEmbeddingPartition(t.partition);
  return EmbeddingShardRows(t.rows, static_cast<int64_t>(t.shards.size()), k,
                            p.ok() ? *p : EmbeddingPartition::kMod);
}

EmbeddingTable NewEmbeddingTable(Graph& g, const std::string& name, int64_t rows, int64_t dim,
                                 const EmbeddingTableOptions& o) {
  EmbeddingTable t;
  const std::string unique = g.ScopedName(name);
  const std::string base = unique.substr(g.ScopedName("").size());
  const std::string who = "embedding table '" + unique + "'";
  auto part = ParseEmbeddingPartition(o.partition);
  Status bad;
  if (!part.ok()) bad = part.status().WithPrefix(who);
  else if (*part == EmbeddingPartition::kHash)
    bad = InvalidArgument(who + ": partition 'hash' is for NewHashEmbeddingTable (expected mod or range)");
  else if (o.num_shards < 1 || rows < o.num_shards)
    bad = InvalidArgument(who + ": needs rows >= num_shards >= 1, got " + std::to_string(rows) +
                          " rows and " + std::to_string(o.num_shards) + " shards");
  else if (dim < 1) bad = InvalidArgument(who + ": dim must be >= 1, got " + std::to_string(dim));
  else if (o.initializer != "uniform" && o.initializer != "truncated_normal" && o.initializer != "zeros")
    bad = InvalidArgument(who + ": unknown initializer '" + o.initializer +
                          "' (expected uniform, truncated_normal or zeros)");
  if (!bad.ok()) {
    g.RecordError(bad);
    return t;
  }
  const double scale = o.scale >= 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(dim));
  t.name = unique;
  t.rows = rows;
  t.dim = dim;
  t.partition = o.partition;
  for (int64_t k = 0; k < o.num_shards; ++k) {
    const std::string shard = base + "/part_" + std::to_string(k);
    const Shape shape = {EmbeddingShardRows(rows, o.num_shards, k, *part), dim};
    AttrMap ha;
    ha.Set("shared_name", unique + "/part_" + std::to_string(k));
    ha.Set("dtype", DType::kFloat32);
    ha.Set("shape", PartialShape(shape));
    ha.Set("trainable", o.trainable);
    ha.Set("_embedding_table", unique);
    ha.Set("_embedding_partition", o.partition);  // checkpoints record the layout
    Output h = g.Add1("VarHandle", {}, std::move(ha), shard);
    if (!h.valid()) return EmbeddingTable();
    // Each shard fills its own rows: the graph never holds the table.
    const int64_t seed = o.seed == 0 ? 0 : o.seed + k;
    Output init;
    if (o.initializer == "uniform")
      init = ops::RandomUniform(g, shape, -scale, scale, seed);
    else if (o.initializer == "truncated_normal")
      init = ops::TruncatedNormal(g, shape, scale, seed);
    else
      init = ops::Zeros(g, DType::kFloat32, shape);
    AttrMap ia;
    ia.Set("_initializer", true);
    if (g.AddNode("Assign", {h, init}, std::move(ia), shard + "/Assign") < 0) return EmbeddingTable();
    t.shards.push_back(h);
  }
  return t;
}

EmbeddingTable NewHashEmbeddingTable(Graph& g, const std::string& name, int64_t dim,
                                     const HashEmbeddingTableOptions& o) {
  EmbeddingTable t;
  const std::string unique = g.ScopedName(name);
  const std::string base = unique.substr(g.ScopedName("").size());
  HashShardConfig c;
  c.table = unique;
  c.num_shards = o.num_shards;
  c.dim = dim;
  c.scale = o.scale >= 0 ? o.scale : 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(dim, 1)));
  c.seed = o.seed;
  c.min_count = o.min_count;
  c.admit_probability = o.admit_probability;
  c.filter_width = o.filter_width;
  c.filter_depth = o.filter_depth;
  c.ttl_steps = o.ttl_steps;
  c.max_rows = o.max_rows;
  c.ram_budget_bytes = o.ram_budget_bytes;
  c.cold_dir = o.cold_dir;
  Status bad = CheckHashShardConfig(c);
  if (bad.ok() && o.ram_budget_bytes > 0 && o.cold_dir.empty())
    bad = InvalidArgument("hash embedding table '" + unique + "': ram_budget_bytes needs a cold_dir");
  if (bad.ok()) bad = ParseHashInitializer(o.initializer).status().WithPrefix("hash embedding table '" + unique + "'");
  if (bad.ok()) bad = ParseHashEviction(o.eviction).status().WithPrefix("hash embedding table '" + unique + "'");
  if (!bad.ok()) {
    g.RecordError(bad);
    return t;
  }
  t.name = unique;
  t.dim = dim;
  t.partition = "hash";
  t.hash = true;
  for (int64_t k = 0; k < o.num_shards; ++k) {
    const std::string shard = base + "/part_" + std::to_string(k);
    AttrMap ha;
    ha.Set("shared_name", unique + "/part_" + std::to_string(k));
    // The variable's value is the shard's saved state (kernels/hash_embedding.h).
    ha.Set("dtype", DType::kInt64);
    ha.Set("shape", PartialShape::UnknownDims(2));
    ha.Set("trainable", o.trainable);
    ha.Set("_hash_embedding", unique);
    ha.Set("_hash_dim", dim);
    Output h = g.Add1("VarHandle", {}, std::move(ha), shard);
    if (!h.valid()) return EmbeddingTable();
    AttrMap ia;
    ia.Set("table", unique);
    ia.Set("num_shards", o.num_shards);
    ia.Set("shard", k);
    ia.Set("dim", dim);
    ia.Set("initializer", o.initializer);
    ia.Set("scale", c.scale);
    ia.Set("seed", o.seed);
    ia.Set("min_count", o.min_count);
    ia.Set("admit_probability", o.admit_probability);
    ia.Set("filter_width", o.filter_width);
    ia.Set("filter_depth", o.filter_depth);
    ia.Set("ttl_steps", o.ttl_steps);
    ia.Set("max_rows", o.max_rows);
    ia.Set("eviction", o.eviction);
    ia.Set("ram_budget_bytes", o.ram_budget_bytes);
    ia.Set("cold_dir", o.cold_dir);
    ia.Set("_initializer", true);
    if (g.AddNode("HashEmbeddingShardInit", {h}, std::move(ia), shard + "/init") < 0) return EmbeddingTable();
    t.shards.push_back(h);
  }
  return t;
}

Result<HashEmbeddingMetrics> HashEmbeddingMetricsOf(const Tensor& t) {
  if (!t.valid() || t.dtype() != DType::kInt64 || t.num_elements() != kNumHashShardMetrics)
    return InvalidArgument("hash embedding metrics must be int64 [" + std::to_string(kNumHashShardMetrics) +
                           "], got " + t.DebugString(0));
  const int64_t* p = t.data<int64_t>();
  HashEmbeddingMetrics m;
  m.rows = p[0];
  m.capacity = p[1];
  m.admitted = p[2];
  m.rejected = p[3];
  m.evicted = p[4];
  m.bytes = p[5];
  m.step = p[6];
  m.skipped = p[7];
  m.cold_rows = p[8];
  m.hot_hits = p[9];
  m.cold_hits = p[10];
  m.disk_bytes = p[11];
  return m;
}

Result<HashEmbeddingShardSummary> SummarizeHashEmbeddingShard(const Tensor& t, int64_t max_rows) {
  if (!IsHashShardState(t)) return InvalidArgument("not a hash embedding table shard: " + t.DebugString(0));
  SF_ASSIGN_OR_RETURN(HashStateSummary s, SummarizeHashState(t, max_rows));
  HashEmbeddingShardSummary out;
  out.dim = s.dim;
  out.num_shards = s.num_shards;
  out.shard = s.shard;
  SF_ASSIGN_OR_RETURN(out.metrics, HashEmbeddingMetricsOf(HashShardMetricsTensor(s.metrics)));
  out.optimizer = s.optimizer;
  for (auto& r : s.rows)
    out.rows.push_back(HashEmbeddingShardSummary::Row{r.first, r.second.last_seen, r.second.freq,
                                                      std::move(r.second.values)});
  return out;
}

namespace ops {

std::vector<Output> HashEmbeddingShardMetrics(Graph& g, const EmbeddingTable& table) {
  if (!table.hash || !table.valid()) {
    g.RecordError(InvalidArgument("HashEmbeddingShardMetrics: '" + table.name + "' is not a hash embedding table"));
    return {};
  }
  std::vector<Output> out;
  for (size_t k = 0; k < table.shards.size(); ++k) {
    AttrMap a;
    a.Set("table", table.name);
    out.push_back(g.Add1("HashEmbeddingShardStats", {table.shards[k]}, std::move(a),
                         table.name + "/metrics_" + std::to_string(k)));
  }
  return out;
}

Output EmbeddingLookup(Graph& g, const EmbeddingTable& table, Output ids,
                       const std::string& combiner) {
  return Lookup(g, table, ids, Output(), "dense", -1, combiner);
}

Output EmbeddingLookupBag(Graph& g, const EmbeddingTable& table, Output ids, Output offsets,
                          const std::string& combiner) {
  if (!offsets.valid()) {
    g.RecordError(InvalidArgument("EmbeddingLookupBag on '" + table.name + "': offsets are invalid"));
    return Output();
  }
  return Lookup(g, table, ids, offsets, "offsets", -1, combiner);
}

Output EmbeddingLookupSegments(Graph& g, const EmbeddingTable& table, Output ids,
                               Output segment_ids, int64_t num_segments,
                               const std::string& combiner) {
  if (!segment_ids.valid()) {
    g.RecordError(InvalidArgument("EmbeddingLookupSegments on '" + table.name +
                                  "': segment ids are invalid"));
    return Output();
  }
  return Lookup(g, table, ids, segment_ids, "segment_ids", num_segments, combiner);
}

}  // namespace ops
}  // namespace sf
