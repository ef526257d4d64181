// The examples' and benchmarks' flags (examples/common/flags.h over CLI11):
// a malformed, missing or unknown flag is a usage error (exit 2) naming it,
// and a good command line still runs.
#include <catch2/catch.hpp>

#include <string>

#include "tests/support/run_command.h"

using sf::testing::JsonNumber;
using sf::testing::LastLine;
using sf::testing::RunCommand;

namespace {

std::string Program(const std::string& name, const std::string& args) {
  return std::string(SF_BIN_DIR) + "/" + name + " " + args + " 2>&1";
}

// The first line of what a refused program printed: "PROGRAM: message".
std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

TEST_CASE("An example and a benchmark refuse a malformed flag naming it", "[examples][flags]") {
  struct Case {
    const char* program;
    const char* args;
    const char* names;  // what the first line must contain
  };
  const Case cases[] = {
      {"sync_tokens", "--workers abc", "--workers"},
      {"sync_tokens", "--rounds 1.5", "--rounds"},
      {"sync_tokens", "--rounds 99999999999999999999", "--rounds"},
      {"sync_tokens", "--rounds ''", "--rounds"},
      {"sync_tokens", "--rounds", "--rounds"},
      {"sync_tokens", "--bogus 3", "unknown option '--bogus'"},
      {"sync_tokens", "stray", "unexpected argument 'stray'"},
      {"sync_tokens", "--json=maybe", "--json"},
      {"bench_op_overhead", "--steps abc", "--steps"},
      {"bench_op_overhead", "--ops 0x10", "--ops"},
      {"bench_op_overhead", "--reps=", "--reps"},
      {"bench_op_overhead", "--threads 2", "unknown option '--threads'"},
  };
  for (const Case& c : cases) {
    INFO(c.program << " " << c.args);
    auto r = RunCommand(Program(c.program, c.args));
    INFO(r.out);
    CHECK(r.code == 2);
    const std::string first = FirstLine(r.out);
    CHECK(first.rfind(std::string(c.program) + ": ", 0) == 0);
    CHECK(first.find(c.names) != std::string::npos);
  }
}

TEST_CASE("An example and a benchmark still run with good flags and print --help", "[examples][flags]") {
  // Repeated flags: the last wins, as before CLI11; numbers are base 10.
  auto r = RunCommand(Program("sync_tokens", "--workers 2 --rounds 5 --rounds=010 --dim +4 --json=true"));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(JsonNumber(LastLine(r.out), "workers") == 2);
  CHECK(JsonNumber(LastLine(r.out), "rounds") == 10);

  r = RunCommand(Program("bench_op_overhead", "--ops 8 --steps 2 --reps 1 --json"));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(JsonNumber(LastLine(r.out), "ops") == 8);
  CHECK(LastLine(r.out).find("\"us_per_op\"") != std::string::npos);

  for (const char* program : {"sync_tokens", "bench_op_overhead"}) {
    r = RunCommand(Program(program, "--help"));
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK(r.out.find("--json") != std::string::npos);
  }
  r = RunCommand(Program("sync_tokens", "-h"));
  CHECK(r.code == 0);
  CHECK(r.out.find("--rounds INT=100") != std::string::npos);
}
