// The optimizer updates, TensorFlow's formulas (tf.raw_ops.Apply*), written
// once as Eigen expressions over a span of the variable and its slots, in
// place. The dense update is one span; RowUpdater runs one per row.
#include "kernels/optimizer_math.h"

#include "kernels/compute_pool.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>

namespace sf {
namespace {

// How UpdateSpan sees a span. A whole variable: an aligned tensor map, whose
// evaluator unrolls (as every other dense kernel's). A row: an array map,
// which has no alignment to rely on and no per-call setup.
template <typename T>
struct TensorView {
  using Span = Eigen::TensorMap<Eigen::Tensor<T, 1, Eigen::RowMajor>, Eigen::Aligned>;
  using ConstSpan = Eigen::TensorMap<Eigen::Tensor<const T, 1, Eigen::RowMajor>, Eigen::Aligned>;
};
template <typename T>
struct RowView {
  using Span = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
  using ConstSpan = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
};

template <OptimizerKind K>
inline constexpr bool kHasFormula = false;

// Updates n contiguous elements of the variable (var) and of each row-shaped
// slot (slot[i], in the spec's order) by the gradient g, seen through View.
template <OptimizerKind K, template <typename> class View, typename T>
inline void UpdateSpan(const UpdateParams<T>& p, T* var_data, T* const* slot, const T* g_data,
                       int64_t n) {
  using Span = typename View<T>::Span;
  Span var(var_data, n);
  typename View<T>::ConstSpan g(g_data, n);
  if constexpr (K == OptimizerKind::kGradientDescent) {
    var -= g * p.s[0];
  } else if constexpr (K == OptimizerKind::kMomentum) {
    Span accum(slot[0], n);
    const T lr = p.s[0], momentum = p.s[1];
    accum = accum * momentum + g;
    if (p.nesterov) var -= g * lr + accum * (momentum * lr);
    else var -= accum * lr;
  } else if constexpr (K == OptimizerKind::kAdagrad) {
    Span accum(slot[0], n);
    accum += g.square();
    var -= g * p.s[0] / accum.sqrt();
  } else if constexpr (K == OptimizerKind::kAdam) {
    const T beta1 = p.s[1], beta2 = p.s[2], eps = p.s[3];
    // Three expressions, so blocks that stay in L1 between them: one pass
    // over memory instead of three (a dense MLP's Adam ran at L3 speed).
    constexpr int64_t kBlock = 1024;
    for (int64_t b = 0; b < n; b += kBlock) {
      const int64_t len = std::min(kBlock, n - b);
      Span vb(var_data + b, len), m(slot[0] + b, len), v(slot[1] + b, len);
      typename View<T>::ConstSpan gb(g_data + b, len);
      m += (gb - m) * (T(1) - beta1);
      v += (gb.square() - v) * (T(1) - beta2);
      vb -= (m * p.alpha) / (v.sqrt() + eps);
    }
  } else if constexpr (K == OptimizerKind::kRMSProp) {
    Span ms(slot[0], n), mom(slot[1], n);
    const T lr = p.s[0], rho = p.s[1], momentum = p.s[2], eps = p.s[3];
    ms += (g.square() - ms) * (T(1) - rho);
    mom = mom * momentum + g * lr / (ms + eps).sqrt();
    var -= mom;
  } else if constexpr (K == OptimizerKind::kRowwiseAdagrad) {
    // One row: its accumulator is read from the slot's first element and
    // written to all of them.
    Span accum(slot[0], n);
    const T a = slot[0][0] + g.square().sum() / static_cast<T>(n > 0 ? n : 1);
    accum.setConstant(a);
    var -= g * (p.s[0] / std::sqrt(a));
  } else if constexpr (K == OptimizerKind::kFtrl) {
    T* accum = slot[0];
    T* linear = slot[1];
    const T lr = p.s[0], l1 = p.s[1], l2 = p.s[2], power = -p.s[3];
    for (int64_t i = 0; i < n; ++i) {  // pow and a branch per element: no Eigen form is clearer
      const T gi = g_data[i], n_old = accum[i], n_new = n_old + gi * gi;
      const T p_new = std::pow(n_new, power);
      linear[i] += gi - (p_new - std::pow(n_old, power)) / lr * var_data[i];
      const T z = linear[i];
      var_data[i] = std::abs(z) > l1 ? ((z > 0 ? l1 : -l1) - z) / (p_new / lr + T(2) * l2) : T(0);
      accum[i] = n_new;
    }
  } else {
    static_assert(kHasFormula<K>, "an OptimizerKind without a formula in UpdateSpan");
  }
}

// Calls fn(std::integral_constant<OptimizerKind, kind>): the one switch from
// the run-time kind to the compile-time one, made once per update.
template <int I = 0, typename Fn>
void WithKind(OptimizerKind kind, Fn&& fn) {
  if constexpr (I < kNumOptimizers) {
    constexpr OptimizerKind K = static_cast<OptimizerKind>(I);
    if (kind == K) return fn(std::integral_constant<OptimizerKind, K>());
    WithKind<I + 1>(kind, std::forward<Fn>(fn));
  }
}

// The number of row-shaped slots of K (the scalar ones come after them).
template <OptimizerKind K>
inline constexpr int kRowSlots = SpecOf(K).handles - 1 - SpecOf(K).scalar_slots;

// The hyperparameters of one update in T; Adam's step size from its beta
// powers (vars[3], vars[4]), before they advance.
template <typename T>
UpdateParams<T> ReadParamsWith(OptimizerKind kind, const std::vector<Tensor>& scalars,
                               const T* beta1_power, const T* beta2_power, bool nesterov) {
  UpdateParams<T> p;
  for (size_t i = 0; i < scalars.size(); ++i) p.s[i] = scalars[i].scalar_as<T>();
  p.nesterov = nesterov;
  if (kind == OptimizerKind::kAdam)
    p.alpha = p.s[0] * std::sqrt(T(1) - *beta2_power) / (T(1) - *beta1_power);
  return p;
}
template <typename T>
UpdateParams<T> ReadParams(OptimizerKind kind, const std::vector<Tensor>& scalars,
                           const std::vector<Tensor*>& vars, bool nesterov) {
  const bool adam = kind == OptimizerKind::kAdam;
  return ReadParamsWith<T>(kind, scalars, adam ? vars[3]->data<T>() : nullptr,
                           adam ? vars[4]->data<T>() : nullptr, nesterov);
}

// The scalar slots' update, once per call after the spans: Adam's beta powers.
template <OptimizerKind K, typename T>
void AdvanceScalarSlots(const UpdateParams<T>& p, T* const* scalar_slot) {
  if constexpr (K == OptimizerKind::kAdam) {
    *scalar_slot[0] *= p.s[1];
    *scalar_slot[1] *= p.s[2];
  }
}

// Elements per chunk of a dense update (16 KiB of float32 per array: a
// variable and two slots stay in L1), and the smallest update split over the
// pool (below it the hand-off costs more than the second core saves).
constexpr int64_t kUpdateChunk = 4096;
constexpr int64_t kParallelUpdate = 65536;

template <typename T>
void DenseUpdate(OptimizerKind kind, const ApplyRequest& req, const std::vector<Tensor*>& v,
                 ComputePool* pool) {
  const UpdateParams<T> p = ReadParams<T>(kind, req.scalars, v, req.use_nesterov);
  T* slots[kMaxOptimizerSlots] = {};
  for (size_t i = 1; i < v.size(); ++i) slots[i - 1] = v[i]->data<T>();
  WithKind(kind, [&](auto k) {
    constexpr OptimizerKind K = decltype(k)::value;
    const int64_t n = req.grad.num_elements();
    if constexpr (SpecOf(K).rowwise) {
      const int64_t width = req.grad.rank() == 0 ? 1 : req.grad.dim(req.grad.rank() - 1);
      T* row_slot[kMaxOptimizerSlots] = {};
      for (int64_t off = 0; width > 0 && off < n; off += width) {
        for (int s = 0; s < kRowSlots<K>; ++s) row_slot[s] = slots[s] + off;
        UpdateSpan<K, RowView, T>(p, v[0]->data<T>() + off, row_slot, req.grad.data<T>() + off, width);
      }
    } else {
      // In chunks that fit L1, so a formula's second pass over the variable
      // and its slots (Momentum's accum, then var) reads what the first just
      // wrote instead of memory; big variables split them over the pool.
      // Element-wise formulas: the result does not depend on the split.
      const int64_t chunks = (n + kUpdateChunk - 1) / kUpdateChunk;
      auto run = [&](int64_t begin, int64_t end) {
        T* chunk_slot[kMaxOptimizerSlots] = {};
        for (int64_t c = begin; c < end; ++c) {
          const int64_t off = c * kUpdateChunk, len = std::min(kUpdateChunk, n - off);
          for (int s = 0; s < kRowSlots<K>; ++s) chunk_slot[s] = slots[s] + off;
          UpdateSpan<K, TensorView, T>(p, v[0]->data<T>() + off, chunk_slot, req.grad.data<T>() + off, len);
        }
      };
      if (pool && n >= kParallelUpdate) pool->ParallelFor(chunks, kParallelUpdate / kUpdateChunk / 2, run);
      else run(0, chunks);
    }
    AdvanceScalarSlots<K>(p, slots + kRowSlots<K>);
  });
}

}  // namespace

Status CheckOptimizerInputs(const OptimizerSpec& spec, const std::string& who,
                            const std::vector<Tensor*>& vars, const std::vector<Tensor>& scalars,
                            DType dt, const Shape& shape, const char* against) {
  if (static_cast<int>(vars.size()) != spec.handles)
    return InvalidArgument(who + " needs " + std::to_string(spec.handles) +
                           " variables (the variable and its slots), got " +
                           std::to_string(vars.size()));
  if (static_cast<int>(scalars.size()) != spec.scalars)
    return InvalidArgument(who + " needs " + std::to_string(spec.scalars) +
                           " hyperparameters, got " + std::to_string(scalars.size()));
  for (int i = 0; i < spec.handles; ++i) {
    const Tensor* t = vars[i];
    const std::string what = i == 0 ? std::string("the variable") : "slot " + std::to_string(i);
    if (!t || !t->valid()) return InvalidArgument(who + ": " + what + " has no value");
    if (t->dtype() != dt)
      return InvalidArgument(who + ": " + what + " is " + DTypeName(t->dtype()) + " but " +
                             against + " is " + DTypeName(dt));
    const bool scalar_slot = i >= spec.handles - spec.scalar_slots;
    if (scalar_slot ? t->num_elements() != 1 : t->shape() != shape)
      return InvalidArgument(who + ": " + what + " has shape " + ShapeString(t->shape()) +
                             (scalar_slot ? std::string(", expected a scalar")
                                          : " but " + std::string(against) + " has shape " +
                                                ShapeString(shape)));
  }
  return CheckOptimizerScalars(spec, who, scalars);
}

Status CheckOptimizerScalars(const OptimizerSpec& spec, const std::string& who,
                             const std::vector<Tensor>& scalars) {
  if (static_cast<int>(scalars.size()) != spec.scalars)
    return InvalidArgument(who + " needs " + std::to_string(spec.scalars) +
                           " hyperparameters, got " + std::to_string(scalars.size()));
  for (size_t i = 0; i < scalars.size(); ++i) {
    const Tensor& t = scalars[i];
    if (!t.valid() || t.num_elements() != 1 ||
        (t.dtype() != DType::kFloat32 && t.dtype() != DType::kFloat64))
      return InvalidArgument(who + ": hyperparameter " + std::to_string(i) +
                             " must be a float32 or float64 scalar, got " + t.DebugString(0));
  }
  return Status::OK();
}

Status ApplyOptimizerUpdate(const ApplyRequest& req, const std::vector<Tensor*>& vars,
                            ComputePool* pool) {
  if (req.optimizer >= OptimizerKind::kCount)
    return InvalidArgument("unknown optimizer " + std::to_string(static_cast<int>(req.optimizer)));
  const OptimizerSpec& spec = SpecOf(req.optimizer);
  const std::string who = std::string("optimizer ") + spec.name;
  const DType dt = req.grad.dtype();
  if (dt != DType::kFloat32 && dt != DType::kFloat64)
    return InvalidArgument(who + ": the gradient must be float32 or float64, got " +
                           DTypeName(dt));
  SF_RETURN_IF_ERROR(CheckOptimizerInputs(spec, who, vars, req.scalars, dt, req.grad.shape(),
                                          "the gradient"));
  if (dt == DType::kFloat32) DenseUpdate<float>(req.optimizer, req, vars, pool);
  else DenseUpdate<double>(req.optimizer, req, vars, pool);
  return Status::OK();
}

RowUpdater::RowUpdater(OptimizerKind kind, const std::vector<Tensor>& scalars,
                       const std::vector<Tensor*>& vars, bool use_nesterov)
    : kind_(kind), p_(ReadParams<float>(kind, scalars, vars, use_nesterov)),
      dim_(vars[0]->dim(1)), var_(vars[0]->data<float>()) {
  WithKind(kind, [&](auto k) {
    constexpr OptimizerKind K = decltype(k)::value;
    constexpr int row_slots = kRowSlots<K>;
    for (int s = 0; s < row_slots; ++s) slots_[s] = vars[1 + s]->data<float>();
    for (int s = 0; s < SpecOf(K).scalar_slots; ++s)
      scalar_slots_[s] = vars[1 + row_slots + s]->data<float>();
  });
}

void RowUpdater::Apply(const int64_t* rows, const float* g, int64_t begin, int64_t end) const {
  // Rows are scattered over a big table: ask for a few rows ahead so the
  // cache misses overlap (as in the embedding gather).
  constexpr int64_t kAhead = 8;
  const int64_t dim = dim_;
  WithKind(kind_, [&](auto k) {
    constexpr OptimizerKind K = decltype(k)::value;
    auto prefetch = [dim](const float* row) {
      for (int64_t j = 0; j < dim; j += 16) __builtin_prefetch(row + j);
    };
    float* row_slot[kMaxOptimizerSlots] = {};
    for (int64_t i = begin; i < end; ++i) {
      if (i + kAhead < end) {
        const int64_t ahead = rows[i + kAhead] * dim;
        prefetch(var_ + ahead);
        for (int s = 0; s < kRowSlots<K>; ++s) prefetch(slots_[s] + ahead);
      }
      const int64_t off = rows[i] * dim;
      for (int s = 0; s < kRowSlots<K>; ++s) row_slot[s] = slots_[s] + off;
      UpdateSpan<K, RowView, float>(p_, var_ + off, row_slot, g + i * dim, dim);
    }
  });
}

RowUpdater::RowUpdater(OptimizerKind kind, const std::vector<Tensor>& scalars, int64_t dim,
                       float* const* scalar_slots, bool use_nesterov)
    : kind_(kind),
      p_(ReadParamsWith<float>(kind, scalars, kind == OptimizerKind::kAdam ? scalar_slots[0] : nullptr,
                               kind == OptimizerKind::kAdam ? scalar_slots[1] : nullptr, use_nesterov)),
      dim_(dim), var_(nullptr) {
  for (int s = 0; s < SpecOf(kind).scalar_slots; ++s) scalar_slots_[s] = scalar_slots[s];
}

void RowUpdater::ApplyRow(float* var, float* const* slots, const float* g) const {
  WithKind(kind_, [&](auto k) {
    UpdateSpan<decltype(k)::value, RowView, float>(p_, var, slots, g, dim_);
  });
}

void RowUpdater::Finish() {
  WithKind(kind_, [&](auto k) { AdvanceScalarSlots<decltype(k)::value>(p_, scalar_slots_); });
}

}  // namespace sf
