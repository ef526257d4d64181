// Kernels of the shape ops: Shape, Size, Rank, ZerosLike, OnesLike, Fill,
// Range, Reshape, ExpandDims, Squeeze. The layout ops share the input's buffer.
#include "kernels/cpu/cwise_common.h"
#include "kernels/cpu/range_spec.h"

namespace sf {
namespace {

using cwise::Assign;

// Builds an int32 tensor; InvalidArgument when a value does not fit.
Result<Tensor> Int32Tensor(const std::vector<int64_t>& v, Shape shape, const char* what) {
  Tensor t(DType::kInt32, std::move(shape));
  int32_t* p = t.data<int32_t>();
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] > INT32_MAX)
      return InvalidArgument(std::string(what) + " " + std::to_string(v[i]) +
                             " does not fit in int32");
    p[i] = static_cast<int32_t>(v[i]);
  }
  return t;
}

class ShapeKernel : public OpKernel {
 public:
  ShapeKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    auto t = Int32Tensor(x.shape(), {x.rank()}, "dimension");
    if (!t.ok()) return ctx->SetStatus(t.status());
    ctx->set_output(0, std::move(t).value());
  }
};

class SizeKernel : public OpKernel {
 public:
  SizeKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    auto t = Int32Tensor({ctx->input(0).num_elements()}, {}, "element count");
    if (!t.ok()) return ctx->SetStatus(t.status());
    ctx->set_output(0, std::move(t).value());
  }
};

class RankKernel : public OpKernel {
 public:
  RankKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    ctx->set_output(0, Tensor::Scalar<int32_t>(ctx->input(0).rank()));
  }
};

// ZerosLike / OnesLike: a tensor of x's dtype and shape filled with kValue.
template <typename T, int kValue>
class FillLikeKernel : public OpKernel {
 public:
  FillLikeKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    Tensor& out = ctx->allocate_output(0, x.dtype(), x.shape());
    Assign(ctx, out.num_elements(), out.flat<T>(), out.flat<T>().constant(static_cast<T>(kValue)));
  }
};

// Reads a shape vector (int32 or int64 rank-1 tensor); InvalidArgument otherwise.
Result<Shape> ReadShape(const Tensor& t, const char* what) {
  if (t.rank() != 1 || (t.dtype() != DType::kInt32 && t.dtype() != DType::kInt64))
    return InvalidArgument(std::string(what) + " must be an int32 or int64 vector, got " +
                           DTypeName(t.dtype()) + ShapeString(t.shape()));
  return t.ToVector<int64_t>();
}

// Fill(dims, value): keyed by any dtype (input 0 is the int dims); the
// output takes the value's dtype.
class FillKernel : public OpKernel {
 public:
  FillKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    auto dims = ReadShape(ctx->input(0), "Fill dims");
    if (!dims.ok()) return ctx->SetStatus(dims.status());
    Status st = CheckRuntimeShape(*dims, "Fill dims");
    if (!st.ok()) return ctx->SetStatus(st);
    const Tensor& v = ctx->input(1);
    if (v.num_elements() != 1)
      return ctx->SetStatus(InvalidArgument("Fill value must be a scalar, got shape " +
                                            ShapeString(v.shape())));
    Tensor& out = ctx->allocate_output(0, v.dtype(), *dims);
    const bool ok = DispatchNumeric(v.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      Assign(ctx, out.num_elements(), out.flat<T>(), out.flat<T>().constant(v.data<T>()[0]));
    });
    if (!ok) ctx->SetStatus(Unimplemented(std::string("Fill of ") + DTypeName(v.dtype())));
  }
};

