// Tensors: dtype numbers, NumPy arrays through C++ tensors (for tests), the
// release of lent arrays, and the process-wide tensor memory setting.
#include <string>

#include "python/src/bindings.h"
#include "python/src/common.h"
#include "shardflow/tensor.h"

namespace sf {
namespace python {

void BindTensors(py::module_& m) {
  m.def("dtype_name", [](int t) { return std::string(DTypeName(static_cast<DType>(t))); },
        "The name of a DType number ('invalid' for an unknown one).");
  m.def("dtype_size", [](int t) { return DTypeSize(static_cast<DType>(t)); },
        "Bytes per element of a DType number; 0 when it has none.");
  m.def("drain_releases", [] { DrainReleases(); }, "Drops NumPy arrays tensors have let go of.");
  m.def("keep_tensor_memory_warm", [] { KeepTensorMemoryWarm(); },
        "Keeps freed tensor memory in the heap (process-wide; see shardflow/tensor.h).");
  m.def("roundtrip", [](py::array a, int dt, bool lend) { return TensorToNumpy(TensorFromNumpy(a, static_cast<DType>(dt), lend)); },
        "The array through a C++ Tensor and back (for tests); raises InvalidArgumentError for a bad dtype.");
  m.def("shares_memory_after_roundtrip", [](py::array a, int dt) {
        Tensor t = TensorFromNumpy(a, static_cast<DType>(dt), true);
        return t.raw_data() == a.data();
      }, "True when feeding the array lends its memory instead of copying (for tests).");
}

}  // namespace python
}  // namespace sf
