// Queues as coordination: N workers and one chief train in lock-step through
// FIFO queues, the pattern synchronous replication builds on.
//
//   build/bin/sync_tokens                          # 4 workers, 100 rounds
//   build/bin/sync_tokens --workers 16 --rounds 500 --json
//   build/bin/sync_tokens --tokens shared          # TensorFlow's SyncReplicas scheme
//
// A round: every worker takes a token (an int64 round number), reads the
// variable, computes a gradient from the token and its id (element i is
// (worker + 1 + round) * (i + 1), computed in the graph) and enqueues it,
// tagged with the round and its id, into the "gradients" queue. The chief
// dequeues N gradients at once (QueueDequeueMany), adds their average to the
// variable (AssignAdd) and only then enqueues N tokens carrying the next
// round. So no worker starts round r + 1 before the chief has applied round
// r. Round 0's tokens are given up front, so it needs no special case.
//
// --tokens per_worker (the default): one token queue per worker, one token
// each per round, so every worker contributes exactly once per round (strict
// lock-step). --tokens shared: one "tokens" queue for all, as TensorFlow's
// SyncReplicasOptimizer does. A worker then adopts the round its token
// carries; a fast worker may take a second token of a round before a slow
// one takes its first, so a round's N gradients need not come from N
// distinct workers (the barrier on rounds still holds; fairness does not).
//
// Every worker and the chief are chains of Session::RunAsync steps (each
// step's callback starts the next); a worker waiting for its token is a
// pending queue reply, not a blocked thread, so many more workers than cores
// are fine. After the last round the chief closes the queues and every
// worker's next token dequeue fails with OutOfRange: its normal end.
//
// The program checks the barrier and exits 1 on any violation: the value a
// worker read at the start of round r must equal, bit for bit, the value the
// chief's AssignAdd produced in round r - 1 (zeros for r = 0); the chief must
// only ever pull gradients of its current round; per_worker tokens must carry
// the worker's own round count and each round's gradients must come from
// all N workers. The final value must equal the average of what was pulled,
// and with per_worker tokens the closed form
// sum_r ((N + 1) / 2 + r) = R (N + 1) / 2 + R (R - 1) / 2 (element i is that
// times i + 1; final_value is element 0).
// With --json the last line is {"workers", "rounds", "tokens",
// "rounds_per_sec", "barrier_violations", "final_value"}.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/trace.h"
#include "shardflow/ops.h"
#include "shardflow/queue_ops.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

// A wait longer than this fails the step (Unavailable) instead of hanging
// the program if the chief or a worker is lost.
constexpr int64_t kQueueTimeoutMs = 60000;

int Fail(const Status& s) {
  std::fprintf(stderr, "sync_tokens: %s\n", s.ToString().c_str());
  return 1;
}

// Names of the graph's fetches and targets. With shared tokens every worker
// uses the same step (entry 0).
struct SyncGraph {
  bool shared = false;
  Operation init;
  std::string final_read;  // the variable, read by the main thread at the end
  // Worker step: take a token, then read the variable, then push a gradient.
  std::vector<std::string> take, read, push;
  // Chief step: pull N gradients, apply their average, then give N tokens.
  std::string pulled_rounds, pulled_workers, applied;
  // Fed with the round the given tokens carry: an int64 scalar (per_worker)
  // or an [N] vector (shared).
  std::string next_tokens;
};

// The worker step's nodes for one token queue; records the names in sg.
Status BuildWorkerStep(Graph& g, Output tokens, Output gradients, Output handle, Output id, Output scale,
                       const std::string& suffix, SyncGraph* sg) {
  auto token = ops::QueueDequeue(g, tokens, kQueueTimeoutMs, "take_token" + suffix);
  if (!g.status().ok()) return g.status();
  auto read = ops::ReadVariable(g, handle, DType::kFloat64);
  // The gradient of (worker, round): (worker + 1 + round) * (i + 1).
  auto factor = ops::Add(g, ops::Cast(g, token[0], DType::kFloat64),
                         ops::Add(g, ops::Cast(g, id, DType::kFloat64), ops::Const(g, 1.0)));
  auto grad = ops::Mul(g, factor, scale);
  const Operation push =
      ops::QueueEnqueue(g, gradients, {grad, token[0], id}, kQueueTimeoutMs, "push_gradient" + suffix);
  if (!g.status().ok()) return g.status();
  // The read waits for the token (the barrier); the push waits for the read,
  // else the chief could apply this round before the read and the worker
  // would see the next round's value.
  SF_RETURN_IF_ERROR(g.AddControlInput(read.node, token[0].node));
  SF_RETURN_IF_ERROR(g.AddControlInput(push.node, read.node));
  sg->take.push_back(token[0].name());
  sg->read.push_back(read.name());
  sg->push.push_back(push.name());
  return Status::OK();
}

