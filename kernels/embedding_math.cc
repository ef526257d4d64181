// Sharded embedding math: plain loops over rows of `dim` floats written as
// Eigen row maps (vectorised), never per-element virtual calls.
#include "kernels/embedding_math.h"

#include "kernels/compute_pool.h"
#include "kernels/optimizer_math.h"

#include <Eigen/Core>
#include <immintrin.h>
#include <algorithm>
#include <cmath>
#include <functional>
#include <type_traits>

namespace sf {
namespace {

using RowMap = Eigen::Map<Eigen::Array<float, 1, Eigen::Dynamic>>;
using ConstRowMap = Eigen::Map<const Eigen::Array<float, 1, Eigen::Dynamic>>;

// Asks for the cache lines of one row (a hint: no effect on results).
inline void PrefetchRow(const float* row, int64_t dim) {
  for (int64_t j = 0; j < dim; j += 16) __builtin_prefetch(row + j);
}

// x / d and x % d for 0 <= x < 2^52 and d >= 1 through a double reciprocal
// and one correction: a 64-bit idiv per id dominated multi-shard lookups.
struct FastDiv {
  explicit FastDiv(int64_t d) : d(d), inv(1.0 / static_cast<double>(d)) {}
  int64_t d;
  double inv;
  void Divide(int64_t x, int64_t* q, int64_t* r) const {
    int64_t qq = static_cast<int64_t>(static_cast<double>(x) * inv);
    int64_t rr = x - qq * d;
    if (rr < 0) --qq, rr += d;
    else if (rr >= d) ++qq, rr -= d;
    *q = qq;
    *r = rr;
  }
};

std::string OutOfRange(const EmbeddingShardSpec& s, int64_t id) {
  return "embedding table '" + s.table + "': id " + std::to_string(id) + " is out of range [0, " +
         std::to_string(s.rows) + ")";
}

// Dtypes and sizes of a gather; ShardPart checks the values.
Status CheckGather(const EmbeddingShardSpec& s, const EmbeddingGather& q) {
  const std::string who = "embedding table '" + s.table + "'";
  if (q.ids.dtype() != DType::kInt64 || q.segment_ids.dtype() != DType::kInt64)
    return InvalidArgument(who + ": ids and segment ids must be int64");
  if (q.ids.num_elements() != q.segment_ids.num_elements())
    return InvalidArgument(who + ": " + std::to_string(q.ids.num_elements()) + " ids but " +
                           std::to_string(q.segment_ids.num_elements()) + " segment ids");
  if (q.num_segments < 0) return InvalidArgument(who + ": negative number of examples");
  return Status::OK();
}

// The shard's own ids of a gather in one pass: their local rows and segments,
// in the gather's order. The K shards of a lookup each filter the batch once
// here, and everything after touches only the shard's own ids (the old loops
// skipped other shards' ids with a branch taken at random, (K-1)/K of the
// time). Checks every segment id and every global id, the shard's or not.
template <typename LocalOf>  // (id, &local row) -> whether the id is this shard's
Status CompactIds(const EmbeddingShardSpec& s, const EmbeddingGather& q, LocalOf local_of,
                  std::vector<int64_t>* rows, std::vector<int64_t>* segs) {
  const bool any_id = s.partition == EmbeddingPartition::kHash;  // every int64 is a key
  const int64_t n = q.ids.num_elements();
  rows->resize(n);
  segs->resize(n);
  const int64_t* ids = q.ids.data<int64_t>();
  const int64_t* seg = q.segment_ids.data<int64_t>();
  int64_t* r = rows->data();
  int64_t* sg = segs->data();
  const uint64_t num_segments = static_cast<uint64_t>(q.num_segments);
  const uint64_t table_rows = static_cast<uint64_t>(s.rows);
  int64_t c = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i], g = seg[i];
    if (static_cast<uint64_t>(g) >= num_segments)
      return InvalidArgument("embedding table '" + s.table + "': segment id " + std::to_string(g) +
                             " of id position " + std::to_string(i) + " is out of range [0, " +
                             std::to_string(q.num_segments) + ")");
    if (!any_id && static_cast<uint64_t>(id) >= table_rows) return InvalidArgument(OutOfRange(s, id));
    // Written always, kept only when the id is this shard's: no branch to
    // mispredict on ids that alternate between shards.
    const bool mine = local_of(id, &r[c]);
    sg[c] = g;
    c += static_cast<int64_t>(mine);
  }
  rows->resize(c);
  segs->resize(c);
  return Status::OK();
}

// CompactIds with the shard's partitioning (see LocalRowsOf).
// The shard's own ids as local rows and their segments, in the gather's
// order: a view of q's own tensors when the ids were split before the shards
// (no copy: the split made them already), else of *rows and *segs.
struct ShardIds {
  const int64_t* rows = nullptr;
  const int64_t* segs = nullptr;
  int64_t n = 0;
};

Status ShardPartInto(const EmbeddingShardSpec& s, const EmbeddingGather& q, std::vector<int64_t>* rows,
                     std::vector<int64_t>* segs);

Status ShardPart(const EmbeddingShardSpec& s, const EmbeddingGather& q, std::vector<int64_t>* rows,
                 std::vector<int64_t>* segs, ShardIds* out) {
  SF_RETURN_IF_ERROR(ShardPartInto(s, q, rows, segs));
  if (q.local_rows) {
    out->rows = q.ids.data<int64_t>();
    out->segs = q.segment_ids.data<int64_t>();
    out->n = q.ids.num_elements();
  } else {
    out->rows = rows->data();
    out->segs = segs->data();
    out->n = static_cast<int64_t>(rows->size());
  }
  return Status::OK();
}

