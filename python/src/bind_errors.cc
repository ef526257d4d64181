// Errors: a failed Status raised as shardflow.errors.<Code>Error with its
// message (errors.py's _from_status picks the class and parses node and op).
#include <exception>
#include <string>

#include "python/src/bindings.h"
#include "python/src/common.h"

namespace sf {
namespace python {

void BindErrors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object exc = py::module_::import("shardflow.errors")
                           .attr("_from_status")(static_cast<int>(e.status.code()), e.status.message());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
  m.def("code_name", [](int c) { return std::string(CodeName(static_cast<Code>(c))); },
        "The name of a status code number.");
}

}  // namespace python
}  // namespace sf
