// Runs the `shardflow` binary on graphs saved by the test.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/temp_dir.h"
#include "tests/support/trace_file.h"
#include "shardflow/graph_io.h"
#include "shardflow/npy.h"
#include "shardflow/ops.h"

using namespace sf;
using sf::testing::TempDir;

namespace {


std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct CliResult {
  int code = -1;
  std::string out, err;
};

// Runs `shardflow ARGS` with stdout and stderr captured in dir.
CliResult RunCli(const TempDir& dir, const std::string& args) {
  const std::string cmd = std::string(SF_BIN_DIR) + "/shardflow " + args + " >" + (dir / "stdout") +
                          " 2>" + (dir / "stderr");
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadFile(dir / "stdout");
  r.err = ReadFile(dir / "stderr");
  return r;
}

bool OneLineError(const CliResult& r, const std::string& text) {
  INFO("stderr: " << r.err);
  return r.err.find(text) != std::string::npos && r.err.rfind("shardflow: ", 0) == 0 &&
         r.err.find('\n') == r.err.size() - 1;
}

// x (float32 [?,2]) -> y = Identity(x); scope/c = int32 constant; group runs after y.
std::string SaveTestGraph(const TempDir& dir) {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {-1, 2}, "x");
  auto y = ops::Identity(g, x, "y");
  {
    auto scope = g.NameScope("scope");
    ops::Const(g, Tensor::FromVector<int32_t>({4, 5, 6}), "c");
  }
  ops::NoOp(g, {y.node}, "group");
  REQUIRE(g.status().ok());
  const std::string path = dir / "g.capnp";
  REQUIRE(SaveGraph(g, path).ok());
  return path;
}

}  // namespace

