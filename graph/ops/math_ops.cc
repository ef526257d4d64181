// Math ops: broadcasting arithmetic, unary functions, AddN, Cast,
// comparisons and logic, Select, reductions, ArgMax, SumToShape, the scans
// Cumsum and Cumprod, and the operator overloads on Outputs.
//
// Gradients of broadcasting ops sum each partial back to its input's shape
// (ReduceTo); where both shapes are fully known and equal that is skipped, so
// the common same-shape case adds no nodes.
#include <algorithm>

#include "graph/op_registry.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

using Grads = std::vector<Output>;

// ---- shape functions --------------------------------------------------------

Status BroadcastTo(InferenceContext& c, DType out_dtype) {
  SF_RETURN_IF_ERROR(c.RequireSameDTypes());
  SF_ASSIGN_OR_RETURN(PartialShape s, BroadcastShapes(c.input_shape(0), c.input_shape(1)));
  c.set_output(0, out_dtype, std::move(s));
  return Status::OK();
}

Status BinaryShape(InferenceContext& c) { return BroadcastTo(c, c.input_dtype(0)); }
Status CompareShape(InferenceContext& c) { return BroadcastTo(c, DType::kBool); }

Status RequireBool(const InferenceContext& c, int i) {
  if (c.input_dtype(i) != DType::kBool)
    return c.Error("input " + std::to_string(i) + " must be bool, got " + DTypeName(c.input_dtype(i)));
  return Status::OK();
}

Status LogicalShape(InferenceContext& c) {
  for (int i = 0; i < c.num_inputs(); ++i) SF_RETURN_IF_ERROR(RequireBool(c, i));
  if (c.num_inputs() == 1) return UnchangedShape(c);
  return CompareShape(c);
}

Status AddNShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(c.RequireSameDTypes());
  PartialShape s = c.input_shape(0);
  for (int i = 1; i < c.num_inputs(); ++i) {
    if (!s.CompatibleWith(c.input_shape(i)))
      return c.Error("AddN inputs must have one shape: input 0 is " + c.input_shape(0).ToString() +
                     " but input " + std::to_string(i) + " is " + c.input_shape(i).ToString());
    s = s.Merge(c.input_shape(i));
  }
  c.set_output(0, c.input_dtype(0), std::move(s));
  return Status::OK();
}

Status CastShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(DType to, c.Attr<DType>("DstT"));
  if (to == DType::kInvalid || to == DType::kResource || to == DType::kBFloat16 ||
      to == DType::kFloat16)
    return c.Error(std::string("cannot cast to ") + DTypeName(to));
  c.set_output(0, to, c.input_shape(0));
  return Status::OK();
}

Status SelectShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireBool(c, 0));
  if (c.input_dtype(1) != c.input_dtype(2))
    return c.Error(std::string("Select's values must have one dtype, got ") +
                   DTypeName(c.input_dtype(1)) + " and " + DTypeName(c.input_dtype(2)));
  auto ab = BroadcastShapes(c.input_shape(1), c.input_shape(2));
  if (!ab.ok()) return ab.status();
  auto all = BroadcastShapes(c.input_shape(0), *ab);
  if (!all.ok())
    return c.Error("Select's condition " + c.input_shape(0).ToString() +
                   " does not broadcast against its values " + ab->ToString());
  c.set_output(0, c.input_dtype(1), *all);
  return Status::OK();
}

// Normalises reduction axes against rank r into a mask (empty = all).
Status ReductionMask(const std::vector<int64_t>& axes, int r, const std::string& shape,
                     std::vector<bool>* mask) {
  mask->assign(r, axes.empty());
  for (int64_t a : axes) {
    if (a < -r || a >= r)
      return InvalidArgument("reduction axis " + std::to_string(a) + " is out of range for shape " +
                             shape);
    (*mask)[a < 0 ? a + r : a] = true;
  }
  return Status::OK();
}

Status ReduceShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(std::vector<int64_t> axes, c.AttrOr<std::vector<int64_t>>("axes", {}));
  SF_ASSIGN_OR_RETURN(bool keep, c.AttrOr<bool>("keep_dims", false));
  const PartialShape& in = c.input_shape(0);
  const DType dt = c.input_dtype(0);
  if (!in.rank_known()) {
    c.set_output(0, dt, axes.empty() && !keep ? PartialShape(Shape{}) : PartialShape::Unknown());
    return Status::OK();
  }
  std::vector<bool> mask;
  SF_RETURN_IF_ERROR(ReductionMask(axes, in.rank(), in.ToString(), &mask));
  Shape out;
  for (int i = 0; i < in.rank(); ++i) {
    if (!mask[i]) out.push_back(in.dim(i));
    else if (keep) out.push_back(1);
  }
  c.set_output(0, dt, PartialShape(out));
  return Status::OK();
}

// IsNan and its kin: a bool of x's shape, x float.
Status FloatPredicateShape(InferenceContext& c) {
  if (!IsFloating(c.input_dtype(0)))
    return c.Error(std::string("x must be float32 or float64, got ") + DTypeName(c.input_dtype(0)));
  c.set_output(0, DType::kBool, c.input_shape(0));
  return Status::OK();
}

