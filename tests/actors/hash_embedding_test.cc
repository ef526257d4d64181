// Hash embedding tables in a session (1, 2 and 4 CPU devices): lookups of
// any int64 id against a reference built from the shards' saved rows, every
// sparse optimizer against its dense formula, metrics, checkpoints (full
// plus incremental, bit-identical) and restores into other shard counts.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <thread>

#include "kernels/optimizer_math.h"
#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"
#include "tests/support/temp_dir.h"

using namespace sf;

namespace {

using Rows = std::map<int64_t, HashEmbeddingShardSummary::Row>;

std::vector<Output> StateReads(Graph& g, const EmbeddingTable& t) {
  std::vector<Output> reads;
  for (const Output& h : t.shards) reads.push_back(ops::ReadVariable(g, h, DType::kInt64));
  return reads;
}

// Every row of every shard, by id, from the shards' states.
Rows ReadRows(Session& s, const std::vector<Output>& reads, std::vector<Tensor>* states = nullptr) {
  auto r = s.Run({}, reads);
  REQUIRE(r.ok());
  Rows rows;
  for (const Tensor& t : *r) {
    auto h = SummarizeHashEmbeddingShard(t, std::numeric_limits<int64_t>::max());
    INFO(h.status().ToString());
    REQUIRE(h.ok());
    for (auto& row : h->rows) rows[row.id] = row;
  }
  if (states) *states = *r;
  return rows;
}

SessionOptions Devices(int n) {
  SessionOptions o;
  o.num_cpu_devices = n;
  return o;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::equal(a.data<int64_t>(), a.data<int64_t>() + a.num_elements(), b.data<int64_t>());
}

}  // namespace

TEST_CASE("Hash table lookups of any int64 id match a reference on 1, 2 and 4 devices", "[hash_embedding]") {
  for (int devices : {1, 2, 4}) {
    INFO(devices << " devices");
    Graph g;
    HashEmbeddingTableOptions o;
    o.num_shards = devices == 1 ? 3 : devices;
    o.seed = 9;
    auto t = NewHashEmbeddingTable(g, "feat", 3, o);
    auto ids = ops::Placeholder(g, DType::kInt64, {-1, 3}, "ids");
    auto sum = ops::EmbeddingLookup(g, t, ids, "sum");
    auto mean = ops::EmbeddingLookup(g, t, ids, "mean");
    auto sqrtn = ops::EmbeddingLookup(g, t, ids, "sqrtn");
    auto none = ops::EmbeddingLookup(g, t, ids, "none");
    auto bag_ids = ops::Placeholder(g, DType::kInt64, {-1}, "bag_ids");
    auto offsets = ops::Placeholder(g, DType::kInt64, {-1}, "offsets");
    auto segs = ops::Placeholder(g, DType::kInt32, {-1}, "segs");
    auto bag = ops::EmbeddingLookupBag(g, t, bag_ids, offsets, "mean");
    auto seg = ops::EmbeddingLookupSegments(g, t, bag_ids, segs, 4, "sqrtn");
    Operation init = ops::GlobalVariablesInitializer(g);
    auto reads = StateReads(g, t);
    REQUIRE(g.status().ok());
    CHECK(sum.shape().ToString() == PartialShape(Shape{-1, 3}).ToString());
    Session s(g, Devices(devices));
    REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
    const int64_t big = std::numeric_limits<int64_t>::max();
    std::vector<int64_t> dense = {-5, -5, big, 7, 123456789012345, 7, 0, 1, -1, -5, -5, -5};
    std::vector<int64_t> flat = {4, -9, -9, big, 0, 6};
    auto r = s.Run({{"ids", Tensor::FromVector(dense, {4, 3})},
                    {"bag_ids", Tensor::FromVector(flat)},
                    {"offsets", Tensor::FromVector(std::vector<int64_t>{0, 0, 3})},
                    {"segs", Tensor::FromVector(std::vector<int32_t>{1, 1, 3, 1, 0, 3})}},
                   std::vector<Output>{sum, mean, sqrtn, none, bag, seg});
    REQUIRE(r.ok());
    const Rows rows = ReadRows(s, reads);
    CHECK(rows.size() == 10);
    auto combine = [&](const std::vector<int64_t>& bag_of, double scale, int64_t j) {
      double x = 0;
      for (int64_t id : bag_of) x += rows.at(id).values[j];
      return bag_of.empty() ? 0.0 : x * scale;
    };
    auto check = [&](const Tensor& got, const std::vector<std::vector<int64_t>>& bags, const char* how) {
      INFO(how);
      REQUIRE(got.dim(0) == static_cast<int64_t>(bags.size()));
      for (size_t b = 0; b < bags.size(); ++b)
        for (int64_t j = 0; j < 3; ++j) {
          const double n = static_cast<double>(bags[b].size());
          const double scale = std::string(how) == "sum" ? 1.0 : std::string(how) == "mean" ? 1.0 / n : 1.0 / std::sqrt(n);
          CHECK(got.data<float>()[b * 3 + j] == Approx(combine(bags[b], scale, j)).margin(1e-6));
        }
    };
    std::vector<std::vector<int64_t>> bags = {{-5, -5, big}, {7, 123456789012345, 7}, {0, 1, -1}, {-5, -5, -5}};
    check((*r)[0], bags, "sum");
    check((*r)[1], bags, "mean");
    check((*r)[2], bags, "sqrtn");
    std::vector<std::vector<int64_t>> singles;
    for (int64_t id : dense) singles.push_back({id});
    check(*(*r)[3].Reshaped({12, 3}), singles, "sum");
    check((*r)[4], {{}, {4, -9, -9}, {big, 0, 6}}, "mean");
    check((*r)[5], {{0}, {4, -9, big}, {}, {-9, 6}}, "sqrtn");
  }
}