// Builds the variable, the queues and the worker and chief steps; the
// graph's error when a builder fails.
Status BuildGraph(Graph& g, int64_t workers, int64_t dim, bool shared, SyncGraph* sg) {
  sg->shared = shared;
  auto w = ops::Variable(g, "w", ops::Zeros(g, DType::kFloat64, Shape{dim}));
  auto handle = ops::VariableHandle(w);
  std::vector<double> scale_v(dim);
  for (int64_t i = 0; i < dim; ++i) scale_v[i] = static_cast<double>(i + 1);
  auto scale = ops::Const(g, Tensor::FromVector<double>(scale_v, Shape{dim}), "scale");
  auto id = ops::Placeholder(g, DType::kInt32, PartialShape(Shape{}), "worker_id");

  ops::QueueOptions go;
  go.shapes = {PartialShape({dim}), PartialShape(Shape{}), PartialShape(Shape{})};
  go.capacity = workers;  // one gradient per worker and round
  auto gradients = ops::FIFOQueue(g, {DType::kFloat64, DType::kInt64, DType::kInt32}, go, "gradients");
  ops::QueueOptions to;
  to.shapes = {PartialShape(Shape{})};
  to.capacity = shared ? workers : 1;  // one token per worker and round

  // Chief step: the tokens are given only after the average is applied.
  auto pulled = ops::QueueDequeueMany(g, gradients, workers, kQueueTimeoutMs, "pull_gradients");
  if (!g.status().ok()) return g.status();
  auto applied = ops::AssignAdd(g, handle, ops::Mean(g, pulled[0], {0}));
  auto next = ops::Placeholder(g, DType::kInt64, shared ? PartialShape({workers}) : PartialShape(Shape{}),
                               "next_tokens");
  std::vector<Operation> give, first, close, cancel;
  const int64_t queues = shared ? 1 : workers;
  for (int64_t q = 0; q < queues; ++q) {
    const std::string suffix = shared ? "" : "_" + std::to_string(q);
    auto tokens = ops::FIFOQueue(g, {DType::kInt64}, to, "tokens" + suffix);
    if (shared) {
      give.push_back(ops::QueueEnqueueMany(g, tokens, {next}, kQueueTimeoutMs, "give_token" + suffix));
      first.push_back(ops::QueueEnqueueMany(g, tokens, {next}, kQueueTimeoutMs, "first_token" + suffix));
    } else {
      give.push_back(ops::QueueEnqueue(g, tokens, {next}, kQueueTimeoutMs, "give_token" + suffix));
      first.push_back(ops::QueueEnqueue(g, tokens, {next}, kQueueTimeoutMs, "first_token" + suffix));
    }
    close.push_back(ops::QueueClose(g, tokens, false, "close_tokens" + suffix));
    cancel.push_back(ops::QueueClose(g, tokens, true, "cancel_tokens" + suffix));
    SF_RETURN_IF_ERROR(BuildWorkerStep(g, tokens, gradients, handle, id, scale, suffix, sg));
    if (!g.status().ok()) return g.status();
    SF_RETURN_IF_ERROR(g.AddControlInput(give.back().node, applied.node));
  }
  close.push_back(ops::QueueClose(g, gradients, false, "close_gradients"));
  cancel.push_back(ops::QueueClose(g, gradients, true, "cancel_gradients"));
  ops::NoOp(g, give, "give_tokens");
  ops::NoOp(g, first, "first_tokens");
  ops::NoOp(g, close, "close_queues");
  ops::NoOp(g, cancel, "cancel_queues");
  sg->init = ops::GlobalVariablesInitializer(g);
  if (!g.status().ok()) return g.status();
  sg->final_read = w.name();
  sg->pulled_rounds = pulled[1].name();
  sg->pulled_workers = pulled[2].name();
  sg->applied = applied.name();
  sg->next_tokens = next.name();
  return Status::OK();
}