// ShardPart's work: checks a split gather's ids in place, or compacts the
// shard's ids of an unsplit one into *rows and *segs.
Status ShardPartInto(const EmbeddingShardSpec& s, const EmbeddingGather& q, std::vector<int64_t>* rows,
                     std::vector<int64_t>* segs) {
  SF_RETURN_IF_ERROR(CheckShardSpec(s));
  const int64_t K = s.num_shards, k = s.shard;
  if (q.local_rows) {
    // Split before the shards: only this shard's ids, already local rows.
    if (s.partition == EmbeddingPartition::kHash)
      return InvalidArgument("embedding table '" + s.table + "': a hash table's ids are not split by row");
    const int64_t n = q.ids.num_elements(), shard_rows = EmbeddingShardRows(s.rows, K, k, s.partition);
    const int64_t* ids = q.ids.data<int64_t>();
    const int64_t* seg = q.segment_ids.data<int64_t>();
    bool bad = false;  // a branch-free look first; the loop naming the position only when needed
    for (int64_t i = 0; i < n; ++i)
      bad |= (static_cast<uint64_t>(seg[i]) >= static_cast<uint64_t>(q.num_segments)) |
             (static_cast<uint64_t>(ids[i]) >= static_cast<uint64_t>(shard_rows));
    for (int64_t i = 0; bad && i < n; ++i) {
      if (static_cast<uint64_t>(seg[i]) >= static_cast<uint64_t>(q.num_segments))
        return InvalidArgument("embedding table '" + s.table + "': segment id " + std::to_string(seg[i]) +
                               " of shard " + std::to_string(k) + "'s id position " + std::to_string(i) +
                               " is out of range [0, " + std::to_string(q.num_segments) + ")");
      if (static_cast<uint64_t>(ids[i]) >= static_cast<uint64_t>(shard_rows))
        return InvalidArgument("embedding table '" + s.table + "': local row " + std::to_string(ids[i]) +
                               " of shard " + std::to_string(k) + " is out of range [0, " +
                               std::to_string(shard_rows) + ")");
    }
    return Status::OK();
  }
  if (s.partition == EmbeddingPartition::kHash)
    return CompactIds(
        s, q,
        [=](int64_t id, int64_t* row) {
          *row = id;
          return HashShardOf(id, K) == k;
        },
        rows, segs);
  if (K == 1)
    return CompactIds(
        s, q,
        [](int64_t id, int64_t* row) {
          *row = id;
          return true;
        },
        rows, segs);
  if (s.partition == EmbeddingPartition::kMod && (K & (K - 1)) == 0) {
    const int b = __builtin_ctzll(static_cast<unsigned long long>(K));
    return CompactIds(
        s, q,
        [=](int64_t id, int64_t* row) {
          *row = id >> b;
          return (id & (K - 1)) == k;
        },
        rows, segs);
  }
  if (s.partition == EmbeddingPartition::kMod) {
    const FastDiv div(K);
    return CompactIds(
        s, q,
        [=](int64_t id, int64_t* row) {
          int64_t r;
          div.Divide(id, row, &r);
          return r == k;
        },
        rows, segs);
  }
  const int64_t base = s.rows / K, extra = s.rows % K;
  const int64_t split = extra * (base + 1);  // ids below it live in the bigger shards
  const FastDiv big(base + 1), small(base);
  return CompactIds(
      s, q,
      [=](int64_t id, int64_t* row) {
        int64_t shard;
        if (id < split) {
          big.Divide(id, &shard, row);
        } else {
          small.Divide(id - split, &shard, row);
          shard += extra;
        }
        return shard == k;
      },
      rows, segs);
}

// dst += src * w over one row; D = dim when it is known at compile time, so
// the common widths are a few unrolled vector ops instead of a call per row.
template <int D>
inline void AddRow(float* dst, const float* src, float w, int64_t dim) {
  Eigen::Map<Eigen::Array<float, 1, D>>(dst, dim) +=
      Eigen::Map<const Eigen::Array<float, 1, D>>(src, dim) * w;
}
// dst = src * w over one row.
template <int D>
inline void SetRow(float* dst, const float* src, float w, int64_t dim) {
  Eigen::Map<Eigen::Array<float, 1, D>>(dst, dim) =
      Eigen::Map<const Eigen::Array<float, 1, D>>(src, dim) * w;
}

// Calls fn(std::integral_constant<int, D>) with D = dim for the common widths,
// Eigen::Dynamic otherwise.
template <typename Fn>
void WithRowWidth(int64_t dim, Fn fn) {
  switch (dim) {
    case 8: return fn(std::integral_constant<int, 8>());
    case 16: return fn(std::integral_constant<int, 16>());
    case 32: return fn(std::integral_constant<int, 32>());
    case 64: return fn(std::integral_constant<int, 64>());
    default: return fn(std::integral_constant<int, Eigen::Dynamic>());
  }
}

}  // namespace

Result<EmbeddingPartition> ParseEmbeddingPartition(const std::string& s) {
  if (s == "mod") return EmbeddingPartition::kMod;
  if (s == "range") return EmbeddingPartition::kRange;
  if (s == "hash") return EmbeddingPartition::kHash;
  return InvalidArgument("unknown embedding partitioning '" + s + "' (expected mod, range or hash)");
}

Result<EmbeddingCombiner> ParseEmbeddingCombiner(const std::string& s) {
  if (s == "sum") return EmbeddingCombiner::kSum;
  if (s == "mean") return EmbeddingCombiner::kMean;
  if (s == "sqrtn") return EmbeddingCombiner::kSqrtn;
  return InvalidArgument("unknown embedding combiner '" + s + "' (expected sum, mean or sqrtn)");
}

Status CheckShardSpec(const EmbeddingShardSpec& s) {
  const bool hash = s.partition == EmbeddingPartition::kHash;
  if (s.num_shards < 1 || (!hash && s.rows < s.num_shards) || s.shard < 0 || s.shard >= s.num_shards ||
      s.rows > (int64_t{1} << 52))  // FastDiv's exact range
    return InvalidArgument("embedding table '" + s.table + "': shard " + std::to_string(s.shard) +
                           " of " + std::to_string(s.num_shards) + " over " +
                           std::to_string(s.rows) + " rows is not valid (need rows >= shards >= 1)");
  return Status::OK();
}

int64_t EmbeddingShardRows(int64_t rows, int64_t num_shards, int64_t shard,
                           EmbeddingPartition partition) {
  if (partition == EmbeddingPartition::kMod) return (rows - shard + num_shards - 1) / num_shards;
  return rows / num_shards + (shard < rows % num_shards ? 1 : 0);
}