Status ArgExtremeShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(int64_t axis, c.Attr<int64_t>("axis"));
  const PartialShape& in = c.input_shape(0);
  if (!in.rank_known()) {
    c.set_output(0, DType::kInt64, PartialShape::Unknown());
    return Status::OK();
  }
  const int r = in.rank();
  if (axis < -r || axis >= r)
    return c.Error("axis " + std::to_string(axis) + " is out of range for shape " + in.ToString());
  Shape out = in.dims();
  out.erase(out.begin() + (axis < 0 ? axis + r : axis));
  c.set_output(0, DType::kInt64, PartialShape(out));
  return Status::OK();
}

Status ScanShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(int64_t axis, c.AttrOr<int64_t>("axis", 0));
  SF_RETURN_IF_ERROR(c.AttrOr<bool>("exclusive", false).status());
  SF_RETURN_IF_ERROR(c.AttrOr<bool>("reverse", false).status());
  const PartialShape& in = c.input_shape(0);
  if (in.rank_known() && (axis < -in.rank() || axis >= in.rank()))
    return c.Error(c.node().op + " axis " + std::to_string(axis) + " is out of range for shape " +
                   in.ToString());
  return UnchangedShape(c);
}

Status SumToShapeShape(InferenceContext& c) {
  const DType st = c.input_dtype(1);
  if (st != DType::kInt32 && st != DType::kInt64)
    return c.Error(std::string("SumToShape's shape must be int32 or int64, got ") + DTypeName(st));
  SF_RETURN_IF_ERROR(c.RequireRank(1, 1));
  const PartialShape& g = c.input_shape(0);
  const Tensor* t = c.input_constant(1);
  if (!t) {
    const PartialShape& v = c.input_shape(1);
    c.set_output(0, c.input_dtype(0),
                 v.rank_known() && v.dim(0) >= 0 ? PartialShape::UnknownDims(static_cast<int>(v.dim(0)))
                                                 : PartialShape::Unknown());
    return Status::OK();
  }
  const Shape target = t->ToVector<int64_t>();
  if (g.rank_known()) {
    const int gr = g.rank(), tr = static_cast<int>(target.size());
    bool ok = tr <= gr;
    for (int i = 0; ok && i < tr; ++i) {
      const int64_t gd = g.dim(gr - tr + i);
      ok = target[i] == 1 || gd == -1 || gd == target[i];
    }
    if (!ok)
      return c.Error("SumToShape cannot reduce shape " + g.ToString() + " to " + ShapeString(target));
  }
  c.set_output(0, c.input_dtype(0), PartialShape(target));
  return Status::OK();
}

// ---- gradient helpers -------------------------------------------------------

Output Y(Graph& g, const Node& n) { return Output(&g, n.id, 0); }

// The shape of x as a graph value: a Const when known at build time.
Output ShapeValue(Graph& g, Output x) {
  if (x.shape().fully_defined()) return ops::Const(g, Tensor::FromVector(x.shape().dims()));
  return ops::ShapeOf(g, x);
}

// True when broadcasting x against `other` can never expand x, whatever the
// unknown dims turn out to be (e.g. [?,512] against [512]).
bool NeverBroadcast(const PartialShape& x, const PartialShape& other) {
  if (!x.rank_known() || !other.rank_known() || other.rank() > x.rank()) return false;
  for (int i = 0; i < x.rank(); ++i) {
    const int j = i - (x.rank() - other.rank());
    const int64_t xd = x.dim(i), od = j >= 0 ? other.dim(j) : 1;
    if ((xd == -1 || xd == 1) && od != 1) return false;
  }
  return true;
}

// Sums a broadcast partial gradient back to x's shape; `other` is the
// operand x was broadcast against (invalid when unknown).
Output ReduceTo(Graph& g, Output part, Output x, Output other = Output()) {
  if (!part.valid()) return Output();
  if (x.shape().fully_defined() && part.shape() == x.shape()) return part;
  if (other.valid() && NeverBroadcast(x.shape(), other.shape())) return part;
  return ops::SumToShape(g, part, ShapeValue(g, x));
}

Output Scalar(Graph& g, Output like, double v) { return ops::ScalarLike(g, like, v); }

// Registers a binary broadcasting op whose gradient is given as the two
// unreduced partials (da, db) from (a, b, y, dy).
using PartialsFn = std::function<std::pair<Output, Output>(Graph&, Output a, Output b, Output y, Output dy)>;
GradFn BinaryGrad(PartialsFn f) {
  return [f](Graph& g, const Node& n, const Grads& dy) -> Grads {
    if (!dy[0].valid()) return Grads(2);
    auto p = f(g, n.inputs[0], n.inputs[1], Y(g, n), dy[0]);
    return {ReduceTo(g, p.first, n.inputs[0], n.inputs[1]),
            ReduceTo(g, p.second, n.inputs[1], n.inputs[0])};
  };
}

