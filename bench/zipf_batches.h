// The sparse benchmarks' workload (bench_embedding, bench_hash_embedding):
// batches of ids, Zipf ranks scattered over the rows, and 0/1 labels; the
// same generator as bench/peers/embedding.py (numpy differs in the uniforms).
// bench_hash_embedding --cold streams batches from ZipfSampler instead.
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

// Zipf(exponent) ranks in [0, n) in constant time and memory, by Hörmann and
// Derflinger's rejection-inversion (as Apache Commons' sampler): a stream over
// hundreds of millions of ids needs no table of their probabilities.
class ZipfSampler {
 public:
  ZipfSampler(int64_t n, double exponent)
      : n_(static_cast<double>(n)), q_(exponent), h_x1_(HIntegral(1.5) - 1.0), h_n_(HIntegral(n_ + 0.5)),
        s_(2.0 - HIntegralInverse(HIntegral(2.5) - H(2.0))) {}
  // A rank, 0 the most frequent.
  template <class Rng>
  int64_t operator()(Rng& rng) const {
    std::uniform_real_distribution<double> unit(0, 1);
    for (;;) {
      const double u = h_n_ + unit(rng) * (h_x1_ - h_n_);
      const double x = HIntegralInverse(u);
      double k = std::floor(x + 0.5);
      k = std::min(std::max(k, 1.0), n_);
      if (k - x <= s_ || u >= HIntegral(k + 0.5) - H(k)) return static_cast<int64_t>(k) - 1;
    }
  }

 private:
  double H(double x) const { return std::exp(-q_ * std::log(x)); }
  // The integral of H from 1 to x: (x^(1-q) - 1) / (1-q), stable near q = 1.
  double HIntegral(double x) const {
    const double l = std::log(x);
    return Helper2((1.0 - q_) * l) * l;
  }
  double HIntegralInverse(double x) const {
    double t = x * (1.0 - q_);
    if (t < -1.0) t = -1.0;
    return std::exp(Helper1(t) * x);
  }
  static double Helper1(double x) {  // log1p(x) / x
    return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  static double Helper2(double x) {  // expm1(x) / x
    return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
  }
  double n_, q_, h_x1_, h_n_, s_;
};

// Batch number b of an endless stream, [batch, ids_per_example] ids
// (Zipf ranks scattered over [0, rows) as MakeZipfBatches does) and
// [batch, 1] labels; the same b gives the same batch (seeded by b).
inline void MakeStreamBatch(const ZipfSampler& zipf, int64_t rows, int64_t b, int64_t batch, int64_t ids_per_example,
                            Tensor* ids, Tensor* labels) {
  std::mt19937_64 rng(0x5EED0000u + static_cast<uint64_t>(b));
  std::uniform_real_distribution<double> u(0, 1);
  *ids = Tensor(DType::kInt64, {batch, ids_per_example});
  int64_t* d = ids->data<int64_t>();
  for (int64_t i = 0; i < ids->num_elements(); ++i)
    d[i] = static_cast<int64_t>((static_cast<unsigned __int128>(zipf(rng)) * 2654435761u) % rows);
  *labels = Tensor(DType::kFloat32, {batch, 1});
  for (int64_t i = 0; i < batch; ++i) labels->data<float>()[i] = u(rng) < 0.5 ? 0.0f : 1.0f;
}

}  // namespace sf::bench