Status LocalRowsOf(const EmbeddingShardSpec& s, const int64_t* ids, int64_t n,
                   std::vector<int64_t>* local) {
  SF_RETURN_IF_ERROR(CheckShardSpec(s));
  local->resize(n);
  const int64_t K = s.num_shards, k = s.shard;
  int64_t* out = local->data();
  if (K == 1) {  // one shard: every id is its own row
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids[i];
      if (id < 0 || id >= s.rows) return InvalidArgument(OutOfRange(s, id));
      out[i] = id;
    }
    return Status::OK();
  }
  if (s.partition == EmbeddingPartition::kMod && (K & (K - 1)) == 0) {  // K = 2^b: shift and mask
    const int b = __builtin_ctzll(static_cast<unsigned long long>(K));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids[i];
      if (id < 0 || id >= s.rows) return InvalidArgument(OutOfRange(s, id));
      out[i] = (id & (K - 1)) == k ? id >> b : -1;
    }
    return Status::OK();
  }
  if (s.partition == EmbeddingPartition::kMod) {
    const FastDiv div(K);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t id = ids[i];
      if (id < 0 || id >= s.rows) return InvalidArgument(OutOfRange(s, id));
      int64_t q, r;
      div.Divide(id, &q, &r);
      out[i] = r == k ? q : -1;
    }
    return Status::OK();
  }
  const int64_t base = s.rows / K, extra = s.rows % K;
  const int64_t split = extra * (base + 1);  // ids below it live in the bigger shards
  const FastDiv big(base + 1), small(base);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= s.rows) return InvalidArgument(OutOfRange(s, id));
    int64_t shard, row;
    if (id < split) {
      big.Divide(id, &shard, &row);
    } else {
      small.Divide(id - split, &shard, &row);
      shard += extra;
    }
    out[i] = shard == k ? row : -1;
  }
  return Status::OK();
}

std::vector<float> SegmentWeights(const EmbeddingGather& q) {
  // Split or deduplicated gathers carry the whole batch's weights.
  if (q.weights.valid() && q.weights.dtype() == DType::kFloat32 && q.weights.num_elements() == q.num_segments)
    return std::vector<float>(q.weights.data<float>(), q.weights.data<float>() + q.num_segments);
  std::vector<float> w(q.num_segments, 1.0f);
  if (q.combiner != EmbeddingCombiner::kSum) {
    std::vector<int64_t> count(q.num_segments, 0);
    const int64_t* seg = q.segment_ids.data<int64_t>();
    for (int64_t i = 0; i < q.segment_ids.num_elements(); ++i) ++count[seg[i]];
    const bool sqrtn = q.combiner == EmbeddingCombiner::kSqrtn;
    for (int64_t s = 0; s < q.num_segments; ++s) {
      const float c = static_cast<float>(count[s]);
      w[s] = count[s] > 0 ? 1.0f / (sqrtn ? std::sqrt(c) : c) : 0.0f;
    }
  }
  return w;
}

Status BuildHashShardGather(const EmbeddingShardSpec& s, const EmbeddingGather& q, EmbeddingGather* out) {
  SF_RETURN_IF_ERROR(CheckGather(s, q));
  if (s.partition != EmbeddingPartition::kHash)
    return InvalidArgument("embedding table '" + s.table + "' is not a hash table");
  thread_local std::vector<int64_t> ids, segs, unique;  // per-thread scratch
  thread_local std::vector<int32_t> index;
  ShardIds mine;
  SF_RETURN_IF_ERROR(ShardPart(s, q, &ids, &segs, &mine));
  UniqueRows(mine.rows, mine.n, &unique, &index);
  const int64_t n = mine.n, m = static_cast<int64_t>(unique.size());
  out->ids = Tensor(DType::kInt64, {m});
  std::copy(unique.begin(), unique.end(), out->ids.data<int64_t>());
  out->segment_ids = Tensor(DType::kInt64, {n});
  std::copy(mine.segs, mine.segs + n, out->segment_ids.data<int64_t>());
  out->unique_index = Tensor(DType::kInt32, {n});
  std::copy(index.begin(), index.end(), out->unique_index.data<int32_t>());
  const std::vector<float> w = SegmentWeights(q);
  out->weights = Tensor(DType::kFloat32, {q.num_segments});
  std::copy(w.begin(), w.end(), out->weights.data<float>());
  out->num_segments = q.num_segments;
  out->combiner = q.combiner;
  out->step_id = q.step_id;
  out->read_only = q.read_only;
  out->origin = q.origin;
  return Status::OK();
}

