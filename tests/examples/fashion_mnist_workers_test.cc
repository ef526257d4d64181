// fashion_mnist --workers: replicated training on a local cluster of node
// processes (sync with backup workers, async), checked through its summary.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "examples/common/local_cluster.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

using sf::testing::JsonNumber;
using sf::testing::LastLine;
using sf::testing::RunCommand;

namespace {

bool HaveData() { return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); }

// Runs fashion_mnist with args on 6400 examples (50 batches of 128), one
// epoch, JSON on stdout, in its own run folder (ctest runs these in
// parallel); returns the result with the folder removed.
sf::testing::CommandResult Train(const std::string& args) {
  sf::testing::TempDir dir("sf_fashion_workers");
  return RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --epochs 1 --limit 6400 --json --out " +
                    dir.path + " " + args + " 2>&1");
}

bool HasKey(const std::string& line, const std::string& key) {
  return line.find("\"" + key + "\"") != std::string::npos;
}

}  // namespace

TEST_CASE("fashion_mnist --workers 2 --sync --backup-workers 1 learns and counts the dropped gradients",
          "[examples][workers]") {
  if (!HaveData()) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  auto r = Train("--workers 2 --sync --backup-workers 1 --nodes 2");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string summary = LastLine(r.out);
  for (const char* key : {"model", "epochs", "test_accuracy", "train_steps_per_sec", "epoch_seconds", "workers",
                          "backup_workers", "mode", "applied_steps", "accepted_gradients", "dropped_gradients"})
    CHECK(HasKey(summary, key));
  CHECK(summary.find("\"mode\": \"sync\"") != std::string::npos);
  CHECK(JsonNumber(summary, "workers") == 2);
  CHECK(JsonNumber(summary, "backup_workers") == 1);
  CHECK(JsonNumber(summary, "tasks") == 2);
  // 50 batches per epoch, 2 per global step.
  const double applied = JsonNumber(summary, "applied_steps");
  const double accepted = JsonNumber(summary, "accepted_gradients");
  const double dropped = JsonNumber(summary, "dropped_gradients");
  CHECK(applied == 25);
  CHECK(accepted == 2 * applied);
  CHECK(dropped >= 0);
  // Each of the 3 workers sends at most one gradient per step.
  CHECK(accepted + dropped <= 3 * applied);
  // 25 averaged steps of SGD with momentum: far above the 10% of guessing.
  CHECK(JsonNumber(summary, "test_accuracy") > 0.5);
  CHECK(JsonNumber(summary, "train_steps_per_sec") > 0);
}

TEST_CASE("fashion_mnist --workers 2 --sync without backup workers drops no gradient", "[examples][workers]") {
  if (!HaveData()) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  auto r = Train("--workers 2");  // --sync is the default
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string summary = LastLine(r.out);
  CHECK(summary.find("\"mode\": \"sync\"") != std::string::npos);
  CHECK(JsonNumber(summary, "applied_steps") == 25);
  CHECK(JsonNumber(summary, "accepted_gradients") == 50);
  CHECK(JsonNumber(summary, "dropped_gradients") == 0);
  CHECK(JsonNumber(summary, "test_accuracy") > 0.5);
}

TEST_CASE("fashion_mnist --workers 2 --async applies every gradient and records staleness", "[examples][workers]") {
  if (!HaveData()) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  auto r = Train("--workers 2 --async");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string summary = LastLine(r.out);
  for (const char* key : {"model", "epochs", "test_accuracy", "train_steps_per_sec", "epoch_seconds", "workers",
                          "backup_workers", "mode", "applied_updates", "staleness_mean", "staleness_max"})
    CHECK(HasKey(summary, key));
  CHECK(summary.find("\"mode\": \"async\"") != std::string::npos);
  CHECK_FALSE(HasKey(summary, "dropped_gradients"));
  CHECK(JsonNumber(summary, "applied_updates") == 50);
  const double mean = JsonNumber(summary, "staleness_mean"), max = JsonNumber(summary, "staleness_max");
  CHECK(mean >= 0);
  CHECK(max >= mean);
  CHECK(max < 50);  // no update can be older than the run
  CHECK(JsonNumber(summary, "test_accuracy") > 0.5);
}

TEST_CASE("fashion_mnist --cluster trains on a cluster the user started, again and again", "[examples][workers]") {
  if (!HaveData()) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  sf::examples::LocalCluster cluster;
  REQUIRE(cluster.Start(2, 300).ok());
  const std::string where = " --cluster " + cluster.addresses()[0] + " --tls-dir " + cluster.tls_dir();
  // The second run finds the shards' step counters where the first left
  // them: it must still train its own 25 steps from fresh values.
  for (int run = 0; run < 2; ++run) {
    auto r = Train("--workers 2 --sync" + where);
    INFO("run " << run << ": " << r.out);
    REQUIRE(r.code == 0);
    const std::string summary = LastLine(r.out);
    CHECK(JsonNumber(summary, "tasks") == 2);
    CHECK(JsonNumber(summary, "applied_steps") == 25);
    CHECK(JsonNumber(summary, "accepted_gradients") == 50);
    CHECK(JsonNumber(summary, "test_accuracy") > 0.5);
  }
  auto r = Train("--workers 2 --async" + where);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(JsonNumber(LastLine(r.out), "applied_updates") == 50);
}

TEST_CASE("fashion_mnist rejects bad worker flags with a clear error", "[examples][workers]") {
  if (!HaveData()) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  auto async_backup = Train("--workers 2 --async --backup-workers 1");
  CHECK(async_backup.code == 1);
  CHECK(async_backup.out.find("--backup-workers needs --sync") != std::string::npos);
  auto both = Train("--workers 2 --sync --async");
  CHECK(both.code == 1);
  CHECK(both.out.find("--sync and --async exclude each other") != std::string::npos);
  auto no_workers = Train("--async");
  CHECK(no_workers.code == 1);
  CHECK(no_workers.out.find("need --workers N") != std::string::npos);
  auto negative = Train("--workers 2 --sync --backup-workers -1");
  CHECK(negative.code == 1);
  CHECK(negative.out.find("--backup-workers must not be negative") != std::string::npos);
  auto pipeline = Train("--workers 2 --pipeline");
  CHECK(pipeline.code == 1);
  CHECK(pipeline.out.find("do not work with --workers") != std::string::npos);
  auto no_tls = Train("--workers 2 --cluster 127.0.0.1:1");
  CHECK(no_tls.code == 1);
  CHECK(no_tls.out.find("needs --tls-dir") != std::string::npos);
  auto missing = Train("--workers 2 --cluster 127.0.0.1:1 --tls-dir /nonexistent/tls");
  CHECK(missing.code == 1);
  CHECK(missing.out.find("/nonexistent/tls") != std::string::npos);
}
