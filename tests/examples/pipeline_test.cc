// fashion_mnist --pipeline: training batches come through a RandomShuffleQueue
// fed by a QueueRunner; the program must learn as well as from memory.
#include <catch2/catch.hpp>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace {

std::string RunOrEmpty(const std::string& cmd, int* code) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), p)) out += buf.data();
  const int status = pclose(p);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

double NumberAfter(const std::string& s, const std::string& key) {
  auto p = s.find("\"" + key + "\": ");
  if (p == std::string::npos) return -1;
  return std::stod(s.substr(p + key.size() + 4));
}

}  // namespace

TEST_CASE("fashion_mnist --pipeline trains from a RandomShuffleQueue", "[examples]") {
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    WARN("dataset-fashion-mnist is not installed; skipping");
    return;
  }
  auto dir = std::filesystem::temp_directory_path() / "sf_fashion_pipeline_test";
  std::filesystem::remove_all(dir);
  int code = -1;
  const std::string out = RunOrEmpty(std::string(SF_BIN_DIR) +
                                         "/fashion_mnist --pipeline --epochs 2 --limit 6400 --json --out " +
                                         dir.string() + " 2>/dev/null",
                                     &code);
  INFO(out);
  REQUIRE(code == 0);
  const std::string summary = out.substr(out.rfind("{\"model\""));
  CHECK(summary.find("\"pipeline\": true") != std::string::npos);
  CHECK(NumberAfter(summary, "pipeline_fill_examples_per_sec") > 0);
  CHECK(NumberAfter(summary, "input_wait_seconds") >= 0);
  CHECK(NumberAfter(summary, "test_accuracy") > 0.65);
  std::filesystem::remove_all(dir);
}
