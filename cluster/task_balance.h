// Which member runs each of a cluster session's logical tasks, when the
// members change (a pure function; cluster/cluster_session.cc calls it
// with steps paused).
#pragma once

#include <string>
#include <vector>

namespace sf {
namespace runtime {

// Spreads tasks over members keeping as many where they are as balance
// allows: tasks of members not in `members` go to the least loaded, then
// tasks move from the most to the least loaded until loads differ by at most
// one. Deterministic for equal inputs. REQUIRES: members non-empty.
// old[t] is task t's member now; returns each task's member after.
std::vector<std::string> BalanceTasks(const std::vector<std::string>& old,
                                      const std::vector<std::string>& members);

}  // namespace runtime
}  // namespace sf
