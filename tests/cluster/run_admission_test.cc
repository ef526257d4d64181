// RunAdmission: a slot's fence refuses older runs and waits for those going,
// a client's runs are bounded, served epochs only grow, and Close ends the
// fence's waits and refuses new runs while Stop's wait still waits for them.
#include <catch2/catch.hpp>

#include <chrono>
#include <future>

#include "cluster/run_admission.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;
using cluster::RunAdmission;
using Verdict = RunAdmission::Verdict;

namespace {

// Clients are keys only, never used: two distinct addresses stand for two connections.
struct Clients {
  char a = 0, b = 0;
  const net::Connection* first() const { return reinterpret_cast<const net::Connection*>(&a); }
  const net::Connection* second() const { return reinterpret_cast<const net::Connection*>(&b); }
};

std::chrono::steady_clock::time_point In(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

}  // namespace

TEST_CASE("RunAdmission: a run placed below its slot's fence is refused, naming the fence", "[run_admission]") {
  RunAdmission runs;
  Clients c;
  REQUIRE(runs.Admit(1, c.first(), {3, 5}, 10).verdict == Verdict::kAdmitted);
  runs.Fence(3, 7);
  runs.Fence(3, 6);  // a lower epoch leaves the fence where it is
  CHECK(runs.FenceOf(3) == 7);
  CHECK(runs.FenceOf(4) == 0);
  const RunAdmission::Outcome stale = runs.Admit(2, c.first(), {3, 6}, 10);
  CHECK(stale.verdict == Verdict::kStale);
  CHECK(stale.fence == 7);
  CHECK(runs.Runs(2) == 0);
  // At the fence's epoch, on another slot, or on none it runs.
  CHECK(runs.Admit(3, c.first(), {3, 7}, 10).verdict == Verdict::kAdmitted);
  CHECK(runs.Admit(4, c.first(), {4, 1}, 10).verdict == Verdict::kAdmitted);
  CHECK(runs.Admit(5, c.first(), {-1, 0}, 10).verdict == Verdict::kAdmitted);
  CHECK(runs.RunningSteps() == std::set<int64_t>{1, 3, 4, 5});
}

TEST_CASE("RunAdmission: a client has at most its limit of runs going", "[run_admission]") {
  RunAdmission runs;
  Clients c;
  for (int64_t step = 1; step <= 3; ++step)
    REQUIRE(runs.Admit(step, c.first(), {0, 1}, 3).verdict == Verdict::kAdmitted);
  CHECK(runs.Admit(4, c.first(), {0, 1}, 3).verdict == Verdict::kFull);
  // Another client's runs count apart; a step may run for both.
  CHECK(runs.Admit(1, c.second(), {0, 1}, 3).verdict == Verdict::kAdmitted);
  CHECK(runs.Runs(1) == 2);
  CHECK(runs.RunsForOther(1, c.first()));
  CHECK_FALSE(runs.RunsForOther(2, c.first()));
  CHECK(runs.RunsForOther(2, c.second()));
  CHECK(runs.StepsOf(c.first()) == std::set<int64_t>{1, 2, 3});
  CHECK(runs.StepsOf(c.second()) == std::set<int64_t>{1});
  // An end frees a place; ending a run never admitted changes nothing.
  CHECK_FALSE(runs.End(2, c.first(), {0, 1}));
  CHECK_FALSE(runs.End(2, c.first(), {0, 1}));
  CHECK(runs.Admit(4, c.first(), {0, 1}, 3).verdict == Verdict::kAdmitted);
  CHECK(runs.Admit(5, c.first(), {0, 1}, 3).verdict == Verdict::kFull);
  // The last end says no run is left.
  CHECK_FALSE(runs.End(1, c.second(), {0, 1}));
  CHECK_FALSE(runs.End(1, c.first(), {0, 1}));
  CHECK_FALSE(runs.End(3, c.first(), {0, 1}));
  CHECK_FALSE(runs.Idle());
  CHECK(runs.End(4, c.first(), {0, 1}));
  CHECK(runs.Idle());
  CHECK(runs.RunningSteps().empty());
}

TEST_CASE("RunAdmission: a fence lists its slot's older runs and its wait ends with the last", "[run_admission]") {
  RunAdmission runs;
  Clients c;
  REQUIRE(runs.Admit(1, c.first(), {2, 4}, 10).verdict == Verdict::kAdmitted);
  REQUIRE(runs.Admit(2, c.first(), {2, 5}, 10).verdict == Verdict::kAdmitted);
  REQUIRE(runs.Admit(3, c.first(), {2, 6}, 10).verdict == Verdict::kAdmitted);
  REQUIRE(runs.Admit(4, c.first(), {1, 4}, 10).verdict == Verdict::kAdmitted);
  CHECK(runs.OlderRuns(2).empty());  // no fence yet
  runs.Fence(2, 6);
  CHECK(runs.OlderRuns(2) == std::vector<int64_t>{1, 2});
  CHECK(runs.OlderRuns(1).empty());

  // With older runs going the wait ends at its deadline, and not before.
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(runs.WaitOlderRuns(2, In(100ms)));
  CHECK(std::chrono::steady_clock::now() - t0 >= 100ms);

  auto waited = std::async(std::launch::async, [&] { return runs.WaitOlderRuns(2, In(60s)); });
  REQUIRE(testing::WaitFor([&] { return runs.Waiters() == 1; }, 10s));
  runs.End(1, c.first(), {2, 4});
  runs.End(3, c.first(), {2, 6});  // a run at the fence's epoch is not waited for
  CHECK(runs.OlderRuns(2) == std::vector<int64_t>{2});
  REQUIRE(runs.Waiters() == 1);  // one older run is still going
  runs.End(2, c.first(), {2, 5});
  REQUIRE(waited.wait_for(30s) == std::future_status::ready);  // woken, long before its deadline
  CHECK(waited.get());
  CHECK(runs.Waiters() == 0);
  CHECK(runs.WaitOlderRuns(2, In(0ms)));
}

TEST_CASE("RunAdmission: served epochs only grow", "[run_admission]") {
  RunAdmission runs;
  Clients c;
  CHECK(runs.ServedEpoch(0) == 0);
  REQUIRE(runs.Admit(1, c.first(), {0, 5}, 10).verdict == Verdict::kAdmitted);
  REQUIRE(runs.Admit(2, c.first(), {0, 3}, 10).verdict == Verdict::kAdmitted);
  CHECK(runs.ServedEpoch(0) == 5);
  runs.End(1, c.first(), {0, 5});
  CHECK(runs.ServedEpoch(0) == 5);  // the run that served it ended: still served
  REQUIRE(runs.Admit(3, c.first(), {0, 8}, 10).verdict == Verdict::kAdmitted);
  CHECK(runs.ServedEpoch(0) == 8);
  // A refused run serves nothing; a run on no slot serves no slot.
  runs.Fence(1, 9);
  CHECK(runs.Admit(4, c.first(), {1, 7}, 10).verdict == Verdict::kStale);
  CHECK(runs.ServedEpoch(1) == 0);
  REQUIRE(runs.Admit(5, c.first(), {-1, 0}, 10).verdict == Verdict::kAdmitted);
  CHECK(runs.ServedEpoch(-1) == 0);
}

TEST_CASE("RunAdmission: Close refuses new runs and ends fence waits; WaitIdle waits for the runs", "[run_admission]") {
  RunAdmission runs;
  Clients c;
  REQUIRE(runs.Admit(1, c.first(), {0, 1}, 10).verdict == Verdict::kAdmitted);
  runs.Fence(0, 2);
  auto fence_wait = std::async(std::launch::async, [&] { return runs.WaitOlderRuns(0, In(60s)); });
  REQUIRE(testing::WaitFor([&] { return runs.Waiters() == 1; }, 10s));
  runs.Close();
  REQUIRE(fence_wait.wait_for(30s) == std::future_status::ready);
  CHECK(fence_wait.get());
  // Stale and full are told before closed (the order the node answers in).
  CHECK(runs.Admit(2, c.first(), {0, 1}, 10).verdict == Verdict::kStale);
  CHECK(runs.Admit(2, c.first(), {0, 2}, 1).verdict == Verdict::kFull);
  CHECK(runs.Admit(2, c.first(), {0, 2}, 10).verdict == Verdict::kClosed);
  CHECK(runs.Runs(2) == 0);

  auto idle = std::async(std::launch::async, [&] { runs.WaitIdle(); });
  REQUIRE(testing::WaitFor([&] { return runs.Waiters() == 1; }, 10s));
  CHECK(idle.wait_for(0ms) == std::future_status::timeout);  // run 1 still goes
  CHECK(runs.End(1, c.first(), {0, 1}));
  REQUIRE(idle.wait_for(30s) == std::future_status::ready);
  CHECK(runs.Waiters() == 0);
}
