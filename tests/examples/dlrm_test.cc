// build/bin/dlrm: learns a synthetic Criteo-format log read in the graph,
// in one process and on a local cluster with workers sharing the files,
// resumes from its checkpoint, and refuses bad input by name.
#include <catch2/catch.hpp>

#include <fstream>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

using sf::testing::JsonNumber;
using sf::testing::LastLine;
using sf::testing::RunCommand;
using sf::testing::TempDir;

namespace {

std::string Dlrm() { return std::string(SF_BIN_DIR) + "/dlrm"; }

}  // namespace

TEST_CASE("dlrm --json learns a synthetic log and reports held-out AUC and log loss", "[examples][dlrm]") {
  auto r = RunCommand(Dlrm() + " --local --json --lines 50000 --max-cardinality 20000 --log-every 20");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string s = LastLine(r.out);
  CHECK(JsonNumber(s, "examples") == 40000);  // 4 of the 5 files
  CHECK(JsonNumber(s, "test_examples") == 10000);
  const double auc = JsonNumber(s, "auc"), planted = JsonNumber(s, "planted_auc");
  CHECK(auc > 0.65);  // chance 0.5; the planted model's about 0.87
  CHECK(auc < planted + 0.01);
  CHECK(JsonNumber(s, "logloss") < 0.6);
  CHECK(JsonNumber(s, "input_wait_fraction") >= 0);
  CHECK(JsonNumber(s, "input_wait_fraction") < 1);
  CHECK(JsonNumber(s, "table_rows") > 1000);
}

TEST_CASE("dlrm --nodes 2 --workers 3 trains every line once on a local cluster and learns", "[examples][dlrm]") {
  auto r = RunCommand(Dlrm() + " --nodes 2 --workers 3 --json --lines 30000 --max-cardinality 20000 --chunk-mb 1 "
                      "--log-every 20");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string s = LastLine(r.out);
  CHECK(s.find("\"mode\": \"cluster\"") != std::string::npos);
  CHECK(JsonNumber(s, "examples") == 24000);  // 4 of the 5 files, each line once over the workers
  CHECK(JsonNumber(s, "test_examples") == 6000);
  CHECK(JsonNumber(s, "chunks") >= 4);
  CHECK(JsonNumber(s, "auc") > 0.6);
}

TEST_CASE("dlrm resumes from its checkpoint past the batches it trained on", "[examples][dlrm]") {
  TempDir data("sf_dlrm_data"), ckpt("sf_dlrm_ckpt");
  auto made = RunCommand(std::string(SF_BIN_DIR) + "/criteo_synth --lines 12000 --files 3 --max-cardinality 5000 --out " +
                         data.path);
  REQUIRE(made.code == 0);
  const std::string common = Dlrm() + " --json --batch 256 --data " + data.path + " --checkpoint-dir " + ckpt.path;
  auto first = RunCommand(common + " --steps 10");
  INFO(first.out);
  REQUIRE(first.code == 0);
  CHECK(JsonNumber(LastLine(first.out), "checkpoints") == 1);
  auto second = RunCommand(common + " --steps 20");
  INFO(second.out);
  REQUIRE(second.code == 0);
  const std::string s = LastLine(second.out);
  CHECK(JsonNumber(s, "start_step") == 10);
  CHECK(JsonNumber(s, "steps") == 20);
  CHECK(JsonNumber(s, "examples") == 10 * 256);
}

TEST_CASE("dlrm refuses bad input by name", "[examples][dlrm]") {
  auto missing = RunCommand(Dlrm() + " --data /nonexistent/criteo 2>&1");
  CHECK(missing.code == 1);
  CHECK(missing.out.find("/nonexistent/criteo") != std::string::npos);
  TempDir one("sf_dlrm_one");
  std::ofstream(one.path + "/day_0.tsv") << "1\t1\t\t\t\t\t\t\t\t\t\t\t\t\t" << std::string(25, '\t') << "\n";
  auto single = RunCommand(Dlrm() + " --data " + one.path + " 2>&1");
  CHECK(single.code == 1);
  CHECK(single.out.find("--test-files") != std::string::npos);
  auto cluster = RunCommand(Dlrm() + " --nodes 2 2>&1");
  CHECK(cluster.code == 2);
  CHECK(cluster.out.find("--workers") != std::string::npos);
  auto both = RunCommand(Dlrm() + " --local --nodes 2 --workers 2 2>&1");
  CHECK(both.code == 2);
  CHECK(both.out.find("--local") != std::string::npos);
  auto batch = RunCommand(Dlrm() + " --batch 0 2>&1");
  CHECK(batch.code == 2);
  CHECK(batch.out.find("--batch") != std::string::npos);
}
