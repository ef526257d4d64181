// Tensor: a dtype, a shape and a refcounted buffer (64-byte aligned from 4 KiB, 16-byte below).
//
// Copying a Tensor shares the buffer (no bytes are copied); Copy() makes a deep
// copy. Kernels view a tensor through Eigen maps (flat<T>(), matrix<T>(), ...).
// Thread-safety: a Tensor value may be read from many threads; writing through
// a shared buffer while others read is the caller's responsibility (the
// runtime only writes buffers it has just allocated).
//
// Shape is the concrete shape of a tensor; PartialShape is what graph
// construction knows (unknown rank, or unknown dimensions written -1).
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <unsupported/Eigen/CXX11/Tensor>

#include "shardflow/status.h"

namespace sf {

enum class DType : uint8_t {
  kInvalid = 0,
  kFloat32 = 1,
  kFloat64 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kBool = 5,
  kBFloat16 = 6,  // reserved: storage only for now
  kFloat16 = 7,   // reserved: storage only for now
  kResource = 8,  // a scalar int64 id naming a variable of the session
  kInt8 = 9,      // the small integers: data (MNIST's uint8 labels), Cast, comparisons, OneHot
  kInt16 = 10,
  kUInt8 = 11,
};

// "float32", "int64", ...; "invalid" for unknown values.
const char* DTypeName(DType t);
// Parses "float32"/"f32", ...; InvalidArgument naming the text otherwise.
Result<DType> ParseDType(const std::string& name);
// Bytes per element; 0 for kInvalid.
size_t DTypeSize(DType t);
bool IsFloating(DType t);
bool IsInteger(DType t);

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kFloat32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kFloat64; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kInt64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::kBool; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kInt8; };
template <> struct DTypeOf<int16_t> { static constexpr DType value = DType::kInt16; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kUInt8; };

using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& s);

// Thrown by the Tensor constructor when a tensor cannot be allocated: a
// dimension is negative, the element or byte count overflows, the size is
// past the allocation limit, or the memory is not there. The executor turns
// it into the step's ResourceExhausted naming the node; kernels need not
// catch it. (A std::bad_alloc, so code that handles those handles it.)
class AllocationError : public std::bad_alloc {
 public:
  explicit AllocationError(std::string what) : what_(std::move(what)) {}
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string what_;
};

// The largest tensor this thread may allocate, in bytes: what an
// AllocationLimitScope set, else the machine's physical memory.
int64_t AllocationLimit();
// Sets this thread's limit while it lives (at least 1 MiB; bytes <= 0: the
// physical memory); the executor sets a session's or node's limit around
// every kernel it runs.
class AllocationLimitScope {
 public:
  explicit AllocationLimitScope(int64_t bytes);
  ~AllocationLimitScope();
  AllocationLimitScope(const AllocationLimitScope&) = delete;
  AllocationLimitScope& operator=(const AllocationLimitScope&) = delete;

 private:
  int64_t previous_;
};
// "[2,3]"; "[]" for a scalar.
std::string ShapeString(const Shape& s);

// What graph construction knows of a shape: unknown rank, or a rank with some
// dimensions unknown (-1).
class PartialShape {
 public:
  PartialShape() = default;  // unknown rank
  PartialShape(Shape dims) : known_rank_(true), dims_(std::move(dims)) {}  // NOLINT
  PartialShape(std::initializer_list<int64_t> dims) : known_rank_(true), dims_(dims) {}
  static PartialShape Unknown() { return PartialShape(); }
  static PartialShape UnknownDims(int rank) { return PartialShape(Shape(rank, -1)); }
  bool rank_known() const { return known_rank_; }
  int rank() const { return known_rank_ ? static_cast<int>(dims_.size()) : -1; }
  int64_t dim(int i) const { return dims_[i]; }
  const Shape& dims() const { return dims_; }
  bool fully_defined() const;
  // True when a concrete shape could satisfy both.
  bool CompatibleWith(const PartialShape& o) const;
  bool CompatibleWith(const Shape& s) const { return CompatibleWith(PartialShape(s)); }
  // The more specific of two compatible shapes.
  PartialShape Merge(const PartialShape& o) const;
  // "[?,784]"; "<unknown>" for unknown rank.
  std::string ToString() const;
  bool operator==(const PartialShape& o) const {
    return known_rank_ == o.known_rank_ && dims_ == o.dims_;
  }

