// Kernels of the array ops. The layout ops (Transpose, Concat, Split, Slice,
// StridedSlice, Tile, Pad, Gather and the slice/concat gradients) only move
// bytes, so they are registered for every dtype and dispatch on the element
// size: one instantiation serves float32, int32, ...
#define EIGEN_USE_THREADS
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <unordered_map>
#include <vector>
#include <unsupported/Eigen/CXX11/Tensor>

#include "kernels/compute_pool.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/pad_spec.h"
#include "kernels/cpu/strided_slice_spec.h"

namespace sf {
namespace {

using Ints = std::vector<int64_t>;

// Work below this many elements runs inline: a pool hand-off costs more.
constexpr int64_t kParallelThreshold = 32768;

// Calls f(TypeTag<E>{}) with an unsigned integer type of `bytes` bytes.
template <typename F>
bool DispatchBySize(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: f(TypeTag<uint8_t>{}); return true;
    case 2: f(TypeTag<uint16_t>{}); return true;
    case 4: f(TypeTag<uint32_t>{}); return true;
    case 8: f(TypeTag<uint64_t>{}); return true;
    default: return false;
  }
}

// Reads a required attribute into *out, recording the first error in *s.
template <typename T>
void ReadAttr(const KernelInit& init, const std::string& name, T* out, Status* s) {
  auto r = init.Attr<T>(name);
  if (!r.ok()) {
    if (s->ok()) *s = r.status();
    return;
  }
  *out = *r;
}

void RunParallel(OpKernelContext* ctx, int64_t rows, int64_t row_elems,
                 const std::function<void(int64_t, int64_t)>& fn) {
  if (rows * row_elems < kParallelThreshold || rows < 2 || ctx->pool() == nullptr) {
    fn(0, rows);
    return;
  }
  const int64_t min_block = std::max<int64_t>(1, kParallelThreshold / std::max<int64_t>(1, row_elems));
  ctx->pool()->ParallelFor(rows, min_block, fn);
}

// Row-major element strides of a shape.
Ints ElementStrides(const Shape& s) {
  Ints st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// One side of a strided region copy: the buffer's shape, and per axis the
// first index and the step.
struct View {
  Shape shape;
  Ints begin, stride;
};

// Merges trailing axes that are read whole and contiguously on both sides,
// so the inner loop becomes one long memcpy.
void Coalesce(Shape* region, View* a, View* b) {
  while (region->size() >= 2) {
    const size_t l = region->size() - 1;
    auto whole = [&](const View& v) {
      return v.begin[l] == 0 && v.stride[l] == 1 && v.shape[l] == (*region)[l] && v.stride[l - 1] == 1;
    };
    if (!whole(*a) || !whole(*b)) return;
    for (View* v : {a, b}) {
      v->begin[l - 1] *= v->shape[l];
      v->shape[l - 1] *= v->shape[l];
      v->shape.pop_back();
      v->begin.pop_back();
      v->stride.pop_back();
    }
    (*region)[l - 1] *= (*region)[l];
    region->pop_back();
  }
}

// Copies `region` elements from src (read at src view) to dst (written at dst
// view). Strides may be negative.
template <typename E>
void StridedCopy(OpKernelContext* ctx, const E* src, View sv, E* dst, View dv, Shape region) {
  for (int64_t r : region)
    if (r == 0) return;
  if (region.empty()) {
    dst[0] = src[0];
    return;
  }
  Coalesce(&region, &sv, &dv);
  const int rank = static_cast<int>(region.size());
  const Ints sst = ElementStrides(sv.shape), dst_st = ElementStrides(dv.shape);
  int64_t rows = 1;
  for (int i = 0; i + 1 < rank; ++i) rows *= region[i];
  const int64_t inner = region[rank - 1];
  const int64_t s_in = sv.stride[rank - 1], d_in = dv.stride[rank - 1];
  RunParallel(ctx, rows, inner, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t rem = r, so = 0, dso = 0;
      for (int i = rank - 2; i >= 0; --i) {
        const int64_t idx = rem % region[i];
        rem /= region[i];
        so += (sv.begin[i] + idx * sv.stride[i]) * sst[i];
        dso += (dv.begin[i] + idx * dv.stride[i]) * dst_st[i];
      }
      const E* s = src + so + sv.begin[rank - 1];
      E* d = dst + dso + dv.begin[rank - 1];
      if (s_in == 1 && d_in == 1) {
        std::memcpy(d, s, inner * sizeof(E));
      } else {
        for (int64_t k = 0; k < inner; ++k) d[k * d_in] = s[k * s_in];
      }
    }
  });
}

// A whole tensor read from its start with unit steps.
View Whole(const Shape& s) { return View{s, Ints(s.size(), 0), Ints(s.size(), 1)}; }

// Copies a region between two tensors of any dtype (same element size).
void CopyRegion(OpKernelContext* ctx, const Tensor& src, View sv, Tensor& dst, View dv, Shape region) {
  DispatchBySize(DTypeSize(src.dtype()), [&](auto tag) {
    using E = typename decltype(tag)::type;
    StridedCopy<E>(ctx, src.data<E>(), std::move(sv), dst.data<E>(), std::move(dv), std::move(region));
  });
}

