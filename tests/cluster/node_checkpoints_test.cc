// NodeCheckpoints without a node: pieces and records on disk, exact values
// back, retention, and the bounds a peer meets (a queue of at most
// kMaxQueued requests, answers for what waits at Stop, paths kept under
// the root).
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>

#include "cluster/node_checkpoints.h"
#include "tests/support/temp_dir.h"
#include "tests/support/wait.h"

using namespace sf;
using namespace std::chrono_literals;
using cluster::NodeCheckpoints;

namespace {

// Variables in a map, read and assigned through the hooks (optionally held
// at a gate, to keep a request running).
struct FakeVariables {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Tensor> values;  // GUARDED_BY(mu)
  bool gate_closed = false;              // GUARDED_BY(mu)
  int reads_waiting = 0;                 // GUARDED_BY(mu)

  NodeCheckpoints::Hooks Hooks(const std::string& root) {
    return {root, "test-node",
            [this](const std::vector<std::string>& names, std::function<void(NodeCheckpoints::Values)> done) {
              NodeCheckpoints::Values out;
              {
                std::unique_lock<std::mutex> l(mu);
                ++reads_waiting;
                cv.notify_all();
                cv.wait(l, [&] { return !gate_closed; });
                --reads_waiting;
                for (const auto& n : names)
                  if (values.count(n)) out.emplace_back(n, values[n]);
              }
              done(std::move(out));
            },
            [this](NodeCheckpoints::Values v, std::function<void(Status)> done) {
              {
                std::lock_guard<std::mutex> l(mu);
                for (auto& [n, t] : v) values[n] = std::move(t);
              }
              done(Status::OK());
            }};
  }
};

Tensor Vec(std::vector<float> v) { return Tensor::FromVector<float>(v, {static_cast<int64_t>(v.size())}); }

std::vector<float> Floats(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements()); }

}  // namespace

TEST_CASE("NodeCheckpoints: pieces and records round-trip exact values, and retention deletes dropped pieces",
          "[cluster][checkpoint]") {
  testing::TempDir root("sf_node_pieces");
  FakeVariables vars;
  vars.values["a"] = Vec({1, 2, 3});
  vars.values["a/slot"] = Vec({0.5f});
  NodeCheckpoints ck(vars.Hooks(root.path));
  auto saved = ck.Save(net::SaveShards{"ck", 0x11, 0, 7, {"a", "a/slot", "never_initialised"}, {}});
  INFO(saved.status().ToString());
  REQUIRE(saved.ok());
  CHECK(saved->variables == 2);  // the uninitialised one is left out, as a client's Save does
  CHECK(saved->bytes == 16);
  CHECK(std::filesystem::exists(root.path + "/" + cluster::PiecePath("ck", 0x11, 0)));
  auto committed = ck.Commit(net::CommitShards{"ck", 0x11, 1, 7, 1});
  REQUIRE(committed.ok());
  vars.values["a"] = Vec({9, 9, 9});
  auto restored = ck.Restore(net::RestoreShards{"ck", 0, -1, 0, {"a", "a/slot"}});
  INFO(restored.status().ToString());
  REQUIRE(restored.ok());
  CHECK(restored->token == 0x11);
  CHECK(restored->id == committed->id);
  CHECK(restored->global_step == 7);
  CHECK(Floats(vars.values["a"]) == std::vector<float>{1, 2, 3});
  // A second checkpoint with keep_last 1 drops the first, pieces included.
  REQUIRE(ck.Save(net::SaveShards{"ck", 0x22, 0, 8, {"a"}, {}}).ok());
  auto second = ck.Commit(net::CommitShards{"ck", 0x22, 1, 8, 1});
  REQUIRE(second.ok());
  CHECK(second->dropped == std::vector<uint64_t>{0x11});
  CHECK(!std::filesystem::exists(root.path + "/" + cluster::PiecePath("ck", 0x11, 0)));
  CHECK(ck.Restore(net::RestoreShards{"ck", 0, committed->id, 0, {"a"}}).status().code() == Code::kNotFound);
  // A variable the piece does not hold is named.
  auto missing = ck.Restore(net::RestoreShards{"ck", 0, -1, 0, {"a/slot"}});
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK(missing.status().message().find("a/slot") != std::string::npos);
  // A task the checkpoint does not have.
  CHECK(ck.Restore(net::RestoreShards{"ck", 0, -1, 3, {"a"}}).status().code() == Code::kInvalidArgument);
}

