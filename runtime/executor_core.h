// The executor core shared by both propagators, after TensorFlow's
// ExecutorState<PropagatorState>: the plan built once per partition
// (KernelPlan: topological order, input slots, out-edges, one kernel per
// node) and the per-step state (ExecutorState<P>) that runs a kernel, checks
// its outputs, fails the step (first error wins, the rendezvous is aborted)
// and finishes it. What "ready" means is the propagator's: PlainPropagator
// (atomic pending counts, no dead values or frames) or FramePropagator
// (frames, iterations, dead values, one step mutex). The core is a template
// over the propagator, so the plain path pays no virtual call per op.
//
// A propagator P provides:
//   struct Plan;                   built once per partition
//   using Task;                    one ready op (plain: the node; frame: node, frame, iteration)
//   struct OutBuf;                 where a running op's outputs live (plain: nowhere, in place)
//   struct Local;                  the ops this thread runs next, inline
//   P(const KernelPlan&, const Plan&, StepBase*, std::vector<Tensor> feeds)
//   static int Node(const Task&)
//   Tensor* PrepareOutputs(const Task&, OutBuf*)  output storage, all unset
//   Tensor* Outputs(const Task&, OutBuf*)         the same storage, as the kernel left it
//   bool ShouldRun(const Task&, Tensor* outs)     false: skip the kernel (dead; fed: outs filled)
//   void Inputs(const Task&, const Tensor** in)
//   StepFrame FrameOf(const Task&)
//   void ReleaseInputs(const Task&)             after the op ran or was skipped
//   bool Propagate(const Task&, OutBuf*, Local*, Sched)  true: the step's last op is done;
//                                                        Sched(task) hands a ready op to the pool
//   static bool Pop(Local*, Task*)              touches only *Local (the step may be gone)
//   bool Start(Sched, RunInline)                hands the first ops to the pool; false if none
//   void Finish(Status*, std::vector<Tensor>* fetches)
// Thread-safety: a step's ops run on many compute threads; the propagator
// guards its own bookkeeping (atomics or its step mutex).
#pragma once

#include <new>
#include <optional>
#include <stdexcept>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/compute_pool.h"
#include "kernels/queue_service.h"
#include "kernels/rendezvous_service.h"
#include "kernels/step_stacks.h"
#include "kernels/step_trace.h"
#include "runtime/executor.h"

