// Replication: synchronous steps aggregated at the shards (with backup
// workers), asynchronous staleness, the stale-synchronous barrier, and bad
// input. Reference values are computed here in double precision,
// independently of the runtime.
#include <catch2/catch.hpp>

#include <algorithm>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <mutex>
#include <thread>

#include "shardflow/embedding.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/replication.h"
#include "shardflow/session.h"
#include "tests/support/wait.h"

using namespace sf;

namespace {

constexpr int kDim = 3, kBatch = 4;

// Batch r of a fixed dataset: x [kBatch, kDim], y [kBatch].
void MakeBatch(int r, int step, std::vector<float>* x, std::vector<float>* y) {
  x->clear();
  y->clear();
  for (int i = 0; i < kBatch; ++i) {
    float t = 0.5f;
    for (int j = 0; j < kDim; ++j) {
      const float v = std::sin(1.3f * r + 0.7f * i + 0.37f * j + 0.11f * step);
      x->push_back(v);
      t += (j + 1) * v;
    }
    y->push_back(t);
  }
}

// Mean squared error gradient of a linear model, in double.
void LinearGrad(const std::vector<double>& w, double b, const std::vector<float>& x,
                const std::vector<float>& y, std::vector<double>* dw, double* db) {
  dw->assign(kDim, 0.0);
  *db = 0;
  for (int i = 0; i < kBatch; ++i) {
    double pred = b;
    for (int j = 0; j < kDim; ++j) pred += x[i * kDim + j] * w[j];
    const double e = 2.0 * (pred - y[i]) / kBatch;
    for (int j = 0; j < kDim; ++j) (*dw)[j] += e * x[i * kDim + j];
    *db += e;
  }
}

// A linear model with variables w [kDim] and b [1]; replica r's tower reads
// placeholders x<r>, y<r>.
struct Model {
  Graph g;
  Output w, b;
  std::vector<Output> losses;
  Operation init;

  explicit Model(int replicas) {
    w = ops::Variable(g, "w", ops::Const(g, std::vector<float>(kDim, 0.0f), {kDim}));
    b = ops::Variable(g, "b", ops::Const(g, std::vector<float>{0.0f}, {1}));
    for (int r = 0; r < replicas; ++r) {
      auto x = ops::Placeholder(g, DType::kFloat32, {kBatch, kDim}, "x" + std::to_string(r));
      auto y = ops::Placeholder(g, DType::kFloat32, {kBatch}, "y" + std::to_string(r));
      auto pred = ops::Add(g, ops::Reshape(g, ops::MatMul(g, x, ops::Reshape(g, w, {kDim, 1})), {kBatch}), b);
      losses.push_back(ops::Mean(g, ops::Square(g, ops::Sub(g, pred, y))));
    }
    init = ops::GlobalVariablesInitializer(g);
  }
};

FeedMap Feeds(int r, int step, const SyncReplicaTrainOp& t, int64_t token) {
  std::vector<float> x, y;
  MakeBatch(r, step, &x, &y);
  return {{"x" + std::to_string(r), Tensor::FromVector(x, {kBatch, kDim})},
          {"y" + std::to_string(r), Tensor::FromVector(y, {kBatch})},
          {t.step_tag.name(), Tensor::Scalar<int64_t>(token)}};
}

int64_t Token(Session& s, const SyncReplicaTrainOp& t) {
  auto r = s.Run({}, std::vector<Output>{t.global_step});
  REQUIRE(r.ok());
  return (*r)[0].data<int64_t>()[0];
}

// stats: an ops::SyncReplicaStats output built before the session.
std::vector<int64_t> Stats(Session& s, Output stats) {
  auto r = s.Run({}, std::vector<Output>{stats});
  REQUIRE(r.ok());
  return (*r)[0].ToVector<int64_t>();
}

}  // namespace

