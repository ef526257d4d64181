#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <optional>

#include "actors/variable_shards.h"
#include "tests/support/caf_system.h"
#include "tests/support/deterministic.h"

using namespace sf;
using namespace sf::runtime;

namespace {

// Waits for an async VariableService answer (tests only).
Result<Tensor> Wait(std::function<void(std::function<void(Result<Tensor>)>)> call) {
  std::promise<Result<Tensor>> p;
  auto f = p.get_future();
  call([&p](Result<Tensor> r) { p.set_value(std::move(r)); });
  return f.get();
}

Status WaitApply(ActorVariables& vars, ApplyRequest req) {
  std::promise<Status> p;
  auto f = p.get_future();
  vars.Apply(std::move(req), [&p](Status s) { p.set_value(std::move(s)); });
  return f.get();
}

using System = testing::CafSystem;

}  // namespace

TEST_CASE("Variable shards: resolve, assign, read snapshots", "[variables]") {
  System s;
  ActorVariables vars(s.sys, {"w"});
  auto id = vars.Resolve("w", DType::kFloat32, PartialShape({2}));
  REQUIRE(id.ok());
  CHECK(*vars.Resolve("w", DType::kFloat32, PartialShape({-1})) == *id);
  auto bad = vars.Resolve("w", DType::kFloat64, PartialShape({2}));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("float32") != std::string::npos);
  CHECK(vars.NameOf(*id) == "w");

  auto r = Wait([&](auto done) { vars.Read(*id, done); });
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kFailedPrecondition);
  CHECK(r.status().message().find("'w'") != std::string::npos);

  Tensor init = Tensor::FromVector(std::vector<float>{1, 2});
  REQUIRE(Wait([&](auto done) { vars.Assign(*id, AssignMode::kAssign, init, done); }).ok());
  auto snap = Wait([&](auto done) { vars.Read(*id, done); });
  REQUIRE(snap.ok());
  auto add = Wait([&](auto done) {
    vars.Assign(*id, AssignMode::kAdd, Tensor::FromVector(std::vector<float>{10, 10}), done);
  });
  REQUIRE(add.ok());
  CHECK(add->ToVector<float>() == std::vector<float>{11, 12});
  // The earlier snapshot is unchanged (copy-on-write), and so is the caller's tensor.
  CHECK(snap->ToVector<float>() == std::vector<float>{1, 2});
  CHECK(init.ToVector<float>() == std::vector<float>{1, 2});
  auto wrong = Wait([&](auto done) {
    vars.Assign(*id, AssignMode::kAssign, Tensor::FromVector(std::vector<float>{1, 2, 3}), done);
  });
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.status().message().find("[3]") != std::string::npos);
  CHECK_FALSE(Wait([&](auto done) { vars.Read(12345, done); }).ok());
}

TEST_CASE("Variable shards: slots are colocated, updates are atomic", "[variables]") {
  System s;
  ActorVariables vars(s.sys, {"w", "other"});
  // The slot resolves first: colocation comes from the graph's variable names.
  auto accum = vars.Resolve("w/Momentum/momentum", DType::kFloat64, PartialShape({2}));
  auto w = vars.Resolve("w", DType::kFloat64, PartialShape({2}));
  auto other = vars.Resolve("other", DType::kFloat64, PartialShape({2}));
  REQUIRE((accum.ok() && w.ok() && other.ok()));
  auto set = [&](int64_t id, std::vector<double> v) {
    REQUIRE(Wait([&](auto done) { vars.Assign(id, AssignMode::kAssign, Tensor::FromVector(v), done); }).ok());
  };
  set(*w, {1, 2});
  set(*accum, {0, 0});
  set(*other, {0, 0});
  ApplyRequest req;
  req.optimizer = OptimizerKind::kMomentum;
  req.var_ids = {*w, *accum};
  req.scalars = {Tensor::Scalar<double>(0.1), Tensor::Scalar<double>(0.9)};
  req.grad = Tensor::FromVector(std::vector<double>{1, 1});
  // Many concurrent updates: each is serialized by the shard, none is lost.
  std::vector<std::future<Status>> fs;
  for (int i = 0; i < 20; ++i)
    fs.push_back(std::async(std::launch::async, [&] { return WaitApply(vars, req); }));
  for (auto& f : fs) CHECK(f.get().ok());
  auto a = Wait([&](auto done) { vars.Read(*accum, done); });
  REQUIRE(a.ok());
  // accum_n = 0.9 * accum_{n-1} + 1 after 20 updates.
  double want = 0;
  for (int i = 0; i < 20; ++i) want = 0.9 * want + 1;
  CHECK(a->ToVector<double>()[0] == Approx(want));

  req.var_ids = {*w, *other};
  Status st = WaitApply(vars, req);
  REQUIRE_FALSE(st.ok());
  CHECK(st.message().find("colocated") != std::string::npos);
}

