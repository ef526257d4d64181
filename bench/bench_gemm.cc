// float32 MatMul throughput through a graph (Session, MatMul op) against Eigen
// called directly (a tensor contraction on a thread-pool device with the same
// number of threads). One JSON line per product: size (square ones) or m, n,
// k, transpose_a, transpose_b (--shapes), graph_gflops, eigen_gflops; with
// --precision bf16 also fp32_graph_gflops and bf16_over_fp32, the same graph
// run in fp32 alternately with the bf16 one. The last line: threads,
// precision, mean_graph_over_eigen (and mean_bf16_over_fp32).
//
// --shapes takes products as MxNxK, with :ta and/or :tb for a transposed A or
// B, e.g. "128x512x784,784x512x128:ta" (the MLP's first layer, forward and
// weight gradient).
#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/Tensor>

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "shardflow/ops.h"
#include "shardflow/precision.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

Tensor Random(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t(DType::kFloat32, {rows, cols});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < rows * cols; ++i) t.data<float>()[i] = u(rng);
  return t;
}

// One product op(A) op(B), m x k by k x n.
struct Shape3 {
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  bool square = false;
};

// Parses "MxNxK[:ta][:tb]"; false when it is not that.
bool ParseShape(const std::string& tok, Shape3* out) {
  std::string dims = tok, flags;
  if (auto colon = tok.find(':'); colon != std::string::npos) {
    dims = tok.substr(0, colon);
    flags = tok.substr(colon);
  }
  long long m, n, k;
  char x1, x2;
  std::stringstream ss(dims);
  if (!(ss >> m >> x1 >> n >> x2 >> k) || x1 != 'x' || x2 != 'x' || !ss.eof() || m <= 0 || n <= 0 || k <= 0)
    return false;
  out->m = m, out->n = n, out->k = k;
  for (std::stringstream fs(flags); fs.good();) {
    std::string f;
    std::getline(fs, f, ':');
    if (f == "ta") out->ta = true;
    else if (f == "tb") out->tb = true;
    else if (!f.empty()) return false;
  }
  return true;
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
      .String("shapes", "", "comma-separated products MxNxK[:ta][:tb] (instead of --sizes)")
      .String("precision", "fp32", "fp32 or bf16 (bf16 also times the fp32 graph, alternately)")
      .Int("threads", 0, "threads for both (0 = one per core)")
      .Int("reps", 5, "timed repetitions (best reported)").Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_gemm");
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  int threads = static_cast<int>(flags.GetInt("threads"));
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  const std::string precision = flags.GetString("precision");
  if (Status ok = CheckComputePrecision(precision); !ok.ok()) {
    std::fprintf(stderr, "bench_gemm: %s\n", ok.ToString().c_str());
    return 1;
  }
  const bool bf16 = precision == "bf16";
  std::vector<Shape3> shapes;
  if (!flags.GetString("shapes").empty()) {
    std::stringstream ss(flags.GetString("shapes"));
    for (std::string tok; std::getline(ss, tok, ',');) {
      Shape3 sh;
      if (!ParseShape(tok, &sh)) {
        std::fprintf(stderr, "bench_gemm: --shapes: '%s' is not MxNxK[:ta][:tb] with positive sizes\n", tok.c_str());
        return 1;
      }
      shapes.push_back(sh);
    }
  } else {
    std::stringstream ss(flags.GetString("sizes"));
    for (std::string tok; std::getline(ss, tok, ',');) {
      Shape3 sh;
      size_t used = 0;
      try {
        sh.m = sh.n = sh.k = std::stoll(tok, &used);
      } catch (const std::exception&) {
        sh.m = 0;
      }
      if (sh.m <= 0 || used != tok.size()) {
        std::fprintf(stderr, "bench_gemm: --sizes: '%s' is not a positive size\n", tok.c_str());
        return 1;
      }
      sh.square = true;
      shapes.push_back(sh);
    }
  }
  const int reps = static_cast<int>(flags.GetInt("reps"));
  const bool json = flags.GetBool("json");

  Eigen::ThreadPool pool(threads, /*allow_spinning=*/false);
  Eigen::ThreadPoolDevice dev(&pool, threads);
  SessionOptions so;
  so.compute_threads = threads;
  double sum_ratio = 0, sum_bf16 = 0;
  for (const Shape3& sh : shapes) {
    // A is stored [k, m] when transposed, B [n, k].
    Tensor a = sh.ta ? Random(sh.k, sh.m, 1) : Random(sh.m, sh.k, 1);
    Tensor b = sh.tb ? Random(sh.n, sh.k, 2) : Random(sh.k, sh.n, 2);
    auto make = [&](const std::string& p, Output* c) {
      auto g = std::make_unique<Graph>();
      auto pa = ops::Placeholder(*g, DType::kFloat32, a.shape(), "a");
      auto pb = ops::Placeholder(*g, DType::kFloat32, b.shape(), "b");
      *c = ops::MatMul(*g, pa, pb, {sh.ta, sh.tb});
      if (auto set = SetComputePrecision(*g, p); !set.ok()) {
        std::fprintf(stderr, "bench_gemm: %s\n", set.status().ToString().c_str());
        std::exit(1);
      }
      return g;
    };
    // The asked precision's graph, and with bf16 the same graph in fp32.
    Output cp, c32;
    auto gp = make(precision, &cp);
    std::unique_ptr<Graph> g32 = bf16 ? make("fp32", &c32) : nullptr;
    Session sp(*gp, so);
    std::unique_ptr<Session> s32 = bf16 ? std::make_unique<Session>(*g32, so) : nullptr;
    auto run = [&](Session& s, const Output& c) {
      auto r = s.Run({{"a", a}, {"b", b}}, Fetches{c});
      if (!r.ok()) {
        std::fprintf(stderr, "bench_gemm: %s\n", r.status().ToString().c_str());
        std::exit(1);
      }
    };
    const double flops = 2.0 * sh.m * sh.n * sh.k;
    // bf16 and fp32 alternate, best of each: the machine's speed moves by the minute.
    double graph_s = 1e30, fp32_s = 1e30;
    for (int r = 0; r < (bf16 ? reps : 1); ++r) {
      graph_s = std::min(graph_s, BestSeconds([&] { run(sp, cp); }, bf16 ? 1 : reps));
      if (bf16) fp32_s = std::min(fp32_s, BestSeconds([&] { run(*s32, c32); }, 1));
    }
    Tensor out(DType::kFloat32, {sh.m, sh.n});
    Eigen::array<Eigen::IndexPair<int>, 1> dims = {Eigen::IndexPair<int>(sh.ta ? 0 : 1, sh.tb ? 1 : 0)};
    double eigen_s = BestSeconds([&] {
      out.tensor<float, 2>().device(dev) = a.tensor<float, 2>().contract(b.tensor<float, 2>(), dims);
    }, reps);
    const double gg = flops / graph_s / 1e9, eg = flops / eigen_s / 1e9, fg = flops / fp32_s / 1e9;
    sum_ratio += gg / eg;
    if (bf16) sum_bf16 += gg / fg;
    if (json) {
      JsonLine l;
      if (sh.square) l.Add("size", sh.m);
      else l.Add("m", sh.m).Add("n", sh.n).Add("k", sh.k).Add("transpose_a", sh.ta).Add("transpose_b", sh.tb);
      l.Add("graph_gflops", gg).Add("eigen_gflops", eg);
      if (bf16) l.Add("fp32_graph_gflops", fg).Add("bf16_over_fp32", gg / fg);
      l.Print();
    } else {
      std::printf("%lldx%lldx%lld%s%s: graph %.1f GFLOP/s, Eigen direct %.1f GFLOP/s", (long long)sh.m,
                  (long long)sh.n, (long long)sh.k, sh.ta ? ":ta" : "", sh.tb ? ":tb" : "", gg, eg);
      if (bf16) std::printf(", fp32 graph %.1f GFLOP/s (bf16 / fp32 %.2f)", fg, gg / fg);
      std::printf("\n");
    }
  }
  if (json) {
    JsonLine l;
    l.Add("threads", threads).Add("precision", precision).Add("mean_graph_over_eigen", sum_ratio / shapes.size());
    if (bf16) l.Add("mean_bf16_over_fp32", sum_bf16 / shapes.size());
    l.Print();
  }
  return 0;
}
