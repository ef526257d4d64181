// ReplicaState (kernels/replica_state.h): what a synchronous contribution's
// step tag and a stale-synchronous barrier's worker count may be.
#include <catch2/catch.hpp>

#include "kernels/replica_state.h"

using namespace sf;

namespace {

// One worker's sparse contribution of row 3 for step_tag, N = 2.
SparseSyncApplyRequest Contribution(int64_t step_tag) {
  SparseSyncApplyRequest r;
  r.req.indices = Tensor::FromVector<int64_t>({3});
  r.req.values = Tensor::FromVector<float>({1, 2}, {1, 2});
  r.step_tag = step_tag;
  r.num_required = 2;
  return r;
}

}  // namespace

TEST_CASE("Replica state: a step tag far ahead of the current step is refused, a near one waits",
          "[replication][bad_input]") {
  ReplicaState rs;
  int applied = 0;
  const ReplicaState::SparseApplyFn apply = [&](const SparseApplyRequest&) {
    ++applied;
    return Status::OK();
  };
  Result<int64_t> far = int64_t{0};
  rs.OfferSparseSync("emb/part_0", Contribution(5000), 1, [&](Result<int64_t> r) { far = r; }, apply);
  REQUIRE_FALSE(far.ok());
  CHECK(far.status().code() == Code::kInvalidArgument);
  CHECK(far.status().message().find("'emb/part_0'") != std::string::npos);
  CHECK(far.status().message().find("1024 steps ahead") != std::string::npos);
  // A tag within reach waits for its step's N, then both answer with it.
  std::vector<Result<int64_t>> near;
  for (int64_t w : {2, 3})
    rs.OfferSparseSync("emb/part_0", Contribution(0), w, [&](Result<int64_t> r) { near.push_back(r); }, apply);
  REQUIRE(near.size() == 2);
  CHECK(*near[0] == 0);
  CHECK(*near[1] == 0);
  CHECK(applied == 1);
}

TEST_CASE("Replica state: a stale-synchronous barrier of more workers than it can clock is refused",
          "[replication][bad_input]") {
  ReplicaState rs;
  Status s;
  rs.StaleSyncWait("w", 0, 0, int64_t{1} << 40, 1, 0, [&](Status r) { s = r; });
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("65536") != std::string::npos);
  bool released = false;
  rs.StaleSyncWait("w", 0, 0, 1, 0, 0, [&](Status r) { released = r.ok(); });
  CHECK(released);
}

namespace {

// A shard's applied window, as a set (what replicas share of it).
class SetOrigins : public AppliedOrigins {
 public:
  bool Seen(const UpdateOrigin& o) const override {
    for (const auto& x : seen)
      if (x == o) return true;
    return false;
  }
  void Record(const UpdateOrigin& o) override {
    if (!o.none()) seen.push_back(o);
  }
  std::vector<UpdateOrigin> seen;
};

// Worker w's dense gradient {g} for step_tag, N = 2, made by the update of
// step `step` (its origin; 0: none).
SyncApplyRequest Dense(float g, int64_t step_tag, uint64_t step) {
  SyncApplyRequest r;
  r.run_step = static_cast<int64_t>(step);
  r.req.var_ids = {0};
  r.req.scalars = {Tensor::Scalar<float>(1.0f)};
  r.req.grad = Tensor::FromVector<float>({g});
  r.req.origin = UpdateOrigin{step, step == 0 ? 0 : 77};
  r.step_tag = step_tag;
  r.num_required = 2;
  return r;
}

struct DenseReplica {
  ReplicaState rs;
  SetOrigins applied;
  Tensor value = Tensor::FromVector<float>({0.0f});
  std::vector<float> grads;  // the averaged gradient of each applied step
  bool update_had_origin = false;  // the step's update must carry no contributor's origin
  ReplicaState::ApplyFn apply = [this](const ApplyRequest& r) {
    update_had_origin = update_had_origin || !r.origin.none();
    grads.push_back(r.grad.data<float>()[0]);
    return Status::OK();
  };
  // Offers g for step_tag by step `step`; the answer lands in *out.
  void Offer(float g, int64_t step_tag, uint64_t step, int64_t waiter, Result<int64_t>* out, int64_t run = 0) {
    SyncApplyRequest req = Dense(g, step_tag, step);
    if (run != 0) req.run_step = run;
    rs.OfferSync("w", value, std::move(req), waiter, [out](Result<int64_t> r) { *out = r; }, apply, &applied);
  }
  int64_t Stat(int i) const { return rs.SyncStats().data<int64_t>()[i]; }
};

}  // namespace

