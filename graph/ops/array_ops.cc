// Array ops: Transpose, Concat, Split, Slice, StridedSlice, Tile, Pad, Gather,
// OneHot, and the gradient-only helpers ConcatGrad, StridedSliceGrad,
// MirrorPadGrad and GatherGrad.
#include "graph/op_registry.h"
#include "kernels/cpu/pad_spec.h"
#include "kernels/cpu/strided_slice_spec.h"
#include "shardflow/ops.h"

namespace sf {
namespace {

using Ints = std::vector<int64_t>;

// Reads a required int-list attribute (shape functions validated it).
Ints IntsAttr(const Node& n, const std::string& name) {
  auto r = n.attrs.Get<Ints>(name);
  return r.ok() ? *r : Ints();
}
int64_t IntAttr(const Node& n, const std::string& name, int64_t def = 0) {
  auto r = n.attrs.GetOr<int64_t>(name, def);
  return r.ok() ? *r : def;
}

std::string IntsString(const Ints& v) { return ShapeString(v); }

// Maps a possibly negative axis into [0, rank); an error naming both otherwise.
Result<int> NormalizeAxis(int64_t axis, int rank, const std::string& op) {
  if (axis < -rank || axis >= rank)
    return InvalidArgument(op + ": axis " + std::to_string(axis) + " is out of range for rank " +
                           std::to_string(rank));
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// x's shape as an int32 tensor: a Const when known at build time (no runtime
// dependency on x), else the Shape op.
Output ShapeTensor(Graph& g, Output x) {
  if (x.shape().fully_defined()) {
    std::vector<int32_t> d(x.shape().dims().begin(), x.shape().dims().end());
    return ops::Const(g, Tensor::FromVector(d));
  }
  return ops::ShapeOf(g, x);
}

// The output shape of a helper op whose input `i` is a shape tensor: exact
// when that input is a Const, else known rank with unknown dims.
PartialShape ShapeFromShapeInput(const InferenceContext& c, int i) {
  if (const Tensor* t = c.input_constant(i)) return PartialShape(t->ToVector<int64_t>());
  const PartialShape& s = c.input_shape(i);
  if (s.rank() == 1 && s.dim(0) >= 0) return PartialShape::UnknownDims(static_cast<int>(s.dim(0)));
  return PartialShape();
}

Status RequireIndexDType(const InferenceContext& c, int i, const std::string& op) {
  DType t = c.input_dtype(i);
  if (t != DType::kInt32 && t != DType::kInt64)
    return c.Error(op + ": indices must be int32 or int64, got " + DTypeName(t));
  return Status::OK();
}

StridedSliceSpec SpecFromAttrs(const AttrMap& a) {
  StridedSliceSpec s;
  s.begin = a.GetOr<Ints>("begin", {}).value();
  s.end = a.GetOr<Ints>("end", {}).value();
  s.strides = a.GetOr<Ints>("strides", {}).value();
  s.begin_mask = a.GetOr<int64_t>("begin_mask", 0).value();
  s.end_mask = a.GetOr<int64_t>("end_mask", 0).value();
  s.shrink_axis_mask = a.GetOr<int64_t>("shrink_axis_mask", 0).value();
  return s;
}

Status CheckSpecAttrs(const InferenceContext& c) {
  for (const char* name : {"begin", "end", "strides"})
    SF_RETURN_IF_ERROR(c.Attr<Ints>(name).status());
  for (const char* name : {"begin_mask", "end_mask", "shrink_axis_mask"})
    SF_RETURN_IF_ERROR(c.AttrOr<int64_t>(name, 0).status());
  return Status::OK();
}

// The output shape of a strided slice of `in` (unknown dims stay unknown).
Result<PartialShape> StridedSliceShape(const PartialShape& in, const StridedSliceSpec& s) {
  if (!in.rank_known()) return PartialShape();
  std::vector<SliceAxis> axes;
  SF_RETURN_IF_ERROR(ResolveStridedSlice(in.dims(), s, &axes));
  return PartialShape(StridedSliceOutputShape(axes));
}

// ---- shape functions --------------------------------------------------------

Status TransposeShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(Ints perm, c.Attr<Ints>("perm"));
  const PartialShape& x = c.input_shape(0);
  if (x.rank_known() && static_cast<int>(perm.size()) != x.rank())
    return c.Error("Transpose: perm " + IntsString(perm) + " does not match input shape " +
                   x.ToString());
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[p])
      return c.Error("Transpose: perm " + IntsString(perm) + " is not a permutation of 0.." +
                     std::to_string(perm.size()) + "-1");
    seen[p] = true;
  }
  Shape out(perm.size(), -1);
  if (x.rank_known())
    for (size_t i = 0; i < perm.size(); ++i) out[i] = x.dim(static_cast<int>(perm[i]));
  c.set_output(0, c.input_dtype(0), PartialShape(out));
  return Status::OK();
}

