// NN ops: activations, softmax and losses, MatMul/BatchMatMul, BiasAdd,
// Conv2D, pooling and Dropout, with their gradient-only helper ops.
//
// Helper ops (ReluGrad, Conv2DBackpropInput, ...) follow TensorFlow's
// signatures so graphs read the same; they are not differentiable (no
// second-order gradients through them).
#include <string>
#include <vector>

#include "graph/op_registry.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

// ---- shape helpers ---------------------------------------------------------

// Requires a floating dtype on input i.
Status RequireFloat(const InferenceContext& c, int i) {
  DType t = c.input_dtype(i);
  if (t != DType::kFloat32 && t != DType::kFloat64)
    return c.Error(std::string("input ") + std::to_string(i) + " must be float32 or float64, not " +
                   DTypeName(t));
  return Status::OK();
}

// Unary float op: y has x's dtype and shape.
Status FloatUnchanged(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireFloat(c, 0));
  return UnchangedShape(c);
}

// (a, b) of one dtype and compatible shapes -> the merged shape.
Status SameShapePair(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireFloat(c, 0));
  SF_RETURN_IF_ERROR(c.RequireSameDTypes());
  const PartialShape& a = c.input_shape(0);
  const PartialShape& b = c.input_shape(1);
  if (!a.CompatibleWith(b))
    return c.Error("inputs must have the same shape, got " + a.ToString() + " and " + b.ToString());
  c.set_output(0, c.input_dtype(0), a.Merge(b));
  return Status::OK();
}

// Softmax-like ops: rank >= 1.
Status LastAxisUnchanged(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireFloat(c, 0));
  const PartialShape& s = c.input_shape(0);
  if (s.rank_known() && s.rank() < 1)
    return c.Error("logits must have rank >= 1, got " + s.ToString());
  return UnchangedShape(c);
}

// Merges two dims (-1 unknown); false on a mismatch.
bool MergeDim(int64_t a, int64_t b, int64_t* out) {
  if (a >= 0 && b >= 0 && a != b) return false;
  *out = a >= 0 ? a : b;
  return true;
}

Result<std::vector<int64_t>> FourInts(const InferenceContext& c, const std::string& name,
                                      std::vector<int64_t> def) {
  SF_ASSIGN_OR_RETURN(std::vector<int64_t> v, c.AttrOr<std::vector<int64_t>>(name, def));
  if (v.size() != 4)
    return c.Error("attr " + name + " must have 4 values (NHWC), got " + std::to_string(v.size()));
  for (int64_t x : v)
    if (x < 1) return c.Error("attr " + name + " values must be >= 1");
  if (v[0] != 1 || v[3] != 1)
    return c.Error("attr " + name + " must be 1 in the batch and channel dimensions");
  return v;
}

Result<bool> PaddingSame(const InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(std::string p, c.AttrOr<std::string>("padding", "VALID"));
  if (p == "SAME") return true;
  if (p == "VALID") return false;
  return c.Error("attr padding must be \"SAME\" or \"VALID\", got \"" + p + "\"");
}

// Output size of one spatial dim (-1 when unknown); -2 when the window does
// not fit. An empty dim gives an empty output (as the kernels, and TensorFlow).
int64_t WindowOut(int64_t in, int64_t k, int64_t s, bool same) {
  if (in < 0) return -1;
  if (in == 0) return 0;
  if (same) return (in - 1) / s + 1;  // ceil(in / s), without overflow for any stride
  if (in < k) return -2;
  return (in - k) / s + 1;
}

// Input [N,H,W,C] through a KHxKW window -> [N,OH,OW,oc].
Result<PartialShape> WindowedShape(const InferenceContext& c, const PartialShape& in, int64_t kh,
                                   int64_t kw, const std::vector<int64_t>& strides, bool same,
                                   int64_t oc) {
  if (!in.rank_known()) return PartialShape({-1, -1, -1, oc});
  if (in.rank() != 4) return c.Error("input must be rank 4 (NHWC), got " + in.ToString());
  const int64_t oh = WindowOut(in.dim(1), kh, strides[1], same);
  const int64_t ow = WindowOut(in.dim(2), kw, strides[2], same);
  if (oh == -2 || ow == -2)
    return c.Error("window " + std::to_string(kh) + "x" + std::to_string(kw) +
                   " is larger than the input " + in.ToString() + " with VALID padding");
  return PartialShape({in.dim(0), oh, ow, oc});
}

// The shape a Const int32/int64 input i holds (the *_sizes inputs of helper ops).
PartialShape ConstShapeOr(const InferenceContext& c, int i, int rank) {
  const Tensor* t = c.input_constant(i);
  if (!t || t->num_elements() != rank) return PartialShape::UnknownDims(rank);
  std::vector<int64_t> d = t->ToVector<int64_t>();
  return PartialShape(Shape(d.begin(), d.end()));
}