namespace {

// Sends the message make(done) builds to a shard and waits for done's answer.
template <typename R, typename Make>
std::future<R> Send(const VariableShardActor& shard, Make make) {
  auto p = std::make_shared<std::promise<R>>();
  auto f = p->get_future();
  caf::anon_send(shard, make([p](R r) { p->set_value(std::move(r)); }));
  return f;
}
template <typename R, typename Make>
R Ask(const VariableShardActor& shard, Make make) {
  return Send<R>(shard, make).get();
}

// A round trip through the shard: every message sent before it has been handled.
void Drain(const VariableShardActor& shard) {
  Ask<Result<Tensor>>(shard, [](auto done) { return runtime::ReadVariable{12345, done}; });
}

bool Pending(std::future<Status>& f) { return f.wait_for(std::chrono::seconds(0)) != std::future_status::ready; }

Tensor Rows(std::vector<float> v, int64_t rows) {
  auto t = Tensor::FromVector(v).Reshaped({rows, static_cast<int64_t>(v.size()) / rows});
  REQUIRE(t.ok());
  return *t;
}

}  // namespace

TEST_CASE("Variable shard protocol: every message type", "[variables]") {
  System s;
  VariableShardActor shard = SpawnVariableShard(s.sys);
  using R = Result<Tensor>;
  caf::anon_send(shard, DefineVariable{0, "t", DType::kFloat32, PartialShape({4, 2})});
  caf::anon_send(shard, DefineVariable{1, "t/Adagrad/accumulator", DType::kFloat32, PartialShape({4, 2})});

  // ReadVariable, AssignVariable.
  R r = Ask<R>(shard, [](auto done) { return runtime::ReadVariable{0, done}; });
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kFailedPrecondition);
  CHECK(r.status().message().find("'t'") != std::string::npos);
  CHECK(Ask<R>(shard, [](auto done) { return runtime::ReadVariable{7, done}; }).status().code() == Code::kNotFound);
  REQUIRE(Ask<R>(shard, [](auto done) {
            return AssignVariable{0, AssignMode::kAssign, Rows({0, 1, 2, 3, 4, 5, 6, 7}, 4), done};
          }).ok());
  r = Ask<R>(shard, [](auto done) { return AssignVariable{1, AssignMode::kAssign, Rows({1, 1, 1, 1, 1, 1, 1, 1}, 4), done}; });
  REQUIRE(r.ok());
  r = Ask<R>(shard, [](auto done) { return AssignVariable{1, AssignMode::kAdd, Rows({1, 2}, 1), done}; });
  CHECK(r.status().code() == Code::kInvalidArgument);
  r = Ask<R>(shard, [](auto done) { return runtime::ReadVariable{0, done}; });
  REQUIRE(r.ok());
  CHECK(r->ToVector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7});

  // GatherRows: ids 1 and 3 in example 0, id 1 in example 1, summed here.
  EmbeddingShardSpec spec;
  spec.table = "t";
  spec.rows = 4;
  EmbeddingGather q;
  q.ids = Tensor::FromVector(std::vector<int64_t>{1, 3, 1});
  q.segment_ids = Tensor::FromVector(std::vector<int64_t>{0, 0, 1});
  q.num_segments = 2;
  r = Ask<R>(shard, [&](auto done) { return GatherRows{0, spec, q, done}; });
  REQUIRE(r.ok());
  CHECK(r->ToVector<float>() == std::vector<float>{8, 10, 2, 3});
  q.ids = Tensor::FromVector(std::vector<int64_t>{1, 9, 1});
  r = Ask<R>(shard, [&](auto done) { return GatherRows{0, spec, q, done}; });
  CHECK(r.status().code() == Code::kInvalidArgument);

  // SnapshotDirtyShard: everything the first time, then the rows ApplySparse touched.
  using Dirty = std::vector<VarSnapshot>;
  Dirty d = Ask<Dirty>(shard, [](auto done) { return SnapshotDirtyShard{done}; });
  REQUIRE(d.size() == 2);
  for (const auto& v : d) CHECK(v.all_dirty);
  SparseApplyRequest sp;
  sp.optimizer = OptimizerKind::kGradientDescent;
  sp.var_ids = {0};
  sp.scalars = {Tensor::Scalar<float>(1.0f)};
  sp.indices = Tensor::FromVector(std::vector<int64_t>{2});
  sp.values = Rows({1, 1}, 1);
  sp.indices_unique = true;
  REQUIRE(Ask<Status>(shard, [&](auto done) { return ApplySparse{sp, done}; }).ok());
  sp.var_ids = {0, 5};
  Status st = Ask<Status>(shard, [&](auto done) { return ApplySparse{sp, done}; });
  CHECK(st.message().find("colocated") != std::string::npos);
  d = Ask<Dirty>(shard, [](auto done) { return SnapshotDirtyShard{done}; });
  REQUIRE(d.size() == 2);
  for (const auto& v : d) {
    CHECK_FALSE(v.all_dirty);
    if (v.name == "t") CHECK(v.dirty_rows == std::vector<int64_t>{2});
    else CHECK(v.dirty_rows.empty());
  }

  // ApplyDense advances the version ReadVersioned reports.
  ApplyRequest dense;
  dense.optimizer = OptimizerKind::kGradientDescent;
  dense.var_ids = {0};
  dense.scalars = {Tensor::Scalar<float>(1.0f)};
  dense.grad = Rows({1, 1, 1, 1, 1, 1, 1, 1}, 4);
  REQUIRE(Ask<Status>(shard, [&](auto done) { return ApplyDense{dense, done}; }).ok());
  using Versioned = Result<std::pair<Tensor, int64_t>>;
  Versioned v = Ask<Versioned>(shard, [](auto done) { return ReadVersioned{0, done}; });
  REQUIRE(v.ok());
  CHECK(v->first.ToVector<float>() == std::vector<float>{-1, 0, 1, 2, 2, 3, 5, 6});
  CHECK(v->second == 1);

  // ApplySyncGradient: the step applies once both of N = 2 have arrived.
  SyncApplyRequest sync;
  sync.req = dense;
  sync.num_required = 2;
  sync.step_tag = 0;
  using Step = Result<int64_t>;
  auto first = Send<Step>(shard, [&](auto done) { return ApplySyncGradient{sync, done}; });
  Drain(shard);
  CHECK(first.wait_for(std::chrono::seconds(0)) != std::future_status::ready);
  Step second = Ask<Step>(shard, [&](auto done) { return ApplySyncGradient{sync, done}; });
  REQUIRE(second.ok());
  CHECK(*second == 0);
  CHECK(*first.get() == 0);
  Step stale = Ask<Step>(shard, [&](auto done) { return ApplySyncGradient{sync, done}; });
  REQUIRE(stale.ok());
  CHECK(*stale == -1);
  r = Ask<R>(shard, [](auto done) { return QueryReplicaStats{0, ReplicaQuery::kSyncStats, done}; });
  REQUIRE(r.ok());
  CHECK(r->ToVector<int64_t>() == std::vector<int64_t>{1, 2, 1, 0});

  // SyncWaitTimeout: see the deterministic test below.

  // AbortStepWaits answers the waits of one aborted run; its gradient still counts (pending).
  sync.step_tag = 1;
  sync.run_step = 77;
  auto aborted = Send<Step>(shard, [&](auto done) { return ApplySyncGradient{sync, done}; });
  caf::anon_send(shard, AbortStepWaits{77, Unavailable("a peer of step 77 is down")});
  CHECK(aborted.get().status().code() == Code::kUnavailable);
  r = Ask<R>(shard, [](auto done) { return QueryReplicaStats{0, ReplicaQuery::kSyncStats, done}; });
  REQUIRE(r.ok());
  CHECK(r->ToVector<int64_t>() == std::vector<int64_t>{1, 2, 1, 1});
  sync.run_step = 0;

  // AbortSyncSteps fails a waiting worker with Aborted.
  sync.step_tag = 2;
  auto waiting = Send<Step>(shard, [&](auto done) { return ApplySyncGradient{sync, done}; });
  REQUIRE(Ask<Status>(shard, [](auto done) { return AbortSyncSteps{0, done}; }).ok());
  CHECK(waiting.get().status().code() == Code::kAborted);
  CHECK(Ask<Status>(shard, [](auto done) { return AbortSyncSteps{9, done}; }).code() == Code::kNotFound);

  // WaitStaleSync: worker 0 at clock 1 waits (staleness 0) until worker 1 gets there.
  auto w0 = Send<Status>(shard, [](auto done) { return WaitStaleSync{0, 0, 1, 2, 0, 0, done}; });
  Drain(shard);
  CHECK(Pending(w0));
  CHECK(Ask<Status>(shard, [](auto done) { return WaitStaleSync{0, 1, 1, 2, 0, 0, done}; }).ok());
  CHECK(w0.get().ok());
  st = Ask<Status>(shard, [](auto done) { return WaitStaleSync{0, 5, 1, 2, 0, 0, done}; });
  CHECK(st.code() == Code::kInvalidArgument);

  r = Ask<R>(shard, [](auto done) { return QueryReplicaStats{0, ReplicaQuery::kStaleness, done}; });
  REQUIRE(r.ok());
  CHECK(r->dtype() == DType::kFloat64);
  CHECK(r->num_elements() == 3);

  // SnapshotShard: both variables, between two updates.
  using Named = std::vector<std::pair<std::string, Tensor>>;
  Named all = Ask<Named>(shard, [](auto done) { return SnapshotShard{done}; });
  CHECK(all.size() == 2);
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
}

