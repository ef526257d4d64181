// The operator's side of membership: etcd's authentication for a cluster,
// and draining a member by its mark in etcd (include/shardflow/cluster.h).
#include <condition_variable>
#include <mutex>

#include "cluster/cluster_auth.h"
#include "cluster/etcd_client.h"
#include "cluster/etcd_identity.h"
#include "cluster/member_table.h"
#include "shardflow/cluster.h"

namespace sf {

Status EnableClusterAuth(const std::string& etcd, const std::string& tls_dir, const std::string& cluster) {
  cluster::EtcdAuthOptions o;
  o.etcd = etcd;
  o.tls_dir = tls_dir;
  o.cluster = cluster;
  return cluster::EnableEtcdAuth(o).status();
}

Status DrainMember(const std::string& etcd, const std::string& tls_dir, const std::string& member, int wait_ms,
                   const std::string& cluster, const std::string& tls_name, bool insecure) {
  std::optional<net::Credential> credential;
  if (!insecure) {
    if (tls_dir.empty()) return InvalidArgument("no credentials: give a directory made by `shardflow certs init`");
    const std::string name = tls_name.empty() ? cluster::kAdminCredential : tls_name;
    auto admin = cluster::LoadAdminCredential(tls_dir, name);
    if (admin.ok()) {
      credential = std::move(*admin);
    } else {
      SF_ASSIGN_OR_RETURN(credential, net::LoadCredential(tls_dir, name));  // etcd decides what it may do
    }
  }
  SF_ASSIGN_OR_RETURN(const std::string prefix, cluster::ClusterPrefix(cluster));
  SF_ASSIGN_OR_RETURN(auto client, cluster::ConnectEtcd(etcd, credential, 5000));
  SF_ASSIGN_OR_RETURN(cluster::EtcdRangeResult r, client->Range(prefix + "members/"));
  cluster::MemberTable table(prefix);
  table.Reset(r.kvs);
  const cluster::MemberRecord* m = table.Find(member);
  if (!m) m = table.FindAddress(member);
  if (!m) return NotFound("draining " + member + ": etcd lists no such member of cluster '" + cluster + "'");
  const cluster::MemberRecord target = *m;
  // Under the member's lease: the mark ends with that life, so a node that
  // starts again under the name is not drained by an old mark.
  auto put = client->Put(cluster::DrainKey(prefix, target.name), "v1", target.lease);
  if (!put.ok()) return put.status().WithPrefix("draining " + target.name);
  if (wait_ms <= 0) return Status::OK();
  std::mutex mu;
  std::condition_variable cv;
  bool gone = false;
  const std::string key = cluster::MemberKey(prefix, target.name);
  auto watch = client->WatchKey(key, *put, [&](const std::vector<cluster::EtcdWatchEvent>& events) {
    for (const auto& e : events)
      if (e.type == cluster::EtcdWatchEvent::Type::kDelete ||
          (e.type == cluster::EtcdWatchEvent::Type::kPut && e.kv.create_revision != target.life)) {
        std::lock_guard<std::mutex> l(mu);
        gone = true;
        cv.notify_all();
      }
  });
  if (!watch.ok()) return watch.status().WithPrefix("waiting for " + target.name + " to leave");
  // It may have left before the watch began.
  auto now = client->Get(key);
  if (now.ok() && (!now->has_value() || (*now)->create_revision != target.life)) return Status::OK();
  std::unique_lock<std::mutex> l(mu);
  if (!cv.wait_for(l, std::chrono::milliseconds(wait_ms), [&] { return gone; }))
    return DeadlineExceeded("node " + target.name + " is still draining after " + std::to_string(wait_ms) + " ms");
  return Status::OK();
}

}  // namespace sf