Status MatMulShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireFloat(c, 0));
  SF_RETURN_IF_ERROR(c.RequireSameDTypes());
  SF_ASSIGN_OR_RETURN(bool ta, c.AttrOr<bool>("transpose_a", false));
  SF_ASSIGN_OR_RETURN(bool tb, c.AttrOr<bool>("transpose_b", false));
  const PartialShape& a = c.input_shape(0);
  const PartialShape& b = c.input_shape(1);
  if ((a.rank_known() && a.rank() != 2) || (b.rank_known() && b.rank() != 2))
    return c.Error("MatMul needs rank-2 inputs, got " + a.ToString() + " and " + b.ToString());
  const int64_t m = a.rank_known() ? a.dim(ta ? 1 : 0) : -1;
  const int64_t ka = a.rank_known() ? a.dim(ta ? 0 : 1) : -1;
  const int64_t kb = b.rank_known() ? b.dim(tb ? 1 : 0) : -1;
  const int64_t n = b.rank_known() ? b.dim(tb ? 0 : 1) : -1;
  int64_t k;
  if (!MergeDim(ka, kb, &k))
    return c.Error("MatMul inner dimensions differ: a " + a.ToString() +
                   (ta ? " (transposed)" : "") + " and b " + b.ToString() +
                   (tb ? " (transposed)" : ""));
  c.set_output(0, c.input_dtype(0), PartialShape({m, n}));
  return Status::OK();
}

Status BatchMatMulShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireFloat(c, 0));
  SF_RETURN_IF_ERROR(c.RequireSameDTypes());
  SF_ASSIGN_OR_RETURN(bool ta, c.AttrOr<bool>("transpose_a", false));
  SF_ASSIGN_OR_RETURN(bool tb, c.AttrOr<bool>("transpose_b", false));
  const PartialShape& a = c.input_shape(0);
  const PartialShape& b = c.input_shape(1);
  if ((a.rank_known() && a.rank() < 2) || (b.rank_known() && b.rank() < 2))
    return c.Error("BatchMatMul needs inputs of rank >= 2, got " + a.ToString() + " and " +
                   b.ToString());
  if (!a.rank_known() || !b.rank_known()) {
    c.set_output(0, c.input_dtype(0), PartialShape::Unknown());
    return Status::OK();
  }
  const int ra = a.rank(), rb = b.rank();
  const int64_t m = a.dim(ta ? ra - 1 : ra - 2), ka = a.dim(ta ? ra - 2 : ra - 1);
  const int64_t kb = b.dim(tb ? rb - 1 : rb - 2), n = b.dim(tb ? rb - 2 : rb - 1);
  int64_t k;
  if (!MergeDim(ka, kb, &k))
    return c.Error("BatchMatMul inner dimensions differ: a " + a.ToString() +
                   (ta ? " (transposed)" : "") + " and b " + b.ToString() +
                   (tb ? " (transposed)" : ""));
  Shape ba(a.dims().begin(), a.dims().end() - 2), bb(b.dims().begin(), b.dims().end() - 2);
  auto batch = BroadcastShapes(PartialShape(ba), PartialShape(bb));
  if (!batch.ok())
    return c.Error("BatchMatMul batch dimensions do not broadcast: a " + a.ToString() + " and b " +
                   b.ToString());
  Shape out = batch->dims();
  out.push_back(m);
  out.push_back(n);
  c.set_output(0, c.input_dtype(0), PartialShape(out));
  return Status::OK();
}

// FusedMatMul: MatMul's shape, with a bias vector matching its columns.
Status FusedMatMulShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(MatMulShape(c));
  SF_ASSIGN_OR_RETURN(bool tb, c.AttrOr<bool>("transpose_b", false));
  SF_ASSIGN_OR_RETURN(std::string act, c.AttrOr<std::string>("activation", "none"));
  if (act != "none" && act != "relu")
    return c.Error("FusedMatMul activation must be \"none\" or \"relu\", got \"" + act + "\"");
  const PartialShape& b = c.input_shape(1);
  const PartialShape& bias = c.input_shape(2);
  if (bias.rank_known() && bias.rank() != 1) return c.Error("FusedMatMul bias must be rank 1, got " + bias.ToString());
  const int64_t n = b.rank_known() ? b.dim(tb ? 0 : 1) : -1;
  int64_t d;
  if (bias.rank_known() && !MergeDim(n, bias.dim(0), &d))
    return c.Error("FusedMatMul bias size must match the product's columns: b " + b.ToString() +
                   (tb ? " (transposed)" : "") + ", bias " + bias.ToString());
  return Status::OK();
}

Status BiasAddShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireFloat(c, 0));
  SF_RETURN_IF_ERROR(c.RequireSameDTypes());
  const PartialShape& x = c.input_shape(0);
  const PartialShape& b = c.input_shape(1);
  if (x.rank_known() && x.rank() < 1) return c.Error("BiasAdd input must have rank >= 1, got []");
  if (b.rank_known() && b.rank() != 1) return c.Error("BiasAdd bias must be rank 1, got " + b.ToString());
  if (x.rank_known() && b.rank_known()) {
    int64_t d;
    if (!MergeDim(x.dim(x.rank() - 1), b.dim(0), &d))
      return c.Error("BiasAdd bias size must match the last dimension of the input: input " +
                     x.ToString() + ", bias " + b.ToString());
    Shape out = x.dims();
    out.back() = d;
    c.set_output(0, c.input_dtype(0), PartialShape(out));
    return Status::OK();
  }
  c.set_output(0, c.input_dtype(0), x);
  return Status::OK();
}

