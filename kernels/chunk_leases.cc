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

ChunkLeases::Took ChunkLeases::Take(int64_t worker, int64_t now_ms, ChunkTicket* t, int64_t reader) {
  Expire(now_ms);
  ReadsInto(worker, reader);
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
  if (reader != 0) w.reader = reader;
  w.expires_ms = now_ms + o_.lease_ms;
  ++stats_.handed;
  ++version_;
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
    ++version_;
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
  RecordSettled(WithHandout(ticket, it->second.handout), it->second.holder, it->second.trained);
  open_.erase(it);
  ++stats_.done;
}

void ChunkLeases::RecordSettled(int64_t ticket, int64_t worker, int64_t pos) {
  if (!finished_.insert_or_assign(ticket, Finished{worker, pos}).second) return;  // recorded before: kept in its place
  finished_order_.push_back(ticket);
  if (finished_order_.size() > kMaxFinished) {
    finished_.erase(finished_order_.front());
    finished_order_.pop_front();
  }
}

bool ChunkLeases::RepeatsFinish(int64_t worker, int64_t ticket, int64_t pos) const {
  auto f = finished_.find(ticket);
  return f != finished_.end() && f->second.worker == worker && pos >= 0 && pos <= f->second.pos;
}

Status ChunkLeases::Trained(int64_t worker, int64_t ticket, int64_t pos, int64_t now_ms) {
  Status s;
  Open* open = Held(worker, ticket, now_ms, &s);
  if (!open) return s;
  if (pos < 0) return InvalidArgument("trained position " + std::to_string(pos) + " of " + Describe(ticket) + " is negative");
  open->trained = std::max(open->trained, pos);
  ++version_;
  MaybeDone(ChunkTicketIndex(ticket));
  return Status::OK();
}

