#include "graph/placement.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "graph/device_name.h"

namespace sf {
namespace {

struct UnionFind {
  std::vector<int> parent;
  explicit UnionFind(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int Find(int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  // The smaller id stays the root, so a group's root is its smallest id.
  void Union(int a, int b) {
    a = Find(a);
    b = Find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
};

std::vector<std::string> ColocationEntries(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',' || c == ' ' || c == '\t') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::string DeviceList(const std::vector<std::string>& devices) {
  std::string s;
  for (const auto& d : devices) s += (s.empty() ? "" : ", ") + d;
  return "[" + s + "]";
}

}  // namespace

Result<std::vector<int>> ColocationGroups(const Graph& g) {
  UnionFind uf(g.num_nodes());
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& n = g.node(id);
    if (const AttrValue* v = n.attrs.Find("_class")) {
      const std::string* s = std::get_if<std::string>(v);
      if (!s)
        return InvalidArgument("node '" + n.name +
                               "': attr _class must be a string of loc:@NAME entries, got " + AttrKindName(*v));
      for (const std::string& e : ColocationEntries(*s)) {
        if (e.rfind("loc:@", 0) != 0 || e.size() == 5)
          return InvalidArgument("node '" + n.name + "': _class entry '" + e + "' is not loc:@NAME");
        auto other = g.FindNode(e.substr(5));
        if (!other.ok())
          return InvalidArgument("node '" + n.name + "': _class entry '" + e +
                                 "' names no node in the graph");
        uf.Union(id, *other);
      }
    }
    for (const Output& in : n.inputs)
      if (in.valid() && in.node < g.num_nodes() && in.dtype() == DType::kResource) uf.Union(id, in.node);
  }
  std::vector<int> group(g.num_nodes());
  for (int id = 0; id < g.num_nodes(); ++id) group[id] = uf.Find(id);
  return group;
}

Result<std::vector<std::string>> Place(const Graph& g, const std::vector<std::string>& devices,
                                       PlacementOptions options) {
  SF_RETURN_IF_ERROR(g.status());
  if (devices.empty()) return InvalidArgument("placement needs at least one device");
  std::vector<DeviceName> parsed;
  std::vector<std::string> canon;
  for (const std::string& d : devices) {
    SF_ASSIGN_OR_RETURN(DeviceName p, ParseFullDeviceName(d));
    if (std::find(parsed.begin(), parsed.end(), p) != parsed.end())
      return InvalidArgument("device '" + d + "' is listed twice");
    parsed.push_back(p);
    canon.push_back(p.ToString());
  }
  const int num_devices = static_cast<int>(devices.size());
  SF_ASSIGN_OR_RETURN(std::vector<int> group_of, ColocationGroups(g));

  // Members of each group (by root), in id order.
  std::map<int, std::vector<int>> members;
  for (int id = 0; id < g.num_nodes(); ++id) members[group_of[id]].push_back(id);

  // Allowed devices per group, from the merged requests of its members.
  std::map<int, std::vector<int>> allowed;
  for (const auto& [root, nodes] : members) {
    DeviceName merged;
    std::vector<std::pair<int, DeviceName>> requests;
    for (int id : nodes) {
      const Node& n = g.node(id);
      if (n.device.empty()) continue;
      auto req = ParseDeviceName(n.device);
      if (!req.ok()) return req.status().WithPrefix("node '" + n.name + "'");
      auto m = MergeDeviceNames(merged, *req);
      if (!m.ok()) {
        for (const auto& [other, other_req] : requests) {
          if (!MergeDeviceNames(other_req, *req).ok())
            return InvalidArgument("colocated nodes '" + g.node(other).name + "' and '" + n.name +
                                   "' request conflicting devices '" + g.node(other).device + "' and '" +
                                   n.device + "'");
        }
        return InvalidArgument("node '" + n.name + "' requests device '" + n.device +
                               "', which conflicts with the merged request '" + merged.ToString() +
                               "' of the nodes colocated with it: " + m.status().message());
      }
      merged = *m;
      requests.emplace_back(id, *req);
    }
    std::vector<int>& ok = allowed[root];
    for (int d = 0; d < num_devices; ++d)
      if (DeviceNameMatches(merged, parsed[d])) ok.push_back(d);
    if (ok.empty()) {
      const Node& first = g.node(requests.front().first);
      std::string who = "node '" + first.name + "' requests device '" + first.device + "'";
      if (requests.size() > 1 || nodes.size() > 1) {
        who += " (merged with its colocation group of " + std::to_string(nodes.size()) +
               " nodes: '" + merged.ToString() + "')";
      }
      return InvalidArgument(who + ", which matches none of the devices " + DeviceList(canon));
    }
  }

  std::vector<int> placed(g.num_nodes(), -1);
  auto assign = [&](int root, int d) {
    for (int id : members[root]) placed[id] = d;
  };
  // Picks the allowed device with the highest count (ties: earliest), or -1
  // when every count is zero.
  auto best = [&](const std::vector<int>& ok, const std::vector<int>& count) {
    int pick = -1;
    for (int d : ok)
      if (count[d] > 0 && (pick < 0 || count[d] > count[pick])) pick = d;
    return pick;
  };
  auto holds_resource = [&](int root) {
    for (int id : members[root])
      for (DType t : g.node(id).output_dtypes)
        if (t == DType::kResource) return true;
    return false;
  };

  int next_rr = 0;
  std::vector<int> deferred;
  for (const auto& [root, nodes] : members) {
    const std::vector<int>& ok = allowed[root];
    if (ok.size() == 1) {
      assign(root, ok[0]);
      continue;
    }
    if (options.spread_resources && holds_resource(root)) {
      int pick = ok[0];
      for (int step = 0; step < num_devices; ++step) {
        const int d = (next_rr + step) % num_devices;
        if (std::find(ok.begin(), ok.end(), d) != ok.end()) {
          pick = d;
          break;
        }
      }
      next_rr = (pick + 1) % num_devices;
      assign(root, pick);
      continue;
    }
    std::vector<int> count(num_devices, 0);
    for (int id : nodes)
      for (const Output& in : g.node(id).inputs)
        if (group_of[in.node] != root && placed[in.node] >= 0) ++count[placed[in.node]];
    const int pick = best(ok, count);
    if (pick >= 0) assign(root, pick);
    else deferred.push_back(root);
  }

  if (!deferred.empty()) {
    std::vector<std::vector<int>> consumers(g.num_nodes());
    for (int id = 0; id < g.num_nodes(); ++id)
      for (const Output& in : g.node(id).inputs) consumers[in.node].push_back(id);
    for (auto it = deferred.rbegin(); it != deferred.rend(); ++it) {
      const int root = *it;
      const std::vector<int>& ok = allowed[root];
      std::vector<int> by_consumer(num_devices, 0), by_input(num_devices, 0);
      for (int id : members[root]) {
        for (int c : consumers[id])
          if (group_of[c] != root && placed[c] >= 0) ++by_consumer[placed[c]];
        for (const Output& in : g.node(id).inputs)
          if (group_of[in.node] != root && placed[in.node] >= 0) ++by_input[placed[in.node]];
      }
      int pick = best(ok, by_consumer);
      if (pick < 0) pick = best(ok, by_input);
      if (pick < 0) pick = ok[0];
      assign(root, pick);
    }
  }

  std::vector<std::string> out(g.num_nodes());
  for (int id = 0; id < g.num_nodes(); ++id) out[id] = canon[placed[id]];
  return out;
}

}  // namespace sf
