// Trains an LSTM whose time steps run in a WhileLoop (a real loop in the
// graph, not unrolled) on the adding problem, and trains the same model
// unrolled beside it to show the two compute the same thing.
//
//   build/bin/rnn_sequence                          # 1500 steps, T in 25..50, float32
//   build/bin/rnn_sequence --dtype float64 --json   # float64, JSON lines
//
// The adding problem (generated from --seed, no files): each sequence has T
// steps of (value in [0,1), marker in {0,1}); exactly two steps are marked,
// and the target is the sum of the two marked values. A model that ignores
// the markers can do no better than predicting 1 (mean squared error 1/6
// ~ 0.167); solving it needs the LSTM to remember values across the sequence.
//
// Sequences of different lengths share one graph, even within one batch:
// each sequence draws its length T in [--min_length, --length]; a batch is
// fed as "inputs" [--length, batch, 2] (steps >= T are zero padding) and
// "seq_lens" [batch] (int32). The loop runs max(seq_lens) iterations (a
// value known only at run time), reading step t with Gather(inputs, t); a
// sequence whose T <= t keeps its state (Select), so each final state is the
// one after its own T steps. The LSTM weights are variables read outside the
// loop; Adam's Minimize differentiates through the loop (the backward loop
// runs the iterations in reverse).
//
// The unrolled twin is a C++ for-loop over t < --length with its own copy of
// the weights (same seed, so the same initial values), the same per-step
// Select, fed the same batches. Both train with Adam for the same steps.
// On this runtime the two curves agree bit for bit, in float32 too; that is
// a real check: giving the twin a learning rate 0.1% higher makes the curves
// differ by ~1e-2 within 300 steps.
//
// Loss: mean squared error of a linear readout of the final hidden state.
// With --json: one line per logged step {"step", "longest", "loss",
// "unrolled_loss", "abs_diff"}, then a summary line {"first_loss",
// "final_loss", "unrolled_final_loss", "steps", "max_abs_diff", ...}:
// first/final losses are on a fixed held-out set of batches (before and after
// training), max_abs_diff is the largest |loss - unrolled_loss| over every
// training step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/trace.h"
#include "shardflow/control_flow.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "rnn_sequence: %s\n", s.ToString().c_str());
  return 1;
}

// One batch of the adding problem: values and markers of each sequence's
// steps (padded with zeros to max_length), lengths and targets.
struct Batch {
  std::vector<int32_t> lengths;  // [batch]
  std::vector<double> inputs;    // [max_length, batch, 2]
  std::vector<double> targets;   // [batch, 1]
};

// Draws a batch of sequences with lengths uniform in [min_length, max_length].
Batch MakeBatch(std::mt19937_64& rng, int64_t min_length, int64_t max_length, int64_t batch) {
  Batch b;
  b.inputs.assign(max_length * batch * 2, 0.0);
  b.targets.assign(batch, 0.0);
  std::uniform_real_distribution<double> value(0.0, 1.0);
  std::uniform_int_distribution<int64_t> len(min_length, max_length);
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t length = len(rng);
    b.lengths.push_back(static_cast<int32_t>(length));
    std::uniform_int_distribution<int64_t> pos(0, length - 1);
    for (int64_t t = 0; t < length; ++t) b.inputs[(t * batch + i) * 2] = value(rng);
    const int64_t first = pos(rng);
    int64_t second = pos(rng);
    while (second == first) second = pos(rng);
    for (int64_t t : {first, second}) {
      b.inputs[(t * batch + i) * 2 + 1] = 1.0;
      b.targets[i] += b.inputs[(t * batch + i) * 2];
    }
  }
  return b;
}

// A tensor of dtype (float32 or float64) holding v.
Tensor ToTensor(const std::vector<double>& v, Shape shape, DType dtype) {
  if (dtype == DType::kFloat64) return Tensor::FromVector(v, std::move(shape));
  return Tensor::FromVector(std::vector<float>(v.begin(), v.end()), std::move(shape));
}

// The LSTM's weights (variable reads) and its readout.
struct Weights {
  Output w;    // [2 + hidden, 4 * hidden]: gates i, f, g, o from [x, h]
  Output b;    // [4 * hidden]
  Output wy;   // [hidden, 1]
  Output by;   // [1]
};

