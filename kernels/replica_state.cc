#include "kernels/replica_state.h"

#include <algorithm>
#include <limits>

namespace sf {
namespace {

// What the applied window records for a contribution that was dropped: its
// origin with the op key flipped by a constant (another op's key equals it
// with chance 2^-64), so that it is never taken for an applied one.
UpdateOrigin DroppedMark(const UpdateOrigin& o) { return UpdateOrigin{o.step, o.op ^ 0x9e3779b97f4a7c15ull}; }

}  // namespace

// ---- ReplicaState -----------------------------------------------------------

ReplicaState::~ReplicaState() {
  for (auto& kv : buckets_)
    for (auto& w : kv.second.waiters)
      w.done(Aborted("synchronous step " + std::to_string(kv.first) +
                     " was abandoned: the variable's shard shut down"));
  for (auto& w : ssp_waiters_)
    w.done(Aborted("stale-synchronous wait abandoned: the variable's shard shut down"));
}

ReplicaState::Bucket* ReplicaState::Admit(const std::string& where, int64_t num_required, int64_t step_tag,
                                          const UpdateOrigin& origin, int64_t waiter_id, int64_t run_step,
                                          SyncDone* done, AppliedOrigins* applied) {
  if (num_required < 1) {
    (*done)(InvalidArgument(where + ": synchronous replication needs num_required >= 1, got " +
                            std::to_string(num_required)));
    return nullptr;
  }
  if (num_required_ != 0 && num_required != num_required_) {
    (*done)(InvalidArgument(where + ": a worker asks for " + std::to_string(num_required) +
                            " gradients per step but others asked for " + std::to_string(num_required_)));
    return nullptr;
  }
  if (step_tag < 0) {
    (*done)(InvalidArgument(where + ": the step tag must be >= 0, got " + std::to_string(step_tag)));
    return nullptr;
  }
  // Workers wait for step t before step t + 1, so a tag far ahead is no
  // worker's: its bucket would hold gradients until that step, never.
  if (step_tag > step_ + kMaxStepsAhead) {
    (*done)(InvalidArgument(where + ": step tag " + std::to_string(step_tag) + " is more than " +
                            std::to_string(kMaxStepsAhead) + " steps ahead of the current step " +
                            std::to_string(step_)));
    return nullptr;
  }
  if (!origin.none()) {
    // A step run again: its gradient counted in step_tag when that was
    // applied (here, or at the holder this shard took over from).
    if (applied && applied->Seen(origin)) {
      (*done)(step_tag);
      return nullptr;
    }
    // Dropped already (stale, or its step full): dropped again, not counted twice.
    if (applied && applied->Seen(DroppedMark(origin))) {
      (*done)(int64_t{-1});
      return nullptr;
    }
    // In whichever bucket it waits: a run again that read its tag anew
    // must not count it in a second step.
    auto it = std::find_if(buckets_.begin(), buckets_.end(), [&](const auto& kv) {
      const std::vector<UpdateOrigin>& o = kv.second.origins;
      return std::find(o.begin(), o.end(), origin) != o.end();
    });
    if (it != buckets_.end()) {
      // Counted already: the new run waits in the old one's place.
      std::vector<Waiter>& ws = it->second.waiters;
      auto w = std::find_if(ws.begin(), ws.end(), [&](const Waiter& x) { return x.origin == origin; });
      SyncDone old;
      if (w != ws.end()) {
        old = std::move(w->done);
        ws.erase(w);
      }
      ws.push_back(Waiter{waiter_id, std::move(*done), origin, run_step});
      if (old)
        old(Aborted(where + ": synchronous step " + std::to_string(it->first) +
                    " is waited for by a run again of the same step"));
      return nullptr;
    }
  }
  num_required_ = num_required;
  // Stale (its step was applied without it), or a future step that already
  // has its N. Noted in the applied window (which replicas share), so that
  // a run again of its step, here or on a promoted backup, counts it once.
  auto drop = [&] {
    ++dropped_;
    if (applied && !origin.none()) applied->Record(DroppedMark(origin));
    (*done)(int64_t{-1});
    return nullptr;
  };
  if (step_tag < step_) return drop();
  Bucket& b = buckets_[step_tag];
  if (b.count >= num_required_) return drop();
  return &b;
}

void ReplicaState::OfferSync(const std::string& var, const Tensor& value, SyncApplyRequest req,
                             int64_t waiter_id, SyncDone done, const ApplyFn& apply, AppliedOrigins* applied) {
  const std::string where = "variable '" + var + "'";
  if (!value.valid())
    return done(FailedPrecondition(where + " is updated before it was initialised"));
  const Tensor& g = req.req.grad;
  if (g.dtype() != value.dtype() || g.shape() != value.shape())
    return done(InvalidArgument(where + " is " + DTypeName(value.dtype()) + ShapeString(value.shape()) +
                                " but the gradient is " + DTypeName(g.dtype()) + ShapeString(g.shape())));
  if (g.dtype() != DType::kFloat32 && g.dtype() != DType::kFloat64)
    return done(InvalidArgument(where + ": the gradient must be float32 or float64, got " +
                                DTypeName(g.dtype())));
  Bucket* b = Admit(where, req.num_required, req.step_tag, req.req.origin, waiter_id, req.run_step, &done, applied);
  if (!b) return;
  if (b->count > 0 && b->sparse)
    return done(InvalidArgument(where + " takes sparse and dense gradients in one synchronous step"));
  if (b->count == 0) {
    b->sum = g.Copy();  // never accumulate into the caller's buffer
    b->proto = req.req;
    b->proto.grad = Tensor();
    b->proto.origin = UpdateOrigin{};  // the step's update: its contributors' origins are recorded
  } else if (g.dtype() == DType::kFloat32) {
    b->sum.flat<float>() += g.flat<float>();
  } else {
    b->sum.flat<double>() += g.flat<double>();
  }
  Count(*b, waiter_id, std::move(done), req.req.origin, req.run_step);
  ApplyReady(var, &apply, nullptr, applied);
}

void ReplicaState::OfferSparseSync(const std::string& var, SparseSyncApplyRequest req, int64_t waiter_id,
                                   SyncDone done, const SparseApplyFn& apply, AppliedOrigins* applied) {
  const std::string where = "embedding shard '" + var + "'";
  const Tensor& ix = req.req.indices;
  const Tensor& vals = req.req.values;
  if (ix.dtype() != DType::kInt64 || ix.rank() != 1 || vals.dtype() != DType::kFloat32 || vals.rank() != 2 ||
      vals.dim(0) != ix.dim(0))
    return done(InvalidArgument(where + ": a sparse gradient is int64 rows [m] and float32 values [m, dim], got " +
                                DTypeName(ix.dtype()) + ShapeString(ix.shape()) + " and " +
                                DTypeName(vals.dtype()) + ShapeString(vals.shape())));
  Bucket* b = Admit(where, req.num_required, req.step_tag, req.req.origin, waiter_id, req.run_step, &done, applied);
  if (!b) return;
  if (b->count > 0 && !b->sparse)
    return done(InvalidArgument(where + " takes sparse and dense gradients in one synchronous step"));
  if (b->count > 0 && b->values[0].dim(1) != vals.dim(1))
    return done(InvalidArgument(where + ": a worker's rows are " + std::to_string(vals.dim(1)) +
                                " wide, the step's first were " + std::to_string(b->values[0].dim(1))));
  if (b->count == 0) {
    b->sparse = true;
    b->sparse_proto = req.req;
    b->sparse_proto.indices = Tensor();
    b->sparse_proto.values = Tensor();
    b->sparse_proto.origin = UpdateOrigin{};  // the step's update: its contributors' origins are recorded
  }
  // The latest step that looked the rows up (a hash shard's last-seen step).
  b->sparse_proto.step_id = std::max(b->sparse_proto.step_id, req.req.step_id);
  b->indices.push_back(std::move(req.req.indices));
  b->values.push_back(std::move(req.req.values));
  Count(*b, waiter_id, std::move(done), req.req.origin, req.run_step);
  ApplyReady(var, nullptr, &apply, applied);
}

void ReplicaState::Count(Bucket& b, int64_t waiter_id, SyncDone done, const UpdateOrigin& origin,
                         int64_t run_step) {
  ++b.count;
  if (!origin.none()) b.origins.push_back(origin);
  b.waiters.push_back(Waiter{waiter_id, std::move(done), origin, run_step});
}

namespace {

// The step's sparse update: every contributor's rows, their gradients
// scaled by 1 / count, as one request (duplicate rows are summed by the apply).
SparseApplyRequest MergeSparse(SparseApplyRequest proto, const std::vector<Tensor>& indices,
                               const std::vector<Tensor>& values, int64_t count) {
  int64_t m = 0;
  for (const Tensor& t : indices) m += t.dim(0);
  const int64_t dim = values.empty() ? 0 : values[0].dim(1);
  Tensor ix(DType::kInt64, {m});
  Tensor vs(DType::kFloat32, {m, dim});
  const float scale = 1.0f / static_cast<float>(count);
  int64_t at = 0;
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t n = indices[k].dim(0);
    std::copy_n(indices[k].data<int64_t>(), n, ix.data<int64_t>() + at);
    const float* src = values[k].data<float>();
    float* dst = vs.data<float>() + at * dim;
    for (int64_t i = 0; i < n * dim; ++i) dst[i] = src[i] * scale;
    at += n;
  }
  proto.indices = std::move(ix);
  proto.values = std::move(vs);
  proto.indices_unique = false;
  return proto;
}

}  // namespace

