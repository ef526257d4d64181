#include <catch2/catch.hpp>

#include <set>

#include "graph/op_registry.h"
#include "graph/partition.h"
#include "graph/placement.h"
#include "shardflow/control_flow.h"
#include "shardflow/ops.h"
#include "tests/support/eval_graph.h"

using namespace sf;

namespace {

const std::string kA = "/job:worker/task:0/device:CPU:0";
const std::string kB = "/job:worker/task:1/device:CPU:0";

bool HasText(const Status& s, const std::string& text) { return s.message().find(text) != std::string::npos; }

std::string Str(const Node& n, const std::string& attr) { return n.attrs.Get<std::string>(attr).value(); }

std::set<std::string> OriginalNames(const PartitionGraph& p) {
  std::set<std::string> out;
  for (int id = 0; id < p.graph->num_nodes(); ++id)
    if (p.original_id[id] >= 0) out.insert(p.graph->node(id).name);
  return out;
}

std::vector<const Node*> NodesWithOp(const PartitionGraph& p, const std::string& op) {
  std::vector<const Node*> out;
  for (int id = 0; id < p.graph->num_nodes(); ++id)
    if (p.graph->node(id).op == op) out.push_back(&p.graph->node(id));
  return out;
}

// Every original node is in exactly one partition, as a copy with the same
// name, op, attrs count and placed device, and the id maps agree.
void CheckEveryNodeOnce(const Graph& g, const std::vector<std::string>& placement,
                        const std::map<std::string, PartitionGraph>& parts) {
  for (int id = 0; id < g.num_nodes(); ++id) {
    int found = 0;
    for (const auto& [dev, p] : parts) {
      auto it = p.local_id.find(id);
      if (it == p.local_id.end()) continue;
      ++found;
      const Node& copy = p.graph->node(it->second);
      INFO(g.node(id).name);
      CHECK(dev == placement[id]);
      CHECK(copy.name == g.node(id).name);
      CHECK(copy.op == g.node(id).op);
      CHECK(copy.device == dev);
      CHECK(copy.attrs.all().size() == g.node(id).attrs.all().size());
      CHECK(copy.output_dtypes == g.node(id).output_dtypes);
      CHECK(p.original_id[it->second] == id);
    }
    CHECK(found == 1);
    auto loc = FindNodeInPartitions(parts, id);
    REQUIRE(loc.ok());
    CHECK(loc->device == placement[id]);
  }
  for (const auto& [dev, p] : parts) {
    CHECK(p.device == dev);
    CHECK(static_cast<int>(p.original_id.size()) == p.graph->num_nodes());
    CHECK(p.graph->status().ok());
  }
  CHECK(FindNodeInPartitions(parts, g.num_nodes()).status().code() == Code::kNotFound);
}

}  // namespace

TEST_CASE("Transfer keys name the tensor and the destination", "[partition]") {
  CHECK(TransferKey("layer/x", 1, kB) == "layer/x:1->" + kB);
  CHECK(TransferKey("init", -1, kB) == "^init->" + kB);
}

