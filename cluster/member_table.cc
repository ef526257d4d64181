// The cluster's membership folded from etcd (cluster/member_table.h).
#include "cluster/member_table.h"

#include <algorithm>
#include <cctype>

#include "net/peer_rpc.h"

namespace sf {
namespace cluster {

bool ValidMemberName(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '@' || c == ':'))
      return false;
  return true;
}

Result<std::string> ClusterPrefix(const std::string& cluster) {
  if (cluster.empty() || cluster.size() > 64 || cluster.find_first_not_of(
          "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != std::string::npos)
    return InvalidArgument("cluster name '" + cluster + "' is not [A-Za-z0-9._-]{1,64}");
  return "/shardflow/" + cluster + "/";
}

std::string MemberKey(const std::string& prefix, const std::string& name) { return prefix + "members/" + name; }

std::string EncodeMemberValue(const std::string& address, bool leaving) {
  return "v1 " + address + (leaving ? " leaving" : " alive");
}

Result<MemberRecord> DecodeMember(const std::string& prefix, const EtcdKeyValue& kv) {
  const std::string members = prefix + "members/";
  if (kv.key.compare(0, members.size(), members) != 0)
    return InvalidArgument("key '" + kv.key + "' is not under " + members);
  MemberRecord m;
  m.name = kv.key.substr(members.size());
  if (!ValidMemberName(m.name)) return InvalidArgument("member key '" + kv.key + "' has a malformed node name");
  const std::string& v = kv.value;
  const size_t a = v.find(' '), b = v.rfind(' ');
  if (v.compare(0, 3, "v1 ") != 0 || a == b)
    return InvalidArgument("member key '" + kv.key + "' holds '" + v.substr(0, 64) + "', not 'v1 ADDRESS STATE'");
  m.address = v.substr(a + 1, b - a - 1);
  const std::string state = v.substr(b + 1);
  std::string host;
  uint16_t port = 0;
  if (!net::ParseAddress(m.address, &host, &port).ok() || port == 0 || m.address.size() > 1024)
    return InvalidArgument("member key '" + kv.key + "' holds a malformed address '" + m.address.substr(0, 64) + "'");
  if (state != "alive" && state != "leaving")
    return InvalidArgument("member key '" + kv.key + "' holds state '" + state.substr(0, 32) + "'");
  m.leaving = state == "leaving";
  m.lease = kv.lease;
  m.life = kv.create_revision;
  return m;
}

void MemberTable::Reset(const std::vector<EtcdKeyValue>& kvs, std::vector<std::string>* bad) {
  by_name_.clear();
  for (const EtcdKeyValue& kv : kvs) {
    auto m = DecodeMember(prefix_, kv);
    if (!m.ok()) {
      if (bad) bad->push_back(m.status().message());
      continue;
    }
    by_name_[m->name] = std::move(*m);
  }
}

bool MemberTable::Apply(const std::vector<EtcdWatchEvent>& events, std::vector<std::string>* bad) {
  bool changed = false;
  const std::string members = prefix_ + "members/";
  for (const EtcdWatchEvent& e : events) {
    if (e.type == EtcdWatchEvent::Type::kError) continue;
    if (e.kv.key.compare(0, members.size(), members) != 0) continue;
    if (e.type == EtcdWatchEvent::Type::kDelete) {
      changed |= by_name_.erase(e.kv.key.substr(members.size())) > 0;
      continue;
    }
    auto m = DecodeMember(prefix_, e.kv);
    if (!m.ok()) {
      if (bad) bad->push_back(m.status().message());
      continue;
    }
    auto it = by_name_.find(m->name);
    if (it != by_name_.end() && it->second.address == m->address && it->second.leaving == m->leaving &&
        it->second.life == m->life) {
      it->second.lease = m->lease;
      continue;
    }
    by_name_[m->name] = std::move(*m);
    changed = true;
  }
  return changed;
}

std::vector<MemberRecord> MemberTable::Members() const {
  std::vector<MemberRecord> out;
  out.reserve(by_name_.size());
  for (const auto& [name, m] : by_name_) out.push_back(m);
  std::stable_sort(out.begin(), out.end(), [](const MemberRecord& a, const MemberRecord& b) { return a.life < b.life; });
  return out;
}

const MemberRecord* MemberTable::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

const MemberRecord* MemberTable::FindAddress(const std::string& address) const {
  for (const auto& [name, m] : by_name_)
    if (m.address == address) return &m;
  return nullptr;
}

}  // namespace cluster
}  // namespace sf
