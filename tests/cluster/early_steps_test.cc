// EarlySteps: a peer's tensors for steps that run nothing here are held
// within their count and byte budgets, expire after their ttl (time passed
// in), and a step that ended here is refused, the latest max_ended of them.
#include <catch2/catch.hpp>

#include "cluster/early_steps.h"

using namespace sf;
using cluster::EarlySteps;

namespace {

EarlySteps::Limits Small() {
  EarlySteps::Limits l;
  l.max_steps = 3;
  l.max_bytes = 100;
  l.ttl_ms = 1000;
  l.max_ended = 2;
  return l;
}

}  // namespace

TEST_CASE("EarlySteps: steps and bytes are bounded, and a refusal names the budget", "[early_steps]") {
  EarlySteps early("n1", Small());
  REQUIRE(early.Admit(1, 40, 0).ok());
  REQUIRE(early.Admit(1, 40, 5).ok());  // the same step again: its bytes add up
  REQUIRE(early.Admit(2, 0, 10).ok());
  CHECK(early.size() == 2);
  CHECK(early.bytes() == 80);

  const Status bytes = early.Admit(3, 30, 20);
  CHECK(bytes.code() == Code::kResourceExhausted);
  CHECK(bytes.message().find("hold 80 bytes already") != std::string::npos);
  CHECK(bytes.message().find("node n1") != std::string::npos);
  CHECK(early.size() == 2);  // a step refused for its bytes is not kept

  REQUIRE(early.Admit(3, 20, 20).ok());
  const Status steps = early.Admit(4, 0, 30);
  CHECK(steps.code() == Code::kResourceExhausted);
  CHECK(steps.message().find("3 such steps are waiting already") != std::string::npos);

  early.Forget(1);  // it runs here now
  CHECK(early.bytes() == 20);
  CHECK(early.Admit(4, 80, 30).ok());
  CHECK(early.bytes() == 100);
}

TEST_CASE("EarlySteps: an early step never run expires after its ttl, from when it came", "[early_steps]") {
  EarlySteps early("n1", Small());
  REQUIRE(early.Admit(7, 10, 100).ok());
  REQUIRE(early.Admit(8, 10, 600).ok());
  REQUIRE(early.Admit(7, 10, 900).ok());  // more tensors do not restart its ttl
  CHECK(early.Expire(1099).empty());
  CHECK(early.Expire(1100) == std::vector<int64_t>{7});
  CHECK(early.bytes() == 10);
  CHECK(early.Expire(1599).empty());
  CHECK(early.Expire(1600) == std::vector<int64_t>{8});
  CHECK(early.size() == 0);
  CHECK(early.bytes() == 0);
  // Expired, the step may come again (it may yet run): a new ttl.
  REQUIRE(early.Admit(7, 10, 2000).ok());
  CHECK(early.Expire(2999).empty());
}

TEST_CASE("EarlySteps: a step ended here is refused, and only the latest ended steps are kept", "[early_steps]") {
  EarlySteps early("n1", Small());
  REQUIRE(early.Admit(1, 50, 0).ok());
  early.End(1);
  CHECK(early.bytes() == 0);  // what it held is freed
  const Status ended = early.Admit(1, 10, 1);
  CHECK(ended.code() == Code::kFailedPrecondition);
  CHECK(ended.message() == "step 1 has ended on node n1");
  early.End(1);  // twice: remembered once
  early.End(2);
  CHECK(!early.Admit(1, 0, 2).ok());
  CHECK(!early.Admit(2, 0, 2).ok());
  early.End(3);  // past max_ended: the oldest (1) is forgotten
  CHECK(early.Admit(1, 0, 3).ok());
  CHECK(!early.Admit(2, 0, 3).ok());
  CHECK(!early.Admit(3, 0, 3).ok());
}
