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
// A contribution carries its update's origin (kernels/update_origin.h) when
// a cluster session may run its step again after a failure: a contribution
// whose origin already waits in its bucket is not counted again (its new
// waiter takes the old one's place), and one whose step was applied (its
// origin is in the shard's applied window, which the step's contributors
// all join, and which replicas share) is answered with its step at once;
// one that was dropped (the window notes that too) is dropped again
// without being counted. So a step run again, on the same holder or on a
// promoted backup, counts each worker's gradient once.
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
#include "kernels/update_origin.h"

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
  // checks). waiter_id identifies the wait for TimeoutWaiter. `applied`
  // (null: origins are not tracked) is the shard's applied window: the
  // step's update is applied without an origin of its own, and every
  // contributor's origin is recorded there with it.
  void OfferSync(const std::string& var, const Tensor& value, SyncApplyRequest req,
                 int64_t waiter_id, SyncDone done, const ApplyFn& apply, AppliedOrigins* applied = nullptr);
  // One worker's sparse contribution (see SparseSyncApplyRequest); `var`
  // names the shard in errors. A shard takes dense or sparse gradients, not both.
  void OfferSparseSync(const std::string& var, SparseSyncApplyRequest req, int64_t waiter_id, SyncDone done,
                       const SparseApplyFn& apply, AppliedOrigins* applied = nullptr);
  // Answers waiter_id (if still waiting) with Unavailable; its gradient stays
  // in its bucket and counts when the step is applied (a run again of its
  // step waits for it without counting it twice).
  void TimeoutWaiter(const std::string& var, int64_t waiter_id);
  // Fails every waiter with Aborted and drops (counts) the pending gradients.
  void AbortSync(const std::string& var);
  // Answers the waiters of run run_step (a step that was aborted: one of its
  // partitions failed) with why, at the SSP barrier too; their gradients stay
  // in their buckets and count when their steps are applied (a run again of
  // the step waits for them without counting them twice), and their clocks
  // stay started.
  void AbortWaits(const std::string& var, int64_t run_step, const Status& why);

  // Records one successful optimizer update: advances the version and, when
  // read_version >= 0, records its staleness.
  void RecordUpdate(int64_t read_version);
  int64_t version() const { return version_; }

  // SSP barrier (see ReplicationService::StaleSyncWait).
  void StaleSyncWait(const std::string& var, int64_t worker, int64_t clock, int64_t num_workers,
                     int64_t staleness, int64_t run_step, std::function<void(Status)> done);

  // int64 [4]: applied steps, accepted gradients, dropped gradients, and
  // gradients waiting for their step.
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

  // The SSP barrier's clocks (the clock each worker last started; empty
  // before the first wait), which a backup keeps in step with its holder, so
  // that a worker that finished (it started a huge clock) does not hold the
  // others at a promoted backup.
  const std::vector<int64_t>& Clocks() const { return clocks_; }
  // Whether a clock advanced since the last call (a round must carry them).
  bool TakeClocksChanged();
  // Takes a holder's clocks (each only ever advances); InvalidArgument
  // naming var for more than kMaxSspWorkers or a count that differs.
  Status SetClocks(const std::string& var, const std::vector<int64_t>& clocks);
  // SetClocks's check alone, changing nothing: OK when it would take clocks.
  Status CheckClocks(const std::string& var, const std::vector<int64_t>& clocks) const;

 private:
  struct Waiter {
    int64_t id;
    SyncDone done;
    UpdateOrigin origin;  // its contribution's (none: untracked)
    int64_t run_step = 0;  // the run waiting (AbortWaits)
  };
  struct Bucket {
    Tensor sum;  // of the gradients so far
    int64_t count = 0;
    std::vector<UpdateOrigin> origins;  // of the counted contributions that carry one
    ApplyRequest proto;  // optimizer, ids, hyperparameters of the first contributor
    std::vector<Waiter> waiters;
    // Sparse: every contributor's rows and gradients, kept apart until applied.
    bool sparse = false;
    SparseApplyRequest sparse_proto;
    std::vector<Tensor> indices, values;
  };
  struct SspWaiter {
    int64_t clock, staleness;
    int64_t run_step;
    std::function<void(Status)> done;
  };
  // Applies every full bucket at the current step, in order (dense or
  // sparse: the function for the bucket's kind is set).
  void ApplyReady(const std::string& var, const ApplyFn* dense, const SparseApplyFn* sparse,
                  AppliedOrigins* applied);
  // Checks N and the tag and finds the contribution's bucket; null (and done
  // answered) when it does not count: bad, stale, its step full, or a
  // contribution made before (answered with its step once applied, else
  // waiting in the old one's place).
  Bucket* Admit(const std::string& where, int64_t num_required, int64_t step_tag, const UpdateOrigin& origin,
                int64_t waiter_id, int64_t run_step, SyncDone* done, AppliedOrigins* applied);
  void ReleaseSsp();
  // Counts a contribution in b (its gradient is already in b) and keeps its waiter.
  static void Count(Bucket& b, int64_t waiter_id, SyncDone done, const UpdateOrigin& origin, int64_t run_step);

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
  bool clocks_changed_ = false;
  std::vector<SspWaiter> ssp_waiters_;
};

}  // namespace sf