void ReplicaState::ApplyReady(const std::string& var, const ApplyFn* dense, const SparseApplyFn* sparse,
                              AppliedOrigins* applied) {
  for (;;) {
    auto it = buckets_.find(step_);
    if (it == buckets_.end() || it->second.count < num_required_) return;
    Bucket b = std::move(it->second);
    buckets_.erase(it);
    Status s;
    if (b.sparse) {
      s = sparse ? (*sparse)(MergeSparse(std::move(b.sparse_proto), b.indices, b.values, b.count))
                 : Internal("a sparse synchronous step of '" + var + "' completed by a dense gradient");
    } else {
      ApplyRequest r = std::move(b.proto);
      r.grad = std::move(b.sum);
      const double scale = 1.0 / static_cast<double>(b.count);
      if (r.grad.dtype() == DType::kFloat32) r.grad.flat<float>() = r.grad.flat<float>() * static_cast<float>(scale);
      else r.grad.flat<double>() = r.grad.flat<double>() * scale;
      s = dense ? (*dense)(r) : Internal("a dense synchronous step of '" + var + "' completed by a sparse gradient");
    }
    if (!s.ok()) {
      // The step's gradients cannot be applied: count them dropped and tell
      // every contributor; the step does not advance.
      dropped_ += b.count;
      s = s.WithPrefix("synchronous step " + std::to_string(step_) + " of variable '" + var + "'");
      for (auto& w : b.waiters) w.done(s);
      return;
    }
    if (applied)
      for (const UpdateOrigin& o : b.origins) applied->Record(o);
    const int64_t step = step_;
    accepted_ += b.count;
    ++step_;
    for (auto& w : b.waiters) w.done(step);
  }
}