TEST_CASE("Variable shards: each narrow service reaches the shard", "[variables]") {
  System s;
  ActorVariables vars(s.sys, {"e"});
  auto e = vars.Resolve("e", DType::kFloat32, PartialShape({3, 1}));
  REQUIRE(e.ok());
  REQUIRE(Wait([&](auto done) { vars.Assign(*e, AssignMode::kAssign, Rows({1, 2, 3}, 3), done); }).ok());

  EmbeddingShardService& emb = vars;
  EmbeddingShardSpec spec;
  spec.table = "e";
  spec.rows = 3;
  EmbeddingGather q;
  q.ids = Tensor::FromVector(std::vector<int64_t>{0, 2});
  q.segment_ids = Tensor::FromVector(std::vector<int64_t>{0, 0});
  q.num_segments = 1;
  q.combiner = EmbeddingCombiner::kMean;
  auto r = Wait([&](auto done) { emb.GatherCombine(*e, spec, q, done); });
  REQUIRE(r.ok());
  CHECK(r->ToVector<float>() == std::vector<float>{2});

  ReplicationService& rep = vars;
  std::promise<Result<std::pair<Tensor, int64_t>>> p;
  rep.ReadWithVersion(*e, [&](Result<std::pair<Tensor, int64_t>> v) { p.set_value(std::move(v)); });
  auto v = p.get_future().get();
  REQUIRE(v.ok());
  CHECK(v->second == 0);

  CollectiveService& coll = vars;
  auto sum = Wait([&](auto done) { coll.AllReduce("solo", 1, 0, Tensor::FromVector(std::vector<float>{4}), done); });
  REQUIRE(sum.ok());
  CHECK(sum->ToVector<float>() == std::vector<float>{4});
  auto bad = Wait([&](auto done) { coll.AllReduce("solo", 1, 3, Tensor::FromVector(std::vector<float>{4}), done); });
  CHECK(bad.status().code() == Code::kInvalidArgument);
}