// A unary gradient dx = f(x, y, dy).
using UnaryFn = std::function<Output(Graph&, Output x, Output y, Output dy)>;
GradFn UnaryGrad(UnaryFn f) {
  return [f](Graph& g, const Node& n, const Grads& dy) -> Grads {
    if (!dy[0].valid()) return Grads(1);
    return {f(g, n.inputs[0], Y(g, n), dy[0])};
  };
}

struct ReduceAttrValues {
  std::vector<int64_t> axes;
  bool keep_dims = false;
};

ReduceAttrValues ReadReduceAttrs(const Node& n) {
  ReduceAttrValues r;
  auto axes = n.attrs.GetOr<std::vector<int64_t>>("axes", {});
  auto keep = n.attrs.GetOr<bool>("keep_dims", false);
  if (axes.ok()) r.axes = *axes;
  if (keep.ok()) r.keep_dims = *keep;
  return r;
}

// A reduction's output (or its gradient) reshaped to the keep_dims shape, so
// that it broadcasts against the reduction's input x.
Output ToKeptShape(Graph& g, const Node& n, Output v) {
  if (!v.valid()) return v;
  const ReduceAttrValues ra = ReadReduceAttrs(n);
  if (ra.keep_dims) return v;
  const PartialShape& xs = n.inputs[0].shape();
  if (!xs.rank_known()) {
    if (ra.axes.empty()) return v;  // a scalar broadcasts against anything
    std::vector<int64_t> axes = ra.axes;
    if (std::any_of(axes.begin(), axes.end(), [](int64_t a) { return a < 0; })) {
      g.RecordError(Unimplemented("node '" + n.name + "' (op " + n.op +
                                  "): the gradient of a reduction over negative axes needs the "
                                  "input's rank at graph construction"));
      return Output();
    }
    std::sort(axes.begin(), axes.end());
    axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
    for (int64_t a : axes) v = ops::ExpandDims(g, v, a);
    return v;
  }
  std::vector<bool> mask;
  if (!ReductionMask(ra.axes, xs.rank(), xs.ToString(), &mask).ok()) return Output();
  std::vector<int64_t> kept;
  bool known = true;
  for (int i = 0; i < xs.rank(); ++i) {
    kept.push_back(mask[i] ? 1 : xs.dim(i));
    known = known && kept.back() >= 0;
  }
  if (known) return ops::Reshape(g, v, kept);
  for (int i = 0; i < xs.rank(); ++i)
    if (mask[i]) v = ops::ExpandDims(g, v, i);
  return v;
}

// Broadcasts v (in the keep_dims shape) to x's shape.
Output BroadcastLike(Graph& g, Output v, Output x) {
  if (x.shape().fully_defined() && v.shape() == x.shape()) return v;
  return ops::Mul(g, v, ops::OnesLike(g, x));
}

Grads SumGrad(Graph& g, const Node& n, const Grads& dy) {
  if (!dy[0].valid()) return Grads(1);
  return {BroadcastLike(g, ToKeptShape(g, n, dy[0]), n.inputs[0])};
}

Grads MeanGrad(Graph& g, const Node& n, const Grads& dy) {
  if (!dy[0].valid()) return Grads(1);
  const Output x = n.inputs[0], y = Y(g, n);
  Output sum_grad = BroadcastLike(g, ToKeptShape(g, n, dy[0]), x);
  Output count;
  if (x.shape().fully_defined() && y.shape().fully_defined()) {
    const int64_t ny = std::max<int64_t>(1, NumElements(y.shape().dims()));
    count = Scalar(g, x, static_cast<double>(NumElements(x.shape().dims()) / ny));
  } else {
    count = ops::Div(g, ops::Cast(g, ops::Size(g, x), x.dtype()), ops::Cast(g, ops::Size(g, y), x.dtype()));
  }
  return {ops::Div(g, sum_grad, count)};
}

// Max / Min: the gradient goes to the positions holding the extreme value,
// shared equally between ties.
Grads ExtremeGrad(Graph& g, const Node& n, const Grads& dy) {
  if (!dy[0].valid()) return Grads(1);
  const Output x = n.inputs[0];
  const ReduceAttrValues ra = ReadReduceAttrs(n);
  Output mask = ops::Cast(g, ops::Equal(g, x, ToKeptShape(g, n, Y(g, n))), x.dtype());
  Output count = ops::Sum(g, mask, ra.axes, ops::ReduceAttrs{true});
  return {ops::Div(g, ops::Mul(g, mask, ToKeptShape(g, n, dy[0])), count)};
}

// The product of the others: out[i] = the product of x[j], j != i, along
// axis. Exclusive products from the left times those from the right, so no
// division, and exact where some x are 0.
Output ProductOfOthers(Graph& g, Output x, int64_t axis) {
  return ops::Mul(g, ops::Cumprod(g, x, axis, ops::ScanAttrs{true, false}),
                  ops::Cumprod(g, x, axis, ops::ScanAttrs{true, true}));
}

