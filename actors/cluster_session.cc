// ClusterSession (include/shardflow/cluster.h): the client's coordinator for
// a graph on a cluster. Per run signature it prunes, places over the tasks'
// devices, partitions, and registers each device's partition on its node
// (once); a step is one RunPartition request per partition. The first
// failing partition aborts the step on every node of the step, so no
// partition waits for a tensor that will never come.
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "actors/plan.h"
#include "graph/device_name.h"
#include "graph/graph_def.h"
#include "graph/partition.h"
#include "graph/placement.h"
#include "net/transport.h"
#include "shardflow/cluster.h"

namespace sf {

namespace {

// How long a step may take: failures are found by heartbeats, not by this.
constexpr int kStepTimeoutMs = 24 * 3600 * 1000;

// Blocks until a request's reply.
Result<net::Message> Call(const net::ConnectionPtr& c, net::Body body, int timeout_ms) {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<net::Message>> reply;
  c->Request(std::move(body), timeout_ms, [&](Result<net::Message> r) {
    std::lock_guard<std::mutex> l(mu);
    reply.emplace(std::move(r));
    cv.notify_all();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return reply.has_value(); });
  return std::move(*reply);
}

// The status a request returned (StatusReply), or why there is none.
Status CallStatus(const net::ConnectionPtr& c, net::Body body, int timeout_ms) {
  auto r = Call(c, std::move(body), timeout_ms);
  if (!r.ok()) return r.status();
  if (auto* s = std::get_if<net::StatusReply>(&r->body)) return s->status;
  return Internal(std::string("unexpected reply ") + net::BodyName(r->body));
}

std::string TaskDevice(int task) {
  return "/job:worker/task:" + std::to_string(task) + "/device:CPU:0";
}

struct Plan {
  Status error;
  std::shared_ptr<const void> partitions;  // keeps the partition graphs it was built from
  std::vector<Output> feeds;
  size_t num_fetches = 0;
  struct Part {
    int task = 0;
    uint64_t handle = 0;
    std::vector<int> feed_index;
    std::vector<int> fetch_index;
  };
  std::vector<Part> parts;
};

struct StepJoin {
  std::mutex mu;
  int remaining = 0;
  Status status;
  bool aborted = false;
  bool aborting = false;  // an AbortStep broadcast is being sent
  std::vector<Tensor> fetches;
  std::function<void(Result<std::vector<Tensor>>)> done;
};

}  // namespace

struct ClusterSession::Impl {
  const Graph& graph;
  ClusterOptions options;
  std::unique_ptr<net::Transport> transport;
  std::vector<std::string> tasks;         // addresses by task index
  std::vector<net::ConnectionPtr> conns;  // by task index
  uint64_t session_id = 0;

  std::mutex plan_mu;
  std::map<std::string, std::shared_ptr<Plan>> plans;  // GUARDED_BY(plan_mu)
  // Placement and partitions of the whole graph: computed once per graph
  // size (Place does not depend on the run signature; a graph may grow
  // between runs). Plans keep the partitions they were built from alive.
  std::shared_ptr<Result<std::map<std::string, PartitionGraph>>> partitions;  // GUARDED_BY(plan_mu)
  int partitioned_nodes = -1;                      // GUARDED_BY(plan_mu)
  std::map<std::string, std::string> graph_bytes;  // GUARDED_BY(plan_mu), by device
  uint64_t next_handle = 1;                        // GUARDED_BY(plan_mu)

  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;      // GUARDED_BY(mu)
  int64_t next_step = 0;  // GUARDED_BY(mu)

  // RunAsync's callbacks run on this thread, never on the transport's: a
  // callback that takes a while would stop its connection's reader (or the
  // timer) and the node would look hung (its heartbeats go unread).
  std::mutex cb_mu;
  std::condition_variable cb_cv;
  std::deque<std::function<void()>> cb_queue;  // GUARDED_BY(cb_mu)
  bool cb_stop = false;                        // GUARDED_BY(cb_mu)
  std::thread cb_thread;                       // started by the first Post

  Impl(const Graph& g, ClusterOptions o) : graph(g), options(std::move(o)) {}

