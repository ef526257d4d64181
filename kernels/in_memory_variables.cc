#include "kernels/in_memory_variables.h"

#include <cstring>

#include "kernels/optimizer_math.h"

namespace sf {

Status ApplyAssign(const std::string& var_name, DType dtype, const PartialShape& declared,
                   AssignMode mode, const Tensor& value, Tensor* stored) {
  if (value.dtype() != dtype)
    return InvalidArgument("variable '" + var_name + "' is " + DTypeName(dtype) +
                           ", cannot assign a " + DTypeName(value.dtype()) + " value");
  if (!declared.CompatibleWith(value.shape()))
    return InvalidArgument("variable '" + var_name + "' has shape " + declared.ToString() +
                           ", cannot assign a value of shape " + ShapeString(value.shape()));
  if (mode == AssignMode::kAssign) {
    // Copy so that later in-place updates never touch the caller's buffer;
    // a buffer nobody else holds (a restore's freshly read value) is taken
    // as it is: copying a multi-GiB restore page-faulted all of it twice.
    *stored = value.BufferIsUnique() ? value : value.Copy();
    return Status::OK();
  }
  if (!stored->valid())
    return FailedPrecondition("variable '" + var_name + "' is read before it was initialised");
  if (stored->shape() != value.shape())
    return InvalidArgument("variable '" + var_name + "' has shape " + ShapeString(stored->shape()) +
                           ", cannot add or subtract a value of shape " + ShapeString(value.shape()));
  const double sign = mode == AssignMode::kAdd ? 1.0 : -1.0;
  Tensor out = stored->Copy();  // copy-on-write: readers keep their snapshot
  DispatchNumeric(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) {
      if (sign > 0) out.flat<T>() += value.flat<T>();
      else out.flat<T>() -= value.flat<T>();
    }
  });
  *stored = out;
  return Status::OK();
}

Status ApplyAssignRows(const std::string& var_name, const Tensor& indices, const Tensor& rows, Tensor* stored,
                       Tensor* written) {
  const std::string what = "scatter update of variable '" + var_name + "'";
  if (!stored->valid()) return FailedPrecondition("variable '" + var_name + "' is updated before it was initialised");
  const Shape& shape = stored->shape();
  if (shape.empty()) return InvalidArgument(what + ": the variable is a scalar; its rows need rank 1 or more");
  if (indices.dtype() != DType::kInt32 && indices.dtype() != DType::kInt64)
    return InvalidArgument(what + ": indices must be int32 or int64, got " + DTypeName(indices.dtype()));
  if (rows.dtype() != stored->dtype())
    return InvalidArgument(what + ": the variable is " + DTypeName(stored->dtype()) + ", the updates " +
                           DTypeName(rows.dtype()));
  Shape want = indices.shape();
  want.insert(want.end(), shape.begin() + 1, shape.end());
  if (rows.shape() != want)
    return InvalidArgument(what + ": updates of shape " + ShapeString(rows.shape()) + " for indices of shape " +
                           ShapeString(indices.shape()) + " into shape " + ShapeString(shape) + " (want " +
                           ShapeString(want) + ")");
  const int64_t n = indices.num_elements();
  Tensor idx(DType::kInt64, {n});
  int64_t* p = idx.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = indices.dtype() == DType::kInt32 ? indices.data<int32_t>()[i] : indices.data<int64_t>()[i];
    if (p[i] < 0 || p[i] >= shape[0])
      return InvalidArgument(what + ": index " + std::to_string(p[i]) + " (position " + std::to_string(i) +
                             ") is outside [0, " + std::to_string(shape[0]) + ")");
  }
  if (n > 0 && stored->bytes() > 0) {  // rows of width 0 hold nothing to write
    // Copy-on-write: a reader's snapshot keeps the old rows.
    if (!stored->BufferIsUnique()) *stored = stored->Copy();
    const size_t row_bytes = stored->bytes() / static_cast<size_t>(shape[0]);
    char* dst = static_cast<char*>(stored->raw_data());
    const char* src = static_cast<const char*>(rows.raw_data());
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst + static_cast<size_t>(p[i]) * row_bytes, src + static_cast<size_t>(i) * row_bytes, row_bytes);
  }
  if (written) *written = std::move(idx);
  return Status::OK();
}