namespace {

struct OptimizerCase {
  const char* name;
  std::function<std::unique_ptr<Optimizer>()> make;
  OptimizerKind kind;
  std::vector<float> scalars;
};

}  // namespace

TEST_CASE("Every sparse optimizer updates hash rows by its dense formula", "[hash_embedding][train]") {
  const std::vector<OptimizerCase> cases = {
      {"sgd", [] { return std::make_unique<GradientDescentOptimizer>(0.1); }, OptimizerKind::kGradientDescent, {0.1f}},
      {"adagrad", [] { return std::make_unique<AdagradOptimizer>(0.1); }, OptimizerKind::kAdagrad, {0.1f}},
      {"rowwise", [] { return std::make_unique<RowwiseAdagradOptimizer>(0.1); }, OptimizerKind::kRowwiseAdagrad, {0.1f}},
      {"adam", [] { return std::make_unique<AdamOptimizer>(0.01); }, OptimizerKind::kAdam, {0.01f, 0.9f, 0.999f, 1e-8f}},
      {"ftrl", [] { return std::make_unique<FtrlOptimizer>(0.1, 0.01, 0.02); }, OptimizerKind::kFtrl,
       {0.1f, 0.01f, 0.02f, -0.5f}},
  };
  for (const auto& oc : cases) {
    INFO(oc.name);
    constexpr int64_t kDim = 4;
    Graph g;
    HashEmbeddingTableOptions o;
    o.num_shards = 2;
    o.seed = 3;
    auto t = NewHashEmbeddingTable(g, "tab", kDim, o);
    auto ids = ops::Placeholder(g, DType::kInt64, {-1, 2}, "ids");
    auto emb = ops::EmbeddingLookup(g, t, ids, "sum");
    auto c = ops::Const(g, std::vector<float>{1, -2, 3, 0.5f}, {kDim});
    auto loss = ops::Sum(g, emb * c);
    auto train = oc.make()->Minimize(g, loss);
    REQUIRE(train.ok());
    Operation init = ops::GlobalVariablesInitializer(g);
    auto reads = StateReads(g, t);
    REQUIRE(g.status().ok());
    Session s(g, Devices(2));
    REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
    const std::vector<int64_t> batch = {-3, 40, -3, -3, 99999999999, 40};
    FeedMap feeds = {{"ids", Tensor::FromVector(batch, {3, 2})}};
    REQUIRE(s.Run(feeds, std::vector<Output>{}, {*train}).ok());
    const Rows r1 = ReadRows(s, reads);
    REQUIRE(s.Run(feeds, std::vector<Output>{}, {*train}).ok());
    const Rows r2 = ReadRows(s, reads);
    const float cv[kDim] = {1, -2, 3, 0.5f};
    for (int64_t id : {int64_t{-3}, int64_t{40}, int64_t{99999999999}}) {
      INFO("id " << id);
      const double n = static_cast<double>(std::count(batch.begin(), batch.end(), id));
      const auto& before = r1.at(id);
      const int64_t handles = SpecOf(oc.kind).handles - SpecOf(oc.kind).scalar_slots;
      REQUIRE(static_cast<int64_t>(before.values.size()) == handles * kDim);
      // The dense update of this one row from its state after step 1.
      std::vector<Tensor> vars;
      for (int64_t h = 0; h < handles; ++h)
        vars.push_back(Tensor::FromVector(std::vector<float>(before.values.begin() + h * kDim,
                                                             before.values.begin() + (h + 1) * kDim), {1, kDim}));
      if (oc.kind == OptimizerKind::kAdam) {  // the beta powers at step 2
        vars.push_back(Tensor::Scalar<float>(0.9f * 0.9f));
        vars.push_back(Tensor::Scalar<float>(0.999f * 0.999f));
      }
      ApplyRequest req;
      req.optimizer = oc.kind;
      for (float x : oc.scalars) req.scalars.push_back(Tensor::Scalar<float>(x));
      req.grad = Tensor(DType::kFloat32, {1, kDim});
      for (int64_t j = 0; j < kDim; ++j) req.grad.data<float>()[j] = static_cast<float>(n * cv[j]);
      std::vector<Tensor*> ptrs;
      for (auto& v : vars) ptrs.push_back(&v);
      REQUIRE(ApplyOptimizerUpdate(req, ptrs).ok());
      const auto& after = r2.at(id);
      for (int64_t h = 0; h < handles; ++h)
        for (int64_t j = 0; j < kDim; ++j)
          CHECK(after.values[h * kDim + j] == Approx(vars[h].data<float>()[j]).epsilon(1e-5).margin(1e-7));
      CHECK(after.last_seen == 1);
      CHECK(after.freq == 2 * static_cast<int64_t>(n));
    }
  }
}