Status ConcatShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(c.RequireSameDTypes());
  SF_ASSIGN_OR_RETURN(int64_t axis_attr, c.Attr<int64_t>("axis"));
  int first = -1;
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (!c.input_shape(i).rank_known()) continue;
    if (first < 0) {
      first = i;
      continue;
    }
    if (c.input_shape(i).rank() != c.input_shape(first).rank())
      return c.Error("Concat: inputs of different ranks: " + c.input_shape(first).ToString() +
                     " and " + c.input_shape(i).ToString());
  }
  if (first < 0) {
    c.set_output(0, c.input_dtype(0), PartialShape());
    return Status::OK();
  }
  const int rank = c.input_shape(first).rank();
  if (rank == 0) return c.Error("Concat: cannot concatenate scalars");
  SF_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_attr, rank, "Concat"));
  Shape out = c.input_shape(first).dims();
  int64_t axis_dim = 0;
  bool all_ranks_known = true;
  for (int i = 0; i < c.num_inputs(); ++i) {
    const PartialShape& s = c.input_shape(i);
    if (!s.rank_known()) {
      all_ranks_known = false;
      continue;
    }
    for (int d = 0; d < rank; ++d) {
      if (d == axis) continue;
      if (out[d] >= 0 && s.dim(d) >= 0 && out[d] != s.dim(d))
        return c.Error("Concat: shapes " + c.input_shape(first).ToString() + " and " +
                       s.ToString() + " differ in dim " + std::to_string(d) +
                       " (only the concat axis " + std::to_string(axis) + " may differ)");
      if (out[d] < 0) out[d] = s.dim(d);
    }
    if (axis_dim >= 0) axis_dim = s.dim(axis) < 0 ? -1 : axis_dim + s.dim(axis);
  }
  out[axis] = all_ranks_known ? axis_dim : -1;
  c.set_output(0, c.input_dtype(0), PartialShape(out));
  return Status::OK();
}

Status SplitShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(int64_t num, c.Attr<int64_t>("num_split"));
  SF_ASSIGN_OR_RETURN(int64_t axis_attr, c.Attr<int64_t>("axis"));
  if (num < 1 || num > kMaxNodeOutputs)
    return c.Error("Split: num_split must be in [1, " + std::to_string(kMaxNodeOutputs) + "], got " +
                   std::to_string(num));
  const PartialShape& x = c.input_shape(0);
  PartialShape out;
  if (x.rank_known()) {
    SF_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_attr, x.rank(), "Split"));
    Shape d = x.dims();
    if (d[axis] >= 0) {
      if (d[axis] % num != 0)
        return c.Error("Split: dim " + std::to_string(axis) + " of shape " + x.ToString() +
                       " is not divisible into " + std::to_string(num) + " equal parts");
      d[axis] /= num;
    }
    out = PartialShape(d);
  }
  for (int i = 0; i < num; ++i) c.set_output(i, c.input_dtype(0), out);
  return Status::OK();
}

Status SliceShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(Ints begin, c.Attr<Ints>("begin"));
  SF_ASSIGN_OR_RETURN(Ints size, c.Attr<Ints>("size"));
  const PartialShape& x = c.input_shape(0);
  if (begin.size() != size.size() || (x.rank_known() && static_cast<int>(begin.size()) != x.rank()))
    return c.Error("Slice: begin " + IntsString(begin) + " and size " + IntsString(size) +
                   " must both have one entry per dim of input " + x.ToString());
  Shape out(begin.size(), -1);
  for (size_t i = 0; i < begin.size(); ++i) {
    const int64_t d = x.rank_known() ? x.dim(static_cast<int>(i)) : -1;
    if (begin[i] < 0 || size[i] < -1 ||
        (d >= 0 && (begin[i] > d || (size[i] >= 0 && begin[i] + size[i] > d))))
      return c.Error("Slice: begin " + IntsString(begin) + " size " + IntsString(size) +
                     " is out of bounds for input " + x.ToString());
    out[i] = size[i] >= 0 ? size[i] : (d >= 0 ? d - begin[i] : -1);
  }
  c.set_output(0, c.input_dtype(0), PartialShape(out));
  return Status::OK();
}