Status EmbeddingGatherCombine(const EmbeddingShardSpec& s, const EmbeddingGather& q,
                              const Tensor& table, Tensor* out, ComputePool* pool) {
  SF_RETURN_IF_ERROR(CheckGather(s, q));
  const std::string who = "embedding table '" + s.table + "'";
  if (table.dtype() != DType::kFloat32 || table.rank() != 2)
    return InvalidArgument(who + ": shard " + std::to_string(s.shard) +
                           " must be a float32 matrix, got " + table.DebugString(0));
  const int64_t shard_rows = EmbeddingShardRows(s.rows, s.num_shards, s.shard, s.partition);
  if (table.dim(0) != shard_rows)
    return InvalidArgument(who + ": shard " + std::to_string(s.shard) + " has " +
                           std::to_string(table.dim(0)) + " rows, the partitioning gives it " +
                           std::to_string(shard_rows));
  // Scratch kept per thread: a fresh vector per step costs page faults.
  thread_local std::vector<int64_t> rows, segs;
  ShardIds mine;
  SF_RETURN_IF_ERROR(ShardPart(s, q, &rows, &segs, &mine));
  const int64_t n = mine.n;
  const int64_t dim = table.dim(1);
  const std::vector<float> w = SegmentWeights(q);
  const float* src = table.data<float>();
  // Rows are scattered over a big table: fetch a few ids ahead so the cache
  // misses overlap (measured: the gather is bound by them).
  constexpr int64_t kAhead = 8;
  // `rows` and `segs` are thread_local: the blocks below may run on other
  // threads, so they read them through pointers taken here.
  const int64_t* rp = mine.rows;
  const int64_t* sp = mine.segs;
  const float* wp = w.data();
  const bool weighted = q.combiner != EmbeddingCombiner::kSum;  // sum: every weight is 1
  bool sorted = true;
  for (int64_t i = 1; sorted && i < n; ++i) sorted = sp[i - 1] <= sp[i];
  if (!sorted || n == 0) {
    *out = Tensor::Zeros(DType::kFloat32, {q.num_segments, dim});
    float* dst = out->data<float>();
    WithRowWidth(dim, [=](auto width) {
      constexpr int D = decltype(width)::value;
      for (int64_t i = 0; i < n; ++i) {
        if (i + kAhead < n) PrefetchRow(src + rp[i + kAhead] * dim, dim);
        const int64_t sg = sp[i];
        AddRow<D>(dst + sg * dim, src + rp[i] * dim, weighted ? wp[sg] : 1.0f, dim);
      }
    });
    return Status::OK();
  }
  // Segments in order (a dense [batch, k] lookup, or a split's part): each
  // output row is written once, its first id set and the rest added while
  // the row is in L1, and only rows no id reaches are zeroed, instead of
  // zero-filling the whole output and then adding every id into it.
  *out = Tensor(DType::kFloat32, {q.num_segments, dim});
  float* dst = out->data<float>();
  const int64_t num_segments = q.num_segments;
  // Ids [begin, end) (starting where a segment starts) fill output rows
  // [seg_lo, seg_hi): theirs, and the untouched ones up to the next block's.
  auto gather = [=](int64_t begin, int64_t end) {
    if (begin >= end) return;
    const int64_t seg_lo = begin == 0 ? 0 : sp[begin];
    const int64_t seg_hi = end == n ? num_segments : sp[end];
    WithRowWidth(dim, [=](auto width) {
      constexpr int D = decltype(width)::value;
      int64_t next = seg_lo;  // the first row not written yet
      for (int64_t i = begin; i < end;) {
        const int64_t sg = sp[i];
        if (sg > next) std::fill(dst + next * dim, dst + sg * dim, 0.0f);
        float* row = dst + sg * dim;
        const float wt = weighted ? wp[sg] : 1.0f;
        if (i + kAhead < end) PrefetchRow(src + rp[i + kAhead] * dim, dim);
        SetRow<D>(row, src + rp[i] * dim, wt, dim);
        for (++i; i < end && sp[i] == sg; ++i) {
          if (i + kAhead < end) PrefetchRow(src + rp[i + kAhead] * dim, dim);
          AddRow<D>(row, src + rp[i] * dim, wt, dim);
        }
        next = sg + 1;
      }
      if (seg_hi > next) std::fill(dst + next * dim, dst + seg_hi * dim, 0.0f);
    });
  };
  if (pool == nullptr || pool->num_threads() <= 1 || n < 8192) {
    gather(0, n);
    return Status::OK();
  }
  // Blocks start where a segment starts, so no two threads write one row.
  auto boundary = [&](int64_t p) {
    while (p > 0 && p < n && sp[p] == sp[p - 1]) ++p;
    return p;
  };
  pool->ParallelFor(n, 4096, [&](int64_t b, int64_t e) { gather(boundary(b), boundary(e)); });
  return Status::OK();
}

void UniqueRows(const int64_t* keys, int64_t n, std::vector<int64_t>* unique,
                std::vector<int32_t>* index) {
  unique->clear();
  index->resize(n);
  int shift = 64;
  uint64_t cap = 1;
  // At most half full; a smaller table than needed misses the cache less.
  while (cap < static_cast<uint64_t>(std::max<int64_t>(2 * n, 2))) {
    cap <<= 1;
    --shift;
  }
  thread_local std::vector<int32_t> slots;  // index into unique, or -1 (per-thread scratch)
  slots.assign(cap, -1);
  const uint64_t mask = cap - 1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t key = keys[i];
    uint64_t h = (static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ull) >> shift;  // cap >= 2
    for (;; h = (h + 1) & mask) {
      const int32_t u = slots[h];
      if (u < 0) {
        slots[h] = static_cast<int32_t>(unique->size());
        (*index)[i] = slots[h];
        unique->push_back(key);
        break;
      }
      if ((*unique)[u] == key) {
        (*index)[i] = u;
        break;
      }
    }
  }
}

Status EmbeddingSparseGrad(const EmbeddingShardSpec& s, const EmbeddingGather& q,
                           const Tensor& dy, Tensor* rows, Tensor* values, ComputePool* pool) {
  SF_RETURN_IF_ERROR(CheckGather(s, q));
  const std::string who = "embedding table '" + s.table + "'";
  if (dy.dtype() != DType::kFloat32 || dy.rank() != 2 || dy.dim(0) != q.num_segments)
    return InvalidArgument(who + ": the gradient must be float32 [" +
                           std::to_string(q.num_segments) + ", dim], got " + dy.DebugString(0));
  const int64_t dim = dy.dim(1);
  thread_local std::vector<int64_t> mine_rows, mine_segs, unique;  // per-thread scratch
  thread_local std::vector<int32_t> index, start;
  thread_local std::vector<int64_t> order;
  ShardIds mine;
  SF_RETURN_IF_ERROR(ShardPart(s, q, &mine_rows, &mine_segs, &mine));
  const int64_t n = mine.n;
  UniqueRows(mine.rows, n, &unique, &index);
  const int64_t m = static_cast<int64_t>(unique.size());
  *rows = Tensor(DType::kInt64, {m});
  std::copy(unique.begin(), unique.end(), rows->data<int64_t>());
  // Group the positions by unique row (a stable counting sort): each row's
  // sum is then made in one place, in batch order (the same additions as
  // accumulating position by position), written once instead of zeroed and
  // added to at random, and rows can be split over threads.
  start.assign(m + 1, 0);
  for (int64_t j = 0; j < n; ++j) ++start[index[j] + 1];
  for (int64_t u = 0; u < m; ++u) start[u + 1] += start[u];
  order.resize(n);
  {
    thread_local std::vector<int32_t> cursor;
    cursor.assign(start.begin(), start.end() - 1);
    // The segments themselves, so the sums below read no positions.
    for (int64_t j = 0; j < n; ++j) order[cursor[index[j]]++] = mine.segs[j];
  }
  *values = Tensor(DType::kFloat32, {m, dim});
  const std::vector<float> w = SegmentWeights(q);
  // Thread-local scratch is read through pointers: blocks may run elsewhere.
  const int32_t* st = start.data();
  const int64_t* op = order.data();
  const float* wp = w.data();
  const bool weighted = q.combiner != EmbeddingCombiner::kSum;  // sum: every weight is 1
  const float* g = dy.data<float>();
  float* v = values->data<float>();
  auto sum_rows = [=](int64_t b, int64_t e) {
    WithRowWidth(dim, [=](auto width) {  // by value: kept in registers
      constexpr int D = decltype(width)::value;
      for (int64_t u = b; u < e; ++u) {
        float* vu = v + u * dim;
        int32_t p = st[u];
        int64_t sg = op[p];
        SetRow<D>(vu, g + sg * dim, weighted ? wp[sg] : 1.0f, dim);  // every row has a position
        for (++p; p < st[u + 1]; ++p) {
          sg = op[p];
          AddRow<D>(vu, g + sg * dim, weighted ? wp[sg] : 1.0f, dim);
        }
      }
    });
  };
  if (pool != nullptr && pool->num_threads() > 1 && m >= 4096) pool->ParallelFor(m, 2048, sum_rows);
  else sum_rows(0, m);
  return Status::OK();
}

