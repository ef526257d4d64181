// A node's chunk queues keep their state in the variable store
// (cluster/node_impl.h): queue Q's state (kernels/chunk_queue_service.h) is
// the int64 variable "Q" + kChunkQueueStateSuffix of Q's slot, so a move
// copies it, every run's replication round carries it to the slot's
// backups (a run that changed the queue ends only once its state is
// written: actors/chunk_queue_actor.h), a promoted backup and node
// checkpoints hold it, and no new message crosses the wire.
#include "cluster/node_impl.h"

#include <chrono>
#include <future>

#include "actors/chunk_queue_actor.h"

namespace sf {

namespace {

// How long a registration waits for a stored state before it fails.
constexpr int kLoadWaitMs = 10000;

}  // namespace

void ClusterNode::Impl::StoreChunkQueues() {
  runtime::ChunkQueueStore store;
  store.persist = [this](const std::string& name, Tensor state, std::function<void(Status)> done) {
    // Its length changes with the state: defined with an unknown one.
    auto id = variables->Resolve(name + kChunkQueueStateSuffix, DType::kInt64, PartialShape::UnknownDims(1));
    if (!id.ok()) return done(id.status());
    variables->Assign(*id, AssignMode::kAssign, std::move(state),
                      [done = std::move(done)](Result<Tensor> r) { done(r.status()); });
  };
  store.load = [this](const std::string& name) {
    std::lock_guard<std::mutex> l(chunk_states_mu);
    auto it = chunk_states.find(name);
    if (it == chunk_states.end()) return Tensor();
    Tensor t = std::move(it->second);
    chunk_states.erase(it);
    return t;
  };
  queues->chunk_actors().SetStore(std::move(store));
}

std::map<std::string, std::string> ClusterNode::Impl::ChunkQueueStates(const Graph& g,
                                                                      const std::vector<int>& nodes) {
  std::map<std::string, std::string> out;
  for (int i : nodes) {
    if (g.node(i).op != "ChunkQueue") continue;
    auto s = g.node(i).attrs.Get<std::string>("shared_name");
    if (s.ok() && !s->empty()) out[*s] = *s + kChunkQueueStateSuffix;
  }
  return out;
}

Status ClusterNode::Impl::LoadChunkQueueStates(const Graph& g, const std::vector<int>& nodes) {
  std::map<std::string, std::string> queues_here = ChunkQueueStates(g, nodes);
  if (queues_here.empty()) return Status::OK();
  std::vector<std::string> vars;
  for (const auto& kv : queues_here) vars.push_back(kv.second);
  auto got = std::make_shared<std::promise<std::vector<std::pair<std::string, Tensor>>>>();
  auto values = got->get_future();
  variables->ReadNamed(vars, [got](std::vector<std::pair<std::string, Tensor>> v) { got->set_value(std::move(v)); });
  // None stored (a new queue) is an empty answer; without an answer a new
  // queue would start the epoch again: the registration fails instead.
  if (values.wait_for(std::chrono::milliseconds(kLoadWaitMs)) != std::future_status::ready)
    return Unavailable("node " + opts.name + ": the stored states of its chunk queues were not read in " +
                       std::to_string(kLoadWaitMs) + " ms");
  std::map<std::string, Tensor> by_var;
  for (auto& kv : values.get()) by_var[kv.first] = std::move(kv.second);
  std::lock_guard<std::mutex> l(chunk_states_mu);
  for (const auto& [queue, var] : queues_here) {
    auto it = by_var.find(var);
    if (it != by_var.end()) chunk_states[queue] = it->second;
  }
  return Status::OK();
}

}  // namespace sf
