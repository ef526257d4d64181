#include "kernels/replica_state.h"

#include <algorithm>
#include <limits>

namespace sf {

// ---- ReplicaState -----------------------------------------------------------

ReplicaState::~ReplicaState() {
  for (auto& kv : buckets_)
    for (auto& w : kv.second.waiters)
      w.done(Aborted("synchronous step " + std::to_string(kv.first) +
                     " was abandoned: the variable's shard shut down"));
  for (auto& w : ssp_waiters_)
    w.done(Aborted("stale-synchronous wait abandoned: the variable's shard shut down"));
}

void ReplicaState::OfferSync(const std::string& var, const Tensor& value, SyncApplyRequest req,
                             int64_t waiter_id, SyncDone done, const ApplyFn& apply) {
  const std::string where = "variable '" + var + "'";
  if (req.num_required < 1)
    return done(InvalidArgument(where + ": synchronous replication needs num_required >= 1, got " +
                                std::to_string(req.num_required)));
  if (num_required_ != 0 && req.num_required != num_required_)
    return done(InvalidArgument(where + ": a worker asks for " + std::to_string(req.num_required) +
                                " gradients per step but others asked for " +
                                std::to_string(num_required_)));
  if (!value.valid())
    return done(FailedPrecondition(where + " is updated before it was initialised"));
  const Tensor& g = req.req.grad;
  if (g.dtype() != value.dtype() || g.shape() != value.shape())
    return done(InvalidArgument(where + " is " + DTypeName(value.dtype()) + ShapeString(value.shape()) +
                                " but the gradient is " + DTypeName(g.dtype()) + ShapeString(g.shape())));
  if (g.dtype() != DType::kFloat32 && g.dtype() != DType::kFloat64)
    return done(InvalidArgument(where + ": the gradient must be float32 or float64, got " +
                                DTypeName(g.dtype())));
  if (req.step_tag < 0)
    return done(InvalidArgument(where + ": the step tag must be >= 0, got " +
                                std::to_string(req.step_tag)));
  num_required_ = req.num_required;
  if (req.step_tag < step_) {  // stale: its step was applied without it
    ++dropped_;
    return done(int64_t{-1});
  }
  Bucket& b = buckets_[req.step_tag];
  if (b.count >= num_required_) {  // a future step that already has its N
    ++dropped_;
    return done(int64_t{-1});
  }
  if (b.count == 0) {
    b.sum = g.Copy();  // never accumulate into the caller's buffer
    b.proto = req.req;
    b.proto.grad = Tensor();
  } else if (g.dtype() == DType::kFloat32) {
    b.sum.flat<float>() += g.flat<float>();
  } else {
    b.sum.flat<double>() += g.flat<double>();
  }
  ++b.count;
  b.waiters.push_back(Waiter{waiter_id, std::move(done)});
  ApplyReady(var, apply);
}

void ReplicaState::ApplyReady(const std::string& var, const ApplyFn& apply) {
  for (;;) {
    auto it = buckets_.find(step_);
    if (it == buckets_.end() || it->second.count < num_required_) return;
    Bucket b = std::move(it->second);
    buckets_.erase(it);
    ApplyRequest r = std::move(b.proto);
    r.grad = std::move(b.sum);
    const double scale = 1.0 / static_cast<double>(b.count);
    if (r.grad.dtype() == DType::kFloat32) r.grad.flat<float>() = r.grad.flat<float>() * static_cast<float>(scale);
    else r.grad.flat<double>() = r.grad.flat<double>() * scale;
    Status s = apply(r);
    if (!s.ok()) {
      // The step's gradients cannot be applied: count them dropped and tell
      // every contributor; the step does not advance.
      dropped_ += b.count;
      s = s.WithPrefix("synchronous step " + std::to_string(step_) + " of variable '" + var + "'");
      for (auto& w : b.waiters) w.done(s);
      return;
    }
    const int64_t applied = step_;
    accepted_ += b.count;
    ++step_;
    for (auto& w : b.waiters) w.done(applied);
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
                                 int64_t num_workers, int64_t staleness,
                                 std::function<void(Status)> done) {
  const std::string where = "variable '" + var + "'";
  if (num_workers < 1)
    return done(InvalidArgument(where + ": stale-synchronous barrier needs num_workers >= 1, got " +
                                std::to_string(num_workers)));
  if (!clocks_.empty() && static_cast<int64_t>(clocks_.size()) != num_workers)
    return done(InvalidArgument(where + ": stale-synchronous barrier has " +
                                std::to_string(clocks_.size()) + " workers, a worker says " +
                                std::to_string(num_workers)));
  if (worker < 0 || worker >= num_workers)
    return done(InvalidArgument(where + ": worker " + std::to_string(worker) + " is out of range [0, " +
                                std::to_string(num_workers) + ")"));
  if (staleness < 0)
    return done(InvalidArgument(where + ": staleness must be >= 0, got " + std::to_string(staleness)));
  if (clocks_.empty()) clocks_.assign(static_cast<size_t>(num_workers), 0);
  clocks_[worker] = std::max(clocks_[worker], clock);
  ssp_waiters_.push_back(SspWaiter{clock, staleness, std::move(done)});
  ReleaseSsp();
}

void ReplicaState::ReleaseSsp() {
  const int64_t slowest = *std::min_element(clocks_.begin(), clocks_.end());
  std::vector<SspWaiter> ready, waiting;
  for (auto& w : ssp_waiters_) (w.clock - slowest <= w.staleness ? ready : waiting).push_back(std::move(w));
  ssp_waiters_ = std::move(waiting);
  for (auto& w : ready) w.done(Status::OK());
}

Tensor ReplicaState::SyncStats() const {
  Tensor t(DType::kInt64, {3});
  t.data<int64_t>()[0] = step_;
  t.data<int64_t>()[1] = accepted_;
  t.data<int64_t>()[2] = dropped_;
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