Status Conv2DShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireFloat(c, 0));
  SF_RETURN_IF_ERROR(c.RequireSameDTypes());
  SF_ASSIGN_OR_RETURN(std::vector<int64_t> strides, FourInts(c, "strides", {1, 1, 1, 1}));
  SF_ASSIGN_OR_RETURN(bool same, PaddingSame(c));
  const PartialShape& in = c.input_shape(0);
  const PartialShape& f = c.input_shape(1);
  if (in.rank_known() && in.rank() != 4)
    return c.Error("Conv2D input must be rank 4 (NHWC), got " + in.ToString());
  if (f.rank_known() && f.rank() != 4)
    return c.Error("Conv2D filter must be rank 4 [KH,KW,C,OC], got " + f.ToString());
  const int64_t kh = f.rank_known() ? f.dim(0) : -1, kw = f.rank_known() ? f.dim(1) : -1;
  const int64_t oc = f.rank_known() ? f.dim(3) : -1;
  if (in.rank_known() && f.rank_known()) {
    int64_t ch;
    if (!MergeDim(in.dim(3), f.dim(2), &ch))
      return c.Error("Conv2D input channels " + std::to_string(in.dim(3)) +
                     " differ from the filter's " + std::to_string(f.dim(2)) + ": input " +
                     in.ToString() + ", filter " + f.ToString());
  }
  if (kh < 0 || kw < 0) {
    PartialShape out = in.rank_known() ? PartialShape({in.dim(0), -1, -1, oc})
                                       : PartialShape({-1, -1, -1, oc});
    if (same && in.rank_known())
      out = PartialShape({in.dim(0), WindowOut(in.dim(1), 1, strides[1], true),
                          WindowOut(in.dim(2), 1, strides[2], true), oc});
    c.set_output(0, c.input_dtype(0), out);
    return Status::OK();
  }
  SF_ASSIGN_OR_RETURN(PartialShape out, WindowedShape(c, in, kh, kw, strides, same, oc));
  c.set_output(0, c.input_dtype(0), out);
  return Status::OK();
}

// FusedConv2D: Conv2D's shape, with a bias vector matching its output channels.
Status FusedConv2DShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(Conv2DShape(c));
  SF_ASSIGN_OR_RETURN(std::string act, c.AttrOr<std::string>("activation", "none"));
  if (act != "none" && act != "relu")
    return c.Error("FusedConv2D activation must be \"none\" or \"relu\", got \"" + act + "\"");
  const PartialShape& f = c.input_shape(1);
  const PartialShape& bias = c.input_shape(2);
  if (bias.rank_known() && bias.rank() != 1) return c.Error("FusedConv2D bias must be rank 1, got " + bias.ToString());
  int64_t d;
  if (bias.rank_known() && !MergeDim(f.rank_known() ? f.dim(3) : -1, bias.dim(0), &d))
    return c.Error("FusedConv2D bias size must match the filter's output channels: filter " + f.ToString() +
                   ", bias " + bias.ToString());
  return Status::OK();
}

Status PoolShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireFloat(c, 0));
  SF_ASSIGN_OR_RETURN(std::vector<int64_t> ksize, FourInts(c, "ksize", {1, 2, 2, 1}));
  SF_ASSIGN_OR_RETURN(std::vector<int64_t> strides, FourInts(c, "strides", {1, 2, 2, 1}));
  SF_ASSIGN_OR_RETURN(bool same, PaddingSame(c));
  const PartialShape& in = c.input_shape(0);
  SF_ASSIGN_OR_RETURN(PartialShape out,
                      WindowedShape(c, in, ksize[1], ksize[2], strides, same,
                                    in.rank_known() && in.rank() == 4 ? in.dim(3) : -1));
  c.set_output(0, c.input_dtype(0), out);
  return Status::OK();
}

// Output i of the node being differentiated.
Output Out(Graph& g, const Node& n, int i) { return Output(&g, n.id, i); }

// The shape of x as an int32 Const when known at build time, else a Shape op.
Output ShapeTensor(Graph& g, Output x) {
  const PartialShape& s = x.shape();
  if (s.fully_defined()) {
    std::vector<int32_t> d(s.dims().begin(), s.dims().end());
    return ops::Const(g, d);
  }
  return ops::ShapeOf(g, x);
}

// Copies the window attrs of a node (strides, padding, ksize) into a map.
AttrMap WindowAttrs(const Node& n, DType t) {
  AttrMap a;
  for (const char* k : {"strides", "padding", "ksize", "precision"})
    if (const AttrValue* v = n.attrs.Find(k)) a.Set(k, *v);
  a.Set("T", t);
  return a;
}

// dy[b] * m[b, :] for a per-example gradient dy.
Output RowScale(Graph& g, Output dy, Output m) {
  return ops::Mul(g, ops::ExpandDims(g, dy, -1), m);
}

// A gradient's product computes at its forward node's precision (MatMul only).
Output MatMulNode(Graph& g, const char* op, Output a, Output b, bool ta, bool tb,
                  const AttrValue* precision = nullptr) {
  AttrMap m;
  m.Set("transpose_a", ta);
  m.Set("transpose_b", tb);
  if (precision) m.Set("precision", *precision);
  return g.Add1(op, {a, b}, std::move(m));
}

// Gradient of op(A) op(B) for MatMul and BatchMatMul.
std::vector<Output> MatMulGradImpl(Graph& g, const Node& n, Output dc, const char* op) {
  const bool ta = n.attrs.GetOr<bool>("transpose_a", false).value();
  const bool tb = n.attrs.GetOr<bool>("transpose_b", false).value();
  Output a = n.inputs[0], b = n.inputs[1];
  const AttrValue* p = n.attrs.Find("precision");
  Output da, db;
  if (!ta && !tb) {
    da = MatMulNode(g, op, dc, b, false, true, p);
    db = MatMulNode(g, op, a, dc, true, false, p);
  } else if (!ta && tb) {
    da = MatMulNode(g, op, dc, b, false, false, p);
    db = MatMulNode(g, op, dc, a, true, false, p);
  } else if (ta && !tb) {
    da = MatMulNode(g, op, b, dc, false, true, p);
    db = MatMulNode(g, op, a, dc, false, false, p);
  } else {
    da = MatMulNode(g, op, b, dc, true, true, p);
    db = MatMulNode(g, op, dc, a, true, true, p);
  }
  return {da, db};
}