Status CheckRankAtMost(const Tensor& t, int max_rank, const std::string& op) {
  if (t.rank() > max_rank)
    return Unimplemented(op + " supports rank <= " + std::to_string(max_rank) + ", got shape " +
                         ShapeString(t.shape()));
  return Status::OK();
}

// ---- Transpose ---------------------------------------------------------------

template <typename E, int N>
void TransposeN(OpKernelContext* ctx, const Tensor& in, Tensor& out, const Ints& perm) {
  Eigen::array<Eigen::Index, N> p;
  for (int i = 0; i < N; ++i) p[i] = perm[i];
  auto o = out.tensor<E, N>();
  if (in.num_elements() >= kParallelThreshold && ctx->pool())
    o.device(ctx->eigen_device()) = in.tensor<E, N>().shuffle(p);
  else
    o = in.tensor<E, N>().shuffle(p);
}

class TransposeKernel : public OpKernel {
 public:
  TransposeKernel(const KernelInit& init, Status* s) { ReadAttr(init, "perm", &perm_, s); }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    if (static_cast<int>(perm_.size()) != in.rank()) {
      ctx->SetStatus(InvalidArgument("Transpose: perm " + ShapeString(perm_) +
                                     " does not match input shape " + ShapeString(in.shape())));
      return;
    }
    bool identity = true;
    for (size_t i = 0; i < perm_.size(); ++i) identity = identity && perm_[i] == static_cast<int64_t>(i);
    if (identity) {
      ctx->set_output(0, in);
      return;
    }
    Status st = CheckRankAtMost(in, 6, "Transpose");
    if (!st.ok()) return ctx->SetStatus(st);
    Shape os(perm_.size());
    for (size_t i = 0; i < perm_.size(); ++i) os[i] = in.dim(static_cast<int>(perm_[i]));
    Tensor& out = ctx->allocate_output(0, in.dtype(), os);
    if (in.num_elements() == 0) return;
    DispatchBySize(DTypeSize(in.dtype()), [&](auto tag) {
      using E = typename decltype(tag)::type;
      switch (in.rank()) {
        case 2: TransposeN<E, 2>(ctx, in, out, perm_); break;
        case 3: TransposeN<E, 3>(ctx, in, out, perm_); break;
        case 4: TransposeN<E, 4>(ctx, in, out, perm_); break;
        case 5: TransposeN<E, 5>(ctx, in, out, perm_); break;
        case 6: TransposeN<E, 6>(ctx, in, out, perm_); break;
        default: break;  // rank 0 and 1 permutations are the identity
      }
    });
  }

 private:
  Ints perm_;
};

// ---- Concat / Split / ConcatGrad -------------------------------------------

// Splits `in` along `axis` into pieces of the given sizes (outputs 0..n-1).
void SplitAlongAxis(OpKernelContext* ctx, const Tensor& in, int axis, const Ints& sizes) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= in.dim(i);
  for (int i = axis + 1; i < in.rank(); ++i) inner *= in.dim(i);
  const size_t es = DTypeSize(in.dtype());
  const int64_t in_row = in.dim(axis) * inner;
  int64_t offset = 0;
  for (size_t j = 0; j < sizes.size(); ++j) {
    Shape s = in.shape();
    s[axis] = sizes[j];
    Tensor& out = ctx->allocate_output(static_cast<int>(j), in.dtype(), s);
    const int64_t chunk = sizes[j] * inner;
    const char* src = static_cast<const char*>(in.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    if (chunk > 0) {
      RunParallel(ctx, outer, chunk, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          std::memcpy(dst + r * chunk * es, src + (r * in_row + offset) * es, chunk * es);
      });
    }
    offset += chunk;
  }
}

class ConcatKernel : public OpKernel {
 public:
  ConcatKernel(const KernelInit& init, Status* s) { ReadAttr(init, "axis", &axis_, s); }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& first = ctx->input(0);
    const int rank = first.rank();
    if (rank == 0 || axis_ < -rank || axis_ >= rank) {
      ctx->SetStatus(InvalidArgument("Concat: axis " + std::to_string(axis_) +
                                     " is out of range for input shape " + ShapeString(first.shape())));
      return;
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
    if (ctx->num_inputs() == 1) {
      ctx->set_output(0, first);
      return;
    }
    Shape os = first.shape();
    os[axis] = 0;
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      const Tensor& t = ctx->input(i);
      bool ok = t.rank() == rank && t.dtype() == first.dtype();
      for (int d = 0; ok && d < rank; ++d) ok = d == axis || t.dim(d) == first.dim(d);
      if (!ok) {
        ctx->SetStatus(InvalidArgument("Concat: shapes " + ShapeString(first.shape()) + " and " +
                                       ShapeString(t.shape()) + " differ outside axis " +
                                       std::to_string(axis)));
        return;
      }
      os[axis] += t.dim(axis);
    }
    Tensor& out = ctx->allocate_output(0, first.dtype(), os);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; ++i) outer *= os[i];
    for (int i = axis + 1; i < rank; ++i) inner *= os[i];
    const size_t es = DTypeSize(first.dtype());
    const int64_t out_row = os[axis] * inner;
    char* dst = static_cast<char*>(out.raw_data());
    int64_t offset = 0;
    for (int j = 0; j < ctx->num_inputs(); ++j) {
      const Tensor& t = ctx->input(j);
      const int64_t chunk = t.dim(axis) * inner;
      const char* src = static_cast<const char*>(t.raw_data());
      if (chunk > 0) {
        RunParallel(ctx, outer, chunk, [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r)
            std::memcpy(dst + (r * out_row + offset) * es, src + r * chunk * es, chunk * es);
        });
      }
      offset += chunk;
    }
  }

 private:
  int64_t axis_ = 0;
};

