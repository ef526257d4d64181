// Mutation fuzzing of the wire decoder (tests/net/wire_fuzz.h). Iterations
// come from SF_FUZZ_ITERATIONS (default 200000); ctest's "net: wire fuzz 1M"
// (label soak) runs a million.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/net/wire_fuzz.h"

using namespace sf::net::fuzz;

TEST_CASE("mutated frames never crash the decoder and decode consistently", "[fuzz]") {
  uint64_t iterations = 200000;
  if (const char* env = std::getenv("SF_FUZZ_ITERATIONS")) iterations = std::strtoull(env, nullptr, 10);
  const auto t0 = std::chrono::steady_clock::now();
  FuzzStats stats = RunWireFuzz(/*seed=*/20261130, iterations);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wire fuzz: %llu inputs, %llu decoded, %llu rejected (%s), %.1f s\n",
              static_cast<unsigned long long>(stats.inputs), static_cast<unsigned long long>(stats.decoded),
              static_cast<unsigned long long>(stats.rejected), RejectionSummary(stats).c_str(), secs);
  INFO(stats.failure);
  CHECK(stats.failure.empty());
  CHECK(stats.inputs == iterations);
  CHECK(stats.decoded + stats.rejected == stats.inputs);
  // The mutations must reach both outcomes, or the fuzzer tests nothing.
  if (iterations >= 10000) {
    CHECK(stats.decoded > iterations / 100);
    CHECK(stats.rejected > iterations / 10);
    // Past the header and segment table too: field checks must be reached.
    CHECK(stats.rejected_by_code[static_cast<int>(sf::Code::kInvalidArgument)] > iterations / 1000);
  }
}
