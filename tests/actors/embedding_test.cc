// Sharded embeddings in a session (1, 2 and 4 CPU devices, shards spread over
// them): lookups and sparse optimizer updates against a reference computed
// here with plain loops from the shards' values.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <memory>

#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"

using namespace sf;

namespace {

using Vars = std::vector<Output>;
using Table = std::vector<std::vector<double>>;  // [rows][dim]

// The test's own partitioning: (shard, local row) of a global id.
std::pair<int64_t, int64_t> Where(int64_t id, int64_t rows, int64_t K, const std::string& part) {
  if (part == "mod") return {id % K, id / K};
  int64_t start = 0;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t n = rows / K + (k < rows % K ? 1 : 0);
    if (id < start + n) return {k, id - start};
    start += n;
  }
  return {-1, -1};
}

// Reads of every shard, built with the graph (before any session runs it).
Vars ShardReads(Graph& g, const EmbeddingTable& t) {
  Vars reads;
  for (const Output& h : t.shards) reads.push_back(ops::ReadVariable(g, h, DType::kFloat32));
  return reads;
}

// The whole table assembled from the shards' values.
Table ReadTable(Session& s, const EmbeddingTable& t, const Vars& reads) {
  auto r = s.Run({}, reads);
  REQUIRE(r.ok());
  const int64_t K = static_cast<int64_t>(t.shards.size());
  Table out(t.rows, std::vector<double>(t.dim));
  for (int64_t id = 0; id < t.rows; ++id) {
    auto [k, row] = Where(id, t.rows, K, t.partition);
    const Tensor& v = (*r)[k];
    REQUIRE(v.dim(1) == t.dim);
    for (int64_t j = 0; j < t.dim; ++j) out[id][j] = v.data<float>()[row * t.dim + j];
  }
  return out;
}

// Reference combine: bags as lists of ids.
std::vector<std::vector<double>> Combine(const Table& tab, const std::vector<std::vector<int64_t>>& bags,
                                         bool mean) {
  std::vector<std::vector<double>> out;
  for (const auto& bag : bags) {
    std::vector<double> row(tab[0].size(), 0.0);
    for (int64_t id : bag)
      for (size_t j = 0; j < row.size(); ++j) row[j] += tab[id][j];
    if (mean && !bag.empty())
      for (double& x : row) x /= bag.size();
    out.push_back(row);
  }
  return out;
}

void CheckClose(const Tensor& got, const std::vector<std::vector<double>>& want, double tol = 1e-6) {
  REQUIRE(got.dim(0) == static_cast<int64_t>(want.size()));
  const int64_t dim = got.num_elements() / std::max<int64_t>(1, got.dim(0));
  for (size_t b = 0; b < want.size(); ++b)
    for (int64_t j = 0; j < dim; ++j) {
      INFO("example " << b << " column " << j);
      CHECK(std::abs(got.data<float>()[b * dim + j] - want[b][j]) <= tol);
    }
}

SessionOptions Devices(int n) {
  SessionOptions o;
  o.num_cpu_devices = n;
  return o;
}

}  // namespace

