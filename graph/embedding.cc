// Sharded embedding tables: shard variables with per-shard initializers, and
// lookups as one EmbeddingShardLookup per shard summed on the caller.
#include "shardflow/embedding.h"

#include <cmath>

#include "kernels/embedding_math.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

Output Lookup(Graph& g, const EmbeddingTable& t, Output ids, Output segments,
              const std::string& segments_kind, int64_t num_segments, const std::string& combiner) {
  if (!t.valid()) {
    g.RecordError(InvalidArgument("embedding lookup: the table '" + t.name + "' is not valid"));
    return Output();
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
    a.Set("segments", segments_kind);
    if (num_segments >= 0) a.Set("num_segments", num_segments);
    std::vector<Output> in = {t.shards[k], ids};
    if (segments.valid()) in.push_back(segments);
    Output p = g.Add1("EmbeddingShardLookup", in, std::move(a),
                      t.name + "/lookup_" + std::to_string(k));
    if (!p.valid()) return Output();
    partials.push_back(p);
  }
  // Each id lives in exactly one shard, so the partials add up to the lookup.
  return partials.size() == 1 ? partials[0] : ops::AddN(g, partials);
}

}  // namespace

int64_t EmbeddingTableShardRows(const EmbeddingTable& t, int64_t k) {
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

namespace ops {

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