TEST_CASE("Hash tables: metrics per shard, admission and eviction in a session", "[hash_embedding]") {
  Graph g;
  HashEmbeddingTableOptions o;
  o.num_shards = 2;
  o.min_count = 2;
  o.max_rows = 20;
  auto t = NewHashEmbeddingTable(g, "m", 2, o);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 1}, "ids");
  auto loss = ops::Sum(g, ops::EmbeddingLookup(g, t, ids, "sum"));
  auto train = AdagradOptimizer(0.1).Minimize(g, loss);
  REQUIRE(train.ok());
  auto metrics = ops::HashEmbeddingShardMetrics(g, t);
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g, Devices(2));
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  for (int64_t step = 0; step < 20; ++step) {
    std::vector<int64_t> batch;
    for (int64_t i = 0; i < 10; ++i) batch.push_back(step < 10 ? i : 100 * step + i % 5);
    REQUIRE(s.Run({{"ids", Tensor::FromVector(batch, {10, 1})}}, std::vector<Output>{}, {*train}).ok());
  }
  auto m = s.Run({}, metrics);
  REQUIRE(m.ok());
  int64_t rows = 0, admitted = 0, rejected = 0, evicted = 0;
  for (const Tensor& x : *m) {
    auto hm = HashEmbeddingMetricsOf(x);
    REQUIRE(hm.ok());
    CHECK(hm->rows <= 20);
    CHECK(hm->step == 20);
    CHECK(hm->bytes > 0);
    rows += hm->rows;
    admitted += hm->admitted;
    rejected += hm->rejected;
    evicted += hm->evicted;
  }
  CHECK(admitted == rows + evicted);
  CHECK(rejected == 10);           // ids 0..9 at their first sighting
  CHECK(admitted == 10 + 10 * 5);  // ids 0..9 at their second; 5 ids per later step, each seen twice at once
  CHECK(evicted > 0);
}