Status CheckSameVariable(const std::string& name, DType have_dtype, const PartialShape& have_shape,
                         DType dtype, const PartialShape& shape) {
  if (have_dtype != dtype || !have_shape.CompatibleWith(shape))
    return InvalidArgument("variable '" + name + "' exists as " + DTypeName(have_dtype) +
                           have_shape.ToString() + ", not " + DTypeName(dtype) + shape.ToString());
  return Status::OK();
}

Result<int64_t> InMemoryVariables::Resolve(const std::string& name, DType dtype,
                                           const PartialShape& shape) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = ids_.find(name);
  if (it != ids_.end()) {
    const Var& v = vars_[it->second];
    SF_RETURN_IF_ERROR(CheckSameVariable(name, v.dtype, v.shape, dtype, shape));
    return it->second;
  }
  int64_t id = static_cast<int64_t>(vars_.size());
  vars_.push_back(Var{name, dtype, shape, Tensor()});
  ids_[name] = id;
  return id;
}

void InMemoryVariables::Read(int64_t id, std::function<void(Result<Tensor>)> done) {
  Result<Tensor> r = Internal("unset");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (id < 0 || id >= static_cast<int64_t>(vars_.size())) r = NotFound("no variable with id " + std::to_string(id));
    else if (vars_[id].hash) r = vars_[id].hash->Serialize();  // the state, or the cold tier's error
    else if (!vars_[id].value.valid())
      r = FailedPrecondition("variable '" + vars_[id].name + "' is read before it was initialised");
    else r = vars_[id].value;
  }
  done(std::move(r));
}

void InMemoryVariables::Assign(int64_t id, AssignMode mode, Tensor value,
                               std::function<void(Result<Tensor>)> done, UpdateOrigin) {
  Result<Tensor> r = Internal("unset");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (id < 0 || id >= static_cast<int64_t>(vars_.size())) {
      r = NotFound("no variable with id " + std::to_string(id));
    } else {
      Var& v = vars_[id];
      if (v.hash || (v.dtype == DType::kInt64 && mode == AssignMode::kAssign && IsHashShardState(value))) {
        const size_t p = v.name.rfind("/part_");
        auto h = HashEmbeddingShard::Deserialize(value, p == std::string::npos ? v.name : v.name.substr(0, p));
        if (h.ok()) {
          v.hash = std::move(*h);
          r = value;
        } else {
          r = h.status();
        }
      } else {
        Status s = ApplyAssign(v.name, v.dtype, v.shape, mode, value, &v.value);
        if (s.ok()) r = v.value;
        else r = s;
      }
    }
  }
  done(std::move(r));
}

Status InMemoryVariables::UpdateCopies(const std::vector<int64_t>& ids,
                                       const std::function<Status(const std::vector<Tensor*>&)>& update) {
  std::vector<Tensor> updated;
  for (int64_t id : ids) {
    if (id < 0 || id >= static_cast<int64_t>(vars_.size()))
      return NotFound("no variable with id " + std::to_string(id));
    if (!vars_[id].value.valid())
      return FailedPrecondition("variable '" + vars_[id].name + "' is updated before it was initialised");
    updated.push_back(vars_[id].value.Copy());
  }
  std::vector<Tensor*> ptrs;
  for (auto& t : updated) ptrs.push_back(&t);
  SF_RETURN_IF_ERROR(update(ptrs));
  for (size_t i = 0; i < updated.size(); ++i) vars_[ids[i]].value = std::move(updated[i]);
  return Status::OK();
}