// Value i is start + i * delta (as NumPy's arange; TensorFlow adds delta
// i times, which drifts for floats).
class RangeKernel : public OpKernel {
 public:
  RangeKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& start = ctx->input(0);
    auto n = RangeLengthOf(start, ctx->input(1), ctx->input(2));
    if (!n.ok()) return ctx->SetStatus(n.status());
    Tensor& out = ctx->allocate_output(0, start.dtype(), Shape{*n});
    DispatchNumeric(start.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>) {  // refused by RangeLengthOf
        const T s0 = start.data<T>()[0], d = ctx->input(2).data<T>()[0];
        T* o = out.data<T>();
        if constexpr (std::is_floating_point_v<T>) {
          for (int64_t i = 0; i < *n; ++i) o[i] = s0 + static_cast<T>(i) * d;
        } else {  // unsigned: i * delta may pass T's range before start brings it back
          using U = std::make_unsigned_t<T>;
          for (int64_t i = 0; i < *n; ++i) o[i] = static_cast<T>(U(s0) + U(i) * U(d));
        }
      }
    });
  }
};

class ReshapeKernel : public OpKernel {
 public:
  ReshapeKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    auto req = ReadShape(ctx->input(1), "Reshape shape");
    if (!req.ok()) return ctx->SetStatus(req.status());
    Shape shape = std::move(req).value();
    int unknown = -1;
    int64_t known = 1;
    for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
      if (shape[i] == -1 && unknown < 0) {
        unknown = i;
      } else if (shape[i] < 0) {
        return ctx->SetStatus(InvalidArgument("Reshape shape " + ShapeString(shape) +
                                              " may hold only one -1 and no other negative size"));
      } else if (__builtin_mul_overflow(known, shape[i], &known)) {
        return ctx->SetStatus(InvalidArgument("Reshape shape " + ShapeString(shape) +
                                              " has too many elements"));
      }
    }
    const int64_t n = x.num_elements();
    if (unknown >= 0) {
      if (known == 0 || n % known != 0)
        return ctx->SetStatus(InvalidArgument(
            "cannot reshape a tensor of " + std::to_string(n) + " elements (shape " +
            ShapeString(x.shape()) + ") to " + ShapeString(shape) + ": " + std::to_string(n) +
            " is not a multiple of " + std::to_string(known)));
      shape[unknown] = n / known;
    } else if (known != n) {
      return ctx->SetStatus(InvalidArgument("cannot reshape a tensor of " + std::to_string(n) +
                                            " elements (shape " + ShapeString(x.shape()) +
                                            ") to shape " + ShapeString(shape) + " of " +
                                            std::to_string(known) + " elements"));
    }
    auto r = x.Reshaped(std::move(shape));
    if (!r.ok()) return ctx->SetStatus(r.status());
    ctx->set_output(0, std::move(r).value());
  }
};

class ExpandDimsKernel : public OpKernel {
 public:
  ExpandDimsKernel(const KernelInit& init, Status* s) {
    auto a = init.Attr<int64_t>("axis");
    if (!a.ok()) *s = a.status();
    else axis_ = *a;
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const int r = x.rank();
    if (axis_ < -r - 1 || axis_ > r)
      return ctx->SetStatus(InvalidArgument("ExpandDims axis " + std::to_string(axis_) +
                                            " is out of range for shape " + ShapeString(x.shape())));
    const int64_t a = axis_ < 0 ? axis_ + r + 1 : axis_;
    Shape shape = x.shape();
    shape.insert(shape.begin() + a, 1);
    auto t = x.Reshaped(std::move(shape));
    if (!t.ok()) return ctx->SetStatus(t.status());
    ctx->set_output(0, std::move(t).value());
  }

 private:
  int64_t axis_ = 0;
};

class SqueezeKernel : public OpKernel {
 public:
  SqueezeKernel(const KernelInit& init, Status* s) {
    auto a = init.AttrOr<std::vector<int64_t>>("axes", {});
    if (!a.ok()) *s = a.status();
    else axes_ = *a;
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const int r = x.rank();
    std::vector<bool> drop(r, false);
    if (axes_.empty()) {
      for (int i = 0; i < r; ++i) drop[i] = x.dim(i) == 1;
    }
    for (int64_t a : axes_) {
      if (a < -r || a >= r)
        return ctx->SetStatus(InvalidArgument("Squeeze axis " + std::to_string(a) +
                                              " is out of range for shape " + ShapeString(x.shape())));
      const int i = static_cast<int>(a < 0 ? a + r : a);
      if (x.dim(i) != 1)
        return ctx->SetStatus(InvalidArgument("Squeeze axis " + std::to_string(a) + " of shape " +
                                              ShapeString(x.shape()) + " has size " +
                                              std::to_string(x.dim(i)) + ", not 1"));
      drop[i] = true;
    }
    Shape shape;
    for (int i = 0; i < r; ++i)
      if (!drop[i]) shape.push_back(x.dim(i));
    auto t = x.Reshaped(std::move(shape));
    if (!t.ok()) return ctx->SetStatus(t.status());
    ctx->set_output(0, std::move(t).value());
  }

