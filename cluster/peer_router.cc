// A node's connections to the other members (cluster/peer_router.h).
#include "cluster/peer_router.h"

#include <chrono>
#include <vector>

namespace sf {
namespace cluster {

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

PeerRouter::PeerRouter(Hooks hooks) : hooks_(std::move(hooks)) {
  dialer_ = std::thread([this] { DialLoop(); });
}

PeerRouter::~PeerRouter() { Stop(); }

Status PeerRouter::RecentFailureLocked(const std::string& addr, bool forget_old) {
  auto f = failed_dials_.find(addr);
  if (f == failed_dials_.end()) return Status::OK();
  const int64_t ago = NowMs() - f->second.first;
  if (ago < kRedialMs)
    return Unavailable(f->second.second.message() + " (" + std::to_string(ago) + " ms ago; not dialed again for " +
                       std::to_string(kRedialMs) + " ms)");
  if (forget_old) failed_dials_.erase(f);
  return Status::OK();
}

Result<net::ConnectionPtr> PeerRouter::Peer(const std::string& addr) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) return Unavailable("node " + hooks_.node_name() + " is stopping");
    auto it = peers_.find(addr);
    if (it != peers_.end() && it->second->is_up()) return it->second;
    SF_RETURN_IF_ERROR(RecentFailureLocked(addr, /*forget_old=*/true));
  }
  auto dialed = hooks_.dial(addr);
  if (!dialed.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    if (failed_dials_.size() >= 4096) failed_dials_.clear();
    failed_dials_[addr] = {NowMs(), dialed.status()};
    return dialed.status();
  }
  net::ConnectionPtr c = std::move(*dialed);
  net::ConnectionPtr winner;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& slot = peers_[addr];
    if (!slot || !slot->is_up()) {
      slot = c;
      return c;
    }
    winner = slot;
  }
  // Another thread dialed first. Closed outside mu_: closing runs the
  // node's down handler, which calls Forget.
  c->Close();
  return winner;
}

Result<bool> PeerRouter::Route(const std::string& to, Outgoing out, std::function<void(Status)> later) {
  net::ConnectionPtr c;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopped_) return Unavailable("node " + hooks_.node_name() + " is stopping");
    // Behind messages already waiting for this address, to keep order.
    if (!queued_.count(to)) {
      auto it = peers_.find(to);
      if (it != peers_.end() && it->second->is_up()) c = it->second;
    }
    if (!c) {
      SF_RETURN_IF_ERROR(RecentFailureLocked(to, /*forget_old=*/false));
      const int64_t bytes = out.bytes;
      if (queued_bytes_ + bytes > kMaxQueuedBytes)
        return ResourceExhausted("node " + hooks_.node_name() + " has " + std::to_string(queued_bytes_) +
                                 " bytes waiting for connections to be dialed");
      queued_[to].push_back(Queued{std::move(out), std::move(later)});
      queued_bytes_ += bytes;
      cv_.notify_all();
      return true;
    }
  }
  SF_RETURN_IF_ERROR(out.send(c));
  return false;
}

bool PeerRouter::LostWithin(const std::string& addr, int64_t ms) const {
  std::lock_guard<std::mutex> l(mu_);
  if (auto p = peers_.find(addr); p != peers_.end() && p->second->is_up()) return false;
  auto it = lost_.find(addr);
  return it != lost_.end() && NowMs() - it->second <= ms;
}

std::string PeerRouter::Forget(const net::Connection* c) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto it = peers_.begin(); it != peers_.end(); ++it) {
    if (it->second.get() != c) continue;
    std::string addr = it->first;
    peers_.erase(it);
    if (lost_.size() >= 4096) lost_.erase(lost_.begin());
    lost_[addr] = NowMs();
    return addr;
  }
  return "";
}

void PeerRouter::DialLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [&] { return stopped_ || !queued_.empty(); });
    if (stopped_) break;
    const std::string to = queued_.begin()->first;
    l.unlock();
    auto c = Peer(to);
    l.lock();
    // Sent in batches, the entry kept until it is empty: what is sent
    // meanwhile queues behind them, in order.
    while (true) {
      auto q = queued_.find(to);
      if (q == queued_.end()) break;
      if (q->second.empty()) {
        queued_.erase(q);
        break;
      }
      std::deque<Queued> batch;
      batch.swap(q->second);
      for (const auto& u : batch) queued_bytes_ -= u.out.bytes;
      l.unlock();
      Status s = c.ok() ? Status::OK() : c.status();
      bool unsent = false;
      for (auto& u : batch) {
        Status sent = s.ok() ? u.out.send(*c) : s;
        if (!sent.ok()) s = sent;
        if (u.later) u.later(sent.WithPrefix("sending to " + to));
        else unsent |= !sent.ok();
      }
      if (unsent && hooks_.on_unsent) hooks_.on_unsent(to, s);
      l.lock();
    }
  }
  // Stopping: what waits is told so, outside mu_ (a later aborts a step).
  std::vector<std::function<void(Status)>> untold;
  for (auto& [to, q] : queued_)
    for (auto& u : q)
      if (u.later) untold.push_back(std::move(u.later));
  queued_.clear();
  queued_bytes_ = 0;
  l.unlock();
  for (auto& later : untold) later(Unavailable("node " + hooks_.node_name() + " is stopping"));
}

void PeerRouter::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
  if (dialer_.joinable()) dialer_.join();
}

void PeerRouter::Clear() {
  std::map<std::string, net::ConnectionPtr> gone;
  {
    std::lock_guard<std::mutex> l(mu_);
    gone.swap(peers_);
  }
}

}  // namespace cluster
}  // namespace sf