TEST_CASE("Replica state: a contribution made again by a step run again counts once, waiting in the old one's place",
          "[replication][replicas]") {
  DenseReplica r;
  Result<int64_t> first = int64_t{-9}, again = int64_t{-9}, other = int64_t{-9};
  r.Offer(2.0f, 0, 100, 1, &first);
  CHECK(r.Stat(3) == 1);  // pending
  r.Offer(2.0f, 0, 100, 2, &again);  // the same worker's step, run again
  REQUIRE_FALSE(first.ok());
  CHECK(first.status().code() == Code::kAborted);
  CHECK(r.Stat(3) == 1);  // still one gradient waiting
  CHECK(r.grads.empty());
  r.Offer(4.0f, 0, 200, 3, &other);
  REQUIRE(again.ok());
  REQUIRE(other.ok());
  CHECK(*again == 0);
  CHECK(*other == 0);
  REQUIRE(r.grads.size() == 1);
  CHECK(r.grads[0] == Approx(3.0f));  // (2 + 4) / 2, not (2 + 2) / 2
  CHECK(r.Stat(0) == 1);
  CHECK(r.Stat(1) == 2);
  CHECK(r.Stat(2) == 0);
  CHECK(r.Stat(3) == 0);
  CHECK(r.applied.seen.size() == 2);  // both contributors' origins
  CHECK_FALSE(r.update_had_origin);
}

TEST_CASE("Replica state: a step run again after its gradient was applied is answered with its step, counted once",
          "[replication][replicas]") {
  DenseReplica r;
  Result<int64_t> a = int64_t{-9}, b = int64_t{-9}, retry = int64_t{-9};
  r.Offer(2.0f, 0, 100, 1, &a);
  r.Offer(4.0f, 0, 200, 2, &b);
  REQUIRE(r.grads.size() == 1);
  r.Offer(2.0f, 0, 100, 3, &retry);
  REQUIRE(retry.ok());
  CHECK(*retry == 0);  // counted in step 0, not stale
  CHECK(r.grads.size() == 1);
  CHECK(r.Stat(1) == 2);
  CHECK(r.Stat(2) == 0);
  // A promoted backup: the holder's counters and applied window, no buckets.
  DenseReplica backup;
  backup.rs.SetCounters(r.rs.Counters());
  backup.applied.seen = r.applied.seen;
  Result<int64_t> on_backup = int64_t{-9};
  backup.Offer(4.0f, 0, 200, 1, &on_backup);
  REQUIRE(on_backup.ok());
  CHECK(*on_backup == 0);
  CHECK(backup.Stat(2) == 0);
  CHECK(backup.grads.empty());
  // Without origins (a local session) a gradient for an applied step is stale, as before.
  Result<int64_t> late = int64_t{-9};
  backup.Offer(4.0f, 0, 0, 2, &late);
  REQUIRE(late.ok());
  CHECK(*late == -1);
  CHECK(backup.Stat(2) == 1);
}

