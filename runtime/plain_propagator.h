// PlainPropagator: readiness for partitions without control flow. Every
// value is live and every op runs once per step, so a step is a flat value
// array and one atomic pending count per op: no lock, no map lookup and no
// dead-value or frame bookkeeping per op. The thread that finishes an op
// keeps one newly ready op and hands the others to the pool. See
// runtime/executor_core.h for the interface.
// Thread-safety: Propagate and ReleaseInputs run on many compute threads at
// once (atomics only); the rest runs before the first op or after the last.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "runtime/executor_core.h"

namespace sf {
namespace runtime {

// Built once per partition.
struct PlainPlan {
  std::vector<int> roots;      // nodes with no pending inputs
  std::vector<int> slot_uses;  // per slot, data edges reading it; 0 = keep (fetched)
  static PlainPlan Build(const KernelPlan& kp) {
    PlainPlan p;
    for (int i = 0; i < static_cast<int>(kp.nodes.size()); ++i)
      if (kp.nodes[i].initial_pending == 0) p.roots.push_back(i);
    p.slot_uses.assign(kp.num_slots, 0);
    for (int slot : kp.input_slots) ++p.slot_uses[slot];
    for (int slot : kp.fetch_slots) p.slot_uses[slot] = 0;
    return p;
  }
};

class PlainPropagator {
 public:
  using Plan = PlainPlan;
  using Task = int;    // the node
  struct OutBuf {};    // outputs are written in place, into the step's values
  struct Local {
    int next = -1;
  };

  PlainPropagator(const KernelPlan& kp, const PlainPlan& p, StepBase*, std::vector<Tensor> feeds)
      : kp_(kp), p_(p) {
    const int n = static_cast<int>(kp.nodes.size());
    values_.resize(kp.num_slots);
    for (size_t i = 0; i < kp.feed_slots.size(); ++i) values_[kp.feed_slots[i]] = std::move(feeds[i]);
    pending_.reset(new std::atomic<int>[n]);
    for (int i = 0; i < n; ++i) pending_[i].store(kp.nodes[i].initial_pending, std::memory_order_relaxed);
    uses_.reset(new std::atomic<int>[kp.num_slots]);
    for (int i = 0; i < kp.num_slots; ++i) uses_[i].store(p.slot_uses[i], std::memory_order_relaxed);
    remaining_.store(n, std::memory_order_release);
  }

  static int Node(int t) { return t; }
  Tensor* PrepareOutputs(int t, OutBuf*) { return values_.data() + kp_.nodes[t].output_begin; }
  Tensor* Outputs(int t, OutBuf*) { return values_.data() + kp_.nodes[t].output_begin; }
  // A fed node neither waits nor runs: its values are in place.
  bool ShouldRun(int t, Tensor*) const { return kp_.nodes[t].kernel != nullptr; }
  void Inputs(int t, const Tensor** in) {
    const NodeItem& it = kp_.nodes[t];
    const int* slots = kp_.input_slots.data() + it.input_begin;
    for (int i = 0; i < it.num_inputs; ++i) in[i] = &values_[slots[i]];
  }
  static StepFrame FrameOf(int) { return StepFrame(); }

  // Drops the inputs of t that no later op of the step reads, so a step
  // holds only the tensors still needed.
  void ReleaseInputs(int t) {
    const NodeItem& it = kp_.nodes[t];
    const int* slots = kp_.input_slots.data() + it.input_begin;
    for (int i = 0; i < it.num_inputs; ++i) {
      const int slot = slots[i];
      const int u = p_.slot_uses[slot];
      // A slot read once needs no counter: this op was its only reader.
      if (u == 1 || (u > 1 && uses_[slot].fetch_sub(1, std::memory_order_acq_rel) == 1))
        values_[slot] = Tensor();
    }
  }

  // Marks t complete: keeps one newly ready consumer in *local and hands the
  // others to sched. True after the step's last op.
  template <typename Sched>
  bool Propagate(int t, OutBuf*, Local* local, Sched&& sched) {
    const NodeItem& it = kp_.nodes[t];
    for (int e = it.edge_begin; e < it.edge_end; ++e) {
      const int k = kp_.edges[e].dst;
      // An op with one input edge is ready now: no counter to share.
      if (kp_.nodes[k].initial_pending == 1 || pending_[k].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        if (local->next < 0) local->next = k;
        else sched(k);
      }
    }
    return remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1;
  }

  static bool Pop(Local* l, int* t) {
    if (l->next < 0) return false;
    *t = l->next;
    l->next = -1;
    return true;
  }

  // Roots are dealt to one pool task per compute thread: a task per root
  // costs a pool round trip per constant.
  template <typename Sched, typename RunInline>
  bool Start(Sched&&, RunInline&& run) {
    if (kp_.nodes.empty()) return false;
    const std::vector<int>* roots = &p_.roots;  // the plan's: outlives the step
    const int count = static_cast<int>(roots->size());
    const int tasks = std::max(1, std::min(count, kp_.env.pool->num_threads()));
    for (int t = 0; t < tasks; ++t) {
      kp_.env.pool->Schedule([run, roots, t, tasks, count] {
        // The step may be gone after the last run: nothing of it is touched afterwards.
        for (int i = t; i < count; i += tasks) run((*roots)[i]);
      });
    }
    return true;
  }

  void Finish(Status* st, std::vector<Tensor>* out) {
    if (!st->ok()) return;
    out->reserve(kp_.fetch_slots.size());
    for (int slot : kp_.fetch_slots) out->push_back(values_[slot]);
  }

 private:
  const KernelPlan& kp_;
  const PlainPlan& p_;
  std::vector<Tensor> values_;
  std::unique_ptr<std::atomic<int>[]> pending_;
  std::unique_ptr<std::atomic<int>[]> uses_;  // per slot, reads still to come
  std::atomic<int> remaining_{0};
};

}  // namespace runtime
}  // namespace sf
