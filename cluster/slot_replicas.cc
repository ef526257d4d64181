// A slot holder's side of replication (cluster/slot_replicas.h).
#include "cluster/slot_replicas.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "kernels/hash_embedding.h"

namespace sf {
namespace cluster {

Status SendSlotChanges(int slot, int64_t epoch, const std::string& holder, bool full,
                       std::vector<runtime::VarChanges> changes,
                       const std::function<Status(net::ReplicateSlot)>& send) {
  // One id per round (from a counter of this process, with its start
  // drawn at random so a restarted holder's rounds differ).
  static std::atomic<uint64_t> next_round{(static_cast<uint64_t>(std::random_device{}()) << 32) | 1};
  const uint64_t round = next_round.fetch_add(1);
  auto fresh = [&] {
    net::ReplicateSlot m;
    m.slot = slot;
    m.epoch = epoch;
    m.holder = holder;
    m.full = full;
    m.round = round;
    return m;
  };
  net::ReplicateSlot m = fresh();
  int64_t bytes = 0;
  // Adds one change to the message, sending the message first when the
  // change would take it past kMaxReplicateBytes.
  auto append = [&](runtime::VarChanges c) -> Status {
    const int64_t n = c.value.valid() ? static_cast<int64_t>(c.value.bytes()) : 0;
    if (!m.names.empty() && bytes + n > kMaxReplicateBytes) {
      m.more = true;
      SF_RETURN_IF_ERROR(send(std::move(m)));
      m = fresh();
      bytes = 0;
    }
    bytes += n;
    m.names.push_back(std::move(c.name));
    if (!c.value.valid()) {
      // Origins alone: no rows of no value.
      m.values.push_back(Tensor(DType::kInt64, Shape{0}));
      m.rows.push_back(Tensor(DType::kInt64, Shape{0}));
    } else {
      m.values.push_back(std::move(c.value));
      m.rows.push_back(c.rows.valid() ? std::move(c.rows) : Tensor::Scalar<int64_t>(-1));
    }
    Tensor origins(DType::kInt64, Shape{static_cast<int64_t>(c.origins.size()), 2});
    for (size_t i = 0; i < c.origins.size(); ++i) {
      origins.data<int64_t>()[2 * i] = static_cast<int64_t>(c.origins[i].step);
      origins.data<int64_t>()[2 * i + 1] = static_cast<int64_t>(c.origins[i].op);
    }
    m.origins.push_back(std::move(origins));
    m.leading.push_back(c.leading);
    // Counters for every name once any has them (none, or kReplicaCounters
    // each; the names before the first with counters get "none").
    constexpr size_t k = net::ReplicateSlot::kReplicaCounters;
    if (!c.replica.empty() || !m.counters.empty()) {
      m.counters.resize((m.names.size() - 1) * k, -1);
      std::vector<int64_t> mine = c.replica.empty() ? std::vector<int64_t>(k, -1) : c.replica;
      mine.resize(k, -1);
      m.counters.insert(m.counters.end(), mine.begin(), mine.end());
    }
    // SSP clocks likewise: one list per name once any has them.
    if (!c.clocks.empty() || !m.clocks.empty()) {
      m.clocks.resize(m.names.size() - 1, Tensor(DType::kInt64, Shape{0}));
      m.clocks.push_back(Tensor::FromVector(c.clocks));
    }
    return Status::OK();
  };
  for (auto& c : changes) {
    if (c.read_rows) {
      // Read from the shard piece by piece as it goes (a whole take in
      // pieces): the variable's buffer is never shared with the copy.
      const int64_t n = c.leading;
      for (int64_t r0 = 0; r0 < n;) {
        SF_ASSIGN_OR_RETURN(Tensor rows, c.read_rows(r0, kMaxReplicateBytes));
        const int64_t k = rows.rank() >= 1 ? rows.dim(0) : 0;
        if (k < 1 || r0 + k > n)
          return Internal("variable '" + c.name + "': a piece of " + std::to_string(k) + " rows at row " +
                          std::to_string(r0) + " of " + std::to_string(n) + " (did it change shape?)");
        runtime::VarChanges piece;
        piece.name = c.name;
        piece.leading = n;
        piece.value = std::move(rows);
        piece.rows = Tensor(DType::kInt64, Shape{k});
        for (int64_t i = 0; i < k; ++i) piece.rows.data<int64_t>()[i] = r0 + i;
        if (r0 == 0) piece.origins = std::move(c.origins);
        if (r0 + k == n) piece.replica = c.replica;
        SF_RETURN_IF_ERROR(append(std::move(piece)));
        r0 += k;
      }
      continue;
    }
    const bool big = c.value.valid() && !c.rows.valid() && c.value.rank() >= 1 && c.value.dim(0) > 1 &&
                     static_cast<int64_t>(c.value.bytes()) > kMaxReplicateBytes && !IsHashShardState(c.value);
    if (!big) {
      SF_RETURN_IF_ERROR(append(std::move(c)));
      continue;
    }
    // A big dense variable sent whole: pieces of rows, made one at a time.
    const int64_t n = c.value.dim(0);
    const int64_t row_bytes = static_cast<int64_t>(c.value.bytes()) / n;
    const int64_t per = std::max<int64_t>(1, kMaxReplicateBytes / std::max<int64_t>(1, row_bytes));
    for (int64_t r0 = 0; r0 < n; r0 += per) {
      const int64_t k = std::min(per, n - r0);
      runtime::VarChanges piece;
      piece.name = c.name;
      piece.leading = n;
      Shape shape = c.value.shape();
      shape[0] = k;
      piece.value = Tensor(c.value.dtype(), shape);
      std::memcpy(piece.value.raw_data(), static_cast<const char*>(c.value.raw_data()) + r0 * row_bytes,
                  static_cast<size_t>(k * row_bytes));
      piece.rows = Tensor(DType::kInt64, Shape{k});
      for (int64_t i = 0; i < k; ++i) piece.rows.data<int64_t>()[i] = r0 + i;
      if (r0 == 0) piece.origins = std::move(c.origins);
      if (r0 + k == n) piece.replica = c.replica;  // with the last piece: the whole value is there then
      SF_RETURN_IF_ERROR(append(std::move(piece)));
    }
  }
  if (full || !m.names.empty()) return send(std::move(m));
  return Status::OK();
}

SlotReplicas::SlotReplicas(Hooks hooks) : hooks_(std::move(hooks)) {}

SlotReplicas::~SlotReplicas() {
  copies_.Stop();
  rounds_.Stop();
  std::vector<SyncDone> left;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& kv : slots_)
      for (auto& w : kv.second.waiting) left.push_back(std::move(w));
    slots_.clear();
  }
  for (auto& w : left) w(Unavailable("the node is stopping: the step's changes were not replicated"), "");
}