Status StridedSliceShapeFn(InferenceContext& c) {
  SF_RETURN_IF_ERROR(CheckSpecAttrs(c));
  SF_ASSIGN_OR_RETURN(PartialShape out, StridedSliceShape(c.input_shape(0), SpecFromAttrs(c.attrs())));
  c.set_output(0, c.input_dtype(0), out);
  return Status::OK();
}

Status TileShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(Ints m, c.Attr<Ints>("multiples"));
  const PartialShape& x = c.input_shape(0);
  if (x.rank_known() && static_cast<int>(m.size()) != x.rank())
    return c.Error("Tile: multiples " + IntsString(m) + " must have one entry per dim of input " +
                   x.ToString());
  Shape out(m.size(), -1);
  for (size_t i = 0; i < m.size(); ++i) {
    if (m[i] < 0) return c.Error("Tile: multiples " + IntsString(m) + " must be >= 0");
    const int64_t d = x.rank_known() ? x.dim(static_cast<int>(i)) : -1;
    out[i] = d >= 0 ? d * m[i] : (m[i] == 0 ? 0 : -1);
  }
  c.set_output(0, c.input_dtype(0), PartialShape(out));
  return Status::OK();
}

Result<PadMode> PadModeAttr(const AttrMap& a) {
  SF_ASSIGN_OR_RETURN(std::string mode, a.GetOr<std::string>("mode", "CONSTANT"));
  return ParsePadMode(mode);
}

Status PadShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(Ints p, c.Attr<Ints>("paddings"));
  SF_ASSIGN_OR_RETURN(PadMode mode, PadModeAttr(c.attrs()));
  const PartialShape& x = c.input_shape(0);
  if (p.size() % 2 != 0 || (x.rank_known() && static_cast<int>(p.size()) != 2 * x.rank()))
    return c.Error("Pad: paddings " + IntsString(p) + " must hold (before, after) for each dim of " +
                   x.ToString());
  Shape out(p.size() / 2, -1);
  for (size_t i = 0; i < out.size(); ++i) {
    if (p[2 * i] < 0 || p[2 * i + 1] < 0)
      return c.Error("Pad: paddings " + IntsString(p) + " must be >= 0");
    const int64_t d = x.rank_known() ? x.dim(static_cast<int>(i)) : -1;
    if (d < 0) continue;
    SF_RETURN_IF_ERROR(CheckPadding(mode, p, i, d));
    auto padded = PaddedDim(i, d, p[2 * i], p[2 * i + 1]);
    if (!padded.ok()) return c.Error(padded.status().message());
    out[i] = *padded;
  }
  c.set_output(0, c.input_dtype(0), PartialShape(out));
  return Status::OK();
}

// MirrorPadGrad(dy): x's shape is dy's less the paddings.
Status MirrorPadGradShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(Ints p, c.Attr<Ints>("paddings"));
  SF_ASSIGN_OR_RETURN(PadMode mode, PadModeAttr(c.attrs()));
  if (mode == PadMode::kConstant)
    return c.Error("MirrorPadGrad: mode must be REFLECT or SYMMETRIC, got CONSTANT");
  const PartialShape& dy = c.input_shape(0);
  if (p.size() % 2 != 0 || (dy.rank_known() && static_cast<int>(p.size()) != 2 * dy.rank()))
    return c.Error("MirrorPadGrad: paddings " + IntsString(p) +
                   " must hold (before, after) for each dim of " + dy.ToString());
  Shape out(p.size() / 2, -1);
  for (size_t i = 0; i < out.size(); ++i) {
    if (p[2 * i] < 0 || p[2 * i + 1] < 0)
      return c.Error("MirrorPadGrad: paddings " + IntsString(p) + " must be >= 0");
    const int64_t d = dy.rank_known() ? dy.dim(static_cast<int>(i)) : -1;
    if (d < 0) continue;
    out[i] = d - p[2 * i] - p[2 * i + 1];
    if (out[i] < 0)
      return c.Error("MirrorPadGrad: paddings " + IntsString(p) + " exceed the gradient's shape " +
                     dy.ToString());
    SF_RETURN_IF_ERROR(CheckPadding(mode, p, i, out[i]));
  }
  c.set_output(0, c.input_dtype(0), PartialShape(out));
  return Status::OK();
}

