// GEMM shared by the MatMul and convolution kernels: Eigen's matrix product
// on row-major buffers, split into row (or column) blocks over the compute
// pool. Eigen's own GEMM is single-threaded here (no OpenMP), so each block
// is an independent product written to its own part of C.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <Eigen/Core>

#include "kernels/compute_pool.h"

namespace sf {
namespace nn {

// C[r0:r1, c0:c1] (=, or += when accumulate) op(A) op(B) in float32 with
// oneDNN's sgemm on the calling thread alone (shapes as nn::GemmBlock's).
// With `=` it writes C without reading it: Eigen's product zero-fills C and
// then accumulates into it, three passes over C where a product with a short
// inner dimension is bound by them. False (C untouched) when built without
// oneDNN or when the library refuses; the caller then multiplies with Eigen.
bool DnnlSgemmBlock(const float* a, const float* b, float* c, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
                    int64_t r0, int64_t r1, int64_t c0, int64_t c1, bool accumulate);

// Below this many multiply-adds a product runs inline: splitting costs more
// than it saves.
constexpr int64_t kGemmParallelMin = int64_t{1} << 18;

// C[r0:r1, c0:c1] (=|+=) op(A) op(B) restricted to those rows and columns.
// A is [m,k] row-major ([k,m] when ta), B is [k,n] ([n,k] when tb), C is [m,n].
// library: float32 blocks go to oneDNN's sgemm when the build has it
// (DnnlSgemmBlock), Eigen's product otherwise or when false (the reference
// other kernels are tested against).
template <typename T>
void GemmBlock(const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k, bool ta, bool tb,
               int64_t r0, int64_t r1, int64_t c0, int64_t c1, bool accumulate, bool library = true) {
  if constexpr (std::is_same_v<T, float>) {
    if (library && DnnlSgemmBlock(a, b, c, m, n, k, ta, tb, r0, r1, c0, c1, accumulate)) return;
  }
  using RM = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Eigen::Map<const RM> A(a, ta ? k : m, ta ? m : k);
  Eigen::Map<const RM> B(b, tb ? n : k, tb ? k : n);
  Eigen::Map<RM> C(c, m, n);
  auto cb = C.block(r0, c0, r1 - r0, c1 - c0);
  auto product = [&](const auto& ao, const auto& bo) {
    if (accumulate) cb.noalias() += ao * bo;
    else cb.noalias() = ao * bo;
  };
  auto with_a = [&](const auto& ao) {
    if (!tb) product(ao, B.middleCols(c0, c1 - c0));
    else product(ao, B.middleRows(c0, c1 - c0).transpose());
  };
  if (!ta) with_a(A.middleRows(r0, r1 - r0));
  else with_a(A.middleCols(r0, r1 - r0).transpose());
}

// Calls block(r0, r1, c0, c1) over blocks covering an [m, n] output of a
// product with inner size k, split over the pool's threads when the product
// is big enough (pool may be null: one block, inline). Each block is one
// thread's, so what a block writes no other block touches.
template <typename Fn>
void GemmSplit(ComputePool* pool, int64_t m, int64_t n, int64_t k, const Fn& block) {
  const int threads = pool ? pool->num_threads() : 1;
  if (threads <= 1 || m * n * k < kGemmParallelMin) {
    block(int64_t{0}, m, int64_t{0}, n);
    return;
  }
  // Split the longer side; blocks of at least 16 rows/columns keep the
  // packed panels efficient.
  if (m >= n) {
    pool->ParallelFor(m, std::max<int64_t>(16, (m + threads - 1) / threads),
                      [&](int64_t r0, int64_t r1) { block(r0, r1, int64_t{0}, n); });
  } else {
    pool->ParallelFor(n, std::max<int64_t>(16, (n + threads - 1) / threads),
                      [&](int64_t c0, int64_t c1) { block(int64_t{0}, m, c0, c1); });
  }
}

// C (=|+=) op(A) op(B) on the whole matrices, split over the pool's threads
// when the product is big enough (pool may be null: inline); library as
// GemmBlock's (oneDNN's sgemm ran the step's products 1.5-2x faster than
// Eigen's on the shapes measured).
template <typename T>
void Gemm(ComputePool* pool, const T* a, const T* b, T* c, int64_t m, int64_t n, int64_t k,
          bool ta, bool tb, bool accumulate = false, bool library = true) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) std::fill(c, c + m * n, T(0));
    return;
  }
  GemmSplit(pool, m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    GemmBlock(a, b, c, m, n, k, ta, tb, r0, r1, c0, c1, accumulate, library);
  });
}

}  // namespace nn
}  // namespace sf
