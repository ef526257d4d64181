// embedding_ctr: the AUC function against hand-computed and brute-force
// values, and the program trained small in one process, on a local cluster
// it starts, and on a cluster given by --cluster: the same seed must give
// the same AUC everywhere (same initial values, same batches, and sparse
// updates applied in order by each shard's actor).
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "examples/common/local_cluster.h"
#include "examples/common/auc.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trace_file.h"

using sf::examples::Auc;
using sf::testing::JsonNumber;
using sf::testing::LastLine;
using sf::testing::RunCommand;

namespace {

// The fraction of (positive, negative) pairs ordered right, ties counting
// one half: the definition the rank sum computes faster.
double PairwiseAuc(const std::vector<float>& s, const std::vector<float>& y) {
  double right = 0, pairs = 0;
  for (size_t i = 0; i < s.size(); ++i)
    for (size_t j = 0; j < s.size(); ++j)
      if (y[i] > 0.5f && y[j] < 0.5f) {
        pairs += 1;
        right += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
      }
  return right / pairs;
}

std::string Program() { return std::string(SF_BIN_DIR) + "/embedding_ctr"; }

// The small configuration every mode runs.
const char kSmall[] = " --rows 100000 --dim 16 --steps 60 --batch 1024 --test 20000 --seed 7 --json";

}  // namespace

TEST_CASE("Auc matches hand-computed values", "[examples][embedding_ctr]") {
  // 4 pairs (pos, neg): 0.35 > 0.1, 0.35 < 0.4, 0.8 > 0.1, 0.8 > 0.4: 3/4.
  CHECK(Auc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}) == Approx(0.75));
  // Ties: the positive 0.5 against the negative 0.5 counts a half: 3.5/4.
  CHECK(Auc({0.5f, 0.5f, 0.2f, 0.9f}, {1, 0, 0, 1}) == Approx(0.875));
  // Perfect, reversed, and all tied.
  CHECK(Auc({1, 2, 3, 4}, {0, 0, 1, 1}) == Approx(1.0));
  CHECK(Auc({4, 3, 2, 1}, {0, 0, 1, 1}) == Approx(0.0));
  CHECK(Auc({7, 7, 7, 7, 7}, {0, 1, 0, 1, 1}) == Approx(0.5));
}

TEST_CASE("Auc is undefined without both classes or with mismatched sizes", "[examples][embedding_ctr]") {
  CHECK(std::isnan(Auc({0.1f, 0.2f}, {1, 1})));
  CHECK(std::isnan(Auc({0.1f, 0.2f}, {0, 0})));
  CHECK(std::isnan(Auc({}, {})));
  CHECK(std::isnan(Auc({0.1f, 0.2f}, {0, 1, 1})));
}

TEST_CASE("Auc equals the pairwise count on random scores with ties", "[examples][embedding_ctr]") {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> s(200), y(200);
    for (size_t i = 0; i < s.size(); ++i) {
      s[i] = static_cast<float>(rng() % 17);  // few values: many ties
      y[i] = static_cast<float>(rng() % 3 == 0);
    }
    y[0] = 1;
    y[1] = 0;
    CHECK(Auc(s, y) == Approx(PairwiseAuc(s, y)).epsilon(1e-12));
  }
}

TEST_CASE("embedding_ctr learns the same model in-process and on clusters", "[examples][embedding_ctr]") {
  auto local = RunCommand(Program() + kSmall + " --local 2>&1");
  INFO(local.out);
  REQUIRE(local.code == 0);
  const std::string l = LastLine(local.out);
  for (const char* key : {"auc", "examples_per_sec", "rows", "shards", "nodes"}) {
    INFO(key);
    CHECK(JsonNumber(l, key) >= 0);
  }
  CHECK(JsonNumber(l, "rows") == 100000);
  CHECK(JsonNumber(l, "shards") == 4);
  CHECK(JsonNumber(l, "nodes") == 0);
  CHECK(JsonNumber(l, "examples_per_sec") > 0);
  // The hidden model's AUC on this seed is about 0.79; the small model gets
  // past 0.65 after 60 steps (at step 0 it is near 0.5).
  const double auc = JsonNumber(l, "auc");
  CHECK(auc > 0.65);
  CHECK(auc < JsonNumber(l, "oracle_auc"));
  // Progress lines: one per evaluation (every 15 steps).
  CHECK(local.out.find("{\"step\": 15, ") != std::string::npos);
  CHECK(local.out.find("{\"step\": 60, ") != std::string::npos);

  {
    // Checkpoint half-way on a 2-node cluster, resume in-process: the same
    // model as the uninterrupted run (Adam's slots and the tables' Adagrad
    // accumulators travel in the checkpoint).
    sf::testing::TempDir dir("sf_ctr_ckpt");
    auto first = RunCommand(Program() +
                            " --rows 100000 --dim 16 --steps 30 --batch 1024 --test 20000 --seed 7 --json"
                            " --nodes 2 --checkpoint-every 10 --checkpoint-dir " + dir.path + " 2>&1");
    INFO(first.out);
    REQUIRE(first.code == 0);
    CHECK(JsonNumber(LastLine(first.out), "checkpoints") == 3);
    CHECK(JsonNumber(LastLine(first.out), "start_step") == 0);
    auto resumed = RunCommand(Program() + kSmall + " --local --checkpoint-dir " + dir.path + " 2>&1");
    INFO(resumed.out);
    REQUIRE(resumed.code == 0);
    const std::string r = LastLine(resumed.out);
    CHECK(JsonNumber(r, "start_step") == 30);
    CHECK(JsonNumber(r, "auc") == Approx(auc).margin(1e-4));
    auto bad = RunCommand(Program() + kSmall + " --local --checkpoint-every -1 2>&1");
    CHECK(bad.code != 0);
    CHECK(bad.out.find("--checkpoint-every") != std::string::npos);
  }

  auto started = RunCommand(Program() + kSmall + " --nodes 2 2>&1");
  INFO(started.out);
  REQUIRE(started.code == 0);
  const std::string c = LastLine(started.out);
  CHECK(JsonNumber(c, "nodes") == 2);
  CHECK(JsonNumber(c, "auc") == Approx(auc).margin(1e-4));

  sf::examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 120, std::string(SF_BIN_DIR) + "/shardflow").ok());
  auto given = RunCommand(Program() + kSmall + " --cluster " + cluster.addresses()[0] +
                          " --tls-dir " + cluster.tls_dir() + " 2>&1");
  INFO(given.out);
  REQUIRE(given.code == 0);
  const std::string k = LastLine(given.out);
  CHECK(JsonNumber(k, "nodes") == 2);
  CHECK(JsonNumber(k, "auc") == Approx(auc).margin(1e-4));

  // Another seed is another log: the AUC moves.
  auto other = RunCommand(Program() + " --rows 100000 --dim 16 --steps 60 --batch 1024 --test 20000 "
                          "--seed 8 --json --local 2>&1");
  REQUIRE(other.code == 0);
  CHECK(std::fabs(JsonNumber(LastLine(other.out), "auc") - auc) > 1e-4);
}