// The feed of next_tokens giving every worker a token carrying `round`.
FeedMap TokenFeed(const SyncGraph& sg, int64_t workers, int64_t round) {
  if (sg.shared)
    return {
        {sg.next_tokens, Tensor::FromVector<int64_t>(std::vector<int64_t>(workers, round), Shape{workers})}};
  return {{sg.next_tokens, Tensor::Scalar<int64_t>(round)}};
}

// Element 0 of the variable after `rounds` rounds of `workers` workers who
// each contribute once per round.
double ValueAfter(int64_t rounds, int64_t workers) {
  return rounds * (workers + 1) / 2.0 + rounds * (rounds - 1) / 2.0;
}

// One worker's round as the worker saw it.
struct WorkerRead {
  int64_t round;               // the token's round
  std::vector<double> values;  // the variable at the start of that round
};

// Runs the workers' and the chief's RunAsync chains and keeps what they saw.
class SyncTraining {
 public:
  SyncTraining(Session& s, const SyncGraph& sg, int64_t workers, int64_t rounds, const TraceFlag& trace)
      : s_(s),
        trace_(trace),
        sg_(sg),
        workers_(workers),
        rounds_(rounds),
        reads_(workers),
        stopped_(workers, false),
        chief_values_(rounds),
        pulled_workers_(rounds) {}

  // Starts one chain per worker and the chief's chain.
  void Start() {
    {
      std::lock_guard<std::mutex> l(mu_);
      live_ = static_cast<int>(workers_) + 1;
    }
    for (int64_t w = 0; w < workers_; ++w) WorkerRound(w, 0);
    ChiefRound(0);
  }

