// The placement leader and the shard map's follower (cluster/placement_leader.h).
#include "cluster/placement_leader.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "cluster/etcd_client.h"
#include "cluster/etcd_election.h"

namespace sf {
namespace cluster {

namespace {

// The map a key holds (epoch: its mod_revision); an empty map for none.
Result<ShardMap> MapOf(const std::optional<EtcdKeyValue>& kv) {
  if (!kv) return ShardMap{};
  SF_ASSIGN_OR_RETURN(ShardMap m, DecodeShardMap(kv->value));
  m.epoch = kv->mod_revision;
  return m;
}

}  // namespace

struct PlacementLeader::Impl {
  PlacementOptions o;
  std::string prefix, map_key;
  std::unique_ptr<EtcdClient> etcd;

  mutable std::mutex mu;
  std::condition_variable cv;
  ShardMap map;                          // GUARDED_BY(mu): the newest seen
  std::vector<MemberRecord> members;     // GUARDED_BY(mu)
  bool members_known = false;            // GUARDED_BY(mu)
  bool dirty = true;                     // GUARDED_BY(mu): replan on the next turn
  bool stopping = false;                 // GUARDED_BY(mu)
  bool watch_broken = false;             // GUARDED_BY(mu)
  bool lease_lost = false;               // GUARDED_BY(mu)
  EtcdElection* election = nullptr;      // GUARDED_BY(mu): the campaign's, to cancel it
  std::atomic<bool> leading{false};
  // Fencing token of the current leadership (its key and create_revision);
  // written by the campaign thread while leading is false.
  std::string leader_key;
  int64_t leader_revision = 0;
  bool sync_wanted = true;               // GUARDED_BY(mu): look for unsynced backups
  // Backups the sync thread copied, by slot: {holder, backup}. The work
  // thread, the map's only writer, marks them synced while the map still
  // names the same pair.
  std::map<int, std::pair<std::string, std::string>> copied;  // GUARDED_BY(mu)
  std::unique_ptr<EtcdWatch> watch;  // the work thread's (and Start's)
  std::thread campaign_thread, work_thread, sync_thread;
  std::mutex notify_mu;  // on_map one at a time, in order

  void Log(const std::string& line) const {
    if (o.log) o.log(line);
  }

  void Seen(const ShardMap& m) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (m.epoch < map.epoch) return;
      map = m;
      dirty = true;
      sync_wanted = true;
      cv.notify_all();
    }
    std::lock_guard<std::mutex> n(notify_mu);
    if (o.on_map) o.on_map(m);
  }

  // Reads the map and watches it from there.
  Status Rewatch() {
    SF_ASSIGN_OR_RETURN(EtcdRangeResult r, etcd->Range(map_key));
    std::optional<EtcdKeyValue> kv;
    for (auto& k : r.kvs)
      if (k.key == map_key) kv = k;
    auto m = MapOf(kv);
    if (m.ok()) Seen(*m);
    else Log("the shard map in etcd does not parse: " + m.status().ToString());
    SF_ASSIGN_OR_RETURN(watch, etcd->WatchKey(map_key, r.revision + 1, [this](const std::vector<EtcdWatchEvent>& evs) {
      for (const auto& e : evs) {
        if (e.type == EtcdWatchEvent::Type::kError) {
          Log("shard map watch ended: " + e.error.message());
          std::lock_guard<std::mutex> l(mu);
          watch_broken = true;
          cv.notify_all();
          return;
        }
        if (e.type != EtcdWatchEvent::Type::kPut) continue;
        auto m = MapOf(e.kv);
        if (m.ok()) Seen(*m);
        else Log("the shard map in etcd does not parse: " + m.status().ToString());
      }
    }));
    return Status::OK();
  }