TEST_CASE("Sync replicas equal single-worker training on the averaged gradient", "[replication]") {
  constexpr int kWorkers = 3, kSteps = 6;
  constexpr double kLr = 0.05;
  Model m(kWorkers);
  GradientDescentOptimizer sgd(kLr);
  SyncReplicas sync(sgd, {kWorkers, kWorkers});
  std::vector<SyncReplicaTrainOp> towers;
  for (int r = 0; r < kWorkers; ++r) {
    auto t = sync.Minimize(m.g, m.losses[r], r);
    REQUIRE(t.ok());
    towers.push_back(*t);
  }
  Output w_stats = ops::SyncReplicaStats(m.g, m.w);
  REQUIRE(m.g.status().ok());
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());

  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < kSteps; ++step) {
        auto tok = s.Run({}, std::vector<Output>{towers[r].global_step});
        if (!tok.ok()) { ++failures; return; }
        const int64_t token = (*tok)[0].data<int64_t>()[0];
        auto out = s.Run(Feeds(r, step, towers[r], token), towers[r].counted_in, {towers[r].train_op});
        if (!out.ok() || (*out)[0].data<int64_t>()[0] != step) { ++failures; return; }
      }
    });
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures == 0);

  // Independent reference: one worker applying the average of the N gradients.
  std::vector<double> w(kDim, 0.0);
  double b = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<double> sw(kDim, 0.0), dw;
    double sb = 0, db;
    for (int r = 0; r < kWorkers; ++r) {
      std::vector<float> x, y;
      MakeBatch(r, step, &x, &y);
      LinearGrad(w, b, x, y, &dw, &db);
      for (int j = 0; j < kDim; ++j) sw[j] += dw[j];
      sb += db;
    }
    for (int j = 0; j < kDim; ++j) w[j] -= kLr * sw[j] / kWorkers;
    b -= kLr * sb / kWorkers;
  }
  auto got = s.Run({}, std::vector<Output>{m.w, m.b, w_stats});
  REQUIRE(got.ok());
  auto gw = (*got)[0].ToVector<float>();
  for (int j = 0; j < kDim; ++j) CHECK(gw[j] == Approx(w[j]).margin(1e-5));
  CHECK((*got)[1].ToVector<float>()[0] == Approx(b).margin(1e-5));
  CHECK((*got)[2].ToVector<int64_t>() == std::vector<int64_t>{kSteps, kWorkers * kSteps, 0, 0});
  CHECK(Token(s, towers[0]) == kSteps);
}