class SplitKernel : public OpKernel {
 public:
  SplitKernel(const KernelInit& init, Status* s) {
    ReadAttr(init, "axis", &axis_, s);
    ReadAttr(init, "num_split", &num_, s);
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const int rank = in.rank();
    if (axis_ < -rank || axis_ >= rank) {
      ctx->SetStatus(InvalidArgument("Split: axis " + std::to_string(axis_) +
                                     " is out of range for input shape " + ShapeString(in.shape())));
      return;
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
    if (num_ < 1 || in.dim(axis) % num_ != 0) {
      ctx->SetStatus(InvalidArgument("Split: dim " + std::to_string(axis) + " of shape " +
                                     ShapeString(in.shape()) + " is not divisible into " +
                                     std::to_string(num_) + " equal parts"));
      return;
    }
    SplitAlongAxis(ctx, in, axis, Ints(num_, in.dim(axis) / num_));
  }

 private:
  int64_t axis_ = 0, num_ = 1;
};

class ConcatGradKernel : public OpKernel {
 public:
  ConcatGradKernel(const KernelInit& init, Status* s) { ReadAttr(init, "axis", &axis_, s); }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const int rank = dy.rank();
    if (axis_ < -rank || axis_ >= rank) {
      ctx->SetStatus(InvalidArgument("ConcatGrad: axis " + std::to_string(axis_) +
                                     " is out of range for gradient shape " + ShapeString(dy.shape())));
      return;
    }
    const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
    Ints sizes;
    int64_t total = 0;
    for (int i = 1; i < ctx->num_inputs(); ++i) {
      Ints s = ctx->input(i).ToVector<int64_t>();
      if (static_cast<int>(s.size()) != rank) {
        ctx->SetStatus(InvalidArgument("ConcatGrad: input shape " + ShapeString(s) +
                                       " does not match gradient shape " + ShapeString(dy.shape())));
        return;
      }
      Status st = CheckRuntimeShape(s, "ConcatGrad: input shape");
      if (!st.ok()) return ctx->SetStatus(st);
      sizes.push_back(s[axis]);
      total += s[axis];
    }
    if (total != dy.dim(axis)) {
      ctx->SetStatus(InvalidArgument("ConcatGrad: input sizes along axis " + std::to_string(axis) +
                                     " sum to " + std::to_string(total) + ", gradient shape is " +
                                     ShapeString(dy.shape())));
      return;
    }
    SplitAlongAxis(ctx, dy, axis, sizes);
  }

 private:
  int64_t axis_ = 0;
};

// ---- Slice / StridedSlice / StridedSliceGrad / Pad ------------------------

class SliceKernel : public OpKernel {
 public:
  SliceKernel(const KernelInit& init, Status* s) {
    ReadAttr(init, "begin", &begin_, s);
    ReadAttr(init, "size", &size_, s);
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const int rank = in.rank();
    bool ok = static_cast<int>(begin_.size()) == rank && static_cast<int>(size_.size()) == rank;
    Shape os(rank);
    for (int i = 0; ok && i < rank; ++i) {
      os[i] = size_[i] < 0 ? in.dim(i) - begin_[i] : size_[i];
      ok = begin_[i] >= 0 && size_[i] >= -1 && os[i] >= 0 && begin_[i] + os[i] <= in.dim(i);
    }
    if (!ok) {
      ctx->SetStatus(InvalidArgument("Slice: begin " + ShapeString(begin_) + " size " +
                                     ShapeString(size_) + " is out of bounds for input " +
                                     ShapeString(in.shape())));
      return;
    }
    if (os == in.shape()) {
      ctx->set_output(0, in);
      return;
    }
    Tensor& out = ctx->allocate_output(0, in.dtype(), os);
    CopyRegion(ctx, in, View{in.shape(), begin_, Ints(rank, 1)}, out, Whole(os), os);
  }

 private:
  Ints begin_, size_;
};

// Parses the shared StridedSlice attributes.
StridedSliceSpec ReadSpec(const KernelInit& init, Status* s) {
  StridedSliceSpec spec;
  ReadAttr(init, "begin", &spec.begin, s);
  ReadAttr(init, "end", &spec.end, s);
  ReadAttr(init, "strides", &spec.strides, s);
  for (auto [name, field] : {std::pair<const char*, int64_t*>{"begin_mask", &spec.begin_mask},
                             {"end_mask", &spec.end_mask},
                             {"shrink_axis_mask", &spec.shrink_axis_mask}}) {
    auto r = init.AttrOr<int64_t>(name, 0);
    if (r.ok()) *field = *r;
    else if (s->ok()) *s = r.status();
  }
  return spec;
}