  // Waits until every chain (and any cancel step) has ended; returns the
  // first error that was not a worker's normal OutOfRange end.
  Status Wait() {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return live_ == 0; });
    return error_;
  }

  // The following are read after Wait (which orders them after the chains).
  // What each worker read at the start of each of its rounds.
  const std::vector<std::vector<WorkerRead>>& reads() const { return reads_; }
  // Whether each worker ended on OutOfRange (its token queue closed).
  const std::vector<bool>& stopped_on_out_of_range() const { return stopped_; }
  // The variable after each round, as the chief's AssignAdd returned it.
  const std::vector<std::vector<double>>& chief_values() const { return chief_values_; }
  // The workers whose gradients the chief averaged in each round.
  const std::vector<std::vector<int32_t>>& pulled_workers() const { return pulled_workers_; }
  // Per-worker tokens that did not carry the worker's own round count.
  int64_t wrong_tokens() const { return wrong_tokens_; }
  // Gradients the chief pulled that were not of its current round.
  int64_t stale_gradients() const { return stale_gradients_; }

 private:
  // Worker w's step number `step` (its round, with per_worker tokens).
  void WorkerRound(int64_t w, int64_t step) {
    const size_t k = sg_.shared ? 0 : static_cast<size_t>(w);
    s_.RunAsync(
        {{"worker_id", Tensor::Scalar<int32_t>(static_cast<int32_t>(w))}}, {sg_.take[k], sg_.read[k]},
        {sg_.push[k]}, [this, w, step](Result<std::vector<Tensor>> res) {
          if (!res.ok()) {
            if (res.status().code() == Code::kOutOfRange) {
              std::lock_guard<std::mutex> l(mu_);
              stopped_[w] = true;
            } else {
              Abort(res.status().WithPrefix("worker " + std::to_string(w) + " step " + std::to_string(step)));
            }
            EndChain();
            return;
          }
          {
            std::lock_guard<std::mutex> l(mu_);
            const int64_t round = (*res)[0].scalar_as<int64_t>();
            if (!sg_.shared && round != step) ++wrong_tokens_;
            reads_[w].push_back({round, (*res)[1].ToVector<double>()});
          }
          WorkerRound(w, step + 1);
        });
  }

  void ChiefRound(int64_t r) {
    const bool last = r + 1 == rounds_;
    FeedMap feeds;
    std::vector<std::string> targets;
    if (!last) {
      feeds = TokenFeed(sg_, workers_, r + 1);
      targets.push_back("give_tokens");
    }
    s_.RunAsync(feeds, {sg_.pulled_rounds, sg_.pulled_workers, sg_.applied}, targets, trace_.For(r),
                [this, r, last](Result<std::vector<Tensor>> res) {
                  if (!res.ok()) {
                    Abort(res.status().WithPrefix("chief round " + std::to_string(r)));
                    EndChain();
                    return;
                  }
                  {
                    std::lock_guard<std::mutex> l(mu_);
                    for (int64_t got : (*res)[0].ToVector<int64_t>())
                      if (got != r) ++stale_gradients_;
                    pulled_workers_[r] = (*res)[1].ToVector<int32_t>();
                    chief_values_[r] = (*res)[2].ToVector<double>();
                  }
                  if (!last) {
                    ChiefRound(r + 1);
                    return;
                  }
                  // Done: closing the queues is what ends the workers.
                  s_.RunAsync({}, {}, {"close_queues"}, [this](Result<std::vector<Tensor>> c) {
                    if (!c.ok()) Abort(c.status().WithPrefix("closing the queues"));
                    EndChain();
                  });
                });
  }

  // Records the first error and closes every queue cancelling waiters, so
  // no chain waits forever for a peer that has stopped.
  void Abort(const Status& s) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (error_.ok()) error_ = s;
      if (cancelling_) return;
      cancelling_ = true;
      ++live_;
    }
    s_.RunAsync({}, {}, {"cancel_queues"}, [this](Result<std::vector<Tensor>>) { EndChain(); });
  }

  void EndChain() {
    std::lock_guard<std::mutex> l(mu_);
    if (--live_ == 0) cv_.notify_all();
  }

  Session& s_;
  const TraceFlag& trace_;  // --trace: the chief's round of that number
  const SyncGraph& sg_;
  const int64_t workers_, rounds_;
  std::mutex mu_;
  std::condition_variable cv_;
  int live_ = 0;                                      // GUARDED_BY(mu_): chains still running
  bool cancelling_ = false;                           // GUARDED_BY(mu_)
  Status error_;                                      // GUARDED_BY(mu_)
  std::vector<std::vector<WorkerRead>> reads_;        // GUARDED_BY(mu_)
  std::vector<bool> stopped_;                         // GUARDED_BY(mu_)
  std::vector<std::vector<double>> chief_values_;     // GUARDED_BY(mu_)
  std::vector<std::vector<int32_t>> pulled_workers_;  // GUARDED_BY(mu_)
  int64_t wrong_tokens_ = 0;                          // GUARDED_BY(mu_)
  int64_t stale_gradients_ = 0;                       // GUARDED_BY(mu_)
};

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.Int("workers", 4, "producer workers (one gradient each per round)")
      .Int("rounds", 100, "synchronous rounds")
      .Int("dim", 8, "elements of the variable and of each gradient")
      .String("tokens", "per_worker", "per_worker (a token queue per worker) or shared (one for all)")
      .Bool("json", "print a JSON summary line on stdout");
  DeclareTraceFlags(flags);
  ParseOrExit(flags, argc, argv, "sync_tokens");
  const TraceFlag trace(flags);
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  const int64_t workers = flags.GetInt("workers"), rounds = flags.GetInt("rounds"), dim = flags.GetInt("dim");
  const std::string token_mode = flags.GetString("tokens");
  const bool json = flags.GetBool("json");
  std::string bad;
  if (workers < 1 || workers > 1024)
    bad = "--workers must be in [1, 1024], got " + std::to_string(workers);
  else if (rounds < 1)
    bad = "--rounds must be at least 1, got " + std::to_string(rounds);
  else if (dim < 1 || dim > (1 << 20))
    bad = "--dim must be in [1, 1048576], got " + std::to_string(dim);
  else if (token_mode != "per_worker" && token_mode != "shared")
    bad = "--tokens must be per_worker or shared, got '" + token_mode + "'";
  if (!bad.empty()) {
    std::fprintf(stderr, "sync_tokens: %s (see --help)\n", bad.c_str());
    return 2;
  }
  const bool shared = token_mode == "shared";

  Graph g;
  SyncGraph sg;
  Status built = BuildGraph(g, workers, dim, shared, &sg);
  if (!built.ok()) return Fail(built);
  Session session(g);
  auto init = session.Run({}, {}, {sg.init});
  if (!init.ok()) return Fail(init.status());
  auto first = session.Run(TokenFeed(sg, workers, 0), {}, {"first_tokens"});
  if (!first.ok()) return Fail(first.status());

  SyncTraining training(session, sg, workers, rounds, trace);
  const auto t0 = std::chrono::steady_clock::now();
  training.Start();
  Status ran = training.Wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!ran.ok()) return Fail(ran);

  // The barrier: a read at the start of round r equals the chief's value
  // after round r - 1.
  int64_t violations = training.wrong_tokens() + training.stale_gradients();
  auto violation = [&](const std::string& what) {
    if (violations < 10) std::fprintf(stderr, "sync_tokens: barrier violation: %s\n", what.c_str());
    ++violations;
  };
  const auto& chief = training.chief_values();
  int64_t stopped = 0, contributions = 0;
  for (int64_t w = 0; w < workers; ++w) {
    if (training.stopped_on_out_of_range()[w]) ++stopped;
    const auto& reads = training.reads()[w];
    contributions += static_cast<int64_t>(reads.size());
    if (!shared && static_cast<int64_t>(reads.size()) != rounds)
      violation("worker " + std::to_string(w) + " ran " + std::to_string(reads.size()) +
                " rounds, expected " + std::to_string(rounds));
    for (const WorkerRead& rd : reads) {
      if (rd.round < 0 || rd.round >= rounds) {
        violation("worker " + std::to_string(w) + " got a token for round " + std::to_string(rd.round));
        continue;
      }
      const std::vector<double> expected =
          rd.round == 0 ? std::vector<double>(dim, 0.0) : chief[rd.round - 1];
      if (rd.values != expected)
        violation("worker " + std::to_string(w) + " read " + std::to_string(rd.values[0]) +
                  " at the start of round " + std::to_string(rd.round) + ", expected " +
                  std::to_string(expected[0]));
    }
  }
  if (contributions != workers * rounds)
    violation(std::to_string(contributions) + " gradients pushed, expected " +
              std::to_string(workers * rounds));
  // The value the pulled gradients add up to; per_worker rounds must hold
  // one gradient of every worker.
  std::vector<double> expected_value(dim, 0.0);
  for (int64_t r = 0; r < rounds; ++r) {
    std::vector<int32_t> ids = training.pulled_workers()[r];
    double factor = 0;
    for (int32_t id : ids) factor += (id + 1 + r) / static_cast<double>(workers);
    for (int64_t i = 0; i < dim; ++i) expected_value[i] += factor * (i + 1);
    std::sort(ids.begin(), ids.end());
    for (int64_t k = 0; !shared && k < workers; ++k)
      if (ids[k] != k) {
        violation("round " + std::to_string(r) + " did not get one gradient from every worker");
        break;
      }
  }
  auto final_read = session.Run({}, {sg.final_read});
  if (!final_read.ok()) return Fail(final_read.status());
  const std::vector<double> final_value = (*final_read)[0].ToVector<double>();
  const double closed_form = ValueAfter(rounds, workers);
  bool value_ok = final_value == chief[rounds - 1];
  for (int64_t i = 0; i < dim; ++i) {
    auto near = [](double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); };
    value_ok = value_ok && near(final_value[i], expected_value[i]) &&
               (shared || near(final_value[i], closed_form * (i + 1)));
  }

  if (json) {
    JsonLine()
        .Add("workers", workers)
        .Add("rounds", rounds)
        .Add("tokens", token_mode)
        .Add("rounds_per_sec", rounds / seconds)
        .Add("barrier_violations", violations)
        .Add("final_value", final_value[0])
        .Print();
  } else {
    std::printf("%lld workers x %lld rounds (%s tokens) in %.3f s: %.1f rounds/s\n", (long long)workers,
                (long long)rounds, token_mode.c_str(), seconds, rounds / seconds);
    std::printf(
        "barrier violations: %lld (every read at the start of round r equals the value after round r-1)\n",
        (long long)violations);
    if (shared)
      std::printf("final value %.17g (the pulled gradients add up to %.17g)\n", final_value[0],
                  expected_value[0]);
    else
      std::printf("final value %.17g (closed form %.17g)\n", final_value[0], closed_form);
    std::printf("workers that stopped on OutOfRange after the queues closed: %lld/%lld\n", (long long)stopped,
                (long long)workers);
  }
  if (violations > 0) {
    std::fprintf(stderr, "sync_tokens: the token barrier was violated %lld times\n", (long long)violations);
    return 1;
  }
  if (!value_ok) {
    std::fprintf(stderr, "sync_tokens: final value %.17g differs from the expected %.17g\n", final_value[0],
                 shared ? expected_value[0] : closed_form);
    return 1;
  }
  if (stopped != workers) {
    std::fprintf(stderr, "sync_tokens: only %lld of %lld workers stopped on OutOfRange\n", (long long)stopped,
                 (long long)workers);
    return 1;
  }
  return 0;
}