  // Campaigns until it leads, leads until its lease is lost, and again, until Stop.
  void CampaignLoop() {
    while (true) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (stopping) return;
        lease_lost = false;
      }
      auto lease = etcd->GrantLease(o.lease_ttl_s);
      std::unique_ptr<EtcdKeepAlive> keepalive;
      if (lease.ok()) {
        auto ka = etcd->KeepAlive(*lease, [this](const Status& why) {
          Log("placement leader lease lost: " + why.message());
          leading = false;
          std::lock_guard<std::mutex> l(mu);
          lease_lost = true;
          if (election) election->Cancel();
          cv.notify_all();
        });
        if (ka.ok()) keepalive = std::move(*ka);
      }
      if (!keepalive) {
        std::unique_lock<std::mutex> l(mu);
        cv.wait_for(l, std::chrono::milliseconds(500), [&] { return stopping; });
        continue;
      }
      EtcdElection e(etcd.get(), prefix + "leader", o.name);
      {
        std::lock_guard<std::mutex> l(mu);
        if (stopping) break;
        election = &e;
      }
      Status won = e.Campaign(o.address, lease->id, std::chrono::hours(24 * 365));
      if (won.ok()) {
        leader_key = e.key();
        leader_revision = e.revision();
        leading = true;
        Log("placement leader");
        std::unique_lock<std::mutex> l(mu);
        dirty = true;
        sync_wanted = true;
        cv.notify_all();
        cv.wait(l, [&] { return stopping || lease_lost; });
      }
      leading = false;
      {
        std::lock_guard<std::mutex> l(mu);
        election = nullptr;
      }
      if (won.ok()) (void)e.Resign();  // a successor need not wait for the lease's end
      keepalive.reset();
      (void)etcd->RevokeLease(lease->id);
    }
  }

  void WorkLoop() {
    std::unique_lock<std::mutex> l(mu);
    while (!stopping) {
      cv.wait_for(l, std::chrono::milliseconds(1000), [&] { return stopping || watch_broken || (leading && dirty); });
      if (stopping) break;
      if (watch_broken) {
        watch_broken = false;
        l.unlock();
        watch.reset();
        Status s = Rewatch();
        l.lock();
        if (!s.ok()) {
          Log("watching the shard map again failed: " + s.ToString());
          watch_broken = true;
          cv.wait_for(l, std::chrono::milliseconds(200), [&] { return stopping; });
        }
        continue;
      }
      if (!leading || !members_known) continue;
      dirty = false;
      l.unlock();
      Status s = Reconcile();
      l.lock();
      if (!s.ok()) {
        Log("placement: " + s.ToString());
        dirty = true;
        cv.wait_for(l, std::chrono::milliseconds(200), [&] { return stopping; });
      }
    }
  }

  // Writes m if the map is still at revision `expected` (0: absent) and this
  // node still leads; the map's new epoch, or Aborted.
  Result<int64_t> Write(const ShardMap& m, int64_t expected) {
    std::vector<EtcdCompare> cmp{EtcdCompare::CreateRevision(leader_key, EtcdCompare::Op::kEqual, leader_revision)};
    cmp.push_back(expected == 0 ? EtcdCompare::CreateRevision(map_key, EtcdCompare::Op::kEqual, 0)
                                : EtcdCompare::ModRevision(map_key, EtcdCompare::Op::kEqual, expected));
    SF_ASSIGN_OR_RETURN(EtcdTxnResult r, etcd->Txn(cmp, {EtcdOp::Put(map_key, EncodeShardMap(m))}, {}));
    if (!r.succeeded) return Aborted("the shard map changed, or this node no longer leads");
    return r.revision;
  }

  // One planning turn of the leader (see the header).
  Status Reconcile() {
    std::vector<std::string> live;
    std::set<std::string> alive;
    {
      std::lock_guard<std::mutex> l(mu);
      for (const auto& m : members) {
        alive.insert(m.address);
        if (!m.leaving) live.push_back(m.address);
      }
    }
    if (live.empty()) return Status::OK();  // nowhere to place anything
    SF_ASSIGN_OR_RETURN(auto kv, etcd->Get(map_key));
    auto read = MapOf(kv);
    ShardMap cur = read.ok() ? *read : ShardMap{};
    if (!read.ok()) Log("replacing a shard map that does not parse: " + read.status().ToString());
    // Holders etcd does not list may still run with their state intact:
    // those that answer count as alive (moved with a copy, not lost).
    if (o.answers) {
      std::set<std::string> asked;
      auto ask = [&](const std::string& h) {
        if (h.empty() || alive.count(h) || !asked.insert(h).second) return;
        if (o.answers(h)) alive.insert(h);
      };
      for (const auto& h : cur.holder) ask(h);
      for (const auto& f : cur.from) ask(f);
    }
    const int64_t rev = kv ? kv->mod_revision : 0;
    ShardMap base = cur;
    base.holder.resize(static_cast<size_t>(o.slots));
    base.from.resize(static_cast<size_t>(o.slots));
    base.lost_after.resize(static_cast<size_t>(o.slots));
    base.backup.resize(static_cast<size_t>(o.slots));
    base.synced.resize(static_cast<size_t>(o.slots));
    base.handover.resize(static_cast<size_t>(o.slots));
    int marked = 0;
    {
      std::lock_guard<std::mutex> l(mu);
      for (auto it = copied.begin(); it != copied.end();) {
        const int s = it->first;
        if (s >= o.slots || base.holder[s] != it->second.first || base.backup[s] != it->second.second ||
            !base.from[s].empty() || base.synced[s]) {
          it = copied.erase(it);  // written already, or of no use now
          continue;
        }
        base.synced[s] = 1;
        ++marked;
        ++it;
      }
    }
    // A dead holder's synced backup takes its place: it holds every change
    // the holder acknowledged.
    for (int s = 0; s < o.slots; ++s) {
      if (base.holder[s].empty() || alive.count(base.holder[s]) || !base.from[s].empty()) continue;
      if (base.backup[s].empty() || !base.synced[s] || !alive.count(base.backup[s])) continue;
      Log("slot " + std::to_string(s) + ": backup " + base.backup[s] + " takes the place of " + base.holder[s]);
      base.holder[s] = base.backup[s];
      base.backup[s].clear();
      base.synced[s] = 0;
    }
    // Moves a predecessor (or an earlier turn) left unfinished.
    std::vector<int> finish;
    for (int s = 0; s < o.slots; ++s) {
      if (base.from[s].empty()) continue;
      const bool to_ok = std::count(live.begin(), live.end(), base.holder[s]) > 0, from_ok = alive.count(base.from[s]);
      if (to_ok && from_ok) finish.push_back(s);
      else if (from_ok) base.holder[s] = base.from[s];  // its target is gone: it stays
      // Its old holder died mid-move: what it held is lost, unless the new
      // holder was its synced backup (a handover).
      else if (!base.handover[s]) base.lost_after[s] = cur.epoch;
      if (!(to_ok && from_ok)) {
        base.from[s].clear();
        base.handover[s] = 0;
      }
    }
    for (int s : finish)
      if (base.handover[s]) HandOver(s, base.from[s], base.holder[s], cur.epoch);
      else SF_RETURN_IF_ERROR(o.move(s, base.from[s], base.holder[s], cur.epoch));
    for (int s : finish) {
      base.from[s].clear();
      base.handover[s] = 0;
    }
    ShardMap next = PlanShardMap(base, live, o.slots, o.replicas);
    for (int s = 0; s < o.slots; ++s)
      if (!base.holder[s].empty() && base.holder[s] != next.holder[s] && !alive.count(base.holder[s]) && cur.epoch > 0)
        next.lost_after[s] = cur.epoch;  // its holder died: nothing to copy
    return MoveWhileServing(base, std::move(next), alive, cur, rev, marked);
  }

  // Moves that copy while the old holder serves: a slot's new holder first
  // becomes its backup and is synced (by the sync thread) while the old one
  // serves on. Once synced, a handover: the map names both ends (sessions
  // stop placing steps there), after a grace the old holder fences the slot
  // and waits for its runs, whose changes reached the new holder before they
  // ended, so nothing is copied; then the map names the new holder alone.
  Status MoveWhileServing(const ShardMap& base, ShardMap next, const std::set<std::string>& alive,
                          const ShardMap& cur, int64_t rev, int marked) {
    int handed = 0, staged = 0;
    for (int s = 0; s < o.slots; ++s) {
      const std::string& old = base.holder[s];
      if (old.empty() || old == next.holder[s] || !alive.count(old)) continue;
      if (base.backup[s] == next.holder[s] && base.synced[s]) {
        // Ready: handed over (below).
        next.from[s] = old;
        next.handover[s] = 1;
        ++handed;
        continue;
      }
      // Not ready: it stays while its new holder is copied as its backup.
      next.backup[s] = next.holder[s];
      next.synced[s] = base.backup[s] == next.holder[s] ? base.synced[s] : 0;
      next.holder[s] = old;
      ++staged;
    }
    if (next == cur) return Status::OK();
    SF_ASSIGN_OR_RETURN(int64_t e1, Write(next, rev));
    Log("shard map epoch " + std::to_string(e1) + ": " + std::to_string(marked) + " backups synced, " +
        std::to_string(handed) + " slots handed over, " + std::to_string(staged) +
        " being copied to their new holders");
    if (handed == 0) return Status::OK();
    // Sessions stop placing steps on the old holders; each then fences its
    // slot, waits for the slot's runs (their changes reach the new holder,
    // its backup, before they end) and copies nothing.
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait_for(l, std::chrono::milliseconds(o.move_grace_ms), [&] { return stopping; });
      if (stopping) return Aborted("stopping");
    }
    for (int s = 0; s < o.slots; ++s)
      if (next.handover[s]) HandOver(s, next.from[s], next.holder[s], e1);
    for (int s = 0; s < o.slots; ++s) {
      next.from[s].clear();
      next.handover[s] = 0;
    }
    SF_ASSIGN_OR_RETURN(int64_t e2, Write(next, e1));
    Log("shard map epoch " + std::to_string(e2) + ": " + std::to_string(handed) + " slots moved");
    return Status::OK();
  }

  // The old holder's part of a handover. Its failure (the old holder hung
  // or died mid-call) stops nothing: the new holder already has every
  // acknowledged change, and the old holder's later runs cannot be
  // acknowledged (their rounds are refused once the map names it no more,
  // and it fences the slot when it reads that map).
  void HandOver(int slot, const std::string& from, const std::string& to, int64_t epoch) {
    Status s = o.hand_over ? o.hand_over(slot, from, to, epoch) : o.move(slot, from, to, epoch);
    if (!s.ok())
      Log("slot " + std::to_string(slot) + " handed over to " + to + " without " + from + "'s fence: " +
          s.ToString());
  }

  // The sync thread: while leading, has each slot's holder copy its state
  // to an unsynced backup (a new one, or a move's new holder), one slot at
  // a time, and marks each synced as soon as it is; copies never hold up
  // the work thread's failovers.
  void SyncLoop() {
    std::unique_lock<std::mutex> l(mu);
    while (!stopping) {
      cv.wait_for(l, std::chrono::milliseconds(1000), [&] { return stopping || (leading && sync_wanted); });
      if (stopping) break;
      if (!leading || !sync_wanted) continue;
      sync_wanted = false;
      l.unlock();
      Status s = SyncBackups();
      l.lock();
      if (!s.ok()) {
        Log("placement: " + s.ToString());
        sync_wanted = true;
        cv.wait_for(l, std::chrono::milliseconds(500), [&] { return stopping; });
      }
    }
  }

  // One pass over the map in etcd: syncs each unsynced backup of a slot
  // that is not moving, and hands each copied one to the work thread to
  // mark (so that a copied slot can swap while the next one is copied);
  // the first error (a failed copy stays unsynced, tried again later).
  Status SyncBackups() {
    SF_ASSIGN_OR_RETURN(auto kv, etcd->Get(map_key));
    SF_ASSIGN_OR_RETURN(ShardMap m, MapOf(kv));
    Status first;
    // The work thread hears of copies every 200 ms at most, and at the
    // pass's end: copies of empty slots (a cluster starting, a node joining
    // an idle one) end in one map write, not one each.
    auto last_told = std::chrono::steady_clock::now();
    bool untold = false;
    auto tell = [&] {
      std::lock_guard<std::mutex> l(mu);
      dirty = true;
      cv.notify_all();
      last_told = std::chrono::steady_clock::now();
      untold = false;
    };
    for (int s = 0; s < static_cast<int>(m.backup.size()) && s < static_cast<int>(m.holder.size()); ++s) {
      if (m.backup[s].empty() || (s < static_cast<int>(m.synced.size()) && m.synced[s])) continue;
      if (s < static_cast<int>(m.from.size()) && !m.from[s].empty()) continue;
      {
        std::lock_guard<std::mutex> l(mu);
        if (stopping || !leading) return Aborted("no longer the placement leader");
        auto c = copied.find(s);
        if (c != copied.end() && c->second == std::make_pair(m.holder[s], m.backup[s])) continue;
      }
      Status st = o.sync(s, m.holder[s], m.backup[s], m.epoch);
      if (!st.ok()) {
        if (first.ok()) first = st;
        continue;
      }
      {
        std::lock_guard<std::mutex> l(mu);
        copied[s] = {m.holder[s], m.backup[s]};
        untold = true;
      }
      if (std::chrono::steady_clock::now() - last_told >= std::chrono::milliseconds(200)) tell();
    }
    if (untold) tell();
    return first;
  }
};