Status GatherShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireIndexDType(c, 1, "Gather"));
  const PartialShape& p = c.input_shape(0);
  const PartialShape& i = c.input_shape(1);
  if (p.rank() == 0) return c.Error("Gather: params must have rank >= 1, got a scalar");
  PartialShape out;
  if (p.rank_known() && i.rank_known()) {
    Shape d = i.dims();
    d.insert(d.end(), p.dims().begin() + 1, p.dims().end());
    out = PartialShape(d);
  }
  c.set_output(0, c.input_dtype(0), out);
  return Status::OK();
}

// [num_segments, data dims after segment_ids'] when the ranks are known;
// num_segments from a constant.
Status UnsortedSegmentSumShape(InferenceContext& c) {
  const DType t = c.input_dtype(0);
  if (!IsFloating(t) && !IsInteger(t))
    return c.Error(std::string("UnsortedSegmentSum: data must be numeric, got ") + DTypeName(t));
  SF_RETURN_IF_ERROR(RequireIndexDType(c, 1, "UnsortedSegmentSum"));
  if (c.input_dtype(2) != DType::kInt32 && c.input_dtype(2) != DType::kInt64)
    return c.Error(std::string("UnsortedSegmentSum: num_segments must be int32 or int64, got ") +
                   DTypeName(c.input_dtype(2)));
  const PartialShape& d = c.input_shape(0);
  const PartialShape& ids = c.input_shape(1);
  const PartialShape& ns = c.input_shape(2);
  if (ns.rank_known() && ns.rank() != 0)
    return c.Error("UnsortedSegmentSum: num_segments must be a scalar, got shape " + ns.ToString());
  int64_t segments = -1;
  if (const Tensor* k = c.input_constant(2); k != nullptr && k->num_elements() == 1) {
    segments = k->scalar_as<int64_t>();
    if (segments < 0) return c.Error("UnsortedSegmentSum: num_segments must be >= 0, got " + std::to_string(segments));
  }
  if (!d.rank_known() || !ids.rank_known()) {
    c.set_output(0, t, PartialShape::Unknown());
    return Status::OK();
  }
  if (ids.rank() > d.rank())
    return c.Error("UnsortedSegmentSum: segment_ids " + ids.ToString() + " must be a prefix of data's shape " +
                   d.ToString());
  for (int i = 0; i < ids.rank(); ++i)
    if (ids.dims()[i] >= 0 && d.dims()[i] >= 0 && ids.dims()[i] != d.dims()[i])
      return c.Error("UnsortedSegmentSum: segment_ids " + ids.ToString() + " must be a prefix of data's shape " +
                     d.ToString());
  Shape out{segments};
  out.insert(out.end(), d.dims().begin() + ids.rank(), d.dims().end());
  c.set_output(0, t, PartialShape(out));
  return Status::OK();
}

Status OneHotShape(InferenceContext& c) {
  const DType it = c.input_dtype(0);
  if (it != DType::kUInt8 && it != DType::kInt32 && it != DType::kInt64)  // TensorFlow's three
    return c.Error(std::string("OneHot: indices must be uint8, int32 or int64, got ") + DTypeName(it));
  SF_ASSIGN_OR_RETURN(int64_t depth, c.Attr<int64_t>("depth"));
  SF_ASSIGN_OR_RETURN(DType dtype, c.Attr<DType>("dtype"));
  SF_RETURN_IF_ERROR(c.AttrOr<double>("on", 1.0).status());
  SF_RETURN_IF_ERROR(c.AttrOr<double>("off", 0.0).status());
  if (depth < 0) return c.Error("OneHot: depth must be >= 0, got " + std::to_string(depth));
  if (!IsFloating(dtype) && !IsInteger(dtype))
    return c.Error(std::string("OneHot: dtype must be numeric, got ") + DTypeName(dtype));
  PartialShape out;
  if (c.input_shape(0).rank_known()) {
    Shape d = c.input_shape(0).dims();
    d.push_back(depth);
    out = PartialShape(d);
  }
  c.set_output(0, dtype, out);
  return Status::OK();
}

Status ConcatGradShape(InferenceContext& c) {
  SF_ASSIGN_OR_RETURN(int64_t axis_attr, c.Attr<int64_t>("axis"));
  const PartialShape& dy = c.input_shape(0);
  for (int i = 1; i < c.num_inputs(); ++i) {
    PartialShape s = ShapeFromShapeInput(c, i);
    if (!s.rank_known() && dy.rank_known()) {
      SF_ASSIGN_OR_RETURN(int axis, NormalizeAxis(axis_attr, dy.rank(), "ConcatGrad"));
      Shape d = dy.dims();
      d[axis] = -1;
      s = PartialShape(d);
    }
    c.set_output(i - 1, c.input_dtype(0), s);
  }
  return Status::OK();
}

