#include "cluster/cluster_collectives.h"

#include <chrono>
#include <map>
#include <memory>
#include <utility>

#include "actors/collectives.h"

namespace sf {
namespace runtime {

// One message to the hub actor.
struct CollectiveHubMsg {
  enum Kind { kAddress, kContribute, kRoute, kWire, kAnnounce, kDown, kFailAll, kStop } kind = kStop;
  std::string key;        // kContribute, kRoute
  int64_t n = 0;          // kContribute
  int64_t rank = 0;       // kContribute; kRoute: the sending rank
  int64_t epoch = 0;      // kRoute: the sending actor's epoch
  Tensor value;           // kContribute
  std::function<void(Result<Tensor>)> done;  // kContribute
  CollectiveMsgPtr msg;   // kRoute
  net::CollectiveChunk chunk;  // kWire
  net::CollectiveAnnounce announce;  // kAnnounce
  const void* conn = nullptr;  // kWire, kAnnounce, kDown
  std::string address;    // kAddress, kDown
  Status why;             // kDown, kFailAll
};
using CollectiveHubMsgPtr = std::shared_ptr<CollectiveHubMsg>;

}  // namespace runtime
}  // namespace sf

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::CollectiveHubMsgPtr)

namespace sf {
namespace runtime {
namespace {

using HubActor = caf::typed_actor<caf::reacts_to<CollectiveHubMsgPtr>>;

struct HubState {
  struct Group {
    int64_t n = 0;
    // Restarts after failures. Bumped here when the group fails, raised to a
    // peer's when its chunk carries a higher one; chunks of older epochs
    // (from this node's old actors or a peer's) are dropped.
    int64_t epoch = 0;
    std::vector<std::string> where;        // by rank: its node's address ("" = not announced yet)
    std::vector<Status> down;              // by rank: its node went down (until announced again)
    std::vector<CollectiveRankActor> local;  // by rank: its actor, when it runs here
    std::vector<std::vector<CollectiveMsgPtr>> waiting;  // by rank: chunks for it, its node unknown
    int64_t last_ms = 0;                   // when a chunk or contribution last named it
  };
  ClusterCollectivesHooks hooks;
  std::string self;
  Status stopped;                              // non-OK once FailAll ran
  std::map<const void*, std::string> conn_addr;  // the node each connection's chunks came from
  std::map<std::string, Group> groups;
  int64_t swept_ms = 0;                        // when idle groups were last forgotten
};

// Groups a node keeps at most, and how long one no rank here ever used
// lives after its last message: a peer announcing groups without end
// cannot grow the hub without bound, nor keep a real group out for good.
constexpr size_t kMaxGroups = 4096;
constexpr int64_t kIdleGroupMs = 60000;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

using Hub = HubActor::stateful_pointer<HubState>;

int64_t Mod(int64_t a, int64_t n) { return ((a % n) + n) % n; }

void Log(Hub self, const std::string& line) {
  if (self->state.hooks.log) self->state.hooks.log(line);
}

// Forgets groups no rank of this node ever ran in that nothing named for
// kIdleGroupMs (what peers announced and never used); at most every 10 s.
void ForgetIdleGroups(Hub self, int64_t now) {
  if (now - self->state.swept_ms < 10000) return;
  self->state.swept_ms = now;
  for (auto it = self->state.groups.begin(); it != self->state.groups.end();) {
    bool local = false;
    for (const auto& a : it->second.local) local = local || static_cast<bool>(a);
    if (!local && now - it->second.last_ms >= kIdleGroupMs) it = self->state.groups.erase(it);
    else ++it;
  }
}

// The group `key` of size n, created on first use; null (and *error set)
// when this node knows it with another size, or holds kMaxGroups others.
HubState::Group* FindOrCreate(Hub self, const std::string& key, int64_t n, const std::string& who, Status* error) {
  const int64_t now = NowMs();
  auto it = self->state.groups.find(key);
  if (it == self->state.groups.end()) {
    ForgetIdleGroups(self, now);
    if (self->state.groups.size() >= kMaxGroups) {
      *error = ResourceExhausted("all-reduce group '" + key + "' (from " + who + ") refused: node " + self->state.self +
                                 " holds " + std::to_string(kMaxGroups) + " groups already");
      return nullptr;
    }
    HubState::Group g;
    g.n = n;
    g.where.resize(n);
    g.down.resize(n);
    g.local.resize(n);
    g.waiting.resize(n);
    it = self->state.groups.emplace(key, std::move(g)).first;
  }
  it->second.last_ms = now;
  if (it->second.n != n) {
    *error = InvalidArgument("all-reduce group '" + key + "' has " + std::to_string(it->second.n) +
                             " ranks on node " + self->state.self + " but " + who + " says " + std::to_string(n));
    return nullptr;
  }
  return &it->second;
}

// The actor of rank r of the group, spawned on first use. Its chunks come
// back to the hub tagged with the group's current epoch.
CollectiveRankActor& RankActor(Hub self, const std::string& key, HubState::Group& g, int64_t r) {
  if (!g.local[r]) {
    g.local[r] = SpawnCollectiveRank(self->system(), key, r, g.n);
    auto init = std::make_shared<CollectiveMsg>();
    init->kind = CollectiveMsg::kInit;
    HubActor hub = caf::actor_cast<HubActor>(self);
    const int64_t epoch = g.epoch;
    init->forward = [hub, key, r, epoch](CollectiveMsgPtr m) {
      auto h = std::make_shared<CollectiveHubMsg>();
      h->kind = CollectiveHubMsg::kRoute;
      h->key = key;
      h->rank = r;
      h->epoch = epoch;
      h->msg = std::move(m);
      caf::anon_send(hub, std::move(h));
    };
    self->send(g.local[r], std::move(init));
  }
  return g.local[r];
}

// Fails the group's unfinished reductions here with why; its later ones
// start over with fresh actors (generation 0).
void ResetGroup(Hub self, HubState::Group& g, const Status& why) {
  for (auto& a : g.local) {
    if (!a) continue;
    // Replaced by a fresh actor: this one fails what it holds and quits,
    // so resets a peer provokes leave no actors behind.
    auto m = std::make_shared<CollectiveMsg>();
    m->kind = CollectiveMsg::kFailAll;
    m->error = why;
    m->retire = true;
    self->send(a, std::move(m));
    a = CollectiveRankActor();
  }
  for (auto& w : g.waiting) w.clear();
  ++g.epoch;
}

// The node at addr is gone (down, or a send to it failed): fails every
// group with a rank there.
void PeerFailed(Hub self, const std::string& addr, const Status& why) {
  for (auto& kv : self->state.groups) {
    HubState::Group& g = kv.second;
    Status first;
    for (int64_t r = 0; r < g.n; ++r) {
      if (g.where[r] != addr || !g.down[r].ok()) continue;  // a node's second connection going down adds nothing
      g.down[r] = Unavailable("all-reduce group '" + kv.first + "': node " + addr + " running rank " +
                              std::to_string(r) + " is down (" + why.message() + ")");
      if (first.ok()) first = g.down[r];
    }
    if (!first.ok()) {
      Log(self, first.message());
      ResetGroup(self, g, first);
    }
  }
}

// Tells the node at `to` that rank r of group key runs here.
Status Announce(Hub self, const std::string& key, const HubState::Group& g, int64_t r, const std::string& to) {
  net::CollectiveAnnounce c;
  c.group_key = key;
  c.group_size = g.n;
  c.from_rank = r;
  c.address = self->state.self;
  c.epoch = g.epoch;
  return self->state.hooks.announce(to, std::move(c));
}

// Passes msg to rank dest of the group: its actor when it runs here, its
// node over its connection, or the waiting list while its node is unknown.
void Deliver(Hub self, const std::string& key, HubState::Group& g, int64_t dest, CollectiveMsgPtr msg) {
  const std::string& addr = g.where[dest];
  if (addr.empty()) {
    g.waiting[dest].push_back(std::move(msg));
    return;
  }
  if (addr == self->state.self) {
    self->send(RankActor(self, key, g, dest), std::move(msg));
    return;
  }
  net::CollectiveChunk c;
  c.group_key = key;
  c.group_size = g.n;
  c.generation = msg->instance;
  c.from_rank = Mod(dest - 1, g.n);
  c.step = msg->step;
  c.offset = msg->offset;
  c.total = msg->total;
  c.address = self->state.self;
  c.status = msg->error;
  c.chunk = msg->value;  // referenced, not copied, by the encoder
  c.epoch = g.epoch;
  Status s = self->state.hooks.send_chunk(addr, std::move(c));
  if (!s.ok()) PeerFailed(self, std::string(addr), s);
}

// Records where rank r runs and passes on what waited for it.
void Locate(Hub self, const std::string& key, HubState::Group& g, int64_t r, const std::string& addr) {
  g.where[r] = addr;
  g.down[r] = Status::OK();
  std::vector<CollectiveMsgPtr> waiting = std::move(g.waiting[r]);
  g.waiting[r].clear();
  const int64_t epoch = g.epoch;
  for (auto& m : waiting) {
    if (g.epoch != epoch) return;  // a failed send reset the group: the rest are stale
    Deliver(self, key, g, r, std::move(m));
  }
}

void Contribute(Hub self, CollectiveHubMsg& h) {
  HubState& st = self->state;
  if (!st.stopped.ok()) return h.done(st.stopped);
  Status error;
  HubState::Group* g = FindOrCreate(self, h.key, h.n, "rank " + std::to_string(h.rank), &error);
  if (!g) return h.done(error);
  for (const Status& d : g->down)
    if (!d.ok()) return h.done(d);
  if (st.self.empty())
    return h.done(FailedPrecondition("all-reduce group '" + h.key + "': this node has no address yet"));
  RankActor(self, h.key, *g, h.rank);
  if (g->where[h.rank] != st.self) {
    Locate(self, h.key, *g, h.rank, st.self);
    for (const std::string& to : st.hooks.members()) {
      if (to == st.self) continue;
      Status s = Announce(self, h.key, *g, h.rank, to);
      if (!s.ok()) Log(self, "cannot announce all-reduce group '" + h.key + "' to " + to + ": " + s.message());
    }
  }
  auto m = std::make_shared<CollectiveMsg>();
  m->kind = CollectiveMsg::kContribute;
  m->value = std::move(h.value);
  m->done = std::move(h.done);
  self->send(g->local[h.rank], std::move(m));
}

// The group a chunk or an announcement from connection conn names, its
// epoch caught up with the sender's; null when the message is stale or
// names a group this node cannot hold (logged, and that group failed).
template <class M>
HubState::Group* WireGroup(Hub self, const void* conn, const M& c) {
  HubState& st = self->state;
  if (!c.address.empty()) st.conn_addr[conn] = c.address;
  Status error;
  HubState::Group* g = FindOrCreate(self, c.group_key, c.group_size, "node " + c.address, &error);
  if (!g) {
    Log(self, error.message());
    auto it = st.groups.find(c.group_key);
    if (it != st.groups.end()) ResetGroup(self, it->second, error);
    return nullptr;
  }
  if (c.epoch < g->epoch) return nullptr;  // sent before a failure this node has seen: stale
  if (c.epoch > g->epoch) {
    // The sender restarted the group after a failure this node has not
    // seen (yet): reductions in flight here belong to the old epoch.
    ResetGroup(self, *g, Aborted("all-reduce group '" + c.group_key + "' was restarted by node " + c.address +
                                 " after a failure"));
    g->epoch = c.epoch;
  }
  return g;
}

void AnnounceFromWire(Hub self, CollectiveHubMsg& h) {
  const net::CollectiveAnnounce& c = h.announce;
  HubState::Group* g = WireGroup(self, h.conn, c);
  if (!g) return;
  const bool moved = g->where[c.from_rank] != c.address;
  Locate(self, c.group_key, *g, c.from_rank, c.address);
  if (moved)  // a node new to this group (or restarted) learns where our ranks are
    for (int64_t r = 0; r < g->n; ++r)
      if (g->where[r] == self->state.self) {
        Status s = Announce(self, c.group_key, *g, r, c.address);
        if (!s.ok()) PeerFailed(self, c.address, s);
      }
}

void FromWire(Hub self, CollectiveHubMsg& h) {
  HubState& st = self->state;
  net::CollectiveChunk& c = h.chunk;
  HubState::Group* g = WireGroup(self, h.conn, c);
  if (!g) return;
  const int64_t dest = Mod(c.from_rank + 1, g->n);
  if (g->where[dest] != st.self) {
    Log(self, "dropped a chunk of all-reduce group '" + c.group_key + "' from " + c.address + " for rank " +
                  std::to_string(dest) + ", which does not run on this node");
    return;
  }
  auto m = std::make_shared<CollectiveMsg>();
  m->kind = CollectiveMsg::kChunk;
  m->instance = c.generation;
  m->step = c.step;
  m->offset = c.offset;
  m->total = c.total;
  m->dtype = c.chunk.dtype();
  m->value = std::move(c.chunk);
  m->error = std::move(c.status);
  self->send(RankActor(self, c.group_key, *g, dest), std::move(m));
}

void Handle(Hub self, const CollectiveHubMsgPtr& hp) {
  HubState& st = self->state;
  CollectiveHubMsg& h = *hp;
  switch (h.kind) {
    case CollectiveHubMsg::kAddress:
      st.self = h.address;
      return;
    case CollectiveHubMsg::kContribute:
      return Contribute(self, h);
    case CollectiveHubMsg::kRoute: {
      auto it = st.groups.find(h.key);
      if (it == st.groups.end() || it->second.epoch != h.epoch) return;  // from before the group failed
      return Deliver(self, h.key, it->second, Mod(h.rank + 1, it->second.n), std::move(h.msg));
    }
    case CollectiveHubMsg::kWire:
      return FromWire(self, h);
    case CollectiveHubMsg::kAnnounce:
      return AnnounceFromWire(self, h);
    case CollectiveHubMsg::kDown: {
      std::string addr = h.address;
      auto it = st.conn_addr.find(h.conn);
      if (it != st.conn_addr.end()) {
        if (addr.empty()) addr = it->second;
        st.conn_addr.erase(it);
      }
      if (!addr.empty() && addr != st.self) PeerFailed(self, addr, h.why);
      return;
    }
    case CollectiveHubMsg::kFailAll:
      if (st.stopped.ok()) st.stopped = h.why;
      for (auto& kv : st.groups) ResetGroup(self, kv.second, h.why);
      return;
    case CollectiveHubMsg::kStop:
      for (auto& kv : st.groups)
        for (auto& a : kv.second.local)
          if (a) self->send_exit(a, caf::exit_reason::user_shutdown);
      st.groups.clear();
      self->quit();
      return;
  }
}

void Post(const caf::actor& hub, CollectiveHubMsgPtr m) {
  caf::anon_send(caf::actor_cast<HubActor>(hub), std::move(m));
}

}  // namespace

ClusterCollectives::ClusterCollectives(caf::actor_system& sys, ClusterCollectivesHooks hooks) {
  HubActor hub = sys.spawn([hooks = std::move(hooks)](Hub self) -> HubActor::behavior_type {
    self->state.hooks = hooks;
    return {[self](CollectiveHubMsgPtr m) { Handle(self, m); }};
  });
  hub_ = caf::actor_cast<caf::actor>(hub);
}

ClusterCollectives::~ClusterCollectives() { Stop(); }

void ClusterCollectives::SetAddress(const std::string& address) {
  auto m = std::make_shared<CollectiveHubMsg>();
  m->kind = CollectiveHubMsg::kAddress;
  m->address = address;
  Post(hub_, std::move(m));
}

void ClusterCollectives::AllReduce(const std::string& group_key, int64_t group_size, int64_t rank, Tensor value,
                                   std::function<void(Result<Tensor>)> done) {
  auto m = std::make_shared<CollectiveHubMsg>();
  m->kind = CollectiveHubMsg::kContribute;
  m->key = group_key;
  m->n = group_size;
  m->rank = rank;
  m->value = std::move(value);
  m->done = std::move(done);
  Post(hub_, std::move(m));
}

void ClusterCollectives::OnChunk(const void* from, net::CollectiveChunk chunk) {
  auto m = std::make_shared<CollectiveHubMsg>();
  m->kind = CollectiveHubMsg::kWire;
  m->conn = from;
  m->chunk = std::move(chunk);
  Post(hub_, std::move(m));
}

void ClusterCollectives::OnAnnounce(const void* from, net::CollectiveAnnounce announce) {
  auto m = std::make_shared<CollectiveHubMsg>();
  m->kind = CollectiveHubMsg::kAnnounce;
  m->conn = from;
  m->announce = std::move(announce);
  Post(hub_, std::move(m));
}

void ClusterCollectives::OnPeerDown(const void* from, const std::string& address, const Status& why) {
  auto m = std::make_shared<CollectiveHubMsg>();
  m->kind = CollectiveHubMsg::kDown;
  m->conn = from;
  m->address = address;
  m->why = why;
  Post(hub_, std::move(m));
}

void ClusterCollectives::FailAll(const Status& why) {
  auto m = std::make_shared<CollectiveHubMsg>();
  m->kind = CollectiveHubMsg::kFailAll;
  m->why = why;
  Post(hub_, std::move(m));
}

void ClusterCollectives::Stop() {
  if (!hub_) return;
  auto m = std::make_shared<CollectiveHubMsg>();
  m->kind = CollectiveHubMsg::kStop;
  Post(hub_, std::move(m));
  hub_ = caf::actor();
}

}  // namespace runtime
}  // namespace sf
