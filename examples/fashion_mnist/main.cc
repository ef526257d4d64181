// Trains a classifier on Fashion-MNIST on the embedded in-process cluster.
//
//   build/bin/fashion_mnist --epochs 10              # MLP 784-512-256-10
//   build/bin/fashion_mnist --model cnn --epochs 2   # conv-pool-conv-pool-fc-fc
//   build/bin/fashion_mnist --pipeline               # batches through a RandomShuffleQueue
//   build/bin/fashion_mnist --workers 2 --backup-workers 1   # 3 replicas on a local 2-node cluster
//
// SGD with momentum and a cosine learning-rate decay. Shuffles with a seed, evaluates test accuracy after each epoch, shows a
// progress bar, and writes metrics.csv and curves.svg into its run folder.
// With --json it prints one JSON line per epoch and a final summary line:
// {"model", "epochs", "test_accuracy", "train_steps_per_sec", "epoch_seconds"}
// (with --pipeline also "pipeline_fill_examples_per_sec", "input_wait_seconds";
// with --checkpoint-dir also "start_step", "global_step").
//
// --checkpoint-dir DIR: a Saver (keep_last 3) checkpoints every
// --checkpoint-every steps (default: once per epoch) and at the end, under the
// number of steps done. On start, the newest committed checkpoint in DIR is
// restored and training resumes at its global step. Each epoch's shuffle is
// derived from (seed, epoch) alone, and the learning rate from the global step
// and --epochs, so a resumed run sees the same batches and rates as an
// uninterrupted one: train with --epochs E --stop-after-epoch K, then run
// again with --epochs E to finish exactly as one E-epoch run would.
//
// --workers N [--sync --backup-workers b | --async] [--nodes K | --cluster
// HOST:PORT --tls-dir DIR]: between-graph replicated training on a
// cluster of node processes (see workers.h); the summary adds "workers",
// "backup_workers", "mode", "tasks" and the sync counters ("applied_steps",
// "accepted_gradients", "dropped_gradients") or the async staleness
// ("applied_updates", "staleness_mean", "staleness_max").
//
// --pipeline: a QueueRunner's loops read chunks of the training set (in a
// random chunk order per epoch) and enqueue them into a RandomShuffleQueue,
// which mixes examples across chunks; each training step dequeues its batch
// from the queue (one batch ahead) instead of copying it from memory. The
// batches then depend on thread timing: --pipeline runs are not bit-for-bit
// reproducible, unlike the default.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <memory>
#include <random>
#include <thread>

#include "examples/common/fashion_mnist_data.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/models.h"
#include "shardflow/precision.h"
#include "examples/common/progress.h"
#include "examples/common/svg_plot.h"
#include "examples/common/trace.h"
#include "examples/fashion_mnist/workers.h"
#include "shardflow/checkpoint.h"
#include "shardflow/ops.h"
#include "shardflow/queue_ops.h"
#include "shardflow/queue_runner.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "fashion_mnist: %s\n", s.ToString().c_str());
  return 1;
}

// The input pipeline's graph part: a RandomShuffleQueue fed by enqueue_many
// of "pipe_x"/"pipe_labels" and read by a dequeue_many of one batch.
struct Pipeline {
  std::vector<Output> batch;  // images [batch, 784], labels [batch]
  Output size;
  int64_t capacity = 0;
};

// One batch dequeued ahead (Session::RunAsync), so taking it from the
// queue overlaps the training step before it.
class Prefetch {
 public:
  Prefetch(Session& s, std::vector<Output> fetches) : s_(s) {
    for (const Output& o : fetches) names_.push_back(o.name());
  }
  ~Prefetch() { (void)Wait(); }
  void Start() {
    {
      std::lock_guard<std::mutex> l(mu_);
      result_.reset();
      pending_ = true;
    }
    s_.RunAsync({}, names_, {}, [this](Result<std::vector<Tensor>> r) {
      std::lock_guard<std::mutex> l(mu_);
      result_.emplace(std::move(r));
      cv_.notify_all();
    });
  }
  // The batch started last (an error when nothing was started).
  Result<std::vector<Tensor>> Wait() {
    std::unique_lock<std::mutex> l(mu_);
    if (!pending_) return FailedPrecondition("no batch was requested");
    cv_.wait(l, [&] { return result_.has_value(); });
    pending_ = false;
    return std::move(*result_);
  }

