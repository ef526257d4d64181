#include "runtime/plan.h"

#include <map>
#include <set>

namespace sf {
namespace runtime {

Result<std::vector<int>> PruneAndSort(const Graph& g, const std::vector<Output>& feeds,
                                      const std::vector<Output>& fetches,
                                      const std::vector<int>& targets) {
  const int n = g.num_nodes();
  std::vector<char> fed(n, 0);
  for (const Output& f : feeds) fed[f.node] = 1;
  // Iterative DFS (deep chains must not overflow the stack); post-order gives
  // producers before consumers. state: 0 new, 1 on the stack, 2 done.
  std::vector<char> state(n, 0);
  std::vector<int> order;
  std::vector<std::pair<int, int>> stack;  // (node, next edge to visit)
  std::vector<int> back_edges;
  auto visit = [&](int root) -> Status {
    if (state[root] == 2) return Status::OK();
    stack.push_back({root, 0});
    state[root] = 1;
    while (!stack.empty()) {
      auto& top = stack.back();
      const Node& node = g.node(top.first);
      const int num_data = fed[top.first] ? 0 : static_cast<int>(node.inputs.size());
      const int num_ctrl = fed[top.first] ? 0 : static_cast<int>(node.control_inputs.size());
      if (top.second < num_data + num_ctrl) {
        const int e = top.second++;
        const int next = e < num_data ? node.inputs[e].node : node.control_inputs[e - num_data];
        // A loop's back edge (NextIteration -> Merge) is not an ordering
        // constraint: the NextIteration is visited after the DFS.
        if (e < num_data && node.op == "Merge" && g.node(next).op == "NextIteration") {
          if (state[next] == 0) back_edges.push_back(next);
          continue;
        }
        if (state[next] == 1)
          return InvalidArgument("the graph has a cycle through node '" + g.node(next).name +
                                 "' (op " + g.node(next).op + ")");
        if (state[next] == 0) {
          state[next] = 1;
          stack.push_back({next, 0});
        }
        continue;
      }
      state[top.first] = 2;
      order.push_back(top.first);
      stack.pop_back();
    }
    return Status::OK();
  };
  for (const Output& f : fetches) SF_RETURN_IF_ERROR(visit(f.node));
  for (int t : targets) SF_RETURN_IF_ERROR(visit(t));
  for (size_t i = 0; i < back_edges.size(); ++i) SF_RETURN_IF_ERROR(visit(back_edges[i]));
  return order;
}

Status ValidateFeed(const std::string& feed_name, const Output& target, const Tensor& value) {
  if (!value.valid())
    return InvalidArgument("feed '" + feed_name + "' is an empty (invalid) tensor");
  if (value.dtype() != target.dtype())
    return InvalidArgument("feed '" + feed_name + "' is " + DTypeName(value.dtype()) + " but '" +
                           target.name() + "' is " + DTypeName(target.dtype()));
  if (!target.shape().CompatibleWith(value.shape()))
    return InvalidArgument("feed '" + feed_name + "' has shape " + ShapeString(value.shape()) +
                           ", incompatible with " + target.shape().ToString() + " of '" +
                           target.name() + "'");
  return Status::OK();
}

Status ValidateFeeds(const std::vector<std::pair<std::string, Tensor>>& feeds, const std::vector<Output>& fed) {
  if (feeds.size() != fed.size())
    return Internal(std::to_string(feeds.size()) + " feeds for a plan of " + std::to_string(fed.size()));
  for (size_t i = 0; i < fed.size(); ++i) SF_RETURN_IF_ERROR(ValidateFeed(feeds[i].first, fed[i], feeds[i].second));
  return Status::OK();
}

Result<ResolvedRun> PlanRun(const Graph& g, const std::vector<std::pair<std::string, Tensor>>& feeds,
                            const std::vector<std::string>& fetches, const std::vector<std::string>& targets) {
  SF_ASSIGN_OR_RETURN(ResolvedRun r, ResolveRun(g, feeds, fetches, targets));
  SF_ASSIGN_OR_RETURN(r.order, PruneAndSort(g, r.feeds, r.fetches, r.targets));
  return r;
}

Result<ResolvedRun> ResolveRun(const Graph& g,
                               const std::vector<std::pair<std::string, Tensor>>& feeds,
                               const std::vector<std::string>& fetches,
                               const std::vector<std::string>& targets) {
  if (!g.status().ok()) return g.status().WithPrefix("the graph has a construction error");
  ResolvedRun r;
  std::set<std::string> seen;
  for (const auto& f : feeds) {
    if (!seen.insert(f.first).second) return InvalidArgument("feed '" + f.first + "' is given twice");
    auto o = g.FindOutput(f.first);
    if (!o.ok()) return InvalidArgument("feed '" + f.first + "': " + o.status().message());
    r.feeds.push_back(*o);
  }
  for (const auto& name : fetches) {
    auto o = g.FindOutput(name);
    if (!o.ok()) return o.status().WithPrefix("fetch '" + name + "'");
    r.fetches.push_back(*o);
  }
  for (const auto& name : targets) {
    auto id = g.FindNode(name);
    if (!id.ok()) return id.status().WithPrefix("target '" + name + "'");
    r.targets.push_back(*id);
  }
  return r;
}

std::string RunSignature(const std::vector<std::pair<std::string, Tensor>>& feeds,
                         const std::vector<std::string>& fetches,
                         const std::vector<std::string>& targets) {
  std::string key;
  for (const auto& f : feeds) key += f.first + '\x1f';
  key += '\x1e';
  for (const auto& f : fetches) key += f + '\x1f';
  key += '\x1e';
  for (const auto& t : targets) key += t + '\x1f';
  return key;
}

void KeepNeededFeeds(const std::vector<Output>& feeds, const std::vector<int>& feed_index, DeviceStep* d) {
  const std::set<int> kept(d->spec.nodes.begin(), d->spec.nodes.end());
  d->spec.fed.clear();
  d->feed_index.clear();
  for (size_t i = 0; i < feeds.size(); ++i) {
    if (!kept.count(feeds[i].node)) continue;
    d->spec.fed.push_back(feeds[i]);
    d->feed_index.push_back(feed_index[i]);
  }
}

Result<std::vector<DeviceStep>> PlanDeviceSteps(const std::map<std::string, PartitionGraph>& parts,
                                                const std::vector<int>& order,
                                                const std::vector<Output>& feeds,
                                                const std::vector<Output>& fetches) {
  const std::set<int> pruned(order.begin(), order.end());
  struct Local {
    std::vector<Output> feeds, fetches;
    std::vector<int> feed_index, fetch_index, targets;
  };
  std::map<std::string, Local> locals;
  std::set<std::string> needed_keys;
  for (const auto& [device, pg] : parts) {
    Local& l = locals[device];
    for (size_t i = 0; i < feeds.size(); ++i) {
      auto it = pg.local_id.find(feeds[i].node);
      if (it == pg.local_id.end()) continue;
      l.feeds.emplace_back(pg.graph.get(), it->second, feeds[i].index);
      l.feed_index.push_back(static_cast<int>(i));
    }
    for (size_t i = 0; i < fetches.size(); ++i) {
      auto it = pg.local_id.find(fetches[i].node);
      if (it == pg.local_id.end()) continue;
      l.fetches.emplace_back(pg.graph.get(), it->second, fetches[i].index);
      l.fetch_index.push_back(static_cast<int>(i));
    }
    for (const auto& [orig, local] : pg.local_id)
      if (pruned.count(orig)) l.targets.push_back(local);
    // The receives this partition's share of the step needs.
    SF_ASSIGN_OR_RETURN(auto need, PruneAndSort(*pg.graph, l.feeds, {}, l.targets));
    for (int id : need) {
      if (pg.graph->node(id).op != "_Recv") continue;
      needed_keys.insert(pg.graph->node(id).attrs.Get<std::string>("tensor_name").value());
    }
  }
  std::vector<DeviceStep> steps;
  for (const auto& [device, pg] : parts) {
    Local& l = locals[device];
    for (int id : pg.sends)
      if (needed_keys.count(pg.graph->node(id).attrs.Get<std::string>("tensor_name").value()))
        l.targets.push_back(id);
    SF_ASSIGN_OR_RETURN(auto nodes, PruneAndSort(*pg.graph, l.feeds, {}, l.targets));
    if (nodes.empty()) continue;
    DeviceStep d;
    d.device = device;
    d.partition = &pg;
    d.spec.nodes = std::move(nodes);
    KeepNeededFeeds(l.feeds, l.feed_index, &d);
    d.spec.fetches = l.fetches;
    d.fetch_index = l.fetch_index;
    steps.push_back(std::move(d));
  }
  return steps;
}

}  // namespace runtime
}  // namespace sf
