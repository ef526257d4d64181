// fashion_mnist --checkpoint-dir: a run stopped after 2 of 3 epochs and
// resumed from its checkpoint ends exactly where an uninterrupted run does.
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>
#include <string>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

using sf::testing::JsonNumber;
using sf::testing::LastLine;
using sf::testing::RunCommand;
using sf::testing::TempDir;

namespace {

bool HaveData() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

// The second-to-last line: the last epoch's JSON line before the summary.
std::string LastEpochLine(const std::string& out) {
  std::istringstream in(out);
  std::string line, prev, last;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    prev = last;
    last = line;
  }
  return prev;
}

std::string Program(const TempDir& out) {
  return std::string(SF_BIN_DIR) + "/fashion_mnist --limit 3200 --epochs 3 --json --out " + out.path;
}

}  // namespace

TEST_CASE("fashion_mnist resumes from its checkpoint and ends like an uninterrupted run", "[examples][checkpoint]") {
  if (!HaveData()) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  TempDir out("sf_ckpt_resume_out"), ckpt("sf_ckpt_resume");
  // Both parts use --epochs 3 so the learning-rate schedule spans the same
  // 3 epochs as the uninterrupted run; the first stops after epoch 2.
  auto first = RunCommand(Program(out) + " --stop-after-epoch 2 --checkpoint-dir " + ckpt.path + " 2>&1");
  INFO(first.out);
  REQUIRE(first.code == 0);
  const std::string first_summary = LastLine(first.out);
  CHECK(JsonNumber(first_summary, "start_step") == 0);
  CHECK(JsonNumber(first_summary, "global_step") == 50);  // 2 epochs of 3200 / 128 = 25 steps
  CHECK(first.out.find("restored") == std::string::npos);

  auto resumed = RunCommand(Program(out) + " --checkpoint-dir " + ckpt.path + " 2>&1");
  INFO(resumed.out);
  REQUIRE(resumed.code == 0);
  CHECK(resumed.out.find("restored checkpoint from " + ckpt.path + " at global step 50") != std::string::npos);
  // Only epoch 3 runs.
  CHECK(resumed.out.find("\"epoch\": 1,") == std::string::npos);
  CHECK(resumed.out.find("\"epoch\": 2,") == std::string::npos);
  const std::string resumed_epoch = LastEpochLine(resumed.out);
  CHECK(JsonNumber(resumed_epoch, "epoch") == 3);
  const std::string resumed_summary = LastLine(resumed.out);
  CHECK(JsonNumber(resumed_summary, "start_step") == 50);
  CHECK(JsonNumber(resumed_summary, "global_step") == 75);

  auto whole = RunCommand(Program(out) + " 2>/dev/null");
  INFO(whole.out);
  REQUIRE(whole.code == 0);
  const std::string whole_epoch = LastEpochLine(whole.out);
  CHECK(JsonNumber(whole_epoch, "epoch") == 3);
  // Same batches, same learning rates, same restored variables and momentum
  // slots, same kernels: the numbers are equal, not just close.
  CHECK(JsonNumber(resumed_summary, "test_accuracy") == JsonNumber(LastLine(whole.out), "test_accuracy"));
  CHECK(JsonNumber(resumed_epoch, "test_loss") == JsonNumber(whole_epoch, "test_loss"));
  CHECK(JsonNumber(resumed_epoch, "train_loss") == JsonNumber(whole_epoch, "train_loss"));

  // A run whose checkpoint already covers every epoch trains nothing and
  // reports the checkpoint's accuracy.
  auto done = RunCommand(Program(out) + " --checkpoint-dir " + ckpt.path + " 2>/dev/null");
  INFO(done.out);
  REQUIRE(done.code == 0);
  CHECK(JsonNumber(LastLine(done.out), "start_step") == 75);
  CHECK(JsonNumber(LastLine(done.out), "test_accuracy") == JsonNumber(resumed_summary, "test_accuracy"));
}

TEST_CASE("fashion_mnist checkpoints every N steps, keeps the last 3 and rejects bad checkpoint flags",
          "[examples][checkpoint]") {
  if (!HaveData()) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  TempDir out("sf_ckpt_every_out"), ckpt("sf_ckpt_every");
  auto r = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --limit 3200 --epochs 1 --out " + out.path +
                      " --checkpoint-every 5 --checkpoint-dir " + ckpt.path + " 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  // Every 5 steps; step 25 is both a multiple and the end, saved once.
  for (int step : {5, 10, 15, 20, 25})
    CHECK(r.out.find("saved at global step " + std::to_string(step) + "\n") != std::string::npos);
  CHECK(r.out.find("checkpoint 6 ") == std::string::npos);
  // keep_last 3: only the checkpoints of steps 15, 20 and 25 remain.
  auto ls = RunCommand(std::string(SF_BIN_DIR) + "/shardflow ckpt ls " + ckpt.path + " 2>&1");
  INFO(ls.out);
  CHECK(ls.code == 0);
  CHECK(ls.out.find("step 10 ") == std::string::npos);
  for (const char* step : {"step 15 ", "step 20 ", "step 25 "}) CHECK(ls.out.find(step) != std::string::npos);

  auto bad = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --limit 3200 --checkpoint-every -1 --out " +
                        out.path + " 2>&1");
  CHECK(bad.code == 1);
  CHECK(bad.out.find("--checkpoint-every") != std::string::npos);
  // A checkpoint at step 25 is past the 10 steps of one epoch of 1280 examples.
  auto past = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --limit 1280 --epochs 1 --out " + out.path +
                         " --checkpoint-dir " + ckpt.path + " 2>&1");
  CHECK(past.code == 1);
  CHECK(past.out.find("global step 25") != std::string::npos);
}
