// shardflow graphs: build a dataflow graph in C++, then run it in a Session.
//
//   sf::Graph g;                                   // uses the standard ops
//   auto x  = sf::ops::Placeholder(g, sf::DType::kFloat32, {-1, 784}, "x");
//   auto w1 = sf::ops::Variable(g, "w1", sf::ops::TruncatedNormal(g, {784, 512}, 0.05, 1));
//   auto b1 = sf::ops::Variable(g, "b1", sf::ops::Zeros(g, sf::DType::kFloat32, {512}));
//   auto h  = sf::ops::Relu(g, sf::ops::MatMul(g, x, w1) + b1);
//   ...
//   auto train = sf::MomentumOptimizer(0.05, 0.9).Minimize(g, loss);
//   sf::Session s(g);  s.Run({{x, batch}}, {loss}, {*train});
//
// A Graph is a list of nodes. Each node runs one op, has typed outputs, data
// inputs (another node's output) and control inputs (run after that node).
// Builders check shapes as they add nodes: the first error is kept in
// g.status() (naming the node, the op and the shapes) and later builders
// return invalid Outputs, so code reads like the math and checks once.
// Thread-safety: a Graph is built by one thread; once built it may be read
// (and run by sessions) from many.
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shardflow/attr.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace sf {

class Graph;
class OpRegistry;
struct Node;

// One output of one node: (node id, output index) in a graph.
struct Output {
  Graph* graph = nullptr;
  int node = -1;
  int index = 0;

  Output() = default;
  Output(Graph* g, int n, int i = 0) : graph(g), node(n), index(i) {}
  bool valid() const { return graph != nullptr && node >= 0; }
  DType dtype() const;
  const PartialShape& shape() const;
  // "name" for output 0, "name:1" otherwise.
  std::string name() const;
  const Node& op() const;
  bool operator==(const Output& o) const { return graph == o.graph && node == o.node && index == o.index; }
  bool operator<(const Output& o) const { return node != o.node ? node < o.node : index < o.index; }
};

// A node run for its effect rather than a value (an initializer, a training
// step, a NoOp, an enqueue): what a step's targets name. Invalid when its
// builder failed; the graph's status() then says why.
struct Operation {
  Graph* graph = nullptr;
  int node = -1;

  Operation() = default;
  Operation(Graph* g, int n) : graph(g), node(n) {}
  bool valid() const { return graph != nullptr && node >= 0; }
  // The node's name. REQUIRES: valid().
  const std::string& name() const;
};

// The nodes something runs after: a braced list of Operations or of node
// ids, or a vector of either.
class ControlDeps {
 public:
  ControlDeps() = default;
  ControlDeps(std::initializer_list<Operation> ops) : ops_(ops) {}
  ControlDeps(std::initializer_list<int> node_ids) : ids_(node_ids) {}
  ControlDeps(std::vector<Operation> ops) : ops_(std::move(ops)) {}
  ControlDeps(std::vector<int> node_ids) : ids_(std::move(node_ids)) {}
  // The node ids in g; InvalidArgument for an invalid Operation or one of
  // another graph.
  Result<std::vector<int>> NodesIn(const Graph& g) const;

 private:
  std::vector<Operation> ops_;
  std::vector<int> ids_;
};

struct Node {
  int id = -1;
  std::string name;
  std::string op;
  std::vector<Output> inputs;
  std::vector<int> control_inputs;  // node ids
  AttrMap attrs;
  std::string device;  // requested device, "" = any
  std::vector<DType> output_dtypes;
  std::vector<PartialShape> output_shapes;
  bool stateful = false;

  int num_outputs() const { return static_cast<int>(output_dtypes.size()); }
  // The dtype kernels are looked up by: attr "T", else input 0, else output 0.
  DType kernel_dtype() const;
};

class Graph {
 public:
  // A graph over the standard ops (StandardOpRegistry()).
  Graph();
  // A graph over the ops of `registry`, which must outlive the graph.
  explicit Graph(const OpRegistry& registry);
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = delete;

  // Adds a node running `op`, checks and infers its shapes, and returns its
  // id; on error records it in status() and returns -1. `name` is made
  // unique within the current name scope ("" uses the op's name).
  int AddNode(const std::string& op, const std::vector<Output>& inputs, AttrMap attrs = {},
              const std::string& name = "");
  // Adds a node and returns its output 0 (invalid on error).
  Output Add1(const std::string& op, const std::vector<Output>& inputs, AttrMap attrs = {},
              const std::string& name = "");
  // Makes `node` run after `before` (a control edge). Error if either is unknown.
  Status AddControlInput(int node, int before);

  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const Node& node(int id) const { return *nodes_[id]; }
  Node& mutable_node(int id) { return *nodes_[id]; }
  // The node id of `name`, or NotFound.
  Result<int> FindNode(const std::string& name) const;
  // Parses "name" or "name:k" into an Output; NotFound / InvalidArgument.
  Result<Output> FindOutput(const std::string& name) const;
  const OpRegistry& registry() const { return *registry_; }

  // The first construction error (OK if none). Sessions refuse a graph with one.
  const Status& status() const { return status_; }
  void RecordError(const Status& s) {
    if (status_.ok()) status_ = s;
  }
  // Returns the recorded error (OK if none) and forgets it, so builders work
  // again: for front ends that report each failing builder at once (the
  // Python module raises it). A failed AddNode added no node, so the graph
  // stays consistent; nodes a failed composite builder added stay, unused.
  Status ClearError() {
    Status s = std::move(status_);
    status_ = Status::OK();
    return s;
  }

  // RAII scopes: nodes added while one lives get the "prefix/" name prefix or
  // the device. They nest.
  class Scope {
   public:
    Scope(Scope&& o) noexcept : g_(o.g_), kind_(o.kind_) { o.g_ = nullptr; }
    ~Scope();
   private:
    friend class Graph;
    Scope(Graph* g, int kind) : g_(g), kind_(kind) {}
    Graph* g_;
    int kind_;
  };
  Scope NameScope(const std::string& prefix);
  Scope DeviceScope(const std::string& device);
  // The unique name a node named `base` would get now: the current prefix
  // ("a/b/") plus base, with "_N" appended when taken.
  std::string ScopedName(const std::string& base);
  // The current device scope ("" when none).
  const std::string& current_device() const;

  // Control-flow builders (control_flow.h) install a hook while a branch or
  // loop body is built: AddNode passes it the new node's inputs (to route
  // outside values through Switch/Enter) and control inputs to add. It
  // returns an error to refuse the node. Null (the default) = no hook.
  using NodeHook = std::function<Status(std::vector<Output>* inputs, std::vector<int>* control_inputs)>;
  void set_node_hook(NodeHook h) { node_hook_ = std::move(h); }
  const NodeHook& node_hook() const { return node_hook_; }

 private:
  const OpRegistry* registry_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::string> name_scopes_;
  std::vector<std::string> device_scopes_;
  std::map<std::string, int> by_name_;
  // Next suffix to try per base name, so naming stays O(log n) per node
  // when thousands of nodes share one base name.
  std::map<std::string, int> next_suffix_;
  Status status_;
  NodeHook node_hook_;
};

// The registry of every standard op, built on first use by RegisterStandardOps.
const OpRegistry& StandardOpRegistry();

}  // namespace sf