 private:
  Session& s_;
  std::vector<std::string> names_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool pending_ = false;                                // GUARDED_BY(mu_)
  std::optional<Result<std::vector<Tensor>>> result_;  // GUARDED_BY(mu_)
};

Pipeline BuildPipeline(Graph& g, int64_t batch, int64_t seed) {
  Pipeline p;
  p.capacity = std::max<int64_t>(16 * batch, 4096);
  ops::QueueOptions qo;
  qo.shapes = {PartialShape({784}), PartialShape(Shape{})};
  auto q = ops::RandomShuffleQueue(g, {DType::kFloat32, DType::kInt32}, p.capacity, p.capacity / 2,
                                   seed, qo, "input_queue");
  auto px = ops::Placeholder(g, DType::kFloat32, {-1, 784}, "pipe_x");
  auto py = ops::Placeholder(g, DType::kInt32, {-1}, "pipe_labels");
  ops::QueueEnqueueMany(g, q, {px, py}, 0, "pipe_enqueue");
  p.batch = ops::QueueDequeueMany(g, q, batch, 0, "pipe_batch");
  p.size = ops::QueueSize(g, q, "pipe_size");
  ops::QueueClose(g, q, false, "pipe_close");
  ops::QueueClose(g, q, true, "pipe_cancel");
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  flags.String("model", "mlp", "mlp or cnn")
      .Int("epochs", 10, "training epochs")
      .Int("batch", 128, "batch size")
      .Double("lr", 0.05, "initial learning rate (SGD with momentum, cosine decay to 0)")
      .Double("momentum", 0.9, "momentum")
      .Int("seed", 1, "seed for initialisation and shuffling")
      .Int("limit", 0, "use only the first N training examples (0 = all)")
      .String("precision", "fp32", "fp32, or bf16: matmuls and convolutions in bf16 with fp32 accumulation "
              "and fp32 weights (needs an AVX512_BF16 CPU)")
      .String("data", kFashionMnistDir, "folder with the gzipped IDX files")
      .String("out", "runs", "parent folder of the run folder")
      .Bool("pipeline", "read and shuffle training batches through a RandomShuffleQueue")
      .Int("pipeline_loops", 2, "concurrent enqueue loops of the input pipeline")
      .Int("pipeline_chunk", 512, "examples each enqueue step reads (one enqueue_many)")
      .Bool("json", "print JSON lines on stdout")
      .String("checkpoint-dir", "", "checkpoint into DIR and resume from its newest committed checkpoint")
      .Int("checkpoint-every", 0, "steps between checkpoints (0 = once per epoch)")
      .Int("stop-after-epoch", 0, "stop (and checkpoint) after this epoch; the schedule still spans --epochs")
      .Int("workers", 0, "train with N worker replicas on a cluster (0 = in this process)")
      .Int("nodes", 2, "node processes of the local cluster (with --workers)")
      .Bool("sync", "synchronous replicas: average the first --workers gradients per step (the default)")
      .Int("backup-workers", 0, "with --sync: run this many extra workers; the late gradients are dropped")
      .Bool("async", "asynchronous replicas: apply each gradient on arrival, record its staleness")
      .String("cluster", "", "with --workers: a member HOST:PORT of your own cluster instead of a local one")
      .String("tls-dir", "", "the credentials directory of --cluster (shardflow certs init)");
  DeclareTraceFlags(flags);
  ParseOrExit(flags, argc, argv, "fashion_mnist");
  KeepTensorMemoryWarm();  // this program opts in: big tensors keep their pages (shardflow/tensor.h)
  const bool json = flags.GetBool("json");
  const TraceFlag trace(flags);
  const int64_t epochs = flags.GetInt("epochs"), batch = flags.GetInt("batch");
  if (epochs < 1 || batch < 1) return Fail(InvalidArgument("--epochs and --batch must be positive"));
  const std::string ckpt_dir = flags.GetString("checkpoint-dir");
  const int64_t stop_after = flags.GetInt("stop-after-epoch");
  if (flags.GetInt("checkpoint-every") < 0 || stop_after < 0)
    return Fail(InvalidArgument("--checkpoint-every and --stop-after-epoch must not be negative"));
  const int64_t last_epoch = stop_after > 0 ? std::min(stop_after, epochs) : epochs;

  auto train = LoadFashionMnist(flags.GetString("data"), "train");
  if (!train.ok()) return Fail(train.status());
  auto test = LoadFashionMnist(flags.GetString("data"), "t10k");
  if (!test.ok()) return Fail(test.status());
  const int64_t n_train = flags.GetInt("limit") > 0 ? std::min(flags.GetInt("limit"), train->size()) : train->size();

  const std::string precision = flags.GetString("precision");
  if (Status ps = CheckComputePrecision(precision); !ps.ok()) return Fail(ps);
  const bool replicated = flags.GetInt("workers") != 0 || flags.GetBool("async") || flags.GetBool("sync") ||
                          flags.GetInt("backup-workers") != 0 || !flags.GetString("cluster").empty();
  if (replicated) {
    if (flags.GetInt("workers") < 1)
      return Fail(InvalidArgument("--workers must be at least 1, got " + std::to_string(flags.GetInt("workers")) +
                                  " (--sync, --async, --backup-workers and --cluster need --workers N)"));
    if (flags.GetBool("sync") && flags.GetBool("async")) return Fail(InvalidArgument("--sync and --async exclude each other"));
    if (precision != "fp32") return Fail(InvalidArgument("--precision bf16 does not work with --workers yet"));
    if (flags.GetBool("pipeline") || !ckpt_dir.empty() || stop_after > 0)
      return Fail(InvalidArgument("--pipeline, --checkpoint-dir and --stop-after-epoch do not work with --workers"));
    WorkerTrainingOptions wo;
    wo.model.model = flags.GetString("model");
    wo.model.learning_rate = flags.GetDouble("lr");
    wo.model.momentum = flags.GetDouble("momentum");
    wo.model.seed = flags.GetInt("seed");
    wo.epochs = epochs;
    wo.batch = batch;
    wo.n_train = n_train;
    wo.workers = static_cast<int>(flags.GetInt("workers"));
    wo.backup_workers = static_cast<int>(flags.GetInt("backup-workers"));
    wo.async = flags.GetBool("async");
    wo.nodes = static_cast<int>(flags.GetInt("nodes"));
    wo.cluster = flags.GetString("cluster");
    wo.tls_dir = flags.GetString("tls-dir");
    wo.out = flags.GetString("out");
    wo.json = json;
    wo.trace = &trace;
    return TrainWithWorkers(wo, *train, *test);
  }

  Graph g;
  ClassifierModel m;
  ModelOptions mo;
  mo.model = flags.GetString("model");
  mo.learning_rate = flags.GetDouble("lr");
  mo.momentum = flags.GetDouble("momentum");
  mo.seed = flags.GetInt("seed");
  Status bs = BuildClassifier(g, mo, &m);
  if (!bs.ok()) return Fail(bs);
  const bool pipeline = flags.GetBool("pipeline");
  Pipeline pipe;
  if (pipeline) {
    pipe = BuildPipeline(g, batch, mo.seed);
    if (!g.status().ok()) return Fail(g.status());
  }
  // After the optimizer: its gradient products take the precision too.
  if (auto set = SetComputePrecision(g, precision); !set.ok()) return Fail(set.status());

  Session session(g);
  auto init = session.Run({}, {}, {m.init});
  if (!init.ok()) return Fail(init.status());
  std::unique_ptr<Saver> saver;
  int64_t start_step = 0;  // steps already done by the restored checkpoint
  if (!ckpt_dir.empty()) {
    saver = std::make_unique<Saver>(&session, ckpt_dir, 3);
    // The step comes from the checkpoint actually restored: Restore skips a
    // newest checkpoint that does not read back intact.
    auto step = Session::CheckpointStep(ckpt_dir);
    if (step.ok()) {
      Status rs = saver->Restore(-1, &start_step);
      if (!rs.ok()) return Fail(rs);
      if (!json) std::printf("restored checkpoint from %s at global step %lld\n", ckpt_dir.c_str(),
                             (long long)start_step);
      else std::fprintf(stderr, "fashion_mnist: restored checkpoint from %s at global step %lld\n",
                        ckpt_dir.c_str(), (long long)start_step);
    } else if (step.status().code() != Code::kNotFound) {
      return Fail(step.status());
    }
  }

  const std::string run_dir = flags.GetString("out") + "/fashion_mnist_" + mo.model +
                              (precision == "fp32" ? "" : "_" + precision) + "_seed" + std::to_string(mo.seed);
  std::filesystem::create_directories(run_dir);
  std::ofstream csv(run_dir + "/metrics.csv");
  csv << "epoch,train_loss,test_loss,test_accuracy,steps_per_sec,epoch_seconds\n";
  if (!json) std::printf("training %s on %lld examples, batch %lld, %lld epochs; run folder %s\n",
                         mo.model.c_str(), (long long)n_train, (long long)batch, (long long)epochs, run_dir.c_str());

  std::vector<int64_t> order(n_train);
  std::iota(order.begin(), order.end(), 0);
  const int64_t steps_per_epoch = n_train / batch;  // drop the last partial batch
  if (steps_per_epoch < 1) return Fail(InvalidArgument("--batch is larger than the training set"));
  const int64_t total_steps_planned = epochs * steps_per_epoch;
  if (start_step > total_steps_planned)
    return Fail(InvalidArgument("the checkpoint in " + ckpt_dir + " is at global step " +
                                std::to_string(start_step) + ", past the " +
                                std::to_string(total_steps_planned) + " steps of this run's --epochs"));
  const int64_t first_epoch = start_step / steps_per_epoch + 1;
  const int64_t checkpoint_every = flags.GetInt("checkpoint-every") > 0 ? flags.GetInt("checkpoint-every")
                                                                         : steps_per_epoch;
  int64_t last_saved_step = start_step;
  auto checkpoint = [&](int64_t global_step) -> Status {
    auto id = saver->Save(global_step);
    if (!id.ok()) return id.status();
    last_saved_step = global_step;
    if (!json) std::printf("checkpoint %lld saved at global step %lld\n", (long long)*id, (long long)global_step);
    return Status::OK();
  };

  // The pipeline reads chunks in a random chunk order per epoch; big chunks
  // keep the enqueue steps few.
  const int64_t chunk = std::max<int64_t>(1, flags.GetInt("pipeline_chunk"));
  const std::vector<int64_t> file_order = order;
  const int64_t chunks_per_epoch = (n_train + chunk - 1) / chunk;
  std::vector<int64_t> chunks;
  std::atomic<int64_t> next_chunk{0};
  std::unique_ptr<QueueRunner> runner;
  double fill_rate = 0, input_wait = 0;
  std::unique_ptr<Prefetch> prefetch;
  if (pipeline) {
    std::mt19937_64 chunk_rng(mo.seed + 1);
    for (int64_t e = 0; e < epochs; ++e) {
      std::vector<int64_t> perm(chunks_per_epoch);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), chunk_rng);
      chunks.insert(chunks.end(), perm.begin(), perm.end());
    }
    QueueRunnerOptions ro;
    ro.parallel = static_cast<int>(std::max<int64_t>(1, flags.GetInt("pipeline_loops")));
    ro.close_target = "pipe_close";
    ro.cancel_target = "pipe_cancel";
    // A resumed run reads from the first epoch it has not finished.
    next_chunk = (first_epoch - 1) * chunks_per_epoch;
    const Dataset* data = &*train;
    runner = std::make_unique<QueueRunner>(session, std::vector<std::string>{"pipe_enqueue"},
        [&, data](int) -> Result<FeedMap> {
          const int64_t k = next_chunk.fetch_add(1);
          if (k >= static_cast<int64_t>(chunks.size())) return OutOfRange("every epoch was read");
          const int64_t begin = chunks[k] * chunk, n = std::min(chunk, n_train - begin);
          Tensor px, py;
          MakeBatch(*data, file_order, begin, n, &px, &py);
          return FeedMap{{"pipe_x", px}, {"pipe_labels", py}};
        }, ro);
    auto t0 = std::chrono::steady_clock::now();
    Status rs = runner->Start();
    if (!rs.ok()) return Fail(rs);
    // The pipeline's own rate: how fast it fills the queue before training
    // starts to drain it (or reads everything, for small runs).
    const int64_t fill = std::min(pipe.capacity, (epochs - first_epoch + 1) * n_train);
    for (;;) {
      auto r = session.Run({}, {pipe.size});
      if (!r.ok()) return Fail(r.status());
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // A pipeline that stalls (a failing loop) shows up at the first dequeue.
      if ((*r)[0].scalar_as<int64_t>() >= fill - batch || waited > 30) {
        fill_rate = (*r)[0].scalar_as<double>() / waited;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    prefetch = std::make_unique<Prefetch>(session, pipe.batch);
    prefetch->Start();
  }
  Series train_curve{"train loss", {}, {}}, test_curve{"test loss", {}, {}}, acc_curve{"test accuracy", {}, {}};
  double total_steps = 0, total_train_secs = 0, last_acc = 0;
  std::vector<double> epoch_secs;
  Tensor xb, yb;
  for (int64_t epoch = first_epoch; epoch <= last_epoch; ++epoch) {
    // Each epoch's permutation depends only on (seed, epoch), so a resumed
    // run shuffles exactly as an uninterrupted one.
    std::iota(order.begin(), order.end(), 0);
    std::seed_seq epoch_seed{static_cast<uint64_t>(mo.seed), static_cast<uint64_t>(epoch)};
    std::mt19937_64 rng(epoch_seed);
    std::shuffle(order.begin(), order.end(), rng);
    const int64_t first_step = epoch == first_epoch ? start_step % steps_per_epoch : 0;
    ProgressBar bar(steps_per_epoch, "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs));
    double loss_sum = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = first_step; step < steps_per_epoch; ++step) {
      if (pipeline) {
        auto w0 = std::chrono::steady_clock::now();
        auto b = prefetch->Wait();
        if (b.ok() && (epoch - 1) * steps_per_epoch + step + 1 < last_epoch * steps_per_epoch)
          prefetch->Start();
        if (!b.ok()) {
          // The queue closes early only when a loop failed: report why.
          runner->Stop();
          Status js = runner->Join();
          return Fail(js.ok() ? b.status() : js);
        }
        input_wait += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
        xb = (*b)[0];
        yb = (*b)[1];
      } else {
        MakeBatch(*train, order, step * batch, batch, &xb, &yb);
      }
      const int64_t global_step = (epoch - 1) * steps_per_epoch + step;
      Tensor lr = Tensor::Scalar<float>(static_cast<float>(
          LearningRateAt(mo.learning_rate, global_step, epochs * steps_per_epoch)));
      auto r = session.Run({{"x", xb}, {"labels", yb}, {"lr", lr}}, {m.loss}, {m.train},
                           trace.For(global_step - start_step));
      if (!r.ok()) return Fail(r.status());
      const double loss = (*r)[0].scalar_as<double>();
      loss_sum += loss;
      bar.Update(step + 1, loss);
      if (saver && (global_step + 1) % checkpoint_every == 0) {
        Status cs = checkpoint(global_step + 1);
        if (!cs.ok()) return Fail(cs);
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double acc = 0, test_loss = 0;
    Status es = EvaluateClassifier(session, m, *test, &acc, &test_loss);
    if (!es.ok()) return Fail(es);
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, "test acc %.4f", acc);
    bar.Finish(suffix);
    const int64_t epoch_steps = steps_per_epoch - first_step;
    const double train_loss = loss_sum / epoch_steps, sps = epoch_steps / secs;
    total_steps += epoch_steps;
    total_train_secs += secs;
    epoch_secs.push_back(secs);
    last_acc = acc;
    csv << epoch << "," << train_loss << "," << test_loss << "," << acc << "," << sps << "," << secs << "\n";
    csv.flush();
    train_curve.x.push_back(epoch); train_curve.y.push_back(train_loss);
    test_curve.x.push_back(epoch); test_curve.y.push_back(test_loss);
    acc_curve.x.push_back(epoch); acc_curve.y.push_back(acc);
    if (json) {
      JsonLine().Add("epoch", epoch).Add("train_loss", train_loss).Add("test_loss", test_loss)
          .Add("test_accuracy", acc).Add("steps_per_sec", sps).Add("epoch_seconds", secs).Print();
    } else {
      std::printf("epoch %lld: train loss %.4f, test loss %.4f, test accuracy %.4f, %.1f steps/s, %.1f s\n",
                  (long long)epoch, train_loss, test_loss, acc, sps, secs);
    }
  }
  if (first_epoch > last_epoch) {
    // The restored checkpoint already covers every epoch: report its accuracy.
    double test_loss = 0;
    Status es = EvaluateClassifier(session, m, *test, &last_acc, &test_loss);
    if (!es.ok()) return Fail(es);
  }
  const int64_t final_step = std::max(start_step, last_epoch * steps_per_epoch);
  if (saver && final_step != last_saved_step) {
    Status cs = checkpoint(final_step);
    if (!cs.ok()) return Fail(cs);
  }
  if (runner) {
    runner->Stop();
    prefetch.reset();
    Status js = runner->Join();
    if (!js.ok()) return Fail(js);
  }
  Status ps = WriteSvgPlot(run_dir + "/curves.svg",
                           {Panel{"loss", "epoch", {train_curve, test_curve}},
                            Panel{"test accuracy", "epoch", {acc_curve}}});
  if (!ps.ok()) return Fail(ps);
  const double sps = total_train_secs > 0 ? total_steps / total_train_secs : 0.0;
  if (json) {
    JsonLine line;
    line.Add("model", mo.model).Add("precision", precision).Add("epochs", epochs).Add("test_accuracy", last_acc)
        .Add("train_steps_per_sec", sps).Add("epoch_seconds", epoch_secs);
    if (saver) line.Add("start_step", start_step).Add("global_step", final_step);
    if (pipeline)
      line.Add("pipeline", true).Add("pipeline_fill_examples_per_sec", fill_rate)
          .Add("input_wait_seconds", input_wait);
    line.Print();
  } else {
    std::printf("final test accuracy %.4f after %lld epochs (%.1f steps/s); metrics in %s/metrics.csv, "
                "plot in %s/curves.svg\n", last_acc, (long long)last_epoch, sps, run_dir.c_str(), run_dir.c_str());
    if (pipeline)
      std::printf("input pipeline: filled its queue at %.0f examples/s; training waited %.2f s for batches\n",
                  fill_rate, input_wait);
  }
  return 0;
}
