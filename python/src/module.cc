// shardflow._core: the pybind11 bindings under `import shardflow`.
//
// Thin by design: graphs, builders that add more than one node, gradients,
// optimizers, control flow, sessions and checkpoints of the public API
// (include/shardflow/), with values crossing as plain Python data. The
// Python package (python/shardflow/) builds the TensorFlow-style API on top.
//
// Conventions across this boundary:
// - an Output is a (node, index) tuple of ints, an Operation a node id;
// - a dtype is its DType number; a partial shape is None (unknown rank) or a
//   list of ints with -1 for unknown dims;
// - an attribute is (name, kind, value) with kind one of AttrKindName's words;
// - a failed Status raises shardflow.errors.<Code>Error with its message;
// - a step runs with the GIL released; fed NumPy arrays are lent to tensors
//   without a copy when C-contiguous and 16-byte aligned, and fetched tensors
//   come back as NumPy arrays over the tensor's buffer (a capsule holds it).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shardflow/attr.h"
#include "shardflow/checkpoint.h"
#include "shardflow/checkpoint_ops.h"
#include "shardflow/cluster.h"
#include "shardflow/control_flow.h"
#include "shardflow/embedding.h"
#include "shardflow/gradients.h"
#include "shardflow/graph.h"
#include "shardflow/graph_io.h"
#include "shardflow/op_registry.h"
#include "shardflow/ops.h"
#include "shardflow/optimizers.h"
#include "shardflow/queue_ops.h"
#include "shardflow/session.h"
#include "shardflow/tensor.h"

namespace py = pybind11;

