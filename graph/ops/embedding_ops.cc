// Sharded embedding ops. Each takes the handle of one shard variable, so
// placement colocates it with the shard; its kernel sends one message to the
// shard (EmbeddingShardService::GatherCombine / SparseApply) and only combined rows
// come back. The builders (graph/embedding.cc) add one per shard and sum the
// partials on the caller.
//
// Attributes shared by all of them (kernels/embedding_math.h parses them):
// table, table_rows, num_shards, shard, partition ("mod" | "range" | "hash"),
// combiner ("sum" | "mean" | "sqrtn" | "none"), segments ("dense" | "offsets" |
// "segment_ids", "split" for a shard's part of EmbeddingSplitIds, and "rows"
// for a sparse update of several lookups' EmbeddingSparseGrad rows),
// num_segments (segment_ids only).
#include "graph/op_registry.h"
#include "kernels/hash_embedding.h"
#include "kernels/optimizer_spec.h"

namespace sf {
namespace {

// The declared [rows, dim] of the shard behind input 0 when it is a VarHandle
// ([-1, dim] for a hash table's shard, whose variable is its saved state).
PartialShape ShardShape(const InferenceContext& c) {
  const Node& h = c.graph().node(c.node().inputs[0].node);
  if (h.op != "VarHandle") return PartialShape::UnknownDims(2);
  if (auto dim = h.attrs.Get<int64_t>("_hash_dim"); dim.ok()) return PartialShape(Shape{-1, *dim});
  auto s = h.attrs.GetOr<PartialShape>("shape", PartialShape::UnknownDims(2));
  return s.ok() && s->rank() == 2 ? *s : PartialShape::UnknownDims(2);
}

bool IsIndex(DType t) { return t == DType::kInt32 || t == DType::kInt64; }

// Checks the attributes and the ids/segments inputs (at `first`); sets
// *prefix to the output shape without dim. Errors name the table.
Status CheckLookupInputs(InferenceContext& c, int first, bool has_segments, PartialShape* prefix) {
  if (c.input_dtype(0) != DType::kResource)
    return c.Error(std::string("input 0 must be an embedding shard handle, got ") + DTypeName(c.input_dtype(0)));
  SF_ASSIGN_OR_RETURN(std::string table, c.Attr<std::string>("table"));
  SF_ASSIGN_OR_RETURN(int64_t rows, c.Attr<int64_t>("table_rows"));
  SF_ASSIGN_OR_RETURN(int64_t shards, c.Attr<int64_t>("num_shards"));
  SF_ASSIGN_OR_RETURN(int64_t shard, c.Attr<int64_t>("shard"));
  const std::string who = "embedding table '" + table + "'";
  SF_ASSIGN_OR_RETURN(std::string part, c.AttrOr<std::string>("partition", "mod"));
  if (part != "mod" && part != "range" && part != "hash")
    return c.Error(who + ": unknown partition '" + part + "' (expected mod, range or hash)");
  if (shards < 1 || (part != "hash" && rows < shards) || shard < 0 || shard >= shards)
    return c.Error(who + ": shard " + std::to_string(shard) + " of " + std::to_string(shards) +
                   " over " + std::to_string(rows) + " rows is not valid");
  SF_ASSIGN_OR_RETURN(std::string comb, c.AttrOr<std::string>("combiner", "sum"));
  if (comb != "sum" && comb != "mean" && comb != "sqrtn" && comb != "none")
    return c.Error(who + ": unknown combiner '" + comb + "' (expected sum, mean, sqrtn or none)");
  SF_ASSIGN_OR_RETURN(std::string seg, c.AttrOr<std::string>("segments", "dense"));
  if (seg == "split") {
    // This shard's part of an EmbeddingSplitIds: local rows, segment ids, weights.
    if (part == "hash") return c.Error(who + ": a hash table's ids are not split by row");
    if (comb == "none") return c.Error(who + ": combiner none needs dense ids [batch, k]");
    if (c.num_inputs() < first + 3) return c.Error(who + ": a split lookup takes rows, segment ids and weights");
    if (c.input_dtype(first) != DType::kInt64 || c.input_dtype(first + 1) != DType::kInt64 ||
        c.input_dtype(first + 2) != DType::kFloat32)
      return c.Error(who + ": a split lookup takes int64 rows and segment ids and float32 weights");
    const PartialShape& w = c.input_shape(first + 2);
    *prefix = PartialShape(Shape{w.rank_known() && w.rank() == 1 ? w.dim(0) : -1});
    return Status::OK();
  }
  if (!IsIndex(c.input_dtype(first)))
    return c.Error(who + ": ids must be int32 or int64, got " + DTypeName(c.input_dtype(first)));
  const PartialShape& ids = c.input_shape(first);
  if (seg == "dense") {
    if (has_segments) return c.Error(who + ": dense ids [batch, k] take no segments input");
    if (ids.rank_known() && ids.rank() != 2)
      return c.Error(who + ": dense ids must be [batch, k], got " + ids.ToString());
    const int64_t b = ids.rank_known() ? ids.dim(0) : -1, k = ids.rank_known() ? ids.dim(1) : -1;
    *prefix = comb == "none" ? PartialShape(Shape{b, k}) : PartialShape(Shape{b});
    return Status::OK();
  }
  if (seg != "offsets" && seg != "segment_ids")
    return c.Error(who + ": unknown segments '" + seg + "' (expected dense, offsets or segment_ids)");
  if (comb == "none") return c.Error(who + ": combiner none needs dense ids [batch, k]");
  if (!has_segments) return c.Error(who + ": bag ids need a " + seg + " input");
  if (ids.rank_known() && ids.rank() != 1)
    return c.Error(who + ": bag ids must be a vector, got " + ids.ToString());
  if (!IsIndex(c.input_dtype(first + 1)))
    return c.Error(who + ": " + seg + " must be int32 or int64, got " +
                   DTypeName(c.input_dtype(first + 1)));
  const PartialShape& s = c.input_shape(first + 1);
  if (s.rank_known() && s.rank() != 1) return c.Error(who + ": " + seg + " must be a vector, got " + s.ToString());
  if (seg == "offsets") {
    *prefix = PartialShape(Shape{s.rank_known() ? s.dim(0) : -1});
    return Status::OK();
  }
  SF_ASSIGN_OR_RETURN(int64_t num, c.AttrOr<int64_t>("num_segments", -1));
  if (num < 0) return c.Error(who + ": segment ids need attr num_segments >= 0");
  *prefix = PartialShape(Shape{num});
  return Status::OK();
}

// A sparse update of segments "rows": rows (int64 [n]) and their gradients
// (float32 [n, dim]) at `first`, the last inputs.
Status CheckRowsUpdate(InferenceContext& c, int first) {
  SF_ASSIGN_OR_RETURN(std::string table, c.Attr<std::string>("table"));
  const std::string who = "embedding table '" + table + "'";
  if (c.input_dtype(0) != DType::kResource)
    return c.Error(std::string("input 0 must be an embedding shard handle, got ") + DTypeName(c.input_dtype(0)));
  if (c.num_inputs() != first + 2) return c.Error(who + ": a sparse update of rows takes the rows and their gradients");
  if (c.input_dtype(first) != DType::kInt64 || c.input_dtype(first + 1) != DType::kFloat32)
    return c.Error(who + ": a sparse update of rows takes int64 rows and float32 gradients, got " +
                   DTypeName(c.input_dtype(first)) + " and " + DTypeName(c.input_dtype(first + 1)));
  const PartialShape& r = c.input_shape(first);
  const PartialShape& v = c.input_shape(first + 1);
  if (r.rank_known() && r.rank() != 1) return c.Error(who + ": the rows must be a vector, got " + r.ToString());
  if (v.rank_known() && v.rank() != 2) return c.Error(who + ": the gradients must be [rows, dim], got " + v.ToString());
  if (r.rank_known() && v.rank_known() && r.dim(0) >= 0 && v.dim(0) >= 0 && r.dim(0) != v.dim(0))
    return c.Error(who + ": " + std::to_string(r.dim(0)) + " rows but " + std::to_string(v.dim(0)) + " gradients");
  return Status::OK();
}

}  // namespace

Status RegisterEmbeddingOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("EmbeddingShardLookup")
      .RequiredAttr<std::string>("table").RequiredAttr<int64_t>("table_rows")
      .RequiredAttr<int64_t>("num_shards").RequiredAttr<int64_t>("shard").Attr("partition", "mod")
      .Attr("combiner", "sum").Attr("segments", "dense").Attr("num_segments", int64_t{-1})
      .Attr("read_only", false)
      .Inputs(2, 4).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        PartialShape prefix;
        SF_RETURN_IF_ERROR(CheckLookupInputs(c, 1, c.num_inputs() == 3, &prefix));
        const PartialShape shard = ShardShape(c);
        Shape out = prefix.rank_known() ? prefix.dims() : Shape{-1};
        out.push_back(shard.rank_known() ? shard.dim(1) : -1);
        c.set_output(0, DType::kFloat32, PartialShape(out));
        return Status::OK();
      })
      // The table's gradient is sparse: Optimizer::Minimize builds it from the
      // gradient of this op's output (EmbeddingSparseApply*), never densely.
      .NotDifferentiable()
      .Summary("One embedding shard's partial lookup: rows of its ids (others skipped) combined "
               "per example (sum, or mean over all the example's ids), computed in the shard. "
               "Inputs: shard handle, ids, [offsets or segment ids]; with segments \"split\": shard handle "
               "and the shard's three outputs of an EmbeddingSplitIds. read_only: an evaluation's lookup, "
               "which makes no hash row, counts no sighting and trains nothing.")
      .Build()));

  // One lookup's ids split over a fixed table's shards, once for all of them
  // (graph/embedding.cc adds it for tables of 2 or more shards): outputs
  // 2k and 2k+1 are shard k's local rows and their segment ids (int64
  // vectors, batch order), output 2K the segment weights (float32).
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("EmbeddingSplitIds")
      .RequiredAttr<std::string>("table").RequiredAttr<int64_t>("table_rows")
      .RequiredAttr<int64_t>("num_shards").Attr("partition", "mod")
      .Attr("combiner", "sum").Attr("segments", "dense").Attr("num_segments", int64_t{-1})
      .Inputs(1, 2)
      .Shape([](InferenceContext& c) -> Status {
        SF_ASSIGN_OR_RETURN(std::string table, c.Attr<std::string>("table"));
        SF_ASSIGN_OR_RETURN(int64_t rows, c.Attr<int64_t>("table_rows"));
        SF_ASSIGN_OR_RETURN(int64_t shards, c.Attr<int64_t>("num_shards"));
        SF_ASSIGN_OR_RETURN(std::string part, c.AttrOr<std::string>("partition", "mod"));
        SF_ASSIGN_OR_RETURN(std::string comb, c.AttrOr<std::string>("combiner", "sum"));
        SF_ASSIGN_OR_RETURN(std::string seg, c.AttrOr<std::string>("segments", "dense"));
        SF_ASSIGN_OR_RETURN(int64_t num, c.AttrOr<int64_t>("num_segments", -1));
        const std::string who = "embedding table '" + table + "'";
        if (part != "mod" && part != "range") return c.Error(who + ": only mod and range tables split ids by row");
        if (shards < 1 || rows < shards || shards > (1 << 20))
          return c.Error(who + ": " + std::to_string(shards) + " shards over " + std::to_string(rows) +
                         " rows is not valid");
        if (comb != "sum" && comb != "mean" && comb != "sqrtn")
          return c.Error(who + ": split ids need a combiner (sum, mean or sqrtn), got '" + comb + "'");
        if (!IsIndex(c.input_dtype(0)))
          return c.Error(who + ": ids must be int32 or int64, got " + DTypeName(c.input_dtype(0)));
        const PartialShape& ids = c.input_shape(0);
        int64_t segments = -1;
        if (seg == "dense") {
          if (c.num_inputs() != 1) return c.Error(who + ": dense ids [batch, k] take no segments input");
          if (ids.rank_known() && ids.rank() != 2) return c.Error(who + ": dense ids must be [batch, k], got " + ids.ToString());
          if (ids.rank_known()) segments = ids.dim(0);
        } else if (seg == "offsets" || seg == "segment_ids") {
          if (c.num_inputs() != 2) return c.Error(who + ": bag ids need a " + seg + " input");
          if (ids.rank_known() && ids.rank() != 1) return c.Error(who + ": bag ids must be a vector, got " + ids.ToString());
          if (!IsIndex(c.input_dtype(1)))
            return c.Error(who + ": " + seg + " must be int32 or int64, got " + DTypeName(c.input_dtype(1)));
          if (seg == "offsets") {
            const PartialShape& o = c.input_shape(1);
            if (o.rank_known() && o.rank() == 1) segments = o.dim(0);
          } else {
            if (num < 0) return c.Error(who + ": segment ids need attr num_segments >= 0");
            segments = num;
          }
        } else {
          return c.Error(who + ": unknown segments '" + seg + "' (expected dense, offsets or segment_ids)");
        }
        for (int64_t k = 0; k < shards; ++k) {
          c.set_output(static_cast<int>(2 * k), DType::kInt64, PartialShape(Shape{-1}));
          c.set_output(static_cast<int>(2 * k + 1), DType::kInt64, PartialShape(Shape{-1}));
        }
        c.set_output(static_cast<int>(2 * shards), DType::kFloat32, PartialShape(Shape{segments}));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Splits one lookup's ids over a fixed table's num_shards shards once: per shard its local rows "
               "and their segment ids (outputs 2k, 2k+1), then the segment weights (output 2K); each shard's "
               "lookup and sparse update then read only their own ids.")
      .Build()));

  // One lookup's sparse gradient as rows and row gradients, for one update of
  // a shard that several lookups read (Optimizer::Minimize concatenates them
  // into a sparse update of segments "rows").
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("EmbeddingSparseGrad")
      .RequiredAttr<std::string>("table").RequiredAttr<int64_t>("table_rows")
      .RequiredAttr<int64_t>("num_shards").RequiredAttr<int64_t>("shard").Attr("partition", "mod")
      .Attr("combiner", "sum").Attr("segments", "dense").Attr("num_segments", int64_t{-1})
      .Attr("read_only", false)
      .Inputs(3, 5)
      .Shape([](InferenceContext& c) -> Status {
        PartialShape prefix;
        SF_RETURN_IF_ERROR(CheckLookupInputs(c, 1, c.num_inputs() == 4, &prefix));
        const int dy = c.num_inputs() - 1;
        if (c.input_dtype(dy) != DType::kFloat32)
          return c.Error(std::string("the gradient must be float32, got ") + DTypeName(c.input_dtype(dy)));
        const PartialShape shard = ShardShape(c);
        c.set_output(0, DType::kInt64, PartialShape(Shape{-1}));
        c.set_output(1, DType::kFloat32, PartialShape(Shape{-1, shard.rank_known() ? shard.dim(1) : -1}));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("One embedding lookup's sparse gradient: the shard's rows it read (each once) and their summed "
               "gradients [rows, dim]. Inputs: shard handle (for placement), the lookup's ids (and segments), "
               "the gradient of the lookup's output.")
      .Build()));

  // The sparse form of each optimizer that has one (kernels/optimizer_spec.h).
  // slot_init: the slots' starting values, for the rows a hash table creates.
  for (const OptimizerSpec& op : kOptimizers) {
    if (!op.sparse_op) continue;
    const int fixed = op.handles + op.scalars;
    SF_RETURN_IF_ERROR(reg.Register(OpBuilder(op.sparse_op).Inputs(fixed + 2, fixed + 4).Stateful().Repeatable()
        .RequiredAttr<std::string>("table").RequiredAttr<int64_t>("table_rows").RequiredAttr<int64_t>("num_shards").RequiredAttr<int64_t>("shard")
        .Attr("partition", "mod").Attr("combiner", "sum").Attr("segments", "dense").Attr("num_segments", int64_t{-1})
        .Attr("slot_init", std::vector<double>{})
        .Shape([fixed, handles = op.handles](InferenceContext& c) -> Status {
          for (int i = 1; i < handles; ++i)
            if (c.input_dtype(i) != DType::kResource)
              return c.Error("input " + std::to_string(i) + " must be a slot handle, got " +
                             DTypeName(c.input_dtype(i)));
          for (int i = handles; i < fixed; ++i)
            if (c.input_dtype(i) != DType::kFloat32)
              return c.Error("hyperparameter input " + std::to_string(i) + " must be float32, got " +
                             DTypeName(c.input_dtype(i)));
          SF_ASSIGN_OR_RETURN(std::string seg, c.AttrOr<std::string>("segments", "dense"));
          if (seg == "rows") return CheckRowsUpdate(c, fixed);
          PartialShape prefix;
          const bool has_segments = c.num_inputs() == fixed + 3;
          SF_RETURN_IF_ERROR(CheckLookupInputs(c, fixed, has_segments, &prefix));
          const int dy = c.num_inputs() - 1;
          if (c.input_dtype(dy) != DType::kFloat32)
            return c.Error(std::string("the gradient must be float32, got ") + DTypeName(c.input_dtype(dy)));
          return Status::OK();
        })
        .NotDifferentiable().Summary(op.sparse_summary).Build()));
  }

  // Synchronous replication of a sparse update (SyncReplicas): an
  // optimizer's sparse form's inputs and the step tag.
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("EmbeddingSparseApplySync").Inputs(5, 16).Stateful().Repeatable()
      .RequiredAttr<std::string>("optimizer").RequiredAttr<int64_t>("num_required").Attr("timeout_ms", int64_t{0})
      .RequiredAttr<std::string>("table").RequiredAttr<int64_t>("table_rows").RequiredAttr<int64_t>("num_shards").RequiredAttr<int64_t>("shard")
      .Attr("partition", "mod").Attr("combiner", "sum").Attr("segments", "dense").Attr("num_segments", int64_t{-1})
      .Attr("slot_init", std::vector<double>{})
      .Shape([](InferenceContext& c) -> Status {
        auto opt = c.Attr<std::string>("optimizer");
        if (!opt.ok()) return opt.status();
        SF_ASSIGN_OR_RETURN(OptimizerKind kind, ParseOptimizer(*opt));
        const OptimizerSpec& spec = SpecOf(kind);
        if (!spec.sparse_op) return c.Error(*opt + " has no sparse update");
        const int fixed = spec.handles + spec.scalars;
        const int tag = c.num_inputs() - 1;
        if (tag < fixed + 2 || tag > fixed + 4)
          return c.Error(*opt + ": " + std::to_string(c.num_inputs()) + " inputs do not make the sparse update's " +
                         std::to_string(fixed + 2) + " to " + std::to_string(fixed + 4) + " and the step tag");
        for (int i = 0; i < spec.handles; ++i)
          if (c.input_dtype(i) != DType::kResource)
            return c.Error("input " + std::to_string(i) + " must be a handle, got " + DTypeName(c.input_dtype(i)));
        if (c.input_dtype(tag) != DType::kInt64)
          return c.Error(std::string("the step tag must be int64, got ") + DTypeName(c.input_dtype(tag)));
        c.set_output(0, DType::kInt64, PartialShape(Shape{}));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Synchronous replication of an embedding shard's sparse update: the sparse update's inputs "
               "(attr optimizer's sparse form) and the step tag; the shard applies the first num_required "
               "workers' rows of the step, averaged, as one update. Output: the step it counted in, or -1 "
               "when stale (counted as dropped).")
      .Build()));

  // Hash tables (kernels/hash_embedding.h): the initializer that makes a
  // shard variable a hash table shard, and its metrics.
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("HashEmbeddingShardInit").Inputs(1).Stateful()
      .RequiredAttr<std::string>("table").RequiredAttr<int64_t>("num_shards").RequiredAttr<int64_t>("shard")
      .RequiredAttr<int64_t>("dim").Attr("initializer", "uniform").Attr("scale", 0.0).Attr("seed", int64_t{0})
      .Attr("min_count", int64_t{0}).Attr("admit_probability", 1.0).Attr("filter_width", int64_t{1} << 16)
      .Attr("filter_depth", int64_t{4}).Attr("ttl_steps", int64_t{0}).Attr("max_rows", int64_t{0})
      .Attr("eviction", "lru").Attr("ram_budget_bytes", int64_t{0}).Attr("cold_dir", "").Path(PathAttr::kDataDir)
      .Shape([](InferenceContext& c) -> Status {
        if (c.input_dtype(0) != DType::kResource)
          return c.Error(std::string("input 0 must be a hash table shard handle, got ") + DTypeName(c.input_dtype(0)));
        SF_RETURN_IF_ERROR(c.Attr<std::string>("table").status());
        SF_RETURN_IF_ERROR(c.Attr<int64_t>("dim").status());
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Makes one shard of a hash embedding table empty, with its admission and eviction "
               "settings (attrs). Input: the shard handle.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("HashEmbeddingShardStats").Inputs(1).Stateful().Repeatable().RequiredAttr<std::string>("table")
      .Shape([](InferenceContext& c) -> Status {
        if (c.input_dtype(0) != DType::kResource)
          return c.Error(std::string("input 0 must be a hash table shard handle, got ") + DTypeName(c.input_dtype(0)));
        c.set_output(0, DType::kInt64, PartialShape(Shape{kNumHashShardMetrics}));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("One hash table shard's metrics, int64 [12]: rows, capacity, admitted, rejected, "
               "evicted, bytes, step, skipped, cold_rows, hot_hits, cold_hits, disk_bytes. Input: the "
               "shard handle.")
      .Build()));
  return Status::OK();
}

}  // namespace sf
