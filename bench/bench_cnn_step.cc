// Training steps per second of the Fashion-MNIST CNN (conv5x5x32-pool-
// conv5x5x64-pool-fc1024-fc10, SGD with momentum), batch 64 by default, on
// random inputs (the data does not change the work), at fp32 or bf16
// (shardflow/precision.h). JSON lines with --json: one per timed round, then
// the summary (the last line) with steps_per_sec (the median round), min and
// max, precision, batch, steps, and cpu_ms_per_step (the process's user +
// system CPU time per timed step: on a machine shared with other work it
// moves less than wall time does).
#include <algorithm>
#include <chrono>
#include <random>

#include "bench/process_usage.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/models.h"
#include "shardflow/precision.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("batch", 64, "batch size").Int("steps", 40, "timed steps per round").Int("rounds", 3, "timed rounds")
      .Int("warmup", 5, "untimed steps").Int("threads", 0, "compute threads (0 = one per core)")
      .String("precision", "fp32", "fp32 or bf16 (bf16 needs an AVX512_BF16 CPU)").Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_cnn_step");
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "bench_cnn_step: %s\n", st.ToString().c_str());
    std::exit(1);
  };
  const int64_t batch = flags.GetInt("batch"), steps = flags.GetInt("steps"), rounds = flags.GetInt("rounds");
  if (batch < 1 || steps < 1 || rounds < 1) fail(InvalidArgument("--batch, --steps and --rounds must be >= 1"));
  const std::string precision = flags.GetString("precision");
  Graph g;
  ClassifierModel m;
  ModelOptions mo;
  mo.model = "cnn";
  Status bs = BuildClassifier(g, mo, &m);
  if (!bs.ok()) fail(bs);
  auto set = SetComputePrecision(g, precision);
  if (!set.ok()) fail(set.status());
  SessionOptions so;
  so.compute_threads = static_cast<int>(flags.GetInt("threads"));
  Session s(g, so);
  auto init = s.Run({}, Fetches{}, {m.init});
  if (!init.ok()) fail(init.status());
  Tensor x(DType::kFloat32, {batch, 784}), y(DType::kInt32, {batch});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0, 1);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = u(rng);
  for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(rng() % 10);
  Tensor lr = Tensor::Scalar<float>(0.01f);
  auto step = [&] {
    auto r = s.Run({{"x", x}, {"labels", y}, {"lr", lr}}, Fetches{m.loss}, {m.train});
    if (!r.ok()) fail(r.status());
  };
  for (int64_t i = 0; i < flags.GetInt("warmup"); ++i) step();
  const bench::ProcessUsage used0 = bench::ReadProcessUsage();
  std::vector<double> per_round;
  for (int64_t r = 0; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < steps; ++i) step();
    const double sps = steps / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    per_round.push_back(sps);
    if (flags.GetBool("json"))
      JsonLine().Add("system", "shardflow").Add("round", r).Add("steps_per_sec", sps).Print();
  }
  const bench::ProcessUsage used1 = bench::ReadProcessUsage();
  const double cpu_ms_per_step = 1000.0 * (used1.cpu_seconds - used0.cpu_seconds) / static_cast<double>(steps * rounds);
  const double switches_per_step = (used1.context_switches - used0.context_switches) / static_cast<double>(steps * rounds);
  std::vector<double> sorted = per_round;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  if (flags.GetBool("json"))
    JsonLine().Add("system", "shardflow").Add("model", "cnn").Add("precision", precision).Add("batch", batch)
        .Add("steps", steps * rounds).Add("products_in_precision", static_cast<int64_t>(*set))
        .Add("cpu_ms_per_step", cpu_ms_per_step).Add("context_switches_per_step", switches_per_step).Add("min_steps_per_sec", sorted.front()).Add("max_steps_per_sec", sorted.back())
        .Add("steps_per_sec", median).Print();
  else
    std::printf("cnn %s batch %lld: %.1f training steps/s (%.2f ms/step; rounds %.1f-%.1f)\n", precision.c_str(),
                (long long)batch, median, 1000.0 / median, sorted.front(), sorted.back());
  return 0;
}
