// SlotNames (cluster/slot_state.h).
#include "cluster/slot_state.h"

#include <algorithm>

namespace sf {
namespace cluster {

void SlotNames::AddOwn(int slot, const std::set<std::string>& names) {
  std::lock_guard<std::mutex> l(mu_);
  own_[slot].insert(names.begin(), names.end());
}

void SlotNames::AddBackedUp(int slot, const std::set<std::string>& names) {
  std::lock_guard<std::mutex> l(mu_);
  own_[slot].insert(names.begin(), names.end());
  backed_[slot].insert(names.begin(), names.end());
}

std::set<std::string> SlotNames::StateOf(int slot, const std::function<bool(int)>& held_here) const {
  // The other slots backed up here, then (outside the lock: held_here may
  // read the map) those this node does not hold.
  std::vector<int> others;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!own_.count(slot)) return {};
    for (const auto& [other, backed] : backed_)
      if (other != slot && !backed.empty()) others.push_back(other);
  }
  std::vector<int> foreign;
  for (int other : others)
    if (!held_here(other)) foreign.push_back(other);
  std::lock_guard<std::mutex> l(mu_);
  auto it = own_.find(slot);
  if (it == own_.end()) return {};
  std::set<std::string> names = it->second;
  auto mine = backed_.find(slot);  // what this slot's own state brought here stays its own
  for (int other : foreign) {
    auto backed = backed_.find(other);
    if (backed == backed_.end()) continue;
    for (const std::string& n : backed->second)
      if (mine == backed_.end() || !mine->second.count(n)) names.erase(n);
  }
  return names;
}

std::set<int> SlotNames::SlotsOf(const std::vector<std::string>& names) const {
  std::lock_guard<std::mutex> l(mu_);
  std::set<int> slots;
  for (const auto& [slot, have] : own_)
    for (const auto& n : names)
      if (have.count(n)) {
        slots.insert(slot);
        break;
      }
  return slots;
}

void SlotNames::DropWhere(const std::function<bool(const std::string&)>& gone) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto* per_slot : {&own_, &backed_})
    for (auto& kv : *per_slot)
      for (auto it = kv.second.begin(); it != kv.second.end();) it = gone(*it) ? kv.second.erase(it) : std::next(it);
}

}  // namespace cluster
}  // namespace sf
