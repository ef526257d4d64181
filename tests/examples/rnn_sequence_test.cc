// Runs examples/rnn_sequence (an LSTM in a WhileLoop on the adding problem)
// as a user would: it learns, and it matches its unrolled twin step by step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/trace_file.h"

using sf::testing::JsonNumber;
using sf::testing::LastLine;
using sf::testing::RunCommand;

namespace {

const std::string kProgram = std::string(SF_BIN_DIR) + "/rnn_sequence";

}  // namespace

TEST_CASE("rnn_sequence learns the adding problem and its loop matches the unrolled model",
          "[examples][rnn]") {
  auto r = RunCommand(kProgram + " --steps 300 --length 20 --batch 32 --hidden 24 --seed 1 --json 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string summary = LastLine(r.out);
  for (const char* key : {"first_loss", "final_loss", "unrolled_final_loss", "steps", "max_abs_diff"})
    CHECK(summary.find(std::string("\"") + key + "\"") != std::string::npos);
  CHECK(JsonNumber(summary, "steps") == 300);
  const double first = JsonNumber(summary, "first_loss"), final = JsonNumber(summary, "final_loss");
  const double unrolled = JsonNumber(summary, "unrolled_final_loss");
  // Ignoring the markers scores 1/6 at best; 300 Adam steps get far below it.
  CHECK(first > 0.3);
  CHECK(final < 0.06);
  CHECK(final < first / 10);
  CHECK(std::abs(final - unrolled) <= 1e-3 * unrolled + 1e-7);
  CHECK(JsonNumber(summary, "max_abs_diff") < 1e-4);
  // Every logged step: the two curves agree to 1e-3 relative.
  std::istringstream lines(r.out);
  std::string line;
  int logged = 0;
  while (std::getline(lines, line)) {
    if (line.find("\"step\"") == std::string::npos) continue;
    ++logged;
    const double a = JsonNumber(line, "loss"), b = JsonNumber(line, "unrolled_loss");
    INFO(line);
    CHECK(std::abs(a - b) <= 1e-3 * std::max(std::abs(b), 1e-6));
    const double longest = JsonNumber(line, "longest");
    CHECK(longest >= 10);
    CHECK(longest <= 20);
  }
  CHECK(logged >= 20);
}

TEST_CASE("rnn_sequence in float64 matches the unrolled model to rounding", "[examples][rnn]") {
  auto r = RunCommand(kProgram + " --steps 60 --length 8 --min_length 2 --batch 8 --hidden 16 --seed 3 "
                      "--dtype float64 --json 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string summary = LastLine(r.out);
  CHECK(JsonNumber(summary, "max_abs_diff") < 1e-9);
  CHECK(std::abs(JsonNumber(summary, "final_loss") - JsonNumber(summary, "unrolled_final_loss")) < 1e-9);
  CHECK(JsonNumber(summary, "final_loss") < JsonNumber(summary, "first_loss"));
  CHECK(summary.find("\"dtype\": \"float64\"") != std::string::npos);
}

TEST_CASE("rnn_sequence rejects bad flags with a clear message", "[examples][rnn]") {
  auto dtype = RunCommand(kProgram + " --dtype int8 2>&1");
  CHECK(dtype.code == 1);
  CHECK(dtype.out.find("--dtype must be float32 or float64") != std::string::npos);
  auto length = RunCommand(kProgram + " --length 1 2>&1");
  CHECK(length.code == 1);
  CHECK(length.out.find("--min_length") != std::string::npos);
  auto steps = RunCommand(kProgram + " --steps many 2>&1");
  CHECK(steps.code == 2);
  CHECK(steps.out.find("--steps") != std::string::npos);
}

TEST_CASE("rnn_sequence --trace records a step of the loop model, every iteration's ops", "[examples][rnn][trace]") {
  sf::testing::TempDir dir("sf_rnn_trace");
  const std::string path = dir / "rnn.json";
  auto r = RunCommand(kProgram + " --steps 4 --length 6 --min_length 6 --batch 4 --hidden 8 --seed 3 --json --trace " +
                      path + " --trace-step 2 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  sf::testing::TraceFile t;
  REQUIRE(sf::testing::ReadTraceFile(path, &t) == "");
  CHECK(t.Of("step").size() == 1);
  // The forward loop runs 6 iterations and its gradient 6 more: each runs
  // NextIteration, so the loop ops appear once per iteration.
  int next_iterations = 0, stack_ops = 0;
  for (const auto& e : t.events) {
    if (e.op == "NextIteration") ++next_iterations;
    if (e.op == "StackPush" || e.op == "StackPop") ++stack_ops;
  }
  CHECK(next_iterations >= 12);
  CHECK(stack_ops > 0);
}
