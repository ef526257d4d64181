// Runs the example programs as a user would and checks what they print.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace {

struct Ran {
  int code;
  std::string out;
};

Ran RunCommand(const std::string& cmd) {
  Ran r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), p)) r.out += buf.data();
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string LastLine(const std::string& s) {
  std::string t = s;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

double NumberAfter(const std::string& s, const std::string& key) {
  auto p = s.find("\"" + key + "\": ");
  if (p == std::string::npos) return -1;
  return std::stod(s.substr(p + key.size() + 4));
}

}  // namespace

TEST_CASE("The README's program runs", "[examples]") {
  Ran r = RunCommand(std::string(SF_BIN_DIR) + "/quickstart 2>&1");
  INFO(r.out);
  CHECK(r.code == 0);
}

TEST_CASE("fashion_mnist learns on a slice of the data and prints its summary keys", "[examples]") {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  auto dir = std::filesystem::temp_directory_path() / "sf_fashion_test";
  std::filesystem::remove_all(dir);
  Ran r = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --epochs 1 --limit 6400 --json --out " +
                     dir.string() + " 2>/dev/null");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string summary = LastLine(r.out);
  for (const char* key : {"model", "epochs", "test_accuracy", "train_steps_per_sec", "epoch_seconds"})
    CHECK(summary.find(std::string("\"") + key + "\"") != std::string::npos);
  // 50 steps of SGD with momentum: far above the 10% of guessing.
  CHECK(NumberAfter(summary, "test_accuracy") > 0.65);
  auto run = dir / "fashion_mnist_mlp_seed1";
  CHECK(std::filesystem::exists(run / "metrics.csv"));
  CHECK(std::filesystem::exists(run / "curves.svg"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("fashion_mnist names the missing package and rejects bad flags", "[examples]") {
  Ran missing = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --data /nonexistent 2>&1");
  CHECK(missing.code == 1);
  CHECK(missing.out.find("dataset-fashion-mnist") != std::string::npos);
  Ran bad = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --epochs x 2>&1");
  CHECK(bad.code == 2);
  CHECK(bad.out.find("--epochs") != std::string::npos);
  Ran model = RunCommand(std::string(SF_BIN_DIR) + "/fashion_mnist --model rnn --limit 10 2>&1");
  CHECK(model.code == 1);
  CHECK(model.out.find("unknown model 'rnn'") != std::string::npos);
}
