// Shape ops: Shape, Size, Rank, ZerosLike, OnesLike, Fill, Reshape,
// ExpandDims, Squeeze, Bitcast, and the Zeros / Ones builders.
#include "graph/op_registry.h"
#include "kernels/cpu/range_spec.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

// Reshape / ExpandDims / Squeeze only move the layout: the gradient is dy
// reshaped back to x's (run-time) shape.
std::vector<Output> ReshapeBackGrad(Graph& g, const Node& n, const std::vector<Output>& dy) {
  std::vector<Output> out(n.inputs.size());
  if (!dy[0].valid()) return out;
  const Output& x = n.inputs[0];
  if (x.shape().fully_defined())
    out[0] = ops::Reshape(g, dy[0], x.shape().dims());
  else
    out[0] = ops::Reshape(g, dy[0], ops::ShapeOf(g, x));
  return out;
}

// Reads input i as a build-time constant shape vector; false when it is not one.
bool ConstShape(const InferenceContext& c, int i, Shape* out) {
  const Tensor* t = c.input_constant(i);
  if (!t || t->rank() != 1 || (t->dtype() != DType::kInt32 && t->dtype() != DType::kInt64))
    return false;
  *out = t->ToVector<int64_t>();
  return true;
}

Status RequireIntVector(const InferenceContext& c, int i, const char* what) {
  const DType t = c.input_dtype(i);
  if (t != DType::kInt32 && t != DType::kInt64)
    return c.Error(std::string(what) + " must be int32 or int64, got " + DTypeName(t));
  return c.RequireRank(i, 1);
}

// A rank-`len` shape of unknown dims when the shape vector's length is known.
PartialShape UnknownDimsOfLength(const PartialShape& vec) {
  if (vec.rank_known() && vec.rank() == 1 && vec.dim(0) >= 0)
    return PartialShape::UnknownDims(static_cast<int>(vec.dim(0)));
  return PartialShape::Unknown();
}

Status ReshapeShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireIntVector(c, 1, "Reshape's shape"));
  const DType dt = c.input_dtype(0);
  Shape req;
  if (!ConstShape(c, 1, &req)) {
    c.set_output(0, dt, UnknownDimsOfLength(c.input_shape(1)));
    return Status::OK();
  }
  int unknown = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(req.size()); ++i) {
    if (req[i] == -1 && unknown < 0) unknown = i;
    else if (req[i] < 0)
      return c.Error("Reshape shape " + ShapeString(req) +
                     " may hold only one -1 and no other negative size");
    else known *= req[i];
  }
  const PartialShape& in = c.input_shape(0);
  if (in.fully_defined()) {
    const int64_t n = NumElements(in.dims());
    if (unknown >= 0) {
      if (known == 0 || n % known != 0)
        return c.Error("cannot reshape a tensor of " + std::to_string(n) + " elements (shape " +
                       in.ToString() + ") to " + ShapeString(req) + ": " + std::to_string(n) +
                       " is not a multiple of " + std::to_string(known));
      req[unknown] = n / known;
    } else if (known != n) {
      return c.Error("cannot reshape a tensor of " + std::to_string(n) + " elements (shape " +
                     in.ToString() + ") to shape " + ShapeString(req) + " of " +
                     std::to_string(known) + " elements");
    }
  }
  c.set_output(0, dt, PartialShape(req));
  return Status::OK();
}

Status ExpandDimsShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(int64_t axis, c.Attr<int64_t>("axis"));
  const PartialShape& in = c.input_shape(0);
  if (!in.rank_known()) {
    c.set_output(0, c.input_dtype(0), PartialShape::Unknown());
    return Status::OK();
  }
  const int r = in.rank();
  if (axis < -r - 1 || axis > r)
    return c.Error("ExpandDims axis " + std::to_string(axis) + " is out of range for shape " +
                   in.ToString());
  Shape d = in.dims();
  d.insert(d.begin() + (axis < 0 ? axis + r + 1 : axis), 1);
  c.set_output(0, c.input_dtype(0), PartialShape(d));
  return Status::OK();
}

