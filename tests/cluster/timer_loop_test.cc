// TimerLoop: timers run when due by the time given (a test's made-up
// clock), each says when it is due next, a Poke makes one due at once (also
// while it runs), and the loop's thread runs them on the clock until Stop.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <limits>
#include <vector>

#include "cluster/progress_reports.h"
#include "cluster/timer_loop.h"
#include "tests/support/wait.h"

using namespace sf;
using cluster::ProgressReports;
using cluster::TimerLoop;

TEST_CASE("TimerLoop: timers run at the times they ask for, on a made-up clock", "[timer_loop]") {
  TimerLoop loop;
  std::vector<std::pair<char, int64_t>> ran;
  const int a = loop.Add("a", [&](int64_t now) {
    ran.push_back({'a', now});
    return now + 100;
  });
  const int b = loop.Add("b", [&](int64_t now) {
    ran.push_back({'b', now});
    return TimerLoop::kNever;  // until poked
  });
  CHECK(loop.RunDue(1000) == 1100);  // both due at once, in the order added
  CHECK(ran == std::vector<std::pair<char, int64_t>>{{'a', 1000}, {'b', 1000}});
  CHECK(loop.DueMs(a) == 1100);
  CHECK(loop.DueMs(b) == TimerLoop::kNever);
  ran.clear();
  CHECK(loop.RunDue(1099) == 1100);  // nothing due yet
  CHECK(ran.empty());
  CHECK(loop.RunDue(1250) == 1350);  // late: runs once, with the time it ran at
  CHECK(ran == std::vector<std::pair<char, int64_t>>{{'a', 1250}});
  ran.clear();
  loop.Poke(b);
  loop.Poke(99);  // unknown: nothing
  CHECK(loop.RunDue(1300) == 1350);
  CHECK(ran == std::vector<std::pair<char, int64_t>>{{'b', 1300}});
  CHECK(loop.DueMs(99) == TimerLoop::kNever);
}

TEST_CASE("TimerLoop: a Poke while its timer runs keeps it due, and a timer may add another", "[timer_loop]") {
  TimerLoop loop;
  int runs = 0, added_runs = 0;
  int self = -1;
  self = loop.Add("self", [&](int64_t now) {
    if (++runs == 1) {
      loop.Poke(self);  // its work changed while it ran: it is due again at once
      loop.Add("added", [&](int64_t t) {
        ++added_runs;
        return t + 10;
      });
    }
    return now + 1000;
  });
  loop.RunDue(0);
  CHECK(runs == 1);
  CHECK(loop.DueMs(self) == 0);
  CHECK(added_runs == 1);  // added during the pass, after the timer: due at once, so it ran in it
  CHECK(loop.RunDue(5) == 10);
  CHECK(runs == 2);
  CHECK(loop.DueMs(self) == 1005);
}

TEST_CASE("TimerLoop: its thread runs timers on the clock, a Poke wakes it, and Stop ends it", "[timer_loop]") {
  TimerLoop loop;
  std::atomic<int> ticks{0}, poked{0};
  loop.Add("tick", [&](int64_t now) {
    ++ticks;
    return now + 5;
  });
  const int p = loop.Add("poked", [&](int64_t) {
    ++poked;
    return TimerLoop::kNever;
  });
  loop.Start();
  REQUIRE(testing::WaitFor([&] { return ticks.load() >= 5 && poked.load() == 1; }, std::chrono::seconds(10)));
  loop.Poke(p);
  REQUIRE(testing::WaitFor([&] { return poked.load() == 2; }, std::chrono::seconds(10)));
  loop.Stop();
  const int after = ticks.load();
  loop.Poke(p);
  loop.Stop();  // twice: nothing
  CHECK(ticks.load() == after);
  CHECK(poked.load() == 2);
}

TEST_CASE("ProgressReports: a run is reported at most every interval, only when its ops finished", "[progress_reports]") {
  ProgressReports progress(20);
  CHECK(progress.Report(0) == std::numeric_limits<int64_t>::max());  // nothing watched
  std::vector<uint64_t> told_a, told_b;
  auto a = progress.Add(100, 0, [&](uint64_t n) { told_a.push_back(n); });
  auto b = progress.Add(1, 0, [&](uint64_t n) { told_b.push_back(n); });  // raised to 20
  CHECK(progress.size() == 2);
  CHECK(progress.Report(5) == 15);  // half the shortest interval (b's 20)
  a->finished += 3;
  b->finished += 1;
  CHECK(progress.Report(19) == 29);
  CHECK(told_b.empty());  // b's interval has not passed
  CHECK(progress.Report(20) == 30);
  CHECK(told_b == std::vector<uint64_t>{1});
  CHECK(progress.Report(45) == 55);
  CHECK(told_b.size() == 1);  // no op finished since: no report
  CHECK(told_a.empty());
  CHECK(progress.Report(100) == 110);
  CHECK(told_a == std::vector<uint64_t>{1});
  b->finished += 1;
  progress.Remove(b);
  progress.Remove(b);  // twice: nothing
  CHECK(progress.Report(200) == 250);  // a alone: half its 100
  CHECK(told_b.size() == 1);
  a->finished += 1;
  progress.Report(200);
  CHECK(told_a == std::vector<uint64_t>{1, 2});
}