namespace sf {
namespace runtime {

// One node of the plan, in topological order.
struct NodeItem {
  std::unique_ptr<OpKernel> kernel;  // null for a fed node
  bool is_async = false;
  bool outputs_may_be_unset = false;  // control-flow kernels leave dead outputs unset
  bool error_as_is = false;           // _Recv: another partition's error, reported as is
  bool cheap = false;                 // may run under InlineCheapOps when its inputs are small
  int num_inputs = 0, num_outputs = 0;
  int input_begin = 0;   // into KernelPlan::input_slots
  int output_begin = 0;  // the value slot of output 0
  int edge_begin = 0, edge_end = 0;  // into KernelPlan::edges
  int initial_pending = 0;           // data and control inputs
  std::string where;                 // "node 'N' (op OP)"
};

// What a traced step records of a node; apart from NodeItem, so the plan
// an untraced step walks stays as compact as before.
struct NodeTraceInfo {
  std::string name, op;
  const char* category = "op";  // "op", "send", "recv", "variable", "embedding", "queue"
};

struct PlanEdge {
  int dst;
  int src_output;
  int dst_input;  // -1: a control edge
};

// What is built once per partition, whatever the propagator.
struct KernelPlan {
  std::vector<NodeItem> nodes;
  std::vector<NodeTraceInfo> trace_info;  // per node
  std::vector<int> input_slots;       // per node, the value slot of each input
  std::vector<PlanEdge> edges;        // per node, its out-edges (data, then control)
  std::vector<DType> output_dtypes;   // per value slot, the declared dtype
  std::vector<int> feed_slots, fetch_slots;
  int num_slots = 0;
  ExecutorEnv env;  // env.kernels is set; env.rendezvous is aborted with a failing step
};

// The frame an op runs in, for its context.
struct StepFrame {
  const std::string* key = nullptr;  // null: the root frame ""
  int64_t iteration = 0;
  StepStacks* stacks = nullptr;      // null outside a control-flow step
};

// The one place an OpKernelContext is built.
inline OpKernelContext MakeContext(const KernelPlan& plan, int64_t step_id, const Tensor* const* inputs,
                                   int num_inputs, Tensor* outputs, int num_outputs, const StepFrame& f) {
  const ExecutorEnv& env = plan.env;
  OpKernelContext ctx(inputs, num_inputs, outputs, num_outputs, env.pool, &env, step_id);
  if (f.key) ctx.set_frame(f.key, f.iteration);
  if (f.stacks) ctx.set_step_stacks(f.stacks);
  return ctx;
}

// Runs a kernel's body under the env's allocation limit; what it throws
// becomes a status (ResourceExhausted for an allocation, Internal for
// anything else) instead of ending the process.
template <typename Fn>
Status Guarded(const KernelPlan& plan, Fn&& fn) {
  std::optional<AllocationLimitScope> limit;  // none: the process's, at no cost per op
  if (plan.env.max_tensor_bytes > 0) limit.emplace(plan.env.max_tensor_bytes);
  try {
    fn();
  } catch (const std::bad_alloc& e) {
    return ResourceExhausted(std::string("cannot allocate: ") + e.what());
  } catch (const std::length_error& e) {
    return ResourceExhausted(std::string("cannot allocate: ") + e.what());
  } catch (const std::exception& e) {
    return Internal(std::string("the kernel threw: ") + e.what());
  }
  return Status::OK();
}

// Checks the outputs of a kernel that ran: each set with its declared dtype
// (unset allowed where the node may leave dead outputs).
Status CheckOutputsSlow(const KernelPlan& plan, const NodeItem& item, const Tensor* outs);
inline bool OutputsOk(const KernelPlan& plan, const NodeItem& item, const Tensor* outs) {
  const DType* declared = plan.output_dtypes.data() + item.output_begin;
  for (int i = 0; i < item.num_outputs; ++i) {
    if (outs[i].dtype() != declared[i] && !(item.outputs_may_be_unset && !outs[i].valid())) return false;
  }
  return true;
}

// What every step has, whatever its propagator: its id, its first error and
// the caller's callback.
class StepBase {
 public:
  StepBase(const KernelPlan& plan, int64_t id, Executor::DoneFn done)
      : plan_(plan), id_(id), done_(std::move(done)) {}
  int64_t id() const { return id_; }
  // Set once the step has an error: ops not yet run are skipped.
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  // Records st when it is the step's first error and aborts the step's
  // transfers in every partition. May be called with the propagator's step
  // mutex held (it takes only its own lock, then calls the rendezvous).
  void Fail(const Status& st) {
    bool first;
    {
      std::lock_guard<std::mutex> l(mu_);
      first = status_.ok();
      if (first) status_ = st;
      failed_.store(true, std::memory_order_relaxed);
    }
    if (first && plan_.env.rendezvous) plan_.env.rendezvous->Abort(id_, st);
    // The step's waits on queues end too: a dequeue of a failed step would
    // otherwise hold it open and take an element a later step enqueues.
    if (first && plan_.env.queues) plan_.env.queues->CancelStep(id_, st);
  }

 protected:
  Status status() {
    std::lock_guard<std::mutex> l(mu_);
    return status_;
  }

  const KernelPlan& plan_;
  const int64_t id_;
  Executor::DoneFn done_;

 private:
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  Status status_;  // GUARDED_BY(mu_)
};

// One step of one partition: created by Run, deleted by Finish.
template <typename P>
class ExecutorState : public StepBase {
 public:
  using Task = typename P::Task;

  static void Run(const KernelPlan& plan, const typename P::Plan& pplan, int64_t step_id,
                  std::vector<Tensor> feeds, Executor::DoneFn done, StepTrace* trace,
                  std::atomic<uint64_t>* progress) {
    auto* s = new ExecutorState(plan, pplan, step_id, std::move(feeds), std::move(done));
    s->trace_ = trace;
    s->progress_ = progress;
    // The caller is an actor thread, which must stay free: ops start on the pool.
    if (!s->prop_.Start([s](const Task& t) { s->Schedule(t); }, [s](const Task& t) { s->Process(t); }))
      s->Finish();
  }

 private:
  ExecutorState(const KernelPlan& plan, const typename P::Plan& pplan, int64_t step_id,
                std::vector<Tensor> feeds, Executor::DoneFn done)
      : StepBase(plan, step_id, std::move(done)), prop_(plan, pplan, this, std::move(feeds)) {}

  void Schedule(const Task& t) {
    plan_.env.pool->Schedule([this, t] { Process(t); });
  }