Status ApplySparseOptimizerUpdate(const SparseApplyRequest& req, const std::vector<Tensor*>& vars,
                                  ComputePool* pool) {
  if (req.optimizer >= OptimizerKind::kCount)
    return InvalidArgument("unknown sparse optimizer " +
                           std::to_string(static_cast<int>(req.optimizer)));
  const OptimizerSpec& spec = SpecOf(req.optimizer);
  const std::string who = std::string("sparse optimizer ") + spec.name;
  const Tensor* var = vars.empty() ? nullptr : vars[0];
  if (var && var->valid() && (var->dtype() != DType::kFloat32 || var->rank() != 2))
    return InvalidArgument(who + ": the variable must be a float32 matrix, got " + var->DebugString(0));
  SF_RETURN_IF_ERROR(CheckOptimizerInputs(spec, who, vars, req.scalars, DType::kFloat32,
                                          var ? var->shape() : Shape{}, "the variable"));
  const int64_t rows = var->dim(0), dim = var->dim(1);
  const Tensor& idx = req.indices;
  const Tensor& val = req.values;
  if (idx.dtype() != DType::kInt64 || idx.rank() != 1)
    return InvalidArgument(who + ": indices must be an int64 vector");
  const int64_t m = idx.num_elements();
  if (val.dtype() != DType::kFloat32 || val.rank() != 2 || val.dim(0) != m || val.dim(1) != dim)
    return InvalidArgument(who + ": values must be float32 [" + std::to_string(m) + ", " +
                           std::to_string(dim) + "], got " + val.DebugString(0));
  const int64_t* ip = idx.data<int64_t>();
  for (int64_t i = 0; i < m; ++i)
    if (ip[i] < 0 || ip[i] >= rows)
      return InvalidArgument(who + ": row index " + std::to_string(ip[i]) +
                             " is out of range [0, " + std::to_string(rows) + ")");
  // Sum duplicates first so each row sees one update (TF's sparse applies do).
  const float* g = val.data<float>();
  int64_t u = m;
  std::vector<int64_t> unique;
  std::vector<int32_t> index;
  std::vector<float> merged;
  if (!req.indices_unique) {  // else the caller merged them already
    UniqueRows(ip, m, &unique, &index);
    u = static_cast<int64_t>(unique.size());
    if (u != m) {
      merged.assign(u * dim, 0.0f);
      for (int64_t i = 0; i < m; ++i)
        RowMap(merged.data() + index[i] * dim, dim) += ConstRowMap(g + i * dim, dim);
      g = merged.data();
      ip = unique.data();
    }
  }
  RowUpdater update(req.optimizer, req.scalars, vars, req.use_nesterov);
  // Rows are unique here, so ranges of them can be updated on separate threads.
  if (pool != nullptr && pool->num_threads() > 1 && u >= 4096)
    pool->ParallelFor(u, 2048, [&](int64_t b, int64_t e) { update.Apply(ip, g, b, e); });
  else
    update.Apply(ip, g, 0, u);
  update.Finish();
  return Status::OK();
}

Result<EmbeddingOpAttrs> ParseEmbeddingOpAttrs(const AttrMap& attrs) {
  EmbeddingOpAttrs a;
  SF_ASSIGN_OR_RETURN(a.spec.table, attrs.Get<std::string>("table"));
  SF_ASSIGN_OR_RETURN(a.spec.rows, attrs.Get<int64_t>("table_rows"));
  SF_ASSIGN_OR_RETURN(a.spec.num_shards, attrs.Get<int64_t>("num_shards"));
  SF_ASSIGN_OR_RETURN(a.spec.shard, attrs.GetOr<int64_t>("shard", 0));
  SF_ASSIGN_OR_RETURN(std::string part, attrs.GetOr<std::string>("partition", "mod"));
  SF_ASSIGN_OR_RETURN(a.spec.partition, ParseEmbeddingPartition(part));
  SF_RETURN_IF_ERROR(CheckShardSpec(a.spec));
  SF_ASSIGN_OR_RETURN(std::string comb, attrs.GetOr<std::string>("combiner", "sum"));
  if (comb == "none") {
    a.no_combiner = true;
  } else {
    SF_ASSIGN_OR_RETURN(a.combiner, ParseEmbeddingCombiner(comb));
  }
  SF_ASSIGN_OR_RETURN(std::string seg, attrs.GetOr<std::string>("segments", "dense"));
  if (seg == "dense") a.segments = EmbeddingSegments::kDense;
  else if (seg == "offsets") a.segments = EmbeddingSegments::kOffsets;
  else if (seg == "segment_ids") a.segments = EmbeddingSegments::kSegmentIds;
  else if (seg == "split") a.segments = EmbeddingSegments::kSplit;
  else if (seg == "rows") a.segments = EmbeddingSegments::kRows;
  else
    return InvalidArgument("embedding table '" + a.spec.table + "': unknown segments '" + seg +
                           "' (expected dense, offsets, segment_ids, split or rows)");
  SF_ASSIGN_OR_RETURN(a.num_segments, attrs.GetOr<int64_t>("num_segments", -1));
  SF_ASSIGN_OR_RETURN(a.read_only, attrs.GetOr<bool>("read_only", false));
  if (a.segments == EmbeddingSegments::kSegmentIds && a.num_segments < 0)
    return InvalidArgument("embedding table '" + a.spec.table +
                           "': segment ids need attr num_segments >= 0");
  if (a.segments == EmbeddingSegments::kSplit && a.spec.partition == EmbeddingPartition::kHash)
    return InvalidArgument("embedding table '" + a.spec.table + "': a hash table's ids are not split by row");
  if (a.no_combiner && a.segments != EmbeddingSegments::kDense)
    return InvalidArgument("embedding table '" + a.spec.table +
                           "': combiner none needs dense ids [batch, k]");
  return a;
}

