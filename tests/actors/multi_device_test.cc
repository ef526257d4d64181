// Sessions over two CPU devices: partitioned graphs with _Send/_Recv through
// the step rendezvous must compute what one device computes.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "runtime/rendezvous.h"
#include "graph/partition.h"
#include "graph/placement.h"
#include "shardflow/control_flow.h"
#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "shardflow/session.h"

using namespace sf;

namespace {

using Vars = std::vector<Output>;
const char* kCpu0 = "/device:CPU:0";
const char* kCpu1 = "/device:CPU:1";

SessionOptions TwoDevices() {
  SessionOptions o;
  o.num_cpu_devices = 2;
  return o;
}

bool Contains(const Status& s, const std::string& what) {
  return s.message().find(what) != std::string::npos;
}

}  // namespace

TEST_CASE("Two devices: a split graph gives the one-device results", "[multi_device]") {
  Graph g;
  Output x, y, a, b, c, d, e;
  {
    auto s0 = g.DeviceScope(kCpu0);
    x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
    a = ops::Mul(g, x, ops::Const(g, 2.0f));
  }
  {
    auto s1 = g.DeviceScope(kCpu1);
    y = ops::Placeholder(g, DType::kFloat32, {2}, "y");
    // Three consumers of `a` on the other device.
    b = ops::Add(g, a, y);
    c = ops::Mul(g, a, y);
    d = ops::Neg(g, a);
  }
  {
    auto s0 = g.DeviceScope(kCpu0);
    e = ops::AddN(g, {b, c, d});
  }
  REQUIRE(g.status().ok());
  FeedMap feeds = {{"x", Tensor::FromVector(std::vector<float>{1, 2}, {2})},
                   {"y", Tensor::FromVector(std::vector<float>{3, 5}, {2})}};
  Session one(g);
  Session two(g, TwoDevices());
  auto r1 = one.Run(feeds, Vars{a, b, c, d, e});
  auto r2 = two.Run(feeds, Vars{a, b, c, d, e});
  REQUIRE(r1.ok());
  REQUIRE(r2.ok());
  // a = [2, 4]; b = [5, 9]; c = [6, 20]; d = [-2, -4]; e = [9, 25].
  CHECK((*r2)[0].ToVector<float>() == std::vector<float>{2, 4});
  CHECK((*r2)[1].ToVector<float>() == std::vector<float>{5, 9});
  CHECK((*r2)[2].ToVector<float>() == std::vector<float>{6, 20});
  CHECK((*r2)[3].ToVector<float>() == std::vector<float>{-2, -4});
  CHECK((*r2)[4].ToVector<float>() == std::vector<float>{9, 25});
  for (int i = 0; i < 5; ++i) CHECK((*r1)[i].ToVector<float>() == (*r2)[i].ToVector<float>());
  // A fetch of only one device's share runs just what it needs.
  auto only = two.Run({feeds[1]}, std::vector<std::string>{"y"});
  REQUIRE(only.ok());
  CHECK((*only)[0].ToVector<float>() == std::vector<float>{3, 5});
}

TEST_CASE("Two devices: a cross-device control edge is honoured", "[multi_device]") {
  Graph g;
  Output counter, bump, read;
  {
    auto s0 = g.DeviceScope(kCpu0);
    counter = ops::Variable(g, "counter", ops::Const(g, 0.0f));
    bump = ops::AssignAdd(g, ops::VariableHandle(counter), ops::Const(g, 1.0f));
  }
  Output relay;
  {
    auto s1 = g.DeviceScope(kCpu1);
    relay = ops::Identity(g, ops::Const(g, 7.0f), "relay");
    REQUIRE(g.AddControlInput(relay.node, bump.node).ok());
  }
  {
    auto s0 = g.DeviceScope(kCpu0);
    read = ops::ReadVariable(g, ops::VariableHandle(counter), DType::kFloat32);
    REQUIRE(g.AddControlInput(read.node, relay.node).ok());
  }
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g, TwoDevices());
  REQUIRE(s.Run({}, Vars{}, {init}).ok());
  // The read waits for the bump through CPU:1 and back, every step.
  for (int i = 1; i <= 20; ++i) {
    auto r = s.Run({}, Vars{read, relay});
    REQUIRE(r.ok());
    CHECK((*r)[0].scalar_as<float>() == static_cast<float>(i));
    CHECK((*r)[1].scalar_as<float>() == 7.0f);
  }
}

