// StepDeadlines: a step expires only after timeout_ms without progress, all
// its runs together, and never once finished.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>

#include "cluster/step_deadlines.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;

TEST_CASE("StepDeadlines: a quiet step expires, every run of it, after the timeout", "[actors][deadline]") {
  runtime::StepDeadlines d(200);
  CHECK(d.report_ms() == 50);
  std::atomic<int> expired{0};
  std::atomic<int64_t> idle{0};
  const auto t0 = std::chrono::steady_clock::now();
  d.Watch(7, [&](int64_t ms) {
    idle = ms;
    ++expired;
  });
  d.Watch(7, [&](int64_t) { ++expired; });
  REQUIRE(testing::WaitFor([&] { return expired == 2; }, 10s));
  CHECK(std::chrono::steady_clock::now() - t0 >= 200ms);
  CHECK(idle >= 200);
}

TEST_CASE("StepDeadlines: progress keeps a step alive and Finish stops watching", "[actors][deadline]") {
  runtime::StepDeadlines d(300);
  std::atomic<int> expired_a{0}, expired_b{0}, expired_c{0};
  const uint64_t a = d.Watch(1, [&](int64_t) { ++expired_a; });
  d.Watch(1, [&](int64_t) { ++expired_a; });
  d.Watch(2, [&](int64_t) { ++expired_b; });
  const uint64_t c = d.Watch(3, [&](int64_t) { ++expired_c; });
  d.Finish(c);
  // Step 1 reports progress for 4 timeouts (through either run's step id);
  // step 2 never does, and expires meanwhile.
  const auto until = std::chrono::steady_clock::now() + 1200ms;
  while (std::chrono::steady_clock::now() < until) {
    d.Progress(1);
    d.Progress(99);  // a step nobody watches: nothing happens
    testing::PauseFor(20ms);
  }
  CHECK(expired_a == 0);
  CHECK(expired_b == 1);
  d.Finish(a);
  // The run left of step 1 still expires once the step goes quiet.
  REQUIRE(testing::WaitFor([&] { return expired_a == 1; }, 10s));
  testing::PauseFor(600ms);  // nothing more comes: each run expires once, a finished one never
  CHECK(expired_a == 1);
  CHECK(expired_b == 1);
  CHECK(expired_c == 0);
  d.Finish(a);  // twice, or after expiring: no-op
}