TEST_CASE("Hash tables: evaluating through a read-only view leaves the table as it was", "[hash_embedding]") {
  for (bool hash : {true, false}) {
    Graph g;
    EmbeddingTable t;
    if (hash) {
      HashEmbeddingTableOptions o;
      o.num_shards = 2;
      o.min_count = 2;
      t = NewHashEmbeddingTable(g, "v", 3, o);
    } else {
      EmbeddingTableOptions o;
      o.num_shards = 2;
      t = NewEmbeddingTable(g, "v", 1000, 3, o);
    }
    auto ids = ops::Placeholder(g, DType::kInt64, {-1, 1}, "ids");
    auto train = AdagradOptimizer(0.1).Minimize(g, ops::Sum(g, ops::EmbeddingLookup(g, t, ids, "sum")));
    REQUIRE(train.ok());
    auto eval = ops::EmbeddingLookup(g, ReadOnlyView(t), ids, "sum");
    std::vector<Output> reads;
    for (const Output& h : t.shards) reads.push_back(ops::ReadVariable(g, h, hash ? DType::kInt64 : DType::kFloat32));
    Operation init = ops::GlobalVariablesInitializer(g);
    REQUIRE(g.status().ok());
    Session s(g, Devices(2));
    REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
    const Tensor seen = Tensor::FromVector<int64_t>({1, 2, 3, 1, 2, 3}, {6, 1});
    for (int i = 0; i < 3; ++i) REQUIRE(s.Run({{"ids", seen}}, std::vector<Output>{}, {*train}).ok());
    auto before = s.Run({}, reads);
    REQUIRE(before.ok());
    const Tensor probe = Tensor::FromVector<int64_t>({1, 7, 8, 9}, {4, 1});
    Result<std::vector<Tensor>> out = std::vector<Tensor>{};
    for (int i = 0; i < 3; ++i) out = s.Run({{"ids", probe}}, {eval});
    REQUIRE(out.ok());
    auto after = s.Run({}, reads);
    REQUIRE(after.ok());
    for (size_t k = 0; k < before->size(); ++k)
      CHECK((hash ? SameBits((*before)[k], (*after)[k])
                  : (*before)[k].ToVector<float>() == (*after)[k].ToVector<float>()));
    if (hash) {  // ids never trained read zeros; 1 its trained row
      const std::vector<float> v = (*out)[0].ToVector<float>();
      CHECK(v[0] != 0.0f);
      CHECK(std::vector<float>(v.begin() + 3, v.end()) == std::vector<float>(9, 0.0f));
    }
  }
  // A view cannot train its table.
  Graph g;
  auto t = NewHashEmbeddingTable(g, "w", 3, {});
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 1}, "ids");
  auto loss = ops::Sum(g, ops::EmbeddingLookup(g, ReadOnlyView(t), ids, "sum"));
  auto train = AdagradOptimizer(0.1).Minimize(g, loss);
  REQUIRE_FALSE(train.ok());
  CHECK(train.status().message().find("'w'") != std::string::npos);
  CHECK(train.status().message().find("read-only") != std::string::npos);
}

TEST_CASE("Hash tables: a full checkpoint plus increments restores bit-identical", "[hash_embedding][checkpoint]") {
  testing::TempDir dir("sf_hash_ckpt");
  Graph g;
  HashEmbeddingTableOptions o;
  o.num_shards = 3;
  o.min_count = 2;
  o.max_rows = 40;
  o.ttl_steps = 5;
  o.filter_width = 1024;
  auto t = NewHashEmbeddingTable(g, "users", 4, o);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 4}, "ids");
  auto loss = ops::Sum(g, ops::EmbeddingLookup(g, t, ids, "mean"));
  auto train = AdamOptimizer(0.01).Minimize(g, loss);
  REQUIRE(train.ok());
  Operation init = ops::GlobalVariablesInitializer(g);
  auto reads = StateReads(g, t);
  REQUIRE(g.status().ok());
  std::mt19937_64 rng(17);
  auto steps = [&](Session& s, int n) {
    for (int k = 0; k < n; ++k) {
      std::vector<int64_t> batch;
      for (int i = 0; i < 32; ++i) batch.push_back(static_cast<int64_t>(rng() % 300) - 150);
      REQUIRE(s.Run({{"ids", Tensor::FromVector(batch, {8, 4})}}, std::vector<Output>{}, {*train}).ok());
    }
  };
  std::vector<Tensor> live;
  {
    Session s(g, Devices(2));
    REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
    steps(s, 6);
    REQUIRE(s.SaveCheckpoint(dir.path, 6).ok());
    for (int inc = 0; inc < 3; ++inc) {
      steps(s, 7);  // rows evicted and re-admitted between the saves
      REQUIRE(s.SaveIncrementalCheckpoint(dir.path, 13 + 7 * inc).ok());
    }
    ReadRows(s, reads, &live);
  }
  Session back(g, Devices(2));
  int64_t step = -1;
  REQUIRE(back.Restore(dir.path, -1, &step).ok());
  CHECK(step == 27);
  std::vector<Tensor> restored;
  ReadRows(back, reads, &restored);
  REQUIRE(restored.size() == live.size());
  for (size_t k = 0; k < live.size(); ++k) {
    INFO("shard " << k);
    CHECK(SameBits(restored[k], live[k]));
  }
}