// Prod: d/dx_i = the product of the others reduced with x_i. Over several
// axes A = {a} + R the others of i factor into those along a of the product
// over R, times the others of i over R within i's own row along a:
//   prod_{j != i in A} x_j = prod_{j_a != i_a} prod_R x  *  prod_{j_R != i_R} x(i_a, j_R)
// so one exclusive product per axis gives it, exact where some x are 0, and
// needing neither a permutation nor the input's rank (TensorFlow transposes
// the reduced axes to the front, which needs the rank to build).
Output ProductOfOthersOver(Graph& g, Output x, const std::vector<int64_t>& axes) {
  if (axes.size() == 1) return ProductOfOthers(g, x, axes[0]);
  const std::vector<int64_t> rest(axes.begin() + 1, axes.end());
  const Output outer = ProductOfOthers(g, ops::Prod(g, x, rest, ops::ReduceAttrs{true}), axes[0]);
  return ops::Mul(g, outer, ProductOfOthersOver(g, x, rest));
}

Grads ProdGrad(Graph& g, const Node& n, const Grads& dy) {
  if (!dy[0].valid()) return Grads(1);
  const Output x = n.inputs[0];
  const Output dy_x = BroadcastLike(g, ToKeptShape(g, n, dy[0]), x);
  if (!dy_x.valid()) return Grads(1);  // ToKeptShape recorded why
  const PartialShape& xs = x.shape();
  const ReduceAttrValues ra = ReadReduceAttrs(n);
  std::vector<int64_t> axes;
  if (xs.rank_known()) {
    std::vector<bool> mask;
    if (!ReductionMask(ra.axes, xs.rank(), xs.ToString(), &mask).ok()) return Grads(1);
    for (int i = 0; i < xs.rank(); ++i)
      if (mask[i]) axes.push_back(i);
    if (axes.empty()) return {dy_x};  // a product of one value: x itself
  } else if (ra.axes.empty()) {
    // Every axis, of a rank unknown until run time: the others in x flattened.
    Output others = ProductOfOthers(g, ops::Reshape(g, x, std::vector<int64_t>{-1}), 0);
    return {ops::Mul(g, dy_x, ops::Reshape(g, others, ops::ShapeOf(g, x)))};
  } else {
    // Non-negative (ToKeptShape refused others above); each axis once.
    axes = ra.axes;
    std::sort(axes.begin(), axes.end());
    axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  }
  return {ops::Mul(g, dy_x, ProductOfOthersOver(g, x, axes))};
}

// Cumsum is linear; its adjoint runs the other way.
Grads CumsumGrad(Graph& g, const Node& n, const Grads& dy) {
  if (!dy[0].valid()) return Grads(1);
  const int64_t axis = n.attrs.GetOr<int64_t>("axis", 0).value();
  const bool exclusive = n.attrs.GetOr<bool>("exclusive", false).value();
  const bool reverse = n.attrs.GetOr<bool>("reverse", false).value();
  return {ops::Cumsum(g, dy[0], axis, ops::ScanAttrs{exclusive, !reverse})};
}

// Cumprod: the CumprodGrad kernel (reduction_kernels.cc), exact where x is
// 0. TensorFlow divides the running sums by x there, which gives 0 (or NaN)
// where a product of the others is needed.
Grads CumprodGrad(Graph& g, const Node& n, const Grads& dy) {
  if (!dy[0].valid()) return Grads(1);
  AttrMap a;
  a.Set("axis", n.attrs.GetOr<int64_t>("axis", 0).value());
  a.Set("exclusive", n.attrs.GetOr<bool>("exclusive", false).value());
  a.Set("reverse", n.attrs.GetOr<bool>("reverse", false).value());
  return {g.Add1("CumprodGrad", {n.inputs[0], dy[0]}, std::move(a))};
}

Grads SelectGrad(Graph& g, const Node& n, const Grads& dy) {
  if (!dy[0].valid()) return Grads(3);
  const Output c = n.inputs[0];
  Output zeros = ops::ZerosLike(g, dy[0]);
  return {Output(), ReduceTo(g, ops::Select(g, c, dy[0], zeros), n.inputs[1]),
          ReduceTo(g, ops::Select(g, c, zeros, dy[0]), n.inputs[2])};
}

Grads CastGrad(Graph& g, const Node& n, const Grads& dy) {
  const DType src = n.inputs[0].dtype();
  if (!dy[0].valid() || !IsFloating(src) || !IsFloating(dy[0].dtype())) return Grads(1);
  return {ops::Cast(g, dy[0], src)};
}

Grads SumToShapeGrad(Graph& g, const Node& n, const Grads& dy) {
  if (!dy[0].valid()) return Grads(2);
  return {BroadcastLike(g, dy[0], n.inputs[0]), Output()};
}

Status Binary(OpRegistry& reg, const char* name, PartialsFn f, const char* summary) {
  return reg.Register(OpBuilder(name).Inputs(2).Shape(BinaryShape).Grad(BinaryGrad(std::move(f)))
                         .Summary(summary).Build());
}

Status Unary(OpRegistry& reg, const char* name, UnaryFn f, const char* summary) {
  return reg.Register(OpBuilder(name).Inputs(1).Shape(UnchangedShape).Grad(UnaryGrad(std::move(f)))
                         .Summary(summary).Build());
}