Result<std::unique_ptr<PlacementLeader>> PlacementLeader::Start(PlacementOptions options) {
  if (options.slots < 1 || options.slots > kMaxSlots)
    return InvalidArgument("shard map slots " + std::to_string(options.slots) + " not in [1, " +
                           std::to_string(kMaxSlots) + "]");
  if (!options.move || !options.sync) return InvalidArgument("PlacementOptions::move and ::sync are required");
  auto impl = std::make_unique<Impl>();
  SF_ASSIGN_OR_RETURN(impl->prefix, ClusterPrefix(options.cluster));
  impl->map_key = impl->prefix + "map";
  impl->o = std::move(options);
  SF_ASSIGN_OR_RETURN(impl->etcd, ConnectEtcd(impl->o.etcd, impl->o.credential, impl->o.request_timeout_ms));
  SF_RETURN_IF_ERROR(impl->Rewatch().WithPrefix("following the shard map in etcd " + impl->o.etcd));
  Impl* p = impl.get();
  p->campaign_thread = std::thread([p] { p->CampaignLoop(); });
  p->work_thread = std::thread([p] { p->WorkLoop(); });
  p->sync_thread = std::thread([p] { p->SyncLoop(); });
  return std::unique_ptr<PlacementLeader>(new PlacementLeader(std::move(impl)));
}