TEST_CASE("Hash tables: restoring 3 shards into 2 and into 5 keeps every id's state", "[hash_embedding][checkpoint]") {
  testing::TempDir dir("sf_hash_reshard");
  auto build = [](Graph& g, int64_t shards, Operation* train, Operation* init) {
    HashEmbeddingTableOptions o;
    o.num_shards = shards;
    o.seed = 5;
    auto t = NewHashEmbeddingTable(g, "items", 3, o);
    auto ids = ops::Placeholder(g, DType::kInt64, {-1, 2}, "ids");
    auto loss = ops::Sum(g, ops::EmbeddingLookup(g, t, ids, "sum"));
    auto tr = FtrlOptimizer(0.1, 0.001, 0.001).Minimize(g, loss);
    REQUIRE(tr.ok());
    *train = *tr;
    *init = ops::GlobalVariablesInitializer(g);
    return t;
  };
  Graph g3;
  Operation train3, init3;
  auto t3 = build(g3, 3, &train3, &init3);
  auto reads3 = StateReads(g3, t3);
  REQUIRE(g3.status().ok());
  Rows want;
  {
    Session s(g3, Devices(3));
    REQUIRE(s.Run({}, std::vector<Output>{}, {init3}).ok());
    std::mt19937_64 rng(23);
    for (int step = 0; step < 5; ++step) {
      std::vector<int64_t> batch;
      for (int i = 0; i < 40; ++i) batch.push_back(static_cast<int64_t>(rng()));
      REQUIRE(s.Run({{"ids", Tensor::FromVector(batch, {20, 2})}}, std::vector<Output>{}, {train3}).ok());
    }
    want = ReadRows(s, reads3);
    REQUIRE(s.SaveCheckpoint(dir.path, 5).ok());
  }
  for (int64_t shards : {2, 5}) {
    INFO(shards << " shards");
    Graph g;
    Operation train, init;
    auto t = build(g, shards, &train, &init);
    auto reads = StateReads(g, t);
    REQUIRE(g.status().ok());
    Session s(g, Devices(2));
    REQUIRE(s.Restore(dir.path).ok());
    const Rows got = ReadRows(s, reads);
    REQUIRE(got.size() == want.size());
    for (const auto& kv : want) {
      INFO("id " << kv.first);
      REQUIRE(got.count(kv.first));
      const auto& a = got.at(kv.first);
      CHECK(a.values == kv.second.values);
      CHECK(a.last_seen == kv.second.last_seen);
      CHECK(a.freq == kv.second.freq);
    }
    // Training goes on in the new layout.
    REQUIRE(s.Run({{"ids", Tensor::FromVector(std::vector<int64_t>{1, 2}, {1, 2})}}, std::vector<Output>{}, {train}).ok());
  }
}

