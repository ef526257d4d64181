// Moving a sharded embedding table's rows between shard layouts: a table
// saved as K shards ("mod" or "range", include/shardflow/embedding.h) is
// restored into K' shards, or another partitioning, row by row.
#pragma once

#include <vector>

#include "shardflow/status.h"
#include "shardflow/tensor.h"
#include "storage/checkpoint.h"

namespace sf {

// The number of rows shard k of table t holds.
int64_t TableShardRows(const CheckpointTable& t, int64_t k);

// The table-wide id of local row r of shard k of table t.
int64_t TableGlobalRow(const CheckpointTable& t, int64_t k, int64_t r);

// parts[j] is shard j of layout `from` ([TableShardRows(from, j), ...], one
// dtype and trailing shape); returns the to.num_shards shards of layout `to`
// holding the same rows. InvalidArgument naming the table when the row
// counts differ, or a part's count, dtype or trailing shape does not fit.
Result<std::vector<Tensor>> ReshardTableRows(const std::vector<Tensor>& parts, const CheckpointTable& from,
                                             const CheckpointTable& to);

}  // namespace sf
