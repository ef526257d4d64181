// float32 MatMul throughput through a graph (Session, MatMul op) against Eigen
// called directly (a tensor contraction on a thread-pool device with the same
// number of threads). One JSON line per size: size, graph_gflops, eigen_gflops.
#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/Tensor>

#include <algorithm>
#include <chrono>
#include <random>
#include <sstream>
#include <thread>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "shardflow/ops.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

Tensor Random(int64_t n, uint64_t seed) {
  Tensor t(DType::kFloat32, {n, n});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < n * n; ++i) t.data<float>()[i] = u(rng);
  return t;
}

template <typename F>
double BestSeconds(F&& f, int reps) {
  f();  // warm up
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.String("sizes", "256,1024,2048", "comma-separated square sizes")
      .Int("threads", 0, "threads for both (0 = one per core)")
      .Int("reps", 5, "timed repetitions (best reported)").Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_gemm");
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  int threads = static_cast<int>(flags.GetInt("threads"));
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<int64_t> sizes;
  std::stringstream ss(flags.GetString("sizes"));
  for (std::string tok; std::getline(ss, tok, ',');) sizes.push_back(std::stoll(tok));
  const int reps = static_cast<int>(flags.GetInt("reps"));
  const bool json = flags.GetBool("json");

  Eigen::ThreadPool pool(threads, /*allow_spinning=*/false);
  Eigen::ThreadPoolDevice dev(&pool, threads);
  SessionOptions so;
  so.compute_threads = threads;
  double sum_ratio = 0;
  for (int64_t n : sizes) {
    Tensor a = Random(n, 1), b = Random(n, 2);
    Graph g;
    auto pa = ops::Placeholder(g, DType::kFloat32, {n, n}, "a");
    auto pb = ops::Placeholder(g, DType::kFloat32, {n, n}, "b");
    auto c = ops::MatMul(g, pa, pb);
    Session s(g, so);
    const double flops = 2.0 * n * n * n;
    double graph_s = BestSeconds([&] {
      auto r = s.Run({{"a", a}, {"b", b}}, std::vector<Output>{c});
      if (!r.ok()) {
        std::fprintf(stderr, "bench_gemm: %s\n", r.status().ToString().c_str());
        std::exit(1);
      }
    }, reps);
    Tensor out(DType::kFloat32, {n, n});
    Eigen::array<Eigen::IndexPair<int>, 1> dims = {Eigen::IndexPair<int>(1, 0)};
    double eigen_s = BestSeconds([&] {
      out.tensor<float, 2>().device(dev) = a.tensor<float, 2>().contract(b.tensor<float, 2>(), dims);
    }, reps);
    const double gg = flops / graph_s / 1e9, eg = flops / eigen_s / 1e9;
    sum_ratio += gg / eg;
    if (json) JsonLine().Add("size", n).Add("graph_gflops", gg).Add("eigen_gflops", eg).Print();
    else std::printf("%5lld: graph %.1f GFLOP/s, Eigen direct %.1f GFLOP/s\n", (long long)n, gg, eg);
  }
  if (json) JsonLine().Add("threads", threads).Add("mean_graph_over_eigen", sum_ratio / sizes.size()).Print();
  return 0;
}