 private:
  std::vector<int64_t> axes_;
};

// TensorFlow's Bitcast: the input's bytes as attr type (the shape as BitcastShape says).
class BitcastKernel : public OpKernel {
 public:
  BitcastKernel(const KernelInit& init, Status* s) {
    auto t = init.Attr<DType>("type");
    if (!t.ok()) *s = t.status();
    else to_ = *t;
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const int64_t in = static_cast<int64_t>(DTypeSize(x.dtype())), out = static_cast<int64_t>(DTypeSize(to_));
    if (in == 0 || out == 0 || x.dtype() == DType::kBool || x.dtype() == DType::kResource || to_ == DType::kBool ||
        to_ == DType::kResource)
      return ctx->SetStatus(InvalidArgument(std::string("Bitcast from ") + DTypeName(x.dtype()) + " to " +
                                            DTypeName(to_) + ": numeric dtypes only"));
    Shape dims = x.shape();
    if (in > out) {
      dims.push_back(in / out);
    } else if (in < out) {
      if (dims.empty() || dims.back() != out / in)
        return ctx->SetStatus(InvalidArgument(std::string("Bitcast from ") + DTypeName(x.dtype()) + " to " +
                                              DTypeName(to_) + " needs a last dimension of " +
                                              std::to_string(out / in) + ", got shape " + ShapeString(x.shape())));
      dims.pop_back();
    }
    Tensor& y = ctx->allocate_output(0, to_, dims);
    if (x.bytes() > 0) std::memcpy(y.raw_data(), x.raw_data(), x.bytes());
  }

 private:
  DType to_ = DType::kInvalid;
};

template <typename T>
void RegisterFillLike(KernelRegistry& reg, DType t) {
  RegisterCPU<FillLikeKernel<T, 0>>(reg, "ZerosLike", {t});
  RegisterCPU<FillLikeKernel<T, 1>>(reg, "OnesLike", {t});
}

}  // namespace

void RegisterShapeKernels(KernelRegistry& reg) {
  RegisterCPU<ShapeKernel>(reg, "Shape", {DType::kInvalid});
  RegisterCPU<SizeKernel>(reg, "Size", {DType::kInvalid});
  RegisterCPU<RankKernel>(reg, "Rank", {DType::kInvalid});
  RegisterCPU<FillKernel>(reg, "Fill", {DType::kInvalid});
  RegisterCPU<RangeKernel>(reg, "Range", {DType::kInvalid});
  RegisterCPU<ReshapeKernel>(reg, "Reshape", {DType::kInvalid});
  RegisterCPU<BitcastKernel>(reg, "Bitcast", {DType::kInvalid});
  RegisterCPU<ExpandDimsKernel>(reg, "ExpandDims", {DType::kInvalid});
  RegisterCPU<SqueezeKernel>(reg, "Squeeze", {DType::kInvalid});
  RegisterFillLike<float>(reg, DType::kFloat32);
  RegisterFillLike<double>(reg, DType::kFloat64);
  RegisterFillLike<int32_t>(reg, DType::kInt32);
  RegisterFillLike<int64_t>(reg, DType::kInt64);
  RegisterFillLike<bool>(reg, DType::kBool);
  RegisterFillLike<int8_t>(reg, DType::kInt8);
  RegisterFillLike<int16_t>(reg, DType::kInt16);
  RegisterFillLike<uint8_t>(reg, DType::kUInt8);
}

}  // namespace sf