TEST_CASE("Variable shard on CAF's deterministic coordinator: a sync wait fails exactly at its timeout",
          "[variables]") {
  struct Deterministic : testing::Deterministic {
    // Also when a REQUIRE ends the test early: the system waits for its actors.
    ~Deterministic() {
      caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
      shard = nullptr;
      Run();
    }
    VariableShardActor shard = SpawnVariableShard(sys);
  } d;
  auto& sched = d.sched;
  VariableShardActor& shard = d.shard;
  caf::anon_send(shard, DefineVariable{0, "w", DType::kFloat32, PartialShape({2})});
  std::optional<Result<Tensor>> assigned;
  caf::anon_send(shard, AssignVariable{0, AssignMode::kAssign, Tensor::FromVector(std::vector<float>{1, 2}),
                                       [&](Result<Tensor> r) { assigned.emplace(std::move(r)); }});
  sched.run();
  REQUIRE(assigned);
  REQUIRE(assigned->ok());

  SyncApplyRequest sync;
  sync.req.optimizer = OptimizerKind::kGradientDescent;
  sync.req.var_ids = {0};
  sync.req.scalars = {Tensor::Scalar<float>(1.0f)};
  sync.req.grad = Tensor::FromVector(std::vector<float>{1, 1});
  sync.num_required = 2;
  sync.step_tag = 0;
  sync.timeout_ms = 30;
  std::optional<Result<int64_t>> lone;
  caf::anon_send(shard, ApplySyncGradient{sync, [&](Result<int64_t> r) { lone.emplace(std::move(r)); }});
  sched.run();
  CHECK(!lone);  // waits for the second worker
  sched.advance_time(std::chrono::milliseconds(29));
  sched.run();
  CHECK(!lone);
  sched.advance_time(std::chrono::milliseconds(1));
  sched.run();
  REQUIRE(lone);
  CHECK(lone->status().code() == Code::kUnavailable);
  // The timed-out step applied nothing.
  std::optional<Result<Tensor>> value;
  caf::anon_send(shard, ReadVariable{0, [&](Result<Tensor> r) { value.emplace(std::move(r)); }});
  sched.run();
  REQUIRE(value);
  REQUIRE(value->ok());
  CHECK((*value)->ToVector<float>() == std::vector<float>{1, 2});

  // The same step again, both workers within the timeout: one update, by
  // the average, and no timer left to fire.
  std::optional<Result<int64_t>> a, b;
  caf::anon_send(shard, ApplySyncGradient{sync, [&](Result<int64_t> r) { a.emplace(std::move(r)); }});
  sched.run();
  sched.advance_time(std::chrono::milliseconds(10));
  sched.run();
  caf::anon_send(shard, ApplySyncGradient{sync, [&](Result<int64_t> r) { b.emplace(std::move(r)); }});
  sched.run();
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->ok());
  CHECK(b->ok());
  sched.advance_time(std::chrono::milliseconds(100));
  sched.run();
  value.reset();
  caf::anon_send(shard, ReadVariable{0, [&](Result<Tensor> r) { value.emplace(std::move(r)); }});
  sched.run();
  REQUIRE(value);
  CHECK((*value)->ToVector<float>() == std::vector<float>{0, 1});
}

