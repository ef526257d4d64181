// Per-iteration cost of a WhileLoop with a tiny body (one Add on a float32
// scalar, plus the counter's Add and the loop's Less, Merge, Switch, ...).
// us_per_iteration is the marginal cost of one iteration: (step time of a
// loop of N iterations minus that of a 1-iteration loop) / (N - 1).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "shardflow/control_flow.h"
#include "shardflow/ops.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

// Median seconds per step over `reps` timed batches of `steps` steps.
double TimeSteps(Session& s, const FeedMap& feeds, Output fetch, int steps, int reps) {
  std::vector<double> per;
  for (int i = 0; i < 3; ++i) (void)s.Run(feeds, Fetches{fetch});
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      auto res = s.Run(feeds, Fetches{fetch});
      if (!res.ok()) {
        std::fprintf(stderr, "bench_while_loop: %s\n", res.status().ToString().c_str());
        std::exit(1);
      }
    }
    per.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps);
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("iterations", 10000, "loop iterations per step").Int("steps", 5, "steps per timed batch")
      .Int("reps", 5, "timed batches (median reported)")
      .Int("parallel_iterations", 10, "iterations in flight").Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_while_loop");
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  const int n = static_cast<int>(flags.GetInt("iterations"));
  Graph g;
  auto limit = ops::Placeholder(g, DType::kInt32, PartialShape({}), "n");
  WhileLoopOptions opt;
  opt.name = "loop";
  opt.parallel_iterations = flags.GetInt("parallel_iterations");
  auto loop = WhileLoop(
      g, [limit](Graph& g, const std::vector<Output>& v) { return ops::Less(g, v[0], limit); },
      [](Graph& g, const std::vector<Output>& v) {
        return std::vector<Output>{ops::Add(g, v[0], ops::Const(g, int32_t{1})),
                                   ops::Add(g, v[1], ops::Const(g, 1.0f))};
      },
      {ops::Const(g, int32_t{0}), ops::Const(g, 0.0f)}, opt);
  if (!loop.ok()) {
    std::fprintf(stderr, "bench_while_loop: %s\n", loop.status().ToString().c_str());
    return 1;
  }
  Session s(g);
  const int steps = static_cast<int>(flags.GetInt("steps")), reps = static_cast<int>(flags.GetInt("reps"));
  const double t_n = TimeSteps(s, {{"n", Tensor::Scalar<int32_t>(n)}}, (*loop)[1], steps, reps);
  const double t_1 = TimeSteps(s, {{"n", Tensor::Scalar<int32_t>(1)}}, (*loop)[1], steps * 20, reps);
  const double us = (t_n - t_1) / (n - 1) * 1e6;
  if (flags.GetBool("json")) {
    JsonLine().Add("iterations", n).Add("us_per_step", t_n * 1e6).Add("us_per_step_fixed", t_1 * 1e6)
        .Add("us_per_iteration", us).Add("iterations_per_sec", 1e6 / us).Print();
  } else {
    std::printf("%d-iteration loop: %.1f us/step; 1-iteration loop: %.1f us/step; %.3f us per iteration "
                "(%.0f iterations/s)\n", n, t_n * 1e6, t_1 * 1e6, us, 1e6 / us);
  }
  return 0;
}
