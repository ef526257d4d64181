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
  const int64_t index = ChunkTicketIndex(ticket);
  return "chunk " + std::to_string(index % o_.num_chunks) + " of epoch " + std::to_string(index / o_.num_chunks);
}

namespace {

constexpr int64_t kHandoutMask = (int64_t{1} << kChunkHandoutBits) - 1;

// The ticket of index's hand-out number handout.
int64_t WithHandout(int64_t index, int64_t handout) { return index | (handout & kHandoutMask) << kChunkTicketBits; }

}  // namespace

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
    ++open_[ticket].handout;
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
  *t = ChunkTicket{WithHandout(ticket, open.handout), ticket % o_.num_chunks, ticket / o_.num_chunks, open.trained};
  return Took::kTicket;
}

ChunkLeases::Open* ChunkLeases::Held(int64_t worker, int64_t ticket, int64_t now_ms, Status* s) {
  Expire(now_ms);
  const int64_t index = ChunkTicketIndex(ticket);
  if (ticket < 0 || ticket >> (kChunkTicketBits + kChunkHandoutBits) != 0 || index >= next_) {
    *s = InvalidArgument("ticket " + std::to_string(ticket) + " was never handed out (" + std::to_string(next_) +
                         " so far)");
    return nullptr;
  }
  auto it = open_.find(index);
  // A finished chunk: its holder reported its last row already, so the
  // report comes from a worker that lost it. An earlier hand-out's ticket:
  // rows the worker read before it lost the chunk (it may hold it again).
  if (it == open_.end() || it->second.holder != worker || WithHandout(index, it->second.handout) != ticket) {
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
  MaybeDone(ChunkTicketIndex(ticket));
  return Status::OK();
}

Status ChunkLeases::TrainedAll(int64_t worker, const std::vector<int64_t>& tickets, const std::vector<int64_t>& pos,
                               int64_t now_ms) {
  if (tickets.size() != pos.size())
    return InvalidArgument(std::to_string(tickets.size()) + " tickets and " + std::to_string(pos.size()) + " positions");
  Status refused;
  for (size_t i = 0; i < tickets.size() && refused.ok(); ++i) {
    if (!Held(worker, tickets[i], now_ms, &refused)) break;
    if (pos[i] < 0)
      return InvalidArgument("trained position " + std::to_string(pos[i]) + " of " + Describe(tickets[i]) +
                             " is negative");
  }
  if (!refused.ok()) {
    // The worker drops the batch, so its rows of the chunks it still holds
    // are not trained: later rows of theirs must not count past them (a
    // report names only the last line). They go back, to be read again
    // from after their trained rows, and their later rows are refused.
    auto w = workers_.find(worker);
    for (int64_t ticket : tickets) {
      const int64_t index = ChunkTicketIndex(ticket);
      auto it = open_.find(index);
      if (w == workers_.end() || it == open_.end() || it->second.holder != worker ||
          WithHandout(index, it->second.handout) != ticket)
        continue;
      w->second.tickets.erase(index);
      Return(index);
    }
    if (w != workers_.end() && w->second.tickets.empty()) workers_.erase(w);
    return refused;
  }
  for (size_t i = 0; i < tickets.size(); ++i) SF_RETURN_IF_ERROR(Trained(worker, tickets[i], pos[i], now_ms));
  return Status::OK();
}

Status ChunkLeases::Read(int64_t worker, int64_t ticket, int64_t last_pos, int64_t now_ms) {
  Status s;
  Open* open = Held(worker, ticket, now_ms, &s);
  if (!open) return s;
  if (last_pos < 0) return InvalidArgument("last position " + std::to_string(last_pos) + " of " + Describe(ticket) + " is negative");
  // A chunk resumed after its last row was trained reads no row at all.
  open->last = std::max(last_pos, open->trained);
  MaybeDone(ChunkTicketIndex(ticket));
  return Status::OK();
}

void ChunkLeases::Return(int64_t index) {
  Open& open = open_[index];
  open.holder = -1;
  open.last = -1;  // read again from after its trained rows
  free_.insert(index);
  ++stats_.returned;
}

void ChunkLeases::ReturnAll(int64_t worker) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  for (int64_t ticket : it->second.tickets) Return(ticket);
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
