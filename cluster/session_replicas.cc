// A session's check that its slots' replicas hold the same state
// (ClusterSession::CompareReplicas, include/shardflow/cluster.h).
#include <cstring>

#include "cluster/session_impl.h"

namespace sf {

namespace {

// Why a (holder) and b (backup) of variable name differ, or "" when their
// bytes are the same.
std::string Difference(const std::string& name, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    return "'" + name + "' is " + a.DebugString(0) + " on the holder and " + b.DebugString(0) + " on the backup";
  const auto* x = static_cast<const unsigned char*>(a.raw_data());
  const auto* y = static_cast<const unsigned char*>(b.raw_data());
  const size_t n = a.bytes(), width = DTypeSize(a.dtype());
  if (std::memcmp(x, y, n) == 0) return "";
  size_t i = 0;
  while (i < n && x[i] == y[i]) ++i;
  return "'" + name + "' " + a.DebugString(0) + " differs from element " + std::to_string(i / width) + " on";
}

}  // namespace

Result<ClusterSession::ReplicaComparison> ClusterSession::CompareReplicas(const ShardMapInfo& map) {
  SF_ASSIGN_OR_RETURN(std::vector<std::vector<std::string>> vars, impl_->TaskVariables());
  if (map.holder.size() < vars.size())
    return FailedPrecondition("the shard map has " + std::to_string(map.holder.size()) + " slots; the session " +
                              std::to_string(vars.size()) + " tasks");
  ReplicaComparison out;
  for (size_t t = 0; t < vars.size(); ++t) {
    const std::string backup = t < map.backup.size() ? map.backup[t] : "";
    if (backup.empty()) continue;
    if (t >= map.synced.size() || !map.synced[t] || (t < map.moving_from.size() && !map.moving_from[t].empty())) {
      out.unsynced.push_back(static_cast<int>(t));
      continue;
    }
    ++out.slots;
    const std::string where = " slot " + std::to_string(t) + " (holder " + map.holder[t] + ", backup " + backup + ")";
    // One variable at a time: the client never holds the model.
    for (const std::string& name : vars[t]) {
      SF_ASSIGN_OR_RETURN(auto a, impl_->ReadVariables(map.holder[t], {name}));
      SF_ASSIGN_OR_RETURN(auto b, impl_->ReadVariables(backup, {name}));
      if (a.size() != b.size()) {
        out.differences.push_back("'" + name + "' is " + (a.empty() ? "uninitialised" : "initialised") +
                                  " on the holder and " + (b.empty() ? "uninitialised" : "initialised") +
                                  " on the backup of" + where);
        continue;
      }
      if (a.empty()) continue;
      ++out.variables;
      out.bytes += static_cast<int64_t>(a[0].second.bytes());
      std::string why = Difference(name, a[0].second, b[0].second);
      if (!why.empty()) out.differences.push_back(why + where);
    }
  }
  return out;
}

}  // namespace sf
