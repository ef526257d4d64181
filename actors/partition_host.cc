#include "actors/partition_host.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <unordered_map>

#include "kernels/replication_service.h"
#include "kernels/run_counters.h"
#include "kernels/step_trace.h"
#include "runtime/plan.h"

namespace sf {
namespace runtime {

namespace {

// A registered partition. Steps hold a reference, so a host that stops
// (its session closed) never pulls an executor from under a step.
struct Hosted {
  std::shared_ptr<const void> keep;  // what the executor's graph lives in
  std::unique_ptr<Executor> executor;
  std::vector<Output> fed;
  std::string device;  // names the partition's span in a trace
};

std::string Prefixed(const std::string& name, const std::string& what) {
  return name.empty() ? what : name + ": " + what;
}

}  // namespace

// The host's partitions. The actor alone changes the table (register, and
// dropping it when it stops); runs read it under a shared lock, on the
// actor's turn (RunPartition) or on the requester's own thread
// (LocalPartitionHost::Run): either way the step's ops start on the pool.
struct PartitionTable {
  explicit PartitionTable(PartitionHostOptions o) : options(WithCounters(std::move(o), &counters)) {}
  // The session's stateful nodes count their runs here, across every
  // executor this host builds (kernels/run_counters.h).
  static PartitionHostOptions WithCounters(PartitionHostOptions o, RunCounters* c) {
    if (!o.env.run_counters) o.env.run_counters = c;
    return o;
  }

  // Starts one step of partition handle; done gets the host's refusal or
  // the step's answer. With a trace, the partition's span and its ops'
  // events are in it before done runs.
  void Run(uint64_t handle, int64_t step_id, std::vector<Tensor> feeds, Executor::DoneFn done, StepTrace* trace,
           std::atomic<uint64_t>* progress) {
    std::shared_ptr<Hosted> h;
    {
      std::shared_lock<std::shared_mutex> l(mu);
      auto it = parts.find(handle);
      if (it != parts.end()) h = it->second;
    }
    if (!h)
      return done(NotFound(Prefixed(options.name, "no partition " + std::to_string(handle) + " is registered here")),
                  {});
    if (options.check_feeds) {
      Status fs;
      if (feeds.size() != h->fed.size())
        fs = InvalidArgument("partition " + std::to_string(handle) + " takes " + std::to_string(h->fed.size()) +
                             " feeds, got " + std::to_string(feeds.size()));
      for (size_t i = 0; fs.ok() && i < feeds.size(); ++i) fs = ValidateFeed(h->fed[i].name(), h->fed[i], feeds[i]);
      if (!fs.ok()) return done(fs.WithPrefix(options.name), {});
    }
    Executor* ex = h->executor.get();
    if (trace) {
      const int64_t start = trace->Now();
      done = [h, trace, start, done = std::move(done)](Status s, std::vector<Tensor> out) {
        trace->Add("partition " + h->device, "", "partition", start, trace->Now());
        done(std::move(s), std::move(out));
      };
    }
    // The result goes once the step's sends have left (Flush): a send still
    // waiting for its connection may yet fail the step.
    ex->RunStep(
        step_id, std::move(feeds),
        [h = std::move(h), rv = options.env.rendezvous, step_id, done = std::move(done)](
            Status s, std::vector<Tensor> out) mutable {
          if (!rv) return done(std::move(s), std::move(out));
          rv->Flush(step_id, [h, s = std::move(s), out = std::move(out), done = std::move(done)](Status sent) mutable {
            done(s.ok() ? std::move(sent) : std::move(s), std::move(out));
          });
        },
        trace, progress);
  }