TEST_CASE("embedding_ctr --hash learns from raw 64-bit ids in-process and on a cluster", "[examples][embedding_ctr]") {
  auto fixed = RunCommand(Program() + kSmall + " --local 2>&1");
  REQUIRE(fixed.code == 0);
  auto local = RunCommand(Program() + kSmall + " --local --hash 2>&1");
  INFO(local.out);
  REQUIRE(local.code == 0);
  const std::string l = LastLine(local.out);
  for (const char* key : {"auc", "examples_per_sec", "shards", "nodes", "hash_rows", "hash_admitted"}) {
    INFO(key);
    CHECK(JsonNumber(l, key) >= 0);
  }
  // min_count 2: some ids were seen once and got no row.
  CHECK(JsonNumber(l, "hash_rejected") > 0);
  CHECK(JsonNumber(l, "hash_rows") == JsonNumber(l, "hash_admitted") - JsonNumber(l, "hash_evicted"));
  const double auc = JsonNumber(l, "auc");
  // As good as the fixed table on the same log, within the spread of two
  // random initialisations.
  CHECK(auc > JsonNumber(LastLine(fixed.out), "auc") - 0.01);
  auto cluster = RunCommand(Program() + kSmall + " --nodes 2 --hash 2>&1");
  INFO(cluster.out);
  REQUIRE(cluster.code == 0);
  CHECK(JsonNumber(LastLine(cluster.out), "nodes") == 2);
  CHECK(JsonNumber(LastLine(cluster.out), "auc") == Approx(auc).margin(1e-4));
}

TEST_CASE("embedding_ctr refuses bad flags naming them", "[examples][embedding_ctr]") {
  auto r = RunCommand(Program() + " --combiner max --local 2>&1");
  CHECK(r.code == 2);
  CHECK(r.out.find("--combiner must be sum, mean or sqrtn, got 'max'") != std::string::npos);
  r = RunCommand(Program() + " --hash --min-count -1 --local 2>&1");
  CHECK(r.code == 2);
  CHECK(r.out.find("--min-count") != std::string::npos);
  r = RunCommand(Program() + " --shards 0 --local 2>&1");
  CHECK(r.code == 2);
  CHECK(r.out.find("--shards") != std::string::npos);
  r = RunCommand(Program() + " --cluster 127.0.0.1:1 2>&1");
  CHECK(r.code == 2);
  CHECK(r.out.find("--cluster needs --tls-dir") != std::string::npos);
  r = RunCommand(Program() + " --table-optimizer adam --local 2>&1");
  CHECK(r.code == 2);
  CHECK(r.out.find("--table-optimizer must be adagrad or sgd") != std::string::npos);
}

TEST_CASE("embedding_ctr reports an unreachable cluster", "[examples][embedding_ctr]") {
  sf::examples::LocalCluster cluster;
  REQUIRE(cluster.Start(1, 60, std::string(SF_BIN_DIR) + "/shardflow").ok());
  const std::string addr = cluster.addresses()[0];
  cluster.Kill(0);
  auto r = RunCommand(Program() + " --rows 1000 --steps 2 --test 100 --cluster " + addr +
                      " --tls-dir " + cluster.tls_dir() + " 2>&1");
  INFO(r.out);
  CHECK(r.code == 1);
  CHECK(r.out.find(addr) != std::string::npos);
}

TEST_CASE("embedding_ctr --trace writes a cluster step's timeline with its embedding calls", "[examples][trace]") {
  sf::testing::TempDir dir("sf_ctr_trace");
  const std::string path = dir / "ctr.json";
  auto r = RunCommand(Program() + " --rows 10000 --dim 8 --steps 8 --batch 256 --test 1000 --json --nodes 2" +
                      " --trace " + path + " --trace-step 3 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  sf::testing::TraceFile t;
  REQUIRE(sf::testing::ReadTraceFile(path, &t) == "");
  CHECK(t.processes.size() == 3);  // the coordinator and two nodes
  CHECK(t.Of("step").size() == 1);
  CHECK(!t.Of("embedding").empty());
  CHECK(!t.Of("send").empty());
  CHECK(!t.Of("recv").empty());
}
