// What a step is asked for: the tensors to fetch (and the keys of its feeds)
// and the nodes to run, each given as a graph object or by name, so that
//   session.Run({{x, batch}}, {loss, "accuracy"}, {train_op});
// reads like the math. Names are resolved against the session's graph when
// the step starts; an object of another graph is InvalidArgument then.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "shardflow/graph.h"

namespace sf {

// One tensor: an Output, or its name ("x" for output 0, "x:1").
class TensorRef {
 public:
  TensorRef(Output o) : output_(o), by_output_(true) {}
  TensorRef(std::string name) : name_(std::move(name)) {}
  TensorRef(const char* name) : name_(name) {}
  // The tensor's name in g; InvalidArgument for an Output of another graph,
  // an invalid Output or an empty name.
  Result<std::string> NameIn(const Graph& g) const;

 private:
  Output output_;
  bool by_output_ = false;
  std::string name_;
};

using Fetch = TensorRef;

// One node to run: an Operation, the node of an Output, a node id of the
// session's graph, or a node name.
class Target {
 public:
  Target(Operation op) : graph_(op.graph), node_(op.node), by_node_(true) {}
  Target(Output o) : graph_(o.graph), node_(o.node), by_node_(true) {}
  Target(int node_id) : node_(node_id), by_node_(true) {}
  Target(std::string name) : name_(std::move(name)) {}
  Target(const char* name) : name_(name) {}
  // The node's name in g; InvalidArgument for a node of another graph or an
  // id g does not have.
  Result<std::string> NameIn(const Graph& g) const;

 private:
  const Graph* graph_ = nullptr;  // null: node_ is an id of the session's graph
  int node_ = -1;
  bool by_node_ = false;
  std::string name_;
};

// A step's fetches: a braced list of Fetch, or a vector of names or Outputs.
class Fetches {
 public:
  Fetches() = default;
  Fetches(std::initializer_list<Fetch> f) : list_(f) {}
  Fetches(std::vector<Fetch> f) : list_(std::move(f)) {}
  Fetches(const std::vector<std::string>& names) : list_(names.begin(), names.end()) {}
  Fetches(const std::vector<Output>& outputs) : list_(outputs.begin(), outputs.end()) {}
  const std::vector<Fetch>& list() const { return list_; }

 private:
  std::vector<Fetch> list_;
};

// A step's targets: a braced list of Target, or a vector of names, node ids
// or Operations.
class Targets {
 public:
  Targets() = default;
  Targets(std::initializer_list<Target> t) : list_(t) {}
  Targets(std::vector<Target> t) : list_(std::move(t)) {}
  Targets(const std::vector<std::string>& names) : list_(names.begin(), names.end()) {}
  Targets(const std::vector<int>& node_ids) : list_(node_ids.begin(), node_ids.end()) {}
  Targets(const std::vector<Operation>& ops) : list_(ops.begin(), ops.end()) {}
  const std::vector<Target>& list() const { return list_; }

 private:
  std::vector<Target> list_;
};

// How one step runs, beyond what it computes.
struct RunOptions {
  // When set, the step's timeline is written to this file as Chrome
  // trace-event JSON (open it in https://ui.perfetto.dev or
  // chrome://tracing): every op on the thread that ran it, the waits of
  // asynchronous ops (a Recv for its tensor, a dequeue, a variable or
  // embedding shard's answer), each partition's span, one process row per
  // cluster node. The step fails with Unavailable naming the file when it
  // cannot be written. Default "": no trace, and no cost beyond one branch
  // per op.
  std::string trace_file;
  // At most this many events are kept per process (default 100000, at most
  // 4194304); the rest are counted in the file's "droppedEvents".
  int64_t trace_max_events = 100000;
};

// Feeds: a value per placeholder (or any tensor), keyed by Output or name.
using FeedMap = std::vector<std::pair<TensorRef, Tensor>>;
// Feeds keyed by tensor name, as a step carries them.
using NamedFeeds = std::vector<std::pair<std::string, Tensor>>;

// The feeds keyed by their names in g; InvalidArgument naming the first key
// that is an Output of another graph.
Result<NamedFeeds> ResolveFeeds(const Graph& g, const FeedMap& feeds);

}  // namespace sf