TEST_CASE("Two devices: one Send/Recv per tensor per destination device", "[partition]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  auto y1 = ops::Neg(g, x);
  auto y2 = ops::Square(g, x);
  auto y3 = ops::Mul(g, x, x);
  auto z = ops::AddN(g, {y1, y2, y3});
  auto w = ops::Sub(g, x, z);
  REQUIRE(g.status().ok());
  std::vector<std::string> placement(g.num_nodes(), kA);
  for (const Output& o : {y1, y2, y3, z}) placement[o.node] = kB;

  auto parts = Partition(g, placement);
  REQUIRE(parts.ok());
  REQUIRE(parts->size() == 2);
  CheckEveryNodeOnce(g, placement, *parts);
  const PartitionGraph& a = parts->at(kA);
  const PartitionGraph& b = parts->at(kB);
  CHECK(OriginalNames(a) == std::set<std::string>{"x", w.op().name});
  CHECK(OriginalNames(b) == std::set<std::string>{y1.op().name, y2.op().name, y3.op().name, z.op().name});
  CHECK(a.graph->num_nodes() == 4);  // x, w, Send x, Recv z
  CHECK(b.graph->num_nodes() == 6);  // 4 compute, Recv x, Send z

  // x crosses once, although three nodes on B read it (one of them twice).
  REQUIRE(a.sends.size() == 1);
  REQUIRE(b.recvs.size() == 1);
  const Node& send_x = a.graph->node(a.sends[0]);
  const Node& recv_x = b.graph->node(b.recvs[0]);
  CHECK(send_x.op == "_Send");
  CHECK(recv_x.op == "_Recv");
  CHECK(Str(send_x, "tensor_name") == "x:0->" + kB);
  CHECK(Str(recv_x, "tensor_name") == "x:0->" + kB);
  for (const Node* n : {&send_x, &recv_x}) {
    CHECK(Str(*n, "send_device") == kA);
    CHECK(Str(*n, "recv_device") == kB);
    CHECK(n->attrs.Get<DType>("dtype").value() == DType::kFloat32);
  }
  CHECK(recv_x.output_dtypes[0] == DType::kFloat32);
  CHECK(recv_x.output_shapes[0] == PartialShape(Shape{2}));
  CHECK(send_x.inputs[0].node == a.local_id.at(x.node));
  for (const Output& o : {y1, y2, y3}) {
    const Node& consumer = b.graph->node(b.local_id.at(o.node));
    for (const Output& in : consumer.inputs) CHECK(in.node == recv_x.id);
  }
  CHECK(NodesWithOp(b, "_Recv").size() == 1);

  // z comes back to A for w; w also reads x locally.
  REQUIRE(b.sends.size() == 1);
  REQUIRE(a.recvs.size() == 1);
  const Node& recv_z = a.graph->node(a.recvs[0]);
  CHECK(Str(b.graph->node(b.sends[0]), "tensor_name") == z.op().name + ":0->" + kA);
  CHECK(Str(recv_z, "tensor_name") == z.op().name + ":0->" + kA);
  CHECK(Str(recv_z, "send_device") == kB);
  const Node& w_copy = a.graph->node(a.local_id.at(w.node));
  CHECK(w_copy.inputs[0].node == a.local_id.at(x.node));
  CHECK(w_copy.inputs[1].node == recv_z.id);
  CHECK(a.original_id[recv_z.id] == -1);
}

TEST_CASE("Each destination device gets its own transfer", "[partition]") {
  const std::string kC = "/job:worker/task:2/device:CPU:0";
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat64, {}, "x");
  auto b1 = ops::Neg(g, x);
  auto b2 = ops::Square(g, x);
  auto c1 = ops::Neg(g, x);
  REQUIRE(g.status().ok());
  std::vector<std::string> placement(g.num_nodes(), kA);
  placement[b1.node] = placement[b2.node] = kB;
  placement[c1.node] = kC;
  auto parts = Partition(g, placement);
  REQUIRE(parts.ok());
  CheckEveryNodeOnce(g, placement, *parts);
  const PartitionGraph& a = parts->at(kA);
  REQUIRE(a.sends.size() == 2);
  std::set<std::string> keys;
  for (int s : a.sends) keys.insert(Str(a.graph->node(s), "tensor_name"));
  CHECK(keys == std::set<std::string>{"x:0->" + kB, "x:0->" + kC});
  CHECK(parts->at(kB).recvs.size() == 1);
  CHECK(parts->at(kC).recvs.size() == 1);
}

