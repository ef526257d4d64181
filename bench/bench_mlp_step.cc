// Training steps per second of the Fashion-MNIST MLP (784-512-256-10, SGD
// with momentum) at a given batch size, on random inputs (the data does not
// change the work), at --precision fp32 or bf16 (shardflow/precision.h).
// Summary keys: steps_per_sec, precision, batch, steps.
#include <algorithm>
#include <chrono>
#include <random>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/models.h"
#include "shardflow/precision.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("batch", 128, "batch size").Int("steps", 300, "timed steps").Int("warmup", 20, "untimed steps")
      .String("model", "mlp", "mlp or cnn")
      .String("precision", "fp32", "fp32 or bf16 (bf16 needs an AVX512_BF16 CPU)").Int("threads", 0, "compute threads (0 = one per core)")
      .Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_mlp_step");
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
  auto init = s.Run({}, std::vector<Output>{}, {m.init});
  if (!init.ok()) fail(init.status());
  Tensor x(DType::kFloat32, {batch, 784}), y(DType::kInt32, {batch});
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0, 1);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] = u(rng);
  for (int64_t i = 0; i < batch; ++i) y.data<int32_t>()[i] = static_cast<int32_t>(rng() % 10);
  Tensor lr = Tensor::Scalar<float>(static_cast<float>(mo.learning_rate));
  auto step = [&] {
    auto r = s.Run({{"x", x}, {"labels", y}, {"lr", lr}}, std::vector<Output>{m.loss}, {m.train});
    if (!r.ok()) fail(r.status());
  };
  for (int64_t i = 0; i < flags.GetInt("warmup"); ++i) step();
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < steps; ++i) step();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double sps = steps / secs;
  if (flags.GetBool("json"))
    JsonLine().Add("system", "shardflow").Add("model", mo.model).Add("precision", precision).Add("batch", batch).Add("steps", steps)
        .Add("steps_per_sec", sps).Print();
  else
    std::printf("%s batch %lld: %.1f training steps/s (%.2f ms/step)\n", mo.model.c_str(), (long long)batch, sps,
                1000.0 / sps);
  return 0;
}