// The source view and region of a resolved slice of a tensor of shape `in`.
void SliceViewOf(const Shape& in, const std::vector<SliceAxis>& axes, View* v, Shape* region) {
  v->shape = in;
  v->begin.clear();
  v->stride.clear();
  region->clear();
  for (const SliceAxis& a : axes) {
    v->begin.push_back(a.begin);
    v->stride.push_back(a.stride);
    region->push_back(a.size);
  }
}

class StridedSliceKernel : public OpKernel {
 public:
  StridedSliceKernel(const KernelInit& init, Status* s) : spec_(ReadSpec(init, s)) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    std::vector<SliceAxis> axes;
    Status st = ResolveStridedSlice(in.shape(), spec_, &axes);
    if (!st.ok()) return ctx->SetStatus(st);
    bool whole = true;
    for (size_t i = 0; i < axes.size(); ++i)
      whole = whole && !axes[i].shrink && axes[i].begin == 0 && axes[i].stride == 1 &&
              axes[i].size == in.dim(static_cast<int>(i));
    if (whole) {
      ctx->set_output(0, in);
      return;
    }
    View sv;
    Shape region;
    SliceViewOf(in.shape(), axes, &sv, &region);
    Tensor& out = ctx->allocate_output(0, in.dtype(), StridedSliceOutputShape(axes));
    CopyRegion(ctx, in, sv, out, Whole(region), region);
  }

 private:
  StridedSliceSpec spec_;
};

class StridedSliceGradKernel : public OpKernel {
 public:
  StridedSliceGradKernel(const KernelInit& init, Status* s) : spec_(ReadSpec(init, s)) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Shape shape = ctx->input(1).ToVector<int64_t>();
    Status shape_st = CheckRuntimeShape(shape, "StridedSliceGrad: shape");
    if (!shape_st.ok()) return ctx->SetStatus(shape_st);
    std::vector<SliceAxis> axes;
    Status st = ResolveStridedSlice(shape, spec_, &axes);
    if (!st.ok()) return ctx->SetStatus(st);
    if (StridedSliceOutputShape(axes) != dy.shape()) {
      ctx->SetStatus(InvalidArgument("StridedSliceGrad: gradient shape " + ShapeString(dy.shape()) +
                                     " does not match the slice shape " +
                                     ShapeString(StridedSliceOutputShape(axes)) + " of " +
                                     ShapeString(shape)));
      return;
    }
    Tensor& out = ctx->allocate_output(0, dy.dtype(), shape);
    if (out.bytes()) std::memset(out.raw_data(), 0, out.bytes());
    View dv;
    Shape region;
    SliceViewOf(shape, axes, &dv, &region);
    CopyRegion(ctx, dy, Whole(region), out, dv, region);
  }

 private:
  StridedSliceSpec spec_;
};

// Reads the Pad / MirrorPadGrad attrs paddings and mode.
void ReadPadAttrs(const KernelInit& init, Ints* pad, PadMode* mode, Status* s) {
  ReadAttr(init, "paddings", pad, s);
  auto m = init.AttrOr<std::string>("mode", "CONSTANT");
  auto parsed = m.ok() ? ParsePadMode(*m) : Result<PadMode>(m.status());
  if (parsed.ok()) *mode = *parsed;
  else if (s->ok()) *s = parsed.status();
}

// Per axis, the index of x each index of the mirrored pad of x reads.
std::vector<Ints> MirrorMaps(PadMode mode, const Shape& x, const Shape& padded, const Ints& pad) {
  std::vector<Ints> maps(x.size());
  for (size_t a = 0; a < x.size(); ++a) {
    maps[a].resize(padded[a]);
    for (int64_t o = 0; o < padded[a]; ++o) maps[a][o] = MirrorIndex(mode, o, pad[2 * a], x[a]);
  }
  return maps;
}

// Calls fn(padded_row, x_row_offset) for every row (all axes but the last)
// of the padded shape, x_row_offset being the element offset in x of the row
// it reads. REQUIRES: rank >= 1.
template <typename F>
void ForEachMirrorRow(const Shape& x, const Shape& padded, const std::vector<Ints>& maps, F&& fn) {
  const int rank = static_cast<int>(x.size());
  const Ints xst = ElementStrides(x);
  int64_t rows = 1;
  for (int i = 0; i + 1 < rank; ++i) rows *= padded[i];
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, off = 0;
    for (int i = rank - 2; i >= 0; --i) {
      off += maps[i][rem % padded[i]] * xst[i];
      rem /= padded[i];
    }
    fn(r, off);
  }
}