namespace {

// The values of an int32 or int64 vector as int64.
Result<Tensor> AsInt64(const Tensor& t, const std::string& what) {
  if (t.dtype() == DType::kInt64) return t;
  if (t.dtype() != DType::kInt32)
    return InvalidArgument(what + " must be int32 or int64, got " + DTypeName(t.dtype()));
  Tensor out(DType::kInt64, t.shape());
  const int32_t* p = t.data<int32_t>();
  int64_t* q = out.data<int64_t>();
  for (int64_t i = 0; i < t.num_elements(); ++i) q[i] = p[i];
  return out;
}

}  // namespace

Status BuildEmbeddingGather(const EmbeddingOpAttrs& a, const Tensor& ids, const Tensor* segments,
                            EmbeddingGather* q, Shape* out_prefix) {
  const std::string who = "embedding table '" + a.spec.table + "'";
  if (a.segments == EmbeddingSegments::kSplit || a.segments == EmbeddingSegments::kRows)
    return InvalidArgument(who + ": segments '" + (a.segments == EmbeddingSegments::kSplit ? "split" : "rows") +
                           "' are not ids to gather");
  SF_ASSIGN_OR_RETURN(Tensor flat, AsInt64(ids, who + ": ids"));
  const int64_t n = flat.num_elements();
  SF_ASSIGN_OR_RETURN(q->ids, flat.Reshaped({n}));
  q->combiner = a.combiner;
  q->segment_ids = Tensor(DType::kInt64, {n});
  int64_t* seg = q->segment_ids.data<int64_t>();
  if (a.segments == EmbeddingSegments::kDense) {
    if (ids.rank() != 2)
      return InvalidArgument(who + ": dense ids must be [batch, k], got " + ShapeString(ids.shape()));
    const int64_t batch = ids.dim(0), k = ids.dim(1);
    if (a.no_combiner) {
      for (int64_t i = 0; i < n; ++i) seg[i] = i;
      q->num_segments = n;
      q->combiner = EmbeddingCombiner::kSum;
      *out_prefix = {batch, k};
    } else {
      for (int64_t b = 0, i = 0; b < batch; ++b)
        for (int64_t j = 0; j < k; ++j) seg[i++] = b;
      q->num_segments = batch;
      *out_prefix = {batch};
    }
    return Status::OK();
  }
  if (ids.rank() != 1)
    return InvalidArgument(who + ": bag ids must be a vector, got " + ShapeString(ids.shape()));
  if (!segments) return InvalidArgument(who + ": bag lookups need offsets or segment ids");
  if (a.segments == EmbeddingSegments::kOffsets) {
    SF_ASSIGN_OR_RETURN(Tensor off, AsInt64(*segments, who + ": offsets"));
    if (off.rank() != 1)
      return InvalidArgument(who + ": offsets must be a vector, got " + ShapeString(off.shape()));
    const int64_t batch = off.num_elements();
    const int64_t* o = off.data<int64_t>();
    if (batch == 0 && n > 0) return InvalidArgument(who + ": " + std::to_string(n) + " ids but no bags");
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t end = b + 1 < batch ? o[b + 1] : n;
      if ((b == 0 && o[0] != 0) || o[b] < 0 || o[b] > end || end > n) {
        // The offset that breaks the rule: this one, or the next (smaller
        // than this one, or past the ids).
        const int64_t bad = (b == 0 && o[0] != 0) || o[b] < 0 || b + 1 == batch ? b : b + 1;
        return InvalidArgument(who + ": offsets must start at 0 and be non-decreasing up to " +
                               std::to_string(n) + " ids; offset " + std::to_string(bad) + " is " +
                               std::to_string(o[bad]));
      }
      for (int64_t i = o[b]; i < end; ++i) seg[i] = b;
    }
    q->num_segments = batch;
    *out_prefix = {batch};
    return Status::OK();
  }
  SF_ASSIGN_OR_RETURN(Tensor sid, AsInt64(*segments, who + ": segment ids"));
  if (sid.num_elements() != n)
    return InvalidArgument(who + ": " + std::to_string(n) + " ids but " +
                           std::to_string(sid.num_elements()) + " segment ids");
  std::copy(sid.data<int64_t>(), sid.data<int64_t>() + n, seg);
  q->num_segments = a.num_segments;
  *out_prefix = {a.num_segments};
  return Status::OK();
}

