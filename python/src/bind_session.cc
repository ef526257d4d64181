// Sessions: running steps (Session.run), steps resolved once
// (Session.make_callable), checkpoints of a session's variables, and the
// in-process session. The ClusterSession is made in bind_cluster.cc.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "python/src/bindings.h"
#include "python/src/common.h"
#include "python/src/py_graph.h"
#include "python/src/py_session.h"
#include "shardflow/cluster.h"
#include "shardflow/session.h"

namespace sf {
namespace python {

void PySession::Close() {
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

PySession::~PySession() {
  if (s) Close();
}

std::vector<py::array> PySession::Run(const std::vector<std::tuple<std::string, py::array, int>>& feeds,
                                      const std::vector<std::string>& fetches,
                                      const std::vector<std::string>& targets, const std::string& trace_file,
                                      int64_t trace_max_events) {
  std::shared_ptr<SessionInterface> sess = S();
  FeedMap fm;
  fm.reserve(feeds.size());
  for (const auto& [name, arr, dt] : feeds)
    fm.emplace_back(name, TensorFromNumpy(arr, static_cast<DType>(dt), /*allow_lend=*/true));
  RunOptions ro;
  ro.trace_file = trace_file;
  ro.trace_max_events = trace_max_events;
  return Step(std::move(sess), std::move(fm), Fetches(fetches), Targets(targets), ro);
}

std::vector<py::array> PySession::Step(std::shared_ptr<SessionInterface> sess, FeedMap feeds,
                                       const Fetches& fetches, const Targets& targets, const RunOptions& options) {
  Result<std::vector<Tensor>> r = Status::OK();
  {
    py::gil_scoped_release nogil;
    r = sess->Run(feeds, fetches, targets, options);
    feeds.clear();
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

namespace {

// One step's feeds, fetches and targets resolved once (Session.make_callable,
// as TensorFlow 1.x's): a call takes the feed values in feed_list order,
// converts them and runs the step, without looking a name up again in Python.
// A value that is already an ndarray of the feed's dtype and shape is lent as
// it is; any other goes through the Python converter, which applies run()'s
// rules (NumPy's same-kind casting, the shape check) and raises its errors.
class PyCallable {
 public:
  // feeds: (name, dtype number, NumPy dtype or None when it cannot be fed
  // from Python, shape: None or dims with -1 for unknown ones) per feed.
  PyCallable(py::object session, const std::vector<std::tuple<std::string, int, py::object, py::object>>& feeds,
             const std::vector<std::string>& fetches, const std::vector<std::string>& targets,
             py::function convert)
      : owner_(std::move(session)),
        session_(owner_.cast<PySession&>()),
        fetches_(fetches),
        targets_(targets),
        convert_(std::move(convert)) {
    feeds_.reserve(feeds.size());
    for (const auto& [name, dtype, np_dtype, shape] : feeds) {
      Feed f;
      f.name = name;
      f.dtype = static_cast<DType>(dtype);
      f.numpy_num = np_dtype.is_none() ? -1 : py::dtype::from_args(np_dtype).num();
      f.shape = ShapeFromPy(shape);
      feeds_.push_back(std::move(f));
    }
  }

  // Runs one step of the callable's signature with values (one per feed);
  // returns one array per fetch. InvalidArgument for a wrong number of values
  // or a value run() would refuse; the step's error otherwise.
  std::vector<py::array> Call(const py::tuple& values, const std::string& trace_file, int64_t trace_max_events) {
    if (values.size() != feeds_.size())
      throw StatusError(InvalidArgument("this callable takes " + std::to_string(feeds_.size()) +
                                        " feed value(s), one per entry of its feed_list, got " +
                                        std::to_string(values.size())));
    std::shared_ptr<SessionInterface> sess = session_.S();
    FeedMap fm;
    fm.reserve(feeds_.size());
    for (size_t i = 0; i < feeds_.size(); ++i) {
      const Feed& f = feeds_[i];
      py::handle v = values[i];
      if (Fits(f, v)) {
        fm.emplace_back(f.name, TensorFromNumpy(py::reinterpret_borrow<py::array>(v), f.dtype, /*allow_lend=*/true));
      } else if (std::optional<Tensor> t = Scalar(f, v)) {
        fm.emplace_back(f.name, std::move(*t));
      } else {
        fm.emplace_back(f.name, TensorFromNumpy(convert_(i, v).cast<py::array>(), f.dtype, /*allow_lend=*/true));
      }
    }
    RunOptions ro;
    ro.trace_file = trace_file;
    ro.trace_max_events = trace_max_events;
    return PySession::Step(std::move(sess), std::move(fm), fetches_, targets_, ro);
  }

 private:
  struct Feed {
    std::string name;
    DType dtype;
    int numpy_num;  // the NumPy type number of dtype; -1: never fed as it is
    PartialShape shape;
  };

  // True when v is an ndarray run() would feed unchanged: the feed's NumPy
  // type in native byte order, with the feed's rank and known dims.
  static bool Fits(const Feed& f, py::handle v) {
    if (f.numpy_num < 0 || !py::isinstance<py::array>(v)) return false;
    auto a = py::reinterpret_borrow<py::array>(v);
    const py::dtype dt = a.dtype();
    if (dt.num() != f.numpy_num || dt.byteorder() == '>') return false;
    if (!f.shape.rank_known()) return true;
    const std::vector<int64_t>& dims = f.shape.dims();
    if (a.ndim() != static_cast<py::ssize_t>(dims.size())) return false;
    for (size_t d = 0; d < dims.size(); ++d)
      if (dims[d] >= 0 && dims[d] != a.shape(d)) return false;
    return true;
  }

  // A scalar fed to a feed of rank 0 (or unknown rank) as run() would feed
  // it, made here: a NumPy scalar of the feed's type, a Python float for a
  // float feed, a Python int that fits an int feed. Anything else (null)
  // goes through the Python converter, which cost a learning-rate scalar
  // about 25 us a step.
  std::optional<Tensor> Scalar(const Feed& f, py::handle v) const {
    if (f.shape.rank_known() && !f.shape.dims().empty()) return std::nullopt;
    if (f.numpy_num >= 0 && py::isinstance(v, numpy_generic_)) {
      // Its type and bytes through NumPy's and Python's C interfaces (an
      // array made of it, or its dtype attribute, cost microseconds).
      PyObject* descr = py::detail::npy_api::get().PyArray_DescrFromScalar_(v.ptr());
      if (!descr) {
        PyErr_Clear();
        return std::nullopt;
      }
      const bool same = py::reinterpret_steal<py::dtype>(descr).num() == f.numpy_num;
      Py_buffer view;
      if (!same || PyObject_GetBuffer(v.ptr(), &view, PyBUF_SIMPLE) != 0) {
        PyErr_Clear();
        return std::nullopt;
      }
      Tensor t(f.dtype, {});
      const bool whole = static_cast<size_t>(view.len) == t.bytes();
      if (whole) std::memcpy(t.raw_data(), view.buf, t.bytes());
      PyBuffer_Release(&view);
      if (!whole) return std::nullopt;
      return t;
    }
    if (PyFloat_Check(v.ptr())) {
      const double d = PyFloat_AsDouble(v.ptr());
      if (f.dtype == DType::kFloat32) return Tensor::Scalar<float>(static_cast<float>(d));
      if (f.dtype == DType::kFloat64) return Tensor::Scalar<double>(d);
      return std::nullopt;
    }
    if (PyLong_Check(v.ptr()) && !PyBool_Check(v.ptr()) && (f.dtype == DType::kInt32 || f.dtype == DType::kInt64)) {
      int overflow = 0;
      const long long n = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
      if (overflow != 0 || (n == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return std::nullopt;  // the converter names the value that does not fit
      }
      if (f.dtype == DType::kInt64) return Tensor::Scalar<int64_t>(n);
      if (n < INT32_MIN || n > INT32_MAX) return std::nullopt;
      return Tensor::Scalar<int32_t>(static_cast<int32_t>(n));
    }
    return std::nullopt;
  }

  py::object owner_;     // the Python-side session object: keeps session_ alive
  PySession& session_;   // closed sessions refuse the call (FailedPrecondition)
  std::vector<Feed> feeds_;
  const Fetches fetches_;
  const Targets targets_;
  py::function convert_;  // (feed index, value) -> ndarray of its dtype, or raises
  py::object numpy_generic_ = py::module_::import("numpy").attr("generic");
};

}  // namespace

void BindSession(py::module_& m) {
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

  py::class_<PyCallable>(m, "Callable")
      .def(py::init<py::object, const std::vector<std::tuple<std::string, int, py::object, py::object>>&,
                    const std::vector<std::string>&, const std::vector<std::string>&, py::function>(),
           py::arg("session"), py::arg("feeds"), py::arg("fetches"), py::arg("targets"), py::arg("convert"),
           "A step of session resolved once: feeds (name, dtype, NumPy dtype or None, shape), fetch and "
           "target names, and convert(i, value) for values that are not ready to lend.")
      .def("__call__", &PyCallable::Call, py::arg("values"), py::arg("trace_file") = "",
           py::arg("trace_max_events") = RunOptions().trace_max_events,
           "Runs one step with the GIL released; returns one array per fetch or raises the step's error.");

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
}

}  // namespace python
}  // namespace sf
