// The cluster's shard map (cluster/shard_map.h).
#include "cluster/shard_map.h"

#include <map>
#include <sstream>

namespace sf {
namespace cluster {

bool IsStaleEpoch(const Status& s) {
  return s.code() == Code::kAborted && s.message().find(kStaleEpoch) != std::string::npos;
}

bool ShardMap::moving() const {
  for (const auto& f : from)
    if (!f.empty()) return true;
  return false;
}

std::string EncodeShardMap(const ShardMap& m) {
  std::string out = "v1 " + std::to_string(m.holder.size()) + "\n";
  for (size_t s = 0; s < m.holder.size(); ++s) {
    out += m.holder[s];
    if (s < m.from.size() && !m.from[s].empty()) out += "<" + m.from[s];
    if (s < m.lost_after.size() && m.lost_after[s] > 0) out += "!" + std::to_string(m.lost_after[s]);
    out += "\n";
  }
  return out;
}

Result<ShardMap> DecodeShardMap(const std::string& text) {
  std::istringstream in(text);
  std::string version;
  int64_t slots = -1;
  in >> version >> slots;
  if (version != "v1") return DataLoss("shard map: version '" + version.substr(0, 16) + "' is not v1");
  if (slots < 0 || slots > kMaxSlots)
    return DataLoss("shard map: " + std::to_string(slots) + " slots (at most " + std::to_string(kMaxSlots) + ")");
  std::string line;
  std::getline(in, line);  // the rest of the header line
  ShardMap m;
  for (int64_t s = 0; s < slots; ++s) {
    if (!std::getline(in, line) || line.empty())
      return DataLoss("shard map: slot " + std::to_string(s) + " of " + std::to_string(slots) + " is missing");
    const std::string bad = "shard map: slot " + std::to_string(s) + " line '" + line.substr(0, 64) + "' does not parse";
    int64_t lost = 0;
    if (const size_t bang = line.find('!'); bang != std::string::npos) {
      const std::string n = line.substr(bang + 1);
      if (n.empty() || n.size() > 18 || n.find_first_not_of("0123456789") != std::string::npos) return DataLoss(bad);
      lost = std::stoll(n);
      line.resize(bang);
    }
    const size_t lt = line.find('<');
    m.holder.push_back(line.substr(0, lt));
    m.from.push_back(lt == std::string::npos ? "" : line.substr(lt + 1));
    m.lost_after.push_back(lost);
    if (m.holder.back().empty() || (lt != std::string::npos && m.from.back().empty())) return DataLoss(bad);
  }
  return m;
}

ShardMap PlanShardMap(const ShardMap& old, const std::vector<std::string>& live, int slots) {
  // Greedy over the slots in order, so that every prefix is balanced (a
  // session of n tasks uses slots 0..n-1 and should span as many members as
  // it can): a slot stays with its holder while the holder's share of the
  // slots so far is under the even share, else it goes to the member with
  // the fewest so far (the first of them in `live`'s order).
  const int n = static_cast<int>(live.size());
  std::map<std::string, int> load;
  for (const auto& m : live) load[m] = 0;
  ShardMap next;
  next.holder.resize(static_cast<size_t>(slots));
  for (int s = 0; s < slots; ++s) {
    const int cap = (s + n) / n;  // ceil((s + 1) / n)
    const std::string current = s < static_cast<int>(old.holder.size()) ? old.holder[s] : "";
    auto it = load.find(current);
    if (it == load.end() || it->second >= cap) {
      const std::string* least = &live[0];
      for (const auto& m : live)
        if (load[m] < load[*least]) least = &m;
      it = load.find(*least);
    }
    ++it->second;
    next.holder[s] = it->first;
  }
  next.from.assign(next.holder.size(), "");
  next.lost_after.assign(next.holder.size(), 0);
  for (int s = 0; s < slots && s < static_cast<int>(old.lost_after.size()); ++s) next.lost_after[s] = old.lost_after[s];
  return next;
}

}  // namespace cluster
}  // namespace sf
