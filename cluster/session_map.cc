// A ClusterSession on a cluster that places by a shard map (etcd clusters;
// cluster/shard_map.h): its tasks are the map's slots, the map's placement
// leader moves their state, and the session only follows the map: it waits
// for a settled map, registers its partitions where the map says, and
// restores from a checkpoint only slots whose state the map says was lost.
#include "cluster/session_impl.h"
#include "cluster/shard_map.h"

namespace sf {

using namespace cluster_session_detail;  // NOLINT: the session's helpers (cluster/session_impl.h)

Result<net::Membership> ClusterSession::Impl::AskMembership() {
  std::vector<std::string> candidates;
  {
    std::lock_guard<std::mutex> l(conf_mu);
    for (const auto& kv : conns)
      if (kv.second->is_up()) candidates.push_back(kv.first);
    for (const auto& k : known)
      if (std::find(candidates.begin(), candidates.end(), k) == candidates.end()) candidates.push_back(k);
  }
  Status last = Unavailable("no member of the session is alive");
  for (const auto& addr : candidates) {
    auto c = Conn(addr);
    if (!c.ok()) {
      last = c.status();
      continue;
    }
    auto mem = net::Call(*c, net::ListMembers{}, options.request_timeout_ms);
    if (!mem.ok()) {
      last = mem.status();
      continue;
    }
    Learn(*mem);
    return mem;
  }
  return last;
}

bool ClusterSession::Impl::SilentLately(const std::string& addr) {
  std::lock_guard<std::mutex> l(conf_mu);
  if (auto c = conns.find(addr); c != conns.end() && c->second->is_up()) return false;
  auto d = down_since.find(addr);
  if (d == down_since.end()) return false;
  const int64_t now =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return now - d->second < kSilentMs;
}

Result<net::Membership> ClusterSession::Impl::SettledMap() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(VariablesTimeoutMs());
  std::string why;
  while (true) {
    auto m = AskMembership();
    if (m.ok()) {
      if (num_tasks > m->map_slots)
        return InvalidArgument("the session has " + std::to_string(num_tasks) + " tasks but the cluster's shard map " +
                               std::to_string(m->map_slots) + " slots (shardflow node --map-slots)");
      std::set<std::string> listed;
      for (const auto& k : m->members) listed.insert(k.address);
      why.clear();
      if (m->map_epoch == 0 || static_cast<int>(m->map_holder.size()) < num_tasks) why = "no shard map is written yet";
      for (int t = 0; why.empty() && t < num_tasks; ++t) {
        if (!m->map_from[t].empty()) why = "slot " + std::to_string(t) + " is moving from " + m->map_from[t];
        else if (!listed.count(m->map_holder[t]))
          why = "slot " + std::to_string(t) + "'s holder " + m->map_holder[t] + " is no member";
        else if (SilentLately(m->map_holder[t]))
          why = "slot " + std::to_string(t) + "'s holder " + m->map_holder[t] + " went silent lately";
        else if (auto c = Conn(m->map_holder[t]); !c.ok())
          why = "slot " + std::to_string(t) + "'s holder " + m->map_holder[t] + " cannot be reached: " +
                c.status().message();
      }
      if (why.empty()) return m;
    } else {
      why = m.status().ToString();
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return Unavailable("the cluster's shard map did not settle within " + std::to_string(VariablesTimeoutMs()) +
                         " ms: " + why);
    // Asked again after a push from a node (the map changed), or 50 ms.
    std::unique_lock<std::mutex> l(map_mu);
    map_cv.wait_for(l, std::chrono::milliseconds(50));
  }
}

Status ClusterSession::Impl::PlanByMap(std::vector<std::string>* old, std::vector<std::string>* now,
                                       uint64_t* old_session, int64_t* epoch,
                                       std::vector<std::vector<std::string>>* vars, ClusterChange* change,
                                       std::set<std::string>* restore_names, std::set<std::string>* lost,
                                       std::set<std::string>* drained, std::set<std::string>* added) {
  SF_ASSIGN_OR_RETURN(net::Membership m, SettledMap());
  int64_t placed_by = 0;
  {
    std::lock_guard<std::mutex> l(conf_mu);
    *old = assignment;
    *old_session = session_id;
    placed_by = reg_epoch;
  }
  now->assign(m.map_holder.begin(), m.map_holder.begin() + num_tasks);
  *epoch = m.map_epoch;
  for (const auto& a : *now)
    if (auto c = Conn(a); !c.ok()) return c.status().WithPrefix("connecting to slot holder " + a);
  // A graph that cannot be placed has no variables on any task.
  if (auto v = TaskVariables(); v.ok()) *vars = std::move(v).value();
  vars->resize(static_cast<size_t>(num_tasks));
  std::set<std::string> leaving;
  for (const auto& k : m.leaving) leaving.insert(k.address);
  for (int t = 0; t < num_tasks; ++t) {
    // The slot's state was lost since this session placed it: its holder
    // died, and the leader moved it with nothing to copy.
    const bool state_lost = m.map_lost_after[t] > 0 && m.map_lost_after[t] >= placed_by;
    if ((*old)[t] == (*now)[t] && !state_lost) continue;
    {
      std::lock_guard<std::mutex> l(conf_mu);
      if (!ever_used.count((*now)[t])) added->insert((*now)[t]);
    }
    if (state_lost) {
      lost->insert((*old)[t]);
      change->restored_tasks.push_back(t);
      restore_names->insert((*vars)[t].begin(), (*vars)[t].end());
      continue;
    }
    if (leaving.count((*old)[t])) drained->insert((*old)[t]);
    change->moved_tasks.push_back(t);
  }
  return Status::OK();
}

}  // namespace sf