  // Runs t, then the ops the propagator keeps on this thread, until none is
  // left or an async kernel takes over. The state may be gone on return.
  void Process(Task t) {
    typename P::Local local;
    // The one branch on tracing, for t and the ops that follow it on this
    // thread: a step without a trace runs the loop it ran before.
    if (trace_) Loop<true>(t, &local);
    else Loop<false>(t, &local);
  }
  template <bool kTraced, bool kCheapOnly = false>
  void Loop(Task t, typename P::Local* local) {
    typename P::OutBuf buf;
    while (true) {
      if constexpr (kCheapOnly) {
        // Off the I/O thread from the first op that is not cheap: it and
        // what this thread was to run after it go to the pool.
        if (!CheapHere(t)) {
          Schedule(t);
          Task next;
          while (P::Pop(local, &next)) Schedule(next);
          return;
        }
      }
      Status st;
      bool ran = false;
      // An async kernel that took over, or the step's last op: the state
      // may be gone, so only *local is read.
      if (RunKernel<kTraced>(t, &buf, &st, &ran) && Done(t, &buf, st, ran, local)) return;
      if (!P::Pop(local, &t)) return;
    }
  }

  // True when t may run on a thread holding InlineCheapOps: a cheap op whose
  // inputs hold at most kInlineCheapElements elements.
  bool CheapHere(const Task& t) {
    const NodeItem& item = plan_.nodes[P::Node(t)];
    if (!item.cheap) return false;
    InputPtrs in;
    const Tensor** inputs = GatherInputs(t, item, &in);
    int64_t elements = 0;
    for (int i = 0; i < item.num_inputs; ++i)
      if (inputs[i]) elements += inputs[i]->num_elements();
    return elements <= kInlineCheapElements;
  }

  // Where a running op's input pointers live: a small array, or the heap for
  // ops with many inputs. Not copied: GatherInputs may point into it.
  struct InputPtrs {
    static constexpr int kInline = 8;
    const Tensor* inline_inputs[kInline];
    std::vector<const Tensor*> heap;
  };
  // Fills in with t's inputs and returns them. Forced inline: it is on every
  // op's dispatch, which was written out in place before.
  __attribute__((always_inline)) const Tensor** GatherInputs(const Task& t, const NodeItem& item, InputPtrs* in) {
    const Tensor** inputs = in->inline_inputs;
    if (item.num_inputs > InputPtrs::kInline) {
      in->heap.resize(item.num_inputs);
      inputs = in->heap.data();
    }
    prop_.Inputs(t, inputs);
    return inputs;
  }

  // Runs t's kernel if it should run; false when an async kernel took over
  // (it continues in Done later). Traced, an op that runs adds its event.
  template <bool kTraced>
  bool RunKernel(const Task& t, typename P::OutBuf* buf, Status* st, bool* ran) {
    const NodeItem& item = plan_.nodes[P::Node(t)];
    int64_t start = 0;
    if constexpr (kTraced) start = trace_->Now();
    Tensor* outs = prop_.PrepareOutputs(t, buf);
    if (failed() || !prop_.ShouldRun(t, outs)) return true;
    *ran = true;
    if (item.is_async) return StartAsync<kTraced>(t, item, start, buf, st);
    InputPtrs in;
    const Tensor** inputs = GatherInputs(t, item, &in);
    OpKernelContext ctx =
        MakeContext(plan_, id_, inputs, item.num_inputs, outs, item.num_outputs, prop_.FrameOf(t));
    Status thrown = Guarded(plan_, [&] { item.kernel->Compute(&ctx); });
    if (!thrown.ok()) *st = thrown;
    else if (!ctx.status().ok()) *st = ctx.status();
    if constexpr (kTraced) {
      const NodeTraceInfo& ti = plan_.trace_info[P::Node(t)];
      trace_->Add(ti.name, ti.op, ti.category, start, trace_->Now());
    }
    return true;
  }

