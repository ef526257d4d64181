// What every binding file of shardflow._core (python/src/bind_*.cc) shares:
// a failed Status on its way to Python, and how values cross the boundary.
//
// Conventions across this boundary:
// - an Output is a (node, index) tuple of ints, an Operation a node id;
// - a dtype is its DType number; a partial shape is None (unknown rank) or a
//   list of ints with -1 for unknown dims;
// - an attribute is (name, kind, value) with kind one of AttrKindName's words;
// - a failed Status raises shardflow.errors.<Code>Error with its message
//   (the translator BindErrors registers);
// - a step runs with the GIL released; fed NumPy arrays are lent to tensors
//   without a copy when C-contiguous and 16-byte aligned, and fetched tensors
//   come back as NumPy arrays over the tensor's buffer (a capsule holds it).
// Thread-safety: everything here needs the GIL, except QueueRelease.
#pragma once

// Every binding file includes the same casters through here (pybind11 needs
// one set of type casters per type across the module).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <exception>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "shardflow/attr.h"
#include "shardflow/graph.h"
#include "shardflow/status.h"
#include "shardflow/tensor.h"

namespace py = pybind11;

namespace sf {
namespace python {

// A failed Status on its way to Python (see BindErrors' translator).
struct StatusError : std::exception {
  explicit StatusError(Status s) : status(std::move(s)) {}
  const char* what() const noexcept override { return status.message().c_str(); }
  Status status;
};

inline void Check(const Status& s) {
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
// (QueueRelease, any thread) and dropped on the interpreter's main thread
// (Py_AddPendingCall) or by DrainReleases after the next step, whichever
// comes first. DrainReleases needs the GIL; its argument and result are the
// pending-call signature's.
int DrainReleases(void* = nullptr);
void QueueRelease(PyObject* o);

// ---- dtypes, shapes, tensors ------------------------------------------------
// The NumPy dtype of t; InvalidArgument (as StatusError) when it has none.
py::dtype NumpyDType(DType t);
py::object ShapeToPy(const PartialShape& s);
PartialShape ShapeFromPy(const py::object& o);
// A NumPy array over t's buffer; the capsule keeps a Tensor reference, so the
// buffer lives as long as the array. Writable only when nobody else holds the
// buffer (a variable's value may share it).
py::array TensorToNumpy(Tensor t);
// A tensor of dtype `want` holding the array's values: the array's own memory
// when allow_lend and it is C-contiguous, aligned and of that dtype (no copy),
// else a copy. The Python side has already converted the value to `want` with
// NumPy's casting rules, so a mismatch here is a caller's bug reported plainly.
Tensor TensorFromNumpy(py::array a, DType want, bool allow_lend);

// ---- attributes ---------------------------------------------------------------
py::object AttrToPy(const AttrValue& v);
// The value of attribute name of kind (AttrKindName's word); InvalidArgument
// naming the attribute for a value of the wrong type or an unknown kind.
AttrValue AttrFromPy(const std::string& name, const std::string& kind, const py::handle& v);
AttrMap AttrsFromPy(const std::vector<std::tuple<std::string, std::string, py::object>>& attrs);

}  // namespace python
}  // namespace sf