TEST_CASE("Sync replicas with Momentum update the slot once per step, by the average",
          "[replication]") {
  constexpr int kWorkers = 2, kSteps = 3;
  constexpr double kLr = 0.05, kMom = 0.9;
  Model m(kWorkers);
  MomentumOptimizer opt(kLr, kMom);
  SyncReplicas sync(opt, {kWorkers, kWorkers});
  std::vector<SyncReplicaTrainOp> towers;
  for (int r = 0; r < kWorkers; ++r) {
    auto t = sync.Minimize(m.g, m.losses[r], r);
    REQUIRE(t.ok());
    towers.push_back(*t);
  }
  Operation init = ops::GlobalVariablesInitializer(m.g, "init_with_slots");  // after the slots exist
  REQUIRE(m.g.status().ok());
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  std::atomic<int> failures{0};
  std::mutex err_mu;
  std::string error;
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorkers; ++r) {
    threads.emplace_back([&, r] {
      for (int step = 0; step < kSteps; ++step) {
        auto tok = s.Run({}, std::vector<Output>{towers[r].global_step});
        if (!tok.ok()) { ++failures; return; }
        auto out = s.Run(Feeds(r, step, towers[r], (*tok)[0].data<int64_t>()[0]), towers[r].counted_in,
                         {towers[r].train_op});
        if (!out.ok()) {
          std::lock_guard<std::mutex> l(err_mu);
          error = out.status().ToString();
          ++failures;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  INFO(error);
  REQUIRE(failures == 0);
  std::vector<double> w(kDim, 0.0), aw(kDim, 0.0);
  double b = 0, ab = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<double> sw(kDim, 0.0), dw;
    double sb = 0, db;
    for (int r = 0; r < kWorkers; ++r) {
      std::vector<float> x, y;
      MakeBatch(r, step, &x, &y);
      LinearGrad(w, b, x, y, &dw, &db);
      for (int j = 0; j < kDim; ++j) sw[j] += dw[j];
      sb += db;
    }
    for (int j = 0; j < kDim; ++j) {
      aw[j] = kMom * aw[j] + sw[j] / kWorkers;
      w[j] -= kLr * aw[j];
    }
    ab = kMom * ab + sb / kWorkers;
    b -= kLr * ab;
  }
  auto got = s.Run({}, std::vector<Output>{m.w, m.b});
  REQUIRE(got.ok());
  auto gw = (*got)[0].ToVector<float>();
  for (int j = 0; j < kDim; ++j) CHECK(gw[j] == Approx(w[j]).margin(1e-5));
  CHECK((*got)[1].ToVector<float>()[0] == Approx(b).margin(1e-5));
}

TEST_CASE("A step completes with the first N of N + b; the late gradient is counted as dropped",
          "[replication]") {
  constexpr double kLr = 0.1;
  Model m(3);
  GradientDescentOptimizer sgd(kLr);
  SyncReplicas sync(sgd, {2, 3});  // N = 2 of 3 workers: one backup
  std::vector<SyncReplicaTrainOp> towers;
  for (int r = 0; r < 3; ++r) {
    auto t = sync.Minimize(m.g, m.losses[r], r);
    REQUIRE(t.ok());
    towers.push_back(*t);
  }
  Output w_stats = ops::SyncReplicaStats(m.g, m.w), b_stats = ops::SyncReplicaStats(m.g, m.b);
  REQUIRE(m.g.status().ok());
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());

  // The slow worker reads its token first, then computes for a long time:
  // the two others finish step 0 without it.
  const int64_t slow_token = Token(s, towers[2]);
  CHECK(slow_token == 0);
  std::vector<std::thread> fast;
  std::atomic<int> ok{0};
  for (int r = 0; r < 2; ++r) {
    fast.emplace_back([&, r] {
      auto out = s.Run(Feeds(r, 0, towers[r], Token(s, towers[r])), towers[r].counted_in,
                       {towers[r].train_op});
      if (out.ok() && (*out)[0].data<int64_t>()[0] == 0 && (*out)[1].data<int64_t>()[0] == 0) ++ok;
    });
  }
  for (auto& t : fast) t.join();
  CHECK(ok == 2);
  // The late gradient is answered at once as stale, for both variables.
  auto late = s.Run(Feeds(2, 0, towers[2], slow_token), towers[2].counted_in, {towers[2].train_op});
  REQUIRE(late.ok());
  CHECK((*late)[0].data<int64_t>()[0] == -1);
  CHECK((*late)[1].data<int64_t>()[0] == -1);
  CHECK(Stats(s, w_stats) == std::vector<int64_t>{1, 2, 1, 0});
  CHECK(Stats(s, b_stats) == std::vector<int64_t>{1, 2, 1, 0});

  // The value is the average of the two fast workers' gradients only.
  std::vector<double> w0(kDim, 0.0), sw(kDim, 0.0), dw;
  double sb = 0, db;
  for (int r = 0; r < 2; ++r) {
    std::vector<float> x, y;
    MakeBatch(r, 0, &x, &y);
    LinearGrad(w0, 0.0, x, y, &dw, &db);
    for (int j = 0; j < kDim; ++j) sw[j] += dw[j];
    sb += db;
  }
  auto got = s.Run({}, std::vector<Output>{m.w, m.b});
  REQUIRE(got.ok());
  auto gw = (*got)[0].ToVector<float>();
  for (int j = 0; j < kDim; ++j) CHECK(gw[j] == Approx(-kLr * sw[j] / 2).margin(1e-5));
  CHECK((*got)[1].ToVector<float>()[0] == Approx(-kLr * sb / 2).margin(1e-5));
}

TEST_CASE("A pending sync step is aborted or times out instead of hanging", "[replication]") {
  Model m(2);
  GradientDescentOptimizer sgd(0.1);
  SyncReplicas sync(sgd, {2, 2});
  auto t0 = sync.Minimize(m.g, m.losses[0], 0);
  REQUIRE(t0.ok());
  Operation abort_w = ops::AbortSyncStep(m.g, m.w);
  Operation abort_b = ops::AbortSyncStep(m.g, m.b);
  Operation abort_all = ops::NoOp(m.g, {abort_w, abort_b});
  SyncReplicas sync_timeout(sgd, {2, 2, /*timeout_ms=*/100});
  auto t1 = sync_timeout.Minimize(m.g, m.losses[1], 1);
  REQUIRE(t1.ok());
  Output w_stats = ops::SyncReplicaStats(m.g, m.w), b_stats = ops::SyncReplicaStats(m.g, m.b);
  REQUIRE(m.g.status().ok());
  Session s(m.g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {m.init}).ok());

  Result<std::vector<Tensor>> waited = Internal("not run");
  std::atomic<bool> finished{false};
  std::thread worker([&] {
    waited = s.Run(Feeds(0, 0, *t0, 0), t0->counted_in, {t0->train_op});
    finished = true;
  });
  // Abort until the worker is released: its gradients may reach the shards
  // after the first aborts. Wait for the worker itself, not for both
  // variables to drop a gradient: once the first aborted offer fails the
  // step, the other variable's offer may never be made (the step skips the
  // ops it has not started), and waiting for it hung this test under load.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!finished) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    REQUIRE(s.Run({}, std::vector<Output>{}, {abort_all}).ok());
  }
  worker.join();
  REQUIRE_FALSE(waited.ok());
  CHECK(waited.status().code() == Code::kAborted);
  CHECK_THAT(waited.status().message(), Catch::Contains("aborted"));
  // Each variable dropped the one gradient it was offered, or was never
  // offered one, or still holds it: the failed step's abort answered its
  // wait there (ReplicationService::AbortWaits), and a gradient that
  // arrived counts in its step, as after a timeout. At least one dropped.
  const std::vector<int64_t> ws = Stats(s, w_stats), bs = Stats(s, b_stats);
  INFO("w " << ws[0] << "," << ws[1] << "," << ws[2] << "," << ws[3] << "; b " << bs[0] << "," << bs[1] << ","
            << bs[2] << "," << bs[3]);
  const std::vector<std::vector<int64_t>> allowed = {{0, 0, 1, 0}, {0, 0, 0, 0}, {0, 0, 0, 1}};
  CHECK(std::find(allowed.begin(), allowed.end(), ws) != allowed.end());
  CHECK(std::find(allowed.begin(), allowed.end(), bs) != allowed.end());
  CHECK(ws[2] + bs[2] >= 1);

  // With a timeout the lone worker's wait fails after about 100 ms.
  const auto start = std::chrono::steady_clock::now();
  auto timed = s.Run(Feeds(1, 0, *t1, 0), t1->counted_in, {t1->train_op});
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  REQUIRE_FALSE(timed.ok());
  CHECK(timed.status().code() == Code::kUnavailable);
  CHECK_THAT(timed.status().message(), Catch::Contains("variable '"));
  CHECK(ms >= 90);
  CHECK(ms < 5000);
}