namespace sf {
namespace python {
namespace {

// A failed Status on its way to Python (see the translator in the module).
struct StatusError : std::exception {
  explicit StatusError(Status s) : status(std::move(s)) {}
  const char* what() const noexcept override { return status.message().c_str(); }
  Status status;
};

void Check(const Status& s) {
  if (!s.ok()) throw StatusError(s);
}

template <typename T>
T Take(Result<T> r) {
  Check(r.status());
  return std::move(r).value();
}

// ---- releasing lent NumPy arrays from any thread ---------------------------
// A tensor over a NumPy array may die on a runtime thread that does not hold
// the GIL; taking the GIL there could deadlock against a Python thread
// waiting for that runtime (a session closing). So the reference is queued
// and dropped on the interpreter's main thread (Py_AddPendingCall, callable
// from any thread) or after the next step, whichever comes first.
std::mutex g_release_mu;
std::vector<PyObject*> g_release_queue;
bool g_release_scheduled = false;

int DrainReleases(void* = nullptr) {
  std::vector<PyObject*> drop;
  {
    std::lock_guard<std::mutex> l(g_release_mu);
    drop.swap(g_release_queue);
    g_release_scheduled = false;
  }
  for (PyObject* o : drop) Py_DECREF(o);
  return 0;
}

void QueueRelease(PyObject* o) {
  bool schedule = false;
  {
    std::lock_guard<std::mutex> l(g_release_mu);
    g_release_queue.push_back(o);
    if (!g_release_scheduled) schedule = g_release_scheduled = true;
  }
  // A full pending-call queue leaves it to the next step's drain.
  if (schedule && Py_AddPendingCall(DrainReleases, nullptr) != 0) {
    std::lock_guard<std::mutex> l(g_release_mu);
    g_release_scheduled = false;
  }
}

// ---- dtypes, shapes, tensors ------------------------------------------------

py::dtype NumpyDType(DType t) {
  switch (t) {
    case DType::kFloat32: return py::dtype::of<float>();
    case DType::kFloat64: return py::dtype::of<double>();
    case DType::kInt32: return py::dtype::of<int32_t>();
    case DType::kInt64: return py::dtype::of<int64_t>();
    case DType::kBool: return py::dtype::of<bool>();
    case DType::kFloat16: return py::dtype("float16");
    case DType::kResource: return py::dtype::of<int64_t>();
    default: throw StatusError(InvalidArgument(std::string("dtype ") + DTypeName(t) + " has no NumPy equivalent"));
  }
}

py::object ShapeToPy(const PartialShape& s) {
  if (!s.rank_known()) return py::none();
  return py::cast(s.dims());
}

PartialShape ShapeFromPy(const py::object& o) {
  if (o.is_none()) return PartialShape::Unknown();
  return PartialShape(o.cast<std::vector<int64_t>>());
}

// A NumPy array over t's buffer; the capsule keeps a Tensor reference, so the
// buffer lives as long as the array. Writable only when nobody else holds the
// buffer (a variable's value may share it).
py::array TensorToNumpy(Tensor t) {
  if (!t.valid()) throw StatusError(InvalidArgument("cannot fetch an invalid (empty) tensor"));
  py::dtype dt = NumpyDType(t.dtype());
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t step = static_cast<py::ssize_t>(DTypeSize(t.dtype()));
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = step;
    step *= shape[i];
  }
  auto* holder = new Tensor(std::move(t));
  const bool writable = holder->BufferIsUnique();
  py::capsule owner(holder, [](void* p) { delete static_cast<Tensor*>(p); });
  py::array a(dt, shape, strides, holder->raw_data(), owner);
  if (!writable) a.attr("setflags")(py::arg("write") = false);
  return a;
}

// A tensor of dtype `want` holding the array's values: the array's own memory
// when it is C-contiguous, aligned and of that dtype (no copy), else a copy.
// The Python side has already converted the value to `want` with NumPy's
// casting rules, so a mismatch here is a caller's bug reported plainly.
Tensor TensorFromNumpy(py::array a, DType want, bool allow_lend) {
  py::dtype expect = NumpyDType(want);
  const bool native = a.dtype().attr("byteorder").cast<std::string>() != ">";
  if (!native || a.dtype().kind() != expect.kind() || a.itemsize() != expect.itemsize())
    throw StatusError(InvalidArgument(std::string("a ") + py::str(a.dtype()).cast<std::string>() +
                                      " array cannot be fed as " + DTypeName(want)));
  Shape shape(a.shape(), a.shape() + a.ndim());
  const bool contiguous = (a.flags() & py::array::c_style) != 0;
  const bool aligned = reinterpret_cast<uintptr_t>(a.data()) % 16 == 0;
  if (allow_lend && contiguous && aligned && a.size() > 0) {
    PyObject* keep = a.ptr();
    Py_INCREF(keep);
    auto r = Tensor::WrapExternal(want, shape, const_cast<void*>(a.data()), [keep] { QueueRelease(keep); });
    if (r.ok()) return std::move(r).value();
    Py_DECREF(keep);
  }
  Tensor t(want, shape);
  if (t.bytes() == 0) return t;
  if (contiguous) {
    std::memcpy(t.raw_data(), a.data(), t.bytes());
  } else {
    // Strided: let NumPy copy it into C order in our buffer.
    py::capsule borrowed(t.raw_data(), [](void*) {});
    py::array dst(expect, std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()), std::vector<py::ssize_t>{},
                  t.raw_data(), borrowed);
    auto np = py::module_::import("numpy");
    np.attr("copyto")(dst, a);
  }
  return t;
}

// ---- attributes ---------------------------------------------------------------

py::object AttrToPy(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> py::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, DType>) {
          return py::int_(static_cast<int>(x));
        } else if constexpr (std::is_same_v<T, std::vector<DType>>) {
          py::list l;
          for (DType d : x) l.append(static_cast<int>(d));
          return l;
        } else if constexpr (std::is_same_v<T, PartialShape>) {
          return ShapeToPy(x);
        } else if constexpr (std::is_same_v<T, Tensor>) {
          if (!x.valid()) return py::none();
          return TensorToNumpy(x.Copy());
        } else if constexpr (std::is_same_v<T, std::string>) {
          return py::str(x);
        } else {
          return py::cast(x);
        }
      },
      v);
}