TEST_CASE("Hash tables: bad options and misuse are errors naming the table", "[hash_embedding][bad_input]") {
  auto options_error = [](HashEmbeddingTableOptions o, const char* what) {
    Graph g;
    auto t = NewHashEmbeddingTable(g, "bad_table", 4, o);
    CHECK_FALSE(t.valid());
    REQUIRE_FALSE(g.status().ok());
    INFO(g.status().message());
    CHECK(g.status().message().find("'bad_table'") != std::string::npos);
    CHECK(g.status().message().find(what) != std::string::npos);
  };
  HashEmbeddingTableOptions o;
  o.max_rows = -1;
  options_error(o, "max_rows");
  o = {};
  o.ttl_steps = -3;
  options_error(o, "ttl_steps");
  o = {};
  o.min_count = -1;
  options_error(o, "min_count");
  o = {};
  o.admit_probability = 1.5;
  options_error(o, "admit_probability");
  o = {};
  o.eviction = "fifo";
  options_error(o, "fifo");
  o = {};
  o.num_shards = 0;
  options_error(o, "shard");
  o = {};
  o.ram_budget_bytes = -1;
  options_error(o, "ram_budget_bytes");
  o = {};
  o.ram_budget_bytes = 1 << 20;  // a budget needs somewhere for the rest
  options_error(o, "cold_dir");
  o = {};
  o.cold_dir = "/tmp/x";  // and a cold_dir a budget
  options_error(o, "ram_budget_bytes");

  Graph g;
  auto t = NewHashEmbeddingTable(g, "tab", 2);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 1}, "ids");
  auto bad = ops::EmbeddingLookup(g, t, ids, "max");
  CHECK_FALSE(bad.valid());
  REQUIRE_FALSE(g.status().ok());
  CHECK(g.status().message().find("'tab'") != std::string::npos);
  CHECK(g.status().message().find("max") != std::string::npos);

  // One optimizer per table: a second is an error naming the table and the first.
  Graph h;
  auto ht = NewHashEmbeddingTable(h, "two", 2);
  auto hid = ops::Placeholder(h, DType::kInt64, {-1, 1}, "ids");
  auto loss = ops::Sum(h, ops::EmbeddingLookup(h, ht, hid));
  auto a = AdagradOptimizer(0.1).Minimize(h, loss);
  auto b = AdamOptimizer(0.1).Minimize(h, loss);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  Operation init = ops::GlobalVariablesInitializer(h);
  Session s(h);
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  FeedMap feeds = {{"ids", Tensor::FromVector(std::vector<int64_t>{3}, {1, 1})}};
  REQUIRE(s.Run(feeds, std::vector<Output>{}, {*a}).ok());
  auto r = s.Run(feeds, std::vector<Output>{}, {*b});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("'two'") != std::string::npos);
  CHECK(r.status().message().find("Adagrad") != std::string::npos);
}

TEST_CASE("Hash tables: two async workers under max_rows never update an evicted row", "[hash_embedding][train]") {
  // Every id is admitted at once, so a gradient row without a row (metric
  // "skipped") would mean the row was evicted between its step's lookup and
  // its update: the pins must prevent that while the workers interleave.
  Graph g;
  HashEmbeddingTableOptions o;
  o.num_shards = 2;
  o.max_rows = 48;
  auto t = NewHashEmbeddingTable(g, "async", 4, o);
  auto ids = ops::Placeholder(g, DType::kInt64, {-1, 1}, "ids");
  auto loss = ops::Sum(g, ops::EmbeddingLookup(g, t, ids, "sum"));
  auto train = AdagradOptimizer(0.1).Minimize(g, loss);
  REQUIRE(train.ok());
  auto metrics = ops::HashEmbeddingShardMetrics(g, t);
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g, Devices(2));
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  std::vector<Status> errors(2);
  auto worker = [&](int w) {
    std::mt19937_64 rng(100 + w);
    for (int step = 0; step < 60 && errors[w].ok(); ++step) {
      std::vector<int64_t> batch;
      for (int i = 0; i < 16; ++i) batch.push_back(static_cast<int64_t>(rng() % 100000) * 2 + w);
      errors[w] = s.Run({{"ids", Tensor::FromVector(batch, {16, 1})}}, std::vector<Output>{}, {*train}).status();
    }
  };
  std::thread a(worker, 0), b(worker, 1);
  a.join();
  b.join();
  CHECK(errors[0].ok());
  CHECK(errors[1].ok());
  auto m = s.Run({}, metrics);
  REQUIRE(m.ok());
  int64_t evicted = 0;
  for (const Tensor& x : *m) {
    auto hm = HashEmbeddingMetricsOf(x);
    REQUIRE(hm.ok());
    CHECK(hm->skipped == 0);
    CHECK(hm->rows <= 48);
    CHECK(hm->step == 120);
    evicted += hm->evicted;
  }
  CHECK(evicted > 0);
}