TEST_CASE("Async staleness is version at apply minus version read", "[replication]") {
  Graph g;
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1.0f, 2.0f}, {2}));
  Output h = ops::VariableHandle(w);
  auto grad = ops::Placeholder(g, DType::kFloat32, {2}, "grad");
  auto ver = ops::Placeholder(g, DType::kInt64, PartialShape(Shape{}), "ver");
  AttrMap a;
  a.Set("optimizer", std::string("GradientDescent"));
  int apply = g.AddNode("ApplyGradientAsync", {h, ops::Const(g, 0.5f), grad, ver}, std::move(a));
  VersionedRead read = ReadVariableWithVersion(g, w);
  Output stale = ops::StalenessStats(g, w);
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  auto version = [&] {
    auto r = s.Run({}, std::vector<Output>{read.version});
    REQUIRE(r.ok());
    return (*r)[0].data<int64_t>()[0];
  };
  auto update = [&](int64_t v, float gv) {
    auto r = s.Run({{"grad", Tensor::FromVector(std::vector<float>{gv, gv})},
                    {"ver", Tensor::Scalar<int64_t>(v)}},
                   std::vector<Output>{}, {apply});
    REQUIRE(r.ok());
  };
  // A and B read version 0; A applies (staleness 0), then B (1). C reads 2,
  // D reads 2 and applies (0), E applies with the version 0 it read long ago (3).
  const int64_t a_read = version(), b_read = version();
  update(a_read, 1.0f);
  update(b_read, 1.0f);
  const int64_t d_read = version();
  CHECK(d_read == 2);
  update(d_read, 1.0f);
  update(0, 1.0f);
  auto r = s.Run({}, std::vector<Output>{stale, w, read.version});
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<double>() == std::vector<double>{4.0, 1.0, 3.0});
  CHECK((*r)[1].ToVector<float>() == std::vector<float>{1.0f - 4 * 0.5f, 2.0f - 4 * 0.5f});
  CHECK((*r)[2].data<int64_t>()[0] == 4);
}