Status StridedSliceGradShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(CheckSpecAttrs(c));
  SF_RETURN_IF_ERROR(RequireIndexDType(c, 1, "StridedSliceGrad"));
  PartialShape out = ShapeFromShapeInput(c, 1);
  if (out.rank_known()) {
    SF_ASSIGN_OR_RETURN(PartialShape sliced, StridedSliceShape(out, SpecFromAttrs(c.attrs())));
    if (!sliced.CompatibleWith(c.input_shape(0)))
      return c.Error("StridedSliceGrad: gradient shape " + c.input_shape(0).ToString() +
                     " does not match the slice shape " + sliced.ToString() + " of " + out.ToString());
  }
  c.set_output(0, c.input_dtype(0), out);
  return Status::OK();
}

Status GatherGradShape(InferenceContext& c) {
  SF_RETURN_IF_ERROR(RequireIndexDType(c, 1, "GatherGrad"));
  SF_RETURN_IF_ERROR(RequireIndexDType(c, 2, "GatherGrad"));
  c.set_output(0, c.input_dtype(0), ShapeFromShapeInput(c, 2));
  return Status::OK();
}

// ---- gradients --------------------------------------------------------------

std::vector<Output> TransposeGrad(Graph& g, const Node& n, const std::vector<Output>& dy) {
  Ints perm = IntsAttr(n, "perm"), inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return {ops::Transpose(g, dy[0], inv)};
}

std::vector<Output> ConcatGradFn(Graph& g, const Node& n, const std::vector<Output>& dy) {
  const int num = static_cast<int>(n.inputs.size());
  std::vector<Output> out(num);
  const int rank = dy[0].shape().rank() >= 0 ? dy[0].shape().rank() : n.inputs[0].shape().rank();
  if (rank < 0) {
    g.RecordError(InvalidArgument("Concat gradient: the rank of '" + n.name + "' is unknown"));
    return out;
  }
  Result<int> axis_r = NormalizeAxis(IntAttr(n, "axis"), rank, "Concat");
  if (!axis_r.ok()) {
    g.RecordError(axis_r.status());
    return out;
  }
  const int axis = *axis_r;
  // Static sizes along the axis: plain Slices of dy.
  bool static_sizes = true;
  for (const Output& x : n.inputs)
    static_sizes = static_sizes && x.shape().rank_known() && x.shape().dim(axis) >= 0;
  if (static_sizes) {
    int64_t offset = 0;
    for (int i = 0; i < num; ++i) {
      Ints begin(rank, 0), size(rank, -1);
      begin[axis] = offset;
      size[axis] = n.inputs[i].shape().dim(axis);
      offset += size[axis];
      out[i] = ops::Slice(g, dy[0], begin, size);
    }
    return out;
  }
  std::vector<Output> in{dy[0]};
  for (const Output& x : n.inputs) in.push_back(ShapeTensor(g, x));
  AttrMap a;
  a.Set("axis", static_cast<int64_t>(axis));
  int id = g.AddNode("ConcatGrad", in, std::move(a));
  if (id < 0) return out;
  for (int i = 0; i < num; ++i) out[i] = Output(&g, id, i);
  return out;
}

std::vector<Output> SplitGrad(Graph& g, const Node& n, const std::vector<Output>& dy) {
  std::vector<Output> parts(dy);
  for (size_t i = 0; i < parts.size(); ++i)
    if (!parts[i].valid()) parts[i] = ops::ZerosLike(g, Output(&g, n.id, static_cast<int>(i)));
  return {ops::Concat(g, parts, IntAttr(n, "axis"))};
}

Output StridedSliceGradNode(Graph& g, Output dy, Output shape, const StridedSliceSpec& s) {
  AttrMap a;
  a.Set("begin", s.begin);
  a.Set("end", s.end);
  a.Set("strides", s.strides);
  a.Set("begin_mask", s.begin_mask);
  a.Set("end_mask", s.end_mask);
  a.Set("shrink_axis_mask", s.shrink_axis_mask);
  return g.Add1("StridedSliceGrad", {dy, shape}, std::move(a));
}