TEST_CASE("shardflow run feeds .npy files and writes the fetches", "[cli]") {
  TempDir dir("sf_cli_test");
  const std::string graph = SaveTestGraph(dir);
  REQUIRE(WriteNpy(dir / "x.npy", Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2})).ok());
  auto r = RunCli(dir, "run --graph " + graph + " --feed x=" + (dir / "x.npy") +
                           " --fetch y --fetch scope/c:0 --out " + (dir / "out"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto y = ReadNpy(dir / "out/y.npy");
  REQUIRE(y.ok());
  CHECK(y->shape() == Shape{3, 2});
  CHECK(y->ToVector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  auto c = ReadNpy(dir / "out/scope.c-0.npy");
  REQUIRE(c.ok());
  CHECK(c->dtype() == DType::kInt32);
  CHECK(c->ToVector<int32_t>() == std::vector<int32_t>{4, 5, 6});
  CHECK(r.out.find("scope.c-0.npy int32[3]") != std::string::npos);
}

TEST_CASE("shardflow run --trace writes the step's timeline", "[cli][trace]") {
  TempDir dir("sf_cli_test");
  const std::string graph = SaveTestGraph(dir);
  REQUIRE(WriteNpy(dir / "x.npy", Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, {3, 2})).ok());
  auto r = RunCli(dir, "run --graph " + graph + " --feed x=" + (dir / "x.npy") + " --fetch y --target group --out " +
                           (dir / "out") + " --trace " + (dir / "t.json"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("wrote the step's trace to " + (dir / "t.json")) != std::string::npos);
  testing::TraceFile t;
  REQUIRE(testing::ReadTraceFile(dir / "t.json", &t) == "");
  const auto names = t.OpNames();
  CHECK(names.count("y") == 1);
  CHECK(names.count("group") == 1);
  CHECK(t.Of("step").size() == 1);
  // A file that cannot be written is the run's error, naming it.
  auto bad = RunCli(dir, "run --graph " + graph + " --feed x=" + (dir / "x.npy") + " --target group --trace " +
                             (dir / "missing/t.json"));
  CHECK(bad.code != 0);
  CHECK(OneLineError(bad, dir / "missing/t.json"));
}

TEST_CASE("shardflow run --gradients-of writes grad_X.npy", "[cli]") {
  TempDir dir("sf_cli_test");
  const std::string graph = SaveTestGraph(dir);
  REQUIRE(WriteNpy(dir / "x.npy", Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2})).ok());
  auto r = RunCli(dir, "run --graph=" + graph + " --feed x=" + (dir / "x.npy") +
                           " --gradients-of y --wrt x --out " + (dir / "out"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto dx = ReadNpy(dir / "out/grad_x.npy");
  REQUIRE(dx.ok());
  CHECK(dx->shape() == Shape{2, 2});
  CHECK(dx->ToVector<float>() == std::vector<float>{1, 1, 1, 1});
}

TEST_CASE("shardflow run with only a target needs no --out", "[cli]") {
  TempDir dir("sf_cli_test");
  const std::string graph = SaveTestGraph(dir);
  REQUIRE(WriteNpy(dir / "x.npy", Tensor::FromVector<float>({1, 2}, {1, 2})).ok());
  auto r = RunCli(dir, "run --graph " + graph + " --feed x=" + (dir / "x.npy") + " --target group");
  INFO(r.err);
  CHECK(r.code == 0);
}

TEST_CASE("shardflow graph prints text and Graphviz", "[cli]") {
  TempDir dir("sf_cli_test");
  const std::string graph = SaveTestGraph(dir);
  auto r = RunCli(dir, "graph " + graph);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("x = Placeholder() {dtype=float32, shape=[?,2]} -> float32[?,2]\n") !=
        std::string::npos);
  CHECK(r.out.find("y = Identity(x) -> float32[?,2]\n") != std::string::npos);
  CHECK(r.out.find("scope/c = Const() {value=int32[3] {4, 5, 6}} -> int32[3]\n") != std::string::npos);
  CHECK(r.out.find("group = NoOp(^y) -> ()\n") != std::string::npos);

  r = RunCli(dir, "graph --dot " + graph);
  REQUIRE(r.code == 0);
  CHECK(r.out.rfind("digraph shardflow {", 0) == 0);
  CHECK(r.out.find("n1 [label=\"y\\nIdentity\"];") != std::string::npos);
  CHECK(r.out.find("n0 -> n1 [label=\"float32[?,2]\"];") != std::string::npos);
  CHECK(r.out.find("n1 -> n3 [style=dashed];") != std::string::npos);
}

TEST_CASE("shardflow ops and --help", "[cli]") {
  TempDir dir("sf_cli_test");
  auto r = RunCli(dir, "ops");
  REQUIRE(r.code == 0);
  CHECK(r.out.find("Identity") != std::string::npos);
  CHECK(r.out.find("Returns its input.") != std::string::npos);
  for (const char* cmd : {"--help", "run --help", "graph --help", "ops --help"}) {
    r = RunCli(dir, cmd);
    INFO(cmd);
    CHECK(r.code == 0);
    CHECK(r.out.find("usage: shardflow") != std::string::npos);
    CHECK(r.err.empty());
  }
}

TEST_CASE("docs/OPS.md is the table shardflow ops --markdown prints", "[cli]") {
  TempDir dir("sf_cli_test");
  auto r = RunCli(dir, "ops --markdown");
  REQUIRE(r.code == 0);
  // The doc is a title and an introduction (4 lines), then the generated table.
  std::string doc = ReadFile(std::string(SF_SOURCE_DIR) + "/docs/OPS.md");
  size_t at = 0;
  for (int i = 0; i < 4 && at != std::string::npos; ++i) at = doc.find('\n', at) + 1;
  REQUIRE(at != std::string::npos);
  INFO("regenerate it: (head -4 docs/OPS.md; build/bin/shardflow ops --markdown) > /tmp/ops && mv /tmp/ops docs/OPS.md");
  CHECK(doc.substr(at) == r.out);
}

TEST_CASE("shardflow errors are one line with exit code 2 (usage) or 1 (run)", "[cli]") {
  TempDir dir("sf_cli_test");
  const std::string graph = SaveTestGraph(dir);
  REQUIRE(WriteNpy(dir / "x.npy", Tensor::FromVector<float>({1, 2}, {1, 2})).ok());
  REQUIRE(WriteNpy(dir / "xi.npy", Tensor::FromVector<int32_t>({1, 2}, {1, 2})).ok());
  const std::string base = "run --graph " + graph + " --out " + (dir / "out") + " ";

  auto r = RunCli(dir, "");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "no command given"));

  r = RunCli(dir, "frobnicate");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "unknown command 'frobnicate'"));

  r = RunCli(dir, base + "--feed x --fetch y");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "bad --feed 'x': expected NAME=FILE.npy"));

  r = RunCli(dir, base + "--fetch y --bogus 3");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "unknown option '--bogus'"));

  r = RunCli(dir, "run --fetch y --out " + (dir / "out"));
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "--graph G.capnp is required"));

  r = RunCli(dir, "run --graph " + graph + " --fetch y");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "--out DIR is required"));

  r = RunCli(dir, base + "--gradients-of y");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "--gradients-of and --wrt go together"));

  r = RunCli(dir, base + "--fetch a/b --fetch a.b");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "would both be written to a.b.npy"));

  r = RunCli(dir, "run --graph " + (dir / "missing.capnp") + " --fetch y --out " + (dir / "out"));
  CHECK(r.code == 1);
  CHECK(OneLineError(r, "missing.capnp' does not exist"));

  r = RunCli(dir, "graph " + (dir / "x.npy"));
  CHECK(r.code == 1);
  CHECK(OneLineError(r, "x.npy"));

  r = RunCli(dir, base + "--feed x=" + (dir / "x.npy") + " --fetch nope");
  CHECK(r.code == 1);
  CHECK(OneLineError(r, "unknown fetch 'nope'"));

  r = RunCli(dir, base + "--feed x=" + (dir / "x.npy") + " --fetch group");
  CHECK(r.code == 1);
  CHECK(OneLineError(r, "node 'group' has no outputs to fetch; run it with --target"));

  r = RunCli(dir, "graph " + dir.path);
  CHECK(r.code == 1);
  CHECK(OneLineError(r, "is a directory"));

  r = RunCli(dir, base + "--feed x=" + (dir / "absent.npy") + " --fetch y");
  CHECK(r.code == 1);
  CHECK(OneLineError(r, "absent.npy' does not exist"));

  r = RunCli(dir, base + "--feed x=" + (dir / "xi.npy") + " --fetch y");
  CHECK(r.code == 1);
  CHECK(OneLineError(r, "x"));

  r = RunCli(dir, base + "--feed x=" + (dir / "x.npy") + " --gradients-of y --wrt x,nope");
  CHECK(r.code == 1);
  CHECK(OneLineError(r, "unknown --wrt tensor 'nope'"));
}

