// The math of each optimizer update, applied in place to a variable and its
// slots. Used by the variable shard actor (where updates really happen) and by
// the in-memory variable service of tests.
//
// One formula per optimizer (kernels/optimizer_spec.h lists them), written
// once over a contiguous span: a dense update is one span (the whole
// variable), a sparse one a span per touched row (RowUpdater, used by
// kernels/embedding_math.cc). The kind is dispatched once per call, never
// inside the loops.
#pragma once

#include <string>
#include <vector>

#include "kernels/optimizer_spec.h"
#include "kernels/variable_service.h"

namespace sf {

class ComputePool;

// Applies req to vars (the variable first, then its slots, as in
// req.var_ids), splitting a big variable over pool (may be null). Returns
// InvalidArgument naming the optimizer and the shapes or dtypes that do not
// match; vars are unchanged then.
Status ApplyOptimizerUpdate(const ApplyRequest& req, const std::vector<Tensor*>& vars,
                            ComputePool* pool = nullptr);

// The checks every update makes before it writes: vars and scalars as many
// as spec says, every var a value of dtype dt and shape `shape` (scalar slots:
// one element), every scalar a float32 or float64 scalar. InvalidArgument
// starting with `who`; `against` names where `shape` came from ("the gradient").
Status CheckOptimizerInputs(const OptimizerSpec& spec, const std::string& who,
                            const std::vector<Tensor*>& vars, const std::vector<Tensor>& scalars,
                            DType dt, const Shape& shape, const char* against);

// The hyperparameter checks of CheckOptimizerInputs alone (their count, each
// a float32 or float64 scalar): InvalidArgument starting with `who`.
Status CheckOptimizerScalars(const OptimizerSpec& spec, const std::string& who,
                             const std::vector<Tensor>& scalars);

// One update's hyperparameters, read once per call.
template <typename T>
struct UpdateParams {
  T s[kMaxOptimizerScalars] = {};  // the op's scalar inputs, the learning rate first
  T alpha = T(0);                  // Adam: lr * sqrt(1 - beta2_power) / (1 - beta1_power)
  bool nesterov = false;           // Momentum
};

// The row-wise form of the same updates: vars (the variable [rows, dim] and
// its slots, float32, passed CheckOptimizerInputs) updated one row at a time.
class RowUpdater {
 public:
  // Reads the hyperparameters (and Adam's step size from its beta powers) once.
  RowUpdater(OptimizerKind kind, const std::vector<Tensor>& scalars,
             const std::vector<Tensor*>& vars, bool use_nesterov);
  // Updates row rows[i] of the variable and of its row-shaped slots by the
  // gradient row g + i * dim, for i in [begin, end). Calls on disjoint rows
  // may run on different threads at once.
  void Apply(const int64_t* rows, const float* g, int64_t begin, int64_t end) const;
  // For rows kept outside tensors (a hash table's arena): dim floats per row;
  // scalar_slots[i] points at scalar slot i (Adam's beta powers, advanced by
  // Finish). The caller checks scalars first (CheckOptimizerScalars).
  RowUpdater(OptimizerKind kind, const std::vector<Tensor>& scalars, int64_t dim,
             float* const* scalar_slots, bool use_nesterov);
  // Updates one row at var and its row-shaped slots at slots[s] (dim floats
  // each) by the gradient row g.
  void ApplyRow(float* var, float* const* slots, const float* g) const;
  // Advances the scalar slots (Adam's beta powers): once per update, after
  // every row.
  void Finish();

 private:
  OptimizerKind kind_;
  UpdateParams<float> p_;
  int64_t dim_;
  float* var_;
  float* slots_[kMaxOptimizerSlots] = {};  // the row-shaped ones
  float* scalar_slots_[kMaxOptimizerSlots] = {};
};

}  // namespace sf