std::vector<Output> SliceGrad(Graph& g, const Node& n, const std::vector<Output>& dy) {
  const Output x = n.inputs[0];
  const Ints begin = IntsAttr(n, "begin"), size = IntsAttr(n, "size");
  if (x.shape().fully_defined()) {
    Ints pad;
    for (size_t i = 0; i < begin.size(); ++i) {
      const int64_t d = x.shape().dim(static_cast<int>(i));
      const int64_t s = size[i] < 0 ? d - begin[i] : size[i];
      pad.push_back(begin[i]);
      pad.push_back(d - begin[i] - s);
    }
    return {ops::Pad(g, dy[0], pad)};
  }
  StridedSliceSpec s;
  s.begin = begin;
  s.strides.assign(begin.size(), 1);
  for (size_t i = 0; i < begin.size(); ++i) {
    s.end.push_back(size[i] < 0 ? 0 : begin[i] + size[i]);
    if (size[i] < 0) s.end_mask |= int64_t{1} << i;
  }
  return {StridedSliceGradNode(g, dy[0], ops::ShapeOf(g, x), s)};
}

std::vector<Output> StridedSliceGradFn(Graph& g, const Node& n, const std::vector<Output>& dy) {
  return {StridedSliceGradNode(g, dy[0], ShapeTensor(g, n.inputs[0]), SpecFromAttrs(n.attrs))};
}

std::vector<Output> TileGrad(Graph& g, const Node& n, const std::vector<Output>& dy) {
  const Output x = n.inputs[0];
  const Ints m = IntsAttr(n, "multiples");
  const int r = static_cast<int>(m.size());
  if (r == 0) return {dy[0]};
  // dy viewed as [m0, d0, m1, d1, ...]; summing the m axes adds up the tiles.
  Ints sum_axes;
  for (int i = 0; i < r; ++i) sum_axes.push_back(2 * i);
  Output split_dy;
  if (x.shape().fully_defined()) {
    Ints dims;
    for (int i = 0; i < r; ++i) {
      dims.push_back(m[i]);
      dims.push_back(x.shape().dim(i));
    }
    split_dy = ops::Reshape(g, dy[0], dims);
  } else {
    std::vector<int32_t> m32(m.begin(), m.end());
    Output mult = ops::Const(g, Tensor::FromVector(m32, {r, 1}));
    Output dims = ops::Reshape(g, ops::ShapeOf(g, x), Ints{r, 1});
    Output inter = ops::Reshape(g, ops::Concat(g, {mult, dims}, 1), Ints{2 * r});
    split_dy = ops::Reshape(g, dy[0], inter);
  }
  return {ops::Sum(g, split_dy, sum_axes)};
}

Output MirrorPadGradNode(Graph& g, Output dy, const Ints& paddings, const std::string& mode) {
  AttrMap a;
  a.Set("paddings", paddings);
  a.Set("mode", mode);
  return g.Add1("MirrorPadGrad", {dy}, std::move(a));
}

std::vector<Output> PadGrad(Graph& g, const Node& n, const std::vector<Output>& dy) {
  const Ints p = IntsAttr(n, "paddings");
  const std::string mode = n.attrs.GetOr<std::string>("mode", "CONSTANT").value();
  // A mirrored pad copies edge values: their gradients fold back onto them.
  if (mode != "CONSTANT") return {MirrorPadGradNode(g, dy[0], p, mode)};
  StridedSliceSpec s;
  for (size_t i = 0; i < p.size() / 2; ++i) {
    s.begin.push_back(p[2 * i]);
    s.end.push_back(-p[2 * i + 1]);
    s.strides.push_back(1);
    if (p[2 * i + 1] == 0) s.end_mask |= int64_t{1} << i;
  }
  return {ops::StridedSlice(g, dy[0], s.begin, s.end, s.strides,
                            ops::StridedSliceAttrs{0, s.end_mask, 0})};
}

// MirrorPadGrad is linear, its adjoint the mirrored pad itself.
std::vector<Output> MirrorPadGradGrad(Graph& g, const Node& n, const std::vector<Output>& dy) {
  return {ops::Pad(g, dy[0], IntsAttr(n, "paddings"),
                   n.attrs.GetOr<std::string>("mode", "CONSTANT").value())};
}

std::vector<Output> GatherGradFn(Graph& g, const Node& n, const std::vector<Output>& dy) {
  Output shape = ShapeTensor(g, n.inputs[0]);
  return {g.Add1("GatherGrad", {dy[0], n.inputs[1], shape}), Output()};
}

}  // namespace

