// The sparse benchmarks' workload (bench_embedding, bench_hash_embedding):
// batches of ids, Zipf ranks scattered over the rows, and 0/1 labels; the
// same generator as bench/peers/embedding.py (numpy differs in the uniforms).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "shardflow/tensor.h"

namespace sf::bench {

// Appends num_batches id batches [batch, ids_per_example] (int64 in [0, rows))
// and label batches [batch, 1] to ids and labels; deterministic (seed 42).
inline void MakeZipfBatches(int64_t rows, double zipf, int64_t num_batches, int64_t batch, int64_t ids_per_example,
                            std::vector<Tensor>* ids, std::vector<Tensor>* labels) {
  std::vector<double> cdf(rows);
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) cdf[r] = (total += std::pow(static_cast<double>(r + 1), -zipf));
  for (double& x : cdf) x /= total;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0, 1);
  for (int64_t b = 0; b < num_batches; ++b) {
    Tensor t(DType::kInt64, {batch, ids_per_example});
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      int64_t rank = std::upper_bound(cdf.begin(), cdf.end(), u(rng)) - cdf.begin();
      rank = std::min(rank, rows - 1);
      t.data<int64_t>()[i] = static_cast<int64_t>((static_cast<unsigned __int128>(rank) * 2654435761u) % rows);
    }
    Tensor y(DType::kFloat32, {batch, 1});
    for (int64_t i = 0; i < batch; ++i) y.data<float>()[i] = u(rng) < 0.5 ? 0.0f : 1.0f;
    ids->push_back(t);
    labels->push_back(y);
  }
}

}  // namespace sf::bench
