// What operators ask of a cluster's etcd (include/shardflow/cluster.h).
#include <unistd.h>

#include "cluster/etcd_process.h"
#include "cluster/member_registry.h"
#include "cluster/placement_leader.h"
#include "shardflow/cluster.h"

namespace sf {

Result<std::vector<MemberInfo>> ListEtcdMembers(const std::string& etcd, const std::string& tls_dir,
                                                const std::string& cluster, const std::string& tls_name,
                                                bool insecure) {
  std::optional<net::Credential> credential;
  if (!insecure) {
    if (tls_dir.empty()) return InvalidArgument("no credentials: give a directory made by `shardflow certs init`");
    SF_ASSIGN_OR_RETURN(credential, net::LoadCredential(tls_dir, tls_name.empty() ? "session" : tls_name));
  }
  SF_ASSIGN_OR_RETURN(auto records, cluster::ReadMembers(etcd, credential, cluster));
  std::vector<MemberInfo> out;
  for (const cluster::MemberRecord& r : records)
    out.push_back({r.name, r.address, static_cast<uint64_t>(r.life), r.leaving ? "leaving" : "alive"});
  return out;
}

Result<ShardMapInfo> ReadClusterMap(const std::string& etcd, const std::string& tls_dir, const std::string& cluster,
                                    const std::string& tls_name, bool insecure) {
  std::optional<net::Credential> credential;
  if (!insecure) {
    if (tls_dir.empty()) return InvalidArgument("no credentials: give a directory made by `shardflow certs init`");
    SF_ASSIGN_OR_RETURN(credential, net::LoadCredential(tls_dir, tls_name.empty() ? "session" : tls_name));
  }
  SF_ASSIGN_OR_RETURN(cluster::ShardMap m, cluster::ReadShardMap(etcd, credential, cluster));
  m.backup.resize(m.holder.size());
  m.synced.resize(m.holder.size());
  return ShardMapInfo{m.epoch, m.holder, m.from, m.lost_after, m.backup, m.synced};
}

}  // namespace sf

namespace sf {

struct LocalEtcd::Impl {
  explicit Impl(cluster::EtcdProcessOptions o) : process(std::move(o)) {}
  cluster::EtcdProcess process;
  std::string endpoint;
};

Result<std::unique_ptr<LocalEtcd>> LocalEtcd::Start(const std::string& tls_dir, bool insecure) {
  cluster::EtcdProcessOptions o;
  o.credentials_dir = tls_dir;
  o.plaintext = insecure;
  if (::access(o.etcd_binary.c_str(), X_OK) != 0)
    return NotFound("etcd is not installed at " + o.etcd_binary + " (apt-get install etcd-server; scripts/setup does)");
  auto impl = std::make_unique<Impl>(std::move(o));
  SF_RETURN_IF_ERROR(impl->process.Start());
  impl->endpoint = impl->process.endpoint();
  // Who may write what in etcd is etcd's to enforce (cluster/cluster_auth.h).
  if (!insecure) SF_RETURN_IF_ERROR(EnableClusterAuth(impl->endpoint, tls_dir).WithPrefix("etcd authentication"));
  return std::unique_ptr<LocalEtcd>(new LocalEtcd(std::move(impl)));
}

LocalEtcd::LocalEtcd(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LocalEtcd::~LocalEtcd() = default;
const std::string& LocalEtcd::endpoint() const { return impl_->endpoint; }
Status LocalEtcd::Pause() { return impl_->process.Pause(); }
Status LocalEtcd::Resume() { return impl_->process.Resume(); }
Status LocalEtcd::Restart() { return impl_->process.Restart(); }
Status LocalEtcd::Kill() { return impl_->process.Kill(); }

}  // namespace sf