void SlotReplicas::OnMap(const std::vector<std::string>& backups, const std::vector<uint8_t>& synced, int64_t epoch) {
  std::lock_guard<std::mutex> l(mu_);
  for (size_t s = 0; s < backups.size(); ++s) {
    if (backups[s].empty() && !slots_.count(static_cast<int>(s))) continue;
    Slot& st = slots_[static_cast<int>(s)];
    if (epoch < st.epoch) continue;
    st.backup = backups[s];
    st.epoch = epoch;
    if (s < synced.size() && synced[s]) st.synced_to = backups[s];
  }
}

void SlotReplicas::Sync(int slot, SyncDone done) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = slots_.find(slot);
    // A backup still being copied is never promoted: nothing to wait for.
    if (it != slots_.end() && !it->second.backup.empty() && it->second.backup == it->second.synced_to) {
      it->second.waiting.push_back(std::move(done));
      if (it->second.scheduled) return;
      it->second.scheduled = true;
      rounds_.Post([this, slot] { (void)Round(slot, false); });
      return;
    }
  }
  done(Status::OK(), "");  // no backup: nothing to wait for
}

std::string SlotReplicas::SyncedTo(int slot) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = slots_.find(slot);
  const Slot& st = it == slots_.end() ? Slot() : it->second;
  // A failed last round left changes it took on no backup.
  if (st.backup.empty() || st.backup != st.synced_to || st.sent_to != st.synced_to) return "";
  return st.synced_to;
}

