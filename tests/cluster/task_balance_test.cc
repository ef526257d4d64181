// BalanceTasks: which member runs each logical task after the membership
// changed. Properties over many random cases with a fixed seed, and the
// cases the cluster relies on by name.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "cluster/task_balance.h"

using sf::runtime::BalanceTasks;

TEST_CASE("BalanceTasks: the named cases", "[actors]") {
  // Nothing changed: nothing moves.
  CHECK(BalanceTasks({"a", "b", "a", "b"}, {"a", "b"}) == std::vector<std::string>{"a", "b", "a", "b"});
  // A member died: only its tasks move, to the least loaded.
  CHECK(BalanceTasks({"a", "b", "c"}, {"a", "c"}) == std::vector<std::string>{"a", "a", "c"});
  // A member joined: the highest tasks of the most loaded move to it.
  CHECK(BalanceTasks({"a", "a", "a", "a"}, {"a", "b"}) == std::vector<std::string>{"a", "a", "b", "b"});
  // Every member replaced.
  auto all_new = BalanceTasks({"a", "a", "b"}, {"x", "y"});
  CHECK(std::count(all_new.begin(), all_new.end(), "x") + std::count(all_new.begin(), all_new.end(), "y") == 3);
}

TEST_CASE("BalanceTasks: balanced, only live members, fewest moves, deterministic", "[actors]") {
  std::mt19937 rng(20261201);
  for (int round = 0; round < 500; ++round) {
    const int tasks = 1 + static_cast<int>(rng() % 12);
    std::vector<std::string> pool = {"m0", "m1", "m2", "m3", "m4", "m5"};
    std::vector<std::string> old(tasks);
    for (auto& t : old) t = pool[rng() % 4];
    std::vector<std::string> members;
    for (const auto& m : pool)
      if (rng() % 2) members.push_back(m);
    if (members.empty()) members.push_back(pool[rng() % pool.size()]);
    const auto now = BalanceTasks(old, members);
    REQUIRE(now.size() == old.size());
    std::map<std::string, int> load;
    for (const auto& m : members) load[m] = 0;
    for (const auto& m : now) {
      REQUIRE(load.count(m));  // only members take tasks
      ++load[m];
    }
    int lo = tasks, hi = 0;
    for (const auto& kv : load) {
      lo = std::min(lo, kv.second);
      hi = std::max(hi, kv.second);
    }
    CHECK(hi - lo <= 1);
    // Fewest moves: the tasks of gone members, plus what members keep
    // beyond their share, shares of q + 1 going to those keeping the most.
    std::set<std::string> live(members.begin(), members.end());
    int homeless = 0;
    std::map<std::string, int> kept;
    for (const auto& m : members) kept[m] = 0;
    for (const auto& m : old)
      if (!live.count(m)) ++homeless;
      else ++kept[m];
    std::vector<int> counts;
    for (const auto& kv : kept) counts.push_back(kv.second);
    std::sort(counts.rbegin(), counts.rend());
    const int q = tasks / static_cast<int>(members.size()), r = tasks % static_cast<int>(members.size());
    int excess = 0;
    for (size_t i = 0; i < counts.size(); ++i) excess += std::max(0, counts[i] - (static_cast<int>(i) < r ? q + 1 : q));
    int moved = 0;
    for (int t = 0; t < tasks; ++t) moved += old[t] != now[t];
    CHECK(moved == homeless + excess);
    CHECK(BalanceTasks(old, members) == now);
  }
}