TEST_CASE("Two devices: Cond branches on the other device", "[multi_device]") {
  // whole: the Cond is on CPU:1; else only its branch ops are, so dead
  // values cross back to the Merge on CPU:0.
  const bool whole = GENERATE(true, false);
  Graph g;
  Output p, x;
  {
    auto s0 = g.DeviceScope(kCpu0);
    p = ops::Placeholder(g, DType::kBool, PartialShape({}), "p");
    x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  }
  Vars r;
  {
    auto outer = g.DeviceScope(whole ? kCpu1 : kCpu0);
    r = Cond(g, p,
             [&](Graph& g) {
               auto s1 = g.DeviceScope(kCpu1);
               return Vars{ops::Mul(g, x, ops::Const(g, 2.0f))};
             },
             [&](Graph& g) {
               auto s1 = g.DeviceScope(kCpu1);
               return Vars{ops::Sub(g, x, ops::Const(g, 1.0f))};
             });
  }
  Output out;
  {
    auto s0 = g.DeviceScope(kCpu0);
    out = ops::Add(g, r[0], ops::Const(g, 100.0f));
  }
  REQUIRE(g.status().ok());
  Session s(g, TwoDevices());
  Tensor xv = Tensor::FromVector(std::vector<float>{3, 4}, {2});
  for (int i = 0; i < 10; ++i) {
    const bool pred = i % 2 == 0;
    auto t = s.Run({{"p", Tensor::Scalar<bool>(pred)}, {"x", xv}}, Vars{r[0], out});
    REQUIRE(t.ok());
    if (pred) {
      CHECK((*t)[0].ToVector<float>() == std::vector<float>{6, 8});
      CHECK((*t)[1].ToVector<float>() == std::vector<float>{106, 108});
    } else {
      CHECK((*t)[0].ToVector<float>() == std::vector<float>{2, 3});
      CHECK((*t)[1].ToVector<float>() == std::vector<float>{102, 103});
    }
  }
}

TEST_CASE("Two devices: a loop on CPU:1 fed from and read on CPU:0", "[multi_device]") {
  Graph g;
  Output n;
  {
    auto s0 = g.DeviceScope(kCpu0);
    n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
  }
  Result<Vars> loop = Vars{};
  {
    auto s1 = g.DeviceScope(kCpu1);
    WhileLoopOptions o;
    o.name = "fib";
    // (i, a, b) -> (i + 1, b, a + b) while i < n.
    loop = WhileLoop(
        g, [n](Graph& g, const Vars& v) { return ops::Less(g, v[0], n); },
        [](Graph& g, const Vars& v) {
          return Vars{ops::Add(g, v[0], ops::Const(g, int32_t{1})), v[2], ops::Add(g, v[1], v[2])};
        },
        {ops::Const(g, int32_t{0}), ops::Const(g, int32_t{0}), ops::Const(g, int32_t{1})}, o);
  }
  REQUIRE(loop.ok());
  Output twice;
  {
    auto s0 = g.DeviceScope(kCpu0);
    twice = ops::Mul(g, (*loop)[1], ops::Const(g, int32_t{2}));
  }
  REQUIRE(g.status().ok());
  Session one(g);
  Session two(g, TwoDevices());
  for (int k : {0, 1, 2, 10, 20}) {
    auto r1 = one.Run({{"n", Tensor::Scalar<int32_t>(k)}}, Vars{(*loop)[1], twice});
    auto r2 = two.Run({{"n", Tensor::Scalar<int32_t>(k)}}, Vars{(*loop)[1], twice});
    REQUIRE(r1.ok());
    REQUIRE(r2.ok());
    CHECK((*r2)[0].scalar_as<int32_t>() == (*r1)[0].scalar_as<int32_t>());
    CHECK((*r2)[1].scalar_as<int32_t>() == 2 * (*r1)[0].scalar_as<int32_t>());
  }
  auto f20 = two.Run({{"n", Tensor::Scalar<int32_t>(20)}}, Vars{(*loop)[1]});
  REQUIRE(f20.ok());
  CHECK((*f20)[0].scalar_as<int32_t>() == 6765);
}