TEST_CASE("MinimizeAsync trains with versioned reads", "[replication]") {
  Graph g;
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{0.0f}, {1}));
  VersionedRead read = ReadVariableWithVersion(g, w);
  auto loss = ops::Sum(g, ops::Square(g, ops::Sub(g, read.value, ops::Const(g, std::vector<float>{3.0f}, {1}))));
  GradientDescentOptimizer sgd(0.25);
  auto train = MinimizeAsync(g, sgd, loss, {read});
  REQUIRE(train.ok());
  Output stale = ops::StalenessStats(g, w);
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  for (int i = 0; i < 3; ++i) REQUIRE(s.Run({}, std::vector<Output>{}, {*train}).ok());
  auto r = s.Run({}, std::vector<Output>{w, stale});
  REQUIRE(r.ok());
  // w <- w - 0.25 * 2 (w - 3): 0 -> 1.5 -> 2.25 -> 2.625; one worker: staleness 0.
  CHECK((*r)[0].ToVector<float>()[0] == Approx(2.625f));
  CHECK((*r)[1].ToVector<double>() == std::vector<double>{3.0, 0.0, 0.0});
}

TEST_CASE("The stale-synchronous barrier holds a worker more than s clocks ahead", "[replication]") {
  Graph g;
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{0.0f}, {1}));
  auto c0 = ops::Placeholder(g, DType::kInt64, PartialShape(Shape{}), "c0");
  auto c1 = ops::Placeholder(g, DType::kInt64, PartialShape(Shape{}), "c1");
  Operation wait0 = ops::StaleSyncWait(g, w, c0, 0, 2, 1);
  Operation wait1 = ops::StaleSyncWait(g, w, c1, 1, 2, 1);
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  auto clock = [](int64_t c) { return Tensor::Scalar<int64_t>(c); };
  REQUIRE(s.Run({{"c0", clock(0)}}, std::vector<Output>{}, {wait0}).ok());
  REQUIRE(s.Run({{"c0", clock(1)}}, std::vector<Output>{}, {wait0}).ok());  // 1 ahead: allowed
  std::atomic<bool> released{false};
  std::thread ahead([&] {
    auto r = s.Run({{"c0", clock(2)}}, std::vector<Output>{}, {wait0});  // 2 ahead: waits
    CHECK(r.ok());
    released = true;
  });
  // A negative check: nothing may release worker 0 while worker 1 is at
  // clock 0, so the fixed time is the point (the barrier has no query for a
  // waiter; a worker that had not reached it yet would pass this check and
  // the join below alike).
  testing::PauseFor(std::chrono::milliseconds(100));
  CHECK_FALSE(released);
  REQUIRE(s.Run({{"c1", clock(1)}}, std::vector<Output>{}, {wait1}).ok());
  ahead.join();
  CHECK(released);
}

