// A node's membership client over etcd (cluster/member_registry.h).
#include "cluster/member_registry.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "cluster/cluster_auth.h"
#include "cluster/etcd_client.h"

namespace sf {
namespace cluster {

struct MemberRegistry::Impl {
  MemberRegistryOptions o;
  std::string prefix;
  std::string key;
  std::unique_ptr<EtcdClient> etcd;

  mutable std::mutex mu;
  std::condition_variable cv;
  MemberTable table{""};  // GUARDED_BY(mu)
  EtcdLease lease;        // GUARDED_BY(mu)
  bool leaving = false;   // GUARDED_BY(mu)
  bool stopping = false;  // GUARDED_BY(mu)
  bool lease_lost = false;    // GUARDED_BY(mu): the keepalive said so; the thread registers again
  // GUARDED_BY(mu): it said so only because etcd did not answer for a TTL:
  // the lease may well live on (etcd keeps leases across its restarts).
  bool lease_maybe_alive = false;
  bool watch_broken = false;  // GUARDED_BY(mu): the watch ended; the thread re-reads and watches again
  std::deque<std::string> reports;  // GUARDED_BY(mu): addresses of members reported down, to revoke
  // Touched by Start and the registry thread only (Leave joins the thread first).
  std::unique_ptr<EtcdKeepAlive> keepalive;
  std::unique_ptr<EtcdWatch> watch;
  std::unique_ptr<EtcdWatch> drain_watch;  // the operator's drain mark for this node
  std::thread thread;
  std::mutex notify_mu;  // on_change and on_replaced one at a time, in order

  void Log(const std::string& line) const {
    if (o.log) o.log(line);
  }

  void Notify(const std::vector<MemberRecord>& members) {
    std::lock_guard<std::mutex> l(notify_mu);
    if (o.on_change) o.on_change(members);
  }

  // Grants a lease and creates this node's key under it. FailedPrecondition
  // (and *holder set) when another live node has the name; the call's error otherwise.
  Status Register(std::string* holder) {
    SF_ASSIGN_OR_RETURN(EtcdLease granted, etcd->GrantLease(o.lease_ttl_s));
    bool leave_state;
    {
      std::lock_guard<std::mutex> l(mu);
      leave_state = leaving;
    }
    const std::string value = EncodeMemberValue(o.address, leave_state);
    auto give_up = [&](Status s) {
      Status revoked = etcd->RevokeLease(granted.id);  // else its TTL ends it: nothing holds it
      if (!revoked.ok()) Log("revoking an unused lease: " + revoked.ToString());
      return s;
    };
    for (int attempt = 0; attempt < 4; ++attempt) {
      auto txn = etcd->Txn({EtcdCompare::CreateRevision(key, EtcdCompare::Op::kEqual, 0)},
                           {EtcdOp::Put(key, value, granted.id)}, {EtcdOp::Get(key)});
      if (!txn.ok()) return give_up(txn.status().WithPrefix("registering node " + o.name + " in etcd"));
      if (txn->succeeded) {
        Status kept = KeepLease(granted);
        if (!kept.ok()) return give_up(kept);
        std::lock_guard<std::mutex> l(mu);
        lease = granted;
        return Status::OK();
      }
      if (txn->ranges.empty() || txn->ranges[0].kvs.empty()) continue;  // gone meanwhile: try again
      const EtcdKeyValue& held = txn->ranges[0].kvs[0];
      auto m = DecodeMember(prefix, held);
      if (m.ok() && m->address != o.address) {
        *holder = o.name + " (" + m->address + ")";
        return give_up(FailedPrecondition("node name '" + o.name + "' is held by the live node at " + m->address +
                                     " in cluster '" + o.cluster + "': give this node another name"));
      }
      // An earlier life at this address (a restart before its lease
      // ended) or a malformed value: remove that key, then create ours, so
      // everyone sees a new life.
      auto del = etcd->Txn({EtcdCompare::ModRevision(key, EtcdCompare::Op::kEqual, held.mod_revision)},
                           {EtcdOp::Delete(key)}, {});
      if (!del.ok()) return give_up(del.status().WithPrefix("replacing an earlier life of node " + o.name));
    }
    return give_up(Aborted("node " + o.name + ": its key in etcd kept changing while registering"));
  }