TEST_CASE("Control edges across devices become a dummy transfer", "[partition]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  auto init = ops::NoOp(g, {x.node}, "init");
  auto r1 = ops::Placeholder(g, DType::kFloat32, {2}, "r1");
  auto r2 = ops::Placeholder(g, DType::kFloat32, {2}, "r2");
  auto local = ops::Neg(g, x);
  REQUIRE(g.AddControlInput(r1.node, init.node).ok());
  REQUIRE(g.AddControlInput(r2.node, init.node).ok());
  REQUIRE(g.AddControlInput(local.node, init.node).ok());
  REQUIRE(g.status().ok());
  std::vector<std::string> placement(g.num_nodes(), kA);
  placement[r1.node] = placement[r2.node] = kB;
  auto parts = Partition(g, placement);
  REQUIRE(parts.ok());
  CheckEveryNodeOnce(g, placement, *parts);
  const PartitionGraph& a = parts->at(kA);
  const PartitionGraph& b = parts->at(kB);

  // Same-device control edges stay as they are.
  const Node& init_a = a.graph->node(a.local_id.at(init.node));
  CHECK(init_a.control_inputs == std::vector<int>{a.local_id.at(x.node)});
  CHECK(a.graph->node(a.local_id.at(local.node)).control_inputs == std::vector<int>{init_a.id});

  // One dummy transfer for both control consumers on B.
  REQUIRE(a.sends.size() == 1);
  REQUIRE(b.recvs.size() == 1);
  const Node& send = a.graph->node(a.sends[0]);
  CHECK(Str(send, "tensor_name") == "^init->" + kB);
  const Node& dummy = a.graph->node(send.inputs[0].node);
  CHECK(dummy.op == "Const");
  CHECK(dummy.output_dtypes[0] == DType::kInt32);
  CHECK(dummy.control_inputs == std::vector<int>{init_a.id});
  const Node& recv = b.graph->node(b.recvs[0]);
  CHECK(Str(recv, "tensor_name") == "^init->" + kB);
  CHECK(recv.output_dtypes[0] == DType::kInt32);
  for (const Output& o : {r1, r2})
    CHECK(b.graph->node(b.local_id.at(o.node)).control_inputs == std::vector<int>{recv.id});
}

TEST_CASE("A step's grouping NoOp waits for its control inputs on other devices without transfers",
          "[partition]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  auto on_b = ops::Neg(g, x);
  auto on_a = ops::Abs(g, x);
  // A sink: reads nothing, nothing reads it or waits for it.
  auto train = ops::NoOp(g, {on_a.node, on_b.node}, "train");
  // Not a sink: another node waits for it, so it keeps its transfer.
  auto group = ops::NoOp(g, {on_b.node}, "group");
  auto after = ops::Identity(g, x);
  REQUIRE(g.AddControlInput(after.node, group.node).ok());
  REQUIRE(g.status().ok());
  std::vector<std::string> placement(g.num_nodes(), kA);
  placement[on_b.node] = kB;
  auto parts = Partition(g, placement);
  REQUIRE(parts.ok());
  CheckEveryNodeOnce(g, placement, *parts);
  const PartitionGraph& a = parts->at(kA);
  const PartitionGraph& b = parts->at(kB);
  // The sink keeps its control input on its own device and drops B's.
  CHECK(a.graph->node(a.local_id.at(train.node)).control_inputs == std::vector<int>{a.local_id.at(on_a.node)});
  // The other NoOp still receives B's control transfer: one dummy send from B.
  std::set<std::string> keys;
  for (int id : b.sends) keys.insert(Str(b.graph->node(id), "tensor_name"));
  CHECK(keys.count("^" + on_b.op().name + "->" + kA) == 1);
  const Node& group_a = a.graph->node(a.local_id.at(group.node));
  REQUIRE(group_a.control_inputs.size() == 1);
  CHECK(a.graph->node(group_a.control_inputs[0]).op == "_Recv");
}

