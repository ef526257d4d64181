// async_algorithms: sync, Hogwild-style async and SSP training of one model;
// the test runs it briefly and checks the summary, the CSV and the SVG.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

using sf::testing::JsonNumber;
using sf::testing::LastLine;
using sf::testing::RunCommand;

TEST_CASE("async_algorithms trains with sync, async and ssp and reports each", "[examples][replication]") {
  sf::testing::TempDir dir;
  auto r = RunCommand(std::string(SF_BIN_DIR) + "/async_algorithms --workers 3 --steps 40 --eval_every 10 "
                      "--staleness 1 --json --out_dir " + dir.path + " 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string s = LastLine(r.out);
  CHECK(JsonNumber(s, "workers") == 3);
  // The initial loss is ln 2 = 0.693 (zero weights); every algorithm learns.
  for (const char* a : {"sync", "async", "ssp"}) {
    INFO(a);
    CHECK(JsonNumber(s, std::string(a) + "_final_loss") > 0);
    CHECK(JsonNumber(s, std::string(a) + "_final_loss") < 0.5);
    CHECK(JsonNumber(s, std::string(a) + "_accuracy") > 0.8);
    CHECK(JsonNumber(s, std::string(a) + "_steps_per_sec") > 0);
  }
  CHECK(JsonNumber(s, "sync_applied_steps") == 40);
  CHECK(JsonNumber(s, "sync_dropped") == 0);  // no backup workers: nothing is late
  CHECK(JsonNumber(s, "ssp_max_staleness") >= 0);
  std::ifstream csv(dir.path + "/losses.csv");
  REQUIRE(csv.good());
  std::stringstream ss;
  ss << csv.rdbuf();
  CHECK(ss.str().rfind("algorithm,step,wall_s,loss,accuracy\n", 0) == 0);
  CHECK(ss.str().find("\nssp,40,") != std::string::npos);
  std::ifstream svg(dir.path + "/curves.svg");
  CHECK(svg.good());
}

TEST_CASE("async_algorithms with a backup worker counts late gradients", "[examples][replication]") {
  sf::testing::TempDir dir;
  auto r = RunCommand(std::string(SF_BIN_DIR) + "/async_algorithms --algorithms sync --workers 3 "
                      "--backup 1 --steps 30 --json --out_dir " + dir.path + " 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string s = LastLine(r.out);
  CHECK(JsonNumber(s, "sync_applied_steps") == 30);
  CHECK(JsonNumber(s, "sync_dropped") >= 0);
  CHECK(JsonNumber(s, "sync_final_loss") < 0.6);
}

TEST_CASE("async_algorithms refuses bad flags", "[examples][replication]") {
  auto r = RunCommand(std::string(SF_BIN_DIR) + "/async_algorithms --algorithms nope 2>&1");
  CHECK(r.code == 2);
  CHECK(r.out.find("unknown algorithm 'nope'") != std::string::npos);
  auto r2 = RunCommand(std::string(SF_BIN_DIR) + "/async_algorithms --workers 2 --backup 2 2>&1");
  CHECK(r2.code == 2);
}