AttrValue AttrFromPy(const std::string& name, const std::string& kind, const py::handle& v) {
  try {
    if (kind == "int") return v.cast<int64_t>();
    if (kind == "float") return v.cast<double>();
    if (kind == "bool") return v.cast<bool>();
    if (kind == "string") return v.cast<std::string>();
    if (kind == "dtype") return static_cast<DType>(v.cast<int>());
    if (kind == "int list") return v.cast<std::vector<int64_t>>();
    if (kind == "float list") return v.cast<std::vector<double>>();
    if (kind == "shape") return ShapeFromPy(py::reinterpret_borrow<py::object>(v));
    if (kind == "dtype list") {
      std::vector<DType> out;
      for (int d : v.cast<std::vector<int>>()) out.push_back(static_cast<DType>(d));
      return out;
    }
    if (kind == "tensor") {
      auto seq = py::reinterpret_borrow<py::tuple>(v);  // (array, dtype number)
      DType t = static_cast<DType>(seq[1].cast<int>());
      // A constant must not change when the caller's array does: always copy.
      return TensorFromNumpy(seq[0].cast<py::array>(), t, /*allow_lend=*/false);
    }
  } catch (const py::cast_error&) {
    throw StatusError(InvalidArgument("attribute '" + name + "' must be " + kind + ", got " +
                                      py::str(py::type::of(v)).cast<std::string>()));
  }
  throw StatusError(InvalidArgument("attribute '" + name + "': unknown attribute kind '" + kind + "'"));
}

AttrMap AttrsFromPy(const std::vector<std::tuple<std::string, std::string, py::object>>& attrs) {
  AttrMap m;
  for (const auto& [name, kind, value] : attrs) m.Set(name, AttrFromPy(name, kind, value));
  return m;
}

// ---- graphs -----------------------------------------------------------------

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

Out ToOut(const Output& o) { return {o.node, o.index}; }

std::vector<py::object> OutsToPy(const std::vector<Output>& v) {
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

// ---- op registry ------------------------------------------------------------

py::list OpDefs() {
  const OpRegistry& reg = StandardOpRegistry();
  py::list out;
  for (const std::string& name : reg.Names()) {
    const OpDef* d = reg.Find(name);
    py::list attrs;
    for (const AttrDef& a : d->attrs)
      attrs.append(py::make_tuple(a.name, AttrKindName(a.default_value), AttrToPy(a.default_value), a.required));
    py::dict e;
    e["name"] = d->name;
    e["min_inputs"] = d->min_inputs;
    e["max_inputs"] = d->max_inputs;
    e["stateful"] = d->stateful;
    e["differentiable"] = d->differentiable;
    e["summary"] = d->summary;
    e["attrs"] = attrs;
    e["input_names"] = d->input_names;
    out.append(e);
  }
  return out;
}

// ---- sessions -----------------------------------------------------------------

struct PySession {
  // Shared with the steps in flight: a close() from one Python thread while
  // another runs a step leaves the session to the last of them.
  std::shared_ptr<SessionInterface> s;
  py::object graph;  // keeps the PyGraph alive while the session runs it

  // A reference for one call (taken with the GIL held).
  std::shared_ptr<SessionInterface> S() {
    if (!s) throw StatusError(FailedPrecondition("the session is closed"));
    return s;
  }
  void Close() {
    // Closing stops actors that may drop lent arrays: no GIL while it waits.
    std::shared_ptr<SessionInterface> dying = std::move(s);
    {
      py::gil_scoped_release nogil;
      // Steps other threads still run end if they wait on a queue, so the
      // last of them, which destroys the session, does not wait forever.
      if (dying) dying->CancelWaits();
      dying.reset();
    }
    DrainReleases();
  }
  ~PySession() {
    if (s) Close();
  }

  // Runs one step (with a trace written to trace_file unless it is "");
  // raises the step's error as its sf.errors class.
  std::vector<py::array> Run(const std::vector<std::tuple<std::string, py::array, int>>& feeds,
                             const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
                             const std::string& trace_file, int64_t trace_max_events) {
    std::shared_ptr<SessionInterface> sess = S();
    FeedMap fm;
    fm.reserve(feeds.size());
    for (const auto& [name, arr, dt] : feeds)
      fm.emplace_back(name, TensorFromNumpy(arr, static_cast<DType>(dt), /*allow_lend=*/true));
    std::vector<Fetch> f(fetches.begin(), fetches.end());
    std::vector<Target> t(targets.begin(), targets.end());
    Result<std::vector<Tensor>> r = Status::OK();
    {
      py::gil_scoped_release nogil;
      RunOptions ro;
      ro.trace_file = trace_file;
      ro.trace_max_events = trace_max_events;
      r = sess->Run(fm, Fetches(std::move(f)), Targets(std::move(t)), ro);
      fm.clear();
      sess.reset();  // a session closed meanwhile is destroyed here, without the GIL
    }
    DrainReleases();
    std::vector<Tensor> out = Take(std::move(r));
    std::vector<py::array> arrays;
    arrays.reserve(out.size());
    for (Tensor& x : out) {
      // A fetched feed would alias the caller's array: give it its own copy.
      Tensor mine = x.BufferIsLent() ? x.Copy() : std::move(x);
      arrays.push_back(TensorToNumpy(std::move(mine)));
    }
    return arrays;
  }
};

}  // namespace
}  // namespace python
}  // namespace sf