TEST_CASE("Sharded lookups match a reference on 1, 2 and 4 devices", "[embedding]") {
  for (int devices : {1, 2, 4}) {
    for (const std::string part : {"mod", "range"}) {
      INFO(devices << " devices, " << part << " partitioning");
      Graph g;
      EmbeddingTableOptions o;
      o.num_shards = devices == 1 ? 3 : devices;  // several shards on one device too
      o.partition = part;
      o.seed = 7;
      auto t = NewEmbeddingTable(g, "emb", 13, 3, o);
      auto ids = ops::Placeholder(g, DType::kInt64, {-1, 3}, "ids");
      auto sum = ops::EmbeddingLookup(g, t, ids, "sum");
      auto mean = ops::EmbeddingLookup(g, t, ids, "mean");
      auto none = ops::EmbeddingLookup(g, t, ids, "none");
      auto bag_ids = ops::Placeholder(g, DType::kInt64, {-1}, "bag_ids");
      auto offsets = ops::Placeholder(g, DType::kInt64, {-1}, "offsets");
      auto segs = ops::Placeholder(g, DType::kInt32, {-1}, "segs");
      auto bag_sum = ops::EmbeddingLookupBag(g, t, bag_ids, offsets, "sum");
      auto bag_mean = ops::EmbeddingLookupBag(g, t, bag_ids, offsets, "mean");
      auto seg_mean = ops::EmbeddingLookupSegments(g, t, bag_ids, segs, 5, "mean");
      Operation init = ops::GlobalVariablesInitializer(g);
      const Vars reads = ShardReads(g, t);
      REQUIRE(g.status().ok());
      CHECK(sum.shape().ToString() == PartialShape(Shape{-1, 3}).ToString());
      CHECK(none.shape().ToString() == PartialShape(Shape{-1, 3, 3}).ToString());
      Session s(g, Devices(devices));
      REQUIRE(s.Run({}, Vars{}, {init}).ok());
      const Table tab = ReadTable(s, t, reads);

      // Duplicates inside an example and across examples; every shard hit.
      std::vector<int64_t> dense = {0, 0, 12, 5, 7, 5, 1, 2, 3, 12, 12, 12};
      auto r = s.Run({{"ids", Tensor::FromVector(dense, {4, 3})}}, Vars{sum, mean, none});
      REQUIRE(r.ok());
      std::vector<std::vector<int64_t>> bags = {{0, 0, 12}, {5, 7, 5}, {1, 2, 3}, {12, 12, 12}};
      CheckClose((*r)[0], Combine(tab, bags, false));
      CheckClose((*r)[1], Combine(tab, bags, true));
      std::vector<std::vector<int64_t>> singles;
      for (int64_t id : dense) singles.push_back({id});
      CHECK((*r)[2].shape() == Shape{4, 3, 3});
      CheckClose(*(*r)[2].Reshaped({12, 3}), Combine(tab, singles, false));

      // Bags with empty ones (first, middle and last), and segment ids.
      std::vector<int64_t> flat = {4, 9, 9, 11, 0, 6};
      auto rb = s.Run({{"bag_ids", Tensor::FromVector(flat)},
                       {"offsets", Tensor::FromVector(std::vector<int64_t>{0, 0, 3, 3, 6})},
                       {"segs", Tensor::FromVector(std::vector<int32_t>{1, 1, 3, 1, 0, 3})}},
                      Vars{bag_sum, bag_mean, seg_mean});
      REQUIRE(rb.ok());
      std::vector<std::vector<int64_t>> b2 = {{}, {4, 9, 9}, {}, {11, 0, 6}, {}};
      CheckClose((*rb)[0], Combine(tab, b2, false));
      CheckClose((*rb)[1], Combine(tab, b2, true));
      std::vector<std::vector<int64_t>> b3 = {{0}, {4, 9, 11}, {}, {9, 6}, {}};
      CheckClose((*rb)[2], Combine(tab, b3, true));

      // An id out of range names the table and the id.
      auto bad = s.Run({{"ids", Tensor::FromVector(std::vector<int64_t>{1, 2, 13}, {1, 3})}},
                       Vars{sum});
      REQUIRE(!bad.ok());
      CHECK(bad.status().code() == Code::kInvalidArgument);
      CHECK(bad.status().message().find("'emb'") != std::string::npos);
      CHECK(bad.status().message().find("id 13") != std::string::npos);
      auto neg = s.Run({{"ids", Tensor::FromVector(std::vector<int64_t>{-1, 2, 3}, {1, 3})}},
                       Vars{sum});
      REQUIRE(!neg.ok());
      CHECK(neg.status().message().find("id -1") != std::string::npos);
      // Bad offsets are refused with the table's name.
      auto bad_off = s.Run({{"bag_ids", Tensor::FromVector(flat)},
                            {"offsets", Tensor::FromVector(std::vector<int64_t>{0, 4, 2})}},
                           Vars{bag_sum});
      REQUIRE(!bad_off.ok());
      CHECK(bad_off.status().message().find("offsets") != std::string::npos);
    }
  }
}

