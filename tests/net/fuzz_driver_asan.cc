// Standalone driver for the wire fuzz loop (tests/net/wire_fuzz.h), built
// with AddressSanitizer + UndefinedBehaviorSanitizer outside CMake; the
// command is in docs/TESTING.md. Usage: fuzz_driver_asan [iterations] [seed]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "tests/net/wire_fuzz.h"

int main(int argc, char** argv) {
  const uint64_t iterations = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1000000;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20261130;
  const auto t0 = std::chrono::steady_clock::now();
  auto stats = sf::net::fuzz::RunWireFuzz(seed, iterations);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("inputs %llu decoded %llu rejected %llu seconds %.1f\n",
              static_cast<unsigned long long>(stats.inputs), static_cast<unsigned long long>(stats.decoded),
              static_cast<unsigned long long>(stats.rejected), secs);
  std::printf("rejected by code: %s\n", sf::net::fuzz::RejectionSummary(stats).c_str());
  if (!stats.failure.empty()) {
    std::printf("FAILED: %s\n", stats.failure.c_str());
    return 1;
  }
  return 0;
}
