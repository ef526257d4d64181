// The cluster's membership as etcd holds it: one key per live node,
// PREFIX/members/NAME, attached to the node's lease (so it vanishes when the
// node dies or hangs past its TTL), whose value is the node's address and
// state. MemberTable folds a range read and then watch events into the list
// every node serves its sessions; it is a pure state machine (no I/O), tested
// without etcd (tests/cluster/member_table_test.cc).
//
// Thread-safety: plain values; a MemberTable is used under its owner's lock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cluster/etcd_types.h"
#include "shardflow/status.h"

namespace sf {
namespace cluster {

// One member: a node that holds its key.
struct MemberRecord {
  std::string name;
  std::string address;   // "host:port" it listens on
  bool leaving = false;  // draining: sessions move its tasks away
  int64_t lease = 0;     // the lease its key is attached to
  // The revision that created its key: its life (a node that restarts, or
  // re-registers after losing its lease, gets a new one).
  int64_t life = 0;
};

// True for a node name etcd's member keys can hold: [A-Za-z0-9._@:-]{1,64}
// (the default, node@HOST:PORT, is one).
bool ValidMemberName(const std::string& name);
// The etcd key prefix of cluster `cluster`'s state: "/shardflow/CLUSTER/".
// InvalidArgument unless cluster is [A-Za-z0-9._-]{1,64}.
Result<std::string> ClusterPrefix(const std::string& cluster);
// The key of member `name` under prefix.
std::string MemberKey(const std::string& prefix, const std::string& name);
// The value stored for a member: "v1 ADDRESS alive|leaving".
std::string EncodeMemberValue(const std::string& address, bool leaving);
// The member a key of prefix's members holds; InvalidArgument naming the
// key when its name or value is malformed (written by something else).
Result<MemberRecord> DecodeMember(const std::string& prefix, const EtcdKeyValue& kv);

class MemberTable {
 public:
  explicit MemberTable(std::string prefix) : prefix_(std::move(prefix)) {}

  // Replaces the table with the keys of a range read of the members prefix.
  // Malformed keys are skipped and listed in *bad (may be null).
  void Reset(const std::vector<EtcdKeyValue>& kvs, std::vector<std::string>* bad = nullptr);
  // Applies one watch response; true when the members or their states
  // changed. Malformed keys are skipped (listed in *bad). An error event
  // changes nothing: the owner re-reads (Reset) and watches again.
  bool Apply(const std::vector<EtcdWatchEvent>& events, std::vector<std::string>* bad = nullptr);

  // The members in the order they joined (by life), each once.
  std::vector<MemberRecord> Members() const;
  // The member named name, or null.
  const MemberRecord* Find(const std::string& name) const;
  // The member listening at address, or null.
  const MemberRecord* FindAddress(const std::string& address) const;
  const std::string& prefix() const { return prefix_; }

 private:
  std::string prefix_;
  std::map<std::string, MemberRecord> by_name_;
};

}  // namespace cluster
}  // namespace sf
