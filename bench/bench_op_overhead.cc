// Per-op dispatch overhead: a chain of 1000 tiny Add ops (shape [1]) per step.
// us_per_op is the marginal cost of one op: (step time of the 1000-op chain
// minus the step time of a 1-op graph) / 999, so the fixed per-step cost
// (feeds, fetches, messages) is reported apart as us_per_step_fixed.
#include <algorithm>
#include <chrono>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "shardflow/ops.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

// Median seconds per step over `reps` timed batches of `steps` steps.
double TimeSteps(Session& s, Output fetch, int steps, int reps) {
  std::vector<double> per;
  for (int i = 0; i < 3; ++i) (void)s.Run({}, Fetches{fetch});
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) {
      auto res = s.Run({}, Fetches{fetch});
      if (!res.ok()) {
        std::fprintf(stderr, "bench_op_overhead: %s\n", res.status().ToString().c_str());
        std::exit(1);
      }
    }
    per.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps);
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

Output Chain(Graph& g, int n) {
  auto one = ops::Const(g, std::vector<float>{1.0f}, {1});
  Output y = ops::Const(g, std::vector<float>{0.0f}, {1});
  for (int i = 0; i < n; ++i) y = ops::Add(g, y, one);
  return y;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("ops", 1000, "ops in the chain").Int("steps", 200, "steps per timed batch")
      .Int("reps", 5, "timed batches (median reported)").Bool("json", "print JSON lines");
  ParseOrExit(flags, argc, argv, "bench_op_overhead");
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  const int n = static_cast<int>(flags.GetInt("ops"));
  Graph chain_graph, one_graph;
  Output chain = Chain(chain_graph, n), one = Chain(one_graph, 1);
  if (!chain_graph.status().ok()) {
    std::fprintf(stderr, "bench_op_overhead: %s\n", chain_graph.status().ToString().c_str());
    return 1;
  }
  Session chain_session(chain_graph), one_session(one_graph);
  const int steps = static_cast<int>(flags.GetInt("steps")), reps = static_cast<int>(flags.GetInt("reps"));
  const double t_chain = TimeSteps(chain_session, chain, steps, reps);
  const double t_one = TimeSteps(one_session, one, steps * 5, reps);
  const double us_per_op = (t_chain - t_one) / (n - 1) * 1e6;
  if (flags.GetBool("json")) {
    JsonLine().Add("ops", n).Add("us_per_step", t_chain * 1e6).Add("us_per_step_fixed", t_one * 1e6)
        .Add("us_per_op", us_per_op).Print();
  } else {
    std::printf("%d-op chain: %.1f us/step; 1-op graph: %.1f us/step; %.3f us per op\n", n, t_chain * 1e6,
                t_one * 1e6, us_per_op);
  }
  return 0;
}