PlacementLeader::PlacementLeader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PlacementLeader::~PlacementLeader() { Stop(); }

void PlacementLeader::Stop() {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->stopping = true;
    if (impl_->election) impl_->election->Cancel();
    impl_->cv.notify_all();
  }
  if (impl_->campaign_thread.joinable()) impl_->campaign_thread.join();
  if (impl_->work_thread.joinable()) impl_->work_thread.join();
  if (impl_->sync_thread.joinable()) impl_->sync_thread.join();
  impl_->watch.reset();
}

void PlacementLeader::SetMembers(const std::vector<MemberRecord>& members) {
  std::lock_guard<std::mutex> l(impl_->mu);
  impl_->members = members;
  impl_->members_known = true;
  impl_->dirty = true;
  impl_->cv.notify_all();
}

ShardMap PlacementLeader::Map() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->map;
}

bool PlacementLeader::leading() const { return impl_->leading; }

Status PlacementLeader::Refresh() {
  SF_ASSIGN_OR_RETURN(auto kv, impl_->etcd->Get(impl_->map_key));
  SF_ASSIGN_OR_RETURN(ShardMap m, MapOf(kv));
  impl_->Seen(m);
  return Status::OK();
}

Result<ShardMap> ReadShardMap(const std::string& etcd, const std::optional<net::Credential>& credential,
                              const std::string& cluster, int timeout_ms) {
  SF_ASSIGN_OR_RETURN(std::string prefix, ClusterPrefix(cluster));
  SF_ASSIGN_OR_RETURN(auto client, ConnectEtcd(etcd, credential, timeout_ms));
  auto kv = client->Get(prefix + "map");
  if (!kv.ok()) return kv.status().WithPrefix("reading the shard map from etcd " + etcd);
  return MapOf(*kv);
}

}  // namespace cluster
}  // namespace sf