 private:
  bool known_rank_ = false;
  Shape dims_;
};

// Tells the C allocator to keep freed tensor memory in the heap instead of
// returning big blocks to the kernel at each free. Without it every step maps
// fresh pages for its large tensors and pays a page fault per 4 KiB (measured:
// about 20% of an MLP training step). Process-wide and idempotent: a program
// opts in (the `shardflow node` command and the benchmarks do); the library
// never changes its host's allocator by itself. Costs memory the process
// already used once, never more.
void KeepTensorMemoryWarm();
// Frees the large blocks KeepTensorMemoryWarm kept for reuse (a node that
// dropped a namespace's state gives its memory back); how many bytes.
int64_t ReleaseWarmTensorMemory();

// Refcounted storage (64-byte aligned); or memory owned by someone else (a
// NumPy array fed from Python), lent to tensors until the last one lets go.
class Buffer {
 public:
  explicit Buffer(size_t bytes);
  // Lends `bytes` at data (REQUIRES: 16-byte aligned, which Eigen's aligned
  // maps need) to tensors; release runs once, on whatever thread drops the
  // last reference, and must not block.
  Buffer(void* data, size_t bytes, std::function<void()> release);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* data() const { return data_; }
  size_t size() const { return size_; }
  // True for lent memory: its owner may still read it, so nobody writes it in place.
  bool external() const { return static_cast<bool>(release_); }

 private:
  void* data_;
  size_t size_;
  size_t capacity_ = 0;  // a large block's allocated size (kept warm when freed); 0 otherwise
  std::function<void()> release_;
};

class Tensor {
 public:
  Tensor() = default;  // an invalid (empty) tensor; valid() is false
  // Allocates an uninitialised tensor; throws AllocationError (naming the
  // dtype, shape and limit) when it cannot: see AllocationLimit.
  Tensor(DType dtype, Shape shape);

  template <typename T>
  static Tensor Scalar(T v) {
    Tensor t(DTypeOf<T>::value, {});
    t.data<T>()[0] = v;
    return t;
  }
  template <typename T>
  static Tensor FromVector(const std::vector<T>& v, Shape shape) {
    Tensor t(DTypeOf<T>::value, std::move(shape));
    std::memcpy(t.raw_data(), v.data(), sizeof(T) * v.size());
    return t;
  }
  template <typename T>
  static Tensor FromVector(const std::vector<T>& v) {
    return FromVector(v, Shape{static_cast<int64_t>(v.size())});
  }
  static Tensor FromBools(const std::vector<bool>& v, Shape shape);
  // A tensor over memory it does not own (no copy): data holds the elements
  // in C order and stays valid until release runs (see Buffer). Returns
  // InvalidArgument for a negative dim, an unusable dtype, a null or
  // unaligned (16 bytes) pointer with elements to hold.
  static Result<Tensor> WrapExternal(DType dtype, Shape shape, void* data, std::function<void()> release);
  // A tensor filled with zeros.
  static Tensor Zeros(DType dtype, Shape shape);