TEST_CASE("Variable shards: a store holds at most kMaxVariables variables", "[variables]") {
  System s;
  // All in one colocation group ("t"), so one actor: the bound is on definitions.
  ActorVariables vars(s.sys, {"t"});
  REQUIRE(vars.Resolve("t", DType::kFloat32, PartialShape({1})).ok());
  size_t resolved = 1;
  for (size_t i = 1; i < ActorVariables::kMaxVariables; ++i)
    resolved += vars.Resolve("t/" + std::to_string(i), DType::kFloat32, PartialShape({1})).ok();
  REQUIRE(resolved == ActorVariables::kMaxVariables);
  auto over = vars.Resolve("t/more", DType::kFloat32, PartialShape({1}));
  REQUIRE_FALSE(over.ok());
  CHECK(over.status().code() == Code::kResourceExhausted);
  CHECK(over.status().message().find("'t/more'") != std::string::npos);
  CHECK(over.status().message().find(std::to_string(ActorVariables::kMaxVariables)) != std::string::npos);
  // Those that exist still resolve.
  CHECK(vars.Resolve("t/7", DType::kFloat32, PartialShape({1})).ok());
}

TEST_CASE("Variable shards: a name longer than kMaxNameBytes is refused at once", "[variables]") {
  System s;
  ActorVariables vars(s.sys, {"t"});
  // A million '/'s would make the colocation lookup quadratic under the lock.
  const std::string slashes(size_t{1} << 20, '/');
  const auto t0 = std::chrono::steady_clock::now();
  auto r = vars.Resolve("t" + slashes, DType::kFloat32, PartialShape({1}));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(r.status().message().find(std::to_string(ActorVariables::kMaxNameBytes)) != std::string::npos);
  CHECK_FALSE(vars.Resolve("", DType::kFloat32, PartialShape({1})).ok());
  // The longest allowed name, all '/', still resolves, into group "t".
  const std::string longest = "t" + std::string(ActorVariables::kMaxNameBytes - 1, '/');
  CHECK(vars.Resolve(longest, DType::kFloat32, PartialShape({1})).ok());
}

