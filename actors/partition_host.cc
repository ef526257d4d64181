#include "actors/partition_host.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <unordered_map>

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
};

struct HostState {
  PartitionHostOptions options;
  std::unordered_map<uint64_t, std::shared_ptr<Hosted>> partitions;
};

std::string Prefixed(const std::string& name, const std::string& what) {
  return name.empty() ? what : name + ": " + what;
}

}  // namespace

PartitionHostActor SpawnPartitionHost(caf::actor_system& sys, PartitionHostOptions options) {
  return sys.spawn([options = std::move(options)](PartitionHostActor::stateful_pointer<HostState> self)
                       -> PartitionHostActor::behavior_type {
    self->state.options = options;
    return {
        [self](RegisterPartition& r) {
          HostState& st = self->state;
          auto h = std::make_shared<Hosted>();
          auto ex = Executor::Create(*r.graph, r.spec, st.options.env);
          if (!ex.ok())
            return r.done(ex.status().WithPrefix(Prefixed(st.options.name, "registering the partition for " + r.device)));
          h->keep = std::move(r.keep);
          h->executor = std::move(ex).value();
          h->fed = r.spec.fed;
          st.partitions[r.handle] = std::move(h);
          r.done(Status::OK());
        },
        [self](RunPartition& r) {
          HostState& st = self->state;
          auto it = st.partitions.find(r.handle);
          if (it == st.partitions.end())
            return r.done(NotFound(Prefixed(st.options.name, "no partition " + std::to_string(r.handle) +
                                                                 " is registered here")),
                          {});
          std::shared_ptr<Hosted> h = it->second;
          if (st.options.check_feeds) {
            Status fs;
            if (r.feeds.size() != h->fed.size())
              fs = InvalidArgument("partition " + std::to_string(r.handle) + " takes " +
                                   std::to_string(h->fed.size()) + " feeds, got " + std::to_string(r.feeds.size()));
            for (size_t i = 0; fs.ok() && i < r.feeds.size(); ++i)
              fs = ValidateFeed(h->fed[i].name(), h->fed[i], r.feeds[i]);
            if (!fs.ok()) return r.done(fs.WithPrefix(st.options.name), {});
          }
          Executor* ex = h->executor.get();
          ex->RunStep(r.step_id, std::move(r.feeds),
                      [h = std::move(h), done = std::move(r.done)](Status s, std::vector<Tensor> out) {
                        done(std::move(s), std::move(out));
                      });
        },
        [self](AbortPartitionStep& a) {
          if (self->state.options.steps) self->state.options.steps->Abort(a.step_id, a.status);
        },
        [self](CleanupPartitionStep& c) {
          if (self->state.options.steps) self->state.options.steps->Cleanup(c.step_id);
        },
    };
  });
}

namespace {

class LocalPartitionHost : public PartitionHost {
 public:
  explicit LocalPartitionHost(PartitionHostActor actor) : actor_(std::move(actor)) {}
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
  void Run(uint64_t handle, int64_t step_id, std::vector<Tensor> feeds, Executor::DoneFn done) override {
    caf::anon_send(actor_, RunPartition{handle, step_id, std::move(feeds), std::move(done)});
  }
  void Abort(int64_t step_id, const Status& status) override {
    caf::anon_send(actor_, AbortPartitionStep{step_id, status});
  }
  void Cleanup(int64_t step_id) override { caf::anon_send(actor_, CleanupPartitionStep{step_id}); }

 private:
  PartitionHostActor actor_;
};

}  // namespace

std::shared_ptr<PartitionHost> NewLocalPartitionHost(PartitionHostActor actor) {
  return std::make_shared<LocalPartitionHost>(std::move(actor));
}

}  // namespace runtime
}  // namespace sf