  bool valid() const { return dtype_ != DType::kInvalid; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t num_elements() const { return num_elements_; }
  size_t bytes() const { return num_elements_ * DTypeSize(dtype_); }

  void* raw_data() const { return buf_ ? buf_->data() : nullptr; }
  template <typename T> T* data() const { return static_cast<T*>(raw_data()); }
  // The value of a one-element tensor, converted to T (any numeric dtype).
  template <typename T> T scalar_as() const;
  // All elements converted to T (any numeric dtype).
  template <typename T> std::vector<T> ToVector() const;

  // Eigen views. REQUIRES: T matches dtype().
  template <typename T>
  Eigen::TensorMap<Eigen::Tensor<T, 1, Eigen::RowMajor>, Eigen::Aligned> flat() const {
    return Eigen::TensorMap<Eigen::Tensor<T, 1, Eigen::RowMajor>, Eigen::Aligned>(
        data<T>(), num_elements_);
  }
  template <typename T, int N>
  Eigen::TensorMap<Eigen::Tensor<T, N, Eigen::RowMajor>, Eigen::Aligned> tensor() const {
    Eigen::DSizes<Eigen::Index, N> d;
    for (int i = 0; i < N; ++i) d[i] = shape_[i];
    return Eigen::TensorMap<Eigen::Tensor<T, N, Eigen::RowMajor>, Eigen::Aligned>(data<T>(), d);
  }
  template <typename T>
  Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> matrix() const {
    return Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
        data<T>(), shape_[0], shape_[1]);
  }

  // A tensor sharing this buffer with another shape of the same element count.
  Result<Tensor> Reshaped(Shape shape) const;
  // A deep copy.
  Tensor Copy() const;
  // True when this is the only Tensor holding its buffer, so writing in place
  // cannot change a value anyone else sees. (Only meaningful to the thread
  // that owns the sole reference: nobody else can then take a new one.)
  // Lent memory (Buffer::external) is never unique: its owner still sees it.
  bool BufferIsUnique() const { return buf_ && buf_.use_count() == 1 && !buf_->external(); }
  // True when the buffer is lent by its owner (WrapExternal).
  bool BufferIsLent() const { return buf_ && buf_->external(); }
  // This tensor, or a deep copy when its buffer is lent: what state that
  // outlives the step (a variable's value, a queued element) keeps, so the
  // lender may change or free its memory once the step is done.
  Tensor Owned() const { return BufferIsLent() ? Copy() : *this; }
  // True when both share one buffer.
  bool SharesBufferWith(const Tensor& o) const { return buf_ && buf_ == o.buf_; }
  // "float32[2,3]" and, for small tensors, the values.
  std::string DebugString(int max_values = 16) const;

 private:
  DType dtype_ = DType::kInvalid;
  Shape shape_;
  int64_t num_elements_ = 0;
  std::shared_ptr<Buffer> buf_;
};

template <typename T> struct TypeTag { using type = T; };

// Calls f(TypeTag<T>{}) with the C++ type of a numeric dtype; returns false
// for other dtypes. Use: [&](auto tag) { using T = typename decltype(tag)::type; }
template <typename F>
bool DispatchNumeric(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: f(TypeTag<float>{}); return true;
    case DType::kFloat64: f(TypeTag<double>{}); return true;
    case DType::kInt32: f(TypeTag<int32_t>{}); return true;
    case DType::kInt64: f(TypeTag<int64_t>{}); return true;
    case DType::kBool: f(TypeTag<bool>{}); return true;
    case DType::kInt8: f(TypeTag<int8_t>{}); return true;
    case DType::kInt16: f(TypeTag<int16_t>{}); return true;
    case DType::kUInt8: f(TypeTag<uint8_t>{}); return true;
    default: return false;
  }
}

template <typename T>
T Tensor::scalar_as() const {
  T out{};
  DispatchNumeric(dtype_, [&](auto tag) {
    using U = typename decltype(tag)::type;
    out = static_cast<T>(data<U>()[0]);
  });
  return out;
}

template <typename T>
std::vector<T> Tensor::ToVector() const {
  std::vector<T> out(num_elements_);
  DispatchNumeric(dtype_, [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* p = data<U>();
    for (int64_t i = 0; i < num_elements_; ++i) out[i] = static_cast<T>(p[i]);
  });
  return out;
}

}  // namespace sf
