// Step timelines (RunOptions::trace_file) of local sessions, read back with a
// JSON parser: an event for every op that ran, on named rows that nest, with
// times inside the step; sends, receives and their waits on two devices;
// variable calls and queue waits; the cap on events and its count; an
// unwritable file as the step's error.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>

#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/queue_ops.h"
#include "shardflow/session.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trace_file.h"

using namespace sf;
using sf::testing::ReadTraceFile;
using sf::testing::TraceFile;
using sf::testing::TraceFileEvent;

namespace {

RunOptions TraceTo(const std::string& path, int64_t max_events = 100000) {
  RunOptions o;
  o.trace_file = path;
  o.trace_max_events = max_events;
  return o;
}

// The one "step" event; every other event lies inside it.
TraceFileEvent StepOf(const TraceFile& t) {
  auto steps = t.Of("step");
  REQUIRE(steps.size() == 1);
  for (const auto& e : t.events) {
    INFO(e.name);
    CHECK(e.ts + e.dur <= steps[0].ts + steps[0].dur + 0.002);
  }
  return steps[0];
}

bool HasEvent(const TraceFile& t, const std::string& cat, const std::string& name) {
  for (const auto& e : t.events)
    if (e.cat == cat && e.name == name) return true;
  return false;
}

}  // namespace

TEST_CASE("Trace: a local step has an event for every op it ran, nested on named rows", "[trace]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {4, 3}, "x");
  auto w = ops::Variable(g, "w", ops::Const(g, Tensor::FromVector(std::vector<float>(3 * 2, 0.5f), {3, 2})));
  auto mm = ops::MatMul(g, x, w);
  auto h = ops::Relu(g, mm);
  auto sq = ops::Mul(g, h, h);
  auto loss = ops::Mean(g, sq);
  auto train = GradientDescentOptimizer(0.1).Minimize(g, loss);
  REQUIRE(train.ok());
  auto init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g);
  REQUIRE(s.Run({}, {}, {init}).ok());
  testing::TempDir dir("sf_trace");
  const std::string path = dir / "step.json";
  FeedMap feeds{{x, Tensor::FromVector(std::vector<float>(12, 1.0f), {4, 3})}};
  auto r = s.Run(feeds, {loss}, {*train}, TraceTo(path));
  REQUIRE(r.ok());

  TraceFile t;
  REQUIRE(ReadTraceFile(path, &t) == "");
  CHECK(t.dropped == 0);
  REQUIRE(t.processes.size() == 1);
  StepOf(t);
  REQUIRE(t.Of("partition").size() == 1);
  // Every node of the step's pruned graph ran, but for the fed placeholder:
  // each has its op event, named as the node, with its op.
  const std::set<std::string> names = t.OpNames();
  for (Output o : {mm, h, sq, loss}) {
    const std::string& n = g.node(o.node).name;
    INFO(n);
    CHECK(names.count(n) == 1);
  }
  CHECK(names.count(g.node(x.node).name) == 0);  // fed: it does not run
  int ops_seen = 0;
  for (const auto& e : t.events) {
    if (e.cat == "op") {
      ++ops_seen;
      CHECK(!e.op.empty());
    }
  }
  CHECK(ops_seen >= 4);
  // The variable's read and update are variable calls, answered later by
  // its shard: each has a wait on a lane of its own.
  int variable_calls = 0;
  for (const auto& e : t.Of("variable")) {
    if (e.op == "VarHandle") continue;  // names the variable; runs in the executor
    INFO(e.name << " (" << e.op << ")");
    ++variable_calls;
    CHECK(HasEvent(t, "wait", e.name));
  }
  CHECK(variable_calls >= 2);
  for (const auto& e : t.Of("wait")) CHECK(t.threads.at({e.pid, e.tid}).rfind("waits", 0) == 0);

  // Without the option nothing is written.
  std::filesystem::remove(path);
  REQUIRE(s.Run(feeds, {loss}, {*train}).ok());
  CHECK(!std::filesystem::exists(path));
}

