// ZipfClicks: a small deterministic click log over one id space, for the
// elastic cluster demo and the recovery benchmark (the same ids as
// bench_embedding and embedding_ctr's user table).
// - ids are Zipf(zipf) distributed: rank r (0-based) has probability
//   proportional to (r + 1)^-zipf, sampled by binary search in the CDF; the
//   rank is scattered over the rows by row = rank * 2654435761 mod rows
//   (2654435761 is prime: a bijection for rows < 2^31).
// - the click of an example is drawn from a hidden logistic model: each id
//   has a hidden weight in [-1, 1) (splitmix64 of seed and id, nothing
//   stored); logit = scale * sum of the example's hidden weights, click = 1
//   with probability sigmoid(logit). A sum-lookup embedding plus a linear
//   layer can learn it, so the loss goes down.
// Uniforms come from the raw 64-bit generator (not std::uniform_real_
// distribution, whose output may differ between libraries).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "shardflow/tensor.h"

namespace sf::examples {

class ZipfClicks {
 public:
  // REQUIRES: 1 <= rows < 2^31, zipf > 0.
  ZipfClicks(int64_t rows, double zipf, uint64_t seed, double scale = 1.0)
      : rows_(rows), seed_(seed), scale_(scale), cdf_(static_cast<size_t>(rows)) {
    double total = 0;
    for (int64_t r = 0; r < rows; ++r) cdf_[r] = (total += std::pow(static_cast<double>(r + 1), -zipf));
    for (double& v : cdf_) v /= total;
    cdf_.back() = 1.0;
  }

  // One id drawn from rng.
  int64_t Id(std::mt19937_64& rng) const {
    int64_t rank = std::upper_bound(cdf_.begin(), cdf_.end(), Uniform(rng)) - cdf_.begin();
    rank = std::min(rank, rows_ - 1);
    return static_cast<int64_t>((static_cast<unsigned __int128>(rank) * 2654435761u) %
                                static_cast<uint64_t>(rows_));
  }

  // The hidden weight of id, in [-1, 1).
  double HiddenWeight(int64_t id) const {
    const uint64_t h = SplitMix64(SplitMix64(seed_ * 0x100000001b3ULL) ^ static_cast<uint64_t>(id));
    return static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0;
  }

  // A batch: ids [n, k] (int64) and clicks [n, 1] (float32 0/1) drawn from rng.
  void Batch(int64_t n, int64_t k, std::mt19937_64& rng, Tensor* ids, Tensor* labels) const {
    *ids = Tensor(DType::kInt64, {n, k});
    *labels = Tensor(DType::kFloat32, {n, 1});
    int64_t* id = ids->data<int64_t>();
    float* y = labels->data<float>();
    for (int64_t e = 0; e < n; ++e) {
      double logit = 0;
      for (int64_t j = 0; j < k; ++j) {
        id[e * k + j] = Id(rng);
        logit += HiddenWeight(id[e * k + j]);
      }
      y[e] = Uniform(rng) < 1.0 / (1.0 + std::exp(-scale_ * logit)) ? 1.0f : 0.0f;
    }
  }

  // A uniform double in [0, 1).
  static double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t SplitMix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }

  int64_t rows_;
  uint64_t seed_;
  double scale_;
  std::vector<double> cdf_;
};

}  // namespace sf::examples
