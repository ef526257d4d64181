#include "cluster/remote_partition_host.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "graph/device_name.h"
#include "shardflow/graph_io.h"

namespace sf {
namespace runtime {

namespace {

class RemotePartitionHost : public PartitionHost {
 public:
  explicit RemotePartitionHost(RemoteHostOptions o) : o_(std::move(o)) {}

  Status Register(uint64_t handle, const std::string& device, const Graph& g, const ExecutorSpec& spec,
                  std::shared_ptr<const void> keep) override {
    auto name = ParseDeviceName(device);
    if (!name.ok() || !name->has_task || name->task < 0 || name->task >= static_cast<int>(o_.tasks.size()))
      return InvalidArgument("device " + device + " is not a device of the cluster's " +
                             std::to_string(o_.tasks.size()) + " tasks");
    net::RegisterPartition r;
    r.session_id = o_.session_id;
    r.handle = handle;
    r.device = device;
    r.tasks = o_.tasks;
    r.epoch = o_.epoch;
    {
      // A device's partition serves many run signatures: encoded once. The
      // entry keeps what g lives in, so its address is never reused for
      // another graph while cached; a graph that grew is encoded again.
      std::lock_guard<std::mutex> l(mu_);
      Encoded& e = graph_bytes_[&g];
      if (e.num_nodes != g.num_nodes() || e.bytes.empty()) {
        auto b = GraphToBytes(g);
        if (!b.ok()) return b.status().WithPrefix("partition for " + device);
        e = Encoded{g.num_nodes(), std::move(b).value(), std::move(keep)};
      }
      r.graph_def = e.bytes;
    }
    for (const Output& f : spec.fed) r.feeds.push_back({g.node(f.node).name, f.index});
    for (const Output& f : spec.fetches) r.fetches.push_back({g.node(f.node).name, f.index});
    for (int id : spec.nodes) r.targets.push_back(g.node(id).name);
    Status s = net::Call(o_.conn, std::move(r), o_.request_timeout_ms).status();
    if (!s.ok()) return s.WithPrefix("registering the partition for " + device + " on " + o_.where);
    std::lock_guard<std::mutex> l(mu_);
    task_of_[handle] = name->task;
    return Status::OK();
  }

  void Run(uint64_t handle, int64_t step_id, std::vector<Tensor> feeds, Executor::DoneFn done,
           StepTrace* trace, std::atomic<uint64_t>*) override {
    int task = -1;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = task_of_.find(handle);
      if (it != task_of_.end()) task = it->second;
    }
    net::RunPartition r{o_.session_id, handle, step_id, std::move(feeds)};
    const int64_t sent_ns = trace ? trace->Now() : 0;
    if (trace) r.trace_max_events = std::max<int64_t>(1, trace->max_events());
    // The reply and the deadline race: whichever comes first answers.
    auto answer = std::make_shared<Answer>();
    answer->done = std::move(done);
    if (o_.deadlines) {
      r.progress_ms = o_.deadlines->report_ms();
      const std::string what = "step " + std::to_string(step_id) + " on task " + std::to_string(task) + " (" +
                               o_.where + ")";
      answer->token = o_.deadlines->Watch(step_id, [answer, what](int64_t idle_ms) {
        if (Executor::DoneFn d = answer->Take())
          d(DeadlineExceeded(what + ": no op of the step finished anywhere for " + std::to_string(idle_ms) +
                             " ms (ClusterOptions::step_progress_timeout_ms)"),
            {});
      });
    }
    // The reply is handled on the connection's I/O thread: what follows is
    // bookkeeping and hand-offs (the step join, the session's callback
    // thread), and a hop to a handler thread would cost every step.
    net::Ask(
        o_.conn, std::move(r), o_.step_timeout_ms,
        [this, step_id, task, trace, sent_ns, answer](Result<net::RunPartitionDone> reply) {
          if (o_.deadlines) o_.deadlines->Finish(answer->token);
          // Expired: the step (and its trace) may be gone.
          Executor::DoneFn done = answer->Take();
          if (!done) return;
          Status s;
          std::vector<Tensor> out;
          if (!reply.ok()) {
            s = reply.status();  // no answer, or the node could not send it (too large for a frame)
          } else {
            s = std::move(reply->status);
            out = std::move(reply->fetches);
            if (trace) AddNodeTrace(trace, sent_ns, &*reply);
          }
          if (!s.ok())
            s = s.WithPrefix("step " + std::to_string(step_id) + " on task " + std::to_string(task) + " (" +
                             o_.where + ")");
          if (s.code() == Code::kUnavailable && o_.on_unavailable) o_.on_unavailable();
          done(std::move(s), std::move(out));
        },
        /*inline_reply=*/true);
  }

  void Abort(int64_t step_id, const Status& status) override {
    // A node that is down has nothing to abort.
    (void)net::Tell(o_.conn, net::AbortStep{step_id, Aborted("step aborted: " + status.message()), o_.session_id});
  }

  void Cleanup(int64_t step_id) override {
    (void)net::Tell(o_.conn, net::CleanupStep{step_id, o_.session_id});  // nor anything to clean
  }

 private:
  // A run's callback, taken once: by the reply or by the deadline.
  struct Answer {
    std::mutex mu;
    Executor::DoneFn done;  // GUARDED_BY(mu); empty once given
    uint64_t token = 0;
    // The callback, the first time; empty after.
    Executor::DoneFn Take() {
      std::lock_guard<std::mutex> l(mu);
      Executor::DoneFn d = std::move(done);
      done = nullptr;
      return d;
    }
  };

  // Puts the node's events on the coordinator's clock: the node's times
  // count from the request's arrival, taken to be halfway through the
  // part of the round trip the node did not spend on the step.
  // The request's round trip is a span on the coordinator's own row.
  void AddNodeTrace(StepTrace* trace, int64_t sent_ns, net::RunPartitionDone* d) const {
    const int64_t now = trace->Now(), round_trip = now - sent_ns;
    trace->Add("RunPartition on " + o_.where, "", "partition", sent_ns, now);
    const int64_t in_flight = std::max<int64_t>(0, round_trip - d->trace_elapsed_ns);
    // A node keeps no more than it was asked to; one that sends more has
    // the excess counted as dropped, so the coordinator's memory stays bounded.
    const size_t cap = static_cast<size_t>(std::max<int64_t>(1, trace->max_events()));
    if (d->trace.events.size() > cap) {
      d->trace.dropped += static_cast<int64_t>(d->trace.events.size() - cap);
      d->trace.events.resize(cap);
    }
    trace->AddRemote(RemoteTrace{"node " + o_.where, sent_ns + in_flight / 2, std::move(d->trace)});
  }

  struct Encoded {
    int num_nodes = 0;
    std::string bytes;
    std::shared_ptr<const void> keep;
  };
  const RemoteHostOptions o_;
  std::mutex mu_;
  std::unordered_map<uint64_t, int> task_of_;                       // GUARDED_BY(mu_)
  std::map<const Graph*, Encoded> graph_bytes_;  // GUARDED_BY(mu_)
};

}  // namespace

std::shared_ptr<PartitionHost> NewRemotePartitionHost(RemoteHostOptions options) {
  return std::make_shared<RemotePartitionHost>(std::move(options));
}

}  // namespace runtime
}  // namespace sf
