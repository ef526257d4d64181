// bench_backup_workers: synchronous training with backup workers, as in the
// TensorFlow paper (OSDI 2016, section 4.4 and figure 8): each step averages
// the first N = 4 gradients of 4 + b workers (b = 0, 1, 2 backup workers);
// the late gradients are counted and dropped by the variables' shards.
//
// Stragglers are simulated: a worker's compute is modelled as a wait of
// --base_ms (as if it ran on its own machine; this 2-core machine cannot run
// 6 real workers side by side) plus one real Session::Run of a small linear
// model's synchronous update. At every global step one worker, chosen at
// random (seeded) among the 4 + b, is 3x slower: it waits 3 * base_ms,
// i.e. 2x its step time more, before sending its gradient.
//
//   build/bin/bench_backup_workers --json
//   build/bin/bench_backup_workers --steps 60 --base_ms 10 --json
//
// One JSON line per b: {"backup_workers", "required", "workers",
// "steps_per_sec", "dropped_gradients", "normalized_gain"}; the summary last:
// {"bench": "backup_workers", "steps_per_sec_b0", "gain_b1", "gain_b2", ...,
// "paper_gain": 0.095} where gain_b = steps_per_sec(b) / steps_per_sec(0) - 1.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/replication.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

constexpr int kRequired = 4;

struct Result1 {
  double steps_per_sec = 0;
  int64_t applied = 0, dropped = 0;
  std::string error;
};

// The worker that is slow at global step t (seeded, so every b sees the same draws).
int SlowWorker(uint64_t seed, int64_t t, int workers) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(t));
  return static_cast<int>(rng() % static_cast<uint64_t>(workers));
}

Result1 Run(int backup, int steps, int base_ms, int dim, uint64_t seed) {
  Result1 out;
  const int workers = kRequired + backup;
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, dim}, "x");
  auto y = ops::Placeholder(g, DType::kFloat32, {-1, 1}, "y");
  auto w = ops::Variable(g, "w", ops::Zeros(g, DType::kFloat32, {dim, 1}));
  auto loss = ops::Mean(g, ops::Square(g, ops::Sub(g, ops::MatMul(g, x, w), y)));
  GradientDescentOptimizer sgd(0.01);
  SyncReplicas sync(sgd, {kRequired, workers, /*timeout_ms=*/60000});
  std::vector<SyncReplicaTrainOp> towers;
  for (int r = 0; r < workers; ++r) {
    auto t = sync.Minimize(g, loss, r);
    if (!t.ok()) return out.error = t.status().ToString(), out;
    towers.push_back(*t);
  }
  Output stats = ops::SyncReplicaStats(g, w);
  Operation init = ops::GlobalVariablesInitializer(g);
  if (!g.status().ok()) return out.error = g.status().ToString(), out;
  Session s(g);
  if (auto r = s.Run({}, Fetches{}, {init}); !r.ok()) return out.error = r.status().ToString(), out;

  std::vector<float> xs(static_cast<size_t>(32) * dim), ys(32);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>((i * 37) % 17) / 17.0f;
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<float>(i % 5);
  const Tensor xt = Tensor::FromVector(xs, {32, dim}), yt = Tensor::FromVector(ys, {32, 1});

  std::mutex mu;
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      for (;;) {
        auto tok = s.Run({}, Fetches{towers[r].global_step});
        if (!tok.ok()) {
          std::lock_guard<std::mutex> l(mu);
          error = tok.status().ToString();
          return;
        }
        const int64_t t = (*tok)[0].data<int64_t>()[0];
        if (t >= steps) return;
        // Simulated compute on this worker's own machine; the straggler of
        // step t takes 3x as long.
        const int ms = SlowWorker(seed, t, workers) == r ? 3 * base_ms : base_ms;
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        auto res = s.Run({{"x", xt}, {"y", yt}, {towers[r].step_tag.name(), Tensor::Scalar<int64_t>(t)}},
                         Fetches{}, {towers[r].train_op});
        if (!res.ok()) {
          std::lock_guard<std::mutex> l(mu);
          error = res.status().ToString();
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!error.empty()) return out.error = error, out;
  auto st = s.Run({}, Fetches{stats});
  if (!st.ok()) return out.error = st.status().ToString(), out;
  out.applied = (*st)[0].data<int64_t>()[0];
  out.dropped = (*st)[0].data<int64_t>()[2];
  out.steps_per_sec = out.applied / secs;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("steps", 40, "global steps per configuration")
      .Int("base_ms", 20, "simulated compute time of a normal worker step (ms)")
      .Int("max_backup", 2, "backup workers b = 0 .. max_backup")
      .Int("dim", 64, "features of the linear model")
      .Int("seed", 7, "seed of the straggler draws")
      .Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_backup_workers");
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  const int steps = static_cast<int>(flags.GetInt("steps"));
  const int base_ms = static_cast<int>(flags.GetInt("base_ms"));
  const int max_backup = static_cast<int>(flags.GetInt("max_backup"));
  const int dim = static_cast<int>(flags.GetInt("dim"));
  if (steps < 1 || base_ms < 0 || max_backup < 0 || dim < 1) {
    std::fprintf(stderr, "bench_backup_workers: need steps >= 1, base_ms >= 0, max_backup >= 0, dim >= 1\n");
    return 2;
  }
  const bool json = flags.GetBool("json");
  JsonLine summary;
  summary.Add("bench", "backup_workers").Add("required", kRequired).Add("steps", steps).Add("base_ms", base_ms);
  double base = 0;
  for (int b = 0; b <= max_backup; ++b) {
    Result1 r = Run(b, steps, base_ms, dim, static_cast<uint64_t>(flags.GetInt("seed")));
    if (!r.error.empty()) {
      std::fprintf(stderr, "bench_backup_workers: b=%d failed: %s\n", b, r.error.c_str());
      return 1;
    }
    if (b == 0) base = r.steps_per_sec;
    const double gain = base > 0 ? r.steps_per_sec / base - 1.0 : 0.0;
    if (json) {
      JsonLine()
          .Add("backup_workers", b)
          .Add("required", kRequired)
          .Add("workers", kRequired + b)
          .Add("steps_per_sec", r.steps_per_sec)
          .Add("applied_steps", r.applied)
          .Add("dropped_gradients", r.dropped)
          .Add("normalized_gain", gain)
          .Print();
    } else {
      std::printf("b=%d (%d of %d workers): %.2f steps/s, %lld gradients dropped, gain %+.1f%%\n", b,
                  kRequired, kRequired + b, r.steps_per_sec, static_cast<long long>(r.dropped), 100 * gain);
    }
    if (b == 0) summary.Add("steps_per_sec_b0", r.steps_per_sec);
    else summary.Add("gain_b" + std::to_string(b), gain);
  }
  summary.Add("paper_gain", 0.095);
  if (json) summary.Print();
  return 0;
}
