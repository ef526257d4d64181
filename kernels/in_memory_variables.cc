#include "kernels/in_memory_variables.h"

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
