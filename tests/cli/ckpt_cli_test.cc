// `shardflow ckpt ls|inspect|verify|export` on a checkpoint written by a session.
#include <catch2/catch.hpp>

#include <string>

#include "shardflow/embedding.h"
#include "shardflow/npy.h"
#include "shardflow/optimizers.h"
#include "shardflow/ops.h"
#include "shardflow/session.h"
#include "storage/checkpoint.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

using namespace sf;
using sf::testing::RunCommand;
using sf::testing::TempDir;

namespace {

std::string Cli(const std::string& args) { return std::string(SF_BIN_DIR) + "/shardflow ckpt " + args + " 2>&1"; }

bool Has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Two committed checkpoints of w (2x2 float) and n (int64 scalar).
void WriteCheckpoints(const std::string& dir) {
  Graph g;
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1, 2, 3, 4}, {2, 2}));
  ops::Variable(g, "layer/n", ops::Const(g, static_cast<int64_t>(7)));
  auto add = ops::Assign(g, ops::VariableHandle(w), ops::Const(g, std::vector<float>{5, 6, 7, 8}, {2, 2}));
  Operation init = ops::GlobalVariablesInitializer(g);
  REQUIRE(g.status().ok());
  Session s(g);
  REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
  REQUIRE(s.Save(dir, 10).ok());
  REQUIRE(s.Run({}, std::vector<Output>{add}).ok());
  REQUIRE(s.Save(dir, 20).ok());
}

}  // namespace

TEST_CASE("shardflow ckpt ls, inspect, verify and export", "[cli][checkpoint]") {
  TempDir dir("sf_ckpt_cli");
  const std::string ck = dir / "ck";
  WriteCheckpoints(ck);

  auto ls = RunCommand(Cli("ls " + ck));
  CHECK(ls.code == 0);
  CHECK(Has(ls.out, "checkpoint 1  step 10  variables 2"));
  CHECK(Has(ls.out, "checkpoint 2  step 20  variables 2"));

  auto inspect = RunCommand(Cli("inspect " + ck + " --id 1"));
  CHECK(inspect.code == 0);
  CHECK(Has(inspect.out, "step 10"));
  CHECK(Has(inspect.out, "w  float32  [2,2]"));
  CHECK(Has(inspect.out, "layer/n  int64  []"));

  auto verify = RunCommand(Cli("verify " + ck));
  CHECK(verify.code == 0);
  CHECK(Has(verify.out, "checkpoint 2 OK"));

  auto exp = RunCommand(Cli("export " + ck + " --id 1 --out " + (dir / "out")));
  CHECK(exp.code == 0);
  auto w = ReadNpy(dir / "out/w.npy");
  REQUIRE(w.ok());
  CHECK(w->ToVector<float>() == std::vector<float>{1, 2, 3, 4});
  auto n = ReadNpy(dir / "out/layer.n.npy");
  REQUIRE(n.ok());
  CHECK(n->scalar_as<int64_t>() == 7);
  auto latest = RunCommand(Cli("export " + ck + " --out " + (dir / "out2")));
  CHECK(latest.code == 0);
  CHECK(ReadNpy(dir / "out2/w.npy")->ToVector<float>() == std::vector<float>{5, 6, 7, 8});
}

TEST_CASE("shardflow ckpt reports corruption and bad usage", "[cli][checkpoint]") {
  TempDir dir("sf_ckpt_cli");
  const std::string ck = dir / "ck";
  WriteCheckpoints(ck);
  {
    auto kv = OpenRocksDb(ck);
    REQUIRE(kv.ok());
    auto keys = (*kv)->Keys("data/00000000000000000002/w#");
    REQUIRE(keys.ok());
    REQUIRE(!keys->empty());
    std::string v = *(*kv)->Get((*keys)[0]);
    v.back() ^= 0x10;
    REQUIRE((*kv)->Put((*keys)[0], v).ok());
  }
  auto bad = RunCommand(Cli("verify " + ck + " --id 2"));
  CHECK(bad.code == 1);
  CHECK(Has(bad.out, "checkpoint 2"));
  CHECK(Has(bad.out, "variable 'w'"));
  CHECK(Has(bad.out, "block 0"));
  CHECK(RunCommand(Cli("verify " + ck + " --id 1")).code == 0);

  auto missing = RunCommand(Cli("ls " + (dir / "nope")));
  CHECK(missing.code == 1);
  CHECK(Has(missing.out, dir / "nope"));
  CHECK(RunCommand(Cli("frobnicate " + ck)).code == 2);
  CHECK(RunCommand(Cli("export " + ck)).code == 2);
  CHECK(RunCommand(Cli("inspect " + ck + " --id x")).code == 2);
}

TEST_CASE("shardflow ckpt inspect shows a hash table's rows and counters", "[cli][checkpoint][hash_embedding]") {
  TempDir dir("sf_ckpt_cli_hash");
  const std::string ck = dir / "ck";
  {
    Graph g;
    HashEmbeddingTableOptions o;
    o.num_shards = 2;
    o.min_count = 2;
    auto t = NewHashEmbeddingTable(g, "feats", 3, o);
    auto ids = ops::Placeholder(g, DType::kInt64, {-1, 1}, "ids");
    auto train = AdagradOptimizer(0.1).Minimize(g, ops::Sum(g, ops::EmbeddingLookup(g, t, ids)));
    REQUIRE(train.ok());
    Operation init = ops::GlobalVariablesInitializer(g);
    REQUIRE(g.status().ok());
    Session s(g);
    REQUIRE(s.Run({}, std::vector<Output>{}, {init}).ok());
    for (int step = 0; step < 2; ++step)  // -42 twice: admitted at its second step; 3 once: rejected
      REQUIRE(s.Run({{"ids", Tensor::FromVector(std::vector<int64_t>{-42, step == 0 ? 3 : -42}, {2, 1})}},
                    std::vector<Output>{}, {*train}).ok());
    REQUIRE(s.Save(ck, 2).ok());
  }
  auto inspect = RunCommand(Cli("inspect " + ck));
  INFO(inspect.out);
  CHECK(inspect.code == 0);
  CHECK(Has(inspect.out, "feats/part_0  int64"));
  CHECK(Has(inspect.out, "hash table shard 0 of 2  dim 3"));
  CHECK(Has(inspect.out, "optimizer Adagrad"));
  CHECK(Has(inspect.out, "id -42  last_seen 1  freq 2"));
  CHECK(Has(inspect.out, "rejected 2"));  // -42 and 3 at step 0, both in shard 0
}