TEST_CASE("Replication bad input gets errors naming the variable", "[replication]") {
  {
    Model m(1);
    GradientDescentOptimizer sgd(0.1);
    auto t = SyncReplicas(sgd, {0, 1}).Minimize(m.g, m.losses[0], 0);
    REQUIRE_FALSE(t.ok());
    CHECK_THAT(t.status().message(), Catch::Contains("replicas_to_aggregate must be >= 1"));
    auto t2 = SyncReplicas(sgd, {2, 1}).Minimize(m.g, m.losses[0], 0);
    REQUIRE_FALSE(t2.ok());
    CHECK_THAT(t2.status().message(), Catch::Contains("total_num_replicas"));
  }
  {  // A raw op with N < 1 or a gradient of the wrong shape, at build time.
    Graph g;
    auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{0, 0, 0}, {3}));
    AttrMap a;
    a.Set("optimizer", std::string("GradientDescent"));
    a.Set("num_required", int64_t{0});
    g.AddNode("ApplyGradientSync", {ops::VariableHandle(w), ops::Const(g, 0.1f),
                                    ops::Const(g, std::vector<float>{1, 1, 1}, {3}), ops::Const(g, int64_t{0})},
              a);
    REQUIRE_FALSE(g.status().ok());
    CHECK_THAT(g.status().message(), Catch::Contains("variable 'w'"));
    CHECK_THAT(g.status().message(), Catch::Contains("num_required >= 1"));
  }
  {
    Graph g;
    auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{0, 0, 0}, {3}));
    AttrMap a;
    a.Set("optimizer", std::string("GradientDescent"));
    a.Set("num_required", int64_t{1});
    g.AddNode("ApplyGradientSync", {ops::VariableHandle(w), ops::Const(g, 0.1f),
                                    ops::Const(g, std::vector<float>{1, 1}, {2}), ops::Const(g, int64_t{0})},
              a);
    REQUIRE_FALSE(g.status().ok());
    CHECK_THAT(g.status().message(), Catch::Contains("variable 'w'"));
    CHECK_THAT(g.status().message(), Catch::Contains("shape"));
  }
  {  // At run time: a fed gradient of the wrong shape, and workers disagreeing on N.
    Graph g;
    auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{0, 0, 0}, {3}));
    auto grad = ops::Placeholder(g, DType::kFloat32, {-1}, "grad");
    auto make = [&](int64_t n) {
      AttrMap a;
      a.Set("optimizer", std::string("GradientDescent"));
      a.Set("num_required", n);
      a.Set("timeout_ms", int64_t{2000});
      return g.AddNode("ApplyGradientSync",
                       {ops::VariableHandle(w), ops::Const(g, 0.1f), grad, ops::Const(g, int64_t{0})}, a);
    };
    int n1 = make(1), n2 = make(2);
    Operation init = ops::GlobalVariablesInitializer(g);
    REQUIRE(g.status().ok());
    Session s(g);
    REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
    auto bad = s.Run({{"grad", Tensor::FromVector(std::vector<float>{1, 2})}}, std::vector<Output>{}, {n1});
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(bad.status().message(), Catch::Contains("variable 'w'"));
    CHECK_THAT(bad.status().message(), Catch::Contains("[2]"));
    // A worker asking for another N than the ones before is refused.
    FeedMap ok_grad{{"grad", Tensor::FromVector(std::vector<float>{1, 2, 3})}};
    REQUIRE(s.Run(ok_grad, std::vector<Output>{}, {n1}).ok());
    auto other = s.Run(ok_grad, std::vector<Output>{}, {n2});
    REQUIRE_FALSE(other.ok());
    CHECK_THAT(other.status().message(), Catch::Contains("variable 'w'"));
    CHECK_THAT(other.status().message(), Catch::Contains("asks for 2"));
  }
}

