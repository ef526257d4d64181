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
  rs.StaleSyncWait("w", 0, 0, int64_t{1} << 40, 1, [&](Status r) { s = r; });
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("65536") != std::string::npos);
  bool released = false;
  rs.StaleSyncWait("w", 0, 0, 1, 0, [&](Status r) { released = r.ok(); });
  CHECK(released);
}
