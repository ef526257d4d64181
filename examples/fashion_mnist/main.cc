// Trains a classifier on Fashion-MNIST on the embedded in-process cluster.
//
//   build/bin/fashion_mnist --epochs 10              # MLP 784-512-256-10
//   build/bin/fashion_mnist --model cnn --epochs 2   # conv-pool-conv-pool-fc-fc
//
// SGD with momentum and a cosine learning-rate decay. Shuffles with a seed, evaluates test accuracy after each epoch, shows a
// progress bar, and writes metrics.csv and curves.svg into its run folder.
// With --json it prints one JSON line per epoch and a final summary line:
// {"model", "epochs", "test_accuracy", "train_steps_per_sec", "epoch_seconds"}.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "examples/common/fashion_mnist_data.h"
#include "examples/common/flags.h"
#include "examples/common/json.h"
#include "examples/common/models.h"
#include "examples/common/progress.h"
#include "examples/common/svg_plot.h"
#include "shardflow/session.h"

using namespace sf;
using namespace sf::examples;

namespace {

int Fail(const Status& s) {
  std::fprintf(stderr, "fashion_mnist: %s\n", s.ToString().c_str());
  return 1;
}

// Test-set accuracy and loss, in batches of 1000.
Status Evaluate(Session& s, const ClassifierModel& m, const Dataset& test, double* acc, double* loss) {
  std::vector<int64_t> order(test.size());
  std::iota(order.begin(), order.end(), 0);
  double correct = 0, total_loss = 0;
  for (int64_t b = 0; b < test.size(); b += 1000) {
    const int64_t n = std::min<int64_t>(1000, test.size() - b);
    Tensor xb, yb;
    MakeBatch(test, order, b, n, &xb, &yb);
    auto r = s.Run({{"x", xb}, {"labels", yb}}, std::vector<Output>{m.accuracy, m.loss});
    if (!r.ok()) return r.status();
    correct += (*r)[0].scalar_as<double>() * n;
    total_loss += (*r)[1].scalar_as<double>() * n;
  }
  *acc = correct / test.size();
  *loss = total_loss / test.size();
  return Status::OK();
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
      .String("data", kFashionMnistDir, "folder with the gzipped IDX files")
      .String("out", "runs", "parent folder of the run folder")
      .Bool("json", "print JSON lines on stdout");
  ParseOrExit(flags, argc, argv, "fashion_mnist");
  const bool json = flags.GetBool("json");
  const int64_t epochs = flags.GetInt("epochs"), batch = flags.GetInt("batch");
  if (epochs < 1 || batch < 1) return Fail(InvalidArgument("--epochs and --batch must be positive"));

  auto train = LoadFashionMnist(flags.GetString("data"), "train");
  if (!train.ok()) return Fail(train.status());
  auto test = LoadFashionMnist(flags.GetString("data"), "t10k");
  if (!test.ok()) return Fail(test.status());
  const int64_t n_train = flags.GetInt("limit") > 0 ? std::min(flags.GetInt("limit"), train->size()) : train->size();

  Graph g;
  ClassifierModel m;
  ModelOptions mo;
  mo.model = flags.GetString("model");
  mo.learning_rate = flags.GetDouble("lr");
  mo.momentum = flags.GetDouble("momentum");
  mo.seed = flags.GetInt("seed");
  Status bs = BuildClassifier(g, mo, &m);
  if (!bs.ok()) return Fail(bs);

  Session session(g);
  auto init = session.Run({}, std::vector<Output>{}, {m.init});
  if (!init.ok()) return Fail(init.status());

  const std::string run_dir = flags.GetString("out") + "/fashion_mnist_" + mo.model + "_seed" +
                              std::to_string(mo.seed);
  std::filesystem::create_directories(run_dir);
  std::ofstream csv(run_dir + "/metrics.csv");
  csv << "epoch,train_loss,test_loss,test_accuracy,steps_per_sec,epoch_seconds\n";
  if (!json) std::printf("training %s on %lld examples, batch %lld, %lld epochs; run folder %s\n",
                         mo.model.c_str(), (long long)n_train, (long long)batch, (long long)epochs, run_dir.c_str());

  std::mt19937_64 rng(mo.seed);
  std::vector<int64_t> order(n_train);
  std::iota(order.begin(), order.end(), 0);
  const int64_t steps_per_epoch = n_train / batch;  // drop the last partial batch
  Series train_curve{"train loss", {}, {}}, test_curve{"test loss", {}, {}}, acc_curve{"test accuracy", {}, {}};
  double total_steps = 0, total_train_secs = 0, last_acc = 0;
  std::vector<double> epoch_secs;
  Tensor xb, yb;
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    ProgressBar bar(steps_per_epoch, "epoch " + std::to_string(epoch) + "/" + std::to_string(epochs));
    double loss_sum = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = 0; step < steps_per_epoch; ++step) {
      MakeBatch(*train, order, step * batch, batch, &xb, &yb);
      const int64_t global_step = (epoch - 1) * steps_per_epoch + step;
      Tensor lr = Tensor::Scalar<float>(static_cast<float>(
          LearningRateAt(mo.learning_rate, global_step, epochs * steps_per_epoch)));
      auto r = session.Run({{"x", xb}, {"labels", yb}, {"lr", lr}}, std::vector<Output>{m.loss}, {m.train});
      if (!r.ok()) return Fail(r.status());
      const double loss = (*r)[0].scalar_as<double>();
      loss_sum += loss;
      bar.Update(step + 1, loss);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double acc = 0, test_loss = 0;
    Status es = Evaluate(session, m, *test, &acc, &test_loss);
    if (!es.ok()) return Fail(es);
    char suffix[64];
    std::snprintf(suffix, sizeof suffix, "test acc %.4f", acc);
    bar.Finish(suffix);
    const double train_loss = loss_sum / steps_per_epoch, sps = steps_per_epoch / secs;
    total_steps += steps_per_epoch;
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
  Status ps = WriteSvgPlot(run_dir + "/curves.svg",
                           {Panel{"loss", "epoch", {train_curve, test_curve}},
                            Panel{"test accuracy", "epoch", {acc_curve}}});
  if (!ps.ok()) return Fail(ps);
  const double sps = total_steps / total_train_secs;
  if (json) {
    JsonLine().Add("model", mo.model).Add("epochs", epochs).Add("test_accuracy", last_acc)
        .Add("train_steps_per_sec", sps).Add("epoch_seconds", epoch_secs).Print();
  } else {
    std::printf("final test accuracy %.4f after %lld epochs (%.1f steps/s); metrics in %s/metrics.csv, "
                "plot in %s/curves.svg\n", last_acc, (long long)epochs, sps, run_dir.c_str(), run_dir.c_str());
  }
  return 0;
}