namespace {

// Runs rank r's AllReduce node of a group in its own thread, `rounds` times
// with value(r, round); returns each rank's results.
std::vector<std::vector<Result<std::vector<Tensor>>>> RunGroup(
    Session& s, const std::vector<Output>& nodes, const std::vector<std::string>& feeds, int rounds,
    const std::function<Tensor(int, int)>& value) {
  const int n = static_cast<int>(nodes.size());
  std::vector<std::vector<Result<std::vector<Tensor>>>> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      for (int k = 0; k < rounds; ++k) out[r].push_back(s.Run({{feeds[r], value(r, k)}}, std::vector<Output>{nodes[r]}));
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace

TEST_CASE("Ring all-reduce equals the plain sum", "[replication][allreduce]") {
  for (int n : {1, 2, 3, 4}) {
    INFO("group size " << n);
    Graph g;
    std::vector<Output> nodes;
    std::vector<std::string> feeds;
    for (int r = 0; r < n; ++r) {
      feeds.push_back("v" + std::to_string(r));
      auto v = ops::Placeholder(g, DType::kFloat32, {2, 5}, feeds.back());
      nodes.push_back(ops::AllReduce(g, v, "grads", n, r));
    }
    REQUIRE(g.status().ok());
    Session s(g);
    auto value = [](int r, int k) {
      std::vector<float> v;
      for (int i = 0; i < 10; ++i) v.push_back(static_cast<float>((r + 1) * (i + 1) + 100 * k));
      return Tensor::FromVector(v, {2, 5});
    };
    auto out = RunGroup(s, nodes, feeds, 3, value);
    for (int k = 0; k < 3; ++k) {
      std::vector<float> want(10, 0.0f);
      for (int r = 0; r < n; ++r) {
        auto v = value(r, k).ToVector<float>();
        for (int i = 0; i < 10; ++i) want[i] += v[i];
      }
      for (int r = 0; r < n; ++r) {
        REQUIRE(out[r][k].ok());
        CHECK((*out[r][k])[0].shape() == Shape{2, 5});
        CHECK((*out[r][k])[0].ToVector<float>() == want);
      }
    }
  }
}

TEST_CASE("Ring all-reduce with fewer elements than ranks, in float64", "[replication][allreduce]") {
  Graph g;
  std::vector<Output> nodes;
  std::vector<std::string> feeds;
  for (int r = 0; r < 3; ++r) {
    feeds.push_back("v" + std::to_string(r));
    nodes.push_back(ops::AllReduce(g, ops::Placeholder(g, DType::kFloat64, {2}, feeds.back()), "tiny", 3, r));
  }
  REQUIRE(g.status().ok());
  Session s(g);
  auto out = RunGroup(s, nodes, feeds, 1, [](int r, int) {
    return Tensor::FromVector(std::vector<double>{0.5 * r, 1.0 + r});
  });
  for (int r = 0; r < 3; ++r) {
    REQUIRE(out[r][0].ok());
    CHECK((*out[r][0])[0].ToVector<double>() == std::vector<double>{1.5, 6.0});
  }
}

TEST_CASE("Ring all-reduce refuses mismatched shapes and bad ranks naming the group",
          "[replication][allreduce]") {
  Graph g;
  auto a = ops::AllReduce(g, ops::Placeholder(g, DType::kFloat32, {-1}, "a"), "mixed", 2, 0);
  auto b = ops::AllReduce(g, ops::Placeholder(g, DType::kFloat32, {-1}, "b"), "mixed", 2, 1);
  auto c = ops::AllReduce(g, ops::Placeholder(g, DType::kFloat32, {-1}, "c"), "mixed", 3, 2);
  REQUIRE(g.status().ok());
  Session s(g);
  auto out = RunGroup(s, {a, b}, {"a", "b"}, 1, [](int r, int) {
    return Tensor::FromVector(std::vector<float>(r == 0 ? 3 : 4, 1.0f));
  });
  for (int r = 0; r < 2; ++r) {
    REQUIRE_FALSE(out[r][0].ok());
    CHECK_THAT(out[r][0].status().message(), Catch::Contains("all-reduce group 'mixed'"));
    CHECK_THAT(out[r][0].status().message(), Catch::Contains("same shape"));
  }
  auto wrong = s.Run({{"c", Tensor::FromVector(std::vector<float>{1})}}, std::vector<Output>{c});
  REQUIRE_FALSE(wrong.ok());
  CHECK_THAT(wrong.status().message(), Catch::Contains("all-reduce group 'mixed' has 2 ranks"));

  Graph g2;
  g2.AddNode("AllReduce", {ops::Const(g2, 1.0f)}, [] {
    AttrMap m;
    m.Set("group_key", std::string("k"));
    m.Set("group_size", int64_t{2});
    m.Set("rank", int64_t{2});
    return m;
  }());
  REQUIRE_FALSE(g2.status().ok());
  CHECK_THAT(g2.status().message(), Catch::Contains("all-reduce group 'k'"));
}

TEST_CASE("Sync replicas average an embedding table's sparse updates: one Adagrad update per step, however many lookups", "[replication]") {
  // Replica r's loss: sum(lookup(ids_r) * c_r), so d loss / d row is known.
  // The reference: the same table trained without replication on one lookup
  // of both replicas' ids with half the weights, i.e. the averaged gradient
  // applied once per step.
  // With two_lookups each replica reads its ids' two columns in two lookups
  // of the table (the same loss): still one update per shard and step.
  constexpr int kWorkers = 2, kSteps = 3, kB = 3, kD = 2;
  for (const auto& [hash, two_lookups] : {std::pair{false, false}, {true, false}, {false, true}, {true, true}}) {
    INFO((hash ? "hash table" : "fixed table") << (two_lookups ? ", two lookups per replica" : ""));
    Graph g;
    auto table = [&](const std::string& name) {
      if (hash) {
        HashEmbeddingTableOptions o;
        o.seed = 7;
        return NewHashEmbeddingTable(g, name, kD, o);
      }
      EmbeddingTableOptions o;
      o.seed = 7;
      return NewEmbeddingTable(g, name, 10, kD, o);
    };
    EmbeddingTable t = table("users"), ref = table("reference");
    std::vector<Output> ids, losses;
    for (int r = 0; r < kWorkers; ++r) {
      ids.push_back(ops::Placeholder(g, DType::kInt64, {kB, 2}, "ids" + std::to_string(r)));
      std::vector<float> c;
      for (int i = 0; i < kB * kD; ++i) c.push_back(0.5f + 0.25f * i + r);
      Output emb = two_lookups
                       ? ops::Add(g, ops::EmbeddingLookup(g, t, ops::Slice(g, ids.back(), {0, 0}, {kB, 1}), "sum"),
                                  ops::EmbeddingLookup(g, t, ops::Slice(g, ids.back(), {0, 1}, {kB, 1}), "sum"))
                       : ops::EmbeddingLookup(g, t, ids.back(), "sum");
      losses.push_back(ops::Sum(g, ops::Mul(g, emb, ops::Const(g, c, {kB, kD}))));
    }
    std::vector<float> half;
    for (int r = 0; r < kWorkers; ++r)
      for (int i = 0; i < kB * kD; ++i) half.push_back((0.5f + 0.25f * i + r) / kWorkers);
    auto both = ops::Concat(g, {ids[0], ids[1]}, 0);
    auto ref_loss = ops::Sum(g, ops::Mul(g, ops::EmbeddingLookup(g, ref, both, "sum"),
                                         ops::Const(g, half, {kWorkers * kB, kD})));
    AdagradOptimizer adagrad(0.3);
    SyncReplicas sync(adagrad, {kWorkers, kWorkers});
    std::vector<SyncReplicaTrainOp> towers;
    for (int r = 0; r < kWorkers; ++r) {
      auto tower = sync.Minimize(g, losses[r], r, t.shards);
      REQUIRE(tower.ok());
      towers.push_back(*tower);
    }
    AdagradOptimizer plain(0.3);
    auto ref_train = plain.Minimize(g, ref_loss, ref.shards);
    REQUIRE(ref_train.ok());
    auto probe_ids = ops::Placeholder(g, DType::kInt64, {10, 1}, "probe");
    auto probe = ops::EmbeddingLookup(g, t, probe_ids, "sum");
    auto probe_ref = ops::EmbeddingLookup(g, ref, probe_ids, "sum");
    auto init = ops::GlobalVariablesInitializer(g);
    REQUIRE(g.status().ok());
    Session s(g);
    REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
    auto batch = [](int r, int step) {
      std::vector<int64_t> v;
      for (int i = 0; i < kB * 2; ++i) v.push_back((3 * r + 5 * step + 7 * i) % 10);  // rows shared across replicas
      return Tensor::FromVector(v, {kB, 2});
    };
    for (int step = 0; step < kSteps; ++step) {
      const int64_t token = Token(s, towers[0]);
      std::vector<std::thread> threads;
      std::atomic<int> failures{0};
      for (int r = 0; r < kWorkers; ++r)
        threads.emplace_back([&, r] {
          auto out = s.Run({{"ids" + std::to_string(r), batch(r, step)}, {towers[r].step_tag.name(), Tensor::Scalar<int64_t>(token)}},
                           towers[r].counted_in, {towers[r].train_op});
          if (!out.ok() || (*out)[0].data<int64_t>()[0] != step) ++failures;
        });
      for (auto& th : threads) th.join();
      REQUIRE(failures == 0);
      REQUIRE(s.Run({{"ids0", batch(0, step)}, {"ids1", batch(1, step)}}, std::vector<Output>{}, {*ref_train}).ok());
    }
    std::vector<int64_t> all;
    for (int64_t i = 0; i < 10; ++i) all.push_back(i);
    auto got = s.Run({{"probe", Tensor::FromVector(all, {10, 1})}}, std::vector<Output>{probe, probe_ref});
    REQUIRE(got.ok());
    auto a = (*got)[0].ToVector<float>(), b = (*got)[1].ToVector<float>();
    REQUIRE(a.size() == b.size());
    bool moved = false;
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-6));
    // And training happened (the reference moved from the initial rows).
    auto init_rows = [&] {
      Session fresh(g);
      REQUIRE(fresh.Run({}, std::vector<Output>{}, {init}).ok());
      auto r = fresh.Run({{"probe", Tensor::FromVector(all, {10, 1})}}, std::vector<Output>{probe});
      REQUIRE(r.ok());
      return (*r)[0].ToVector<float>();
    }();
    for (size_t i = 0; i < a.size(); ++i) moved = moved || std::abs(a[i] - init_rows[i]) > 1e-3;
    CHECK(moved);
    // A stale tag is dropped, not applied.
    auto stale = s.Run({{"ids0", batch(0, 0)}, {towers[0].step_tag.name(), Tensor::Scalar<int64_t>(0)}},
                       towers[0].counted_in, {towers[0].train_op});
    REQUIRE(stale.ok());
    CHECK((*stale)[0].data<int64_t>()[0] == -1);
  }
}