namespace {

// Runs two steps of opt on loss = sum(lookup * c) and checks every row of
// the table (and so the untouched ones) against the reference update.
void CheckSparseTraining(const std::string& which, int devices, const std::string& part,
                         const std::string& combiner) {
  INFO(which << " on " << devices << " devices, " << part << ", " << combiner);
  Graph g;
  EmbeddingTableOptions o;
  o.num_shards = devices == 1 ? 2 : devices;
  o.partition = part;
  o.seed = 3;
  auto t = NewEmbeddingTable(g, "tab", 11, 4, o);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 3}, "ids");
  auto c = ops::Placeholder(g, DType::kFloat32, {-1, 4}, "c");
  auto emb = ops::EmbeddingLookup(g, t, ids, combiner);
  auto loss = ops::Sum(g, emb * c);
  const double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, acc0 = 0.1;
  std::unique_ptr<Optimizer> opt;
  if (which == "sgd") opt = std::make_unique<GradientDescentOptimizer>(lr);
  else if (which == "adagrad") opt = std::make_unique<AdagradOptimizer>(lr, acc0);
  else opt = std::make_unique<AdamOptimizer>(lr, b1, b2, eps);
  auto train = opt->Minimize(g, loss);
  REQUIRE(train.ok());
  Operation init = ops::GlobalVariablesInitializer(g);
  const Vars reads = ShardReads(g, t);
  REQUIRE(g.status().ok());
  Session s(g, Devices(devices));
  REQUIRE(s.Run({}, Vars{}, {init}).ok());
  Table w = ReadTable(s, t, reads);
  const size_t rows = w.size(), dim = w[0].size();
  Table acc(rows, std::vector<double>(dim, acc0)), m(rows, std::vector<double>(dim, 0)),
      v(rows, std::vector<double>(dim, 0));
  double p1 = b1, p2 = b2;
  std::vector<std::vector<int64_t>> batches = {{3, 3, 10, 0, 1, 3}, {7, 7, 7, 3, 2, 9}};
  std::vector<float> cv = {0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f, 0.1f, 3.0f};
  for (const auto& batch : batches) {
    auto r = s.Run({{"ids", Tensor::FromVector(batch, {2, 3})}, {"c", Tensor::FromVector(cv, {2, 4})}},
                   Vars{}, {*train});
    REQUIRE(r.ok());
    // Reference: the gradient of each touched row, duplicates summed.
    std::map<int64_t, std::vector<double>> grad;
    for (size_t i = 0; i < batch.size(); ++i) {
      const size_t ex = i / 3;
      const double wgt = combiner == "mean" ? 1.0 / 3 : 1.0;
      auto& gr = grad[batch[i]];
      gr.resize(dim, 0.0);
      for (size_t j = 0; j < dim; ++j) gr[j] += cv[ex * dim + j] * wgt;
    }
    for (auto& [id, gr] : grad)
      for (size_t j = 0; j < dim; ++j) {
        if (which == "sgd") {
          w[id][j] -= lr * gr[j];
        } else if (which == "adagrad") {
          acc[id][j] += gr[j] * gr[j];
          w[id][j] -= lr * gr[j] / std::sqrt(acc[id][j]);
        } else {
          const double alpha = lr * std::sqrt(1 - p2) / (1 - p1);
          m[id][j] += (gr[j] - m[id][j]) * (1 - b1);
          v[id][j] += (gr[j] * gr[j] - v[id][j]) * (1 - b2);
          w[id][j] -= alpha * m[id][j] / (std::sqrt(v[id][j]) + eps);
        }
      }
    p1 *= b1;
    p2 *= b2;
  }
  const Table got = ReadTable(s, t, reads);
  for (size_t id = 0; id < rows; ++id)
    for (size_t j = 0; j < dim; ++j) {
      INFO("row " << id << " column " << j);
      CHECK(std::abs(got[id][j] - w[id][j]) <= 1e-5);
    }
}

}  // namespace