void ReplicaState::SetCounters(const std::vector<int64_t>& c) {
  if (c.size() != kCounters || c[0] < 0) return;
  step_ = c[0];
  accepted_ = c[1];
  dropped_ = c[2];
  version_ = c[3];
  while (!buckets_.empty() && buckets_.begin()->first < step_) {
    Bucket b = std::move(buckets_.begin()->second);
    buckets_.erase(buckets_.begin());
    dropped_ += b.count;
    for (auto& w : b.waiters) w.done(-1);
  }
}

void ReplicaState::TimeoutWaiter(const std::string& var, int64_t waiter_id) {
  for (auto& kv : buckets_) {
    auto& ws = kv.second.waiters;
    for (size_t i = 0; i < ws.size(); ++i) {
      if (ws[i].id != waiter_id) continue;
      SyncDone done = std::move(ws[i].done);
      ws.erase(ws.begin() + static_cast<std::ptrdiff_t>(i));
      done(Unavailable("variable '" + var + "': synchronous step " + std::to_string(kv.first) +
                       " was not applied in time (deadline exceeded; " +
                       std::to_string(kv.second.count) + " of " + std::to_string(num_required_) +
                       " gradients arrived); this gradient still counts if the step completes"));
      return;
    }
  }
}

namespace {

// Removes the waiters of run run_step from ws: their callbacks.
template <typename W>
std::vector<decltype(W::done)> TakeRun(std::vector<W>& ws, int64_t run_step) {
  std::vector<decltype(W::done)> out;
  for (auto it = ws.begin(); it != ws.end();) {
    if (it->run_step != run_step) {
      ++it;
      continue;
    }
    out.push_back(std::move(it->done));
    it = ws.erase(it);
  }
  return out;
}

}  // namespace

void ReplicaState::AbortWaits(const std::string& var, int64_t run_step, const Status& why) {
  std::vector<SyncDone> answer;
  for (auto& kv : buckets_)
    for (auto& done : TakeRun(kv.second.waiters, run_step)) answer.push_back(std::move(done));
  const Status s = why.WithPrefix("variable '" + var + "': the step waiting for its synchronous step was aborted "
                                  "(its gradient still counts)");
  for (auto& done : answer) done(s);
  for (auto& done : TakeRun(ssp_waiters_, run_step))
    done(why.WithPrefix("variable '" + var + "': the step waiting at the stale-synchronous barrier was aborted"));
}