class PadKernel : public OpKernel {
 public:
  PadKernel(const KernelInit& init, Status* s) { ReadPadAttrs(init, &pad_, &mode_, s); }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const int rank = in.rank();
    if (static_cast<int>(pad_.size()) != 2 * rank) {
      ctx->SetStatus(InvalidArgument("Pad: paddings " + ShapeString(pad_) +
                                     " must hold (before, after) for each dim of " +
                                     ShapeString(in.shape())));
      return;
    }
    Shape os(rank);
    Ints before(rank);
    for (int i = 0; i < rank; ++i) {
      if (Status st = CheckPadding(mode_, pad_, i, in.dim(i)); !st.ok()) return ctx->SetStatus(st);
      auto padded = PaddedDim(i, in.dim(i), pad_[2 * i], pad_[2 * i + 1]);
      if (!padded.ok()) return ctx->SetStatus(padded.status());
      before[i] = pad_[2 * i];
      os[i] = *padded;
    }
    if (os == in.shape()) {
      ctx->set_output(0, in);
      return;
    }
    Tensor& out = ctx->allocate_output(0, in.dtype(), os);
    if (mode_ != PadMode::kConstant) return Mirror(in, out);
    // All-zero bytes are 0 for every numeric dtype.
    if (out.bytes()) std::memset(out.raw_data(), 0, out.bytes());
    CopyRegion(ctx, in, Whole(in.shape()), out, View{os, before, Ints(rank, 1)}, in.shape());
  }

 private:
  // CheckPadding passed: every padded position has a value of x to read.
  void Mirror(const Tensor& in, Tensor& out) const {
    const std::vector<Ints> maps = MirrorMaps(mode_, in.shape(), out.shape(), pad_);
    const Ints& last = maps.back();
    const int64_t inner = out.shape().back();
    DispatchBySize(DTypeSize(in.dtype()), [&](auto tag) {
      using E = typename decltype(tag)::type;
      const E* x = in.data<E>();
      E* y = out.data<E>();
      ForEachMirrorRow(in.shape(), out.shape(), maps, [&](int64_t r, int64_t off) {
        for (int64_t k = 0; k < inner; ++k) y[r * inner + k] = x[off + last[k]];
      });
    });
  }

  Ints pad_;
  PadMode mode_ = PadMode::kConstant;
};

// dx[i] = the sum of dy over the padded positions that read x[i].
template <typename T>
class MirrorPadGradKernel : public OpKernel {
 public:
  MirrorPadGradKernel(const KernelInit& init, Status* s) {
    ReadPadAttrs(init, &pad_, &mode_, s);
    if (s->ok() && mode_ == PadMode::kConstant)
      *s = InvalidArgument("MirrorPadGrad: mode must be REFLECT or SYMMETRIC, got CONSTANT");
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const int rank = dy.rank();
    if (static_cast<int>(pad_.size()) != 2 * rank) {
      ctx->SetStatus(InvalidArgument("MirrorPadGrad: paddings " + ShapeString(pad_) +
                                     " must hold (before, after) for each dim of " +
                                     ShapeString(dy.shape())));
      return;
    }
    Shape xs(rank);
    for (int i = 0; i < rank; ++i) {
      xs[i] = dy.dim(i) - pad_[2 * i] - pad_[2 * i + 1];
      Status st = xs[i] < 0 ? InvalidArgument("MirrorPadGrad: paddings " + ShapeString(pad_) +
                                              " exceed the gradient's shape " + ShapeString(dy.shape()))
                            : CheckPadding(mode_, pad_, i, xs[i]);
      if (!st.ok()) return ctx->SetStatus(st);
    }
    if (xs == dy.shape()) {
      ctx->set_output(0, dy);
      return;
    }
    Tensor& out = ctx->allocate_output(0, dy.dtype(), xs);
    T* dx = out.data<T>();
    std::fill(dx, dx + out.num_elements(), T(0));
    if (out.num_elements() == 0) return;
    const std::vector<Ints> maps = MirrorMaps(mode_, xs, dy.shape(), pad_);
    const Ints& last = maps.back();
    const int64_t inner = dy.shape().back();
    const T* g = dy.data<T>();
    // A scatter-add: rows of dy may fold onto one row of dx, so one thread.
    ForEachMirrorRow(xs, dy.shape(), maps, [&](int64_t r, int64_t off) {
      for (int64_t k = 0; k < inner; ++k) dx[off + last[k]] += g[r * inner + k];
    });
  }

 private:
  Ints pad_;
  PadMode mode_ = PadMode::kConstant;
};

// ---- Tile --------------------------------------------------------------------

template <typename E, int N>
void TileN(OpKernelContext* ctx, const Tensor& in, Tensor& out, const Ints& m) {
  Eigen::array<Eigen::Index, N> b;
  for (int i = 0; i < N; ++i) b[i] = m[i];
  auto o = out.tensor<E, N>();
  if (out.num_elements() >= kParallelThreshold && ctx->pool())
    o.device(ctx->eigen_device()) = in.tensor<E, N>().broadcast(b);
  else
    o = in.tensor<E, N>().broadcast(b);
}

