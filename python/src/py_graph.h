// Graphs as the bindings hold them: PyGraph (the Python Graph's _g), the
// (node, index) pairs Outputs cross as, scopes held by `with` blocks, and
// the guard for Python callbacks run inside C++ builders.
// Thread-safety: needs the GIL, like the Python Graph it serves.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "python/src/common.h"
#include "shardflow/graph.h"

namespace sf {
namespace python {

using Out = std::pair<int, int>;

struct PyGraph {
  PyGraph() : g(std::make_unique<Graph>()) {}
  std::unique_ptr<Graph> g;

  Output O(const Out& o) const {
    if (o.first < 0 || o.first >= g->num_nodes())
      throw StatusError(InvalidArgument("node id " + std::to_string(o.first) + " is not in this graph"));
    const Node& n = g->node(o.first);
    if (o.second < 0 || o.second >= n.num_outputs())
      throw StatusError(InvalidArgument("node '" + n.name + "' (op " + n.op + ") has no output " +
                                        std::to_string(o.second)));
    return Output(g.get(), o.first, o.second);
  }
  std::vector<Output> Os(const std::vector<Out>& v) const {
    std::vector<Output> r;
    r.reserve(v.size());
    for (const Out& o : v) r.push_back(O(o));
    return r;
  }
  const Node& N(int id) const {
    if (id < 0 || id >= g->num_nodes())
      throw StatusError(InvalidArgument("node id " + std::to_string(id) + " is not in this graph"));
    return g->node(id);
  }
  // Raises (and forgets) the error a builder recorded, so the graph stays usable.
  void Raise() {
    Status s = g->ClearError();
    if (s.ok()) s = Internal("a builder failed without recording an error");
    throw StatusError(s);
  }
  void CheckNoError() {
    if (!g->status().ok()) Raise();
  }
  Out Ret(const Output& o) {
    if (!o.valid()) Raise();
    CheckNoError();
    return {o.node, o.index};
  }
  int RetOp(int id) {
    if (id < 0) Raise();
    CheckNoError();
    return id;
  }
};

inline Out ToOut(const Output& o) { return {o.node, o.index}; }

inline std::vector<py::object> OutsToPy(const std::vector<Output>& v) {
  std::vector<py::object> r;
  for (const Output& o : v) r.push_back(o.valid() ? py::cast(ToOut(o)) : py::none());
  return r;
}

// A name or device scope held open by a Python `with` block.
struct PyScope {
  std::unique_ptr<Graph::Scope> scope;
  void Close() { scope.reset(); }
};

// Runs Python callbacks from inside a C++ builder: a Python exception is kept
// (the builder sees an empty result and records an error) and re-raised once
// the builder returns, after forgetting the graph's recorded error.
struct CallbackGuard {
  std::exception_ptr error;
  template <typename F>
  auto Call(F&& f, decltype(f()) on_error) -> decltype(f()) {
    if (error) return on_error;
    try {
      return f();
    } catch (...) {
      error = std::current_exception();
      return on_error;
    }
  }
  void Rethrow(PyGraph& g) {
    if (error) {
      g.g->ClearError();
      std::rethrow_exception(error);
    }
  }
};

}  // namespace python
}  // namespace sf
