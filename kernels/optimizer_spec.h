// The optimizers, in one table: what each update op takes (the variable and
// its slots, the scalar hyperparameters), the names of its dense and sparse
// ops and of its slots. The op registrations (graph/ops/training_ops.cc,
// embedding_ops.cc, replication_ops.cc), the optimizer builders
// (graph/optimizers.cc), the kernels and the update math
// (kernels/optimizer_math.h) all read it; tests/kernels/optimizer_math_test.cc
// checks every entry against the op and kernel registries.
//
// Adding an optimizer: a kind before kCount, its row below (in kind order),
// its formula in kernels/optimizer_math.cc (UpdateSpan) and its builder class
// in include/shardflow/optimizers.h.
// Thread-safety: constants and pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

#include "shardflow/status.h"

namespace sf {

enum class OptimizerKind : uint8_t {
  kGradientDescent, kMomentum, kAdagrad, kAdam, kRMSProp, kRowwiseAdagrad, kFtrl, kCount
};

inline constexpr int kMaxOptimizerSlots = 4;    // slots beside the variable
inline constexpr int kMaxOptimizerScalars = 4;  // scalar hyperparameter inputs

struct OptimizerSpec {
  OptimizerKind kind;
  const char* name;       // Optimizer::name(); attr "optimizer" of ApplyGradientSync/Async
  const char* apply_op;   // inputs: var, slots..., scalars..., grad
  const char* sparse_op;  // embedding shard form: shard, slots..., scalars..., ids, [segments], dy;
                          // nullptr when the optimizer has none
  int handles;            // variable handles an update takes: the variable, then its slots
  int scalars;            // scalar hyperparameter inputs, the learning rate first
  int scalar_slots;       // trailing slots that are scalars, not variable-shaped (Adam's beta powers)
  const char* slots[kMaxOptimizerSlots];  // handles - 1 names: slot variable "<var>/<name>/<slot>"
  const char* summary;         // apply_op's documentation
  const char* sparse_summary;  // sparse_op's documentation
  // The formula reads a whole row (the last dimension) at once, so the dense
  // update runs it row by row (row-wise Adagrad's one accumulator per row).
  bool rowwise = false;
};

inline constexpr OptimizerSpec kOptimizers[] = {
    {OptimizerKind::kGradientDescent, "GradientDescent", "ApplyGradientDescent",
     "EmbeddingSparseApplyGradientDescent", 1, 1, 0, {},
     "var -= lr * grad. Inputs: var, lr, grad.",
     "Sparse SGD on one embedding shard: rows -= lr * grad for the rows its ids touch. Inputs: "
     "shard, lr, ids, [segments], dy (the gradient of the shard's lookup)."},
    {OptimizerKind::kMomentum, "Momentum", "ApplyMomentum", nullptr, 2, 2, 0, {"momentum"},
     "accum = accum * momentum + grad; var -= lr * accum (Nesterov: var -= lr * (grad + "
     "momentum * accum)). Inputs: var, accum, lr, momentum, grad; attr use_nesterov.",
     nullptr},
    {OptimizerKind::kAdagrad, "Adagrad", "ApplyAdagrad", "EmbeddingSparseApplyAdagrad", 2, 1, 0,
     {"accumulator"},
     "accum += grad^2; var -= lr * grad / sqrt(accum). Inputs: var, accum, lr, grad.",
     "Sparse Adagrad on one embedding shard (duplicate ids summed first). Inputs: shard, "
     "accumulator, lr, ids, [segments], dy."},
    {OptimizerKind::kAdam, "Adam", "ApplyAdam", "EmbeddingSparseApplyAdam", 5, 4, 2,
     {"m", "v", "beta1_power", "beta2_power"},
     "Adam with bias correction; the beta powers are variables updated by the op. Inputs: var, "
     "m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad.",
     "Lazy Adam on one embedding shard: only touched rows' m and v move; beta powers advance "
     "once. Inputs: shard, m, v, beta1_power, beta2_power, lr, beta1, beta2, epsilon, ids, "
     "[segments], dy."},
    {OptimizerKind::kRMSProp, "RMSProp", "ApplyRMSProp", nullptr, 3, 4, 0, {"rms", "momentum"},
     "ms = rho * ms + (1 - rho) * grad^2; mom = momentum * mom + lr * grad / sqrt(ms + epsilon); "
     "var -= mom. Inputs: var, ms, mom, lr, rho, momentum, epsilon, grad.",
     nullptr},
    // The accumulator slot has the variable's shape (so every update, checkpoint
    // and reshard path is shared); each row's elements all hold that row's one value.
    {OptimizerKind::kRowwiseAdagrad, "RowwiseAdagrad", "ApplyRowwiseAdagrad",
     "EmbeddingSparseApplyRowwiseAdagrad", 2, 1, 0, {"accumulator"},
     "Row-wise Adagrad: one accumulator per row (of the last dimension): accum += mean(grad^2) "
     "over the row; var -= lr * grad / sqrt(accum). Inputs: var, accum, lr, grad.",
     "Sparse row-wise Adagrad on one embedding shard: one accumulator per touched row. Inputs: "
     "shard, accumulator, lr, ids, [segments], dy.",
     /*rowwise=*/true},
    {OptimizerKind::kFtrl, "Ftrl", "ApplyFtrl", "EmbeddingSparseApplyFtrl", 3, 4, 0,
     {"accumulator", "linear"},
     "FTRL-proximal (TF's ApplyFtrl): n += grad^2; z += grad - (n^-p - n_old^-p) / lr * var; "
     "var = |z| > l1 ? (sign(z) * l1 - z) / (n^-p / lr + 2 * l2) : 0. Inputs: var, accum (n), "
     "linear (z), lr, l1, l2, lr_power (p), grad.",
     "Sparse FTRL-proximal on one embedding shard (the standard CTR optimizer). Inputs: shard, "
     "accumulator, linear, lr, l1, l2, lr_power, ids, [segments], dy."},
};

inline constexpr int kNumOptimizers = static_cast<int>(OptimizerKind::kCount);
static_assert(std::size(kOptimizers) == static_cast<size_t>(kNumOptimizers),
              "kOptimizers needs one row per OptimizerKind");

// Our invariants on the table, checked at compile time: rows in kind order,
// counts within the limits, one name per slot, a sparse summary iff a sparse op.
constexpr bool OptimizerTableIsConsistent() {
  for (int i = 0; i < kNumOptimizers; ++i) {
    const OptimizerSpec& s = kOptimizers[i];
    if (static_cast<int>(s.kind) != i) return false;
    if (s.handles < 1 || s.handles - 1 > kMaxOptimizerSlots) return false;
    if (s.scalars < 1 || s.scalars > kMaxOptimizerScalars) return false;
    if (s.scalar_slots < 0 || s.scalar_slots > s.handles - 1) return false;
    for (int j = 0; j < kMaxOptimizerSlots; ++j)
      if ((s.slots[j] != nullptr) != (j < s.handles - 1)) return false;
    if ((s.sparse_op != nullptr) != (s.sparse_summary != nullptr)) return false;
  }
  return true;
}
static_assert(OptimizerTableIsConsistent(), "kOptimizers: see OptimizerTableIsConsistent");

// REQUIRES: kind < kCount.
constexpr const OptimizerSpec& SpecOf(OptimizerKind kind) {
  return kOptimizers[static_cast<size_t>(kind)];
}
inline const char* OptimizerName(OptimizerKind kind) {
  return kind < OptimizerKind::kCount ? SpecOf(kind).name : "(invalid optimizer)";
}

// The spec named `name` ("Adam"), or nullptr.
const OptimizerSpec* FindOptimizer(std::string_view name);
// The spec whose apply_op or sparse_op is `op` ("ApplyAdam"), or nullptr.
const OptimizerSpec* FindOptimizerByOp(std::string_view op);
// FindOptimizer, or InvalidArgument "unknown optimizer 'X' (GradientDescent, ...)".
Result<OptimizerKind> ParseOptimizer(const std::string& name);
// The names in table order: "GradientDescent, Momentum, ..." (with_sparse_op:
// only those with a sparse op, "GradientDescent, Adagrad or Adam").
std::string OptimizerNames(bool with_sparse_op = false);

}  // namespace sf
