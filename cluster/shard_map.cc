// The cluster's shard map (cluster/shard_map.h).
#include "cluster/shard_map.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace sf {
namespace cluster {

bool IsStaleEpoch(const Status& s) { return IsStaleShardMap(s); }

bool ShardMap::moving() const {
  for (const auto& f : from)
    if (!f.empty()) return true;
  return false;
}

bool ShardMap::operator==(const ShardMap& o) const {
  if (holder != o.holder || from != o.from || lost_after != o.lost_after) return false;
  for (size_t s = 0; s < holder.size(); ++s) {
    const bool ha = s < handover.size() && handover[s], hb = s < o.handover.size() && o.handover[s];
    if (ha != hb) return false;
    const std::string& a = s < backup.size() ? backup[s] : std::string();
    const std::string& b = s < o.backup.size() ? o.backup[s] : std::string();
    const bool sa = s < synced.size() && synced[s], sb = s < o.synced.size() && o.synced[s];
    if (a != b || sa != sb) return false;
  }
  return true;
}

std::string EncodeShardMap(const ShardMap& m) {
  std::string out = "v1 " + std::to_string(m.holder.size()) + "\n";
  for (size_t s = 0; s < m.holder.size(); ++s) {
    out += m.holder[s];
    if (s < m.backup.size() && !m.backup[s].empty())
      out += (s < m.synced.size() && m.synced[s] ? "+" : "+?") + m.backup[s];
    if (s < m.from.size() && !m.from[s].empty())
      out += (s < m.handover.size() && m.handover[s] ? "<=" : "<") + m.from[s];
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
    std::string from = lt == std::string::npos ? "" : line.substr(lt + 1);
    if (lt != std::string::npos) line.resize(lt);
    const bool handover = !from.empty() && from[0] == '=';
    if (handover) from.erase(0, 1);
    const size_t plus = line.find('+');
    std::string backup = plus == std::string::npos ? "" : line.substr(plus + 1);
    if (plus != std::string::npos) line.resize(plus);
    const bool synced = !backup.empty() && backup[0] != '?';
    if (!backup.empty() && backup[0] == '?') backup.erase(0, 1);
    if (line.empty() || (lt != std::string::npos && from.empty()) || (plus != std::string::npos && backup.empty()))
      return DataLoss(bad);
    m.holder.push_back(std::move(line));
    m.from.push_back(std::move(from));
    m.lost_after.push_back(lost);
    m.backup.push_back(std::move(backup));
    m.synced.push_back(synced ? 1 : 0);
    m.handover.push_back(handover ? 1 : 0);
  }
  return m;
}

ShardMap PlanShardMap(const ShardMap& old, const std::vector<std::string>& live, int slots, int replicas) {
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
      // Among the least loaded, the slot's synced backup: it takes the slot
      // over without a copy.
      if (s < static_cast<int>(old.backup.size()) && s < static_cast<int>(old.synced.size()) && old.synced[s]) {
        auto b = load.find(old.backup[s]);
        if (b != load.end() && b->second == it->second) it = b;
      }
    }
    ++it->second;
    next.holder[s] = it->first;
  }
  next.from.assign(next.holder.size(), "");
  next.handover.assign(next.holder.size(), 0);
  next.lost_after.assign(next.holder.size(), 0);
  for (int s = 0; s < slots && s < static_cast<int>(old.lost_after.size()); ++s) next.lost_after[s] = old.lost_after[s];
  next.backup.assign(next.holder.size(), "");
  next.synced.assign(next.holder.size(), 0);
  if (replicas < 2 || n < 2) return next;
  // Backups by the same greedy rule, never on the slot's holder.
  std::map<std::string, int> backups;
  for (const auto& m : live) backups[m] = 0;
  for (int s = 0; s < slots; ++s) {
    const int cap = (s + n) / n;
    const bool had = s < static_cast<int>(old.backup.size());
    const std::string current = had ? old.backup[s] : "";
    auto it = backups.find(current);
    if (it == backups.end() || current == next.holder[s] || it->second >= cap) {
      // The member after the holder in `live` (a ring: even when the
      // holders are), else the one with the fewest backups.
      const auto h = std::find(live.begin(), live.end(), next.holder[s]);
      it = backups.find(live[static_cast<size_t>((h - live.begin() + 1) % n)]);
      if (it->first == next.holder[s] || it->second >= cap) {
        it = backups.end();
        for (auto c = backups.begin(); c != backups.end(); ++c)
          if (c->first != next.holder[s] && (it == backups.end() || c->second < it->second)) it = c;
      }
    }
    ++it->second;
    next.backup[s] = it->first;
    // Still a copy of the same holder's state.
    next.synced[s] = had && it->first == current && s < static_cast<int>(old.holder.size()) &&
                     old.holder[s] == next.holder[s] && s < static_cast<int>(old.synced.size()) && old.synced[s];
  }
  return next;
}

}  // namespace cluster
}  // namespace sf
