// SlotNames and StagedRounds: a slot's state is its names less another
// slot's backup copies the node does not hold; a round is applied whole,
// once its last message came, a new round or holder drops the one staged,
// and what unfinished rounds hold is bounded.
#include <catch2/catch.hpp>

#include "cluster/slot_state.h"

using namespace sf;
using cluster::SlotNames;
using cluster::StagedRounds;
using Names = std::set<std::string>;

TEST_CASE("SlotNames: a slot sends its own names, never another slot's backup copy it does not hold", "[slot_state]") {
  SlotNames names;
  names.AddOwn(0, {"w", "b"});
  CHECK(names.StateOf(0, [](int) -> bool { FAIL("no other slot is backed up here: the map is not read"); return true; }) ==
        Names{"w", "b"});
  CHECK(names.StateOf(5, [](int) { return true; }).empty());
  names.AddBackedUp(1, {"emb", "b"});  // slot 1's holder shares "b" with slot 0
  CHECK(names.StateOf(1, [](int) { return false; }) == Names{"emb", "b"});
  // Slot 1 is held elsewhere (this node is its backup): its copies stay out of slot 0's state.
  CHECK(names.StateOf(0, [](int other) { return other != 1; }) == Names{"w"});
  // Once this node holds slot 1 (a handover), they are state it serves.
  CHECK(names.StateOf(0, [](int) { return true; }) == Names{"w", "b"});
  // What slot 0's own state brought here stays its own.
  names.AddBackedUp(0, {"b"});
  CHECK(names.StateOf(0, [](int other) { return other != 1; }) == Names{"w", "b"});

  CHECK(names.SlotsOf({"emb"}) == std::set<int>{1});
  CHECK(names.SlotsOf({"b", "x"}) == std::set<int>{0, 1});
  CHECK(names.SlotsOf({"x"}).empty());
  names.DropWhere([](const std::string& n) { return n == "b" || n == "emb"; });
  CHECK(names.SlotsOf({"b", "emb"}).empty());
  CHECK(names.StateOf(0, [](int) { return false; }) == Names{"w"});
}

TEST_CASE("StagedRounds: a round comes whole with its last message, and another round or holder drops it", "[slot_state]") {
  StagedRounds<std::string> staged("n1", 100);
  auto a = staged.Stage(3, "h1", 7, {"x", "y"}, 10, false);
  REQUIRE(a.ok());
  CHECK(!a->has_value());
  CHECK(staged.bytes() == 10);
  auto b = staged.Stage(3, "h1", 7, {"z"}, 5, true);
  REQUIRE(b.ok());
  REQUIRE(b->has_value());
  CHECK(**b == std::vector<std::string>{"x", "y", "z"});
  CHECK(staged.bytes() == 0);
  CHECK(staged.size() == 0);

  REQUIRE(staged.Stage(3, "h1", 8, {"old"}, 20, false).ok());
  REQUIRE(staged.Stage(3, "h2", 1, {"new"}, 5, false).ok());  // another holder: the old round goes
  CHECK(staged.bytes() == 5);
  auto c = staged.Stage(3, "h2", 1, {}, 0, true);
  REQUIRE(c.ok());
  CHECK(**c == std::vector<std::string>{"new"});
}

TEST_CASE("StagedRounds: the bytes of unfinished rounds are bounded, and a new map drops rounds it refuses", "[slot_state]") {
  StagedRounds<std::string> staged("n1", 100);
  REQUIRE(staged.Stage(1, "h1", 1, {"a"}, 60, false).ok());
  REQUIRE(staged.Stage(2, "h1", 1, {"b"}, 30, false).ok());
  const auto full = staged.Stage(2, "h1", 1, {"c"}, 20, false);
  CHECK(full.status().code() == Code::kResourceExhausted);
  CHECK(full.status().message().find("slot 2's round is dropped") != std::string::npos);
  CHECK(staged.bytes() == 60);  // slot 2's round went whole
  CHECK(staged.size() == 1);
  REQUIRE(staged.Stage(4, "h2", 1, {"d"}, 10, false).ok());
  staged.KeepOnly([](int slot, const std::string& holder) { return slot == 4 && holder == "h2"; });
  CHECK(staged.size() == 1);
  CHECK(staged.bytes() == 10);
}