// Sums a BatchMatMul operand's gradient over the batch dims it was broadcast along.
Output UnbroadcastBatch(Graph& g, Output grad, Output x) {
  if (!grad.valid()) return grad;
  if (x.shape().fully_defined() && grad.shape() == x.shape()) return grad;
  return ops::SumToShape(g, grad, ShapeTensor(g, x));
}

}  // namespace

Status RegisterNNOps(OpRegistry& reg) {
  // ---- activations ---------------------------------------------------------
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Relu").Inputs(1).Shape(FloatUnchanged)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        return std::vector<Output>{g.Add1("ReluGrad", {dy[0], Out(g, n, 0)})};
      })
      .Summary("max(x, 0).").Build()));
  // The *Grad ops are differentiable too (second-order gradients: Hessians,
  // gradient penalties): they were NotDifferentiable, and the walk dropped
  // their terms without a word.
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ReluGrad").Inputs(2).Shape(SameShapePair)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        // Linear in dy; piecewise constant in y.
        return std::vector<Output>{g.Add1("ReluGrad", {dy[0], n.inputs[1]}), ops::ZerosLike(g, n.inputs[1])};
      })
      .Summary("ReluGrad(dy, y): dy where y > 0, else 0.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Sigmoid").Inputs(1).Shape(FloatUnchanged)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        return std::vector<Output>{g.Add1("SigmoidGrad", {Out(g, n, 0), dy[0]})};
      })
      .Summary("1 / (1 + exp(-x)).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("SigmoidGrad").Inputs(2).Shape(SameShapePair)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        // d/dy of dy0 y (1 - y) is dy0 (1 - 2y).
        const Output y = n.inputs[0], d = n.inputs[1];
        const Output one_minus_2y = ops::Sub(g, ops::OnesLike(g, y), ops::Add(g, y, y));
        return std::vector<Output>{ops::Mul(g, ops::Mul(g, dy[0], d), one_minus_2y), g.Add1("SigmoidGrad", {y, dy[0]})};
      })
      .Summary("SigmoidGrad(y, dy): dy * y * (1 - y).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Tanh").Inputs(1).Shape(FloatUnchanged)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        return std::vector<Output>{g.Add1("TanhGrad", {Out(g, n, 0), dy[0]})};
      })
      .Summary("tanh(x).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("TanhGrad").Inputs(2).Shape(SameShapePair)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        // d/dy of dy0 (1 - y^2) is -2 y dy0.
        const Output y = n.inputs[0], d = n.inputs[1];
        const Output gy = ops::Neg(g, ops::Mul(g, ops::Mul(g, dy[0], d), ops::Add(g, y, y)));
        return std::vector<Output>{gy, g.Add1("TanhGrad", {y, dy[0]})};
      })
      .Summary("TanhGrad(y, dy): dy * (1 - y^2).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Softplus").Inputs(1).Shape(FloatUnchanged)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        return std::vector<Output>{g.Add1("SoftplusGrad", {dy[0], n.inputs[0]})};
      })
      .Summary("log(1 + exp(x)), computed stably.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("SoftplusGrad").Inputs(2).Shape(SameShapePair)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        // d/dx of dy0 sigmoid(x) is dy0 s (1 - s): SigmoidGrad(s, g dy0).
        const Output d = n.inputs[0], x = n.inputs[1];
        const Output gx = g.Add1("SigmoidGrad", {ops::Sigmoid(g, x), ops::Mul(g, dy[0], d)});
        return std::vector<Output>{g.Add1("SoftplusGrad", {dy[0], x}), gx};
      })
      .Summary("SoftplusGrad(dy, x): dy * sigmoid(x).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("LeakyRelu").Inputs(1).Shape(FloatUnchanged).Attr("alpha", 0.2)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        if (!dy[0].valid()) return std::vector<Output>(1);
        const Output x = n.inputs[0];
        const double alpha = n.attrs.GetOr<double>("alpha", 0.2).value();
        return std::vector<Output>{ops::Select(g, ops::Greater(g, x, ops::ZerosLike(g, x)), dy[0],
                                               ops::Mul(g, dy[0], ops::ScalarLike(g, dy[0], alpha)))};
      })
      .Summary("x if x > 0 else alpha * x (attr alpha, default 0.2).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Elu").Inputs(1).Shape(FloatUnchanged)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        return std::vector<Output>{g.Add1("EluGrad", {dy[0], Out(g, n, 0)})};
      })
      .Summary("x if x > 0 else exp(x) - 1.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("EluGrad").Inputs(2).Shape(SameShapePair)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        // dy0 (y + 1) where y <= 0: d/dy is dy0 there, 0 elsewhere.
        const Output d = n.inputs[0], y = n.inputs[1];
        const Output positive = ops::Greater(g, y, ops::ZerosLike(g, y));
        const Output gy = ops::Select(g, positive, ops::ZerosLike(g, y), ops::Mul(g, dy[0], d));
        return std::vector<Output>{g.Add1("EluGrad", {dy[0], y}), gy};
      })
      .Summary("EluGrad(dy, y): dy if y > 0 else dy * (y + 1).").Build()));

  // ---- softmax and losses --------------------------------------------------
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Softmax").Inputs(1).Shape(LastAxisUnchanged)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        return std::vector<Output>{g.Add1("SoftmaxGrad", {Out(g, n, 0), dy[0]})};
      })
      .Summary("exp(x) / sum(exp(x)) over the last axis.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("SoftmaxGrad").Inputs(2).Shape(SameShapePair)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        // out = (d - sum(d y)) y: d/dy = g0 (d - sum(d y)) - d sum(g0 y); d/dd = SoftmaxGrad(y, g0).
        const Output y = n.inputs[0], d = n.inputs[1];
        const ops::ReduceAttrs keep{true};
        const Output sdy = ops::Sum(g, ops::Mul(g, d, y), {-1}, keep);
        const Output sgy = ops::Sum(g, ops::Mul(g, dy[0], y), {-1}, keep);
        const Output gy = ops::Sub(g, ops::Mul(g, dy[0], ops::Sub(g, d, sdy)), ops::Mul(g, d, sgy));
        return std::vector<Output>{gy, g.Add1("SoftmaxGrad", {y, dy[0]})};
      })
      .Summary("SoftmaxGrad(y, dy): (dy - sum(dy * y, -1)) * y.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("LogSoftmax").Inputs(1).Shape(LastAxisUnchanged)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        return std::vector<Output>{g.Add1("LogSoftmaxGrad", {Out(g, n, 0), dy[0]})};
      })
      .Summary("x - log(sum(exp(x))) over the last axis.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("LogSoftmaxGrad").Inputs(2).Shape(SameShapePair)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        // out = d - exp(y) sum(d): d/dy = -g0 exp(y) sum(d); d/dd = g0 - sum(g0 exp(y)).
        const Output y = n.inputs[0], d = n.inputs[1];
        const ops::ReduceAttrs keep{true};
        const Output e = ops::Exp(g, y);
        const Output gy = ops::Neg(g, ops::Mul(g, ops::Mul(g, dy[0], e), ops::Sum(g, d, {-1}, keep)));
        const Output gd = ops::Sub(g, dy[0], ops::Sum(g, ops::Mul(g, dy[0], e), {-1}, keep));
        return std::vector<Output>{gy, gd};
      })
      .Summary("LogSoftmaxGrad(y, dy): dy - exp(y) * sum(dy, -1).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("SoftmaxCrossEntropyWithLogits")
      .InputNames({"logits", "labels"})
      .Inputs(2)
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireFloat(c, 0));
        SF_RETURN_IF_ERROR(c.RequireSameDTypes());
        const PartialShape& l = c.input_shape(0);
        const PartialShape& y = c.input_shape(1);
        if ((l.rank_known() && l.rank() != 2) || (y.rank_known() && y.rank() != 2))
          return c.Error("logits and labels must be [batch, classes], got " + l.ToString() +
                         " and " + y.ToString());
        if (!l.CompatibleWith(y))
          return c.Error("logits and labels must have the same shape, got " + l.ToString() +
                         " and " + y.ToString());
        PartialShape m = l.rank_known() ? l.Merge(y) : (y.rank_known() ? y : PartialShape::UnknownDims(2));
        c.set_output(0, c.input_dtype(0), PartialShape({m.dim(0)}));
        c.set_output(1, c.input_dtype(0), m);
        return Status::OK();
      })
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        // loss = -sum(labels * log softmax(logits)), backprop = softmax - labels.
        std::vector<Output> grads(2);
        const Output logits = n.inputs[0], labels = n.inputs[1];
        if (dy[0].valid()) {
          // d loss / d logits = softmax * sum(labels) - labels: backprop
          // itself only for labels that sum to 1 (TensorFlow returns
          // backprop for any labels, which is not the loss's derivative).
          const Output backprop = Out(g, n, 1);
          const Output mass = ops::Sum(g, labels, {-1}, ops::ReduceAttrs{true});
          const Output exact = ops::Sub(g, ops::Mul(g, ops::Add(g, backprop, labels), mass), labels);
          grads[0] = RowScale(g, dy[0], exact);
          grads[1] = RowScale(g, ops::Neg(g, dy[0]), ops::LogSoftmax(g, logits));
        }
        if (dy.size() > 1 && dy[1].valid()) {
          // Through backprop (a second-order use, e.g. a gradient penalty):
          // softmax's adjoint for the logits, -dy for the labels. It was
          // silently zero.
          const Output d_logits = g.Add1("SoftmaxGrad", {ops::Softmax(g, logits), dy[1]});
          const Output d_labels = ops::Neg(g, dy[1]);
          grads[0] = grads[0].valid() ? ops::Add(g, grads[0], d_logits) : d_logits;
          grads[1] = grads[1].valid() ? ops::Add(g, grads[1], d_labels) : d_labels;
        }
        return grads;
      })
      .Summary("Per-example softmax cross entropy (loss [batch], backprop [batch, classes]).")
      .Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("SparseSoftmaxCrossEntropyWithLogits")
      .InputNames({"logits", "labels"})
      .Inputs(2)
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireFloat(c, 0));
        const PartialShape& l = c.input_shape(0);
        const PartialShape& y = c.input_shape(1);
        if (c.input_dtype(1) != DType::kInt32 && c.input_dtype(1) != DType::kInt64)
          return c.Error(std::string("labels must be int32 or int64, not ") +
                         DTypeName(c.input_dtype(1)));
        if (l.rank_known() && l.rank() != 2)
          return c.Error("logits must be [batch, classes], got " + l.ToString());
        if (y.rank_known() && y.rank() != 1)
          return c.Error("labels must be [batch], got " + y.ToString());
        int64_t b = -1, cl = l.rank_known() ? l.dim(1) : -1;
        if (!MergeDim(l.rank_known() ? l.dim(0) : -1, y.rank_known() ? y.dim(0) : -1, &b))
          return c.Error("logits " + l.ToString() + " and labels " + y.ToString() +
                         " differ in batch size");
        c.set_output(0, c.input_dtype(0), PartialShape({b}));
        c.set_output(1, c.input_dtype(0), PartialShape({b, cl}));
        return Status::OK();
      })
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        // backprop = softmax(logits) - onehot(labels): the loss's gradient,
        // and through output 1 (a second-order use) softmax's adjoint, as
        // the dense op. Labels are indices: no gradient.
        Output d_logits;
        if (dy[0].valid()) d_logits = RowScale(g, dy[0], Out(g, n, 1));
        if (dy.size() > 1 && dy[1].valid()) {
          const Output through = g.Add1("SoftmaxGrad", {ops::Softmax(g, n.inputs[0]), dy[1]});
          d_logits = d_logits.valid() ? ops::Add(g, d_logits, through) : through;
        }
        return std::vector<Output>{d_logits, Output()};
      })
      .Summary("Per-example softmax cross entropy with class-index labels.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("L2Loss").Inputs(1)
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireFloat(c, 0));
        c.set_output(0, c.input_dtype(0), PartialShape(Shape{}));
        return Status::OK();
      })
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        return std::vector<Output>{ops::Mul(g, n.inputs[0], dy[0])};
      })
      .Summary("sum(x^2) / 2.").Build()));

  // ---- linear algebra ------------------------------------------------------
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("MatMul")
      .InputNames({"a", "b"})
      .Attr("transpose_a", false).Attr("transpose_b", false).Attr("precision", "fp32")
      .Inputs(2).Shape(MatMulShape)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        return MatMulGradImpl(g, n, dy[0], "MatMul");
      })
      .Summary("op(a) x op(b) of matrices (attrs transpose_a, transpose_b; precision \"bf16\": "
               "bf16 inputs, fp32 accumulation and result).").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("BatchMatMul")
      .InputNames({"a", "b"})
      .Attr("transpose_a", false).Attr("transpose_b", false)
      .Inputs(2).Shape(BatchMatMulShape)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        auto d = MatMulGradImpl(g, n, dy[0], "BatchMatMul");
        return std::vector<Output>{UnbroadcastBatch(g, d[0], n.inputs[0]),
                                   UnbroadcastBatch(g, d[1], n.inputs[1])};
      })
      .Summary("Batched op(a) x op(b) over the last two axes; batch dims broadcast.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("BiasAdd")
      .InputNames({"value", "bias"})
      .Inputs(2).Shape(BiasAddShape)
      .Grad([](Graph& g, const Node&, const std::vector<Output>& dy) {
        return std::vector<Output>{dy[0], g.Add1("BiasAddGrad", {dy[0]})};
      })
      .Summary("x + bias over the last axis.").Build()));
  // MatMul + BiasAdd (+ Relu) as one kernel (TensorFlow's _FusedMatMul):
  // the bias is written into the output before the product accumulates onto
  // it and the activation is applied to each block while it is in cache, so
  // the output is not zero-filled, and bias and activation cost no pass of
  // their own. The gradient is the unfused ops' gradient.
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("FusedMatMul")
      .InputNames({"a", "b", "bias"})
      .Attr("transpose_a", false).Attr("transpose_b", false).Attr("activation", "none").Attr("precision", "fp32")
      .Inputs(3).Shape(FusedMatMulShape)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        const bool relu = n.attrs.GetOr<std::string>("activation", "none").value() == "relu";
        Output dz = relu ? g.Add1("ReluGrad", {dy[0], Out(g, n, 0)}) : dy[0];
        auto d = MatMulGradImpl(g, n, dz, "MatMul");
        return std::vector<Output>{d[0], d[1], g.Add1("BiasAddGrad", {dz})};
      })
      .Summary("activation(op(a) x op(b) + bias), activation \"none\" or \"relu\": MatMul, BiasAdd and "
               "Relu in one kernel (precision as MatMul's).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("BiasAddGrad").Inputs(1)
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireFloat(c, 0));
        const PartialShape& s = c.input_shape(0);
        if (s.rank_known() && s.rank() < 1) return c.Error("BiasAddGrad input must have rank >= 1");
        c.set_output(0, c.input_dtype(0), PartialShape({s.rank_known() ? s.dim(s.rank() - 1) : -1}));
        return Status::OK();
      })
      .NotDifferentiable().Summary("Sums dy over every axis but the last.").Build()));

  // ---- convolution ---------------------------------------------------------
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Conv2D")
      .InputNames({"input", "filter"})
      .Attr("strides", std::vector<int64_t>{1, 1, 1, 1}).Attr("padding", "SAME").Attr("precision", "fp32")
      .Inputs(2).Shape(Conv2DShape)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        Output x = n.inputs[0], f = n.inputs[1];
        Output dx = g.Add1("Conv2DBackpropInput", {ShapeTensor(g, x), f, dy[0]},
                           WindowAttrs(n, x.dtype()));
        Output df = g.Add1("Conv2DBackpropFilter", {x, ShapeTensor(g, f), dy[0]},
                           WindowAttrs(n, x.dtype()));
        return std::vector<Output>{dx, df};
      })
      .Summary("2-D convolution: input NHWC, filter [KH,KW,C,OC] (attrs strides, padding; precision \"bf16\": "
               "bf16 inputs, fp32 accumulation and result).")
      .Build()));
  // Conv2D + BiasAdd (+ Relu) as one kernel (TensorFlow's _FusedConv2D):
  // oneDNN adds the bias and applies ReLU inside the convolution, so the
  // output is written once instead of three times (each pass over a conv
  // layer's output is memory-bound). The gradient is the unfused ops'.
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("FusedConv2D")
      .InputNames({"input", "filter", "bias"})
      .Attr("strides", std::vector<int64_t>{1, 1, 1, 1}).Attr("padding", "SAME").Attr("precision", "fp32")
      .Attr("activation", "none")
      .Inputs(3).Shape(FusedConv2DShape)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        const bool relu = n.attrs.GetOr<std::string>("activation", "none").value() == "relu";
        Output dz = relu ? g.Add1("ReluGrad", {dy[0], Out(g, n, 0)}) : dy[0];
        Output x = n.inputs[0], f = n.inputs[1];
        Output dx = g.Add1("Conv2DBackpropInput", {ShapeTensor(g, x), f, dz}, WindowAttrs(n, x.dtype()));
        Output df = g.Add1("Conv2DBackpropFilter", {x, ShapeTensor(g, f), dz}, WindowAttrs(n, x.dtype()));
        return std::vector<Output>{dx, df, g.Add1("BiasAddGrad", {dz})};
      })
      .Summary("activation(conv2d(input, filter) + bias), activation \"none\" or \"relu\": Conv2D, BiasAdd "
               "and Relu in one kernel (attrs and precision as Conv2D's).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Conv2DBackpropInput")
      .Attr("T", DType::kInvalid).Attr("strides", std::vector<int64_t>{1, 1, 1, 1})
      .Attr("padding", "SAME").Attr("precision", "fp32")
      .Inputs(3)
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireFloat(c, 1));
        c.set_output(0, c.input_dtype(1), ConstShapeOr(c, 0, 4));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Conv2DBackpropInput(input_sizes, filter, dy): the gradient of Conv2D's input.")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Conv2DBackpropFilter")
      .Attr("T", DType::kInvalid).Attr("strides", std::vector<int64_t>{1, 1, 1, 1})
      .Attr("padding", "SAME").Attr("precision", "fp32")
      .Inputs(3)
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireFloat(c, 0));
        c.set_output(0, c.input_dtype(0), ConstShapeOr(c, 1, 4));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("Conv2DBackpropFilter(input, filter_sizes, dy): the gradient of Conv2D's filter.")
      .Build()));

  // ---- pooling -------------------------------------------------------------
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("MaxPool")
      .Attr("ksize", std::vector<int64_t>{1, 2, 2, 1}).Attr("strides", std::vector<int64_t>{1, 2, 2, 1})
      .Attr("padding", "VALID")
      .Inputs(1).Shape(PoolShape)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        Output x = n.inputs[0];
        return std::vector<Output>{
            g.Add1("MaxPoolGrad", {x, Out(g, n, 0), dy[0]}, WindowAttrs(n, x.dtype()))};
      })
      .Summary("Max over windows of NHWC input (attrs ksize, strides, padding).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("MaxPoolGrad")
      .Attr("T", DType::kInvalid).Attr("ksize", std::vector<int64_t>{1, 2, 2, 1})
      .Attr("strides", std::vector<int64_t>{1, 2, 2, 1}).Attr("padding", "VALID")
      .Inputs(3).Shape(UnchangedShape).NotDifferentiable()
      .Summary("MaxPoolGrad(x, y, dy): dy routed to each window's (first) maximum.").Build()));

  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("AvgPool")
      .Attr("ksize", std::vector<int64_t>{1, 2, 2, 1}).Attr("strides", std::vector<int64_t>{1, 2, 2, 1})
      .Attr("padding", "VALID")
      .Inputs(1).Shape(PoolShape)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        Output x = n.inputs[0];
        return std::vector<Output>{
            g.Add1("AvgPoolGrad", {ShapeTensor(g, x), dy[0]}, WindowAttrs(n, x.dtype()))};
      })
      .Summary("Mean over windows of NHWC input (SAME padding averages valid cells only).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("AvgPoolGrad")
      .Attr("T", DType::kInvalid).Attr("ksize", std::vector<int64_t>{1, 2, 2, 1})
      .Attr("strides", std::vector<int64_t>{1, 2, 2, 1}).Attr("padding", "VALID")
      .Inputs(2)
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireFloat(c, 1));
        c.set_output(0, c.input_dtype(1), ConstShapeOr(c, 0, 4));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("AvgPoolGrad(input_sizes, dy): dy spread evenly over each window.").Build()));

  // ---- dropout -------------------------------------------------------------
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Dropout")
      .InputNames({"x", "rate_tensor"})
      .RequiredAttr<double>("rate").Attr("seed", int64_t{0})
      .Inputs(1, 2).Stateful().Repeatable()
      .Shape([](InferenceContext& c) -> Status {
        SF_RETURN_IF_ERROR(RequireFloat(c, 0));
        if (c.num_inputs() == 2) {
          // The rate as a tensor (TF 1.x's fed keep_prob): checked per step by the kernel.
          if (c.attrs().Has("rate"))
            return c.Error("Dropout takes its rate as the attr or as input 1, not both");
          if (!IsFloating(c.input_dtype(1)))
            return c.Error(std::string("Dropout rate input must be a float scalar, not ") + DTypeName(c.input_dtype(1)));
          const PartialShape& r = c.input_shape(1);
          if (r.rank_known() && r.rank() != 0) return c.Error("Dropout rate input must be a scalar, got " + r.ToString());
        } else {
          SF_ASSIGN_OR_RETURN(double rate, c.Attr<double>("rate"));
          if (!(rate >= 0.0 && rate < 1.0))
            return c.Error("Dropout rate must be in [0, 1), got " + std::to_string(rate));
        }
        c.set_output(0, c.input_dtype(0), c.input_shape(0));
        c.set_output(1, c.input_dtype(0), c.input_shape(0));
        return Status::OK();
      })
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        std::vector<Output> grads(n.inputs.size());  // none for a rate input
        grads[0] = ops::Mul(g, dy[0], Out(g, n, 1));
        return grads;
      })
      .Summary("Outputs (x * mask, mask): mask is 0 with probability rate, else 1/(1-rate); "
               "a seeded sequence (attrs rate, seed; or the rate as a scalar input 1).")
      .Build()));
  return Status::OK();
}

