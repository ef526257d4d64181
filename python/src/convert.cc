// How values cross the boundary: NumPy arrays and tensors, shapes,
// attributes, and the release of lent arrays (python/src/common.h).
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "python/src/common.h"

namespace sf {
namespace python {
namespace {

std::mutex g_release_mu;
std::vector<PyObject*> g_release_queue;
bool g_release_scheduled = false;

}  // namespace

int DrainReleases(void*) {
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
    case DType::kInt8: return py::dtype::of<int8_t>();
    case DType::kInt16: return py::dtype::of<int16_t>();
    case DType::kUInt8: return py::dtype::of<uint8_t>();
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

}  // namespace python
}  // namespace sf
