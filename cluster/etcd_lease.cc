// EtcdClient::KeepAlive: a thread per kept lease that refreshes it every
// TTL/3 through POST /v3/lease/keepalive. That endpoint is a stream in gRPC;
// through the gateway one request body ({"ID":".."}) gets one line back,
// {"result":{"ID":"..","TTL":"5"}}, and the stream ends, so each refresh is
// one short call. A lease that ended answers without "TTL" (0).
//
// The lease is counted lost at the first refresh that says so, or when no
// refresh succeeded until the end of the TTL the last one granted: past that
// point etcd may have expired it, and a node that acted as the holder after
// it could collide with its successor.
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "cluster/etcd_client.h"
#include "cluster/etcd_json.h"
#include "cluster/etcd_transport.h"

namespace sf {
namespace cluster {

struct EtcdKeepAlive::State {
  std::shared_ptr<EtcdTransport> transport;
  EtcdLease lease;
  std::function<void(const Status&)> on_lost;
  std::atomic<bool> lost{false};
  std::thread thread;

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;  // GUARDED_BY(mu)
};

namespace {

using State = EtcdKeepAlive::State;

std::string LeaseName(int64_t id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(id));
  return std::string("lease ") + buf;
}

// One refresh: the TTL etcd granted again (0 when the lease ended), or the call's error.
Result<int64_t> Refresh(EtcdTransport& t, int64_t id, EtcdClock::time_point deadline) {
  SF_ASSIGN_OR_RETURN(Json line, t.Call("lease keepalive", "/v3/lease/keepalive", {{"ID", std::to_string(id)}},
                                        deadline));
  auto error = line.find("error");
  if (error != line.end()) return GatewayError(200, line.dump()).WithPrefix("etcd: lease keepalive");
  auto result = line.find("result");
  if (result == line.end() || !result->is_object())
    return DataLoss("etcd: lease keepalive: malformed reply: no result");
  int64_t ttl = 0;
  Status s = ReadInt64(*result, "TTL", &ttl);
  if (!s.ok()) return s.WithPrefix("etcd: lease keepalive: malformed reply");
  return ttl;
}

// Waits until `until` or stop; returns whether to stop.
bool WaitOrStop(State& st, EtcdClock::time_point until) {
  std::unique_lock<std::mutex> l(st.mu);
  st.cv.wait_until(l, until, [&] { return st.stop; });
  return st.stop;
}

void Lost(State& st, const Status& why) {
  {
    std::lock_guard<std::mutex> l(st.mu);
    if (st.stop) return;  // the owner let go: nobody to tell
  }
  st.lost = true;
  st.on_lost(why);
}

void KeepAliveLoop(std::shared_ptr<State> st) {
  const auto& options = st->transport->options();
  // The lease may have been granted a while ago: refresh at once, and count
  // its life from the last refresh that etcd answered.
  auto ttl = std::chrono::seconds(st->lease.ttl_seconds);
  auto expires = EtcdClock::now() + ttl;
  auto next = EtcdClock::now();
  Status last_error;
  for (;;) {
    if (WaitOrStop(*st, next)) return;
    if (st->transport->closed()) return;
    const auto sent = EtcdClock::now();
    auto r = Refresh(*st->transport, st->lease.id, std::min(sent + options.request_timeout, expires));
    const auto now = EtcdClock::now();
    if ((r.ok() && *r <= 0) || r.status().code() == Code::kNotFound) {
      Lost(*st, NotFound("etcd: " + LeaseName(st->lease.id) + " has ended (expired or revoked)"));
      return;
    }
    if (r.ok()) {
      ttl = std::chrono::seconds(*r);
      expires = sent + ttl;
      next = now + std::chrono::duration_cast<EtcdClock::duration>(ttl) / 3;
      continue;
    }
    if (st->transport->closed()) return;
    last_error = r.status();
    if (now >= expires) {
      Lost(*st, Unavailable("etcd: " + LeaseName(st->lease.id) + ": no refresh succeeded within its TTL of " +
                            std::to_string(ttl.count()) + " s, so it may have expired; last error: " +
                            last_error.ToString()));
      return;
    }
    next = std::min(now + options.retry_interval, expires);
  }
}

}  // namespace

EtcdKeepAlive::EtcdKeepAlive(std::shared_ptr<State> state) : state_(std::move(state)) {}

EtcdKeepAlive::~EtcdKeepAlive() {
  {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->stop = true;
    state_->cv.notify_all();
  }
  JoinUnlessSelf(state_->thread);
}

bool EtcdKeepAlive::lost() const { return state_->lost.load(); }

const EtcdLease& EtcdKeepAlive::lease() const { return state_->lease; }

Result<std::unique_ptr<EtcdKeepAlive>> EtcdClient::KeepAlive(const EtcdLease& lease,
                                                             std::function<void(const Status&)> on_lost) {
  if (lease.id == 0 || lease.ttl_seconds <= 0)
    return InvalidArgument("etcd: keepalive: a lease needs an id and a positive TTL (from GrantLease)");
  if (!on_lost) return InvalidArgument("etcd: keepalive: no on_lost callback");
  auto st = std::make_shared<State>();
  st->transport = transport_;
  st->lease = lease;
  st->on_lost = std::move(on_lost);
  st->thread = std::thread(KeepAliveLoop, st);
  return std::make_unique<EtcdKeepAlive>(st);
}

}  // namespace cluster
}  // namespace sf
