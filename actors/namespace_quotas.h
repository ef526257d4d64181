// What each namespace (graph/namespaces.h) may make a node hold: variables,
// hash tables, queues and bytes, counted as the node's stores define them
// and refused past the namespace's quota with ResourceExhausted naming it.
// A node shares one NamespaceQuotas between its variable and queue stores;
// in one process (Session) there is none and nothing is counted.
//
// Only what a session asks for is refused (a kernel resolving a variable or
// queue, a table's first init, a session's assign); state arriving from
// another node (a replica, a move, a restore the node does itself) is
// counted but never refused, so a backup can always follow its holder.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/hash_embedding.h"
#include "shardflow/status.h"

namespace sf {

struct NamespaceLimits {
  int64_t variables = int64_t{1} << 16;  // a quarter of a node's 262,144
  int64_t tables = 4096;
  int64_t queues = 4096;
  int64_t bytes = int64_t{16} << 30;
};

struct NamespaceUsage {
  std::string ns;  // "" for the default namespace
  int64_t variables = 0;
  int64_t tables = 0;
  int64_t queues = 0;
  int64_t bytes = 0;
};

class NamespaceQuotas {
 public:
  enum class Kind { kVariable, kTable, kQueue };
  explicit NamespaceQuotas(NamespaceLimits limits) : limits_(limits) {}

  // Counts one resource of kind (and bytes) for the namespace of stored name
  // `name`; with enforce, ResourceExhausted naming the namespace, the quota
  // and the resource when it does not fit (nothing counted then).
  Status Take(Kind kind, const std::string& name, int64_t bytes, bool enforce);
  // Adds bytes to the namespace of name (a value that grew); with enforce,
  // ResourceExhausted as Take when they do not fit (nothing counted then).
  Status TakeBytes(const std::string& name, int64_t bytes, bool enforce);
  // Forgets one resource of kind and its bytes (never below zero).
  void Give(Kind kind, const std::string& name, int64_t bytes);
  // Forgets bytes of the namespace of name (never below zero).
  void GiveBytes(const std::string& name, int64_t bytes);
  // What a hash shard of variable `name` (stored) grows its rows against:
  // the namespace's byte quota (kernels/hash_embedding.h).
  static std::shared_ptr<HashMemoryBudget> RowBudget(std::shared_ptr<NamespaceQuotas> quotas, std::string name);
  // Forgets everything counted for namespace ns ("" : the default).
  void Clear(const std::string& ns);
  // Every namespace with something counted, by name.
  std::vector<NamespaceUsage> Usage() const;
  const NamespaceLimits& limits() const { return limits_; }

 private:
  const NamespaceLimits limits_;
  mutable std::mutex mu_;
  std::map<std::string, NamespaceUsage> used_;  // GUARDED_BY(mu_)
};

// The keys of a name-keyed map (a store's ids) that keep selects, sorted.
template <class Map>
std::vector<std::string> SortedKeysWhere(const Map& by_name, const std::function<bool(const std::string&)>& keep) {
  std::vector<std::string> out;
  for (const auto& kv : by_name)
    if (keep(kv.first)) out.push_back(kv.first);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace sf