TEST_CASE("Variable shards: calls served in the caller's thread and the actor's messages serialize on one shard",
          "[variables]") {
  System s;
  ActorVariables vars(s.sys, {"w"});
  constexpr int64_t kSize = 200000;  // an update long enough for callers to meet it
  auto w = vars.Resolve("w", DType::kFloat32, PartialShape({kSize}));
  REQUIRE(w.ok());
  REQUIRE(Wait([&](auto done) {
            vars.Assign(*w, AssignMode::kAssign, Tensor::FromVector(std::vector<float>(kSize, 0.f)), done);
          }).ok());
  ApplyRequest req;
  req.optimizer = OptimizerKind::kGradientDescent;
  req.var_ids = {*w};
  req.scalars = {Tensor::Scalar<float>(1.0f)};
  req.grad = Tensor::FromVector(std::vector<float>(kSize, -1.f));  // each update adds 1
  constexpr int kWriters = 4, kUpdates = 40;
  std::atomic<bool> writing{true};
  // A reader checks that every snapshot is one state between two updates
  // (all elements equal) and that snapshots never go back.
  // Catch2 asserts on the test's thread only: the threads count what they saw.
  struct Seen {
    int reads = 0, torn = 0, back = 0, errors = 0;
  };
  auto reader = std::async(std::launch::async, [&] {
    Seen seen;
    float last = 0;
    while (writing.load()) {
      auto r = Wait([&](auto done) { vars.Read(*w, done); });
      if (!r.ok()) {
        ++seen.errors;
        continue;
      }
      const float* p = r->data<float>();
      if (p[0] != p[kSize / 2] || p[0] != p[kSize - 1]) ++seen.torn;
      if (p[0] < last) ++seen.back;
      last = p[0];
      ++seen.reads;
    }
    return seen;
  });
  std::vector<std::future<int>> writers;
  for (int i = 0; i < kWriters; ++i) {
    writers.push_back(std::async(std::launch::async, [&, i] {
      int failed = 0;
      for (int k = 0; k < kUpdates; ++k) {
        if ((k + i) % 4 == 0) {  // AssignAdd takes the same two paths
          auto r = Wait([&](auto done) {
            vars.Assign(*w, AssignMode::kAdd, Tensor::FromVector(std::vector<float>(kSize, 1.f)), done);
          });
          failed += !r.ok();
        } else {
          failed += !WaitApply(vars, req).ok();
        }
      }
      return failed;
    }));
  }
  for (auto& f : writers) CHECK(f.get() == 0);
  writing = false;
  const Seen seen = reader.get();
  CHECK(seen.reads > 0);
  CHECK(seen.errors == 0);
  CHECK(seen.torn == 0);
  CHECK(seen.back == 0);
  auto final_value = Wait([&](auto done) { vars.Read(*w, done); });
  REQUIRE(final_value.ok());
  const std::vector<float> v = final_value->ToVector<float>();
  CHECK(v.front() == float(kWriters * kUpdates));
  CHECK(v.back() == float(kWriters * kUpdates));
}