TEST_CASE("shardflow run computes MatMul and its gradients", "[cli]") {
  TempDir dir("sf_cli_test");
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, {-1, 2}, "x");
  auto w = ops::Const(g, Tensor::FromVector<double>({1, 2, 3, 4}, {2, 2}), "w");
  Output y;
  {
    auto scope = g.NameScope("dense");
    y = ops::MatMul(g, x, w);
  }
  ops::Sum(g, ops::Square(g, y));
  REQUIRE(g.status().ok());
  REQUIRE(y.name() == "dense/MatMul");
  REQUIRE(SaveGraph(g, dir / "m.capnp").ok());
  REQUIRE(WriteNpy(dir / "x.npy", Tensor::FromVector<double>({1, 0, 0, 2}, {2, 2})).ok());
  auto r = RunCli(dir, "run --graph " + (dir / "m.capnp") + " --feed x=" + (dir / "x.npy") +
                           " --fetch dense/MatMul --gradients-of Sum --wrt x,w --threads 2 --out " +
                           (dir / "out"));
  INFO(r.err);
  REQUIRE(r.code == 0);
  // y = x w = [[1,2],[6,8]]; loss = sum(y^2); dy = 2y; dx = dy w^T; dw = x^T dy.
  auto yv = ReadNpy(dir / "out/dense.MatMul.npy");
  REQUIRE(yv.ok());
  CHECK(yv->ToVector<double>() == std::vector<double>{1, 2, 6, 8});
  auto dx = ReadNpy(dir / "out/grad_x.npy");
  REQUIRE(dx.ok());
  CHECK(dx->ToVector<double>() == std::vector<double>{10, 22, 44, 100});
  auto dw = ReadNpy(dir / "out/grad_w.npy");
  REQUIRE(dw.ok());
  CHECK(dw->ToVector<double>() == std::vector<double>{2, 4, 24, 32});
}

TEST_CASE("shardflow node drain refuses bad usage and names an unreachable node", "[cli]") {
  TempDir dir("sf_cli_drain");
  REQUIRE(RunCli(dir, "certs init " + (dir / "tls")).code == 0);
  auto r = RunCli(dir, "node drain --tls-dir " + (dir / "tls"));
  CHECK(r.code == 2);
  CHECK(r.err.find("drain needs the node's HOST:PORT") != std::string::npos);
  r = RunCli(dir, "node drain 127.0.0.1:1 127.0.0.1:2 --tls-dir " + (dir / "tls"));
  CHECK(r.code == 2);
  CHECK(r.err.find("drain takes one address") != std::string::npos);
  r = RunCli(dir, "node drain 127.0.0.1:1");
  CHECK(r.code == 2);
  CHECK(r.err.find("give --tls-dir DIR or --insecure") != std::string::npos);
  r = RunCli(dir, "node drain 127.0.0.1:1 --insecure --tls-dir " + (dir / "tls"));
  CHECK(r.code == 2);
  CHECK(r.err.find("exactly one") != std::string::npos);
  // The members are etcd's: no node takes a drain from a peer.
  r = RunCli(dir, "node drain 127.0.0.1:1 --wait-s 0 --tls-dir " + (dir / "tls"));
  CHECK(r.code == 2);
  INFO(r.err);
  CHECK(r.err.find("drain needs --etcd") != std::string::npos);
}

