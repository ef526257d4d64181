#include "kernels/chunk_leases.h"

#include <algorithm>
#include <vector>

namespace sf {

Status ValidateChunkLeaseOptions(const ChunkLeaseOptions& o) {
  constexpr int64_t kMax = int64_t{1} << 40;
  if (o.num_chunks < 1 || o.num_chunks > kMax)
    return InvalidArgument("num_chunks must be in [1, 2^40], got " + std::to_string(o.num_chunks));
  if (o.lease_ms < 1 || o.lease_ms > kMax)
    return InvalidArgument("lease_ms must be in [1, 2^40], got " + std::to_string(o.lease_ms));
  if (o.num_epochs > kMax / o.num_chunks)
    return InvalidArgument("num_epochs * num_chunks must be at most 2^40, got " + std::to_string(o.num_epochs) +
                           " epochs of " + std::to_string(o.num_chunks) + " chunks");
  return Status::OK();
}

ChunkLeases::ChunkLeases(ChunkLeaseOptions o) : o_(o) {}

std::string ChunkLeases::Describe(int64_t ticket) const {
  return "chunk " + std::to_string(ticket % o_.num_chunks) + " of epoch " + std::to_string(ticket / o_.num_chunks);
}

void ChunkLeases::Renew(int64_t worker, int64_t now_ms) {
  auto it = workers_.find(worker);
  if (it != workers_.end()) it->second.expires_ms = now_ms + o_.lease_ms;
}

ChunkLeases::Took ChunkLeases::Take(int64_t worker, int64_t now_ms, ChunkTicket* t) {
  Expire(now_ms);
  int64_t ticket;
  if (!free_.empty()) {
    ticket = *free_.begin();
    free_.erase(free_.begin());
  } else if (o_.num_epochs <= 0 || next_ < o_.num_epochs * o_.num_chunks) {
    ticket = next_++;
    open_[ticket] = Open{};
  } else {
    return open_.empty() ? Took::kEnd : Took::kWait;
  }
  Open& open = open_[ticket];
  open.holder = worker;
  Worker& w = workers_[worker];
  w.tickets.insert(ticket);
  w.expires_ms = now_ms + o_.lease_ms;
  ++stats_.handed;
  *t = ChunkTicket{ticket, ticket % o_.num_chunks, ticket / o_.num_chunks, open.trained};
  return Took::kTicket;
}

ChunkLeases::Open* ChunkLeases::Held(int64_t worker, int64_t ticket, int64_t now_ms, Status* s) {
  Expire(now_ms);
  if (ticket < 0 || ticket >= next_) {
    *s = InvalidArgument("ticket " + std::to_string(ticket) + " was never handed out (" + std::to_string(next_) +
                         " so far)");
    return nullptr;
  }
  auto it = open_.find(ticket);
  // A finished chunk: its holder reported its last row already, so the
  // report comes from a worker that lost it (and trained its rows again).
  if (it == open_.end() || it->second.holder != worker) {
    ++stats_.refused;
    *s = FailedPrecondition("worker " + std::to_string(worker) + " no longer holds " + Describe(ticket) +
                            " (its lease expired or it was released; the chunk went to another worker)");
    return nullptr;
  }
  Renew(worker, now_ms);
  return &it->second;
}

void ChunkLeases::MaybeDone(int64_t ticket) {
  auto it = open_.find(ticket);
  if (it == open_.end() || it->second.last < 0 || it->second.trained < it->second.last) return;
  auto w = workers_.find(it->second.holder);
  if (w != workers_.end()) {
    w->second.tickets.erase(ticket);
    if (w->second.tickets.empty()) workers_.erase(w);
  }
  open_.erase(it);
  ++stats_.done;
}

Status ChunkLeases::Trained(int64_t worker, int64_t ticket, int64_t pos, int64_t now_ms) {
  Status s;
  Open* open = Held(worker, ticket, now_ms, &s);
  if (!open) return s;
  if (pos < 0) return InvalidArgument("trained position " + std::to_string(pos) + " of " + Describe(ticket) + " is negative");
  open->trained = std::max(open->trained, pos);
  MaybeDone(ticket);
  return Status::OK();
}

Status ChunkLeases::Read(int64_t worker, int64_t ticket, int64_t last_pos, int64_t now_ms) {
  Status s;
  Open* open = Held(worker, ticket, now_ms, &s);
  if (!open) return s;
  if (last_pos < 0) return InvalidArgument("last position " + std::to_string(last_pos) + " of " + Describe(ticket) + " is negative");
  // A chunk resumed after its last row was trained reads no row at all.
  open->last = std::max(last_pos, open->trained);
  MaybeDone(ticket);
  return Status::OK();
}

void ChunkLeases::ReturnAll(int64_t worker) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  for (int64_t ticket : it->second.tickets) {
    Open& open = open_[ticket];
    open.holder = -1;
    open.last = -1;  // read again from after its trained rows
    free_.insert(ticket);
    ++stats_.returned;
  }
  workers_.erase(it);
}

int64_t ChunkLeases::Release(int64_t worker) {
  const int64_t before = stats_.returned;
  ReturnAll(worker);
  return stats_.returned - before;
}

int64_t ChunkLeases::Expire(int64_t now_ms) {
  const int64_t before = stats_.returned;
  std::vector<int64_t> gone;
  for (const auto& [id, w] : workers_)
    if (w.expires_ms <= now_ms) gone.push_back(id);
  for (int64_t id : gone) ReturnAll(id);
  return stats_.returned - before;
}

int64_t ChunkLeases::NextExpiry() const {
  int64_t first = -1;
  for (const auto& [id, w] : workers_)
    if (first < 0 || w.expires_ms < first) first = w.expires_ms;
  return first;
}

bool ChunkLeases::Waiting() const {
  const bool fresh = o_.num_epochs <= 0 || next_ < o_.num_epochs * o_.num_chunks;
  return free_.empty() && !fresh && !open_.empty();
}

}  // namespace sf