namespace {

// Defines float32 variable "w" of shape [2] and sets it to {1, 2}; its id.
int64_t DefineW12(ActorVariables& vars) {
  auto w = vars.Resolve("w", DType::kFloat32, PartialShape({2}));
  REQUIRE(w.ok());
  REQUIRE(Wait([&](auto done) {
            vars.Assign(*w, AssignMode::kAssign, Tensor::FromVector(std::vector<float>{1, 2}), done);
          }).ok());
  return *w;
}

}  // namespace

TEST_CASE("Variable shards: an answer's callback may call the same shard again", "[variables]") {
  System s;
  ActorVariables vars(s.sys, {"w"});
  const int64_t w = DefineW12(vars);
  // Read -> (in its callback) AssignAdd -> (in its callback) Read: each call
  // is answered, whichever thread and path served the one before.
  std::promise<Result<Tensor>> last;
  auto f = last.get_future();
  vars.Read(w, [&](Result<Tensor> first) {
    if (!first.ok()) return last.set_value(std::move(first));
    vars.Assign(w, AssignMode::kAdd, *first, [&](Result<Tensor> sum) {
      if (!sum.ok()) return last.set_value(std::move(sum));
      vars.Read(w, [&](Result<Tensor> again) { last.set_value(std::move(again)); });
    });
  });
  REQUIRE(f.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  auto r = f.get();
  REQUIRE(r.ok());
  CHECK(r->ToVector<float>() == std::vector<float>{2, 4});
}

TEST_CASE("Variable shards: once the shards are shut down, calls are answered NotFound", "[variables]") {
  System s;
  ActorVariables vars(s.sys, {"w"});
  const int64_t w = DefineW12(vars);
  vars.Shutdown();
  // The actor goes asynchronously; a direct call then finds its state gone
  // (before, a message to the gone actor was dropped, its caller never answered).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  Status last;
  while (std::chrono::steady_clock::now() < deadline) {
    auto p = std::make_shared<std::promise<Result<Tensor>>>();
    auto f = p->get_future();
    vars.Read(w, [p](Result<Tensor> r) { p->set_value(std::move(r)); });
    if (f.wait_for(std::chrono::milliseconds(200)) != std::future_status::ready) continue;
    last = f.get().status();
    if (last.code() == Code::kNotFound) break;
    std::this_thread::yield();
  }
  CHECK(last.code() == Code::kNotFound);
}