Status NotDiff(OpRegistry& reg, const char* name, int inputs, ShapeFn f, const char* summary) {
  return reg.Register(OpBuilder(name).Inputs(inputs).Shape(std::move(f)).NotDifferentiable()
                         .Summary(summary).Build());
}

Status Reduction(OpRegistry& reg, const char* name, GradFn f, const char* summary) {
  return reg.Register(OpBuilder(name).Inputs(1).Shape(ReduceShape).Grad(std::move(f))
                         .Attr("axes", std::vector<int64_t>{}).Attr("keep_dims", false)
                         .Summary(summary).Build());
}

}  // namespace

Status RegisterMathOps(OpRegistry& reg) {
  using ops::Mul;
  SF_RETURN_IF_ERROR(Binary(reg, "Add", [](Graph&, Output, Output, Output, Output dy) { return std::make_pair(dy, dy); },
         "a + b with broadcasting."));
  SF_RETURN_IF_ERROR(Binary(reg, "Sub", [](Graph& g, Output, Output, Output, Output dy) {
           return std::make_pair(dy, ops::Neg(g, dy));
         }, "a - b with broadcasting."));
  SF_RETURN_IF_ERROR(Binary(reg, "Mul", [](Graph& g, Output a, Output b, Output, Output dy) {
           return std::make_pair(Mul(g, dy, b), Mul(g, a, dy));
         }, "a * b with broadcasting."));
  SF_RETURN_IF_ERROR(Binary(reg, "Div", [](Graph& g, Output, Output b, Output y, Output dy) {
           return std::make_pair(ops::Div(g, dy, b), ops::Neg(g, ops::Div(g, Mul(g, dy, y), b)));
         }, "a / b with broadcasting (integer division by zero is an error)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "FloorDiv", 2, BinaryShape,
         "floor(a / b) with broadcasting, as Python's // (integer division by zero is an error)."));
  // d/da (a - b floor(a/b)) = 1, d/db = -floor(a/b), away from the jumps (as TensorFlow).
  SF_RETURN_IF_ERROR(Binary(reg, "FloorMod", [](Graph& g, Output a, Output b, Output, Output dy) {
           return std::make_pair(dy, ops::Neg(g, Mul(g, dy, ops::FloorDiv(g, a, b))));
         }, "a - b * floor(a / b) with broadcasting, as Python's % (takes b's sign; integer division by zero is "
            "an error)."));
  SF_RETURN_IF_ERROR(Binary(reg, "SquaredDifference", [](Graph& g, Output a, Output b, Output, Output dy) {
           Output d = Mul(g, Scalar(g, dy, 2.0), Mul(g, dy, ops::Sub(g, a, b)));
           return std::make_pair(d, ops::Neg(g, d));
         }, "(a - b) ** 2 with broadcasting."));
  SF_RETURN_IF_ERROR(Binary(reg, "Pow", [](Graph& g, Output a, Output b, Output y, Output dy) {
           Output da = Mul(g, dy, Mul(g, b, ops::Pow(g, a, ops::Sub(g, b, Scalar(g, b, 1.0)))));
           // d/db a^b = a^b log a, taken as 0 where a <= 0 (log undefined).
           Output log_a = ops::Select(g, ops::Greater(g, a, Scalar(g, a, 0.0)), ops::Log(g, a),
                                      ops::ZerosLike(g, a));
           return std::make_pair(da, Mul(g, dy, Mul(g, y, log_a)));
         }, "a ** b with broadcasting."));
  SF_RETURN_IF_ERROR(Binary(reg, "Maximum", [](Graph& g, Output a, Output b, Output, Output dy) {
           Output mask = ops::GreaterEqual(g, a, b), zeros = ops::ZerosLike(g, dy);
           return std::make_pair(ops::Select(g, mask, dy, zeros), ops::Select(g, mask, zeros, dy));
         }, "Element-wise max(a, b) with broadcasting."));
  SF_RETURN_IF_ERROR(Binary(reg, "Minimum", [](Graph& g, Output a, Output b, Output, Output dy) {
           Output mask = ops::LessEqual(g, a, b), zeros = ops::ZerosLike(g, dy);
           return std::make_pair(ops::Select(g, mask, dy, zeros), ops::Select(g, mask, zeros, dy));
         }, "Element-wise min(a, b) with broadcasting."));

  SF_RETURN_IF_ERROR(Unary(reg, "Neg", [](Graph& g, Output, Output, Output dy) { return ops::Neg(g, dy); }, "-x."));
  SF_RETURN_IF_ERROR(Unary(reg, "Abs", [](Graph& g, Output x, Output, Output dy) { return Mul(g, dy, ops::Sign(g, x)); },
        "|x|."));
  SF_RETURN_IF_ERROR(Unary(reg, "Square", [](Graph& g, Output x, Output, Output dy) {
          return Mul(g, dy, Mul(g, x, Scalar(g, x, 2.0)));
        }, "x * x."));
  SF_RETURN_IF_ERROR(Unary(reg, "Sqrt", [](Graph& g, Output, Output y, Output dy) {
          return ops::Div(g, Mul(g, dy, Scalar(g, y, 0.5)), y);
        }, "Square root."));
  SF_RETURN_IF_ERROR(Unary(reg, "Rsqrt", [](Graph& g, Output, Output y, Output dy) {
          return Mul(g, dy, Mul(g, Scalar(g, y, -0.5), Mul(g, y, ops::Square(g, y))));
        }, "1 / sqrt(x)."));
  SF_RETURN_IF_ERROR(Unary(reg, "Exp", [](Graph& g, Output, Output y, Output dy) { return Mul(g, dy, y); }, "e ** x."));
  SF_RETURN_IF_ERROR(Unary(reg, "Log", [](Graph& g, Output x, Output, Output dy) { return ops::Div(g, dy, x); },
        "Natural logarithm."));
  SF_RETURN_IF_ERROR(Unary(reg, "Reciprocal", [](Graph& g, Output, Output y, Output dy) {
          return ops::Neg(g, Mul(g, dy, ops::Square(g, y)));
        }, "1 / x."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "Sign", 1, UnchangedShape, "-1, 0 or 1 by the sign of x (not differentiable)."));
  SF_RETURN_IF_ERROR(Unary(reg, "Sin", [](Graph& g, Output x, Output, Output dy) { return Mul(g, dy, ops::Cos(g, x)); },
        "sin(x)."));
  SF_RETURN_IF_ERROR(Unary(reg, "Cos", [](Graph& g, Output x, Output, Output dy) {
          return ops::Neg(g, Mul(g, dy, ops::Sin(g, x)));
        }, "cos(x)."));
  SF_RETURN_IF_ERROR(Unary(reg, "Log1p", [](Graph& g, Output x, Output, Output dy) {
          return ops::Div(g, dy, ops::Add(g, x, Scalar(g, x, 1.0)));
        }, "log(1 + x), exact for x near 0."));
  SF_RETURN_IF_ERROR(Unary(reg, "Expm1", [](Graph& g, Output, Output y, Output dy) {
          return Mul(g, dy, ops::Add(g, y, Scalar(g, y, 1.0)));
        }, "exp(x) - 1, exact for x near 0."));
  // Piecewise constant: no gradient, as in TensorFlow.
  SF_RETURN_IF_ERROR(NotDiff(reg, "Floor", 1, UnchangedShape, "The largest integer <= x (not differentiable)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "Ceil", 1, UnchangedShape, "The smallest integer >= x (not differentiable)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "Round", 1, UnchangedShape,
        "x rounded to the nearest integer, halves to even as NumPy and TensorFlow (not differentiable)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "IsNan", 1, FloatPredicateShape, "Whether x is NaN (bool; float inputs)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "IsInf", 1, FloatPredicateShape, "Whether x is +-inf (bool; float inputs)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "IsFinite", 1, FloatPredicateShape,
        "Whether x is neither NaN nor +-inf (bool; float inputs)."));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("AddN").Inputs(1, -1).Shape(AddNShape)
      .Grad([](Graph&, const Node& n, const Grads& dy) { return Grads(n.inputs.size(), dy[0]); })
      .Summary("Sum of any number of same-shape tensors.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Cast")
      .RequiredAttr<DType>("DstT")
      .Inputs(1).Shape(CastShape).Grad(CastGrad)
      .Summary("x converted to dtype DstT (gradient only between floating dtypes).").Build()));

  SF_RETURN_IF_ERROR(NotDiff(reg, "Equal", 2, CompareShape, "a == b with broadcasting (bool)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "NotEqual", 2, CompareShape, "a != b with broadcasting (bool)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "Less", 2, CompareShape, "a < b with broadcasting (bool)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "LessEqual", 2, CompareShape, "a <= b with broadcasting (bool)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "Greater", 2, CompareShape, "a > b with broadcasting (bool)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "GreaterEqual", 2, CompareShape, "a >= b with broadcasting (bool)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "LogicalAnd", 2, LogicalShape, "a && b with broadcasting (bool inputs)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "LogicalOr", 2, LogicalShape, "a || b with broadcasting (bool inputs)."));
  SF_RETURN_IF_ERROR(NotDiff(reg, "LogicalNot", 1, LogicalShape, "!x (bool)."));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Select")
      .InputNames({"condition", "x", "y"})
      .Inputs(3).Shape(SelectShape).Grad(SelectGrad)
      .Summary("cond ? a : b element-wise; all three broadcast together.").Build()));

  SF_RETURN_IF_ERROR(Reduction(reg, "Sum", SumGrad, "Sum over attr axes (empty = all; keep_dims)."));
  SF_RETURN_IF_ERROR(Reduction(reg, "Mean", MeanGrad, "Mean over attr axes (empty = all; keep_dims)."));
  SF_RETURN_IF_ERROR(Reduction(reg, "Max", ExtremeGrad, "Maximum over attr axes (empty = all; keep_dims)."));
  SF_RETURN_IF_ERROR(Reduction(reg, "Min", ExtremeGrad, "Minimum over attr axes (empty = all; keep_dims)."));
  SF_RETURN_IF_ERROR(Reduction(reg, "Prod", ProdGrad, "Product over attr axes (empty = all; keep_dims)."));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ArgMax").Inputs(1).RequiredAttr<int64_t>("axis").Shape(ArgExtremeShape)
      .NotDifferentiable().Summary("Index of the largest value along attr axis (int64; the first of ties or NaNs).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ArgMin").Inputs(1).RequiredAttr<int64_t>("axis").Shape(ArgExtremeShape)
      .NotDifferentiable().Summary("Index of the smallest value along attr axis (int64; the first of ties or NaNs).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("SumToShape")
      .InputNames({"grad", "shape"})
      .Inputs(2).Shape(SumToShapeShape).Grad(SumToShapeGrad)
      .Summary("Sums grad over broadcast axes down to an int shape (the gradient of broadcasting).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Cumsum").Inputs(1)
      .Attr("axis", int64_t{0}).Attr("exclusive", false).Attr("reverse", false)
      .Shape(ScanShape).Grad(CumsumGrad)
      .Summary("Running sums along attr axis (default 0; attrs exclusive, reverse).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Cumprod").Inputs(1)
      .Attr("axis", int64_t{0}).Attr("exclusive", false).Attr("reverse", false)
      .Shape(ScanShape).Grad(CumprodGrad)
      .Summary("Running products along attr axis (default 0; attrs exclusive, reverse).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("CumprodGrad").InputNames({"x", "dy"}).Inputs(2)
      .Attr("axis", int64_t{0}).Attr("exclusive", false).Attr("reverse", false)
      .Shape(ScanShape).NotDifferentiable()
      .Summary("The gradient of Cumprod(x) (same attrs) for dy, exact where x holds zeros: no division.").Build()));
  return Status::OK();
}

