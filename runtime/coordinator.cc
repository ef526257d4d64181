#include "runtime/coordinator.h"

#include <set>

#include "graph/placement.h"
#include "runtime/plan.h"
#include "shardflow/op_registry.h"
#include "runtime/step_join.h"
#include "runtime/trace_json.h"

namespace sf {
namespace runtime {

// A run signature's plan: the fed outputs and, per partition, its host and
// where its feeds and fetches sit in the run's lists.
struct Coordinator::Plan {
  Status error;
  std::vector<Output> feeds;
  size_t num_fetches = 0;
  struct Part {
    std::shared_ptr<PartitionHost> host;
    uint64_t handle = 0;
    std::vector<int> feed_index;   // run feed index of each partition feed
    std::vector<int> fetch_index;  // run fetch index of each partition fetch
  };
  std::vector<Part> parts;
  // The distinct hosts of the parts: where an abort or cleanup goes.
  std::vector<PartitionHost*> hosts;
  // What the registered partitions' graphs live in.
  std::shared_ptr<const GraphPlacement> placement;
  // Every stateful op it runs may run again (OpDef::repeatable); known once
  // the run is pruned, before the partitions register (a plan that failed
  // to register may be tried again).
  bool repeatable = false;
};

Coordinator::Coordinator(const Graph& g, CoordinatorOptions options) : graph_(g), options_(std::move(options)) {}

Coordinator::~Coordinator() = default;

std::shared_ptr<const Coordinator::Plan> Coordinator::Find(const std::string& key) {
  std::lock_guard<std::mutex> l(plans_mu_);
  auto it = plans_.find(key);
  if (it == plans_.end() || !it->second->error.ok()) return nullptr;
  return it->second;
}

std::shared_ptr<const Coordinator::Plan> Coordinator::PlanFor(const NamedFeeds& feeds,
                                                             const std::vector<std::string>& fetches,
                                                             const std::vector<std::string>& targets) {
  const std::string key = RunSignature(feeds, fetches, targets);
  std::lock_guard<std::mutex> b(build_mu_);
  {
    std::lock_guard<std::mutex> l(plans_mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
  }
  std::shared_ptr<const Plan> plan = BuildPlan(feeds, fetches, targets);
  const Code c = plan->error.code();
  if (c != Code::kUnavailable && c != Code::kDeadlineExceeded) {
    std::lock_guard<std::mutex> l(plans_mu_);
    plans_[key] = plan;
  }
  return plan;
}

void Coordinator::Reset() {
  std::lock_guard<std::mutex> b(build_mu_);
  std::lock_guard<std::mutex> l(plans_mu_);
  plans_.clear();
}

std::shared_ptr<const GraphPlacement> Coordinator::Placement() {
  std::lock_guard<std::mutex> b(build_mu_);
  return PlacementLocked();
}

std::shared_ptr<const GraphPlacement> Coordinator::PlacementLocked() {
  if (placement_ && placement_->num_nodes == graph_.num_nodes()) return placement_;
  auto p = std::make_shared<GraphPlacement>();
  p->num_nodes = graph_.num_nodes();
  auto device = Place(graph_, options_.devices);
  if (!device.ok()) {
    p->error = device.status();
  } else {
    p->device = std::move(device).value();
    auto parts = Partition(graph_, p->device);
    if (parts.ok()) p->parts = std::move(parts).value();
    else p->error = parts.status();
  }
  placement_ = std::move(p);
  return placement_;
}

std::shared_ptr<Coordinator::Plan> Coordinator::BuildPlan(const NamedFeeds& feeds,
                                                          const std::vector<std::string>& fetches,
                                                          const std::vector<std::string>& targets) {
  auto plan = std::make_shared<Plan>();
  auto fail = [&](Status s) {
    plan->error = std::move(s);
    return plan;
  };
  auto run = PlanRun(graph_, feeds, fetches, targets);
  if (!run.ok()) return fail(run.status());
  plan->feeds = run->feeds;
  plan->num_fetches = run->fetches.size();
  plan->repeatable = true;
  for (int id : run->order) {
    const Node& n = graph_.node(id);
    if (!n.stateful) continue;
    const OpDef* def = graph_.registry().Find(n.op);
    if (!def || !def->repeatable) plan->repeatable = false;
  }
  if (run->order.empty()) return plan;  // nothing to run: every fetch is fed

  // Each device's share of the step; one device's share is the whole pruned
  // graph, unpartitioned (no Send/Recv, no rendezvous).
  std::vector<DeviceStep> steps;
  const Graph* single = nullptr;
  if (options_.devices.size() > 1 || options_.place_single_device) {
    plan->placement = PlacementLocked();
    if (!plan->placement->error.ok()) return fail(plan->placement->error);
    std::set<std::string> used;
    for (int id : run->order) used.insert(plan->placement->device[id]);
    if (used.size() > 1) {
      auto s = PlanDeviceSteps(plan->placement->parts, run->order, plan->feeds, run->fetches);
      if (!s.ok()) return fail(s.status());
      steps = std::move(s).value();
    } else {
      DeviceStep d;
      d.device = *used.begin();
      steps.push_back(std::move(d));
      single = &graph_;
    }
  } else {
    DeviceStep d;
    d.device = options_.devices.at(0);
    steps.push_back(std::move(d));
    single = &graph_;
  }
  if (single) {
    DeviceStep& d = steps[0];
    d.spec = ExecutorSpec{run->order, {}, run->fetches};
    std::vector<int> all(plan->feeds.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    KeepNeededFeeds(plan->feeds, all, &d);
    for (size_t i = 0; i < run->fetches.size(); ++i) d.fetch_index.push_back(static_cast<int>(i));
  }

  std::set<PartitionHost*> seen;
  for (DeviceStep& d : steps) {
    auto host = options_.host_for(d.device);
    if (!host.ok()) return fail(host.status());  // host_for names the device
    Plan::Part part;
    part.host = std::move(host).value();
    part.handle = next_handle_++;
    const Graph& pg = single ? *single : *d.partition->graph;
    Status s = part.host->Register(part.handle, d.device, pg, d.spec, plan->placement);
    if (!s.ok()) return fail(s);
    part.feed_index = std::move(d.feed_index);
    part.fetch_index = std::move(d.fetch_index);
    if (seen.insert(part.host.get()).second) plan->hosts.push_back(part.host.get());
    plan->parts.push_back(std::move(part));
  }
  return plan;
}

bool Coordinator::Repeatable(const Plan& plan) { return plan.repeatable; }

int64_t Coordinator::NewStepId() { return next_step_.fetch_add(step_stride_); }

void Coordinator::StartStep(const std::shared_ptr<const Plan>& plan, const NamedFeeds& feeds, DoneFn done,
                            const RunOptions& options, const std::string& trace_process, int64_t attempt_of) {
  if (!plan->error.ok()) return done(plan->error);
  if (Status s = ValidateFeeds(feeds, plan->feeds); !s.ok()) return done(s);
  // The trace's origin is the step's start here; the partitions' events,
  // the nodes' too, are on its clock.
  std::shared_ptr<StepTrace> trace;
  if (!options.trace_file.empty()) {
    trace = std::make_shared<StepTrace>(options.trace_max_events);
    done = [trace, file = options.trace_file, trace_process, done = std::move(done)](Result<std::vector<Tensor>> r) {
      trace->Add("step", "", "step", 0, trace->Now());
      Status written = WriteChromeTrace(file, trace_process, trace.get());
      if (!written.ok() && r.ok()) r = written.WithPrefix("the step ran");
      done(std::move(r));
    };
  }
  if (plan->parts.empty()) return done(std::vector<Tensor>(plan->num_fetches));
  const int64_t step_id = attempt_of > 0 ? attempt_of : NewStepId();
  // One partition has no peer to abort and leaves nothing in a rendezvous.
  std::function<void(const Status&)> abort;
  std::function<void()> cleanup;
  if (plan->parts.size() > 1) {
    // The callbacks hold the plan, and with it every host.
    abort = [plan, step_id](const Status& s) {
      for (PartitionHost* h : plan->hosts) h->Abort(step_id, s);
    };
    cleanup = [plan, step_id] {
      for (PartitionHost* h : plan->hosts) h->Cleanup(step_id);
    };
  }
  auto join = std::make_shared<StepJoin>(static_cast<int>(plan->parts.size()), plan->num_fetches, std::move(done),
                                         std::move(abort), std::move(cleanup));
  for (const Plan::Part& part : plan->parts) {
    std::vector<Tensor> in;
    in.reserve(part.feed_index.size());
    for (int i : part.feed_index) in.push_back(feeds[i].second);
    // Each report holds the plan, so a Reset cannot free the index under it.
    const std::vector<int>* fetch_index = &part.fetch_index;
    part.host->Run(part.handle, step_id, std::move(in),
                   [join, plan, fetch_index](Status s, std::vector<Tensor> out) {
                     join->Report(std::move(s), std::move(out), *fetch_index);
                   },
                   trace.get());
  }
}

}  // namespace runtime
}  // namespace sf