namespace {

// InvalidArgument naming the table and the first of ids[0, n) outside
// [0, rows); OK when there is none.
Status FirstOutOfRange(const EmbeddingShardSpec& s, const int64_t* ids, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (static_cast<uint64_t>(ids[i]) >= static_cast<uint64_t>(s.rows)) return InvalidArgument(OutOfRange(s, ids[i]));
  return Status::OK();
}

// Every id's shard and local row under fixed partitioning s, in one pass
// that also checks the range (an id outside it yields garbage row and shard
// values, never read: the pass then reports it); InvalidArgument naming the
// table and the first id outside [0, rows).
Status ShardRowsOf(const EmbeddingShardSpec& s, const int64_t* ids, int64_t n, int64_t* row, int32_t* shard) {
  const int64_t K = s.num_shards;
  const uint64_t rows = static_cast<uint64_t>(s.rows);
  bool bad = false;
  if (K == 1) {
    for (int64_t i = 0; i < n; ++i) {
      bad |= static_cast<uint64_t>(ids[i]) >= rows;
      row[i] = ids[i];
      shard[i] = 0;
    }
  } else if (s.partition == EmbeddingPartition::kMod && (K & (K - 1)) == 0) {  // K = 2^b: shift and mask
    const int b = __builtin_ctzll(static_cast<unsigned long long>(K));
    for (int64_t i = 0; i < n; ++i) {
      bad |= static_cast<uint64_t>(ids[i]) >= rows;
      row[i] = ids[i] >> b;
      shard[i] = static_cast<int32_t>(ids[i] & (K - 1));
    }
  } else if (s.partition == EmbeddingPartition::kMod) {
    const FastDiv div(K);
    for (int64_t i = 0; i < n; ++i) {
      bad |= static_cast<uint64_t>(ids[i]) >= rows;
      int64_t r;
      div.Divide(ids[i], &row[i], &r);
      shard[i] = static_cast<int32_t>(r);
    }
  } else {
    const int64_t base = s.rows / K, extra = s.rows % K;
    const int64_t split = extra * (base + 1);  // ids below it live in the bigger shards
    const FastDiv big(base + 1), small(base);
    for (int64_t i = 0; i < n; ++i) {
      bad |= static_cast<uint64_t>(ids[i]) >= rows;
      int64_t k;
      if (ids[i] < split) {
        big.Divide(ids[i], &k, &row[i]);
      } else {
        small.Divide(ids[i] - split, &k, &row[i]);
        k += extra;
      }
      shard[i] = static_cast<int32_t>(k);
    }
  }
  return bad ? FirstOutOfRange(s, ids, n) : Status::OK();
}

#if defined(__AVX512F__) && defined(__AVX512VL__)
// Appends the lanes of r and g that m selects, in order, at rows + *j and
// segs + *j, in a part of `count` ids: whole eight-lane stores while they
// stay inside the part (the lanes past the packed ones are overwritten by the
// next append), a masked store near its end. Masked stores, and compresses
// straight to memory, are slow on AMD's Zen 4.
inline void AppendPacked(__mmask8 m, __m512i r, __m512i g, int64_t count, int64_t* rows, int64_t* segs,
                         int64_t* j) {
  r = _mm512_maskz_compress_epi64(m, r);
  g = _mm512_maskz_compress_epi64(m, g);
  const int c = __builtin_popcount(m);
  if (*j + 8 <= count) {
    _mm512_storeu_si512(rows + *j, r);
    _mm512_storeu_si512(segs + *j, g);
  } else {
    const __mmask8 w = static_cast<__mmask8>((1u << c) - 1);
    _mm512_mask_storeu_epi64(rows + *j, w, r);
    _mm512_mask_storeu_epi64(segs + *j, w, g);
  }
  *j += c;
}

// Writes, in order, the local rows and segments of positions [b, e) whose
// shard is k to rows and segs; count: how many there are.
void CompressShardPart(const int32_t* shard, const int64_t* local, const int64_t* seg, int64_t b, int64_t e,
                       int32_t k, int64_t count, int64_t* rows, int64_t* segs) {
  const __m256i kk = _mm256_set1_epi32(k);
  int64_t j = 0, i = b;
  for (; i + 8 <= e; i += 8) {
    const __mmask8 m = _mm256_cmpeq_epi32_mask(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(shard + i)), kk);
    AppendPacked(m, _mm512_loadu_si512(local + i), _mm512_loadu_si512(seg + i), count, rows, segs, &j);
  }
  for (; i < e; ++i)
    if (shard[i] == k) rows[j] = local[i], segs[j++] = seg[i];
}

// Mod partitioning over K = 2^shift shards (the default), straight from the
// ids: no per-id shard and row written first, and no cursor carried through
// memory. Counts chunk [b, e)'s ids per shard into count[0, K); false when an
// id is outside [0, rows) (the caller then finds it).
bool CountModPow2(const int64_t* ids, int64_t b, int64_t e, int64_t K, uint64_t rows, int64_t* count) {
  const __m512i mask = _mm512_set1_epi64(K - 1), limit = _mm512_set1_epi64(static_cast<int64_t>(rows));
  __mmask8 bad = 0;
  int64_t c[16] = {};
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    const __m512i v = _mm512_loadu_si512(ids + i);
    bad |= _mm512_cmpge_epu64_mask(v, limit);
    const __m512i sh = _mm512_and_si512(v, mask);
    for (int64_t k = 0; k < K; ++k) c[k] += __builtin_popcount(_mm512_cmpeq_epi64_mask(sh, _mm512_set1_epi64(k)));
  }
  bool ok = bad == 0;
  for (; i < e; ++i) {
    ok &= static_cast<uint64_t>(ids[i]) < rows;
    ++c[ids[i] & (K - 1)];
  }
  std::copy(c, c + K, count);
  return ok;
}

// Writes, in order, the local rows (id >> shift) and segments of chunk
// [b, e)'s ids of shard k; count: how many there are (CountModPow2).
void CompressModPow2(const int64_t* ids, const int64_t* seg, int64_t b, int64_t e, int64_t K, int shift,
                     int64_t k, int64_t count, int64_t* rows, int64_t* segs) {
  const __m512i mask = _mm512_set1_epi64(K - 1), kk = _mm512_set1_epi64(k);
  int64_t j = 0, i = b;
  for (; i + 8 <= e; i += 8) {
    const __m512i v = _mm512_loadu_si512(ids + i);
    const __mmask8 m = _mm512_cmpeq_epi64_mask(_mm512_and_si512(v, mask), kk);
    AppendPacked(m, _mm512_srli_epi64(v, static_cast<unsigned>(shift)), _mm512_loadu_si512(seg + i), count, rows,
                 segs, &j);
  }
  for (; i < e; ++i)
    if ((ids[i] & (K - 1)) == k) rows[j] = ids[i] >> shift, segs[j++] = seg[i];
}
#endif

}  // namespace