TEST_CASE("Replica state: a dropped contribution made again by a step run again is dropped, counted once, also on a "
          "promoted backup",
          "[replication][replicas]") {
  DenseReplica r;
  Result<int64_t> a = int64_t{-9}, b = int64_t{-9}, late = int64_t{-9}, again = int64_t{-9};
  r.Offer(2.0f, 0, 100, 1, &a);
  r.Offer(4.0f, 0, 200, 2, &b);
  REQUIRE(r.grads.size() == 1);
  r.Offer(6.0f, 0, 300, 3, &late);  // a third worker's, for the step applied: stale
  REQUIRE(late.ok());
  CHECK(*late == -1);
  CHECK(r.Stat(2) == 1);
  r.Offer(6.0f, 0, 300, 4, &again);  // its step run again
  REQUIRE(again.ok());
  CHECK(*again == -1);
  CHECK(r.Stat(2) == 1);
  DenseReplica backup;  // the holder's counters and applied window
  backup.rs.SetCounters(r.rs.Counters());
  backup.applied.seen = r.applied.seen;
  Result<int64_t> on_backup = int64_t{-9};
  backup.Offer(6.0f, 0, 300, 1, &on_backup);
  REQUIRE(on_backup.ok());
  CHECK(*on_backup == -1);
  CHECK(backup.Stat(2) == 1);
  // A future step that has its N already drops the same way.
  Result<int64_t> c = int64_t{-9}, d = int64_t{-9}, third = int64_t{-9}, third_again = int64_t{-9};
  r.Offer(1.0f, 2, 110, 5, &c);
  r.Offer(3.0f, 2, 210, 6, &d);  // step 2 holds its N, waiting for step 1
  r.Offer(7.0f, 2, 310, 7, &third);
  REQUIRE(third.ok());
  CHECK(*third == -1);
  r.Offer(7.0f, 2, 310, 8, &third_again);
  REQUIRE(third_again.ok());
  CHECK(*third_again == -1);
  CHECK(r.Stat(2) == 2);
  CHECK(r.Stat(3) == 2);  // c and d still wait
}

TEST_CASE("Replica state: a contribution whose wait timed out, made again, waits without counting twice",
          "[replication][replicas]") {
  DenseReplica r;
  Result<int64_t> first = int64_t{-9}, again = int64_t{-9}, other = int64_t{-9};
  r.Offer(2.0f, 0, 100, 1, &first);
  r.rs.TimeoutWaiter("w", 1);
  REQUIRE_FALSE(first.ok());
  CHECK(first.status().code() == Code::kUnavailable);
  r.Offer(2.0f, 0, 100, 2, &again);
  CHECK(r.Stat(3) == 1);
  r.Offer(6.0f, 0, 200, 3, &other);
  REQUIRE(again.ok());
  CHECK(*again == 0);
  REQUIRE(r.grads.size() == 1);
  CHECK(r.grads[0] == Approx(4.0f));
  CHECK(r.Stat(1) == 2);
}

TEST_CASE("Replica state: an aborted run's wait is answered at once; its gradient counts, once, when a run again "
          "comes",
          "[replication][replicas]") {
  DenseReplica r;
  Result<int64_t> first = int64_t{-9}, again = int64_t{-9}, other = int64_t{-9}, unrelated = int64_t{-9};
  r.Offer(2.0f, 0, 100, 1, &first, /*run=*/1601);
  r.Offer(8.0f, 1, 300, 2, &unrelated, /*run=*/4800);  // another run's wait, for the next step
  r.rs.AbortWaits("w", 1601, Unavailable("node n2 is down"));
  REQUIRE_FALSE(first.ok());
  CHECK(first.status().code() == Code::kUnavailable);
  CHECK(first.status().message().find("'w'") != std::string::npos);
  CHECK(first.status().message().find("node n2 is down") != std::string::npos);
  CHECK(unrelated.ok());  // still waiting: untouched
  CHECK(*unrelated == -9);
  CHECK(r.Stat(3) == 2);
  r.Offer(2.0f, 0, 100, 3, &again, /*run=*/1602);  // the step's attempt 2
  CHECK(r.Stat(3) == 2);
  r.Offer(4.0f, 0, 200, 4, &other);
  REQUIRE(again.ok());
  CHECK(*again == 0);
  CHECK(*other == 0);
  REQUIRE(r.grads.size() == 1);
  CHECK(r.grads[0] == Approx(3.0f));
  CHECK(r.Stat(1) == 2);
}