TEST_CASE("A graph on one device is one partition without Send/Recv", "[partition]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  auto k = ops::Const(g, Tensor::FromVector<float>({3, 4}), "k");
  auto y = ops::Mul(g, x, k);
  ops::NoOp(g, {y.node}, "done");
  REQUIRE(g.status().ok());
  auto placement = Place(g, {kA});
  REQUIRE(placement.ok());
  auto parts = Partition(g, *placement);
  REQUIRE(parts.ok());
  REQUIRE(parts->size() == 1);
  CheckEveryNodeOnce(g, *placement, *parts);
  const PartitionGraph& p = parts->at(kA);
  CHECK(p.graph->num_nodes() == g.num_nodes());
  CHECK(p.sends.empty());
  CHECK(p.recvs.empty());
  CHECK(NodesWithOp(p, "_Send").empty());
  CHECK(NodesWithOp(p, "_Recv").empty());

  // The copy computes what the original does.
  Output px = p.graph->FindOutput("x").value();
  Output py = p.graph->FindOutput(y.op().name).value();
  auto r = testing::Eval(*p.graph, py, {{px, Tensor::FromVector<float>({1, 2})}});
  REQUIRE(r.ok());
  CHECK(r->ToVector<float>() == std::vector<float>{3, 8});
}

TEST_CASE("Placed then partitioned: a training graph over two devices", "[partition]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {1, 2}, "x");
  auto w = ops::Variable(g, "w", ops::Const(g, std::vector<float>{1, 2}, {2, 1}));
  auto v = ops::Variable(g, "v", ops::Const(g, std::vector<float>{3}, {1, 1}));
  auto loss = ops::Sum(g, ops::MatMul(g, ops::MatMul(g, x, w), v));
  (void)loss;
  REQUIRE(g.status().ok());
  auto placement = Place(g, {kA, kB});
  REQUIRE(placement.ok());
  auto parts = Partition(g, *placement);
  REQUIRE(parts.ok());
  CheckEveryNodeOnce(g, *placement, *parts);
  // Every Send has exactly one Recv with its key on its recv_device, and the
  // keys are unique.
  std::set<std::string> keys;
  int sends = 0, recvs = 0;
  for (const auto& [dev, p] : *parts) {
    for (int s : p.sends) {
      const Node& n = p.graph->node(s);
      ++sends;
      CHECK(keys.insert(Str(n, "tensor_name")).second);
      const PartitionGraph& other = parts->at(Str(n, "recv_device"));
      int matches = 0;
      for (int r : other.recvs) matches += Str(other.graph->node(r), "tensor_name") == Str(n, "tensor_name");
      CHECK(matches == 1);
    }
    recvs += static_cast<int>(p.recvs.size());
    // No resource tensor crosses devices: variables travel with their ops.
    for (int r : p.recvs) CHECK(p.graph->node(r).output_dtypes[0] != DType::kResource);
  }
  CHECK(sends == recvs);
  CHECK(sends >= 1);
}

