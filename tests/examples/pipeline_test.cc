// fashion_mnist --pipeline: training batches come through a RandomShuffleQueue
// fed by a QueueRunner; the program must learn as well as from memory.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "tests/support/run_command.h"

using sf::testing::JsonNumber;
using sf::testing::RunCommand;

TEST_CASE("fashion_mnist --pipeline trains from a RandomShuffleQueue", "[examples]") {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  auto dir = std::filesystem::temp_directory_path() / "sf_fashion_pipeline_test";
  std::filesystem::remove_all(dir);
  auto ran = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --pipeline --epochs 2 --limit 6400 --json --out " +
                        dir.string() + " 2>/dev/null");
  const std::string& out = ran.out;
  const int code = ran.code;
  INFO(out);
  REQUIRE(code == 0);
  const std::string summary = out.substr(out.rfind("{\"model\""));
  CHECK(summary.find("\"pipeline\": true") != std::string::npos);
  CHECK(JsonNumber(summary, "pipeline_fill_examples_per_sec") > 0);
  CHECK(JsonNumber(summary, "input_wait_seconds") >= 0);
  CHECK(JsonNumber(summary, "test_accuracy") > 0.65);
  std::filesystem::remove_all(dir);
}
