// Moving a sharded table's rows between shard counts and partitionings.
#include <catch2/catch.hpp>

#include "storage/embedding_reshard.h"

using namespace sf;

namespace {

// The shards of layout t of a table whose global row g holds (g, 10 g + 1).
std::vector<Tensor> Shards(const CheckpointTable& t) {
  std::vector<Tensor> out;
  for (int64_t k = 0; k < t.num_shards; ++k) {
    const int64_t n = TableShardRows(t, k);
    std::vector<float> v;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t g = TableGlobalRow(t, k, r);
      v.push_back(static_cast<float>(g));
      v.push_back(static_cast<float>(10 * g + 1));
    }
    out.push_back(Tensor::FromVector<float>(v, {n, 2}));
  }
  return out;
}

}  // namespace

TEST_CASE("embedding reshard: layouts cover every row once", "[storage][reshard]") {
  for (const char* part : {"mod", "range"}) {
    for (int64_t k : {1, 3, 4, 7}) {
      CheckpointTable t{"e", 23, k, part};
      std::vector<int> seen(23, 0);
      int64_t total = 0;
      for (int64_t s = 0; s < k; ++s)
        for (int64_t r = 0; r < TableShardRows(t, s); ++r, ++total) ++seen[TableGlobalRow(t, s, r)];
      CHECK(total == 23);
      for (int c : seen) CHECK(c == 1);
    }
  }
  // Range: contiguous, the first rows % K shards one row longer.
  CheckpointTable r{"e", 10, 4, "range"};
  CHECK(TableShardRows(r, 0) == 3);
  CHECK(TableShardRows(r, 2) == 2);
  CHECK(TableGlobalRow(r, 2, 0) == 6);
}

TEST_CASE("embedding reshard: K=4 -> K'=2 and 3, mod and range, every row exact", "[storage][reshard]") {
  for (const char* from_part : {"mod", "range"}) {
    for (const char* to_part : {"mod", "range"}) {
      for (int64_t to_k : {2, 3, 4, 5}) {
        CheckpointTable from{"e", 23, 4, from_part}, to{"e", 23, to_k, to_part};
        auto out = ReshardTableRows(Shards(from), from, to);
        REQUIRE(out.ok());
        auto want = Shards(to);
        REQUIRE(out->size() == want.size());
        for (size_t k = 0; k < want.size(); ++k) CHECK((*out)[k].ToVector<float>() == want[k].ToVector<float>());
      }
    }
  }
}

TEST_CASE("embedding reshard: mismatched rows or shapes name the table", "[storage][reshard]") {
  CheckpointTable from{"items", 23, 4, "mod"}, to{"items", 24, 2, "mod"};
  auto r = ReshardTableRows(Shards(from), from, to);
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("embedding table 'items'") != std::string::npos);
  CHECK(r.status().message().find("24 rows") != std::string::npos);
  to.rows = 23;
  auto parts = Shards(from);
  parts[2] = Tensor::FromVector<float>({1, 2}, {1, 2});
  r = ReshardTableRows(parts, from, to);
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find("shard 2") != std::string::npos);
}