Status SlotReplicas::SyncWhole(int slot, const std::string& backup, int64_t epoch) {
  {
    std::lock_guard<std::mutex> l(mu_);
    Slot& st = slots_[slot];
    if (epoch >= st.epoch) {
      st.backup = backup;
      st.epoch = epoch;
    }
    if (st.backup != backup)
      return FailedPrecondition("slot " + std::to_string(slot) + "'s backup is " + st.backup + " by map epoch " +
                                std::to_string(st.epoch) + ", not " + backup);
  }
  std::promise<Status> p;
  auto f = p.get_future();
  copies_.Post([&] {
    Status s = Round(slot, true, /*paced=*/true);
    if (s.ok()) {
      // Runs wait for it from now on (the leader marks it synced once this
      // returns). Runs that ended during the copy were acknowledged without
      // it, and what they changed after the copy took the slot's state is
      // in no round yet: one more round catches up before the leader may
      // promote the backup, or their updates would be lost with the holder.
      {
        std::lock_guard<std::mutex> l(mu_);
        Slot& st = slots_[slot];
        if (st.backup == backup) st.synced_to = backup;
      }
      s = Round(slot, false);
      if (!s.ok()) {
        std::lock_guard<std::mutex> l(mu_);
        Slot& st = slots_[slot];
        if (st.synced_to == backup) st.synced_to.clear();
      }
    }
    p.set_value(s);
  });
  return f.get();
}

Status SlotReplicas::Round(int slot, bool whole, bool paced) {
  std::shared_ptr<std::mutex> round_mu;
  {
    std::lock_guard<std::mutex> l(mu_);
    round_mu = slots_[slot].round_mu;
  }
  // A slot's rounds go one at a time (in order, to one backup's staging).
  std::lock_guard<std::mutex> one(*round_mu);
  std::vector<SyncDone> runs;
  std::string to;
  int64_t epoch = 0;
  bool full = whole;
  {
    std::lock_guard<std::mutex> l(mu_);
    Slot& st = slots_[slot];
    runs.swap(st.waiting);
    st.scheduled = false;
    to = st.backup;
    epoch = st.epoch;
    full = full || st.sent_to != to;
  }
  Status s;
  if (!to.empty()) {
    const auto start = std::chrono::steady_clock::now();
    int64_t sent = 0;
    // A whole copy to a backup that is not synced yet reads big variables
    // in pieces as it sends them (ActorVariables::TakeChanges): sharing
    // their buffers would make the next update copy them whole, and the
    // catch-up round after it (SyncWhole) sends the rows changed meanwhile.
    const int64_t pieces_over = whole ? kMaxReplicateBytes : 0;
    s = SendSlotChanges(slot, epoch, hooks_.self, full, hooks_.take(hooks_.variables_of(slot), full, pieces_over),
                        [&](net::ReplicateSlot m) {
                          for (const Tensor& v : m.values) sent += static_cast<int64_t>(v.bytes());
                          Status r = hooks_.send(to, std::move(m));
                          if (r.ok() && paced && hooks_.copy_bytes_per_s > 0)
                            std::this_thread::sleep_until(
                                start + std::chrono::microseconds(sent * 1000000 / hooks_.copy_bytes_per_s));
                          return r;
                        });
    if (!s.ok())
      s = Unavailable("replicating slot " + std::to_string(slot) + " to its backup " + to + ": " + s.message());
    std::lock_guard<std::mutex> l(mu_);
    // Taken changes that did not arrive are in no dirty record any more: the next round is whole.
    slots_[slot].sent_to = s.ok() ? to : "";
  }
  for (auto& r : runs) r(s, to);
  return s;
}

}  // namespace cluster
}  // namespace sf
