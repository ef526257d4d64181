#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "shardflow/cluster.h"
#include "shardflow/ops.h"
#include "shardflow/session.h"
#include "tests/support/eval_graph.h"
#include "tests/support/test_credentials.h"

using namespace sf;

namespace {

bool Contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("Session runs a small graph like the reference evaluator", "[session]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 2}, "x");
  auto c = ops::Const(g, std::vector<float>{10, 20}, {2});
  auto y = ops::Identity(g, ops::Add(g, ops::Mul(g, x, c), c), "y");
  REQUIRE(g.status().ok());
  Tensor xv = Tensor::FromVector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  auto want = testing::Eval(g, y, {{x, xv}});
  REQUIRE(want.ok());
  Session s(g);
  auto got = s.Run({{"x", xv}}, std::vector<std::string>{"y", "x:0"});
  REQUIRE(got.ok());
  CHECK((*got)[0].ToVector<float>() == want->ToVector<float>());
  CHECK((*got)[0].shape() == Shape{2, 2});
  CHECK((*got)[1].SharesBufferWith(xv));
  auto by_output = s.Run({{"x:0", xv}}, std::vector<Output>{y, c});
  REQUIRE(by_output.ok());
  CHECK((*by_output)[0].ToVector<float>() == want->ToVector<float>());
  CHECK((*by_output)[1].ToVector<float>() == std::vector<float>{10, 20});
}

TEST_CASE("Session: empty fetch list and a NoOp target", "[session]") {
  Graph g;
  Operation noop = ops::NoOp(g, {}, "nothing");
  Session s(g);
  auto r = s.Run({}, std::vector<std::string>{}, {"nothing"});
  REQUIRE(r.ok());
  CHECK(r->empty());
  CHECK(s.Run({}, std::vector<Output>{}, {noop}).ok());
}

TEST_CASE("Session: variables persist across runs", "[session]") {
  Graph g;
  auto v = ops::Variable(g, "counter", ops::Const(g, std::vector<float>{1, 2}, {2}));
  auto add = ops::AssignAdd(g, ops::VariableHandle(v), ops::Const(g, std::vector<float>{1, 1}, {2}));
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g);
  auto before = s.Run({}, std::vector<Output>{v});
  REQUIRE_FALSE(before.ok());
  CHECK(Contains(before.status(), "node 'counter' (op ReadVariable)"));
  CHECK(Contains(before.status(), "initialised"));
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  for (int i = 0; i < 3; ++i) REQUIRE(s.Run({}, std::vector<Output>{add}).ok());
  auto r = s.Run({}, std::vector<std::string>{"counter"});
  REQUIRE(r.ok());
  CHECK((*r)[0].ToVector<float>() == std::vector<float>{4, 5});
  // A second session has its own variables.
  Session s2(g);
  CHECK_FALSE(s2.Run({}, std::vector<Output>{v}).ok());
}

TEST_CASE("Session: feed errors name the feed", "[session]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 2}, "x");
  auto y = ops::Identity(g, x, "y");
  REQUIRE(g.status().ok());
  Session s(g);
  SECTION("missing feed") {
    auto r = s.Run({}, std::vector<Output>{y});
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status(), "node 'x' (op Placeholder)"));
    CHECK(Contains(r.status(), "must be fed"));
  }
  SECTION("wrong dtype") {
    auto r = s.Run({{"x", Tensor::FromVector(std::vector<int32_t>{1, 2}, {1, 2})}}, {"y"});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(Contains(r.status(), "feed 'x'"));
    CHECK(Contains(r.status(), "int32"));
  }
  SECTION("wrong shape") {
    auto r = s.Run({{"x", Tensor::FromVector(std::vector<float>{1, 2, 3}, {1, 3})}}, {"y"});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(Contains(r.status(), "feed 'x'"));
    CHECK(Contains(r.status(), "[1,3]"));
  }
  SECTION("unknown feed") {
    auto r = s.Run({{"nope", Tensor::Scalar<float>(1)}}, {"y"});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(Contains(r.status(), "feed 'nope'"));
  }
  SECTION("unknown fetch") {
    auto r = s.Run({}, std::vector<std::string>{"missing"});
    REQUIRE_FALSE(r.ok());
    CHECK(Contains(r.status(), "fetch 'missing'"));
    auto r2 = s.Run({}, std::vector<std::string>{"y:3"});
    REQUIRE_FALSE(r2.ok());
    CHECK(Contains(r2.status(), "y:3"));
  }
  SECTION("good feed still works after errors") {
    auto r = s.Run({{"x", Tensor::FromVector(std::vector<float>{1, 2}, {1, 2})}}, {"y"});
    REQUIRE(r.ok());
    CHECK((*r)[0].ToVector<float>() == std::vector<float>{1, 2});
  }
}

