// Runs the example programs as a user would and checks what they print.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <string>

#include "kernels/cpu_features.h"
#include "tests/support/run_command.h"

using sf::testing::JsonNumber;
using sf::testing::LastLine;
using sf::testing::RunCommand;

TEST_CASE("The README's program runs", "[examples]") {
  auto r = RunCommand(std::string(SF_BIN_DIR) + "/quickstart --json");
  INFO(r.out);
  CHECK(r.code == 0);
  // Zero inputs give zero logits: the mean cross entropy over 10 classes is ln 10.
  CHECK(JsonNumber(LastLine(r.out), "loss") == Approx(std::log(10.0)).epsilon(1e-5));
}

TEST_CASE("fashion_mnist learns on a slice of the data and prints its summary keys", "[examples]") {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  auto dir = std::filesystem::temp_directory_path() / "sf_fashion_test";
  std::filesystem::remove_all(dir);
  auto r = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --epochs 1 --limit 6400 --json --out " +
                     dir.string() + " 2>/dev/null");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string summary = LastLine(r.out);
  for (const char* key : {"model", "epochs", "test_accuracy", "train_steps_per_sec", "epoch_seconds"})
    CHECK(summary.find(std::string("\"") + key + "\"") != std::string::npos);
  // 50 steps of SGD with momentum: far above the 10% of guessing.
  CHECK(JsonNumber(summary, "test_accuracy") > 0.65);
  auto run = dir / "fashion_mnist_mlp_seed1";
  CHECK(std::filesystem::exists(run / "metrics.csv"));
  CHECK(std::filesystem::exists(run / "curves.svg"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("fashion_mnist names the missing package and rejects bad flags", "[examples]") {
  auto missing = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --data /nonexistent 2>&1");
  CHECK(missing.code == 1);
  CHECK(missing.out.find("dataset-fashion-mnist") != std::string::npos);
  auto bad = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --epochs x 2>&1");
  CHECK(bad.code == 2);
  CHECK(bad.out.find("--epochs") != std::string::npos);
  auto model = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --model rnn --limit 10 2>&1");
  CHECK(model.code == 1);
  CHECK(model.out.find("unknown model 'rnn'") != std::string::npos);
}

TEST_CASE("fashion_mnist --precision bf16 learns like fp32, or is refused naming what is missing", "[examples][bf16]") {
  auto bad = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --precision fp16 --limit 10 2>&1");
  CHECK(bad.code == 1);
  CHECK(bad.out.find("unknown precision \"fp16\"") != std::string::npos);
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  auto dir = std::filesystem::temp_directory_path() / "sf_fashion_bf16_test";
  std::filesystem::remove_all(dir);
  auto r = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --precision bf16 --epochs 1 --limit 6400 --json --out " +
                      dir.string() + " 2>&1");
  INFO(r.out);
  if (!sf::Bf16Supported().ok()) {
    CHECK(r.code == 1);
    CHECK(r.out.find("bf16") != std::string::npos);
    return;
  }
  REQUIRE(r.code == 0);
  const std::string summary = LastLine(r.out);
  CHECK(summary.find("\"precision\": \"bf16\"") != std::string::npos);
  CHECK(JsonNumber(summary, "test_accuracy") > 0.65);
  CHECK(std::filesystem::exists(dir / "fashion_mnist_mlp_bf16_seed1" / "metrics.csv"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("bench_gemm times square sizes and named products, in fp32 and bf16", "[examples][bench]") {
  auto r = RunCommand(std::string(SF_BIN_DIR) + "/bench_gemm --json --sizes 32,48 --reps 1 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("\"size\": 48") != std::string::npos);
  CHECK(JsonNumber(LastLine(r.out), "mean_graph_over_eigen") > 0);
  if (sf::Bf16Supported().ok()) {
    auto b = RunCommand(std::string(SF_BIN_DIR) + "/bench_gemm --json --shapes 16x24x40,40x24x16:ta:tb --reps 1 " +
                        "--precision bf16 2>&1");
    INFO(b.out);
    REQUIRE(b.code == 0);
    CHECK(b.out.find("\"m\": 40, \"n\": 24, \"k\": 16, \"transpose_a\": true, \"transpose_b\": true") !=
          std::string::npos);
    CHECK(JsonNumber(LastLine(b.out), "mean_bf16_over_fp32") > 0);
  }
  for (const char* bad : {"--shapes 16x24", "--shapes 16x24x0", "--shapes 8x8x8:tc", "--sizes -3", "--sizes 12abc", "--precision int8"}) {
    auto e = RunCommand(std::string(SF_BIN_DIR) + "/bench_gemm " + bad + " 2>&1");
    INFO(bad << ": " << e.out);
    CHECK(e.code == 1);
    CHECK(e.out.find("bench_gemm:") != std::string::npos);
  }
}

TEST_CASE("bench_cnn_step prints its rounds and a summary with steps_per_sec last", "[examples][bench]") {
  for (const char* precision : {"fp32", "bf16"}) {
    if (std::string(precision) == "bf16" && !sf::Bf16Supported().ok()) continue;
    auto r = RunCommand(std::string(SF_BIN_DIR) + "/bench_cnn_step --json --batch 8 --steps 2 --rounds 2 --warmup 1 " +
                        "--precision " + precision + " 2>&1");
    INFO(r.out);
    REQUIRE(r.code == 0);
    const std::string summary = LastLine(r.out);
    CHECK(JsonNumber(summary, "steps_per_sec") > 0);
    CHECK(summary.find(std::string("\"precision\": \"") + precision + "\"") != std::string::npos);
    // Forward, both gradients of both convolutions, and of both dense layers.
    CHECK(JsonNumber(summary, "products_in_precision") == 12);
  }
  auto bad = RunCommand(std::string(SF_BIN_DIR) + "/bench_cnn_step --precision int8 2>&1");
  CHECK(bad.code == 1);
  CHECK(bad.out.find("unknown precision") != std::string::npos);
}
