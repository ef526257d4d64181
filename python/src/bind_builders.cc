// Builders that add more than one node (or call Python back): variables,
// gradients, cond and while loops, random ops, dropout and queues.
#include <cstdint>
#include <string>
#include <vector>

#include "python/src/bindings.h"
#include "python/src/common.h"
#include "python/src/py_graph.h"
#include "shardflow/control_flow.h"
#include "shardflow/gradients.h"
#include "shardflow/ops.h"
#include "shardflow/queue_ops.h"

namespace sf {
namespace python {

void BindBuilders(py::module_& m) {
  m.def("variable", [](PyGraph& g, const std::string& name, const Out& init, bool trainable) {
          Out read = g.Ret(ops::Variable(*g.g, name, g.O(init)));
          Output h = ops::VariableHandle(g.O(read));
          if (!trainable) g.g->mutable_node(h.node).attrs.Set("trainable", false);
          return py::make_tuple(read, ToOut(h));
        }, "Adds a variable (handle, initializer, read); returns (read, handle).");
  m.def("global_variables_initializer", [](PyGraph& g, const std::string& name) {
          Operation op = ops::GlobalVariablesInitializer(*g.g, name);
          return g.RetOp(op.node);
        }, "A NoOp running every variable initializer so far; returns its node id.");
  m.def("gradients", [](PyGraph& g, const std::vector<Out>& ys, const std::vector<Out>& xs,
                        const std::vector<Out>& grad_ys, bool allow_unconnected) {
          auto r = Gradients(*g.g, g.Os(ys), g.Os(xs), g.Os(grad_ys), allow_unconnected);
          if (!r.ok()) {
            g.g->ClearError();
            throw StatusError(r.status());
          }
          g.CheckNoError();
          return OutsToPy(*r);
        }, "d(sum ys)/d(x) for each x; None for unconnected ones when allowed.");

  m.def("cond", [](PyGraph& g, const Out& pred, py::function then_fn, py::function else_fn, const std::string& name) {
          CallbackGuard guard;
          auto branch = [&](py::function fn) {
            return [&, fn](Graph&) {
              return guard.Call([&] { return g.Os(fn().cast<std::vector<Out>>()); }, std::vector<Output>{});
            };
          };
          std::vector<Output> r = Cond(*g.g, g.O(pred), branch(then_fn), branch(else_fn), name);
          guard.Rethrow(g);
          g.CheckNoError();
          if (r.empty())
            throw StatusError(InvalidArgument("cond '" + name + "': the branches return no tensors, so there is "
                                              "nothing to select (return the tensors the branches compute)"));
          return OutsToPy(r);
        }, "pred ? then_fn() : else_fn() built with Switch/Merge; the callables return lists of outputs.");
  m.def("while_loop", [](PyGraph& g, py::function cond_fn, py::function body_fn, const std::vector<Out>& vars,
                         const std::string& name, int64_t parallel_iterations, int64_t maximum_iterations) {
          CallbackGuard guard;
          auto to_py = [](const std::vector<Output>& v) {
            std::vector<Out> r;
            for (const Output& o : v) r.push_back(ToOut(o));
            return r;
          };
          LoopCondFn c = [&](Graph&, const std::vector<Output>& v) {
            return guard.Call([&] { return g.O(cond_fn(to_py(v)).cast<Out>()); }, Output());
          };
          LoopBodyFn b = [&](Graph&, const std::vector<Output>& v) {
            return guard.Call([&] { return g.Os(body_fn(to_py(v)).cast<std::vector<Out>>()); }, std::vector<Output>{});
          };
          WhileLoopOptions o;
          o.name = name;
          o.parallel_iterations = parallel_iterations;
          o.maximum_iterations = maximum_iterations;
          auto r = WhileLoop(*g.g, c, b, g.Os(vars), o);
          guard.Rethrow(g);
          if (!r.ok()) {
            g.g->ClearError();
            throw StatusError(r.status());
          }
          g.CheckNoError();
          return OutsToPy(*r);
        }, "while cond_fn(vars): vars = body_fn(vars); returns the final loop variables.");

  m.def("random", [](PyGraph& g, const std::string& kind, const Shape& shape, double a, double b, int64_t seed, int dtype) {
          DType t = static_cast<DType>(dtype);
          Output o;
          if (kind == "uniform") o = ops::RandomUniform(*g.g, shape, a, b, seed, t);
          else if (kind == "normal") o = ops::RandomNormal(*g.g, shape, b, seed, t, a);
          else if (kind == "truncated_normal") o = ops::TruncatedNormal(*g.g, shape, b, seed, t, a);
          else throw StatusError(InvalidArgument("unknown random kind '" + kind + "'"));
          return g.Ret(o);
        }, "A random op (seed 0: derived from the node's name); a and b are minval/maxval or mean/stddev.");
  m.def("dropout", [](PyGraph& g, const Out& x, double rate, int64_t seed) {
          return g.Ret(ops::Dropout(*g.g, g.O(x), rate, seed));
        });

  // Queues.
  m.def("queue", [](PyGraph& g, const std::string& kind, const std::vector<int>& dtypes, const std::vector<py::object>& shapes,
                    int64_t capacity, const std::string& shared_name, int64_t min_after_dequeue, int64_t seed,
                    const std::string& name) {
          std::vector<DType> types;
          for (int d : dtypes) types.push_back(static_cast<DType>(d));
          ops::QueueOptions o;
          for (const py::object& s : shapes) o.shapes.push_back(ShapeFromPy(s));
          o.capacity = capacity;
          o.shared_name = shared_name;
          Output q;
          if (kind == "fifo") q = ops::FIFOQueue(*g.g, types, o, name);
          else if (kind == "padding_fifo") q = ops::PaddingFIFOQueue(*g.g, types, o, name);
          else if (kind == "random_shuffle") q = ops::RandomShuffleQueue(*g.g, types, capacity, min_after_dequeue, seed, o, name);
          else throw StatusError(InvalidArgument("unknown queue kind '" + kind + "'"));
          return g.Ret(q);
        });
  m.def("queue_enqueue", [](PyGraph& g, const Out& q, const std::vector<Out>& comps, bool many, int64_t timeout_ms,
                            const std::string& name) {
          Operation op = many ? ops::QueueEnqueueMany(*g.g, g.O(q), g.Os(comps), timeout_ms, name)
                              : ops::QueueEnqueue(*g.g, g.O(q), g.Os(comps), timeout_ms, name);
          return g.RetOp(op.node);
        });
  m.def("queue_dequeue", [](PyGraph& g, const Out& q, py::object n, int64_t timeout_ms, const std::string& name,
                            bool up_to) {
          std::vector<Output> r;
          if (n.is_none()) r = ops::QueueDequeue(*g.g, g.O(q), timeout_ms, name);
          else if (py::isinstance<py::int_>(n))
            r = up_to ? ops::QueueDequeueUpTo(*g.g, g.O(q), n.cast<int64_t>(), timeout_ms, name)
                      : ops::QueueDequeueMany(*g.g, g.O(q), n.cast<int64_t>(), timeout_ms, name);
          else
            r = up_to ? ops::QueueDequeueUpTo(*g.g, g.O(q), g.O(n.cast<Out>()), timeout_ms, name)
                      : ops::QueueDequeueMany(*g.g, g.O(q), g.O(n.cast<Out>()), timeout_ms, name);
          if (r.empty()) g.Raise();
          g.CheckNoError();
          return OutsToPy(r);
        });
  m.def("queue_close", [](PyGraph& g, const Out& q, bool cancel, const std::string& name) {
          return g.RetOp(ops::QueueClose(*g.g, g.O(q), cancel, name).node);
        });
  m.def("queue_size", [](PyGraph& g, const Out& q, const std::string& name) { return g.Ret(ops::QueueSize(*g.g, g.O(q), name)); });
}

}  // namespace python
}  // namespace sf