using namespace sf;
using namespace sf::python;

PYBIND11_MODULE(_core, m) {
  m.doc() = "shardflow's C++ bindings; use the `shardflow` package instead.";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object exc = py::module_::import("shardflow.errors")
                           .attr("_from_status")(static_cast<int>(e.status.code()), e.status.message());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });

  m.def("dtype_name", [](int t) { return std::string(DTypeName(static_cast<DType>(t))); },
        "The name of a DType number ('invalid' for an unknown one).");
  m.def("dtype_size", [](int t) { return DTypeSize(static_cast<DType>(t)); },
        "Bytes per element of a DType number; 0 when it has none.");
  m.def("code_name", [](int c) { return std::string(CodeName(static_cast<Code>(c))); },
        "The name of a status code number.");
  m.def("op_defs", &OpDefs, "Every registered op: name, inputs, attrs (name, kind, default, required), summary.");
  m.def("drain_releases", [] { DrainReleases(); }, "Drops NumPy arrays tensors have let go of.");
  m.def("keep_tensor_memory_warm", [] { KeepTensorMemoryWarm(); },
        "Keeps freed tensor memory in the heap (process-wide; see shardflow/tensor.h).");
  m.def("roundtrip", [](py::array a, int dt, bool lend) { return TensorToNumpy(TensorFromNumpy(a, static_cast<DType>(dt), lend)); },
        "The array through a C++ Tensor and back (for tests); raises InvalidArgumentError for a bad dtype.");
  m.def("shares_memory_after_roundtrip", [](py::array a, int dt) {
        Tensor t = TensorFromNumpy(a, static_cast<DType>(dt), true);
        return t.raw_data() == a.data();
      }, "True when feeding the array lends its memory instead of copying (for tests).");

  py::class_<PyScope>(m, "Scope").def("close", &PyScope::Close, "Ends the scope (idempotent).");

  py::class_<PyGraph>(m, "Graph")
      .def(py::init<>(), "An empty graph over the standard ops.")
      .def("add_node",
           [](PyGraph& self, const std::string& op, const std::vector<Out>& inputs,
              const std::vector<std::tuple<std::string, std::string, py::object>>& attrs, const std::string& name,
              const std::vector<int>& control_inputs) {
             std::vector<Output> in = self.Os(inputs);
             AttrMap a = AttrsFromPy(attrs);
             for (int c : control_inputs) self.N(c);
             if (!StandardOpRegistry().Find(op)) throw StatusError(NotFound("no op named '" + op + "' is registered"));
             int id = self.g->AddNode(op, in, std::move(a), name);
             if (id < 0) self.Raise();
             for (int c : control_inputs) Check(self.g->AddControlInput(id, c));
             return id;
           },
           py::arg("op"), py::arg("inputs"), py::arg("attrs"), py::arg("name") = "",
           py::arg("control_inputs") = std::vector<int>{},
           "Adds a node; returns its id or raises the shape or attribute error naming node and op.")
      .def("add_control_input", [](PyGraph& self, int node, int before) { Check(self.g->AddControlInput(node, before)); },
           "Makes node run after before; raises InvalidArgumentError for an unknown node.")
      .def("num_nodes", [](PyGraph& self) { return self.g->num_nodes(); })
      .def("node_name", [](PyGraph& self, int id) { return self.N(id).name; })
      .def("node_op", [](PyGraph& self, int id) { return self.N(id).op; })
      .def("node_device", [](PyGraph& self, int id) { return self.N(id).device; })
      .def("node_inputs", [](PyGraph& self, int id) {
             std::vector<Out> r;
             for (const Output& o : self.N(id).inputs) r.push_back(ToOut(o));
             return r;
           })
      .def("node_control_inputs", [](PyGraph& self, int id) { return self.N(id).control_inputs; })
      .def("node_num_outputs", [](PyGraph& self, int id) { return self.N(id).num_outputs(); })
      .def("node_attrs", [](PyGraph& self, int id) {
             py::dict d;
             for (const auto& [k, v] : self.N(id).attrs.all()) d[py::str(k)] = py::make_tuple(AttrKindName(v), AttrToPy(v));
             return d;
           })
      .def("output_dtype", [](PyGraph& self, const Out& o) { return static_cast<int>(self.O(o).dtype()); })
      .def("output_shape", [](PyGraph& self, const Out& o) { return ShapeToPy(self.O(o).shape()); })
      .def("output_name", [](PyGraph& self, const Out& o) { return self.O(o).name(); })
      .def("find_node", [](PyGraph& self, const std::string& name) { return Take(self.g->FindNode(name)); },
           "The id of the node named name; raises NotFoundError.")
      .def("find_output", [](PyGraph& self, const std::string& name) { return ToOut(Take(self.g->FindOutput(name))); },
           "The (node, index) of 'name' or 'name:k'; raises NotFoundError or InvalidArgumentError.")
      .def("name_scope", [](PyGraph& self, const std::string& p) {
             return PyScope{std::make_unique<Graph::Scope>(self.g->NameScope(p))};
           })
      .def("device_scope", [](PyGraph& self, const std::string& d) {
             return PyScope{std::make_unique<Graph::Scope>(self.g->DeviceScope(d))};
           })
      .def("scoped_name", [](PyGraph& self, const std::string& base) { return self.g->ScopedName(base); })
      .def("set_attr", [](PyGraph& self, int id, const std::string& name, const std::string& kind, py::object v) {
             self.N(id);
             self.g->mutable_node(id).attrs.Set(name, AttrFromPy(name, kind, v));
           }, "Sets an attribute of an existing node (before any session runs it).")
      .def("status", [](PyGraph& self) { Check(self.g->status()); }, "Raises the graph's recorded error, if any.")
      .def("save", [](PyGraph& self, const std::string& path) { Check(SaveGraph(*self.g, path)); },
           "Writes the graph as a GraphDef file; raises on error (naming the file).")
      .def("to_bytes", [](PyGraph& self) { return py::bytes(Take(GraphToBytes(*self.g))); })
      .def_static("load", [](const std::string& path) {
             auto g = std::make_unique<PyGraph>();
             Check(LoadGraph(path, g->g.get()));
             return g;
           }, "A graph read from a GraphDef file; raises NotFoundError, DataLossError or InvalidArgumentError.")
      .def_static("from_bytes", [](py::bytes b, const std::string& source) {
             auto g = std::make_unique<PyGraph>();
             Check(GraphFromBytes(std::string(b), g->g.get(), source));
             return g;
           });

  // ---- builders that add several nodes --------------------------------------
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

  // Embedding tables.
  py::class_<EmbeddingTable>(m, "EmbeddingTable")
      .def_readonly("name", &EmbeddingTable::name)
      .def_readonly("rows", &EmbeddingTable::rows)
      .def_readonly("dim", &EmbeddingTable::dim)
      .def_readonly("partition", &EmbeddingTable::partition)
      .def_readonly("hash", &EmbeddingTable::hash)
      .def_readonly("read_only", &EmbeddingTable::read_only)
      .def_property_readonly("shards", [](const EmbeddingTable& t) {
        std::vector<Out> r;
        for (const Output& o : t.shards) r.push_back(ToOut(o));
        return r;
      });
  m.def("embedding_table", [](PyGraph& g, const std::string& name, int64_t rows, int64_t dim, int64_t num_shards,
                              const std::string& partition, const std::string& initializer, double scale, int64_t seed,
                              bool trainable) {
          EmbeddingTableOptions o;
          o.num_shards = num_shards;
          o.partition = partition;
          o.initializer = initializer;
          o.scale = scale;
          o.seed = seed;
          o.trainable = trainable;
          EmbeddingTable t = NewEmbeddingTable(*g.g, name, rows, dim, o);
          if (!t.valid()) g.Raise();
          g.CheckNoError();
          return t;
        });
  m.def("hash_embedding_table", [](PyGraph& g, const std::string& name, int64_t dim, const py::dict& opts) {
          HashEmbeddingTableOptions o;
          for (const auto& [k, v] : opts) {
            const std::string key = py::str(k);
            if (key == "num_shards") o.num_shards = v.cast<int64_t>();
            else if (key == "initializer") o.initializer = v.cast<std::string>();
            else if (key == "scale") o.scale = v.cast<double>();
            else if (key == "seed") o.seed = v.cast<int64_t>();
            else if (key == "trainable") o.trainable = v.cast<bool>();
            else if (key == "min_count") o.min_count = v.cast<int64_t>();
            else if (key == "admit_probability") o.admit_probability = v.cast<double>();
            else if (key == "filter_width") o.filter_width = v.cast<int64_t>();
            else if (key == "filter_depth") o.filter_depth = v.cast<int64_t>();
            else if (key == "ttl_steps") o.ttl_steps = v.cast<int64_t>();
            else if (key == "max_rows") o.max_rows = v.cast<int64_t>();
            else if (key == "eviction") o.eviction = v.cast<std::string>();
            else if (key == "ram_budget_bytes") o.ram_budget_bytes = v.cast<int64_t>();
            else if (key == "cold_dir") o.cold_dir = v.cast<std::string>();
            else throw StatusError(InvalidArgument("hash embedding table '" + name + "': unknown option '" + key + "'"));
          }
          EmbeddingTable t = NewHashEmbeddingTable(*g.g, name, dim, o);
          if (!t.valid()) g.Raise();
          g.CheckNoError();
          return t;
        });
  m.def("read_only_view", [](const EmbeddingTable& t) { return ReadOnlyView(t); });
  m.def("embedding_lookup", [](PyGraph& g, const EmbeddingTable& t, const std::string& kind, const Out& ids,
                               py::object extra, int64_t num_segments, const std::string& combiner) {
          Output o;
          if (kind == "dense") o = ops::EmbeddingLookup(*g.g, t, g.O(ids), combiner);
          else if (kind == "bag") o = ops::EmbeddingLookupBag(*g.g, t, g.O(ids), g.O(extra.cast<Out>()), combiner);
          else if (kind == "segments")
            o = ops::EmbeddingLookupSegments(*g.g, t, g.O(ids), g.O(extra.cast<Out>()), num_segments, combiner);
          else throw StatusError(InvalidArgument("unknown lookup kind '" + kind + "'"));
          return g.Ret(o);
        });

  // In-graph checkpoints.
  m.def("save_variables", [](PyGraph& g, const std::string& dir, const Out& step, const std::string& name) {
          return g.Ret(ops::SaveVariables(*g.g, dir, g.O(step), name));
        });
  m.def("restore_variables", [](PyGraph& g, const std::string& dir, const std::string& name) {
          Output step;
          Operation op = ops::RestoreVariables(*g.g, dir, &step, name);
          int id = g.RetOp(op.node);
          return py::make_tuple(id, step.valid() ? py::cast(ToOut(step)) : py::none());
        });

  // ---- optimizers -------------------------------------------------------------
  py::class_<Optimizer, std::shared_ptr<Optimizer>>(m, "Optimizer")
      .def_property_readonly("name", &Optimizer::name)
      .def("set_learning_rate", [](Optimizer& o, PyGraph& g, const Out& lr) { o.SetLearningRate(g.O(lr)); })
      .def("minimize", [](Optimizer& o, PyGraph& g, const Out& loss, const std::vector<Out>& var_list) {
             auto r = o.Minimize(*g.g, g.O(loss), g.Os(var_list));
             if (!r.ok()) {
               g.g->ClearError();
               throw StatusError(r.status());
             }
             g.CheckNoError();
             return r->node;
           }, "Adds gradients and updates; returns the training NoOp's node id.")
      .def("apply_gradients", [](Optimizer& o, PyGraph& g, const std::vector<std::pair<Out, Out>>& gv) {
             std::vector<std::pair<Output, Output>> pairs;
             for (const auto& [gr, v] : gv) pairs.emplace_back(g.O(gr), g.O(v));
             auto r = o.ApplyGradients(*g.g, pairs);
             if (!r.ok()) {
               g.g->ClearError();
               throw StatusError(r.status());
             }
             g.CheckNoError();
             return r->node;
           });
  m.def("optimizer", [](const std::string& kind, const std::vector<double>& p, bool flag) -> std::shared_ptr<Optimizer> {
          auto need = [&](size_t n) {
            if (p.size() != n) throw StatusError(InvalidArgument(kind + " takes " + std::to_string(n) + " parameters"));
          };
          if (kind == "GradientDescent") { need(1); return std::make_shared<GradientDescentOptimizer>(p[0]); }
          if (kind == "Momentum") { need(2); return std::make_shared<MomentumOptimizer>(p[0], p[1], flag); }
          if (kind == "Adagrad") { need(2); return std::make_shared<AdagradOptimizer>(p[0], p[1]); }
          if (kind == "Adam") { need(4); return std::make_shared<AdamOptimizer>(p[0], p[1], p[2], p[3]); }
          if (kind == "RMSProp") { need(4); return std::make_shared<RMSPropOptimizer>(p[0], p[1], p[2], p[3]); }
          throw StatusError(InvalidArgument("unknown optimizer '" + kind + "'"));
        }, "A C++ optimizer by name and hyperparameters.");

  // ---- sessions -------------------------------------------------------------------
  py::class_<PySession>(m, "Session")
      .def("run", &PySession::Run, py::arg("feeds"), py::arg("fetches"), py::arg("targets"),
           py::arg("trace_file") = "", py::arg("trace_max_events") = RunOptions().trace_max_events,
           "Runs one step with the GIL released; returns one array per fetch or raises the step's error.")
      .def("close", &PySession::Close, "Stops the session (idempotent).")
      .def_property_readonly("closed", [](PySession& s) { return !s.s; })
      .def("save_checkpoint", [](PySession& s, const std::string& dir, int64_t step, int keep_last, bool incremental) {
             std::shared_ptr<SessionInterface> sess = s.S();
             Result<int64_t> r = Status::OK();
             {
               py::gil_scoped_release nogil;
               r = incremental ? sess->SaveIncrementalCheckpoint(dir, step, keep_last)
                               : sess->SaveCheckpoint(dir, step, keep_last);
               sess.reset();
             }
             return Take(std::move(r));
           }, "Checkpoints every variable into dir; returns the id.")
      .def("restore_checkpoint", [](PySession& s, const std::string& dir, int64_t id) {
             std::shared_ptr<SessionInterface> sess = s.S();
             int64_t step = 0;
             Status st;
             {
               py::gil_scoped_release nogil;
               st = sess->RestoreCheckpoint(dir, id, &step);
               sess.reset();
             }
             Check(st);
             return step;
           }, "Assigns the variables from checkpoint id (-1: newest readable); returns its global step.")
      .def("tasks", [](PySession& s) {
             auto* c = dynamic_cast<ClusterSession*>(s.S().get());
             return c ? c->tasks() : std::vector<std::string>{};
           });
  m.def("local_session", [](py::object graph, int compute_threads, int scheduler_threads, int num_cpu_devices) {
          PyGraph& g = graph.cast<PyGraph&>();
          Check(g.g->status());
          SessionOptions o;
          o.compute_threads = compute_threads;
          o.scheduler_threads = scheduler_threads;
          o.num_cpu_devices = num_cpu_devices;
          auto s = std::make_unique<PySession>();
          s->graph = graph;
          {
            py::gil_scoped_release nogil;
            s->s = std::make_shared<Session>(*g.g, o);
          }
          return s;
        });
  m.def("cluster_session", [](py::object graph, const std::string& address, const std::string& tls_dir,
                              const std::string& tls_name, bool insecure, int tasks, int max_tasks,
                              int request_timeout_ms, const std::string& checkpoint_dir, bool elastic,
                              int step_progress_timeout_ms) {
          PyGraph& g = graph.cast<PyGraph&>();
          Check(g.g->status());
          ClusterOptions o;
          o.address = address;
          o.tls_dir = tls_dir;
          o.tls_name = tls_name;
          o.insecure = insecure;
          o.tasks = tasks;
          o.max_tasks = max_tasks;
          o.request_timeout_ms = request_timeout_ms;
          o.step_progress_timeout_ms = step_progress_timeout_ms;
          o.checkpoint_dir = checkpoint_dir;
          o.elastic = elastic;
          Result<std::unique_ptr<ClusterSession>> r = Status::OK();
          {
            py::gil_scoped_release nogil;
            r = ClusterSession::Connect(*g.g, o);
          }
          auto s = std::make_unique<PySession>();
          s->graph = graph;
          s->s = Take(std::move(r));
          return s;
        });
  m.def("init_cluster_credentials", [](const std::string& dir) { Check(InitClusterCredentials(dir)); });
  m.def("issue_cluster_credential", [](const std::string& dir, const std::string& role, const std::string& name,
                                       const std::vector<std::string>& hosts) {
    Check(IssueClusterCredential(dir, role, name, hosts));
  });

  // ---- checkpoint directories ---------------------------------------------------
  m.def("checkpoint_list", [](const std::string& dir) { return Take(Take(CheckpointDir::Open(dir))->List()); });
  m.def("checkpoint_latest", [](const std::string& dir) { return Take(Take(CheckpointDir::Open(dir))->Latest()); });
  m.def("checkpoint_describe", [](const std::string& dir, int64_t id) {
          CheckpointDir::Summary s = Take(Take(CheckpointDir::Open(dir))->Describe(id));
          py::list vars;
          for (const auto& v : s.variables) vars.append(py::make_tuple(v.name, static_cast<int>(v.dtype), v.shape));
          py::dict d;
          d["id"] = s.id;
          d["global_step"] = s.global_step;
          d["parent"] = s.parent;
          d["variables"] = vars;
          return d;
        });
  m.def("checkpoint_read", [](const std::string& dir, int64_t id, const std::string& name) {
          return TensorToNumpy(Take(Take(CheckpointDir::Open(dir))->Read(id, name)));
        });
}
