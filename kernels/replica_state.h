// ReplicaState: the replication bookkeeping kept beside one variable (in its
// variable shard actor): synchronous aggregation with backup workers, the
// version counter and staleness of asynchronous updates, and the
// stale-synchronous-parallel (SSP) barrier.
//
// Synchronous steps: gradients are bucketed by their step tag. A tag below
// the current step is stale: counted as dropped and answered -1 at once. A
// bucket that reaches num_required is averaged and applied once; the step
// advances and every contributor is answered with the step. Later buckets
// that are already full are applied in turn. A gradient arriving at a bucket
// that already holds its N is dropped like a stale one: no gradient is ever
// lost without being counted. A tag more than kMaxStepsAhead past the
// current step is refused (InvalidArgument): no bucket waits for a step that
// no worker can reach.
//
// Waiting is a stored callback, answered by a later call (another worker's
// gradient, a timeout, an abort, or the destructor): no thread ever sleeps.
// Thread-safety: none; its owner (one actor) serializes every call.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/replication_service.h"

namespace sf {

class ReplicaState {
 public:
  // Applies an optimizer update (the averaged gradient) to the variable and
  // its slots; the shard's ordinary apply path.
  using ApplyFn = std::function<Status(const ApplyRequest&)>;
  // Applies a sparse optimizer update (an embedding shard's ordinary path).
  using SparseApplyFn = std::function<Status(const SparseApplyRequest&)>;
  using SyncDone = std::function<void(Result<int64_t>)>;

  ReplicaState() = default;
  ReplicaState(const ReplicaState&) = delete;
  ReplicaState& operator=(const ReplicaState&) = delete;
  // Fails every waiting worker with Aborted (the shard is going away).
  ~ReplicaState();

  // One worker's contribution (see SyncApplyRequest). `var` names the
  // variable in errors; `value` is its current value (dtype and shape
  // checks). waiter_id identifies the wait for TimeoutWaiter.
  void OfferSync(const std::string& var, const Tensor& value, SyncApplyRequest req,
                 int64_t waiter_id, SyncDone done, const ApplyFn& apply);
  // One worker's sparse contribution (see SparseSyncApplyRequest); `var`
  // names the shard in errors. A shard takes dense or sparse gradients, not both.
  void OfferSparseSync(const std::string& var, SparseSyncApplyRequest req, int64_t waiter_id, SyncDone done,
                       const SparseApplyFn& apply);
  // Answers waiter_id (if still waiting) with Unavailable; its gradient stays
  // in its bucket and counts when the step is applied.
  void TimeoutWaiter(const std::string& var, int64_t waiter_id);
  // Fails every waiter with Aborted and drops (counts) the pending gradients.
  void AbortSync(const std::string& var);

  // Records one successful optimizer update: advances the version and, when
  // read_version >= 0, records its staleness.
  void RecordUpdate(int64_t read_version);
  int64_t version() const { return version_; }

  // SSP barrier (see ReplicationService::StaleSyncWait).
  void StaleSyncWait(const std::string& var, int64_t worker, int64_t clock, int64_t num_workers,
                     int64_t staleness, std::function<void(Status)> done);

  // int64 [3]: applied steps, accepted gradients, dropped gradients.
  Tensor SyncStats() const;

  // What a backup keeps in step with its holder (kCounters values: the
  // synchronous step, accepted and dropped gradients, the version), so the
  // step and version go on where the holder left them after a failover.
  static constexpr size_t kCounters = 4;
  std::vector<int64_t> Counters() const { return {step_, accepted_, dropped_, version_}; }
  // Takes a holder's Counters (a backup has no waiting worker; a bucket
  // below the new step would never be applied: its waiters are answered as
  // stale, its gradients counted as dropped).
  void SetCounters(const std::vector<int64_t>& counters);
  // float64 [3]: tracked updates, mean staleness, max staleness.
  Tensor StalenessStats() const;

 private:
  struct Waiter {
    int64_t id;
    SyncDone done;
  };
  struct Bucket {
    Tensor sum;  // of the gradients so far
    int64_t count = 0;
    ApplyRequest proto;  // optimizer, ids, hyperparameters of the first contributor
    std::vector<Waiter> waiters;
    // Sparse: every contributor's rows and gradients, kept apart until applied.
    bool sparse = false;
    SparseApplyRequest sparse_proto;
    std::vector<Tensor> indices, values;
  };
  struct SspWaiter {
    int64_t clock, staleness;
    std::function<void(Status)> done;
  };
  // Applies every full bucket at the current step, in order (dense or
  // sparse: the function for the bucket's kind is set).
  void ApplyReady(const std::string& var, const ApplyFn* dense, const SparseApplyFn* sparse);
  // Checks N and the tag and finds the contribution's bucket; null (and done
  // answered) when it does not count.
  Bucket* Admit(const std::string& where, int64_t num_required, int64_t step_tag, SyncDone* done);
  void ReleaseSsp();

  // How far ahead of the current step a tag may be (InvalidArgument beyond).
  static constexpr int64_t kMaxStepsAhead = 1024;
  // Workers of an SSP barrier at most (each has a clock here).
  static constexpr int64_t kMaxSspWorkers = 65536;
  int64_t step_ = 0, accepted_ = 0, dropped_ = 0;
  int64_t num_required_ = 0;  // 0 until the first contribution
  std::map<int64_t, Bucket> buckets_;  // by step tag, all >= step_
  int64_t version_ = 0;
  int64_t tracked_ = 0, staleness_sum_ = 0, staleness_max_ = 0;
  std::vector<int64_t> clocks_;  // SSP: per worker, the clock it last started
  std::vector<SspWaiter> ssp_waiters_;
};

}  // namespace sf