TEST_CASE("Hash tables with a cold tier train as without one and checkpoint their cold rows",
          "[hash_embedding][cold][checkpoint]") {
  testing::TempDir cold("sf_hash_cold"), ckpt("sf_hash_cold_ckpt");
  struct Model {
    Graph g;
    EmbeddingTable t;
    Operation train, init;
    std::vector<Output> reads, metrics;
  };
  auto build = [&](Model& m, bool with_cold) {
    HashEmbeddingTableOptions o;
    o.num_shards = 2;
    o.seed = 4;
    if (with_cold) {
      o.ram_budget_bytes = 4096;  // about 30 rows of 4 floats and an accumulator per shard
      o.cold_dir = cold.path;
    }
    m.t = NewHashEmbeddingTable(m.g, "users", 4, o);
    auto ids = ops::Placeholder(m.g, DType::kInt64, {-1, 4}, "ids");
    auto loss = ops::Sum(m.g, ops::EmbeddingLookup(m.g, m.t, ids, "mean"));
    auto tr = AdagradOptimizer(0.1).Minimize(m.g, loss);
    REQUIRE(tr.ok());
    m.train = *tr;
    m.init = ops::GlobalVariablesInitializer(m.g);
    m.reads = StateReads(m.g, m.t);
    m.metrics = ops::HashEmbeddingShardMetrics(m.g, m.t);
    REQUIRE(m.g.status().ok());
  };
  Model plain, tiered;
  build(plain, false);
  build(tiered, true);
  Rows want, got;
  {
    Session a(plain.g, Devices(2)), b(tiered.g, Devices(2));
    REQUIRE(a.Run({}, std::vector<Output>{}, {plain.init}).ok());
    REQUIRE(b.Run({}, std::vector<Output>{}, {tiered.init}).ok());
    std::mt19937_64 rng(29);
    for (int step = 0; step < 30; ++step) {
      std::vector<int64_t> batch;
      for (int i = 0; i < 32; ++i) batch.push_back(static_cast<int64_t>(rng() % 400) * 7919 - 1000000);
      FeedMap feeds = {{"ids", Tensor::FromVector(batch, {8, 4})}};
      REQUIRE(a.Run(feeds, std::vector<Output>{}, {plain.train}).ok());
      REQUIRE(b.Run(feeds, std::vector<Output>{}, {tiered.train}).ok());
    }
    want = ReadRows(a, plain.reads);
    got = ReadRows(b, tiered.reads);
    REQUIRE(got.size() == want.size());
    for (const auto& kv : want) {
      INFO("id " << kv.first);
      REQUIRE(got.count(kv.first));
      CHECK(got.at(kv.first).values == kv.second.values);
      CHECK(got.at(kv.first).freq == kv.second.freq);
      CHECK(got.at(kv.first).last_seen == kv.second.last_seen);
    }
    auto m = b.Run({}, tiered.metrics);
    REQUIRE(m.ok());
    int64_t cold_rows = 0, cold_hits = 0, hot = 0;
    for (const Tensor& x : *m) {
      auto hm = HashEmbeddingMetricsOf(x);
      REQUIRE(hm.ok());
      CHECK(hm->bytes <= 4096 + 16 * 4 * 4 + (1 << 16));  // rows within the budget (+ the index's floor)
      cold_rows += hm->cold_rows;
      cold_hits += hm->cold_hits;
      hot += hm->rows;
    }
    CHECK(cold_rows > 0);
    CHECK(cold_hits > 0);
    CHECK(hot + cold_rows == static_cast<int64_t>(want.size()));
    REQUIRE(b.SaveCheckpoint(ckpt.path, 30).ok());
  }
  Session back(tiered.g, Devices(2));
  REQUIRE(back.Restore(ckpt.path).ok());
  const Rows restored = ReadRows(back, tiered.reads);
  REQUIRE(restored.size() == want.size());
  for (const auto& kv : want) CHECK(restored.at(kv.first).values == kv.second.values);
}