  // Runs fn on the callback thread.
  void Post(std::function<void()> fn) {
    std::lock_guard<std::mutex> l(cb_mu);
    cb_queue.push_back(std::move(fn));
    if (!cb_thread.joinable()) cb_thread = std::thread([this] { CallbackLoop(); });
    cb_cv.notify_one();
  }
  void CallbackLoop() {
    std::unique_lock<std::mutex> l(cb_mu);
    for (;;) {
      cb_cv.wait(l, [&] { return cb_stop || !cb_queue.empty(); });
      if (cb_queue.empty()) return;  // stopping, and nothing left
      auto fn = std::move(cb_queue.front());
      cb_queue.pop_front();
      l.unlock();
      fn();
      l.lock();
    }
  }
  // Starts a step; done runs on the callback thread when post, else on
  // whatever thread finishes the step.
  void Start(const FeedMap& feeds, const std::vector<std::string>& fetches,
             const std::vector<std::string>& targets, bool post,
             std::function<void(Result<std::vector<Tensor>>)> done);

  std::shared_ptr<Plan> BuildPlan(const FeedMap& feed_map, const std::vector<std::string>& fetch_names,
                                  const std::vector<std::string>& target_names);
  void StartStep(const std::shared_ptr<Plan>& plan, const FeedMap& feeds,
                 std::function<void(Result<std::vector<Tensor>>)> done);
  // Sends a one-way message to the tasks of a step.
  void Broadcast(const std::shared_ptr<Plan>& plan, const net::Body& body);
};

std::shared_ptr<Plan> ClusterSession::Impl::BuildPlan(const FeedMap& feed_map,
                                                      const std::vector<std::string>& fetch_names,
                                                      const std::vector<std::string>& target_names) {
  auto plan = std::make_shared<Plan>();
  auto fail = [&](Status s) {
    plan->error = std::move(s);
    return plan;
  };
  auto run = runtime::ResolveRun(graph, feed_map, fetch_names, target_names);
  if (!run.ok()) return fail(run.status());
  plan->feeds = run->feeds;
  const std::vector<Output>& fetches = run->fetches;
  const std::vector<int>& targets = run->targets;
  auto order = runtime::PruneAndSort(graph, plan->feeds, fetches, targets);
  if (!order.ok()) return fail(order.status());
  plan->num_fetches = fetches.size();
  if (!partitions || partitioned_nodes != graph.num_nodes()) {
    std::vector<std::string> devices;
    for (size_t i = 0; i < tasks.size(); ++i) devices.push_back(TaskDevice(static_cast<int>(i)));
    auto placement = Place(graph, devices);
    if (!placement.ok()) partitions = std::make_shared<Result<std::map<std::string, PartitionGraph>>>(placement.status());
    else partitions = std::make_shared<Result<std::map<std::string, PartitionGraph>>>(Partition(graph, *placement));
    partitioned_nodes = graph.num_nodes();
    graph_bytes.clear();
  }
  plan->partitions = partitions;
  if (!partitions->ok()) return fail(partitions->status());
  auto steps = runtime::PlanDeviceSteps(**partitions, *order, plan->feeds, fetches);
  if (!steps.ok()) return fail(steps.status());
  std::vector<net::Member> members;
  for (size_t i = 0; i < tasks.size(); ++i) members.push_back({"task" + std::to_string(i), tasks[i]});
  for (const runtime::DeviceStep& d : *steps) {
    auto name = ParseDeviceName(d.device);
    if (!name.ok() || !name->has_task || name->task < 0 || name->task >= static_cast<int>(tasks.size()))
      return fail(InvalidArgument("device " + d.device + " is not a device of the cluster's " +
                                  std::to_string(tasks.size()) + " tasks"));
    auto& bytes = graph_bytes[d.device];
    if (bytes.empty()) {
      auto b = GraphToBytes(*d.partition->graph);
      if (!b.ok()) return fail(b.status().WithPrefix("partition for " + d.device));
      bytes = std::move(*b);
    }
    const Graph& pg = *d.partition->graph;
    net::RegisterPartition r;
    r.session_id = session_id;
    r.handle = next_handle++;
    r.device = d.device;
    r.tasks = members;
    r.graph_def = bytes;
    for (const Output& o : d.spec.fed) r.feeds.push_back({pg.node(o.node).name, o.index});
    for (const Output& o : d.spec.fetches) r.fetches.push_back({pg.node(o.node).name, o.index});
    for (int id : d.spec.nodes) r.targets.push_back(pg.node(id).name);
    Plan::Part part;
    part.task = name->task;
    part.handle = r.handle;
    part.feed_index = d.feed_index;
    part.fetch_index = d.fetch_index;
    Status s = CallStatus(conns[part.task], std::move(r), options.request_timeout_ms);
    if (!s.ok()) return fail(s.WithPrefix("registering the partition for " + d.device + " on " + tasks[part.task]));
    plan->parts.push_back(std::move(part));
  }
  return plan;
}

void ClusterSession::Impl::Broadcast(const std::shared_ptr<Plan>& plan, const net::Body& body) {
  std::set<int> sent;
  for (const Plan::Part& p : plan->parts) {
    if (!sent.insert(p.task).second) continue;
    net::Message m;
    m.body = body;
    conns[p.task]->Send(m);  // a node that is down has nothing to abort or clean
  }
}

void ClusterSession::Impl::StartStep(const std::shared_ptr<Plan>& plan, const FeedMap& feeds,
                                     std::function<void(Result<std::vector<Tensor>>)> done) {
  for (size_t i = 0; i < plan->feeds.size(); ++i) {
    Status s = runtime::ValidateFeed(feeds[i].first, plan->feeds[i], feeds[i].second);
    if (!s.ok()) return done(s);
  }
  if (plan->parts.empty()) return done(std::vector<Tensor>(plan->num_fetches));
  int64_t step_id;
  {
    std::lock_guard<std::mutex> l(mu);
    step_id = next_step++;
  }
  auto join = std::make_shared<StepJoin>();
  join->remaining = static_cast<int>(plan->parts.size());
  join->fetches.resize(plan->num_fetches);
  join->done = std::move(done);
  for (const Plan::Part& part : plan->parts) {
    net::RunPartition r;
    r.session_id = session_id;
    r.handle = part.handle;
    r.step_id = step_id;
    for (int i : part.feed_index) r.feeds.push_back(feeds[i].second);
    const Plan::Part* pp = &part;  // the plan outlives its steps
    const std::string where = tasks[part.task];
    // Every error of the step says which step and which member it came from.
    const std::string prefix = "step " + std::to_string(step_id) + " on task " +
                               std::to_string(part.task) + " (" + where + ")";
    conns[part.task]->Request(std::move(r), kStepTimeoutMs, [this, plan, join, pp, step_id, where,
                                                             prefix](Result<net::Message> reply) {
      Status s;
      std::vector<Tensor> out;
      if (!reply.ok()) {
        s = reply.status();
      } else if (auto* d = std::get_if<net::RunPartitionDone>(&reply->body)) {
        s = std::move(d->status);
        out = std::move(d->fetches);
        if (s.ok() && out.size() != pp->fetch_index.size())
          s = Internal("node " + where + " returned " + std::to_string(out.size()) + " fetches, expected " +
                       std::to_string(pp->fetch_index.size()));
      } else {
        s = Internal(std::string("unexpected reply ") + net::BodyName(reply->body) + " from " + where);
      }
      if (!s.ok()) s = s.WithPrefix(prefix);
      bool abort = false, last;
      {
        std::lock_guard<std::mutex> l(join->mu);
        // Prefer the cause to the aborts it caused on other partitions.
        if (!s.ok() && (join->status.ok() || (join->status.code() == Code::kAborted &&
                                              s.code() != Code::kAborted)))
          join->status = s;
        if (!s.ok() && !join->aborted) abort = join->aborted = join->aborting = true;
        if (s.ok())
          for (size_t i = 0; i < out.size(); ++i) join->fetches[pp->fetch_index[i]] = std::move(out[i]);
        // While an abort is being sent, its sender finishes the step: a
        // CleanupStep overtaking the AbortStep (another reader thread) would
        // leave the abort's step table on the node forever.
        last = --join->remaining == 0 && !join->aborting;
      }
      if (abort) {
        Broadcast(plan, net::AbortStep{step_id, Aborted("step aborted: " + s.message())});
        std::lock_guard<std::mutex> l(join->mu);
        join->aborting = false;
        last = join->remaining == 0;
      }
      if (!last) return;
      Broadcast(plan, net::CleanupStep{step_id});
      if (!join->status.ok()) join->done(join->status);
      else join->done(std::move(join->fetches));
    });
  }
}

Result<std::unique_ptr<ClusterSession>> ClusterSession::Connect(const Graph& g, ClusterOptions options) {
  if (options.address.empty()) return InvalidArgument("ClusterOptions::address is empty");
  KeepTensorMemoryWarm();
  auto impl = std::make_unique<Impl>(g, options);
  net::TransportOptions to;
  to.secret = options.secret;
  to.heartbeat_ms = options.heartbeat_ms;
  to.peer_timeout_ms = options.peer_timeout_ms;
  SF_ASSIGN_OR_RETURN(impl->transport, net::Transport::Create(to, nullptr, nullptr));
  SF_ASSIGN_OR_RETURN(net::ConnectionPtr first, impl->transport->Connect(options.address));
  auto reply = Call(first, net::ListMembers{}, options.request_timeout_ms);
  if (!reply.ok()) return reply.status().WithPrefix("listing the members of " + options.address);
  auto* mem = std::get_if<net::Membership>(&reply->body);
  if (!mem || mem->members.empty())
    return Unavailable("node " + options.address + " answered ListMembers with " + net::BodyName(reply->body));
  for (const net::Member& m : mem->members) {
    if (options.max_tasks > 0 && static_cast<int>(impl->tasks.size()) >= options.max_tasks) break;
    impl->tasks.push_back(m.address);
    if (impl->conns.empty()) {
      impl->conns.push_back(first);  // the contacted node lists itself first
      continue;
    }
    auto c = impl->transport->Connect(m.address);
    if (!c.ok()) return c.status().WithPrefix("connecting to member " + m.name);
    impl->conns.push_back(*c);
  }
  std::random_device rd;
  impl->session_id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  // Step ids are unique across the sessions sharing the nodes' rendezvous.
  impl->next_step = static_cast<int64_t>(((static_cast<uint64_t>(rd()) << 32) ^ rd()) >> 2);
  return std::unique_ptr<ClusterSession>(new ClusterSession(std::move(impl)));
}

ClusterSession::ClusterSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ClusterSession::~ClusterSession() {
  {
    std::unique_lock<std::mutex> l(impl_->mu);
    impl_->cv.wait(l, [&] { return impl_->in_flight == 0; });
  }
  std::set<std::string> closed;
  for (size_t i = 0; i < impl_->conns.size(); ++i) {
    if (!closed.insert(impl_->tasks[i]).second || !impl_->conns[i]->is_up()) continue;
    CallStatus(impl_->conns[i], net::CloseSession{impl_->session_id}, 2000);
  }
  impl_->transport->Shutdown();
  {
    std::lock_guard<std::mutex> l(impl_->cb_mu);
    impl_->cb_stop = true;
    impl_->cb_cv.notify_all();
  }
  if (impl_->cb_thread.joinable()) impl_->cb_thread.join();
}

std::vector<std::string> ClusterSession::tasks() const { return impl_->tasks; }

void ClusterSession::RunAsync(const FeedMap& feeds, const std::vector<std::string>& fetches,
                              const std::vector<std::string>& targets,
                              std::function<void(Result<std::vector<Tensor>>)> done) {
  impl_->Start(feeds, fetches, targets, /*post=*/true, std::move(done));
}

void ClusterSession::Impl::Start(const FeedMap& feeds, const std::vector<std::string>& fetches,
                                 const std::vector<std::string>& targets, bool post,
                                 std::function<void(Result<std::vector<Tensor>>)> done) {
  {
    std::lock_guard<std::mutex> l(mu);
    ++in_flight;
  }
  Impl* impl = this;
  auto finish = [impl, post, done = std::move(done)](Result<std::vector<Tensor>> r) {
    auto call = [impl, done, r = std::make_shared<Result<std::vector<Tensor>>>(std::move(r))] {
      done(std::move(*r));
      std::lock_guard<std::mutex> l(impl->mu);
      if (--impl->in_flight == 0) impl->cv.notify_all();
    };
    if (post) impl->Post(std::move(call));
    else call();
  };
  const std::string key = runtime::RunSignature(feeds, fetches, targets);
  std::shared_ptr<Plan> plan;
  {
    // Registration is rare (once per signature) and serialized.
    std::lock_guard<std::mutex> l(impl->plan_mu);
    auto& p = impl->plans[key];
    if (!p) p = impl->BuildPlan(feeds, fetches, targets);
    plan = p;
    // A plan that failed for want of a node (a timeout, a member down) is
    // not kept: the next run of this signature tries again.
    const Code c = p->error.code();
    if (c == Code::kUnavailable || c == Code::kDeadlineExceeded) impl->plans.erase(key);
  }
  if (!plan->error.ok()) return finish(plan->error);
  impl->StartStep(plan, feeds, std::move(finish));
}

const Graph& ClusterSession::graph() const { return impl_->graph; }

}  // namespace sf