TEST_CASE("Session: a cycle is an error naming a node on it", "[session]") {
  Graph g;
  auto a = ops::Identity(g, ops::Const(g, 1.0f), "a");
  auto b = ops::Identity(g, a, "b");
  REQUIRE(g.AddControlInput(a.node, b.node).ok());
  Session s(g);
  auto r = s.Run({}, std::vector<Output>{b});
  REQUIRE_FALSE(r.ok());
  CHECK(Contains(r.status(), "cycle"));
  CHECK((Contains(r.status(), "'a'") || Contains(r.status(), "'b'")));
}

TEST_CASE("Session: a failing kernel returns one error naming node and op", "[session]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1}, "x");
  auto r = ops::Reshape(g, x, std::vector<int64_t>{2, 2});
  auto y = ops::Identity(g, r, "y");
  REQUIRE(g.status().ok());
  Session s(g);
  auto bad = s.Run({{"x", Tensor::FromVector(std::vector<float>{1, 2, 3})}}, std::vector<Output>{y});
  REQUIRE_FALSE(bad.ok());
  CHECK(Contains(bad.status(), "(op Reshape)"));
  CHECK(Contains(bad.status(), "node '" + r.op().name + "'"));
  auto good = s.Run({{"x", Tensor::FromVector(std::vector<float>{1, 2, 3, 4})}}, std::vector<Output>{y});
  REQUIRE(good.ok());
  CHECK((*good)[0].shape() == Shape{2, 2});
}

TEST_CASE("Session: concurrent runs from 4 threads", "[session]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {}, "x");
  Output y = x;
  for (int i = 0; i < 20; ++i) y = ops::Add(g, y, ops::Const(g, 1.0f));
  auto counter = ops::Variable(g, "n", ops::Const(g, 0.0f));
  auto bump = ops::AssignAdd(g, ops::VariableHandle(counter), ops::Const(g, 1.0f));
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const float in = static_cast<float>(t * 1000 + i);
        auto r = s.Run({{"x", Tensor::Scalar<float>(in)}}, std::vector<Output>{y, bump});
        if (!r.ok() || (*r)[0].scalar_as<float>() != in + 20) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
  auto n = s.Run({}, std::vector<Output>{counter});
  REQUIRE(n.ok());
  CHECK((*n)[0].scalar_as<float>() == 200.0f);  // updates are serialized: none lost
}

TEST_CASE("Session: RunAsync calls back with the result", "[session]") {
  Graph g;
  auto y = ops::Add(g, ops::Const(g, 2.0f), ops::Const(g, 3.0f));
  REQUIRE(g.status().ok());
  Session s(g);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<float> values;
  for (int i = 0; i < 8; ++i) {
    s.RunAsync({}, {y.name()}, {}, [&](Result<std::vector<Tensor>> r) {
      std::lock_guard<std::mutex> l(mu);
      values.push_back(r.ok() ? (*r)[0].scalar_as<float>() : -1.0f);
      ++done;
      cv.notify_all();
    });
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return done == 8; });
  CHECK(values == std::vector<float>(8, 5.0f));
}

// Speed is measured by bench/bench_op_overhead, not asserted here: these
// check that long chains of tiny ops (the benchmark's graphs) stay exact
// over many steps, with and without a constant per op.
TEST_CASE("Session: a 1000-op chain is exact over many steps", "[session]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {1}, "x");
  auto one = ops::Const(g, std::vector<float>{1}, {1});
  Output y = x;
  for (int i = 0; i < 500; ++i) y = ops::Identity(g, ops::Add(g, y, one));
  REQUIRE(g.status().ok());
  Session s(g);
  for (int i = 0; i < 50; ++i) {
    FeedMap feeds{{"x", Tensor::FromVector(std::vector<float>{static_cast<float>(i)}, {1})}};
    auto r = s.Run(feeds, std::vector<Output>{y});
    REQUIRE(r.ok());
    CHECK((*r)[0].scalar_as<float>() == 500.0f + i);
  }
}