// A loop whose control (Enter/Merge/Switch/LoopCond/NextIteration/Exit)
// is on CPU:0 and whose body ops are on CPU:1.
Result<Vars> SplitLoop(Graph& g, Output n, bool fib) {
  auto s0 = g.DeviceScope(kCpu0);
  WhileLoopOptions o;
  o.name = fib ? "fib" : "sum";
  o.parallel_iterations = 4;
  auto init = fib ? Vars{ops::Const(g, int32_t{0}), ops::Const(g, int32_t{0}), ops::Const(g, int32_t{1})}
                  : Vars{ops::Const(g, int32_t{0}), ops::Const(g, int32_t{0})};
  return WhileLoop(
      g, [n](Graph& g, const Vars& v) { return ops::Less(g, v[0], n); },
      [fib](Graph& g, const Vars& v) {
        auto s1 = g.DeviceScope(kCpu1);
        Output i1 = ops::Add(g, v[0], ops::Const(g, int32_t{1}));
        if (fib) return Vars{i1, v[2], ops::Add(g, v[1], v[2])};
        return Vars{i1, ops::Add(g, v[1], v[0])};
      },
      init, o);
}

TEST_CASE("Two devices: a loop body on CPU:1 with its control on CPU:0", "[multi_device]") {
  const bool fib = GENERATE(false, true);
  Graph g;
  Output n;
  {
    auto s0 = g.DeviceScope(kCpu0);
    n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
  }
  auto loop = SplitLoop(g, n, fib);
  REQUIRE(loop.ok());
  REQUIRE(g.status().ok());
  Session one(g);
  Session two(g, TwoDevices());
  for (int k : {0, 1, 2, 7, 25}) {
    auto r1 = one.Run({{"n", Tensor::Scalar<int32_t>(k)}}, Vars{(*loop)[0], (*loop)[1]});
    auto r2 = two.Run({{"n", Tensor::Scalar<int32_t>(k)}}, Vars{(*loop)[0], (*loop)[1]});
    REQUIRE(r1.ok());
    REQUIRE(r2.ok());
    CHECK((*r2)[0].scalar_as<int32_t>() == k);
    CHECK((*r2)[1].scalar_as<int32_t>() == (*r1)[1].scalar_as<int32_t>());
  }
  // sum_{i<25} i = 300; fib(25) = 75025.
  auto r = two.Run({{"n", Tensor::Scalar<int32_t>(25)}}, Vars{(*loop)[1]});
  REQUIRE(r.ok());
  CHECK((*r)[0].scalar_as<int32_t>() == (fib ? 75025 : 300));
  // Concurrent steps keep their iterations apart.
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const int k = (t * 7 + i) % 15;
        auto a = two.Run({{"n", Tensor::Scalar<int32_t>(k)}}, Vars{(*loop)[1]});
        auto b = one.Run({{"n", Tensor::Scalar<int32_t>(k)}}, Vars{(*loop)[1]});
        if (!a.ok() || !b.ok() || (*a)[0].scalar_as<int32_t>() != (*b)[0].scalar_as<int32_t>()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
}

TEST_CASE("Two devices: a nested loop spanning devices is refused clearly", "[multi_device]") {
  Graph g;
  auto s0 = g.DeviceScope(kCpu0);
  auto n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
  WhileLoopOptions o;
  o.name = "outer";
  auto loop = WhileLoop(
      g, [n](Graph& g, const Vars& v) { return ops::Less(g, v[0], n); },
      [n](Graph& g, const Vars& v) {
        auto inner = SplitLoop(g, n, false);
        return Vars{ops::Add(g, v[0], ops::Const(g, int32_t{1})), ops::Add(g, v[1], (*inner)[1])};
      },
      {ops::Const(g, int32_t{0}), ops::Const(g, int32_t{0})}, o);
  REQUIRE(loop.ok());
  REQUIRE(g.status().ok());
  Session s(g, TwoDevices());
  auto r = s.Run({{"n", Tensor::Scalar<int32_t>(3)}}, Vars{(*loop)[1]});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kUnimplemented);
  CHECK(Contains(r.status(), "nested"));
}