TEST_CASE("shardflow refuses a malformed number naming its option, and takes a good one", "[cli]") {
  TempDir dir("sf_cli_numbers");
  const std::string graph = SaveTestGraph(dir);
  REQUIRE(WriteNpy(dir / "x.npy", Tensor::FromVector<float>({1, 2}, {1, 2})).ok());
  const std::string run = "run --graph " + graph + " --feed x=" + (dir / "x.npy") + " --fetch y --out " +
                          (dir / "out") + " --threads";
  // The value CLI11 alone would read as octal, clamp, or take as 0 is refused too.
  for (const char* bad : {" abc", " 1.5", " 99999999999999999999", " 0", " ''", "=0x10", ""}) {
    INFO("--threads" << bad);
    auto r = RunCli(dir, run + bad);
    CHECK(r.code == 2);
    CHECK(OneLineError(r, "--threads"));
  }
  // Base 10: "08" is eight (as octal, CLI11's own reading, it would be an error).
  auto r = RunCli(dir, run + "=08");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("y.npy float32[1,2]") != std::string::npos);

  r = RunCli(dir, "run --graph " + graph + " --graph " + graph + " --target group");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "--graph"));
  r = RunCli(dir, "run --graph " + graph + " --target");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "--target"));
  r = RunCli(dir, "run --graph " + graph + " --target group extra");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "unexpected argument 'extra'"));
  r = RunCli(dir, "ops --markdown --bogus=1");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "unknown option '--bogus'"));

  r = RunCli(dir, "ckpt ls " + (dir / "ck") + " --id 1e3");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "--id"));
  r = RunCli(dir, "ckpt ls " + (dir / "ck") + " --id 0");
  CHECK(r.code == 2);
  CHECK(OneLineError(r, "--id"));
}

TEST_CASE("shardflow node refuses malformed numbers naming the option", "[cli]") {
  TempDir dir("sf_cli_node_numbers");
  REQUIRE(RunCli(dir, "certs init " + (dir / "tls")).code == 0);
  const std::string node = "node --listen 127.0.0.1:0 --tls-dir " + (dir / "tls") + " ";
  // --lifetime-s: a node that took a bad value anyway stops by itself (and fails the test).
  for (const char* bad : {"--threads abc", "--heartbeat-ms 1.5", "--peer-timeout-ms 99999999999",
                          "--drain-timeout-s soon", "--drain-timeout-s -1", "--threads"}) {
    INFO(bad);
    auto r = RunCli(dir, node + "--lifetime-s 2 " + bad);
    CHECK(r.code == 2);
    const std::string flag = std::string(bad).substr(0, std::string(bad).find(' '));
    CHECK(r.err.rfind("shardflow node: ", 0) == 0);
    CHECK(r.err.find(flag) != std::string::npos);
  }
  auto r = RunCli(dir, node + "--lifetime-s 2 --log --bogus");
  CHECK(r.code == 2);
  CHECK(r.err.find("unknown option '--bogus'") != std::string::npos);
  r = RunCli(dir, "node drain 127.0.0.1:1 --wait-s abc --tls-dir " + (dir / "tls"));
  CHECK(r.code == 2);
  CHECK(r.err.find("--wait-s") != std::string::npos);
  r = RunCli(dir, "node --listen 127.0.0.1:0 drain 127.0.0.1:1 --tls-dir " + (dir / "tls"));
  CHECK(r.code == 2);
  CHECK(r.err.find("'node drain' takes no --listen") != std::string::npos);
  for (const char* help : {"node --help", "node drain --help", "help", "ckpt -h"}) {
    INFO(help);
    r = RunCli(dir, help);
    CHECK(r.code == 0);
    CHECK(r.out.find("usage: shardflow") != std::string::npos);
  }
  // A good invocation: the node serves, prints its line and stops by itself.
  // A repeated option takes its last value (launchers append to a base line).
  r = RunCli(dir, node + "--threads 1 --heartbeat-ms 50 --peer-timeout-ms 500 --lifetime-s 9 --lifetime-s 0.2");
  INFO(r.err);
  CHECK(r.code == 0);
  CHECK(r.out.find("listening on 127.0.0.1:") != std::string::npos);
}
