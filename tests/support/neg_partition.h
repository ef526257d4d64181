// A one-op partition (y = -x, x float32 [2]) and the RegisterPartition a
// session sends for it, for tests that play a session by hand.
#pragma once

#include <cstdint>
#include <string>

#include <catch2/catch.hpp>

#include "net/messages.h"
#include "shardflow/graph_io.h"
#include "shardflow/ops.h"

namespace sf::testing {

struct NegPartition {
  Graph g;
  Output x, y;
  std::string bytes;

  NegPartition() {
    x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
    y = ops::Neg(g, x);
    REQUIRE(g.status().ok());
    auto b = GraphToBytes(g);
    REQUIRE(b.ok());
    bytes = *b;
  }
  // Registers it as partition `handle` of session `session` on the node at
  // `node` (the session's only task).
  net::RegisterPartition Registration(uint64_t session, uint64_t handle, const std::string& node) const {
    net::RegisterPartition r;
    r.session_id = session;
    r.handle = handle;
    r.device = "/job:worker/task:0/device:CPU:0";
    r.tasks = {{"task0", node}};
    r.graph_def = bytes;
    r.feeds = {{"x", 0}};
    r.fetches = {{g.node(y.node).name, 0}};
    r.targets = {"x", g.node(y.node).name};
    return r;
  }
};

}  // namespace sf::testing