TEST_CASE("NodeCheckpoints: without a root, or outside it, nothing is written", "[cluster][checkpoint]") {
  FakeVariables vars;
  vars.values["a"] = Vec({1});
  NodeCheckpoints none(vars.Hooks(""));
  auto r = none.Save(net::SaveShards{"ck", 1, 0, 0, {"a"}, {}});
  CHECK(r.status().code() == Code::kFailedPrecondition);
  CHECK(r.status().message().find("--checkpoint-dir") != std::string::npos);
  testing::TempDir root("sf_node_pieces_bad");
  NodeCheckpoints ck(vars.Hooks(root.path));
  for (const std::string bad : {"/abs", "../x", "x/../../y", ""})
    CHECK(ck.Save(net::SaveShards{bad, 1, 0, 0, {"a"}, {}}).status().code() == Code::kInvalidArgument);
  CHECK(ck.Save(net::SaveShards{"ck", 0, 0, 0, {"a"}, {}}).status().code() == Code::kInvalidArgument);
  CHECK(ck.Save(net::SaveShards{"ck", 1, -1, 0, {"a"}, {}}).status().code() == Code::kInvalidArgument);
  CHECK(ck.Commit(net::CommitShards{"ck", 1, 0, 0, 0}).status().code() == Code::kInvalidArgument);
  CHECK(ck.Commit(net::CommitShards{"ck", 1, 1, 0, -2}).status().code() == Code::kInvalidArgument);
}

TEST_CASE("NodeCheckpoints: at most kMaxQueued requests wait, and Stop answers them", "[cluster][checkpoint]") {
  testing::TempDir root("sf_node_pieces_queue");
  FakeVariables vars;
  vars.values["a"] = Vec({1});
  vars.gate_closed = true;  // the first request holds the thread in its read
  NodeCheckpoints ck(vars.Hooks(root.path));
  std::mutex mu;
  std::vector<Result<net::ShardsDone>> replies;  // GUARDED_BY(mu)
  auto done = [&](Result<net::ShardsDone> b) {
    std::lock_guard<std::mutex> l(mu);
    replies.push_back(std::move(b));
  };
  REQUIRE(ck.Post(net::SaveShards{"ck", 1, 0, 0, {"a"}, {}}, done).ok());
  {
    std::unique_lock<std::mutex> l(vars.mu);
    REQUIRE(vars.cv.wait_for(l, 10s, [&] { return vars.reads_waiting == 1; }));
  }
  for (size_t i = 0; i < NodeCheckpoints::kMaxQueued; ++i)
    REQUIRE(ck.Post(net::SaveShards{"ck", 2 + i, 0, 0, {"a"}, {}}, done).ok());
  Status full = ck.Post(net::SaveShards{"ck", 99, 0, 0, {"a"}, {}}, done);
  CHECK(full.code() == Code::kResourceExhausted);
  // Stop: the running one finishes once let go; every queued one is answered Unavailable.
  std::thread stopper([&] { ck.Stop(); });
  // Stopped once a Post (refused as full until then) is refused as stopping.
  REQUIRE(testing::WaitFor(
      [&] { return ck.Post(net::SaveShards{"ck", 98, 0, 0, {"a"}, {}}, done).code() == Code::kUnavailable; }, 10s));
  {
    std::lock_guard<std::mutex> l(vars.mu);
    vars.gate_closed = false;
    vars.cv.notify_all();
  }
  stopper.join();
  std::lock_guard<std::mutex> l(mu);
  REQUIRE(replies.size() == 1 + NodeCheckpoints::kMaxQueued);
  CHECK(replies[0].ok());
  for (size_t i = 1; i < replies.size(); ++i) CHECK(replies[i].status().code() == Code::kUnavailable);
  CHECK(ck.Post(net::SaveShards{"ck", 1, 0, 0, {"a"}, {}}, done).code() == Code::kUnavailable);
}