Status ChunkLeases::TrainedAll(int64_t worker, const std::vector<int64_t>& tickets, const std::vector<int64_t>& pos,
                               int64_t now_ms) {
  if (tickets.size() != pos.size())
    return InvalidArgument(std::to_string(tickets.size()) + " tickets and " + std::to_string(pos.size()) + " positions");
  Status refused;
  for (size_t i = 0; i < tickets.size() && refused.ok(); ++i) {
    if (RepeatsFinish(worker, tickets[i], pos[i])) continue;
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
  for (size_t i = 0; i < tickets.size(); ++i)
    if (!RepeatsFinish(worker, tickets[i], pos[i])) SF_RETURN_IF_ERROR(Trained(worker, tickets[i], pos[i], now_ms));
  return Status::OK();
}

Status ChunkLeases::Read(int64_t worker, int64_t ticket, int64_t last_pos, int64_t now_ms) {
  Status s;
  Open* open = Held(worker, ticket, now_ms, &s);
  if (!open) return s;
  if (last_pos < 0) return InvalidArgument("last position " + std::to_string(last_pos) + " of " + Describe(ticket) + " is negative");
  // A chunk resumed after its last row was trained reads no row at all.
  open->last = std::max(last_pos, open->trained);
  ++version_;
  MaybeDone(ChunkTicketIndex(ticket));
  return Status::OK();
}

void ChunkLeases::Return(int64_t index) {
  Open& open = open_[index];
  // The holder's last report may have been taken while its step failed
  // after it (the queue's node died before the reply): the step run again
  // repeats it, and must find it taken, not refused. Refused, the worker
  // would drop rows the queue counts trained, which nobody trains again.
  if (open.holder >= 0 && open.trained > 0) RecordSettled(WithHandout(index, open.handout), open.holder, open.trained);
  open.holder = -1;
  open.last = -1;  // read again from after its trained rows
  free_.insert(index);
  ++stats_.returned;
  ++version_;
}

void ChunkLeases::ReturnAll(int64_t worker) {
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  for (int64_t ticket : it->second.tickets) Return(ticket);
  workers_.erase(it);
}

int64_t ChunkLeases::ReadsInto(int64_t worker, int64_t reader) {
  auto it = workers_.find(worker);
  if (reader == 0 || it == workers_.end()) return 0;
  if (it->second.reader == 0 || it->second.reader == reader) {
    it->second.reader = reader;
    return 0;
  }
  return Release(worker);
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

namespace {

// The words of a serialized state, in order (kernels/chunk_leases.h).
constexpr int64_t kLeasesMagic = 0x53464c4541534553;  // "SFLEASES"
// 2: the finished tickets' records at the end; 3: each worker's reader
// after its id (format 2 is read with readers 0).
constexpr int64_t kLeasesFormat = 3;
constexpr size_t kHeaderWords = 12;  // magic .. stats, then the open tickets' count

}  // namespace

std::vector<int64_t> ChunkLeases::Serialize() const {
  std::vector<int64_t> w = {kLeasesMagic,    kLeasesFormat,   version_,       o_.num_chunks,
                            o_.num_epochs,   o_.lease_ms,     next_,          stats_.handed,
                            stats_.returned, stats_.done,     stats_.refused, static_cast<int64_t>(open_.size())};
  w.reserve(w.size() + 5 * open_.size() + 2 + free_.size() + 4 * workers_.size());
  for (const auto& [index, o] : open_) w.insert(w.end(), {index, o.holder, o.handout, o.trained, o.last});
  w.push_back(static_cast<int64_t>(free_.size()));
  w.insert(w.end(), free_.begin(), free_.end());
  // Workers by id, so that two equal states serialize alike.
  std::map<int64_t, const Worker*> by_id;
  for (const auto& [id, worker] : workers_) by_id[id] = &worker;
  w.push_back(static_cast<int64_t>(by_id.size()));
  for (const auto& [id, worker] : by_id) {
    w.push_back(id);
    w.push_back(worker->reader);
    w.push_back(static_cast<int64_t>(worker->tickets.size()));
    w.insert(w.end(), worker->tickets.begin(), worker->tickets.end());
  }
  // Oldest first, as they were recorded.
  w.push_back(static_cast<int64_t>(finished_order_.size()));
  for (int64_t t : finished_order_) {
    const Finished& f = finished_.at(t);
    w.insert(w.end(), {t, f.worker, f.pos});
  }
  return w;
}

Result<ChunkLeases> ChunkLeases::Restore(const int64_t* words, size_t n, const ChunkLeaseOptions& options,
                                         int64_t now_ms) {
  auto bad = [](const std::string& what) { return InvalidArgument("chunk queue state refused: " + what); };
  if (n < kHeaderWords) return bad(std::to_string(n) + " words, fewer than its header's " + std::to_string(kHeaderWords));
  if (words[0] != kLeasesMagic) return bad("it does not start with the chunk lease state's mark");
  if (words[1] != kLeasesFormat && words[1] != 2)
    return bad("format " + std::to_string(words[1]) + ", this build reads formats 2 and " +
               std::to_string(kLeasesFormat));
  const bool readers = words[1] >= 3;
  const ChunkLeaseOptions o{words[3], words[4], words[5]};
  if (o.num_chunks != options.num_chunks || o.num_epochs != options.num_epochs || o.lease_ms != options.lease_ms)
    return bad("it is of " + std::to_string(o.num_chunks) + " chunks, " + std::to_string(o.num_epochs) +
               " epochs and leases of " + std::to_string(o.lease_ms) + " ms; the queue has " +
               std::to_string(options.num_chunks) + ", " + std::to_string(options.num_epochs) + " and " +
               std::to_string(options.lease_ms));
  SF_RETURN_IF_ERROR(ValidateChunkLeaseOptions(options));
  ChunkLeases q(options);
  q.version_ = words[2];
  q.next_ = words[6];
  q.stats_ = ChunkLeaseStats{words[7], words[8], words[9], words[10]};
  const int64_t tickets = o.num_epochs > 0 ? o.num_epochs * o.num_chunks : int64_t{1} << kChunkTicketBits;
  if (q.version_ < 0) return bad("version " + std::to_string(q.version_) + " is negative");
  if (q.next_ < 0 || q.next_ > tickets)
    return bad("next ticket " + std::to_string(q.next_) + " is outside [0, " + std::to_string(tickets) + "]");
  if (q.stats_.handed < 0 || q.stats_.returned < 0 || q.stats_.done < 0 || q.stats_.refused < 0)
    return bad("a negative count among its stats");
  size_t at = kHeaderWords - 1;
  // The count at words[at], at most `most` and at most the words left over `each`.
  auto count = [&](const char* what, int64_t most, size_t each) -> Result<int64_t> {
    if (at >= n) return bad(std::string("it ends before its ") + what);
    const int64_t c = words[at++];
    const size_t left = n - at;
    if (c < 0 || c > most || static_cast<uint64_t>(c) > left / each)
      return bad(std::to_string(c) + " " + what + " (at most " + std::to_string(std::min<uint64_t>(most, left / each)) +
                 " here)");
    return c;
  };
  SF_ASSIGN_OR_RETURN(const int64_t n_open, count("open tickets", q.next_, 5));
  int64_t held = 0, unheld = 0;
  for (int64_t i = 0; i < n_open; ++i, at += 5) {
    const int64_t index = words[at];
    Open open{words[at + 1], words[at + 2], words[at + 3], words[at + 4]};
    const std::string which = "open ticket " + std::to_string(index);
    if (index < 0 || index >= q.next_) return bad(which + " was never handed out (" + std::to_string(q.next_) + " so far)");
    if (!q.open_.empty() && index <= q.open_.rbegin()->first) return bad(which + " is out of order or twice");
    if (open.holder < -1 || open.handout < 0 || open.trained < 0 || open.last < -1)
      return bad(which + ": a holder, hand-out count or line out of range");
    if (open.last >= 0 && open.trained >= open.last) return bad(which + " is done, yet open");
    if (open.holder == -1 && open.last != -1) return bad(which + " is free, yet read to its end");
    (open.holder == -1 ? unheld : held) += 1;
    q.open_.emplace(index, open);
  }
  SF_ASSIGN_OR_RETURN(const int64_t n_free, count("free tickets", n_open, 1));
  if (n_free != unheld)
    return bad(std::to_string(n_free) + " free tickets, but " + std::to_string(unheld) + " open ones without a holder");
  for (int64_t i = 0; i < n_free; ++i, ++at) {
    auto it = q.open_.find(words[at]);
    if (it == q.open_.end() || it->second.holder != -1)
      return bad("free ticket " + std::to_string(words[at]) + " is not an open ticket without a holder");
    if (!q.free_.insert(words[at]).second) return bad("free ticket " + std::to_string(words[at]) + " twice");
  }
  SF_ASSIGN_OR_RETURN(const int64_t n_workers, count("workers", held, readers ? 4 : 3));
  int64_t listed = 0;
  for (int64_t i = 0; i < n_workers; ++i) {
    if (n - at < (readers ? 3u : 2u)) return bad("it ends inside its workers");
    const int64_t id = words[at++];
    const std::string who = "worker " + std::to_string(id);
    if (id == -1) return bad("a worker of id -1 (which marks a free ticket)");
    Worker& w = q.workers_[id];
    if (!w.tickets.empty()) return bad(who + " twice");
    if (readers) w.reader = words[at++];
    SF_ASSIGN_OR_RETURN(const int64_t k, count("tickets of a worker", held, 1));
    if (k == 0) return bad(who + " holds no ticket");
    for (int64_t j = 0; j < k; ++j, ++at) {
      auto it = q.open_.find(words[at]);
      if (it == q.open_.end() || it->second.holder != id)
        return bad(who + " holds ticket " + std::to_string(words[at]) + ", which is not an open ticket it holds");
      if (!w.tickets.insert(words[at]).second) return bad(who + " holds ticket " + std::to_string(words[at]) + " twice");
    }
    listed += k;
    w.expires_ms = now_ms + options.lease_ms;
  }
  if (listed != held)
    return bad(std::to_string(held) + " open tickets have a holder, but the workers hold " + std::to_string(listed));
  SF_ASSIGN_OR_RETURN(const int64_t n_finished, count("finished tickets", static_cast<int64_t>(kMaxFinished), 3));
  for (int64_t i = 0; i < n_finished; ++i, at += 3) {
    const int64_t t = words[at];
    const std::string which = "finished ticket " + std::to_string(t);
    if (t < 0 || t >> (kChunkTicketBits + kChunkHandoutBits) != 0 || ChunkTicketIndex(t) >= q.next_)
      return bad(which + " was never handed out (" + std::to_string(q.next_) + " so far)");
    // A ticket taken back is still open, but no longer held with these hand-out bits.
    if (auto o = q.open_.find(ChunkTicketIndex(t));
        o != q.open_.end() && o->second.holder >= 0 && WithHandout(o->first, o->second.handout) == t)
      return bad(which + " is held");
    if (words[at + 1] == -1 || words[at + 2] < 0) return bad(which + ": a worker or line out of range");
    if (!q.finished_.emplace(t, Finished{words[at + 1], words[at + 2]}).second) return bad(which + " twice");
    q.finished_order_.push_back(t);
  }
  if (at != n) return bad(std::to_string(n - at) + " words left over after its finished tickets");
  return q;
}

}  // namespace sf