class TileKernel : public OpKernel {
 public:
  TileKernel(const KernelInit& init, Status* s) { ReadAttr(init, "multiples", &m_, s); }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    if (static_cast<int>(m_.size()) != in.rank()) {
      ctx->SetStatus(InvalidArgument("Tile: multiples " + ShapeString(m_) +
                                     " must have one entry per dim of input " + ShapeString(in.shape())));
      return;
    }
    Status st = CheckRankAtMost(in, 6, "Tile");
    if (!st.ok()) return ctx->SetStatus(st);
    Shape os(m_.size());
    for (size_t i = 0; i < m_.size(); ++i) os[i] = in.dim(static_cast<int>(i)) * m_[i];
    if (os == in.shape()) {
      ctx->set_output(0, in);
      return;
    }
    Tensor& out = ctx->allocate_output(0, in.dtype(), os);
    if (out.num_elements() == 0) return;
    DispatchBySize(DTypeSize(in.dtype()), [&](auto tag) {
      using E = typename decltype(tag)::type;
      switch (in.rank()) {
        case 1: TileN<E, 1>(ctx, in, out, m_); break;
        case 2: TileN<E, 2>(ctx, in, out, m_); break;
        case 3: TileN<E, 3>(ctx, in, out, m_); break;
        case 4: TileN<E, 4>(ctx, in, out, m_); break;
        case 5: TileN<E, 5>(ctx, in, out, m_); break;
        case 6: TileN<E, 6>(ctx, in, out, m_); break;
        default: break;  // a scalar has no multiples: handled as the identity above
      }
    });
  }

 private:
  Ints m_;
};

// ---- Gather / GatherGrad / OneHot -----------------------------------------

// Checks every index against [0, rows); the error names the first bad one.
// `bound` says what rows counts in the message ("params has 5 rows").
template <typename I>
Status CheckIndices(const Tensor& indices, int64_t rows, const std::string& op,
                    const char* bound = "params has %lld rows") {
  const I* ix = indices.data<I>();
  for (int64_t i = 0; i < indices.num_elements(); ++i) {
    if (ix[i] < 0 || ix[i] >= rows) {
      char b[96];
      std::snprintf(b, sizeof b, bound, static_cast<long long>(rows));
      return InvalidArgument(op + ": index " + std::to_string(ix[i]) + " (at position " +
                             std::to_string(i) + " of indices " + ShapeString(indices.shape()) +
                             ") is out of range: " + b);
    }
  }
  return Status::OK();
}

// Calls f(TypeTag<I>{}) for an int32/int64 index tensor; false otherwise.
template <typename F>
bool DispatchIndex(DType t, F&& f) {
  if (t == DType::kInt32) f(TypeTag<int32_t>{});
  else if (t == DType::kInt64) f(TypeTag<int64_t>{});
  else return false;
  return true;
}

// Zeroes out (num rows x row) and adds row i of src into row ix[i], for each
// of the n indices (already checked against out's rows): the gradient of a
// gather, and UnsortedSegmentSum.
template <typename T, typename I>
void ScatterAddRows(const I* ix, int64_t n, const T* src, int64_t row, Tensor* out) {
  out->flat<T>().setZero();
  if (row == 0) return;
  using Vec = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
  using CVec = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
  for (int64_t i = 0; i < n; ++i) Vec(out->data<T>() + static_cast<int64_t>(ix[i]) * row, row) += CVec(src + i * row, row);
}

class GatherKernel : public OpKernel {
 public:
  GatherKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& params = ctx->input(0);
    const Tensor& indices = ctx->input(1);
    if (params.rank() < 1) {
      ctx->SetStatus(InvalidArgument("Gather: params must have rank >= 1, got a scalar"));
      return;
    }
    const int64_t rows = params.dim(0);
    Shape os = indices.shape();
    os.insert(os.end(), params.shape().begin() + 1, params.shape().end());
    const size_t row_bytes = params.num_elements() / std::max<int64_t>(rows, 1) * DTypeSize(params.dtype());
    bool known = DispatchIndex(indices.dtype(), [&](auto tag) {
      using I = typename decltype(tag)::type;
      Status st = CheckIndices<I>(indices, rows, "Gather");
      if (!st.ok()) return ctx->SetStatus(st);
      Tensor& out = ctx->allocate_output(0, params.dtype(), os);
      const I* ix = indices.data<I>();
      const char* src = static_cast<const char*>(params.raw_data());
      char* dst = static_cast<char*>(out.raw_data());
      const int64_t row_elems = params.num_elements() / std::max<int64_t>(rows, 1);
      if (row_bytes == 0) return;
      RunParallel(ctx, indices.num_elements(), row_elems, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          std::memcpy(dst + i * row_bytes, src + static_cast<int64_t>(ix[i]) * row_bytes, row_bytes);
      });
    });
    if (!known)
      ctx->SetStatus(InvalidArgument(std::string("Gather: indices must be int32 or int64, got ") +
                                     DTypeName(indices.dtype())));
  }
};

