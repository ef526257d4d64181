// The tutorial comment at the top of each public header, copied here so it
// keeps compiling (and, where it can run in one process, running) as the API
// changes. Lines a comment elides with "..." are filled in with the least
// that makes the snippet whole; everything else is the comment's text.
#include <catch2/catch.hpp>

#include "shardflow/checkpoint.h"
#include "shardflow/checkpoint_ops.h"
#include "shardflow/cluster.h"
#include "shardflow/control_flow.h"
#include "shardflow/embedding.h"
#include "shardflow/graph.h"
#include "shardflow/graph_io.h"
#include "shardflow/npy.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/queue_ops.h"
#include "shardflow/queue_runner.h"
#include "shardflow/replication.h"
#include "shardflow/session.h"
#include "tests/support/temp_dir.h"

using namespace sf;

TEST_CASE("Tutorial: shardflow/graph.h and shardflow/ops.h", "[tutorial]") {
  sf::Graph g;                                   // uses the standard ops
  auto x  = sf::ops::Placeholder(g, sf::DType::kFloat32, {-1, 784}, "x");
  auto w1 = sf::ops::Variable(g, "w1", sf::ops::TruncatedNormal(g, {784, 512}, 0.05, 1));
  auto b1 = sf::ops::Variable(g, "b1", sf::ops::Zeros(g, sf::DType::kFloat32, {512}));
  auto h  = sf::ops::Relu(g, sf::ops::MatMul(g, x, w1) + b1);
  // ... (filled in)
  auto loss = sf::ops::Mean(g, h);
  auto train = sf::MomentumOptimizer(0.05, 0.9).Minimize(g, loss);
  REQUIRE(train.ok());
  auto init = sf::ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Tensor batch = Tensor::Zeros(DType::kFloat32, {4, 784});
  sf::Session s(g);  REQUIRE(s.Run({}, {}, {init}).ok());
  auto r = s.Run({{x, batch}}, {loss}, {*train});
  REQUIRE(r.ok());
}

TEST_CASE("Tutorial: shardflow/optimizers.h", "[tutorial]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 2}, "x");
  auto y = ops::Placeholder(g, DType::kFloat32, {-1, 1}, "y");
  auto w = ops::Variable(g, "w", ops::Zeros(g, DType::kFloat32, {2, 1}));
  auto loss = ops::Mean(g, ops::Square(g, ops::MatMul(g, x, w) - y));
  auto train = sf::MomentumOptimizer(0.01, 0.9).Minimize(g, loss);
  REQUIRE(train.ok());
  Session session(g);
  REQUIRE(session.Run({}, {}, {ops::GlobalVariablesInitializer(g)}).ok());
  Tensor xb = Tensor::FromVector(std::vector<float>{1, 2}, {1, 2}), yb = Tensor::FromVector(std::vector<float>{1}, {1, 1});
  REQUIRE(session.Run({{x, xb}, {y, yb}}, {loss}, {*train}).ok());
}

TEST_CASE("Tutorial: shardflow/control_flow.h", "[tutorial]") {
  Graph g;
  auto x = ops::Const(g, 3);
  auto zero = ops::Const(g, 0);
  auto r = sf::Cond(g, ops::Less(g, x, zero),
                    [&](Graph& g) { return std::vector<Output>{ops::Neg(g, x)}; },
                    [&](Graph& g) { return std::vector<Output>{x}; });
  auto loop = sf::WhileLoop(g,
      [](Graph& g, const std::vector<Output>& v) { return ops::Less(g, v[0], ops::Const(g, 10)); },
      [](Graph& g, const std::vector<Output>& v) {
        return std::vector<Output>{ops::Add(g, v[0], ops::Const(g, 1))}; },
      {ops::Const(g, 0)}, {"count"});
  REQUIRE(loop.ok());
  REQUIRE(g.status().ok());
  Session s(g);
  auto out = s.Run({}, {r[0], (*loop)[0]});
  REQUIRE(out.ok());
  CHECK((*out)[0].scalar_as<int>() == 3);
  CHECK((*out)[1].scalar_as<int>() == 10);
}

