// Training steps per second of the Fashion-MNIST MLP (784-512-256-10, SGD
// with momentum) at a given batch size, on random inputs (the data does not
// change the work), at --precision fp32 or bf16 (shardflow/precision.h).
// Summary keys: steps_per_sec, precision, batch, steps; for the MLP
// also gemm_bound_steps_per_sec: the steps/s if a step cost only its eight
// GEMMs (3 forward, 3 weight gradients, 2 input gradients), each timed by
// this program on the step's shapes with the kernels' own GEMM (nn::Gemm on
// a compute pool of the same threads), i.e. the step's flops over that GEMM
// rate; gemm_gflops is the rate (fp32: the bound of an fp32 step).
// --trace FILE writes one step's timeline (--trace-step, counted with the
// warm-up steps). median_step_ms is the median of the timed steps' wall times.
// cpu_ms_per_step and context_switches_per_step are the process's CPU time
// and thread switches over the timed steps (bench/process_usage.h): a switch
// is a thread that slept and was woken, a cost that varies by machine far
// more than the flops do.
#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "bench/process_usage.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/trace.h"
#include "examples/common/models.h"
#include "kernels/compute_pool.h"
#include "kernels/cpu/nn_gemm.h"
#include "shardflow/precision.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

// The MLP step's GEMMs as the kernels run them: {m, n, k, ta, tb}.
struct GemmShape {
  int64_t m, n, k;
  bool ta, tb;
};
std::vector<GemmShape> MlpStepGemms(int64_t batch) {
  const int64_t d[] = {784, 512, 256, 10};
  std::vector<GemmShape> v;
  for (int l = 1; l <= 3; ++l) {
    v.push_back({batch, d[l], d[l - 1], false, false});  // forward x w
    v.push_back({d[l - 1], d[l], batch, true, false});   // dw = x^T dz
    if (l > 1) v.push_back({batch, d[l - 1], d[l], false, true});  // dx = dz w^T (not for the input)
  }
  return v;
}

// Seconds of one pass over shapes with nn::Gemm on a pool of `threads`
// (the median of many passes, warm), and the pass's flops.
double GemmPassSeconds(const std::vector<GemmShape>& shapes, int threads, double* flops) {
  ComputePool pool(threads);
  std::vector<std::vector<float>> a, b, c;
  *flops = 0;
  for (const auto& s : shapes) {
    a.emplace_back(s.m * s.k, 0.5f);
    b.emplace_back(s.k * s.n, 0.25f);
    c.emplace_back(s.m * s.n);
    *flops += 2.0 * s.m * s.n * s.k;
  }
  std::vector<double> passes;
  for (int rep = 0; rep < 220; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < shapes.size(); ++i) {
      const auto& s = shapes[i];
      nn::Gemm<float>(&pool, a[i].data(), b[i].data(), c[i].data(), s.m, s.n, s.k, s.ta, s.tb);
    }
    if (rep >= 20) passes.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(passes.begin(), passes.begin() + passes.size() / 2, passes.end());
  return passes[passes.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("batch", 128, "batch size").Int("steps", 300, "timed steps").Int("warmup", 20, "untimed steps")
      .String("model", "mlp", "mlp or cnn")
      .String("precision", "fp32", "fp32 or bf16 (bf16 needs an AVX512_BF16 CPU)").Int("threads", 0, "compute threads (0 = one per core)")
      .Bool("json", "print JSON lines");
  DeclareTraceFlags(flags);
  ParseOrExit(flags, argc, argv, "bench_mlp_step");
  const TraceFlag trace(flags);
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  const int64_t batch = flags.GetInt("batch"), steps = flags.GetInt("steps");
  Graph g;
  ClassifierModel m;
  ModelOptions mo;
  mo.model = flags.GetString("model");
  Status bs = BuildClassifier(g, mo, &m);
  if (!bs.ok()) {
    std::fprintf(stderr, "bench_mlp_step: %s\n", bs.ToString().c_str());
    return 1;
  }
  const std::string precision = flags.GetString("precision");
  auto set = SetComputePrecision(g, precision);
  if (!set.ok()) {
    std::fprintf(stderr, "bench_mlp_step: %s\n", set.status().ToString().c_str());
    return 1;
  }
  SessionOptions so;
  so.compute_threads = static_cast<int>(flags.GetInt("threads"));
  Session s(g, so);
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "bench_mlp_step: %s\n", st.ToString().c_str());
    std::exit(1);
  };
  auto init = s.Run({}, Fetches{}, {m.init});
  if (!init.ok()) fail(init.status());
  Tensor x(DType::kFloat32, {batch, 784}), y(DType::kInt32, {batch});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0, 1);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = u(rng);
  for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(rng() % 10);
  Tensor lr = Tensor::Scalar<float>(static_cast<float>(mo.learning_rate));
  int64_t step_index = 0;  // counts warm-up steps too, as --trace-step does
  auto step = [&] {
    auto r = s.Run({{"x", x}, {"labels", y}, {"lr", lr}}, Fetches{m.loss}, {m.train},
                   trace.For(step_index++));
    if (!r.ok()) fail(r.status());
  };
  for (int64_t i = 0; i < flags.GetInt("warmup"); ++i) step();
  const bench::ProcessUsage used0 = bench::ReadProcessUsage();
  // Each step timed too: on a shared machine the median step shows the
  // step's own cost, which a few preempted steps move in the mean.
  std::vector<double> step_ms;
  step_ms.reserve(steps);
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    const auto s0 = std::chrono::steady_clock::now();
    step();
    step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double median_step_ms = 0;
  if (!step_ms.empty()) {
    std::nth_element(step_ms.begin(), step_ms.begin() + step_ms.size() / 2, step_ms.end());
    median_step_ms = step_ms[step_ms.size() / 2];
  }
  const bench::ProcessUsage used1 = bench::ReadProcessUsage();
  const double per_step = 1.0 / static_cast<double>(std::max<int64_t>(steps, 1));
  const double cpu_ms_per_step = 1000.0 * (used1.cpu_seconds - used0.cpu_seconds) * per_step;
  const double switches_per_step = (used1.context_switches - used0.context_switches) * per_step;
  const double sps = steps / secs;
  // The GEMM bound, measured after the steps (the session's threads idle).
  const bool mlp = mo.model == "mlp";
  double gemm_flops = 0, gemm_secs = 0;
  if (mlp) gemm_secs = GemmPassSeconds(MlpStepGemms(batch), so.compute_threads, &gemm_flops);
  if (flags.GetBool("json")) {
    JsonLine line;
    line.Add("system", "shardflow").Add("model", mo.model).Add("precision", precision).Add("batch", batch)
        .Add("steps", steps).Add("steps_per_sec", sps).Add("cpu_ms_per_step", cpu_ms_per_step)
        .Add("context_switches_per_step", switches_per_step).Add("median_step_ms", median_step_ms);
    if (mlp) line.Add("gemm_bound_steps_per_sec", 1.0 / gemm_secs).Add("gemm_gflops", gemm_flops / gemm_secs / 1e9)
        .Add("vs_gemm_bound", sps * gemm_secs);
    line.Print();
  } else {
    std::printf("%s batch %lld: %.1f training steps/s (%.2f ms/step)\n", mo.model.c_str(), (long long)batch, sps,
                1000.0 / sps);
    if (mlp)
      std::printf("GEMM bound: %.1f steps/s (the step's GEMMs alone at %.1f GFLOP/s); %.2f of it\n",
                  1.0 / gemm_secs, gemm_flops / gemm_secs / 1e9, sps * gemm_secs);
  }
  return 0;
}