Status SqueezeShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(std::vector<int64_t> axes, c.AttrOr<std::vector<int64_t>>("axes", {}));
  const PartialShape& in = c.input_shape(0);
  const DType dt = c.input_dtype(0);
  if (!in.rank_known()) {
    c.set_output(0, dt, PartialShape::Unknown());
    return Status::OK();
  }
  const int r = in.rank();
  std::vector<bool> drop(r, false);
  if (axes.empty()) {
    for (int i = 0; i < r; ++i) {
      // An unknown dim may or may not be 1: the output rank is unknown.
      if (in.dim(i) == -1) {
        c.set_output(0, dt, PartialShape::Unknown());
        return Status::OK();
      }
      drop[i] = in.dim(i) == 1;
    }
  }
  for (int64_t a : axes) {
    if (a < -r || a >= r)
      return c.Error("Squeeze axis " + std::to_string(a) + " is out of range for shape " +
                     in.ToString());
    const int i = static_cast<int>(a < 0 ? a + r : a);
    if (in.dim(i) != 1 && in.dim(i) != -1)
      return c.Error("Squeeze axis " + std::to_string(a) + " of shape " + in.ToString() +
                     " has size " + std::to_string(in.dim(i)) + ", not 1");
    drop[i] = true;
  }
  Shape d;
  for (int i = 0; i < r; ++i)
    if (!drop[i]) d.push_back(in.dim(i));
  c.set_output(0, dt, PartialShape(d));
  return Status::OK();
}

Status FillShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireIntVector(c, 0, "Fill's dims"));
  const PartialShape& v = c.input_shape(1);
  if (v.rank_known() && v.rank() != 0)
    return c.Error("Fill's value must be a scalar, got shape " + v.ToString());
  Shape dims;
  if (ConstShape(c, 0, &dims)) {
    for (int64_t d : dims)
      if (d < 0) return c.Error("Fill dims " + ShapeString(dims) + " has a negative dimension");
    c.set_output(0, c.input_dtype(1), PartialShape(dims));
  } else {
    c.set_output(0, c.input_dtype(1), UnknownDimsOfLength(c.input_shape(0)));
  }
  return Status::OK();
}

// A vector of the inputs' dtype; its length when all three are constants
// (and the same errors as the kernel then).
Status RangeShape(InferenceContext& c) {
  const char* names[3] = {"start", "limit", "delta"};
  const DType t = c.input_dtype(0);
  if (t != DType::kInt32 && t != DType::kInt64 && t != DType::kFloat32 && t != DType::kFloat64)
    return c.Error(std::string("Range takes int32, int64, float32 or float64, got ") + DTypeName(t));
  for (int i = 0; i < 3; ++i) {
    if (c.input_dtype(i) != t)
      return c.Error(std::string("Range's ") + names[i] + " is " + DTypeName(c.input_dtype(i)) + " but start is " +
                     DTypeName(t));
    const PartialShape& s = c.input_shape(i);
    if (s.rank_known() && s.rank() != 0 && !(s.rank() == 1 && s.dims()[0] == 1))
      return c.Error(std::string("Range's ") + names[i] + " must be a scalar, got shape " + s.ToString());
  }
  const Tensor *a = c.input_constant(0), *b = c.input_constant(1), *d = c.input_constant(2);
  int64_t n = -1;
  if (a != nullptr && b != nullptr && d != nullptr) {
    auto len = RangeLengthOf(*a, *b, *d);
    if (!len.ok()) return c.Error(len.status().message());
    n = *len;
  }
  c.set_output(0, t, PartialShape({n}));
  return Status::OK();
}

// TensorFlow's Bitcast: the same bytes as dtype `type`; a wider input gains a
// last dimension of the size ratio, a narrower one loses its last dimension,
// which must be that ratio.
Status BitcastShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(DType to, c.Attr<DType>("type"));
  const DType from = c.input_dtype(0);
  for (DType t : {from, to})
    if (DTypeSize(t) == 0 || t == DType::kBool || t == DType::kResource)
      return c.Error(std::string("Bitcast: ") + DTypeName(t) + " cannot be bitcast (numeric dtypes only)");
  const PartialShape& x = c.input_shape(0);
  const int64_t in = static_cast<int64_t>(DTypeSize(from)), out = static_cast<int64_t>(DTypeSize(to));
  if (!x.rank_known()) {
    c.set_output(0, to, PartialShape());
    return Status::OK();
  }
  Shape dims = x.dims();
  if (in > out) {
    dims.push_back(in / out);
  } else if (in < out) {
    if (dims.empty() || (dims.back() >= 0 && dims.back() != out / in))
      return c.Error(std::string("Bitcast from ") + DTypeName(from) + " to " + DTypeName(to) +
                     " needs a last dimension of " + std::to_string(out / in) + ", got shape " + x.ToString());
    dims.pop_back();
  }
  c.set_output(0, to, PartialShape(dims));
  return Status::OK();
}

}  // namespace