  // Traced, the op's event (its start, up to handing over) is added before
  // the kernel starts, and its wait (up to the answer) when it answers:
  // once the kernel has it, the step and its trace may be gone here.
  // True when the kernel answered before ComputeAsync returned (a variable
  // served in this thread, no message): its outputs are then in *buf and its
  // status in *st, and this thread goes on with the step without a hop
  // through the pool. False when the kernel took over.
  template <bool kTraced>
  bool StartAsync(const Task& t, const NodeItem& item, int64_t start, typename P::OutBuf* buf, Status* st) {
    // The context, its inputs and outputs outlive this call: the kernel
    // finishes later, on whatever thread answers it.
    struct Pending {
      std::vector<const Tensor*> inputs;
      typename P::OutBuf buf;
      std::unique_ptr<OpKernelContext> ctx;
      // kStarted until the starter returns from ComputeAsync (kTookOver) or
      // the kernel answers first (kAnswered): the one that moves it second
      // finishes the op, on its own thread or through the pool.
      std::atomic<int> phase{kStarted};
    };
    auto* p = new Pending();
    p->inputs.resize(item.num_inputs);
    prop_.Inputs(t, p->inputs.data());
    Tensor* outs = prop_.PrepareOutputs(t, &p->buf);
    p->ctx = std::make_unique<OpKernelContext>(MakeContext(
        plan_, id_, p->inputs.data(), item.num_inputs, outs, item.num_outputs, prop_.FrameOf(t)));
    int64_t wait_start = 0;
    if constexpr (kTraced) {
      const NodeTraceInfo& ti = plan_.trace_info[P::Node(t)];
      wait_start = trace_->Now();
      trace_->Add(ti.name, ti.op, ti.category, start, wait_start);
    }
    auto trace_wait = [this, t, wait_start] {
      if constexpr (kTraced) {
        const NodeTraceInfo& ti = plan_.trace_info[P::Node(t)];
        trace_->Add(ti.name, ti.op, "wait", wait_start, trace_->Now());
      }
    };
    // cheap_only: on a thread holding InlineCheapOps, which runs only the
    // cheap ops that follow.
    auto finish = [this, t, p, trace_wait](Status s, bool cheap_only) {
      trace_wait();
      typename P::OutBuf out = std::move(p->buf);
      delete p;
      typename P::Local local;
      if (Done(t, &out, s, true, &local)) return;
      Task next;
      if (!P::Pop(&local, &next)) return;
      if (cheap_only) Loop<kTraced, true>(next, &local);
      else Loop<kTraced>(next, &local);
    };
    // A kernel that throws before it started its work never calls back.
    Status thrown = Guarded(plan_, [&] {
      item.kernel->ComputeAsync(p->ctx.get(), [this, p, finish] {
        int expected = kStarted;
        if (p->phase.compare_exchange_strong(expected, kAnswered, std::memory_order_acq_rel)) return;
        if (InlineCheapOps::Active()) {
          InlineCheapOps suspended(false);  // what this work triggers takes the pool
          finish(p->ctx->status(), true);
          return;
        }
        // Continue on a compute thread: the callback may run on an actor thread.
        plan_.env.pool->Schedule([p, finish] { finish(p->ctx->status(), false); });
      });
    });
    if (!thrown.ok()) {
      // Through the pool: this thread may be one that runs only cheap ops.
      plan_.env.pool->Schedule([finish, thrown] { finish(thrown, false); });
      return false;
    }
    int expected = kStarted;
    if (p->phase.compare_exchange_strong(expected, kTookOver, std::memory_order_acq_rel)) return false;
    // Answered already: finish here, as a synchronous kernel would.
    trace_wait();
    *st = p->ctx->status();
    *buf = std::move(p->buf);
    delete p;
    return true;
  }
  static constexpr int kStarted = 0, kTookOver = 1, kAnswered = 2;

  // Records a finished (or skipped) op: checks its outputs, fails the step
  // on an error, releases its inputs and propagates. True when that was the
  // step's last op (the state is gone).
  bool Done(const Task& t, typename P::OutBuf* buf, const Status& st, bool ran,
            typename P::Local* local) {
    const NodeItem& item = plan_.nodes[P::Node(t)];
    if (!st.ok()) {
      Fail(item.error_as_is ? st : st.WithPrefix(item.where));
    } else if (ran && !OutputsOk(plan_, item, prop_.Outputs(t, buf))) {
      Fail(CheckOutputsSlow(plan_, item, prop_.Outputs(t, buf)).WithPrefix(item.where));
    }
    if (item.kernel) prop_.ReleaseInputs(t);
    // Written only when the watcher cleared it: most ops only read a line
    // the compute threads share, instead of all of them incrementing it.
    if (progress_ && progress_->load(std::memory_order_relaxed) == 0) progress_->store(1, std::memory_order_relaxed);
    if (!prop_.Propagate(t, buf, local, [this](const Task& k) { Schedule(k); })) return false;
    Finish();
    return true;
  }

  void Finish() {
    Status st = status();
    std::vector<Tensor> out;
    prop_.Finish(&st, &out);
    Executor::DoneFn done = std::move(done_);
    delete this;  // the step's values, frames and stacks go here
    done(std::move(st), std::move(out));
  }

  P prop_;
  StepTrace* trace_ = nullptr;  // null: no trace (set once, before the first op)
  std::atomic<uint64_t>* progress_ = nullptr;  // null: nobody watches (set once, before the first op)
};

}  // namespace runtime
}  // namespace sf