// Creates the variables under `prefix`; the same seed gives the same values.
Weights MakeWeights(Graph& g, const std::string& prefix, int64_t hidden, int64_t seed, DType dtype) {
  Weights w;
  w.w = ops::Variable(g, prefix + "/w",
                      ops::TruncatedNormal(g, {2 + hidden, 4 * hidden}, 1.0 / std::sqrt(2.0 + hidden),
                                           seed, dtype));
  w.b = ops::Variable(g, prefix + "/b", ops::Zeros(g, dtype, {4 * hidden}));
  w.wy = ops::Variable(g, prefix + "/wy",
                       ops::TruncatedNormal(g, {hidden, 1}, 1.0 / std::sqrt(1.0 * hidden), seed + 1, dtype));
  w.by = ops::Variable(g, prefix + "/by", ops::Zeros(g, dtype, {1}));
  return w;
}

// One LSTM step: returns the new (h, c). The forget gate starts biased
// open (+1) so early gradients reach far back.
std::pair<Output, Output> LstmCell(Graph& g, const Weights& w, Output x, Output h, Output c) {
  auto z = ops::BiasAdd(g, ops::MatMul(g, ops::Concat(g, {x, h}, 1), w.w), w.b);
  auto gates = ops::Split(g, z, 4, 1);
  if (gates.size() != 4) return {Output(), Output()};
  auto i = ops::Sigmoid(g, gates[0]);
  auto f = ops::Sigmoid(g, ops::Add(g, gates[1], ops::ScalarLike(g, gates[1], 1.0)));
  auto cand = ops::Tanh(g, gates[2]);
  auto o = ops::Sigmoid(g, gates[3]);
  auto c_new = ops::Add(g, ops::Mul(g, f, c), ops::Mul(g, i, cand));
  auto h_new = ops::Mul(g, o, ops::Tanh(g, c_new));
  return {h_new, c_new};
}

// The mean squared error of the readout of the final hidden state h.
Output Loss(Graph& g, const Weights& w, Output h, Output targets) {
  auto y = ops::BiasAdd(g, ops::MatMul(g, h, w.wy), w.by);
  return ops::Mean(g, ops::Square(g, ops::Sub(g, y, targets)));
}

struct Model {
  Output loss;
  Operation train;
};

// One time step t (int32 scalar) of every sequence: the new (h, c), where
// sequences shorter than t + 1 (seq_lens [batch, 1]) keep their state.
std::pair<Output, Output> MaskedStep(Graph& g, const Weights& w, Output inputs, Output seq_lens, Output t,
                                     Output h, Output c) {
  auto hc = LstmCell(g, w, ops::Gather(g, inputs, t), h, c);  // step t: [batch, 2]
  auto active = ops::Less(g, t, seq_lens);                       // [batch, 1]
  return {ops::Select(g, active, hc.first, h), ops::Select(g, active, hc.second, c)};
}

// The LSTM as a WhileLoop over t < max(seq_lens).
Result<Model> BuildLoopModel(Graph& g, const Weights& w, Output inputs, Output seq_lens, Output targets,
                             int64_t batch, int64_t hidden, int64_t max_length, DType dtype, double lr) {
  using Vars = std::vector<Output>;
  WhileLoopOptions o;
  o.name = "lstm";
  o.maximum_iterations = max_length;
  auto steps = ops::Max(g, seq_lens);
  auto loop = WhileLoop(
      g, [steps](Graph& g, const Vars& v) { return ops::Less(g, v[0], steps); },
      [&](Graph& g, const Vars& v) {
        auto hc = MaskedStep(g, w, inputs, seq_lens, v[0], v[1], v[2]);
        return Vars{ops::Add(g, v[0], ops::Const(g, int32_t{1})), hc.first, hc.second};
      },
      {ops::Const(g, int32_t{0}), ops::Zeros(g, dtype, {batch, hidden}), ops::Zeros(g, dtype, {batch, hidden})},
      o);
  if (!loop.ok()) return loop.status();
  Model m;
  m.loss = Loss(g, w, (*loop)[1], targets);
  SF_RETURN_IF_ERROR(g.status());
  AdamOptimizer opt(lr);
  SF_ASSIGN_OR_RETURN(m.train, opt.Minimize(g, m.loss, {w.w, w.b, w.wy, w.by}));
  return m;
}