Status RegisterShapeOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Bitcast").RequiredAttr<DType>("type")
      .Inputs(1).Shape(BitcastShape).NotDifferentiable()
      .Summary("x's bytes as dtype attr type (TensorFlow's tf.bitcast): a wider input gains a last dimension of "
               "the size ratio, a narrower one loses its last dimension (which must be that ratio).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Shape").Inputs(1)
      .Shape([](InferenceContext& c) -> Status {
        const PartialShape& in = c.input_shape(0);
        c.set_output(0, DType::kInt32, PartialShape({in.rank_known() ? in.rank() : -1}));
        return Status::OK();
      })
      .NotDifferentiable().Summary("The shape of a tensor as an int32 vector.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Size").Inputs(1)
      .Shape([](InferenceContext& c) -> Status {
        c.set_output(0, DType::kInt32, PartialShape(Shape{}));
        return Status::OK();
      })
      .NotDifferentiable().Summary("The number of elements of a tensor (int32 scalar).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Rank").Inputs(1)
      .Shape([](InferenceContext& c) -> Status {
        c.set_output(0, DType::kInt32, PartialShape(Shape{}));
        return Status::OK();
      })
      .NotDifferentiable().Summary("The rank of a tensor (int32 scalar).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ZerosLike").Inputs(1).Shape(UnchangedShape)
      .NotDifferentiable().Summary("Zeros of x's dtype and shape.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("OnesLike").Inputs(1).Shape(UnchangedShape)
      .NotDifferentiable().Summary("Ones of x's dtype and shape.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Fill")
      .InputNames({"dims", "value"})
      .Inputs(2).Shape(FillShape)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        std::vector<Output> out(2);
        if (dy[0].valid()) out[1] = ops::Sum(g, dy[0]);
        return out;
      })
      .Summary("A tensor of shape dims (int vector) filled with a scalar value.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Range")
      .InputNames({"start", "limit", "delta"})
      .Inputs(3).Shape(RangeShape).NotDifferentiable()
      .Summary("start, start + delta, ... up to limit (excluded), as TensorFlow's range; scalars of one dtype, "
               "delta not 0 and pointing towards limit.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Reshape")
      .InputNames({"tensor", "shape"})
      .Inputs(2).Shape(ReshapeShape).Grad(ReshapeBackGrad)
      .Summary("x with a new shape (int vector input; one dim may be -1); shares the buffer.")
      .Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ExpandDims")
      .RequiredAttr<int64_t>("axis")
      .Inputs(1).Shape(ExpandDimsShape).Grad(ReshapeBackGrad)
      .Summary("Inserts a size-1 axis at attr axis (negative counts from the end).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Squeeze")
      .Attr("axes", std::vector<int64_t>{})
      .Inputs(1).Shape(SqueezeShape).Grad(ReshapeBackGrad)
      .Summary("Removes size-1 axes (attr axes; empty = all of them).").Build()));
  return Status::OK();
}

namespace ops {

Output ShapeOf(Graph& g, Output x) { return g.Add1("Shape", {x}); }
Output Size(Graph& g, Output x) { return g.Add1("Size", {x}); }
Output Rank(Graph& g, Output x) { return g.Add1("Rank", {x}); }
Output ZerosLike(Graph& g, Output x) { return g.Add1("ZerosLike", {x}); }
Output OnesLike(Graph& g, Output x) { return g.Add1("OnesLike", {x}); }
Output Fill(Graph& g, Output dims, Output value) { return g.Add1("Fill", {dims, value}); }
Output Range(Graph& g, Output start, Output limit, Output delta) { return g.Add1("Range", {start, limit, delta}); }

// A Fill of a Const shape keeps big zero/one tensors out of the graph itself.
Output Zeros(Graph& g, DType dtype, const Shape& shape) {
  return Fill(g, Const(g, Tensor::FromVector(shape)), Const(g, Tensor::Zeros(dtype, {})));
}

Output Ones(Graph& g, DType dtype, const Shape& shape) {
  Tensor one(dtype, {});
  const bool ok = DispatchNumeric(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    one.data<T>()[0] = static_cast<T>(1);
  });
  if (!ok) {
    g.RecordError(InvalidArgument(std::string("Ones: dtype ") + DTypeName(dtype) + " is not numeric"));
    return Output();
  }
  return Fill(g, Const(g, Tensor::FromVector(shape)), Const(g, std::move(one)));
}

Output Reshape(Graph& g, Output x, Output shape) { return g.Add1("Reshape", {x, shape}); }

Output Reshape(Graph& g, Output x, const std::vector<int64_t>& shape) {
  return Reshape(g, x, Const(g, Tensor::FromVector(shape)));
}

Output ExpandDims(Graph& g, Output x, int64_t axis) {
  AttrMap a;
  a.Set("axis", axis);
  return g.Add1("ExpandDims", {x}, std::move(a));
}

Output Squeeze(Graph& g, Output x, std::vector<int64_t> axes) {
  AttrMap a;
  a.Set("axes", std::move(axes));
  return g.Add1("Squeeze", {x}, std::move(a));
}

}  // namespace ops
}  // namespace sf