namespace ops {

Output Relu(Graph& g, Output x) { return g.Add1("Relu", {x}); }
Output Sigmoid(Graph& g, Output x) { return g.Add1("Sigmoid", {x}); }
Output Tanh(Graph& g, Output x) { return g.Add1("Tanh", {x}); }
Output Softplus(Graph& g, Output x) { return g.Add1("Softplus", {x}); }
Output Elu(Graph& g, Output x) { return g.Add1("Elu", {x}); }
Output LeakyRelu(Graph& g, Output x, double alpha) {
  AttrMap a;
  a.Set("alpha", alpha);
  return g.Add1("LeakyRelu", {x}, std::move(a));
}
Output Softmax(Graph& g, Output logits) { return g.Add1("Softmax", {logits}); }
Output LogSoftmax(Graph& g, Output logits) { return g.Add1("LogSoftmax", {logits}); }

Output MatMul(Graph& g, Output a, Output b, MatMulAttrs attrs) {
  return MatMulNode(g, "MatMul", a, b, attrs.transpose_a, attrs.transpose_b);
}
Output BatchMatMul(Graph& g, Output a, Output b, MatMulAttrs attrs) {
  return MatMulNode(g, "BatchMatMul", a, b, attrs.transpose_a, attrs.transpose_b);
}
Output BiasAdd(Graph& g, Output x, Output bias) { return g.Add1("BiasAdd", {x, bias}); }
Output FusedMatMul(Graph& g, Output a, Output b, Output bias, const std::string& activation, MatMulAttrs attrs) {
  AttrMap m;
  m.Set("transpose_a", attrs.transpose_a);
  m.Set("transpose_b", attrs.transpose_b);
  m.Set("activation", activation);
  return g.Add1("FusedMatMul", {a, b, bias}, std::move(m));
}

Output Conv2D(Graph& g, Output input, Output filter, Conv2DAttrs attrs) {
  AttrMap a;
  a.Set("strides", attrs.strides);
  a.Set("padding", attrs.padding);
  return g.Add1("Conv2D", {input, filter}, std::move(a));
}

Output FusedConv2D(Graph& g, Output input, Output filter, Output bias, const std::string& activation,
                   Conv2DAttrs attrs) {
  AttrMap a;
  a.Set("strides", attrs.strides);
  a.Set("padding", attrs.padding);
  a.Set("activation", activation);
  return g.Add1("FusedConv2D", {input, filter, bias}, std::move(a));
}

Output MaxPool(Graph& g, Output input, PoolAttrs attrs) {
  AttrMap a;
  a.Set("ksize", attrs.ksize);
  a.Set("strides", attrs.strides);
  a.Set("padding", attrs.padding);
  return g.Add1("MaxPool", {input}, std::move(a));
}
Output AvgPool(Graph& g, Output input, PoolAttrs attrs) {
  AttrMap a;
  a.Set("ksize", attrs.ksize);
  a.Set("strides", attrs.strides);
  a.Set("padding", attrs.padding);
  return g.Add1("AvgPool", {input}, std::move(a));
}

Output SoftmaxCrossEntropyWithLogits(Graph& g, Output logits, Output labels) {
  return g.Add1("SoftmaxCrossEntropyWithLogits", {logits, labels});
}
Output SparseSoftmaxCrossEntropyWithLogits(Graph& g, Output logits, Output labels) {
  return g.Add1("SparseSoftmaxCrossEntropyWithLogits", {logits, labels});
}
Output L2Loss(Graph& g, Output x) { return g.Add1("L2Loss", {x}); }

Output Dropout(Graph& g, Output x, double rate, int64_t seed) {
  AttrMap a;
  a.Set("rate", rate);
  a.Set("seed", seed != 0 ? seed : SeedFromNodeName(g, "Dropout"));
  return g.Add1("Dropout", {x}, std::move(a));
}

}  // namespace ops
}  // namespace sf
