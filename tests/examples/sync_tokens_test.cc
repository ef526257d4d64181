// sync_tokens: N workers and a chief in lock-step through token queues; the
// program itself checks the barrier, the test checks its verdict and the
// closed-form result.
#include <catch2/catch.hpp>
#include <string>

#include "tests/support/run_command.h"

using sf::testing::JsonNumber;
using sf::testing::LastLine;
using sf::testing::RunCommand;

namespace {

std::string SyncTokens(const std::string& args) { return std::string(SF_BIN_DIR) + "/sync_tokens " + args; }

// Element 0 after `rounds` rounds when every worker w adds (w + 1 + r) in
// round r and the chief applies the average: sum_r ((N + 1) / 2 + r).
double ClosedForm(double workers, double rounds) {
  return rounds * (workers + 1) / 2 + rounds * (rounds - 1) / 2;
}

}  // namespace

TEST_CASE("sync_tokens keeps every worker behind the chief's last round", "[examples][queue]") {
  for (auto [workers, rounds] : {std::pair<int, int>{3, 40}, {1, 10}, {32, 20}}) {
    auto r = RunCommand(SyncTokens("--workers " + std::to_string(workers) + " --rounds " +
                                   std::to_string(rounds) + " --json 2>&1"));
    INFO(r.out);
    REQUIRE(r.code == 0);
    const std::string summary = LastLine(r.out);
    CHECK(JsonNumber(summary, "workers") == workers);
    CHECK(JsonNumber(summary, "rounds") == rounds);
    CHECK(summary.find("\"tokens\": \"per_worker\"") != std::string::npos);
    CHECK(JsonNumber(summary, "barrier_violations") == 0);
    CHECK(JsonNumber(summary, "final_value") == Approx(ClosedForm(workers, rounds)).epsilon(1e-6));
    CHECK(JsonNumber(summary, "rounds_per_sec") > 0);
  }
}

TEST_CASE("sync_tokens with one shared token queue keeps the round barrier", "[examples][queue]") {
  // A fast worker may take two tokens of a round, so the final value depends
  // on timing; the program checks it against the gradients actually pulled.
  auto r = RunCommand(SyncTokens("--tokens shared --workers 4 --rounds 50 --json 2>&1"));
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string summary = LastLine(r.out);
  CHECK(summary.find("\"tokens\": \"shared\"") != std::string::npos);
  CHECK(JsonNumber(summary, "barrier_violations") == 0);
  // Between every round's average being all worker 0's and all worker 3's.
  CHECK(JsonNumber(summary, "final_value") >= 50.0 * 1 + 50.0 * 49 / 2);
  CHECK(JsonNumber(summary, "final_value") <= 50.0 * 4 + 50.0 * 49 / 2);
}

TEST_CASE("sync_tokens workers stop on OutOfRange once the queues close", "[examples][queue]") {
  auto r = RunCommand(SyncTokens("--workers 5 --rounds 7 2>&1"));
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("barrier violations: 0") != std::string::npos);
  CHECK(r.out.find("stopped on OutOfRange after the queues closed: 5/5") != std::string::npos);
  CHECK(r.out.find("final value 42 (closed form 42)") != std::string::npos);
}

TEST_CASE("sync_tokens rejects bad flags with exit code 2", "[examples][queue]") {
  auto zero = RunCommand(SyncTokens("--workers 0 2>&1"));
  CHECK(zero.code == 2);
  CHECK(zero.out.find("--workers must be in [1, 1024], got 0") != std::string::npos);
  auto rounds = RunCommand(SyncTokens("--rounds -3 2>&1"));
  CHECK(rounds.code == 2);
  CHECK(rounds.out.find("--rounds must be at least 1, got -3") != std::string::npos);
  auto mode = RunCommand(SyncTokens("--tokens ring 2>&1"));
  CHECK(mode.code == 2);
  CHECK(mode.out.find("--tokens must be per_worker or shared, got 'ring'") != std::string::npos);
  auto typo = RunCommand(SyncTokens("--worker 3 2>&1"));
  CHECK(typo.code == 2);
  CHECK(typo.out.find("worker") != std::string::npos);
}
