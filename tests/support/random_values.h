// Seeded uniform values in [-1, 1) for kernel tests: the same seed gives the
// same values on every run and machine.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace sf::testing {

// n floats drawn uniformly from [-1, 1) with seed.
inline std::vector<float> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

}  // namespace sf::testing