TEST_CASE("Session: a chain with a constant per op is exact over many steps", "[session]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {1}, "x");
  Output y = x;
  for (int i = 0; i < 500; ++i) y = ops::Add(g, y, ops::Const(g, std::vector<float>{1}, {1}));
  REQUIRE(g.status().ok());
  Session s(g);
  for (int i = 0; i < 50; ++i) {
    FeedMap feeds{{"x", Tensor::FromVector(std::vector<float>{static_cast<float>(-i)}, {1})}};
    auto r = s.Run(feeds, std::vector<Output>{y});
    REQUIRE(r.ok());
    CHECK((*r)[0].scalar_as<float>() == 500.0f - i);
  }
}

TEST_CASE("Session: feeding an intermediate tensor skips its producers", "[session]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {}, "x");
  auto mid = ops::Add(g, x, ops::Const(g, 1.0f));
  auto y = ops::Mul(g, mid, ops::Const(g, 10.0f));
  REQUIRE(g.status().ok());
  Session s(g);
  // x is not fed: its consumer is cut off by the feed of mid.
  auto r = s.Run({{mid.name(), Tensor::Scalar<float>(4)}}, std::vector<Output>{y, mid});
  REQUIRE(r.ok());
  CHECK((*r)[0].scalar_as<float>() == 40.0f);
  CHECK((*r)[1].scalar_as<float>() == 4.0f);
}

TEST_CASE("Session: a graph with a construction error refuses to run", "[session]") {
  Graph g;
  auto a = ops::Const(g, std::vector<float>{1, 2}, {2});
  auto b = ops::Const(g, std::vector<float>{1, 2, 3}, {3});
  ops::Add(g, a, b);
  REQUIRE_FALSE(g.status().ok());
  Session s(g);
  auto r = s.Run({}, std::vector<Output>{a});
  REQUIRE_FALSE(r.ok());
  CHECK(Contains(r.status(), "construction error"));
}

TEST_CASE("Session: fetching from another graph is an error", "[session]") {
  Graph g, other;
  auto a = ops::Const(g, 1.0f);
  auto b = ops::Const(other, 1.0f);
  Session s(g);
  CHECK(s.Run({}, std::vector<Output>{a}).ok());
  CHECK_FALSE(s.Run({}, std::vector<Output>{b}).ok());
}

TEST_CASE("Session: fetches, feeds and targets by object or by name, refusing another graph's", "[session]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  auto v = ops::Variable(g, "v", ops::Const(g, std::vector<float>{0, 0}, {2}));
  auto y = ops::Identity(g, x + v, "y");
  Output handle = ops::VariableHandle(v);
  Output bump = ops::AssignAdd(g, handle, x);
  Operation step = ops::NoOp(g, {Operation(&g, bump.node)}, "step");
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g);
  Tensor one = Tensor::FromVector(std::vector<float>{1, 2}, {2});
  REQUIRE(s.Run({}, {}, {init}).ok());
  // Feed keyed by an Output, fetch an Output and a name, run an Operation.
  REQUIRE(s.Run({{x, one}}, {}, {step}).ok());
  auto out = s.Run({{x, one}}, {y, "y"});
  REQUIRE(out.ok());
  CHECK((*out)[0].ToVector<float>() == std::vector<float>{2, 4});
  CHECK((*out)[1].ToVector<float>() == std::vector<float>{2, 4});
  // Names and node ids still work.
  REQUIRE(s.Run({{"x", one}}, {}, {"step"}).ok());
  REQUIRE(s.Run({{"x", one}}, {}, {step.node}).ok());
  auto after = s.Run({{"x", one}}, {"y"});
  REQUIRE(after.ok());
  CHECK((*after)[0].ToVector<float>() == std::vector<float>{4, 8});

  Graph other;
  auto ox = ops::Placeholder(other, DType::kFloat32, {2}, "x");
  Operation onop = ops::NoOp(other, {}, "step");
  auto bad_fetch = s.Run({{x, one}}, {ox});
  REQUIRE(!bad_fetch.ok());
  CHECK(bad_fetch.status().code() == Code::kInvalidArgument);
  CHECK(Contains(bad_fetch.status(), "another graph"));
  auto bad_feed = s.Run({{ox, one}}, {y});
  REQUIRE(!bad_feed.ok());
  CHECK(Contains(bad_feed.status(), "feed 0"));
  auto bad_target = s.Run({{x, one}}, {}, {onop});
  REQUIRE(!bad_target.ok());
  CHECK(Contains(bad_target.status(), "another graph"));
  auto invalid = s.Run({}, {}, {Operation()});
  REQUIRE(!invalid.ok());
  CHECK(Contains(invalid.status(), "invalid Operation"));
  auto invalid_fetch = s.Run({}, {Output()});
  REQUIRE(!invalid_fetch.ok());
  CHECK(Contains(invalid_fetch.status(), "invalid Output"));
  auto empty_name = s.Run({}, {""});
  REQUIRE(!empty_name.ok());
  CHECK(Contains(empty_name.status(), "empty name"));
  // A NoOp over another graph's Operation is a graph error naming it.
  Graph third;
  Operation mixed = ops::NoOp(third, {onop}, "mixed");
  CHECK(!mixed.valid());
  CHECK(Contains(third.status(), "another graph"));
}