TEST_CASE("Sparse SGD, Adagrad and lazy Adam match a reference update", "[embedding][train]") {
  for (int devices : {1, 2, 4})
    for (const char* which : {"sgd", "adagrad", "adam"}) {
      CheckSparseTraining(which, devices, "mod", "sum");
      CheckSparseTraining(which, devices, "range", "mean");
    }
}

TEST_CASE("Optimizers without a sparse update say so", "[embedding][train]") {
  Graph g;
  auto t = NewEmbeddingTable(g, "tab", 5, 2);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 1}, "ids");
  auto loss = ops::Sum(g, ops::EmbeddingLookup(g, t, ids));
  auto train = MomentumOptimizer(0.1, 0.9).Minimize(g, loss);
  REQUIRE(!train.ok());
  CHECK(train.status().message().find("Momentum") != std::string::npos);
  CHECK(train.status().message().find("'tab'") != std::string::npos);
}

TEST_CASE("Large lookups and sparse updates split over the pool match the reference",
          "[embedding][train]") {
  // Big enough that the shard actor splits the gather (>= 8192 ids) and the
  // update (>= 4096 unique rows) over the compute pool's threads.
  constexpr int64_t kRows = 20000, kDim = 8, kBatch = 3000, kK = 4;
  for (const char* opt : {"sgd", "adagrad"}) {
    Graph g;
    EmbeddingTableOptions o;
    o.num_shards = 1;
    o.seed = 3;
    auto table = NewEmbeddingTable(g, "big", kRows, kDim, o);
    auto ids = ops::Placeholder(g, DType::kInt64, {kBatch, kK}, "ids");
    auto emb = ops::EmbeddingLookup(g, table, ids, "mean");
    auto c = ops::Const(g, std::vector<float>{1, -1, 2, -2, 0.5f, -0.5f, 3, -3}, {kDim});
    auto loss = ops::Sum(g, emb * c);
    Result<Operation> train = std::string(opt) == "sgd" ? GradientDescentOptimizer(0.1).Minimize(g, loss)
                                                  : AdagradOptimizer(0.1, 0.1).Minimize(g, loss);
    REQUIRE(train.ok());
    const Operation init = ops::GlobalVariablesInitializer(g);
    Vars reads = ShardReads(g, table);
    REQUIRE(g.status().ok());
    SessionOptions so;
    so.compute_threads = 2;
    Session s(g, so);
    REQUIRE(s.Run({}, Vars{}, {init}).ok());
    const Table t0 = ReadTable(s, table, reads);
    // Zipf-like: many duplicates, and over 4096 distinct rows.
    std::vector<int64_t> v(kBatch * kK);
    std::vector<std::vector<int64_t>> bags(kBatch);
    for (int64_t i = 0; i < kBatch * kK; ++i) {
      v[i] = (i % 7 == 0) ? (i % 13) : (i * 2654435761u) % kRows;
      bags[i / kK].push_back(v[i]);
    }
    auto out = s.Run({{"ids", Tensor::FromVector(v, {kBatch, kK})}}, Vars{emb}, {*train});
    REQUIRE(out.ok());
    CheckClose((*out)[0], Combine(t0, bags, /*mean=*/true), 1e-5);
    // Each row's gradient: sum over its occurrences of c / kK (mean).
    std::map<int64_t, double> count;
    for (int64_t id : v) count[id] += 1.0 / kK;
    REQUIRE(count.size() > 4096);
    const Table t1 = ReadTable(s, table, reads);
    const double cv[kDim] = {1, -1, 2, -2, 0.5, -0.5, 3, -3};
    for (const auto& [id, n] : count)
      for (int64_t j = 0; j < kDim; ++j) {
        const double gr = n * cv[j];
        const double want = std::string(opt) == "sgd"
                                ? t0[id][j] - 0.1 * gr
                                : t0[id][j] - 0.1 * gr / std::sqrt(0.1 + gr * gr);
        INFO(opt << " row " << id << " column " << j);
        CHECK(std::abs(t1[id][j] - want) <= 1e-5);
      }
  }
}
