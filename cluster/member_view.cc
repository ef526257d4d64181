// What a node tells its sessions about the membership (cluster/member_view.h).
#include "cluster/member_view.h"

#include <algorithm>

namespace sf {
namespace cluster {

namespace {

bool Same(const net::Member& a, const net::Member& b) {
  return a.name == b.name && a.address == b.address && a.incarnation == b.incarnation;
}

}  // namespace

MemberView::MemberView(net::Member self) { members_.push_back(std::move(self)); }

void MemberView::SetSelf(const std::string& name, const std::string& address) {
  std::lock_guard<std::mutex> l(mu_);
  members_[0].name = name;
  members_[0].address = address;
}

bool MemberView::Update(const std::vector<MemberRecord>& records, bool* self_leaving,
                        const std::function<void(const std::string&)>& log) {
  std::vector<std::string> lines;
  bool changed = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    const std::string self = members_[0].address;
    std::vector<net::Member> next;
    std::set<std::string> next_leaving;
    next.push_back(members_[0]);
    *self_leaving = false;
    for (const MemberRecord& r : records) {
      if (r.address == self) {
        next[0].incarnation = static_cast<uint64_t>(r.life);
        *self_leaving = r.leaving;
      } else {
        next.push_back({r.name, r.address, static_cast<uint64_t>(r.life)});
      }
      if (r.leaving) next_leaving.insert(r.address);
    }
    // A drain this node started is kept until etcd says so too.
    if (leaving_.count(self)) next_leaving.insert(self);
    changed = next.size() != members_.size() || next_leaving != leaving_ ||
              !std::equal(next.begin(), next.end(), members_.begin(), Same);
    for (const net::Member& m : next)
      if (m.address != self && std::none_of(members_.begin(), members_.end(), [&](const net::Member& k) { return Same(k, m); }))
        lines.push_back("member " + m.name + " (" + m.address + ") joined");
    for (const net::Member& k : members_)
      if (k.address != self && std::none_of(next.begin(), next.end(), [&](const net::Member& m) { return Same(k, m); }))
        lines.push_back("member " + k.name + " (" + k.address + ") left");
    members_ = std::move(next);
    leaving_ = std::move(next_leaving);
  }
  if (log)
    for (const auto& line : lines) log(line);
  return changed;
}

void MemberView::MarkSelfLeaving() {
  std::lock_guard<std::mutex> l(mu_);
  leaving_.insert(members_[0].address);
}

std::vector<net::Member> MemberView::Members() const {
  std::lock_guard<std::mutex> l(mu_);
  return members_;
}

net::Membership MemberView::Snapshot() const {
  std::lock_guard<std::mutex> l(mu_);
  net::Membership m;
  m.members = members_;
  for (const net::Member& k : members_)
    if (leaving_.count(k.address)) m.leaving.push_back(k);
  m.map_slots = map_slots_;
  m.map_epoch = map_.epoch;
  m.map_holder = map_.holder;
  m.map_from = map_.from;
  m.map_lost_after = map_.lost_after;
  return m;
}

void MemberView::SetMapSlots(int slots) {
  std::lock_guard<std::mutex> l(mu_);
  map_slots_ = slots;
}

bool MemberView::SetMap(const ShardMap& map) {
  std::lock_guard<std::mutex> l(mu_);
  if (map.epoch <= map_.epoch) return false;
  map_ = map;
  return true;
}

void MemberView::Watch(const net::ConnectionPtr& c) {
  std::lock_guard<std::mutex> l(mu_);
  bool known = false;
  watchers_.erase(std::remove_if(watchers_.begin(), watchers_.end(),
                                 [&](const std::weak_ptr<net::Connection>& w) {
                                   auto p = w.lock();
                                   known = known || p == c;
                                   return !p || !p->is_up();
                                 }),
                  watchers_.end());
  if (!known && watchers_.size() < kMaxWatchers) watchers_.push_back(c);
}

void MemberView::NotifyWatchers() {
  std::vector<net::ConnectionPtr> to;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = watchers_.begin(); it != watchers_.end();) {
      auto c = it->lock();
      if (c && c->is_up()) {
        to.push_back(std::move(c));
        ++it;
      } else {
        it = watchers_.erase(it);
      }
    }
  }
  const net::Membership view = Snapshot();
  // A client that went away needs no news; its down handler cleans up.
  for (const auto& c : to) (void)net::Tell(c, view);
}

}  // namespace cluster
}  // namespace sf
