// Which peers an endpoint keeps when its caps are reached (net/peer_rpc.h):
// handshakes by source, authenticated connections by credential, and what
// it owes one peer before that peer's bytes stop being read.
//
// The rule throughout: a newcomer is never the one refused for lack of
// room. A silent flood evicts its own source's handshakes first; a holder
// of many idle connections loses its least recently used one.
#include <sys/resource.h>

#include "net/peer_link.h"

namespace sf {
namespace net {
namespace detail {

uint64_t Core::AddHandshake(const std::string& source) {
  const uint64_t hs = next_handshake_++;
  handshaking_[hs].source = source;
  ++handshakes_per_source[source];
  return hs;
}

void Core::EndHandshake(uint64_t hs) {
  auto it = handshaking_.find(hs);
  if (it == handshaking_.end()) return;
  auto n = handshakes_per_source.find(it->second.source);
  if (n != handshakes_per_source.end() && --n->second <= 0) handshakes_per_source.erase(n);
  handshaking_.erase(it);
}

bool Core::EvictOldestHandshake() {
  if (handshaking_.empty()) return false;
  // The busiest source's oldest: at any rate of silent connections from one
  // address, a handshake from another is not the one that goes.
  const std::string* busiest = nullptr;
  int most = 0;
  for (const auto& [source, n] : handshakes_per_source) {
    if (n > most) {
      most = n;
      busiest = &source;
    }
  }
  auto it = handshaking_.begin();
  if (busiest) {
    while (it != handshaking_.end() && it->second.source != *busiest) ++it;
    if (it == handshaking_.end()) it = handshaking_.begin();
  }
  const uint64_t hs = it->first;
  Handshake h = kj::mv(it->second);
  auto n = handshakes_per_source.find(h.source);
  if (n != handshakes_per_source.end() && --n->second <= 0) handshakes_per_source.erase(n);
  handshaking_.erase(hs);
  if (h.canceler) h.canceler->cancel("evicted: newer peers need the room");
  if (h.link) DownById(h.link, ResourceExhausted("evicted while handshaking: newer peers need the room"));
  return true;
}

Status Core::Admit(Link* l) {
  if (!l->slot) return Status::OK();  // we dialed it: not a peer taking our room
  // Without TLS there is no credential: the address stands for one.
  const std::string holder = l->credential.empty() ? "address " + l->slot->source : l->credential;
  auto count = [&](const std::string& h) {
    auto it = per_credential.find(h);
    return it == per_credential.end() ? 0 : it->second;
  };
  if (count(holder) >= options.max_connections_per_credential && !EvictLeastUsed(holder, l))
    return ResourceExhausted("credential " + holder + " holds " + std::to_string(count(holder)) +
                             " connections here, its cap, and none can be closed");
  if (admitted >= max_admitted && !EvictLeastUsed("", l))
    return ResourceExhausted("the node holds " + std::to_string(admitted) + " connections, its cap");
  ++admitted;
  ++per_credential[holder];
  l->slot->holder = holder;
  l->last_used_ms = NowMs();
  return Status::OK();
}

bool Core::EvictLeastUsed(const std::string& holder, const Link* keep) {
  std::string from = holder;
  if (from.empty()) {
    int most = 0;
    for (const auto& [h, n] : per_credential) {
      if (n > most) {
        most = n;
        from = h;
      }
    }
    if (from.empty()) return false;
  }
  Link* victim = nullptr;
  for (auto& [id, lp] : links_) {
    Link* x = lp.get();
    if (x == keep || !x->slot || x->slot->holder != from) continue;
    if (!victim || x->last_used_ms < victim->last_used_ms) victim = x;
  }
  if (!victim) return false;
  const int64_t idle_ms = NowMs() - victim->last_used_ms;
  LogRefusal(victim->slot->source, "closing a connection of " + from + " idle " + std::to_string(idle_ms) +
                                       " ms: a new peer needs its place");
  // Counted out now, not when the loop frees it: the next admission in
  // this turn must not close another for the same place.
  victim->slot->ReleaseAdmission();
  // Unavailable: logged once above (rate-limited), not once per connection.
  Down(victim, Unavailable("closed after " + std::to_string(idle_ms) + " ms unused: " + from +
                                 " holds the most connections and a new peer needs the place"));
  return true;
}

void Core::FitCapsToDescriptors() {
  max_admitted = options.max_connections;
  max_handshakes = options.max_handshakes;
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
  const int64_t limit = static_cast<int64_t>(rl.rlim_cur);
  // Peers that took every descriptor would leave none for the node's own
  // dials and etcd: a join or a lease renewal would fail, not the peers.
  const int64_t budget = std::max<int64_t>(2, limit - std::max<int64_t>(16, limit / 8));
  max_handshakes = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_handshakes, budget / 4)));
  max_admitted = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(max_admitted, budget - max_handshakes)));
  if (options.log && max_admitted < options.max_connections)
    Log("the descriptor limit (" + std::to_string(limit) + ") caps authenticated peers at " +
        std::to_string(max_admitted) + " and handshakes at " + std::to_string(max_handshakes));
}

bool Core::OwesTooMuch(Link* l) {
  while (!l->owed.empty() && l->owed.front().first <= l->meter->written) {
    l->owed_bytes -= l->owed.front().second;
    l->owed.pop_front();
  }
  return l->owed_bytes > options.max_peer_buffer_bytes;
}

void Core::NoteReplyQueued(Link* l, uint64_t bytes, bool queued) {
  // Cap'n Proto's queue is written in order: the reply is out once we have
  // written what is queued now (and itself, when it is not in yet).
  const uint64_t end = l->meter->written + l->network->getCurrentQueueSize() + (queued ? 0 : bytes);
  l->owed.emplace_back(end, bytes);
  l->owed_bytes += bytes;
}

void Slot::ReleaseAdmission() {
  if (!core || holder.empty()) return;
  --core->admitted;
  auto it = core->per_credential.find(holder);
  if (it != core->per_credential.end() && --it->second <= 0) core->per_credential.erase(it);
  holder.clear();
}

}  // namespace detail
}  // namespace net
}  // namespace sf