namespace ops {

Output Add(Graph& g, Output a, Output b) { return g.Add1("Add", {a, b}); }
Output Sub(Graph& g, Output a, Output b) { return g.Add1("Sub", {a, b}); }
Output Mul(Graph& g, Output a, Output b) { return g.Add1("Mul", {a, b}); }
Output Div(Graph& g, Output a, Output b) { return g.Add1("Div", {a, b}); }
Output FloorDiv(Graph& g, Output a, Output b) { return g.Add1("FloorDiv", {a, b}); }
Output FloorMod(Graph& g, Output a, Output b) { return g.Add1("FloorMod", {a, b}); }
Output SquaredDifference(Graph& g, Output a, Output b) { return g.Add1("SquaredDifference", {a, b}); }
Output Sin(Graph& g, Output x) { return g.Add1("Sin", {x}); }
Output Cos(Graph& g, Output x) { return g.Add1("Cos", {x}); }
Output Log1p(Graph& g, Output x) { return g.Add1("Log1p", {x}); }
Output Expm1(Graph& g, Output x) { return g.Add1("Expm1", {x}); }
Output Floor(Graph& g, Output x) { return g.Add1("Floor", {x}); }
Output Ceil(Graph& g, Output x) { return g.Add1("Ceil", {x}); }
Output Round(Graph& g, Output x) { return g.Add1("Round", {x}); }
Output IsNan(Graph& g, Output x) { return g.Add1("IsNan", {x}); }
Output IsInf(Graph& g, Output x) { return g.Add1("IsInf", {x}); }
Output IsFinite(Graph& g, Output x) { return g.Add1("IsFinite", {x}); }
Output Pow(Graph& g, Output a, Output b) { return g.Add1("Pow", {a, b}); }
Output Maximum(Graph& g, Output a, Output b) { return g.Add1("Maximum", {a, b}); }
Output Minimum(Graph& g, Output a, Output b) { return g.Add1("Minimum", {a, b}); }
Output Neg(Graph& g, Output x) { return g.Add1("Neg", {x}); }
Output Abs(Graph& g, Output x) { return g.Add1("Abs", {x}); }
Output Square(Graph& g, Output x) { return g.Add1("Square", {x}); }
Output Sqrt(Graph& g, Output x) { return g.Add1("Sqrt", {x}); }
Output Rsqrt(Graph& g, Output x) { return g.Add1("Rsqrt", {x}); }
Output Exp(Graph& g, Output x) { return g.Add1("Exp", {x}); }
Output Log(Graph& g, Output x) { return g.Add1("Log", {x}); }
Output Sign(Graph& g, Output x) { return g.Add1("Sign", {x}); }
Output Reciprocal(Graph& g, Output x) { return g.Add1("Reciprocal", {x}); }
Output AddN(Graph& g, const std::vector<Output>& xs) { return g.Add1("AddN", xs); }

Output Cast(Graph& g, Output x, DType to) {
  AttrMap a;
  a.Set("DstT", to);
  return g.Add1("Cast", {x}, std::move(a));
}

Output Equal(Graph& g, Output a, Output b) { return g.Add1("Equal", {a, b}); }
Output NotEqual(Graph& g, Output a, Output b) { return g.Add1("NotEqual", {a, b}); }
Output Less(Graph& g, Output a, Output b) { return g.Add1("Less", {a, b}); }
Output LessEqual(Graph& g, Output a, Output b) { return g.Add1("LessEqual", {a, b}); }
Output Greater(Graph& g, Output a, Output b) { return g.Add1("Greater", {a, b}); }
Output GreaterEqual(Graph& g, Output a, Output b) { return g.Add1("GreaterEqual", {a, b}); }
Output LogicalAnd(Graph& g, Output a, Output b) { return g.Add1("LogicalAnd", {a, b}); }
Output LogicalOr(Graph& g, Output a, Output b) { return g.Add1("LogicalOr", {a, b}); }
Output LogicalNot(Graph& g, Output x) { return g.Add1("LogicalNot", {x}); }
Output Select(Graph& g, Output cond, Output a, Output b) { return g.Add1("Select", {cond, a, b}); }

namespace {
Output Reduce(Graph& g, const char* op, Output x, std::vector<int64_t> axes, ReduceAttrs ra) {
  AttrMap a;
  a.Set("axes", std::move(axes));
  a.Set("keep_dims", ra.keep_dims);
  return g.Add1(op, {x}, std::move(a));
}
}  // namespace

Output Sum(Graph& g, Output x, std::vector<int64_t> axes, ReduceAttrs a) {
  return Reduce(g, "Sum", x, std::move(axes), a);
}
Output Mean(Graph& g, Output x, std::vector<int64_t> axes, ReduceAttrs a) {
  return Reduce(g, "Mean", x, std::move(axes), a);
}
Output Max(Graph& g, Output x, std::vector<int64_t> axes, ReduceAttrs a) {
  return Reduce(g, "Max", x, std::move(axes), a);
}
Output Min(Graph& g, Output x, std::vector<int64_t> axes, ReduceAttrs a) {
  return Reduce(g, "Min", x, std::move(axes), a);
}
Output Prod(Graph& g, Output x, std::vector<int64_t> axes, ReduceAttrs a) {
  return Reduce(g, "Prod", x, std::move(axes), a);
}

Output ArgMax(Graph& g, Output x, int64_t axis) {
  AttrMap a;
  a.Set("axis", axis);
  return g.Add1("ArgMax", {x}, std::move(a));
}
Output ArgMin(Graph& g, Output x, int64_t axis) {
  AttrMap a;
  a.Set("axis", axis);
  return g.Add1("ArgMin", {x}, std::move(a));
}

Output SumToShape(Graph& g, Output grad, Output shape) { return g.Add1("SumToShape", {grad, shape}); }

namespace {
Output Scan(Graph& g, const char* op, Output x, int64_t axis, ScanAttrs sa) {
  AttrMap a;
  a.Set("axis", axis);
  a.Set("exclusive", sa.exclusive);
  a.Set("reverse", sa.reverse);
  return g.Add1(op, {x}, std::move(a));
}
}  // namespace

Output Cumsum(Graph& g, Output x, int64_t axis, ScanAttrs a) { return Scan(g, "Cumsum", x, axis, a); }
Output Cumprod(Graph& g, Output x, int64_t axis, ScanAttrs a) { return Scan(g, "Cumprod", x, axis, a); }

}  // namespace ops