void ReplicaState::AbortSync(const std::string& var) {
  auto buckets = std::move(buckets_);
  buckets_.clear();
  for (auto& kv : buckets) {
    dropped_ += kv.second.count;
    for (auto& w : kv.second.waiters)
      w.done(Aborted("variable '" + var + "': synchronous step " + std::to_string(kv.first) +
                     " was aborted; its " + std::to_string(kv.second.count) +
                     " gradient(s) were dropped"));
  }
}

void ReplicaState::RecordUpdate(int64_t read_version) {
  if (read_version >= 0) {
    const int64_t s = std::max<int64_t>(0, version_ - read_version);
    ++tracked_;
    staleness_sum_ += s;
    staleness_max_ = std::max(staleness_max_, s);
  }
  ++version_;
}

void ReplicaState::StaleSyncWait(const std::string& var, int64_t worker, int64_t clock,
                                 int64_t num_workers, int64_t staleness, int64_t run_step,
                                 std::function<void(Status)> done) {
  const std::string where = "variable '" + var + "'";
  if (num_workers < 1 || num_workers > kMaxSspWorkers)
    return done(InvalidArgument(where + ": stale-synchronous barrier needs 1 <= num_workers <= " +
                                std::to_string(kMaxSspWorkers) + ", got " + std::to_string(num_workers)));
  if (!clocks_.empty() && static_cast<int64_t>(clocks_.size()) != num_workers)
    return done(InvalidArgument(where + ": stale-synchronous barrier has " +
                                std::to_string(clocks_.size()) + " workers, a worker says " +
                                std::to_string(num_workers)));
  if (worker < 0 || worker >= num_workers)
    return done(InvalidArgument(where + ": worker " + std::to_string(worker) + " is out of range [0, " +
                                std::to_string(num_workers) + ")"));
  if (staleness < 0)
    return done(InvalidArgument(where + ": staleness must be >= 0, got " + std::to_string(staleness)));
  if (clocks_.empty()) {
    clocks_.assign(static_cast<size_t>(num_workers), 0);
    clocks_changed_ = true;
  }
  if (clock > clocks_[worker]) {
    clocks_[worker] = clock;
    clocks_changed_ = true;
  }
  ssp_waiters_.push_back(SspWaiter{clock, staleness, run_step, std::move(done)});
  ReleaseSsp();
}

bool ReplicaState::TakeClocksChanged() {
  const bool changed = clocks_changed_;
  clocks_changed_ = false;
  return changed;
}

Status ReplicaState::CheckClocks(const std::string& var, const std::vector<int64_t>& clocks) const {
  if (clocks.size() > static_cast<size_t>(kMaxSspWorkers) || (!clocks_.empty() && clocks.size() != clocks_.size()))
    return InvalidArgument("variable '" + var + "': " + std::to_string(clocks.size()) +
                           " stale-synchronous clocks for a barrier of " +
                           (clocks_.empty() ? "at most " + std::to_string(kMaxSspWorkers)
                                            : std::to_string(clocks_.size())) + " workers");
  return Status::OK();
}

Status ReplicaState::SetClocks(const std::string& var, const std::vector<int64_t>& clocks) {
  SF_RETURN_IF_ERROR(CheckClocks(var, clocks));
  if (clocks_.empty()) clocks_.assign(clocks.size(), 0);
  for (size_t i = 0; i < clocks.size(); ++i) clocks_[i] = std::max(clocks_[i], clocks[i]);
  if (!clocks_.empty()) ReleaseSsp();
  return Status::OK();
}

void ReplicaState::ReleaseSsp() {
  const int64_t slowest = *std::min_element(clocks_.begin(), clocks_.end());
  std::vector<SspWaiter> ready, waiting;
  for (auto& w : ssp_waiters_) (w.clock - slowest <= w.staleness ? ready : waiting).push_back(std::move(w));
  ssp_waiters_ = std::move(waiting);
  for (auto& w : ready) w.done(Status::OK());
}

Tensor ReplicaState::SyncStats() const {
  Tensor t(DType::kInt64, {4});
  int64_t pending = 0;
  for (const auto& kv : buckets_) pending += kv.second.count;
  t.data<int64_t>()[0] = step_;
  t.data<int64_t>()[1] = accepted_;
  t.data<int64_t>()[2] = dropped_;
  t.data<int64_t>()[3] = pending;
  return t;
}

Tensor ReplicaState::StalenessStats() const {
  Tensor t(DType::kFloat64, {3});
  t.data<double>()[0] = static_cast<double>(tracked_);
  t.data<double>()[1] = tracked_ ? static_cast<double>(staleness_sum_) / tracked_ : 0.0;
  t.data<double>()[2] = static_cast<double>(staleness_max_);
  return t;
}

}  // namespace sf
