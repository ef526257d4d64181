#include "cluster/task_balance.h"

#include <map>

namespace sf {
namespace runtime {

std::vector<std::string> BalanceTasks(const std::vector<std::string>& old,
                                      const std::vector<std::string>& members) {
  std::map<std::string, std::vector<int>> load;
  for (const auto& m : members) load[m];
  std::vector<std::string> out(old.size());
  std::vector<int> homeless;
  for (size_t t = 0; t < old.size(); ++t) {
    if (load.count(old[t])) {
      load[old[t]].push_back(static_cast<int>(t));
      out[t] = old[t];
    } else {
      homeless.push_back(static_cast<int>(t));
    }
  }
  auto least = [&] {
    const std::string* best = &members[0];
    for (const auto& m : members)
      if (load[m].size() < load[*best].size()) best = &m;
    return *best;
  };
  auto most = [&] {
    const std::string* best = &members[0];
    for (const auto& m : members)
      if (load[m].size() > load[*best].size()) best = &m;
    return *best;
  };
  for (int t : homeless) {
    const std::string m = least();
    load[m].push_back(t);
    out[t] = m;
  }
  for (;;) {
    const std::string hi = most(), lo = least();
    if (load[hi].size() <= load[lo].size() + 1) break;
    const int t = load[hi].back();  // the highest task moves: the low ones stay put
    load[hi].pop_back();
    load[lo].push_back(t);
    out[t] = lo;
  }
  return out;
}

}  // namespace runtime
}  // namespace sf