// The same LSTM unrolled over all max_length steps.
Result<Model> BuildUnrolledModel(Graph& g, const Weights& w, Output inputs, Output seq_lens, Output targets,
                                 int64_t batch, int64_t hidden, int64_t max_length, DType dtype, double lr) {
  Output h = ops::Zeros(g, dtype, {batch, hidden}), c = ops::Zeros(g, dtype, {batch, hidden});
  for (int64_t t = 0; t < max_length; ++t) {
    auto hc = MaskedStep(g, w, inputs, seq_lens, ops::Const(g, static_cast<int32_t>(t)), h, c);
    h = hc.first;
    c = hc.second;
  }
  Model m;
  m.loss = Loss(g, w, h, targets);
  SF_RETURN_IF_ERROR(g.status());
  AdamOptimizer opt(lr);
  SF_ASSIGN_OR_RETURN(m.train, opt.Minimize(g, m.loss, {w.w, w.b, w.wy, w.by}));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("steps", 1500, "training steps")
      .Int("batch", 32, "sequences per batch")
      .Int("hidden", 24, "LSTM hidden size")
      .Int("length", 50, "maximum sequence length T")
      .Int("min_length", 0, "minimum sequence length (0: half of --length, at least 2)")
      .Double("lr", 0.01, "Adam learning rate")
      .Int("seed", 1, "seed for the weights and the data")
      .String("dtype", "float32", "float32 or float64")
      .Int("log_every", 0, "log every N steps (0: about 20 lines)")
      .Int("eval_batches", 4, "held-out batches for the first and final loss")
      .Bool("json", "print JSON lines on stdout");
  DeclareTraceFlags(flags);
  ParseOrExit(flags, argc, argv, "rnn_sequence");
  const TraceFlag trace(flags);  // traces a step of the while-loop model
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  const bool json = flags.GetBool("json");
  const int64_t steps = flags.GetInt("steps"), batch = flags.GetInt("batch"), hidden = flags.GetInt("hidden");
  const int64_t max_length = flags.GetInt("length"), seed = flags.GetInt("seed");
  const int64_t min_length =
      flags.GetInt("min_length") > 0 ? flags.GetInt("min_length") : std::max<int64_t>(2, max_length / 2);
  const int64_t eval_batches = std::max<int64_t>(1, flags.GetInt("eval_batches"));
  const int64_t log_every =
      flags.GetInt("log_every") > 0 ? flags.GetInt("log_every") : std::max<int64_t>(1, steps / 20);
  if (steps < 1 || batch < 1 || hidden < 1)
    return Fail(InvalidArgument("--steps, --batch and --hidden must be positive"));
  if (max_length < 2 || min_length < 2 || min_length > max_length)
    return Fail(InvalidArgument("need 2 <= --min_length <= --length (two marked steps), got " +
                                std::to_string(min_length) + " and " + std::to_string(max_length)));
  const std::string dtype_name = flags.GetString("dtype");
  if (dtype_name != "float32" && dtype_name != "float64")
    return Fail(InvalidArgument("--dtype must be float32 or float64, got '" + dtype_name + "'"));
  const DType dtype = dtype_name == "float64" ? DType::kFloat64 : DType::kFloat32;
  const double lr = flags.GetDouble("lr");

  Graph g;
  auto inputs = ops::Placeholder(g, dtype, {max_length, batch, 2}, "inputs");
  auto targets = ops::Placeholder(g, dtype, {batch, 1}, "targets");
  auto seq_len_feed = ops::Placeholder(g, DType::kInt32, {batch}, "seq_lens");
  auto seq_lens = ops::Reshape(g, seq_len_feed, std::vector<int64_t>{batch, 1});
  Weights lw = MakeWeights(g, "loop", hidden, seed, dtype);
  Weights uw = MakeWeights(g, "unrolled", hidden, seed, dtype);
  auto loop_model = BuildLoopModel(g, lw, inputs, seq_lens, targets, batch, hidden, max_length, dtype, lr);
  if (!loop_model.ok()) return Fail(loop_model.status());
  auto unrolled_model = BuildUnrolledModel(g, uw, inputs, seq_lens, targets, batch, hidden, max_length, dtype, lr);
  if (!unrolled_model.ok()) return Fail(unrolled_model.status());
  const Operation init = ops::GlobalVariablesInitializer(g);
  if (!g.status().ok()) return Fail(g.status());

  Session session(g);
  auto inited = session.Run({}, {}, {init});
  if (!inited.ok()) return Fail(inited.status());
  auto w0 = session.Run({}, {lw.w, uw.w, lw.wy, uw.wy});
  if (!w0.ok()) return Fail(w0.status());
  // The comparison only means something if both start from the same weights.
  if ((*w0)[0].ToVector<double>() != (*w0)[1].ToVector<double>() ||
      (*w0)[2].ToVector<double>() != (*w0)[3].ToVector<double>())
    return Fail(Internal("the loop and unrolled models start from different weights"));

  auto feeds = [&](const Batch& b) {
    return FeedMap{{"inputs", ToTensor(b.inputs, {max_length, batch, 2}, dtype)},
                   {"targets", ToTensor(b.targets, {batch, 1}, dtype)},
                   {"seq_lens", Tensor::FromVector(b.lengths, {batch})}};
  };
  // The held-out set comes from its own seed.
  std::vector<Batch> eval;
  std::mt19937_64 eval_rng(seed + 1000003);
  for (int64_t i = 0; i < eval_batches; ++i) eval.push_back(MakeBatch(eval_rng, min_length, max_length, batch));
  auto evaluate = [&](double* loop_loss, double* unrolled_loss) -> Status {
    *loop_loss = *unrolled_loss = 0;
    for (const Batch& b : eval) {
      auto r = session.Run(feeds(b), {loop_model->loss, unrolled_model->loss});
      if (!r.ok()) return r.status();
      *loop_loss += (*r)[0].scalar_as<double>() / eval.size();
      *unrolled_loss += (*r)[1].scalar_as<double>() / eval.size();
    }
    return Status::OK();
  };
  double first_loss = 0, first_unrolled = 0;
  Status es = evaluate(&first_loss, &first_unrolled);
  if (!es.ok()) return Fail(es);
  if (!json)
    std::printf("adding problem, lengths %lld..%lld, batch %lld, hidden %lld, %s, Adam lr %g, %lld steps\n"
                "held-out loss before training: loop %.6f, unrolled %.6f (predicting 1 always: ~0.167)\n"
                "%6s %6s %12s %12s %10s\n",
                (long long)min_length, (long long)max_length, (long long)batch, (long long)hidden,
                dtype_name.c_str(), lr, (long long)steps, first_loss, first_unrolled, "step", "max T", "loop loss",
                "unrolled", "|diff|");

  std::mt19937_64 rng(seed);
  double max_abs_diff = 0, max_rel_diff = 0, loop_secs = 0, unrolled_secs = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    const Batch b = MakeBatch(rng, min_length, max_length, batch);
    const int64_t longest = *std::max_element(b.lengths.begin(), b.lengths.end());
    const FeedMap f = feeds(b);
    auto t0 = std::chrono::steady_clock::now();
    auto rl = session.Run(f, {loop_model->loss}, {loop_model->train}, trace.For(step - 1));
    auto t1 = std::chrono::steady_clock::now();
    if (!rl.ok()) return Fail(rl.status());
    auto ru = session.Run(f, {unrolled_model->loss}, {unrolled_model->train});
    auto t2 = std::chrono::steady_clock::now();
    if (!ru.ok()) return Fail(ru.status());
    loop_secs += std::chrono::duration<double>(t1 - t0).count();
    unrolled_secs += std::chrono::duration<double>(t2 - t1).count();
    const double loss = (*rl)[0].scalar_as<double>(), unrolled = (*ru)[0].scalar_as<double>();
    const double diff = std::abs(loss - unrolled);
    max_abs_diff = std::max(max_abs_diff, diff);
    max_rel_diff = std::max(max_rel_diff, diff / std::max(std::abs(unrolled), 1e-12));
    if (step % log_every == 0 || step == 1 || step == steps) {
      if (json) {
        JsonLine().Add("step", step).Add("longest", longest).Add("loss", loss).Add("unrolled_loss", unrolled)
            .Add("abs_diff", diff).Print();
      } else {
        std::printf("%6lld %6lld %12.6f %12.6f %10.3g\n", (long long)step, (long long)longest, loss, unrolled,
                    diff);
      }
    }
  }
  double final_loss = 0, unrolled_final = 0;
  es = evaluate(&final_loss, &unrolled_final);
  if (!es.ok()) return Fail(es);
  if (json) {
    JsonLine().Add("first_loss", first_loss).Add("final_loss", final_loss)
        .Add("unrolled_final_loss", unrolled_final).Add("steps", steps).Add("max_abs_diff", max_abs_diff)
        .Add("max_rel_diff", max_rel_diff).Add("dtype", dtype_name).Add("hidden", hidden)
        .Add("length", max_length).Add("loop_seconds", loop_secs).Add("unrolled_seconds", unrolled_secs)
        .Print();
  } else {
    std::printf("held-out loss after training: loop %.6f, unrolled %.6f (from %.6f)\n"
                "largest per-step loss difference: %.3g (relative %.3g)\n"
                "training time: loop %.1f s, unrolled %.1f s\n",
                final_loss, unrolled_final, first_loss, max_abs_diff, max_rel_diff, loop_secs, unrolled_secs);
  }
  return 0;
}