TEST_CASE("A Session and a ClusterNode may be destroyed on another thread than their maker's", "[session]") {
  // Front ends destroy sessions wherever their last reference goes (a Python
  // garbage collection on a worker thread); this used to wait forever.
  Graph g;
  auto c = ops::Const(g, 2.0f);
  auto s = std::make_unique<Session>(g);
  REQUIRE(s->Run({}, {c}).ok());
  NodeOptions no;
  no.tls_dir = sf::testing::TestTlsDir();
  auto node = ClusterNode::Start(no);
  REQUIRE(node.ok());
  std::unique_ptr<ClusterNode> n = std::move(node).value();
  std::promise<void> done;
  auto finished = done.get_future();
  std::thread t([&] {
    s.reset();
    n.reset();
    done.set_value();
  });
  const bool in_time = finished.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  if (!in_time) t.detach();  // the failure below names it; the process is exiting anyway
  else t.join();
  REQUIRE(in_time);
}

TEST_CASE("Session: a feed the fetches do not need is accepted, on one device and on two", "[session]") {
  for (int devices : {1, 2}) {
    INFO(devices << " device(s)");
    Graph g;
    auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
    auto unused = ops::Placeholder(g, DType::kFloat32, {2}, "unused");
    (void)unused;
    Output y;
    {
      auto scope = g.DeviceScope("/device:CPU:" + std::to_string(devices - 1));
      y = ops::Identity(g, x * x, "y");
    }
    REQUIRE(g.status().ok());
    SessionOptions so;
    so.num_cpu_devices = devices;
    Session s(g, so);
    // As in TensorFlow: it was an internal "not in the partition" error.
    auto r = s.Run({{"x", Tensor::FromVector<float>({1, 3})}, {"unused", Tensor::FromVector<float>({5, 6})}},
                   std::vector<Output>{y});
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    CHECK((*r)[0].ToVector<float>() == std::vector<float>{1, 9});
  }
}

TEST_CASE("Session: a seeded random node continues its sequence under another set of fetches", "[session]") {
  Graph g;
  auto u = ops::RandomUniform(g, {3}, 0.0, 1.0, 1);
  auto v = ops::Identity(g, u);
  auto d7 = ops::Dropout(g, ops::Ones(g, DType::kFloat32, {64}), 0.5, 7);
  auto d9 = ops::Dropout(g, ops::Ones(g, DType::kFloat32, {64}), 0.5, 9);
  REQUIRE(g.status().ok());
  Session s(g);
  auto first = s.Run({}, std::vector<Output>{u});
  auto second = s.Run({}, std::vector<Output>{u});
  auto third = s.Run({}, std::vector<Output>{v});  // a new plan, and new kernels
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  REQUIRE(third.ok());
  CHECK((*first)[0].ToVector<float>() != (*second)[0].ToVector<float>());
  // It repeated the first draw: the run count lived in each plan's kernel.
  CHECK((*third)[0].ToVector<float>() != (*first)[0].ToVector<float>());
  CHECK((*third)[0].ToVector<float>() != (*second)[0].ToVector<float>());
  // Seed 7's call 9 was seed 9's call 7 (a key symmetric in seed and call).
  std::vector<std::vector<float>> m7, m9;
  for (int i = 0; i < 10; ++i) {
    auto r = s.Run({}, std::vector<Output>{d7, d9});
    REQUIRE(r.ok());
    m7.push_back((*r)[0].ToVector<float>());
    m9.push_back((*r)[1].ToVector<float>());
  }
  CHECK(m7[9] != m9[7]);
  CHECK(m7[7] != m9[9]);
  CHECK(m7[0] != m9[0]);
}
