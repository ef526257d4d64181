#include "storage/embedding_reshard.h"

#include <algorithm>
#include <cstring>

namespace sf {

int64_t TableShardRows(const CheckpointTable& t, int64_t k) {
  // Both layouts give the first rows % K shards one extra row.
  return t.rows / t.num_shards + (k < t.rows % t.num_shards ? 1 : 0);
}

int64_t TableGlobalRow(const CheckpointTable& t, int64_t k, int64_t r) {
  if (t.partition == "range") return k * (t.rows / t.num_shards) + std::min(k, t.rows % t.num_shards) + r;
  return r * t.num_shards + k;
}

namespace {

// Shard and local row of table-wide id g (the inverse of TableGlobalRow).
std::pair<int64_t, int64_t> Locate(const CheckpointTable& t, int64_t g) {
  if (t.partition == "range") {
    const int64_t base = t.rows / t.num_shards, extra = t.rows % t.num_shards;
    const int64_t long_rows = extra * (base + 1);  // rows held by the longer shards
    if (g < long_rows) return {g / (base + 1), g % (base + 1)};
    return {extra + (g - long_rows) / base, (g - long_rows) % base};
  }
  return {g % t.num_shards, g / t.num_shards};
}

}  // namespace

Result<std::vector<Tensor>> ReshardTableRows(const std::vector<Tensor>& parts, const CheckpointTable& from,
                                             const CheckpointTable& to) {
  const std::string who = "embedding table '" + to.name + "'";
  if (from.rows != to.rows)
    return InvalidArgument(who + " has " + std::to_string(to.rows) + " rows in the graph but " +
                           std::to_string(from.rows) + " in the checkpoint");
  if (static_cast<int64_t>(parts.size()) != from.num_shards || parts.empty() || to.num_shards < 1 ||
      to.num_shards > to.rows)
    return InvalidArgument(who + ": " + std::to_string(parts.size()) + " saved shards for " +
                           std::to_string(from.num_shards) + " recorded, restoring into " +
                           std::to_string(to.num_shards));
  const DType dtype = parts[0].dtype();
  Shape trailing = parts[0].shape();
  if (trailing.empty()) return InvalidArgument(who + ": saved shard 0 is a scalar, not rows");
  trailing.erase(trailing.begin());
  for (int64_t j = 0; j < from.num_shards; ++j) {
    const Tensor& p = parts[j];
    Shape want = trailing;
    want.insert(want.begin(), TableShardRows(from, j));
    if (!p.valid() || p.dtype() != dtype || p.shape() != want)
      return InvalidArgument(who + ": saved shard " + std::to_string(j) + " is " +
                             (p.valid() ? ShapeString(p.shape()) : std::string("missing")) + ", expected " +
                             ShapeString(want));
  }
  std::vector<Tensor> out;
  std::vector<char*> dst;
  for (int64_t k = 0; k < to.num_shards; ++k) {
    Shape s = trailing;
    s.insert(s.begin(), TableShardRows(to, k));
    out.emplace_back(dtype, s);
    dst.push_back(static_cast<char*>(out.back().raw_data()));
  }
  const size_t row = DTypeSize(dtype) * static_cast<size_t>(NumElements(trailing));
  if (row == 0) return out;
  for (int64_t j = 0; j < from.num_shards; ++j) {
    const char* src = static_cast<const char*>(parts[j].raw_data());
    const int64_t n = TableShardRows(from, j);
    for (int64_t r = 0; r < n; ++r) {
      const auto at = Locate(to, TableGlobalRow(from, j, r));
      std::memcpy(dst[at.first] + at.second * row, src + r * row, row);
    }
  }
  return out;
}

}  // namespace sf