TEST_CASE("Replica state: a backup given its holder's SSP clocks releases the barrier where the holder would",
          "[replication][replicas]") {
  ReplicaState holder;
  bool ok0 = false, ok1 = false;
  holder.StaleSyncWait("w", 0, 3, 2, 1, 10, [&](Status s) { ok0 = s.ok(); });
  CHECK_FALSE(ok0);  // worker 1 at 0: 3 clocks ahead
  // Worker 1 finished: it starts a huge clock, not waiting for it.
  holder.StaleSyncWait("w", 1, int64_t{1} << 40, 2, int64_t{1} << 41, 11, [&](Status s) { ok1 = s.ok(); });
  CHECK(ok1);
  CHECK(ok0);
  REQUIRE(holder.TakeClocksChanged());
  CHECK_FALSE(holder.TakeClocksChanged());  // taken
  CHECK(holder.Clocks() == std::vector<int64_t>{3, int64_t{1} << 40});

  ReplicaState backup;
  REQUIRE(backup.SetClocks("w", holder.Clocks()).ok());
  bool on_backup = false;
  backup.StaleSyncWait("w", 0, 9, 2, 1, 12, [&](Status s) { on_backup = s.ok(); });
  CHECK(on_backup);  // without the clocks, worker 0 would wait for worker 1's clock 8 forever
  // A list for another number of workers, or past the bound, is refused naming the variable.
  Status wrong = backup.SetClocks("w", {1, 2, 3});
  CHECK(wrong.code() == Code::kInvalidArgument);
  CHECK(wrong.message().find("'w'") != std::string::npos);
  ReplicaState fresh;
  CHECK(fresh.SetClocks("w", std::vector<int64_t>(65537, 0)).code() == Code::kInvalidArgument);
}

TEST_CASE("Replica state: an aborted run's wait at the SSP barrier is answered; its clock stays started",
          "[replication][replicas]") {
  ReplicaState rs;
  Status first = Status::OK(), again = Internal("not answered");
  bool answered = false;
  rs.StaleSyncWait("w", 0, 2, 2, 0, 1601, [&](Status s) {
    first = s;
    answered = true;
  });
  CHECK_FALSE(answered);
  rs.AbortWaits("w", 1601, Unavailable("node n2 is down"));
  REQUIRE(answered);
  CHECK(first.code() == Code::kUnavailable);
  CHECK(first.message().find("barrier") != std::string::npos);
  rs.StaleSyncWait("w", 0, 2, 2, 0, 1602, [&](Status s) { again = s; });  // the run again waits
  CHECK(again.code() == Code::kInternal);
  rs.StaleSyncWait("w", 1, 2, 2, 0, 4800, [&](Status) {});
  CHECK(again.ok());
}

TEST_CASE("Replica state: a run again that reads another step tag still counts its gradient once, in its first step",
          "[replication][replicas]") {
  DenseReplica r;
  Result<int64_t> first = int64_t{-9}, again = int64_t{-9}, other = int64_t{-9};
  r.Offer(2.0f, 0, 100, 1, &first);
  r.Offer(2.0f, 1, 100, 2, &again);  // the same update, tagged with step 1 this time
  CHECK(first.status().code() == Code::kAborted);
  CHECK(r.Stat(3) == 1);
  r.Offer(4.0f, 0, 200, 3, &other);
  REQUIRE(again.ok());
  CHECK(*again == 0);
  REQUIRE(r.grads.size() == 1);
  CHECK(r.grads[0] == Approx(3.0f));
  CHECK(r.Stat(3) == 0);
}