TEST_CASE("Trace: a two-device step shows its send, its receive and the receive's wait", "[trace]") {
  Graph g;
  Output a, b;
  {
    auto d0 = g.DeviceScope("/device:CPU:0");
    a = ops::Mul(g, ops::Const(g, Tensor::FromVector(std::vector<float>{1, 2}, {2})), ops::Const(g, 3.0f));
  }
  {
    auto d1 = g.DeviceScope("/device:CPU:1");
    b = ops::Neg(g, a);
  }
  REQUIRE(g.status().ok());
  SessionOptions so;
  so.num_cpu_devices = 2;
  Session s(g, so);
  testing::TempDir dir("sf_trace");
  const std::string path = dir / "two.json";
  auto r = s.Run({}, {b}, {}, TraceTo(path));
  REQUIRE(r.ok());
  CHECK((*r)[0].data<float>()[1] == -6.0f);

  TraceFile t;
  REQUIRE(ReadTraceFile(path, &t) == "");
  StepOf(t);
  CHECK(t.Of("partition").size() == 2);
  auto sends = t.Of("send"), recvs = t.Of("recv");
  REQUIRE(sends.size() == 1);
  REQUIRE(recvs.size() == 1);
  CHECK(sends[0].op == "_Send");
  CHECK(recvs[0].op == "_Recv");
  // The receive waits for its tensor: a wait from its start to its arrival,
  // which the send precedes.
  bool waited = false;
  for (const auto& e : t.Of("wait")) {
    if (e.name != recvs[0].name) continue;
    waited = true;
    CHECK(e.ts + e.dur + 0.002 >= sends[0].ts);
  }
  CHECK(waited);
  const std::set<std::string> names = t.OpNames();
  CHECK(names.count(g.node(a.node).name) == 1);
  CHECK(names.count(g.node(b.node).name) == 1);
}

TEST_CASE("Trace: a dequeue's wait for an element is on the timeline", "[trace]") {
  Graph g;
  auto q = ops::FIFOQueue(g, {DType::kFloat32}, {}, "q");
  auto v = ops::Placeholder(g, DType::kFloat32, {}, "v");
  auto enq = ops::QueueEnqueue(g, q, {v}, 0, "enq");
  auto deq = ops::QueueDequeue(g, q, 0, "deq");
  REQUIRE(g.status().ok());
  REQUIRE(!deq.empty());
  Session s(g);
  testing::TempDir dir("sf_trace");
  const std::string path = dir / "deq.json";
  // The dequeue starts on an empty queue and waits until the enqueue below
  // (or finds the element, if the enqueue wins the race: either way it has
  // an event and a wait).
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<std::vector<Tensor>>> got;
  s.RunAsync({}, {deq[0]}, {}, TraceTo(path), [&](Result<std::vector<Tensor>> r) {
    std::lock_guard<std::mutex> l(mu);
    got.emplace(std::move(r));
    cv.notify_all();
  });
  REQUIRE(s.Run({{v, Tensor::Scalar<float>(7.0f)}}, {}, {enq}).ok());
  {
    std::unique_lock<std::mutex> l(mu);
    REQUIRE(cv.wait_for(l, std::chrono::seconds(30), [&] { return got.has_value(); }));
  }
  REQUIRE(got->ok());
  CHECK((**got)[0].scalar_as<double>() == 7.0);
  TraceFile t;
  REQUIRE(ReadTraceFile(path, &t) == "");
  StepOf(t);
  const std::string& deq_name = g.node(deq[0].node).name;
  CHECK(HasEvent(t, "queue", deq_name));
  CHECK(HasEvent(t, "wait", deq_name));
}

TEST_CASE("Trace: events past the cap are counted in the file, not kept", "[trace]") {
  Graph g;
  Output y = ops::Const(g, 1.0f);
  for (int i = 0; i < 20; ++i) y = ops::Add(g, y, ops::Const(g, 1.0f));
  REQUIRE(g.status().ok());
  Session s(g);
  testing::TempDir dir("sf_trace");
  TraceFile full, capped;
  REQUIRE(s.Run({}, {y}, {}, TraceTo(dir / "full.json")).ok());
  REQUIRE(ReadTraceFile(dir / "full.json", &full) == "");
  REQUIRE(s.Run({}, {y}, {}, TraceTo(dir / "capped.json", 5)).ok());
  REQUIRE(ReadTraceFile(dir / "capped.json", &capped) == "");
  CHECK(full.dropped == 0);
  CHECK(full.events.size() >= 41);  // 21 constants, 20 adds, the partition, the step
  CHECK(capped.events.size() == 5);
  CHECK(capped.dropped == static_cast<double>(full.events.size() - 5));
}

TEST_CASE("Trace: a trace file that cannot be written is the step's error, naming it", "[trace]") {
  Graph g;
  auto y = ops::Add(g, ops::Const(g, 1.0f), ops::Const(g, 2.0f));
  REQUIRE(g.status().ok());
  Session s(g);
  testing::TempDir dir("sf_trace");
  const std::string path = dir / "no_such_dir/t.json";
  auto r = s.Run({}, {y}, {}, TraceTo(path));
  REQUIRE(!r.ok());
  CHECK(r.status().code() == Code::kUnavailable);
  CHECK(r.status().message().find(path) != std::string::npos);
  // The session goes on.
  CHECK(s.Run({}, {y}).ok());
}