namespace {
// The graph of an operator's operands (either may be invalid after an
// earlier error); null when neither has one.
Graph* GraphOf(const Output& a, const Output& b) { return a.graph ? a.graph : b.graph; }
}  // namespace

Output operator+(Output a, Output b) {
  Graph* g = GraphOf(a, b);
  return g ? ops::Add(*g, a, b) : Output();
}
Output operator-(Output a, Output b) {
  Graph* g = GraphOf(a, b);
  return g ? ops::Sub(*g, a, b) : Output();
}
Output operator*(Output a, Output b) {
  Graph* g = GraphOf(a, b);
  return g ? ops::Mul(*g, a, b) : Output();
}
Output operator/(Output a, Output b) {
  Graph* g = GraphOf(a, b);
  return g ? ops::Div(*g, a, b) : Output();
}
Output operator-(Output a) { return a.graph ? ops::Neg(*a.graph, a) : Output(); }
Output operator+(Output a, double b) {
  return a.graph ? ops::Add(*a.graph, a, ops::ScalarLike(*a.graph, a, b)) : Output();
}
Output operator-(Output a, double b) {
  return a.graph ? ops::Sub(*a.graph, a, ops::ScalarLike(*a.graph, a, b)) : Output();
}
Output operator*(Output a, double b) {
  return a.graph ? ops::Mul(*a.graph, a, ops::ScalarLike(*a.graph, a, b)) : Output();
}
Output operator/(Output a, double b) {
  return a.graph ? ops::Div(*a.graph, a, ops::ScalarLike(*a.graph, a, b)) : Output();
}
Output operator*(double a, Output b) {
  return b.graph ? ops::Mul(*b.graph, ops::ScalarLike(*b.graph, b, a), b) : Output();
}

}  // namespace sf