template <typename T>
class GatherGradKernel : public OpKernel {
 public:
  GatherGradKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dy = ctx->input(0);
    const Tensor& indices = ctx->input(1);
    const Shape shape = ctx->input(2).ToVector<int64_t>();
    if (shape.empty()) {
      ctx->SetStatus(InvalidArgument("GatherGrad: params shape must have rank >= 1"));
      return;
    }
    Status shape_st = CheckRuntimeShape(shape, "GatherGrad: params shape");
    if (!shape_st.ok()) return ctx->SetStatus(shape_st);
    Shape expect = indices.shape();
    expect.insert(expect.end(), shape.begin() + 1, shape.end());
    if (expect != dy.shape()) {
      ctx->SetStatus(InvalidArgument("GatherGrad: gradient shape " + ShapeString(dy.shape()) +
                                     " does not match indices " + ShapeString(indices.shape()) +
                                     " with params " + ShapeString(shape)));
      return;
    }
    const int64_t rows = shape[0];
    int64_t row = 1;
    for (size_t i = 1; i < shape.size(); ++i) row *= shape[i];
    bool known = DispatchIndex(indices.dtype(), [&](auto tag) {
      using I = typename decltype(tag)::type;
      Status st = CheckIndices<I>(indices, rows, "GatherGrad");
      if (!st.ok()) return ctx->SetStatus(st);
      Tensor& out = ctx->allocate_output(0, dy.dtype(), shape);
      ScatterAddRows<T, I>(indices.data<I>(), indices.num_elements(), dy.data<T>(), row, &out);
    });
    if (!known)
      ctx->SetStatus(InvalidArgument(std::string("GatherGrad: indices must be int32 or int64, got ") +
                                     DTypeName(indices.dtype())));
  }
};

// Indices outside [0, depth) give a row of `off` values (as in TensorFlow).
template <typename I>
class OneHotKernel : public OpKernel {
 public:
  OneHotKernel(const KernelInit& init, Status* s) {
    ReadAttr(init, "depth", &depth_, s);
    ReadAttr(init, "dtype", &dtype_, s);
    auto on = init.AttrOr<double>("on", 1.0), off = init.AttrOr<double>("off", 0.0);
    if (!on.ok() || !off.ok()) {
      if (s->ok()) *s = on.ok() ? off.status() : on.status();
      return;
    }
    on_ = *on;
    off_ = *off;
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& indices = ctx->input(0);
    Shape os = indices.shape();
    os.push_back(depth_);
    Tensor& out = ctx->allocate_output(0, dtype_, os);
    const I* ix = indices.data<I>();
    bool known = DispatchNumeric(dtype_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      out.flat<T>().setConstant(static_cast<T>(off_));
      T* o = out.data<T>();
      for (int64_t i = 0; i < indices.num_elements(); ++i)
        if (ix[i] >= 0 && ix[i] < depth_) o[i * depth_ + ix[i]] = static_cast<T>(on_);
    });
    if (!known)
      ctx->SetStatus(InvalidArgument(std::string("OneHot: unsupported dtype ") + DTypeName(dtype_)));
  }

 private:
  int64_t depth_ = 0;
  DType dtype_ = DType::kFloat32;
  double on_ = 1.0, off_ = 0.0;
};

// ---- UnsortedSegmentSum / Unique / Where ------------------------------------

// out[segment_ids[i...], ...] += data[i..., ...]; rows no id names stay 0.
template <typename T>
class UnsortedSegmentSumKernel : public OpKernel {
 public:
  UnsortedSegmentSumKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& data = ctx->input(0);
    const Tensor& ids = ctx->input(1);
    const Tensor& ns = ctx->input(2);
    if (ns.num_elements() != 1 || !(ns.dtype() == DType::kInt32 || ns.dtype() == DType::kInt64))
      return ctx->SetStatus(InvalidArgument("UnsortedSegmentSum: num_segments must be an int scalar, got " +
                                            ns.DebugString(0)));
    const int64_t segments = ns.scalar_as<int64_t>();
    if (segments < 0)
      return ctx->SetStatus(InvalidArgument("UnsortedSegmentSum: num_segments must be >= 0, got " +
                                            std::to_string(segments)));
    const int r = ids.rank();
    bool prefix = r <= data.rank();
    for (int i = 0; prefix && i < r; ++i) prefix = ids.dim(i) == data.dim(i);
    if (!prefix)
      return ctx->SetStatus(InvalidArgument("UnsortedSegmentSum: segment_ids " + ShapeString(ids.shape()) +
                                            " must be a prefix of data's shape " + ShapeString(data.shape())));
    Shape os{segments};
    os.insert(os.end(), data.shape().begin() + r, data.shape().end());
    Status st = CheckRuntimeShape(os, "UnsortedSegmentSum output");
    if (!st.ok()) return ctx->SetStatus(st);
    int64_t row = 1;
    for (int i = r; i < data.rank(); ++i) row *= data.dim(i);
    bool known = DispatchIndex(ids.dtype(), [&](auto tag) {
      using I = typename decltype(tag)::type;
      Status c = CheckIndices<I>(ids, segments, "UnsortedSegmentSum", "num_segments is %lld");
      if (!c.ok()) return ctx->SetStatus(c);
      Tensor& out = ctx->allocate_output(0, data.dtype(), os);
      ScatterAddRows<T, I>(ids.data<I>(), ids.num_elements(), data.data<T>(), row, &out);
    });
    if (!known)
      ctx->SetStatus(InvalidArgument(std::string("UnsortedSegmentSum: segment_ids must be int32 or int64, got ") +
                                     DTypeName(ids.dtype())));
  }
};

