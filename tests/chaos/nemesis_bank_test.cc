// Issue 35's acceptance run under ctest (label chaos; scripts/test --all):
// build/bin/nemesis_bank over 3 nodes with --replicas 2 and 4 workers while
// a nemesis kills, stops, drains and adds nodes; no acknowledged increment
// lost, none applied twice. SF_NEMESIS_SECONDS sets its length (default 30).
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "tests/support/run_command.h"

using namespace sf::testing;

TEST_CASE("Chaos: nemesis_bank loses and doubles no acknowledged increment", "[chaos][nemesis]") {
  const char* env = std::getenv("SF_NEMESIS_SECONDS");
  const std::string seconds = env ? env : "30";
  const std::string cmd = std::string(SF_BIN_DIR) + "/nemesis_bank --json --seconds " + seconds + " 2>/dev/null";
  CommandResult r = RunCommand(cmd);
  const std::string summary = LastLine(r.out);
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK(JsonNumber(summary, "lost") == 0);
  CHECK(JsonNumber(summary, "doubled") == 0);
  // Once quiet, every backup holds its holder's state bit for bit.
  CHECK(JsonNumber(summary, "replica_differences") == 0);
  CHECK(JsonNumber(summary, "replica_variables") > 0);
  CHECK(JsonNumber(summary, "acked_increments") > 0);
  CHECK(JsonNumber(summary, "acked_increments") <= JsonNumber(summary, "counted_increments"));
  CHECK(JsonNumber(summary, "faults") >= 1);
}