void InMemoryVariables::Apply(ApplyRequest req, std::function<void(Status)> done) {
  Status s;
  {
    std::lock_guard<std::mutex> l(mu_);
    s = UpdateCopies(req.var_ids, [&](const std::vector<Tensor*>& v) { return ApplyOptimizerUpdate(req, v); });
  }
  done(s);
}

void InMemoryVariables::AssignRows(AssignRowsRequest req, std::function<void(Status)> done) {
  Status s;
  {
    std::lock_guard<std::mutex> l(mu_);
    const int64_t id = req.var_id;
    if (id < 0 || id >= static_cast<int64_t>(vars_.size())) s = NotFound("no variable with id " + std::to_string(id));
    else if (vars_[id].hash)
      s = InvalidArgument("variable '" + vars_[id].name + "' is a hash embedding table shard: its rows cannot be assigned");
    else s = ApplyAssignRows(vars_[id].name, req.indices, req.rows, &vars_[id].value);
  }
  done(s);
}

void InMemoryVariables::GatherCombine(int64_t id, EmbeddingShardSpec spec, EmbeddingGather q,
                                      std::function<void(Result<Tensor>)> done) {
  Result<Tensor> r = Internal("unset");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (id < 0 || id >= static_cast<int64_t>(vars_.size())) {
      r = NotFound("no variable with id " + std::to_string(id));
    } else if (vars_[id].hash) {
      Tensor out;
      Status s = vars_[id].hash->GatherCombine(q, &out);
      if (s.ok()) r = std::move(out);
      else r = s;
    } else if (!vars_[id].value.valid()) {
      r = FailedPrecondition("variable '" + vars_[id].name + "' is read before it was initialised");
    } else {
      Tensor out;
      Status s = EmbeddingGatherCombine(spec, q, vars_[id].value, &out);
      if (s.ok()) r = std::move(out);
      else r = s;
    }
  }
  done(std::move(r));
}

void InMemoryVariables::SparseApply(SparseApplyRequest req, std::function<void(Status)> done) {
  Status s;
  {
    std::lock_guard<std::mutex> l(mu_);
    const int64_t first = req.var_ids.empty() ? -1 : req.var_ids[0];
    const bool hash = first >= 0 && first < static_cast<int64_t>(vars_.size()) && vars_[first].hash;
    if (hash) s = vars_[first].hash->Apply(req);
    else s = UpdateCopies(req.var_ids, [&](const std::vector<Tensor*>& v) {
      Status u = ApplySparseOptimizerUpdate(req, v);
      return u.ok() ? u : u.WithPrefix("variable '" + vars_[req.var_ids[0]].name + "'");
    });
  }
  done(s);
}

void InMemoryVariables::InitHashShard(int64_t id, HashShardConfig config, std::function<void(Status)> done) {
  Status s = CheckHashShardConfig(config);
  if (s.ok() && !config.cold_dir.empty())
    s = FailedPrecondition("hash embedding table '" + config.table + "': a cold tier needs a session");
  if (s.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    if (id < 0 || id >= static_cast<int64_t>(vars_.size())) s = NotFound("no variable with id " + std::to_string(id));
    else vars_[id].hash = std::make_shared<HashEmbeddingShard>(std::move(config));
  }
  done(s);
}

void InMemoryVariables::HashShardStats(int64_t id, std::function<void(Result<Tensor>)> done) {
  Result<Tensor> r = Internal("unset");
  {
    std::lock_guard<std::mutex> l(mu_);
    if (id < 0 || id >= static_cast<int64_t>(vars_.size())) r = NotFound("no variable with id " + std::to_string(id));
    else if (!vars_[id].hash) r = FailedPrecondition("variable '" + vars_[id].name + "' is not a hash table shard");
    else r = HashShardMetricsTensor(vars_[id].hash->Metrics());
  }
  done(std::move(r));
}

std::string InMemoryVariables::NameOf(int64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  return id >= 0 && id < static_cast<int64_t>(vars_.size()) ? vars_[id].name : "";
}

}  // namespace sf