  // Refreshes lease in the background until it is lost (lease_lost).
  Status KeepLease(const EtcdLease& l) {
    SF_ASSIGN_OR_RETURN(keepalive, etcd->KeepAlive(l, [this](const Status& why) {
      Log("lease lost: " + why.message());
      std::lock_guard<std::mutex> g(mu);
      lease_lost = true;
      lease_maybe_alive = why.code() == Code::kUnavailable;
      cv.notify_all();
    }));
    return Status::OK();
  }

  // After a keepalive gave up because etcd did not answer: true when the
  // lease still lives (etcd was down or restarting, not this node) and is
  // kept alive again, so this node stays the same member; false when it
  // ended (register again); the error while etcd still does not answer.
  Result<bool> Resume(const EtcdLease& l) {
    auto left = etcd->LeaseTimeToLive(l.id);
    if (!left.ok() && left.status().code() != Code::kNotFound) return left.status();
    if (!left.ok() || *left <= 0) return false;
    SF_RETURN_IF_ERROR(KeepLease(l));
    return true;
  }

  // Reads the members and watches them from that revision on; reports the list.
  Status Rewatch() {
    SF_ASSIGN_OR_RETURN(EtcdRangeResult r, etcd->Range(prefix + "members/"));
    std::vector<std::string> bad;
    std::vector<MemberRecord> now;
    {
      std::lock_guard<std::mutex> l(mu);
      table.Reset(r.kvs, &bad);
      now = table.Members();
    }
    for (const auto& b : bad) Log("ignoring " + b);
    SF_ASSIGN_OR_RETURN(watch, etcd->Watch(prefix + "members/", r.revision + 1,
                                           [this](const std::vector<EtcdWatchEvent>& evs) { OnEvents(evs); }));
    Notify(now);
    // The operator drains a node by marking it (only the operator's
    // credential may write another node's mark): the node then marks
    // itself leaving, as ClusterNode::Drain does.
    const std::string mark = DrainKey(prefix, o.name);
    SF_ASSIGN_OR_RETURN(EtcdRangeResult d, etcd->Range(mark));
    for (const auto& kv : d.kvs)
      if (kv.key == mark) OnDrainMark();
    auto on_mark = [this](const std::vector<EtcdWatchEvent>& evs) {
      for (const auto& e : evs) {
        if (e.type == EtcdWatchEvent::Type::kPut) OnDrainMark();
        if (e.type != EtcdWatchEvent::Type::kError) continue;
        std::lock_guard<std::mutex> l(mu);
        watch_broken = true;
        cv.notify_all();
      }
    };
    SF_ASSIGN_OR_RETURN(drain_watch, etcd->WatchKey(mark, d.revision + 1, on_mark));
    return Status::OK();
  }

  // Marks this node leaving in etcd, once: its own key, which every node watches.
  void OnDrainMark() {
    int64_t id = 0;
    {
      std::lock_guard<std::mutex> l(mu);
      if (leaving || stopping) return;
      leaving = true;
      id = lease.id;
    }
    Log("the operator marked this node to drain");
    auto r = etcd->Put(key, EncodeMemberValue(o.address, true), id);
    if (!r.ok()) Log("marking this node leaving: " + r.status().ToString());
  }

  void OnEvents(const std::vector<EtcdWatchEvent>& events) {
    std::vector<std::string> bad;
    std::vector<MemberRecord> now;
    bool changed = false;
    {
      std::lock_guard<std::mutex> l(mu);
      if (stopping) return;
      for (const auto& e : events)
        if (e.type == EtcdWatchEvent::Type::kError) {
          Log("membership watch ended: " + e.error.message());
          watch_broken = true;
          cv.notify_all();
        }
      changed = table.Apply(events, &bad);
      if (changed) now = table.Members();
    }
    for (const auto& b : bad) Log("ignoring " + b);
    if (changed) Notify(now);
  }