Status SplitEmbeddingIds(const EmbeddingOpAttrs& a, const Tensor& ids, const Tensor* segments,
                         EmbeddingIdSplit* out, ComputePool* pool) {
  const EmbeddingShardSpec& s = a.spec;
  const std::string who = "embedding table '" + s.table + "'";
  SF_RETURN_IF_ERROR(CheckShardSpec(s));
  if (s.partition == EmbeddingPartition::kHash) return InvalidArgument(who + ": a hash table's ids are not split by row");
  if (a.no_combiner) return InvalidArgument(who + ": combiner none keeps every id its own row: not split");
  if (a.segments == EmbeddingSegments::kSplit) return InvalidArgument(who + ": ids are split already");
  EmbeddingGather q;
  Shape prefix;
  SF_RETURN_IF_ERROR(BuildEmbeddingGather(a, ids, segments, &q, &prefix));
  const int64_t n = q.ids.num_elements(), K = s.num_shards;
  const int64_t* id = q.ids.data<int64_t>();
  const int64_t* seg = q.segment_ids.data<int64_t>();
  // Dense and offset lookups get their segment ids from BuildEmbeddingGather,
  // in range by construction; a caller's own segment ids are checked here.
  if (a.segments == EmbeddingSegments::kSegmentIds)
    for (int64_t i = 0; i < n; ++i)
      if (static_cast<uint64_t>(seg[i]) >= static_cast<uint64_t>(q.num_segments))
        return InvalidArgument(who + ": segment id " + std::to_string(seg[i]) + " of id position " +
                               std::to_string(i) + " is out of range [0, " + std::to_string(q.num_segments) + ")");
  // The batch in chunks, one per thread for big batches (the lookups all
  // wait for the split): pass 1 counts each chunk's ids per shard (giving
  // every id its shard and local row first, except for a power-of-two mod
  // table, whose shard and row come straight from the id); pass 2 writes
  // each chunk's ids at its offsets, so each shard's part stays in batch order.
#if defined(__AVX512F__) && defined(__AVX512VL__)
  const bool mod_pow2 = s.partition == EmbeddingPartition::kMod && K >= 2 && K <= 16 && (K & (K - 1)) == 0;
#else
  const bool mod_pow2 = false;
#endif
  thread_local std::vector<int64_t> local;  // per-thread scratch
  thread_local std::vector<int32_t> shard_of;
  if (!mod_pow2) {
    local.resize(n);
    shard_of.resize(n);
  }
  int64_t* lp = local.data();
  int32_t* sp = shard_of.data();
  // Another thread pays off only for big batches: waking it costs tens of
  // microseconds, and the vectorised split does 32k ids in about that.
  const int64_t chunks = pool != nullptr && pool->num_threads() > 1 && n >= (mod_pow2 ? 262144 : 16384)
                             ? std::min<int64_t>(pool->num_threads(), 8)
                             : 1;
  auto chunk_begin = [n, chunks](int64_t c) { return n * c / chunks; };
  std::vector<int64_t> count(chunks * K, 0);  // [chunk][shard]
  std::vector<Status> status(chunks);
  auto each_chunk = [&](const std::function<void(int64_t)>& fn) {
    if (chunks == 1) return fn(0);
    pool->ParallelFor(chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) fn(c);
    });
  };
  each_chunk([&](int64_t c) {
    const int64_t b = chunk_begin(c), e = chunk_begin(c + 1);
#if defined(__AVX512F__) && defined(__AVX512VL__)
    if (mod_pow2) {
      if (!CountModPow2(id, b, e, K, static_cast<uint64_t>(s.rows), count.data() + c * K))
        status[c] = FirstOutOfRange(s, id + b, e - b);
      return;
    }
#endif
    status[c] = ShardRowsOf(s, id + b, e - b, lp + b, sp + b);
    if (!status[c].ok()) return;
    // Counted in this thread's own array, then stored: the chunks' counters
    // share a cache line in `count`, and incrementing them there from two
    // threads bounced it between the cores on every id.
    thread_local std::vector<int64_t> cnt;
    cnt.assign(K, 0);
    for (int64_t i = b; i < e; ++i) ++cnt[sp[i]];
    std::copy(cnt.begin(), cnt.end(), count.data() + c * K);
  });
  for (const Status& st : status) SF_RETURN_IF_ERROR(st);  // the first chunk's error: the first bad id
  out->rows.clear();
  out->segments.clear();
  std::vector<int64_t> offset(chunks * K);  // where chunk c's ids of shard k start in its part
  for (int64_t k = 0; k < K; ++k) {
    int64_t total = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      offset[c * K + k] = total;
      total += count[c * K + k];
    }
    out->rows.emplace_back(DType::kInt64, Shape{total});
    out->segments.emplace_back(DType::kInt64, Shape{total});
  }
  each_chunk([&](int64_t c) {
    const int64_t b = chunk_begin(c), e = chunk_begin(c + 1);
#if defined(__AVX512F__) && defined(__AVX512VL__)
    // Few shards: one pass per shard, eight ids a step, packed in registers
    // (AppendPacked). The scalar scatter below carries each cursor through
    // memory from one id to the next; this has no such chain.
    if (mod_pow2) {
      const int shift = __builtin_ctzll(static_cast<unsigned long long>(K));
      for (int64_t k = 0; k < K; ++k)
        CompressModPow2(id, seg, b, e, K, shift, k, count[c * K + k], out->rows[k].data<int64_t>() + offset[c * K + k],
                        out->segments[k].data<int64_t>() + offset[c * K + k]);
      return;
    }
    if (K <= 16) {
      for (int64_t k = 0; k < K; ++k)
        CompressShardPart(sp, lp, seg, b, e, static_cast<int32_t>(k), count[c * K + k], out->rows[k].data<int64_t>() + offset[c * K + k],
                          out->segments[k].data<int64_t>() + offset[c * K + k]);
      return;
    }
#endif
    // Cursors as indices and the inputs in locals: with pointers captured by
    // reference, every store of a cursor (an int64_t*) could alias them, and
    // the compiler reloaded lp and seg for each id.
    std::vector<int64_t*> r(K), g(K);
    std::vector<int64_t> at(K, 0);
    for (int64_t k = 0; k < K; ++k) {
      r[k] = out->rows[k].data<int64_t>() + offset[c * K + k];
      g[k] = out->segments[k].data<int64_t>() + offset[c * K + k];
    }
    int64_t** const rr = r.data();
    int64_t** const gg = g.data();
    int64_t* const pos = at.data();
    const int64_t* const local_rows = lp;
    const int64_t* const segs_in = seg;
    const int32_t* const shard_ids = sp;
    for (int64_t i = b; i < e; ++i) {
      const int32_t k = shard_ids[i];
      const int64_t j = pos[k]++;
      rr[k][j] = local_rows[i];
      gg[k][j] = segs_in[i];
    }
  });
  const std::vector<float> w = SegmentWeights(q);
  out->weights = Tensor(DType::kFloat32, {q.num_segments});
  std::copy(w.begin(), w.end(), out->weights.data<float>());
  return Status::OK();
}

Status BuildSplitShardGather(const EmbeddingOpAttrs& a, const Tensor& rows, const Tensor& segments,
                             const Tensor& weights, EmbeddingGather* q) {
  const std::string who = "embedding table '" + a.spec.table + "'";
  if (rows.dtype() != DType::kInt64 || rows.rank() != 1 || segments.dtype() != DType::kInt64 ||
      segments.rank() != 1 || rows.num_elements() != segments.num_elements())
    return InvalidArgument(who + ": a split lookup takes int64 rows and segment ids of one length, got " +
                           rows.DebugString(0) + " and " + segments.DebugString(0));
  if (weights.dtype() != DType::kFloat32 || weights.rank() != 1)
    return InvalidArgument(who + ": a split lookup's weights must be a float32 vector, got " + weights.DebugString(0));
  q->ids = rows;
  q->segment_ids = segments;
  q->weights = weights;
  q->num_segments = weights.dim(0);
  q->combiner = a.combiner;
  q->local_rows = true;
  return Status::OK();
}

}  // namespace sf
