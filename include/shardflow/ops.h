// The builder API: one function per op, reading like the math.
//
//   auto h = ops::Relu(g, ops::MatMul(g, x, w1) + b1);
//
// Each adds one node to g (checking shapes) and returns its output; on error
// the graph keeps the error (g.status()) and the result is invalid, so a
// chain of builders needs one check at the end. Optional arguments are
// attribute structs with documented defaults.
#pragma once

#include <string>
#include <vector>

#include "shardflow/graph.h"

namespace sf {
namespace ops {

// ---- constants, placeholders, identity -------------------------------------
Output Const(Graph& g, Tensor value, const std::string& name = "");
Output Const(Graph& g, float v);   // float32 scalar
Output Const(Graph& g, double v);  // float64 scalar
Output Const(Graph& g, int32_t v);
Output Const(Graph& g, int64_t v);
Output Const(Graph& g, const std::vector<float>& v, const Shape& shape);
Output Const(Graph& g, const std::vector<int32_t>& v);  // int32 vector (shapes, axes)
// A scalar of `like`'s dtype (float32 when like is float32, ...).
Output ScalarLike(Graph& g, Output like, double v);
// Fed at run time; shape dims may be -1 (unknown).
Output Placeholder(Graph& g, DType dtype, PartialShape shape, const std::string& name = "");
Output Identity(Graph& g, Output x, const std::string& name = "");
// A node with no outputs that runs after its control inputs (Operations, or
// node ids of g); invalid on error (recorded in g.status()).
Operation NoOp(Graph& g, const ControlDeps& control_inputs, const std::string& name = "");
Output StopGradient(Graph& g, Output x);

// ---- variables (state in variable shard actors) ----------------------------
// A handle (dtype resource) to the session's variable `shared_name`.
Output VarHandle(Graph& g, const std::string& shared_name, DType dtype, PartialShape shape,
                 const std::string& name = "");
Output ReadVariable(Graph& g, Output handle, DType dtype);
// Assign / AssignAdd / AssignSub return the new value.
Output Assign(Graph& g, Output handle, Output value);
Output AssignAdd(Graph& g, Output handle, Output value);
Output AssignSub(Graph& g, Output handle, Output value);
// variable[indices[i], ...] = updates[i, ...] as one update where the variable lives (TF's ScatterUpdate).
Operation ResourceScatterUpdate(Graph& g, Output handle, Output indices, Output updates);

// A variable made of a VarHandle named `name`, an initializer Assign
// registered under the graph's initializers, and a read. Returns the read;
// VariableHandle(read) gets the handle back.
Output Variable(Graph& g, const std::string& name, Output initial_value);
// The handle behind a read built by Variable (invalid if `read` is not one).
Output VariableHandle(Output read);
// A NoOp that runs every initializer Assign created by Variable so far.
Operation GlobalVariablesInitializer(Graph& g, const std::string& name = "init");

// ---- element-wise math (NumPy broadcasting) --------------------------------
Output Add(Graph& g, Output a, Output b);
Output Sub(Graph& g, Output a, Output b);
Output Mul(Graph& g, Output a, Output b);
Output Div(Graph& g, Output a, Output b);
// floor(a / b), as Python's // (1 // 0.1 is 9); int division by 0 fails at run time.
Output FloorDiv(Graph& g, Output a, Output b);
// a - b * floor(a / b), with b's sign, as Python's %; int division by 0 fails at run time.
Output FloorMod(Graph& g, Output a, Output b);
Output Pow(Graph& g, Output a, Output b);
Output SquaredDifference(Graph& g, Output a, Output b);  // (a - b) ** 2
Output Maximum(Graph& g, Output a, Output b);
Output Minimum(Graph& g, Output a, Output b);
Output Neg(Graph& g, Output x);
Output Abs(Graph& g, Output x);
Output Square(Graph& g, Output x);
Output Sqrt(Graph& g, Output x);
Output Rsqrt(Graph& g, Output x);
Output Exp(Graph& g, Output x);
Output Log(Graph& g, Output x);
Output Sign(Graph& g, Output x);
Output Reciprocal(Graph& g, Output x);
// Exact per element (the C library's), float32 and float64.
Output Sin(Graph& g, Output x);
Output Cos(Graph& g, Output x);
Output Log1p(Graph& g, Output x);  // log(1 + x)
Output Expm1(Graph& g, Output x);  // exp(x) - 1
// Not differentiable; Round takes halves to even, as NumPy and TensorFlow.
Output Floor(Graph& g, Output x);
Output Ceil(Graph& g, Output x);
Output Round(Graph& g, Output x);
// bool tensors of x's shape, x float32 or float64.
Output IsNan(Graph& g, Output x);
Output IsInf(Graph& g, Output x);
Output IsFinite(Graph& g, Output x);
Output AddN(Graph& g, const std::vector<Output>& xs);
Output Cast(Graph& g, Output x, DType to);

// Comparisons and selection (results are bool).
Output Equal(Graph& g, Output a, Output b);
Output NotEqual(Graph& g, Output a, Output b);
Output Less(Graph& g, Output a, Output b);
Output LessEqual(Graph& g, Output a, Output b);
Output Greater(Graph& g, Output a, Output b);
Output GreaterEqual(Graph& g, Output a, Output b);
Output LogicalAnd(Graph& g, Output a, Output b);
Output LogicalOr(Graph& g, Output a, Output b);
Output LogicalNot(Graph& g, Output x);
// cond ? a : b element-wise (cond broadcast to a's shape).
Output Select(Graph& g, Output cond, Output a, Output b);

// ---- activations -----------------------------------------------------------
Output Relu(Graph& g, Output x);
Output Sigmoid(Graph& g, Output x);
Output Tanh(Graph& g, Output x);
Output Softplus(Graph& g, Output x);
Output Elu(Graph& g, Output x);
// x if x > 0 else alpha * x.
Output LeakyRelu(Graph& g, Output x, double alpha = 0.2);
// Softmax over the last axis.
Output Softmax(Graph& g, Output logits);
Output LogSoftmax(Graph& g, Output logits);

// ---- reductions (axes may be negative; empty axes = all) ------------------
struct ReduceAttrs {
  bool keep_dims = false;  // keep reduced axes with size 1
};
Output Sum(Graph& g, Output x, std::vector<int64_t> axes = {}, ReduceAttrs a = {});
Output Mean(Graph& g, Output x, std::vector<int64_t> axes = {}, ReduceAttrs a = {});
Output Max(Graph& g, Output x, std::vector<int64_t> axes = {}, ReduceAttrs a = {});
Output Min(Graph& g, Output x, std::vector<int64_t> axes = {}, ReduceAttrs a = {});
Output Prod(Graph& g, Output x, std::vector<int64_t> axes = {}, ReduceAttrs a = {});
// Index of the largest value along `axis` (int64 result).
Output ArgMax(Graph& g, Output x, int64_t axis);
// Index of the smallest value along `axis` (int64 result).
Output ArgMin(Graph& g, Output x, int64_t axis);

// ---- scans along one axis (may be negative) ---------------------------------
struct ScanAttrs {
  bool exclusive = false;  // element i leaves out x[i]: [a, b, c] -> [id, a, a.b]
  bool reverse = false;    // from the end: [a, b, c] -> [a.b.c, b.c, c]
};
// Running sums / products of x along axis, as TensorFlow's cumsum / cumprod.
Output Cumsum(Graph& g, Output x, int64_t axis, ScanAttrs a = {});
Output Cumprod(Graph& g, Output x, int64_t axis, ScanAttrs a = {});

// ---- linear algebra and NN -------------------------------------------------
struct MatMulAttrs {
  bool transpose_a = false;
  bool transpose_b = false;
};
Output MatMul(Graph& g, Output a, Output b, MatMulAttrs attrs = {});
// [..., M, K] x [..., K, N] with broadcast batch dims.
Output BatchMatMul(Graph& g, Output a, Output b, MatMulAttrs attrs = {});
Output BiasAdd(Graph& g, Output x, Output bias);  // bias over the last axis
// activation(op(a) x op(b) + bias) in one kernel, activation "none" or
// "relu": the same values and gradients as MatMul, BiasAdd and Relu, with
// no zero-fill of the output and no passes of their own for bias and relu.
// A bad activation or shape is an error of the graph naming the node.
Output FusedMatMul(Graph& g, Output a, Output b, Output bias, const std::string& activation = "none",
                   MatMulAttrs attrs = {});
// DLRM's dot interaction: dense [n, d] and sparse [n, m, d] -> [n, d + m(m+1)/2]:
// dense, then with v_0 = dense and v_1..v_m the sparse rows, v_i . v_j for
// i = 1..m, j = 0..i-1 (each example's Gram matrix below its diagonal, row
// by row). One kernel (no [n, m+1, m+1] product, no gather of the triangle).
Output DotInteraction(Graph& g, Output dense, Output sparse);

struct Conv2DAttrs {
  std::vector<int64_t> strides = {1, 1, 1, 1};  // NHWC
  std::string padding = "SAME";                 // "SAME" or "VALID"
};
// input [N,H,W,C], filter [KH,KW,C,OC].
Output Conv2D(Graph& g, Output input, Output filter, Conv2DAttrs attrs = {});
// activation(Conv2D + bias [OC]) in one kernel, activation "none" or "relu":
// the same values and gradients as Conv2D, BiasAdd and Relu, with the
// output written once. A bad activation or shape is an error of the graph
// naming the node.
Output FusedConv2D(Graph& g, Output input, Output filter, Output bias, const std::string& activation = "none",
                   Conv2DAttrs attrs = {});
struct PoolAttrs {
  std::vector<int64_t> ksize = {1, 2, 2, 1};
  std::vector<int64_t> strides = {1, 2, 2, 1};
  std::string padding = "VALID";
};
Output MaxPool(Graph& g, Output input, PoolAttrs attrs = {});
Output AvgPool(Graph& g, Output input, PoolAttrs attrs = {});

// Per-example losses [batch]. labels: probabilities [batch, classes].
Output SoftmaxCrossEntropyWithLogits(Graph& g, Output logits, Output labels);
// labels: class indices [batch] (int32 or int64); an index out of range is a run-time error.
Output SparseSoftmaxCrossEntropyWithLogits(Graph& g, Output logits, Output labels);
Output L2Loss(Graph& g, Output x);  // sum(x^2) / 2
// Zeroes each element with probability `rate` and scales the rest by 1/(1-rate).
Output Dropout(Graph& g, Output x, double rate, int64_t seed = 0);

// ---- shapes and layout -----------------------------------------------------
Output Reshape(Graph& g, Output x, Output shape);
Output Reshape(Graph& g, Output x, const std::vector<int64_t>& shape);  // one dim may be -1
Output Transpose(Graph& g, Output x, const std::vector<int64_t>& perm);
Output ExpandDims(Graph& g, Output x, int64_t axis);
Output Squeeze(Graph& g, Output x, std::vector<int64_t> axes = {});
Output Concat(Graph& g, const std::vector<Output>& xs, int64_t axis);
std::vector<Output> Split(Graph& g, Output x, int64_t num_split, int64_t axis);
Output Slice(Graph& g, Output x, const std::vector<int64_t>& begin, const std::vector<int64_t>& size);
struct StridedSliceAttrs {
  int64_t begin_mask = 0;
  int64_t end_mask = 0;
  int64_t shrink_axis_mask = 0;
};
Output StridedSlice(Graph& g, Output x, const std::vector<int64_t>& begin,
                    const std::vector<int64_t>& end, const std::vector<int64_t>& strides,
                    StridedSliceAttrs attrs = {});
Output Tile(Graph& g, Output x, const std::vector<int64_t>& multiples);
// paddings: [rank][2] flattened (before, after per axis). mode: "CONSTANT"
// (zeros), "REFLECT" (x mirrored without its edge value: each padding < its
// dim) or "SYMMETRIC" (mirrored with it: each padding <= its dim), as in
// TensorFlow; a padding of 0 is allowed on any dim.
Output Pad(Graph& g, Output x, const std::vector<int64_t>& paddings,
           const std::string& mode = "CONSTANT");
// Rows of params at indices along axis 0.
Output Gather(Graph& g, Output params, Output indices);
// Sums of data's slices by segment: out[segment_ids[i...], ...] += data[i..., ...]
// (segment_ids a prefix of data's shape; an id outside [0, num_segments)
// fails at run time naming it). Its gradient is a Gather.
Output UnsortedSegmentSum(Graph& g, Output data, Output segment_ids, Output num_segments);
// The distinct values of vector x in order of first appearance, and each
// element's int32 index into them.
std::pair<Output, Output> Unique(Graph& g, Output x);
// The coordinates of condition's true elements: int64 [count, rank].
Output Where(Graph& g, Output condition);
Output OneHot(Graph& g, Output indices, int64_t depth, DType dtype = DType::kFloat32,
              double on = 1.0, double off = 0.0);
Output Fill(Graph& g, Output dims, Output value);
// [start, start + delta, ...) up to limit, excluded (scalars of one dtype:
// int32, int64, float32 or float64); a zero delta, or one pointing away from
// limit, fails with InvalidArgument (at build time when all three are constants).
Output Range(Graph& g, Output start, Output limit, Output delta);
Output Zeros(Graph& g, DType dtype, const Shape& shape);
Output Ones(Graph& g, DType dtype, const Shape& shape);
Output ZerosLike(Graph& g, Output x);
Output OnesLike(Graph& g, Output x);
Output ShapeOf(Graph& g, Output x);  // the "Shape" op, int32
Output Size(Graph& g, Output x);
Output Rank(Graph& g, Output x);
// Reduces grad to `shape` by summing broadcast axes (the gradient of broadcasting).
Output SumToShape(Graph& g, Output grad, Output shape);

// ---- random (seeded and reproducible: same seeds, same numbers) ------------
// seed 0 (the default) derives a seed from the node's unique name: distinct nodes
// differ, and the same graph built twice draws the same numbers.
Output RandomUniform(Graph& g, const Shape& shape, double minval = 0.0, double maxval = 1.0,
                     int64_t seed = 0, DType dtype = DType::kFloat32);
Output RandomNormal(Graph& g, const Shape& shape, double stddev = 1.0, int64_t seed = 0,
                    DType dtype = DType::kFloat32, double mean = 0.0);
Output TruncatedNormal(Graph& g, const Shape& shape, double stddev = 1.0, int64_t seed = 0,
                       DType dtype = DType::kFloat32, double mean = 0.0);

}  // namespace ops

// Operators on outputs of one graph; scalars take the other side's dtype.
Output operator+(Output a, Output b);
Output operator-(Output a, Output b);
Output operator*(Output a, Output b);
Output operator/(Output a, Output b);
Output operator-(Output a);
Output operator+(Output a, double b);
Output operator-(Output a, double b);
Output operator*(Output a, double b);
Output operator/(Output a, double b);
Output operator*(double a, Output b);

}  // namespace sf