  // Registers again after a lost lease, and watches again after a broken
  // watch, with back-off, until Leave.
  void Loop() {
    std::unique_lock<std::mutex> l(mu);
    int backoff_ms = 100;
    while (true) {
      cv.wait(l, [&] { return stopping || lease_lost || watch_broken || !reports.empty(); });
      if (stopping) return;
      Status s;
      if (!reports.empty()) {
        const std::string address = std::move(reports.front());
        reports.pop_front();
        l.unlock();
        if (o.answers && o.answers(address)) {
          Log("member " + address + " answers: not reported down");
        } else {
          Status r = RevokeMember(address);
          Log(r.ok() ? "reported member " + address + " down" : r.ToString());
        }
        l.lock();
        continue;
      } else if (watch_broken) {
        watch_broken = false;
        l.unlock();
        watch.reset();
        drain_watch.reset();
        s = Rewatch();
        if (!s.ok()) Log("watching the members again failed: " + s.ToString());
        l.lock();
        if (!s.ok()) watch_broken = true;
      } else {
        lease_lost = false;
        const bool maybe_alive = lease_maybe_alive;
        const EtcdLease old = lease;
        l.unlock();
        keepalive.reset();
        std::string holder;
        bool resumed = false;
        bool still_maybe_alive = false;  // etcd has not said yet whether the old lease lives
        if (maybe_alive) {
          auto r = Resume(old);
          if (!r.ok()) s = r.status();
          still_maybe_alive = !r.ok();
          resumed = r.ok() && *r;
          if (resumed) Log("the lease outlived etcd's outage: still the same member");
        }
        if (s.ok() && !resumed) s = Register(&holder);
        if (!holder.empty()) {
          Log("replaced by " + holder + " while away; leaving");
          std::lock_guard<std::mutex> n(notify_mu);
          if (o.on_replaced) o.on_replaced(holder);
          l.lock();
          return;  // a replaced node registers no more
        }
        if (s.ok() && !resumed) Log("registered again as a new life");
        if (!s.ok()) Log("registering again failed: " + s.ToString());
        l.lock();
        if (!s.ok()) {
          lease_lost = true;
          lease_maybe_alive = still_maybe_alive;
        }
      }
      if (s.ok()) {
        backoff_ms = 100;
        continue;
      }
      cv.wait_for(l, std::chrono::milliseconds(backoff_ms), [&] { return stopping; });
      backoff_ms = std::min(backoff_ms * 2, 2000);
    }
  }

  // Ends the lease of the member at address, then its candidacy for
  // placement leader; OK when they ended already.
  Status RevokeMember(const std::string& address) {
    int64_t id = 0;
    std::string name;
    {
      std::lock_guard<std::mutex> l(mu);
      const MemberRecord* m = table.FindAddress(address);
      if (!m) return NotFound("no member listens at " + address);
      if (m->name == o.name) return InvalidArgument("a node does not report itself down");
      id = m->lease;
      name = m->name;
    }
    Status s = etcd->RevokeLease(id);
    if (s.code() == Code::kNotFound) s = Status::OK();  // it ended already
    SF_RETURN_IF_ERROR(s.WithPrefix("reporting the member at " + address + " down"));
    return EndCandidacy(name, address).WithPrefix("reporting the member at " + address + " down");
  }

  // Ends the candidacy of member name at address for placement leader
  // (LeaderKey): it is under a lease of its own, which would otherwise
  // outlive the member by up to its TTL (and etcd's expiry check), and a
  // dead leader would hold every failover that long. Its lease is revoked,
  // as the member's is: if it still runs (a false report), it finds its
  // leadership lost and campaigns again; the map is written only under the
  // leader key it created, so it cannot write as leader after this. OK when
  // it holds no candidacy (or one of another address: a new life's).
  Status EndCandidacy(const std::string& name, const std::string& address) {
    SF_ASSIGN_OR_RETURN(std::optional<EtcdKeyValue> kv, etcd->Get(LeaderKey(prefix, name)));
    if (!kv || kv->lease == 0 || kv->value != address) return Status::OK();
    Status s = etcd->RevokeLease(kv->lease);
    if (s.code() == Code::kNotFound) return Status::OK();
    return s.WithPrefix("ending its candidacy for placement leader");
  }