TEST_CASE("Tutorial: shardflow/embedding.h", "[tutorial]") {
  Graph g;
  sf::EmbeddingTableOptions o;
  o.num_shards = 4;                                    // one per device
  auto table = sf::NewEmbeddingTable(g, "items", 10'000, 32, o);  // 10'000'000 in the comment
  auto ids = sf::ops::Placeholder(g, sf::DType::kInt64, {-1, 8}, "ids");
  auto emb = sf::ops::EmbeddingLookup(g, table, ids, "sum");  // [batch, 32]
  auto loss = ops::Sum(g, emb);                        // ...
  auto train = sf::GradientDescentOptimizer(0.1).Minimize(g, loss);  // sparse for the table
  REQUIRE(train.ok());
  REQUIRE(g.status().ok());
  Session s(g);
  REQUIRE(s.Run({}, {}, {ops::GlobalVariablesInitializer(g)}).ok());
  Tensor batch = Tensor::FromVector(std::vector<int64_t>{0, 1, 2, 3, 9999, 5, 6, 7}, {1, 8});
  auto r = s.Run({{ids, batch}}, {emb}, {*train});
  REQUIRE(r.ok());
  CHECK((*r)[0].shape() == Shape{1, 32});
}

TEST_CASE("Tutorial: shardflow/queue_ops.h and shardflow/queue_runner.h", "[tutorial]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  ops::QueueOptions o;  o.shapes = {{2}};  o.capacity = 100;
  auto q = ops::FIFOQueue(g, {DType::kFloat32}, o);
  auto enq = ops::QueueEnqueue(g, q, {x}, 0, "enqueue");
  auto batch = ops::QueueDequeueMany(g, q, 32, 0, "batch")[0];
  ops::QueueClose(g, q, false, "close");
  REQUIRE(enq.valid());
  REQUIRE(g.status().ok());
  Session session(g);
  std::atomic<int> fed{0};
  auto feeds = [&](int) -> Result<FeedMap> {
    if (fed++ >= 64) return OutOfRange("input exhausted");
    return FeedMap{{"x", Tensor::FromVector(std::vector<float>{1, 2}, {2})}};
  };
  QueueRunnerOptions ro;  ro.parallel = 4;  ro.close_target = "close";
  QueueRunner r(session, {"enqueue"}, feeds, ro);
  REQUIRE(r.Start().ok());
  int batches = 0;
  for (auto b = session.Run({}, {batch}); b.ok(); b = session.Run({}, {batch})) ++batches;
  // the loop ends with OutOfRange once the queue is closed and drained
  Status s = r.Join();
  REQUIRE(s.ok());
  CHECK(batches == 2);
}

TEST_CASE("Tutorial: shardflow/checkpoint_ops.h", "[tutorial]") {
  testing::TempDir dir("tutorial_ckpt");
  Graph g;
  auto v = ops::Variable(g, "v", ops::Zeros(g, DType::kFloat32, {3}));
  auto step = ops::Placeholder(g, DType::kInt64, {}, "step");
  auto init = ops::GlobalVariablesInitializer(g);
  auto save = sf::ops::SaveVariables(g, dir.path, step);     // int64 id per run
  auto restore = sf::ops::RestoreVariables(g, dir.path);      // a target node
  REQUIRE(g.status().ok());
  Session s(g);
  REQUIRE(s.Run({}, {}, {init}).ok());
  REQUIRE(s.Run({{"step", sf::Tensor::Scalar<int64_t>(100)}}, {save}).ok());
  REQUIRE(s.Run({}, {}, {restore}).ok());
  REQUIRE(s.Run({}, {v}).ok());
}

TEST_CASE("Tutorial: shardflow/replication.h", "[tutorial]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 1}, "x");
  auto w = ops::Variable(g, "w", ops::Zeros(g, DType::kFloat32, {1, 1}));
  sf::GradientDescentOptimizer sgd(0.1);
  sf::SyncReplicas sync(sgd, {/*replicas_to_aggregate=*/1, /*total_num_replicas=*/1});
  auto loss_of_replica_r = ops::Mean(g, ops::MatMul(g, x, w));
  const int r = 0;
  auto t = sync.Minimize(g, loss_of_replica_r, r);          // once per replica
  REQUIRE(t.ok());
  REQUIRE(g.status().ok());
  Session session(g);
  REQUIRE(session.Run({}, {}, {ops::GlobalVariablesInitializer(g)}).ok());
  Tensor xb = Tensor::FromVector(std::vector<float>{1, 2}, {2, 1});
  // each step of replica r:
  int64_t token = session.Run({}, {t->global_step})->at(0).data<int64_t>()[0];
  auto out = session.Run({{x, xb}, {t->step_tag, sf::Tensor::Scalar<int64_t>(token)}},
                         {t->counted_in[0]}, {t->train_op});           // -1: this gradient was stale
  REQUIRE(out.ok());
  CHECK((*out)[0].scalar_as<int64_t>() == token);
}

TEST_CASE("Tutorial: shardflow/checkpoint.h", "[tutorial]") {
  testing::TempDir tmp("tutorial_saver");
  Graph g;
  auto v = ops::Variable(g, "v", ops::Zeros(g, DType::kFloat32, {3}));
  Session session(g);
  REQUIRE(session.Run({}, {}, {ops::GlobalVariablesInitializer(g)}).ok());
  const int64_t step = 7;
  auto run = [&]() -> Status {
    sf::Saver saver(&session, tmp.path + "/ckpt", /*keep_last=*/3);
    SF_ASSIGN_OR_RETURN(int64_t id, saver.Save(step));          // all variables
    SF_RETURN_IF_ERROR(saver.Restore());                         // the newest readable
    SF_ASSIGN_OR_RETURN(auto dir, sf::CheckpointDir::Open(tmp.path + "/ckpt"));
    SF_ASSIGN_OR_RETURN(auto info, dir->Describe(id));           // step, variables
    if (info.global_step != step || info.variables.size() != 1) return Internal("unexpected summary");
    SF_ASSIGN_OR_RETURN(Tensor value, dir->Read(id, info.variables[0].name));
    return value.num_elements() == 3 ? dir->Verify(id) : Internal("unexpected value");
  };
  Status s = run();
  INFO(s.ToString());
  REQUIRE(s.ok());
  REQUIRE(v.valid());
}

TEST_CASE("Tutorial: shardflow/graph_io.h and shardflow/npy.h", "[tutorial]") {
  testing::TempDir tmp("tutorial_io");
  const std::string model = tmp.path + "/model.capnp", file = tmp.path + "/y.npy";
  auto run = [&]() -> Status {
    Graph g;
    auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
    auto y = ops::Identity(g, x + x, "y");
    SF_RETURN_IF_ERROR(sf::SaveGraph(g, model));
    sf::Graph g2;
    SF_RETURN_IF_ERROR(sf::LoadGraph(model, &g2));
    Session s(g2);
    SF_ASSIGN_OR_RETURN(auto out, s.Run({{"x", Tensor::FromVector(std::vector<float>{1, 2}, {2})}}, {"y"}));
    SF_RETURN_IF_ERROR(sf::WriteNpy(file, out[0]));
    SF_ASSIGN_OR_RETURN(sf::Tensor back, sf::ReadNpy(file));
    return back.ToVector<float>() == std::vector<float>{2, 4} && y.valid() ? Status::OK() : Internal("wrong value");
  };
  Status s = run();
  INFO(s.ToString());
  REQUIRE(s.ok());
}

// shardflow/cluster.h needs node processes and credentials: compiled, and
// run by the cluster tests' own programs.
[[maybe_unused]] static Status ClusterTutorial(const Graph& g, const Tensor& x) {
  sf::ClusterOptions o;
  o.address = "127.0.0.1:7000";
  o.tls_dir = "tls";
  auto s = sf::ClusterSession::Connect(g, o);   // same Run API as Session
  SF_RETURN_IF_ERROR(s.status());
  auto out = (*s)->Run({{"x", x}}, {"loss"});
  return out.status();
}