// The distinct values of a vector in order of first appearance, and each
// element's index into them (int32). Values equal under == are one (so -0
// and +0 are; every NaN is its own).
template <typename T>
class UniqueKernel : public OpKernel {
 public:
  UniqueKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    if (x.rank() != 1)
      return ctx->SetStatus(InvalidArgument("Unique: x must be a vector, got shape " + ShapeString(x.shape())));
    const int64_t n = x.num_elements();
    if (n > std::numeric_limits<int32_t>::max())
      return ctx->SetStatus(InvalidArgument("Unique: " + std::to_string(n) + " elements do not fit int32 indices"));
    const T* in = x.data<T>();
    std::unordered_map<T, int32_t> first;
    first.reserve(static_cast<size_t>(std::min<int64_t>(n, 1 << 20)));
    std::vector<T> values;
    Tensor& idx = ctx->allocate_output(1, DType::kInt32, {n});
    int32_t* o = idx.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      auto [it, fresh] = first.try_emplace(in[i], static_cast<int32_t>(values.size()));
      if (fresh) values.push_back(in[i]);
      o[i] = it->second;
    }
    Tensor& y = ctx->allocate_output(0, x.dtype(), {static_cast<int64_t>(values.size())});
    std::copy(values.begin(), values.end(), y.data<T>());
  }
};

// The coordinates of the true elements of a bool tensor, in row-major
// order: int64 [count, rank].
class WhereKernel : public OpKernel {
 public:
  WhereKernel(const KernelInit&, Status*) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& c = ctx->input(0);
    if (c.dtype() != DType::kBool)
      return ctx->SetStatus(InvalidArgument(std::string("Where: condition must be bool, got ") + DTypeName(c.dtype())));
    const bool* p = c.data<bool>();
    const int64_t n = c.num_elements(), r = c.rank();
    const int64_t count = std::count(p, p + n, true);
    Tensor& out = ctx->allocate_output(0, DType::kInt64, {count, r});
    int64_t* o = out.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      if (!p[i]) continue;
      int64_t rest = i;
      for (int64_t d = r - 1; d >= 0; --d) {
        o[d] = rest % c.dim(static_cast<int>(d));
        rest /= c.dim(static_cast<int>(d));
      }
      o += r;
    }
  }
};

}  // namespace

void RegisterArrayKernels(KernelRegistry& reg) {
  RegisterCPU<TransposeKernel>(reg, "Transpose", {DType::kInvalid});
  RegisterCPU<ConcatKernel>(reg, "Concat", {DType::kInvalid});
  RegisterCPU<SplitKernel>(reg, "Split", {DType::kInvalid});
  RegisterCPU<ConcatGradKernel>(reg, "ConcatGrad", {DType::kInvalid});
  RegisterCPU<SliceKernel>(reg, "Slice", {DType::kInvalid});
  RegisterCPU<StridedSliceKernel>(reg, "StridedSlice", {DType::kInvalid});
  RegisterCPU<StridedSliceGradKernel>(reg, "StridedSliceGrad", {DType::kInvalid});
  RegisterCPU<PadKernel>(reg, "Pad", {DType::kInvalid});
  RegisterCPU<MirrorPadGradKernel<float>>(reg, "MirrorPadGrad", {DType::kFloat32});
  RegisterCPU<MirrorPadGradKernel<double>>(reg, "MirrorPadGrad", {DType::kFloat64});
  RegisterCPU<TileKernel>(reg, "Tile", {DType::kInvalid});
  RegisterCPU<GatherKernel>(reg, "Gather", {DType::kInvalid});
  RegisterCPU<GatherGradKernel<float>>(reg, "GatherGrad", {DType::kFloat32});
  RegisterCPU<GatherGradKernel<double>>(reg, "GatherGrad", {DType::kFloat64});
  RegisterCPU<GatherGradKernel<int32_t>>(reg, "GatherGrad", {DType::kInt32});
  RegisterCPU<GatherGradKernel<int64_t>>(reg, "GatherGrad", {DType::kInt64});
  RegisterCPU<UnsortedSegmentSumKernel<float>>(reg, "UnsortedSegmentSum", {DType::kFloat32});
  RegisterCPU<UnsortedSegmentSumKernel<double>>(reg, "UnsortedSegmentSum", {DType::kFloat64});
  RegisterCPU<UnsortedSegmentSumKernel<int32_t>>(reg, "UnsortedSegmentSum", {DType::kInt32});
  RegisterCPU<UnsortedSegmentSumKernel<int64_t>>(reg, "UnsortedSegmentSum", {DType::kInt64});
  RegisterCPU<UniqueKernel<float>>(reg, "Unique", {DType::kFloat32});
  RegisterCPU<UniqueKernel<double>>(reg, "Unique", {DType::kFloat64});
  RegisterCPU<UniqueKernel<int32_t>>(reg, "Unique", {DType::kInt32});
  RegisterCPU<UniqueKernel<int64_t>>(reg, "Unique", {DType::kInt64});
  RegisterCPU<WhereKernel>(reg, "Where", {DType::kBool});
  RegisterCPU<OneHotKernel<int32_t>>(reg, "OneHot", {DType::kInt32});
  RegisterCPU<OneHotKernel<int64_t>>(reg, "OneHot", {DType::kInt64});
  RegisterCPU<OneHotKernel<uint8_t>>(reg, "OneHot", {DType::kUInt8});
}

}  // namespace sf