  void Leave() {
    int64_t id = 0;
    {
      std::lock_guard<std::mutex> l(mu);
      if (stopping) return;
      stopping = true;
      id = lease.id;
      cv.notify_all();
    }
    if (thread.joinable()) thread.join();
    keepalive.reset();
    watch.reset();
    drain_watch.reset();
    if (id != 0) {
      Status s = etcd->RevokeLease(id);
      if (!s.ok() && s.code() != Code::kNotFound) Log("revoking this node's lease: " + s.ToString());
    }
  }
};

Result<std::unique_ptr<MemberRegistry>> MemberRegistry::Start(MemberRegistryOptions options) {
  if (options.etcd.empty()) return InvalidArgument("no etcd endpoints");
  if (options.address.empty()) return InvalidArgument("a member needs an address");
  // Its name becomes an etcd key that every member decodes: one others
  // would skip as malformed is refused here, by name.
  if (!ValidMemberName(options.name))
    return InvalidArgument("node name '" + options.name.substr(0, 80) + "' is not [A-Za-z0-9._@:-]{1,64}");
  if (options.lease_ttl_s < 1) return InvalidArgument("lease TTL must be at least 1 s, not " +
                                                       std::to_string(options.lease_ttl_s));
  auto impl = std::make_unique<Impl>();
  SF_ASSIGN_OR_RETURN(impl->prefix, ClusterPrefix(options.cluster));
  impl->key = MemberKey(impl->prefix, options.name);
  impl->table = MemberTable(impl->prefix);
  SF_ASSIGN_OR_RETURN(impl->etcd, ConnectEtcd(options.etcd, options.credential, options.request_timeout_ms));
  impl->o = std::move(options);
  std::string holder;
  SF_RETURN_IF_ERROR(impl->Register(&holder));
  Status watched = impl->Rewatch();
  if (!watched.ok()) {
    impl->Leave();
    return watched.WithPrefix("watching the members in etcd");
  }
  Impl* p = impl.get();
  impl->thread = std::thread([p] { p->Loop(); });
  return std::unique_ptr<MemberRegistry>(new MemberRegistry(std::move(impl)));
}

MemberRegistry::MemberRegistry(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::string> MemberNameFromCredential(const net::Credential& credential, const std::string& name) {
  if (credential.name == "node") return name;  // the shared default credential names no one node
  if (name.empty() || name == credential.name) return credential.name;
  return InvalidArgument("--name " + name + ": this node's certificate is node " + credential.name +
                         "'s, and a node registers only under its certificate's name (leave --name out, or "
                         "issue it a credential of its own: shardflow certs issue DIR --role node --name " +
                         name + ")");
}
MemberRegistry::~MemberRegistry() { impl_->Leave(); }

Status MemberRegistry::SetLeaving() {
  int64_t id = 0;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->leaving = true;
    id = impl_->lease.id;
  }
  auto r = impl_->etcd->Put(impl_->key, EncodeMemberValue(impl_->o.address, true), id);
  return r.ok() ? Status::OK() : r.status().WithPrefix("marking node " + impl_->o.name + " leaving in etcd");
}

void MemberRegistry::ReportDownLater(const std::string& address) {
  std::lock_guard<std::mutex> l(impl_->mu);
  if (impl_->stopping || impl_->reports.size() >= 1024) return;  // bounded: members are few
  impl_->reports.push_back(address);
  impl_->cv.notify_all();
}

void MemberRegistry::Leave() { impl_->Leave(); }

Result<std::vector<MemberRecord>> ReadMembers(const std::string& etcd, const std::optional<net::Credential>& credential,
                                              const std::string& cluster, int timeout_ms) {
  SF_ASSIGN_OR_RETURN(std::string prefix, ClusterPrefix(cluster));
  SF_ASSIGN_OR_RETURN(auto client, ConnectEtcd(etcd, credential, timeout_ms));
  SF_ASSIGN_OR_RETURN(EtcdRangeResult r, client->Range(prefix + "members/"));
  MemberTable t(prefix);
  t.Reset(r.kvs);
  return t.Members();
}

}  // namespace cluster
}  // namespace sf