TEST_CASE("Two devices: many and concurrent steps", "[multi_device]") {
  Graph g;
  Output x, y;
  {
    auto s0 = g.DeviceScope(kCpu0);
    x = ops::Placeholder(g, DType::kFloat32, {}, "x");
  }
  Output h = x;
  for (int i = 0; i < 6; ++i) {
    auto s = g.DeviceScope(i % 2 ? kCpu0 : kCpu1);
    h = ops::Add(g, h, ops::Const(g, 1.0f));
  }
  y = h;
  REQUIRE(g.status().ok());
  Session s(g, TwoDevices());
  for (int i = 0; i < 200; ++i) {
    auto r = s.Run({{"x", Tensor::Scalar<float>(static_cast<float>(i))}}, Vars{y});
    REQUIRE(r.ok());
    REQUIRE((*r)[0].scalar_as<float>() == static_cast<float>(i + 6));
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const float in = static_cast<float>(t * 1000 + i);
        auto r = s.Run({{"x", Tensor::Scalar<float>(in)}}, Vars{y});
        if (!r.ok() || (*r)[0].scalar_as<float>() != in + 6) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(failures == 0);
}

TEST_CASE("Two devices: a failing kernel aborts the step on both devices", "[multi_device]") {
  Graph g;
  Output idx, gathered, out;
  {
    auto s0 = g.DeviceScope(kCpu0);
    idx = ops::Placeholder(g, DType::kInt32, {1}, "idx");
  }
  {
    auto s1 = g.DeviceScope(kCpu1);
    gathered = ops::Gather(g, ops::Const(g, std::vector<float>{1, 2, 3}, {3}), idx);
  }
  {
    auto s0 = g.DeviceScope(kCpu0);
    out = ops::Add(g, gathered, ops::Const(g, 10.0f));
  }
  REQUIRE(g.status().ok());
  Session s(g, TwoDevices());
  for (int i = 0; i < 5; ++i) {
    auto bad = s.Run({{"idx", Tensor::FromVector(std::vector<int32_t>{7}, {1})}}, Vars{out});
    REQUIRE_FALSE(bad.ok());
    CHECK(Contains(bad.status(), "Gather"));
    auto good = s.Run({{"idx", Tensor::FromVector(std::vector<int32_t>{2}, {1})}}, Vars{out});
    REQUIRE(good.ok());
    CHECK((*good)[0].ToVector<float>() == std::vector<float>{13});
  }
}

TEST_CASE("Two devices: the split loop really runs a control loop on CPU:1", "[multi_device]") {
  Graph g;
  Output n;
  {
    auto s0 = g.DeviceScope(kCpu0);
    n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
  }
  REQUIRE(SplitLoop(g, n, true).ok());
  auto placement = Place(g, {"/job:localhost/task:0/device:CPU:0", "/job:localhost/task:0/device:CPU:1"});
  REQUIRE(placement.ok());
  auto parts = Partition(g, *placement);
  REQUIRE(parts.ok());
  const PartitionGraph& p1 = parts->at("/job:localhost/task:0/device:CPU:1");
  int switches = 0, loop_conds = 0, recvs_in_frame = 0;
  for (int id = 0; id < p1.graph->num_nodes(); ++id) {
    const Node& node = p1.graph->node(id);
    if (node.op == "Switch") ++switches;
    if (node.op == "LoopCond") ++loop_conds;
    if (node.op == "_Recv" && !node.control_inputs.empty()) ++recvs_in_frame;
  }
  CHECK(switches == 1);    // the control loop's, driven by the received predicate
  CHECK(loop_conds == 0);  // the loop's control stays on CPU:0
  CHECK(recvs_in_frame >= 3);
}

TEST_CASE("Two devices: a WhileLoop gradient with the body on CPU:1", "[multi_device]") {
  Graph g;
  Output x, n, a;
  {
    auto s0 = g.DeviceScope(kCpu0);
    x = ops::Placeholder(g, DType::kFloat64, PartialShape({}), "x");
    n = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
    a = ops::Const(g, 1.5);
  }
  Result<Vars> loop = Vars{};
  {
    auto s0 = g.DeviceScope(kCpu0);
    loop = WhileLoop(
        g, [n](Graph& g, const Vars& v) { return ops::Less(g, v[0], n); },
        [a](Graph& g, const Vars& v) {
          auto s1 = g.DeviceScope(kCpu1);
          return Vars{ops::Add(g, v[0], ops::Const(g, int32_t{1})), ops::Mul(g, v[1], ops::Mul(g, a, v[1]))};
        },
        {ops::Const(g, int32_t{0}), x}, {"power", 4});
  }
  REQUIRE(loop.ok());
  auto grads = Gradients(g, {(*loop)[1]}, {x, a});
  REQUIRE(grads.ok());
  REQUIRE(g.status().ok());
  Session one(g);
  Session two(g, TwoDevices());
  for (int k : {0, 1, 3}) {
    FeedMap feeds = {{"x", Tensor::Scalar<double>(0.7)}, {"n", Tensor::Scalar<int32_t>(k)}};
    auto r1 = one.Run(feeds, Vars{(*loop)[1], (*grads)[0], (*grads)[1]});
    auto r2 = two.Run(feeds, Vars{(*loop)[1], (*grads)[0], (*grads)[1]});
    REQUIRE(r1.ok());
    INFO(r2.status().ToString());
    REQUIRE(r2.ok());
    for (int i = 0; i < 3; ++i)
      CHECK((*r2)[i].scalar_as<double>() == Approx((*r1)[i].scalar_as<double>()).epsilon(1e-12));
  }
}

TEST_CASE("LocalRendezvous: keys, dead values, abort", "[multi_device]") {
  runtime::LocalRendezvous r;
  RendezvousKey k{1, "a:0->B", "/loop@0", 3};
  // Recv before Send calls back when the value arrives.
  int got = 0;
  r.RecvAsync(k, [&](Status s, Tensor v, bool dead) {
    CHECK(s.ok());
    CHECK_FALSE(dead);
    CHECK(v.scalar_as<float>() == 2.0f);
    ++got;
  });
  CHECK(got == 0);
  REQUIRE(r.Send(k, Tensor::Scalar<float>(2.0f), false).ok());
  CHECK(got == 1);
  // Another iteration is another key; a dead value arrives as dead.
  RendezvousKey k4 = k;
  k4.iteration = 4;
  REQUIRE(r.Send(k4, Tensor(), true).ok());
  r.RecvAsync(k4, [&](Status s, Tensor v, bool dead) {
    CHECK(s.ok());
    CHECK(dead);
    ++got;
  });
  CHECK(got == 2);
  CHECK_FALSE(r.Send(k4, Tensor(), true).ok());  // sent twice
  // Abort fails pending and later receives of that step only.
  RendezvousKey pending{1, "b:0->B", "", 0};
  Status failed;
  r.RecvAsync(pending, [&](Status s, Tensor, bool) { failed = s; });
  r.Abort(1, InvalidArgument("boom"));
  CHECK(failed.message() == "boom");
  r.RecvAsync(pending, [&](Status s, Tensor, bool) { CHECK(s.message() == "boom"); ++got; });
  CHECK(got == 3);
  CHECK_FALSE(r.Send(RendezvousKey{1, "c:0->B", "", 0}, Tensor::Scalar<float>(1.0f), false).ok());
  RendezvousKey other{2, "b:0->B", "", 0};
  REQUIRE(r.Send(other, Tensor::Scalar<float>(5.0f), false).ok());
  r.RecvAsync(other, [&](Status s, Tensor v, bool) { CHECK(s.ok()); ++got; });
  CHECK(got == 4);
  r.Cleanup(1);
  r.Cleanup(2);
}