Status RegisterArrayOps(OpRegistry& reg) {
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Transpose")
      .RequiredAttr<std::vector<int64_t>>("perm")
      .Inputs(1).Shape(TransposeShape).Grad(TransposeGrad)
      .Summary("Permutes the dims of x: output dim i is input dim perm[i] (attr perm).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Concat")
      .RequiredAttr<int64_t>("axis")
      .Inputs(1, -1).Shape(ConcatShape).Grad(ConcatGradFn)
      .Summary("Joins its inputs along attr axis; other dims must match.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Split")
      .RequiredAttr<int64_t>("num_split").RequiredAttr<int64_t>("axis")
      .Inputs(1).Shape(SplitShape).Grad(SplitGrad)
      .Summary("Splits x into attr num_split equal parts along attr axis.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Slice")
      .RequiredAttr<std::vector<int64_t>>("begin").RequiredAttr<std::vector<int64_t>>("size")
      .Inputs(1).Shape(SliceShape).Grad(SliceGrad)
      .Summary("The block of x at attr begin of attr size (-1: to the end).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("StridedSlice")
      .RequiredAttr<std::vector<int64_t>>("begin").RequiredAttr<std::vector<int64_t>>("end")
      .RequiredAttr<std::vector<int64_t>>("strides").Attr("begin_mask", int64_t{0})
      .Attr("end_mask", int64_t{0}).Attr("shrink_axis_mask", int64_t{0})
      .Inputs(1).Shape(StridedSliceShapeFn)
      .Grad(StridedSliceGradFn)
      .Summary("Python-style x[begin:end:strides] per axis with begin/end/shrink_axis masks.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Tile")
      .RequiredAttr<std::vector<int64_t>>("multiples")
      .Inputs(1).Shape(TileShape).Grad(TileGrad)
      .Summary("Repeats x attr multiples[i] times along each axis i.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Pad")
      .RequiredAttr<std::vector<int64_t>>("paddings").Attr("mode", "CONSTANT")
      .Inputs(1).Shape(PadShape).Grad(PadGrad)
      .Summary("Pads x: attr paddings holds (before, after) per axis; attr mode CONSTANT (zeros, "
               "the default), REFLECT (mirrored without the edge: paddings < dim) or SYMMETRIC "
               "(with the edge: paddings <= dim).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Gather")
      .InputNames({"params", "indices"})
      .Inputs(2).Shape(GatherShape).Grad(GatherGradFn)
      .Summary("Rows of params (input 0) at int indices (input 1) along axis 0.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("UnsortedSegmentSum")
      .InputNames({"data", "segment_ids", "num_segments"})
      .Inputs(3).Shape(UnsortedSegmentSumShape)
      .Grad([](Graph& g, const Node& n, const std::vector<Output>& dy) {
        std::vector<Output> out(3);
        if (dy[0].valid()) out[0] = ops::Gather(g, dy[0], n.inputs[1]);
        return out;
      })
      .Summary("Sums of data's slices by segment: out[segment_ids[i...], ...] += data[i..., ...] "
               "(segment_ids a prefix of data's shape, each in [0, num_segments)).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Unique")
      .Inputs(1)
      .Shape([](InferenceContext& c) -> Status {
        const PartialShape& x = c.input_shape(0);
        if (x.rank_known() && x.rank() != 1) return c.Error("Unique: x must be a vector, got shape " + x.ToString());
        c.set_output(0, c.input_dtype(0), PartialShape({-1}));
        c.set_output(1, DType::kInt32, x.rank_known() ? x : PartialShape({-1}));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("The distinct values of a vector in order of first appearance (output 0) and each "
               "element's int32 index into them (output 1).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("Where")
      .Inputs(1)
      .Shape([](InferenceContext& c) -> Status {
        if (c.input_dtype(0) != DType::kBool)
          return c.Error(std::string("Where: condition must be bool, got ") + DTypeName(c.input_dtype(0)));
        const PartialShape& x = c.input_shape(0);
        c.set_output(0, DType::kInt64, PartialShape({-1, x.rank_known() ? x.rank() : -1}));
        return Status::OK();
      })
      .NotDifferentiable()
      .Summary("The coordinates of the true elements of a bool tensor, row-major: int64 [count, rank].").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("OneHot")
      .RequiredAttr<int64_t>("depth").Attr("dtype", DType::kFloat32).Attr("on", 1.0).Attr("off", 0.0)
      .Inputs(1).Shape(OneHotShape).NotDifferentiable()
      .Summary("[..., depth] with attr on at each index and off elsewhere (attrs depth, dtype).")
      .Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("ConcatGrad")
      .RequiredAttr<int64_t>("axis")
      .Inputs(2, -1).Shape(ConcatGradShape).NotDifferentiable()
      .Summary("Gradient of Concat: splits dy (input 0) into pieces of the given shapes.").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("StridedSliceGrad")
      .RequiredAttr<std::vector<int64_t>>("begin").RequiredAttr<std::vector<int64_t>>("end")
      .RequiredAttr<std::vector<int64_t>>("strides").Attr("begin_mask", int64_t{0})
      .Attr("end_mask", int64_t{0}).Attr("shrink_axis_mask", int64_t{0})
      .Inputs(2).Shape(StridedSliceGradShape)
      .NotDifferentiable()
      .Summary("Gradient of StridedSlice: dy scattered into zeros of shape (input 1).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("MirrorPadGrad").Inputs(1)
      .RequiredAttr<std::vector<int64_t>>("paddings").Attr("mode", "REFLECT")
      .Shape(MirrorPadGradShape).Grad(MirrorPadGradGrad)
      .Summary("Gradient of a REFLECT or SYMMETRIC Pad: dy with each padded value added back "
               "onto the value it mirrors (attrs paddings, mode).").Build()));
  SF_RETURN_IF_ERROR(reg.Register(OpBuilder("GatherGrad").Inputs(3).Shape(GatherGradShape).NotDifferentiable()
      .Summary("Gradient of Gather: rows of dy added at indices into zeros of params_shape.").Build()));
  return Status::OK();
}

namespace ops {

Output Transpose(Graph& g, Output x, const std::vector<int64_t>& perm) {
  AttrMap a;
  a.Set("perm", perm);
  return g.Add1("Transpose", {x}, std::move(a));
}

Output Concat(Graph& g, const std::vector<Output>& xs, int64_t axis) {
  AttrMap a;
  a.Set("axis", axis);
  return g.Add1("Concat", xs, std::move(a));
}

std::vector<Output> Split(Graph& g, Output x, int64_t num_split, int64_t axis) {
  AttrMap a;
  a.Set("num_split", num_split);
  a.Set("axis", axis);
  int id = g.AddNode("Split", {x}, std::move(a));
  std::vector<Output> out;
  if (id < 0) return std::vector<Output>(num_split > 0 ? num_split : 0);
  for (int i = 0; i < g.node(id).num_outputs(); ++i) out.emplace_back(&g, id, i);
  return out;
}

Output Slice(Graph& g, Output x, const std::vector<int64_t>& begin, const std::vector<int64_t>& size) {
  AttrMap a;
  a.Set("begin", begin);
  a.Set("size", size);
  return g.Add1("Slice", {x}, std::move(a));
}

Output StridedSlice(Graph& g, Output x, const std::vector<int64_t>& begin,
                    const std::vector<int64_t>& end, const std::vector<int64_t>& strides,
                    StridedSliceAttrs attrs) {
  AttrMap a;
  a.Set("begin", begin);
  a.Set("end", end);
  a.Set("strides", strides);
  a.Set("begin_mask", attrs.begin_mask);
  a.Set("end_mask", attrs.end_mask);
  a.Set("shrink_axis_mask", attrs.shrink_axis_mask);
  return g.Add1("StridedSlice", {x}, std::move(a));
}

Output Tile(Graph& g, Output x, const std::vector<int64_t>& multiples) {
  AttrMap a;
  a.Set("multiples", multiples);
  return g.Add1("Tile", {x}, std::move(a));
}

Output Pad(Graph& g, Output x, const std::vector<int64_t>& paddings, const std::string& mode) {
  AttrMap a;
  a.Set("paddings", paddings);
  if (mode != "CONSTANT") a.Set("mode", mode);
  return g.Add1("Pad", {x}, std::move(a));
}

Output UnsortedSegmentSum(Graph& g, Output data, Output segment_ids, Output num_segments) {
  return g.Add1("UnsortedSegmentSum", {data, segment_ids, num_segments});
}
std::pair<Output, Output> Unique(Graph& g, Output x) {
  const int id = g.AddNode("Unique", {x});
  return {Output(&g, id, 0), Output(&g, id, 1)};
}
Output Where(Graph& g, Output condition) { return g.Add1("Where", {condition}); }

Output Gather(Graph& g, Output params, Output indices) {
  return g.Add1("Gather", {params, indices});
}

Output OneHot(Graph& g, Output indices, int64_t depth, DType dtype, double on, double off) {
  AttrMap a;
  a.Set("depth", depth);
  a.Set("dtype", dtype);
  a.Set("on", on);
  a.Set("off", off);
  return g.Add1("OneHot", {indices}, std::move(a));
}

}  // namespace ops
}  // namespace sf
