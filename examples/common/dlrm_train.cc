// DLRM's input, training steps and evaluation (examples/common/dlrm_train.h).
#include "examples/common/dlrm_train.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "examples/common/auc.h"
#include "shardflow/cluster.h"

namespace sf::examples {

namespace {

constexpr int kMaxMovedInARow = 100;

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Result<DlrmInput> AddDlrmInput(Graph& g, const std::vector<std::string>& files, const DlrmInputOptions& o,
                               const std::string& name) {
  CriteoReaderOptions r;
  r.num_threads = o.reader_threads;
  r.batch_size = o.queue ? o.reader_batch : o.batch;
  r.prefetch_batches = o.prefetch_batches;
  r.num_epochs = o.epochs;
  DlrmInput in;
  if (o.queue) {
    ops::CriteoInput q = ops::CriteoBatchQueue(g, files, r, o.batch, 0, name);
    SF_RETURN_IF_ERROR(g.status());
    in = {q.label.name(), q.dense.name(), q.categorical.name(), q.enqueue.name(), q.close.name(),
          q.cancel.name()};
  } else {
    ops::CriteoColumns c = ops::CriteoReader(g, files, r, name + "/reader");
    SF_RETURN_IF_ERROR(g.status());
    in = {c.label.name(), c.dense.name(), c.categorical.name(), "", "", ""};
  }
  return in;
}

Result<DlrmInput> AddSharedDlrmInput(Graph& g, const DlrmModel& m, Output chunk_queue,
                                     const ops::CriteoChunkPlan& plan, const DlrmInputOptions& o, int64_t worker,
                                     const std::string& name) {
  ops::SharedCriteoInput q = ops::SharedCriteoBatchQueue(g, chunk_queue, plan, CriteoReaderOptions{}, worker, o.batch,
                                                         0, name);
  SF_RETURN_IF_ERROR(g.status());
  // The report goes first: a refused one (a chunk lost to another worker)
  // fails the step before the update, so no row is trained twice.
  SF_ASSIGN_OR_RETURN(int train, g.FindNode(m.train));
  SF_RETURN_IF_ERROR(ops::ReportTrainedBefore(g, q, Operation(&g, train)));
  DlrmInput in{q.label.name(), q.dense.name(), q.categorical.name(), q.enqueue.name(), q.close.name(),
               q.cancel.name()};
  in.ticket = q.ticket.name();
  in.pos = q.pos.name();
  in.trained_ticket = q.trained_ticket.name();
  in.trained_pos = q.trained_pos.name();
  in.trained = q.trained.name();
  in.release = q.release.name();
  return in;
}

DlrmTrainer::DlrmTrainer(SessionInterface& session, const DlrmModel& model, const DlrmInput& input)
    : session_(session), model_(model), input_(input) {}

DlrmTrainer::~DlrmTrainer() {
  // At teardown a runner's error has no one to go to; Stop() reports it to a caller that asks.
  const Status s = Stop();
  if (!s.ok()) std::fprintf(stderr, "dlrm: the input runner ended with %s\n", s.ToString().c_str());
}

Status DlrmTrainer::Start() {
  if (input_.enqueue.empty()) return Status::OK();
  QueueRunnerOptions o;
  o.close_target = input_.close;
  o.cancel_target = input_.cancel;
  // The cluster may move or lose the worker's queue with rows in it: its
  // chunks go back, to be read again from after their trained rows.
  o.restart_target = input_.release;
  runner_ = std::make_unique<QueueRunner>(session_, std::vector<std::string>{input_.enqueue}, nullptr, o);
  return runner_->Start();
}

Status DlrmTrainer::Stop() {
  Status s;
  if (runner_) {
    runner_->Stop();  // closes the queue (cancel): a dequeue in flight ends
    s = runner_->Join();
    runner_.reset();
  }
  if (pending_.valid()) pending_.wait();
  return s;
}

void DlrmTrainer::Prefetch() {
  auto promise = std::make_shared<std::promise<Batch>>();
  pending_ = promise->get_future();
  Fetches fetches{input_.label, input_.dense, input_.categorical};
  if (!input_.trained.empty()) fetches = Fetches{input_.label, input_.dense, input_.categorical, input_.ticket, input_.pos};
  session_.RunAsync({}, fetches, {}, [promise](Batch b) { promise->set_value(std::move(b)); });
}

DlrmTrainer::Batch DlrmTrainer::NextBatch(double* wait_secs) {
  if (!pending_.valid()) Prefetch();
  const auto t0 = std::chrono::steady_clock::now();
  Batch b = pending_.get();
  // A dequeue waiting at the old holder of a slot that moved ends as moved,
  // having taken nothing: the next one goes to the new holder.
  for (int moved = 0; !b.ok() && IsStaleShardMap(b.status()) && moved < kMaxMovedInARow; ++moved) {
    Prefetch();
    b = pending_.get();
  }
  *wait_secs = Seconds(t0);
  if (b.ok()) Prefetch();  // the next batch is dequeued while this one trains
  return b;
}

Status DlrmTrainer::Skip() {
  double wait = 0;
  return NextBatch(&wait).status();
}

Result<DlrmStep> DlrmTrainer::Step(bool fetch_loss, const RunOptions& options) {
  DlrmStep step;
  Batch batch = NextBatch(&step.wait_secs);
  if (!batch.ok()) return batch.status();
  step.rows = (*batch)[0].num_elements();
  const auto t0 = std::chrono::steady_clock::now();
  FeedMap feeds = {{model_.label, (*batch)[0]}, {model_.dense, (*batch)[1]}, {model_.categorical, (*batch)[2]}};
  Targets targets{model_.train};
  if (!input_.trained.empty()) {
    // The report runs in the step that trains the rows, before the update (ReportTrainedBefore).
    feeds.push_back({input_.trained_ticket, (*batch)[3]});
    feeds.push_back({input_.trained_pos, (*batch)[4]});
    targets = Targets{model_.train, input_.trained};
  }
  auto r = session_.Run(feeds, fetch_loss ? Fetches{model_.loss} : Fetches{}, targets, options);
  if (!r.ok()) return r.status();
  step.train_secs = Seconds(t0);
  if (fetch_loss) step.loss = (*r)[0].data<float>()[0];
  return step;
}

Result<int64_t> DlrmTrainer::Release() {
  if (input_.release.empty()) return int64_t{0};
  auto r = session_.Run({}, {input_.release});
  if (!r.ok()) return r.status().WithPrefix("releasing the worker's chunks");
  return (*r)[0].scalar_as<int64_t>();
}

Result<DlrmEval> EvaluateDlrm(SessionInterface& session, const DlrmModel& model, const DlrmInput& input) {
  std::vector<float> scores, labels;
  double loss = 0;
  for (;;) {
    auto batch = session.Run({}, {input.label, input.dense, input.categorical});
    if (!batch.ok()) {
      if (batch.status().code() == Code::kOutOfRange) break;
      return batch.status().WithPrefix("reading the held-out data");
    }
    auto z = session.Run({{model.dense, (*batch)[1]}, {model.categorical, (*batch)[2]}}, {model.eval_logits});
    if (!z.ok()) return z.status().WithPrefix("evaluating");
    const float* y = (*batch)[0].data<float>();
    const float* s = (*z)[0].data<float>();
    const int64_t n = (*batch)[0].num_elements();
    for (int64_t i = 0; i < n; ++i) {
      // log loss = softplus(z) - y z, stable for any z.
      const double zi = s[i];
      loss += std::max(zi, 0.0) + std::log1p(std::exp(-std::abs(zi))) - y[i] * zi;
    }
    scores.insert(scores.end(), s, s + n);
    labels.insert(labels.end(), y, y + n);
  }
  if (scores.empty()) return InvalidArgument("the held-out data holds no example");
  DlrmEval e;
  e.examples = static_cast<int64_t>(scores.size());
  e.auc = Auc(scores, labels);
  e.logloss = loss / static_cast<double>(e.examples);
  return e;
}

}  // namespace sf::examples