  RunCounters counters;  // before options, which points at it
  const PartitionHostOptions options;
  std::shared_mutex mu;
  std::unordered_map<uint64_t, std::shared_ptr<Hosted>> parts;  // GUARDED_BY(mu)
};

namespace {

struct HostState {
  std::shared_ptr<PartitionTable> table;
};

PartitionHostActor SpawnHost(caf::actor_system& sys, std::shared_ptr<PartitionTable> table) {
  return sys.spawn([table = std::move(table)](PartitionHostActor::stateful_pointer<HostState> self)
                       -> PartitionHostActor::behavior_type {
    self->state.table = table;
    // Steps in flight hold their partitions; the table goes with the actor.
    self->attach_functor([table] {
      std::unique_lock<std::shared_mutex> l(table->mu);
      table->parts.clear();
    });
    return {
        [self](RegisterPartition& r) {
          PartitionTable& t = *self->state.table;
          auto ex = Executor::Create(*r.graph, r.spec, t.options.env);
          if (!ex.ok())
            return r.done(ex.status().WithPrefix(Prefixed(t.options.name, "registering the partition for " + r.device)));
          auto h = std::make_shared<Hosted>();
          h->keep = std::move(r.keep);
          h->executor = std::move(ex).value();
          h->fed = r.spec.fed;
          h->device = r.device;
          {
            std::unique_lock<std::shared_mutex> l(t.mu);
            t.parts[r.handle] = std::move(h);
          }
          r.done(Status::OK());
        },
        [self](RunPartition& r) {
          self->state.table->Run(r.handle, r.step_id, std::move(r.feeds), std::move(r.done), r.trace, nullptr);
        },
        [self](AbortPartitionStep& a) {
          const PartitionHostOptions& o = self->state.table->options;
          if (LocalRendezvous* steps = o.steps) steps->Abort(a.step_id, a.status);
          // A partition waiting in a synchronous step would hold the step
          // (and its run again) until that step is applied.
          if (o.env.replication) o.env.replication->AbortWaits(a.step_id, a.status);
        },
        [self](CleanupPartitionStep& c) {
          if (LocalRendezvous* steps = self->state.table->options.steps) steps->Cleanup(c.step_id);
        },
    };
  });
}

class LocalPartitionHost : public PartitionHost {
 public:
  LocalPartitionHost(caf::actor_system& sys, PartitionHostOptions options)
      : table_(std::make_shared<PartitionTable>(std::move(options))), actor_(SpawnHost(sys, table_)) {}
  ~LocalPartitionHost() override { caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown); }

  Status Register(uint64_t handle, const std::string& device, const Graph& g, const ExecutorSpec& spec,
                  std::shared_ptr<const void> keep) override {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<Status> result;
    RegisterPartition r{handle, device, &g, spec, std::move(keep), [&](Status s) {
                          std::lock_guard<std::mutex> l(mu);
                          result = std::move(s);
                          cv.notify_all();
                        }};
    caf::anon_send(actor_, std::move(r));
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return result.has_value(); });
    return *result;
  }
  // On the caller's thread: a mailbox turn would add a thread hop to every
  // step (the executor puts its ops on the pool either way).
  void Run(uint64_t handle, int64_t step_id, std::vector<Tensor> feeds, Executor::DoneFn done,
           StepTrace* trace, std::atomic<uint64_t>* progress) override {
    table_->Run(handle, step_id, std::move(feeds), std::move(done), trace, progress);
  }
  void Abort(int64_t step_id, const Status& status) override {
    caf::anon_send(actor_, AbortPartitionStep{step_id, status});
  }
  void Cleanup(int64_t step_id) override { caf::anon_send(actor_, CleanupPartitionStep{step_id}); }

 private:
  std::shared_ptr<PartitionTable> table_;
  PartitionHostActor actor_;
};

}  // namespace

PartitionHostActor SpawnPartitionHost(caf::actor_system& sys, PartitionHostOptions options) {
  return SpawnHost(sys, std::make_shared<PartitionTable>(std::move(options)));
}

std::shared_ptr<PartitionHost> NewLocalPartitionHost(caf::actor_system& sys, PartitionHostOptions options) {
  return std::make_shared<LocalPartitionHost>(sys, std::move(options));
}

}  // namespace runtime
}  // namespace sf