TEST_CASE("Loops keep their back edges, also when the loop spans devices", "[partition]") {
  Graph g;
  auto limit = ops::Placeholder(g, DType::kInt32, {}, "limit");
  auto loop = WhileLoop(
      g, [&](Graph& g, const std::vector<Output>& v) { return ops::Less(g, v[0], limit); },
      [](Graph& g, const std::vector<Output>& v) {
        return std::vector<Output>{ops::Add(g, v[0], ops::Const(g, 1))};
      },
      {ops::Const(g, 0)});
  REQUIRE(loop.ok());
  REQUIRE(g.status().ok());

  SECTION("one device") {
    std::vector<std::string> placement(g.num_nodes(), kA);
    auto parts = Partition(g, placement);
    REQUIRE(parts.ok());
    CheckEveryNodeOnce(g, placement, *parts);
    const PartitionGraph& p = parts->at(kA);
    int merges = 0;
    for (const Node* m : NodesWithOp(p, "Merge")) {
      ++merges;
      CHECK(p.graph->node(m->inputs[0].node).op == "Enter");
      CHECK(p.graph->node(m->inputs[1].node).op == "NextIteration");
      const int orig = p.original_id[m->id];
      CHECK(p.original_id[m->inputs[1].node] == g.node(orig).inputs[1].node);
    }
    CHECK(merges >= 1);
  }
  SECTION("the NextIteration on another device") {
    std::vector<std::string> placement(g.num_nodes(), kA);
    for (int id = 0; id < g.num_nodes(); ++id)
      if (g.node(id).op == "NextIteration") placement[id] = kB;
    auto parts = Partition(g, placement);
    REQUIRE(parts.ok());
    CheckEveryNodeOnce(g, placement, *parts);
    const PartitionGraph& a = parts->at(kA);
    size_t merges = 0;
    for (const Node* m : NodesWithOp(a, "Merge")) {
      // Partitioning adds a control loop (original_id -1) to run the frame's
      // _Recv nodes once per iteration.
      if (a.original_id[m->id] < 0) continue;
      ++merges;
      const Node& back = a.graph->node(m->inputs[1].node);
      CHECK(back.op == "_Recv");
      const int next = g.node(a.original_id[m->id]).inputs[1].node;
      CHECK(Str(back, "tensor_name") == g.node(next).name + ":0->" + kA);
      // That _Recv runs in the loop's frame: it hangs off the control loop.
      REQUIRE(back.control_inputs.size() == 1);
      CHECK(a.graph->node(back.control_inputs[0]).op == "Identity");
      CHECK(a.original_id[back.control_inputs[0]] == -1);
    }
    CHECK(parts->at(kB).sends.size() == merges);
    // B receives the loop predicate for its own control loop.
    CHECK(NodesWithOp(parts->at(kB), "Switch").size() == 1);
    CHECK(NodesWithOp(parts->at(kB), "NextIteration").size() == 2);
  }
}

TEST_CASE("Bad placements are errors", "[partition]") {
  Graph g;
  ops::Placeholder(g, DType::kFloat32, {2}, "x");
  ops::Placeholder(g, DType::kFloat32, {2}, "y");
  auto r = Partition(g, {kA});
  REQUIRE_FALSE(r.ok());
  CHECK(HasText(r.status(), "1 devices for a graph of 2 nodes"));
  r = Partition(g, {kA, "/job:worker"});
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kInvalidArgument);
  CHECK(HasText(r.status(), "node 'y'"));
  CHECK(HasText(r.status(), "not a full device name"));
  // Shorthand full names are accepted and keyed canonically.
  auto ok = Partition(g, {"/job:worker/task:0/cpu:0", kA});
  REQUIRE(ok.ok());
  CHECK(ok->size() == 1);
  CHECK(ok->count(kA) == 1);
}

TEST_CASE("Send and Recv check their attrs", "[partition]") {
  Graph g;
  auto x = ops::Placeholder(g, DType::kFloat32, {2}, "x");
  CHECK(ops::Send(g, x, "x:0->" + kB, kA, kB) >= 0);
  auto r = ops::Recv(g, DType::kFloat64, PartialShape({-1, 3}), "k", kA, kB);
  REQUIRE(r.valid());
  CHECK(r.dtype() == DType::kFloat64);
  CHECK(r.shape() == PartialShape({-1, 3}));
  CHECK(g.registry().Find("_Send")->stateful);
  CHECK_FALSE(g.registry().Find("_Recv")->differentiable);
  Graph bad;
  auto y = ops::Placeholder(bad, DType::kFloat32, {2}, "y");
  AttrMap a;
  a.Set("tensor_name", std::string("k"));
  a.Set("send_device", kA);
  a.Set("recv_device", std::string(""));
  a.Set("dtype", DType::kFloat32);
  CHECK(bad.AddNode("_Send", {y}, a) < 0);
  CHECK(HasText(bad.status(), "recv_device must not be empty"));
  Graph bad2;
  auto z = ops::Placeholder(bad2, DType::kFloat32, {2}, "z");
  a.Set("recv_device", kB);
  a.Set("dtype", DType::kInt32);
  CHECK(bad2.AddNode("_Send", {z}, a) < 0);
  CHECK(HasText(bad2.status(), "attr dtype is int32 but the sent tensor is float32"));
}
