// EtcdClient::Watch: a thread per watch that reads the gateway's stream
// (POST /v3/watch, one JSON response per line: {"result":{"header":..,
// "created":true}}, then {"result":{..,"events":[..]}}) and calls back.
//
// It delivers from the thread that reads, so it holds one response at a
// time. After a stream or etcd dropped, it opens a new watch from the
// revision after the last one delivered (next_revision), and skips anything
// before it: every event exactly once, in order, across reconnects.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cluster/etcd_client.h"
#include "cluster/etcd_json.h"
#include "cluster/etcd_transport.h"

namespace sf {
namespace cluster {

struct EtcdWatch::State {
  std::shared_ptr<EtcdTransport> transport;
  std::string key;
  bool prefix = false;
  EtcdWatchCallback on_events;
  std::atomic<int64_t> next_revision{0};  // written only by the watch's thread (and before it starts)
  std::atomic<bool> ended{false};
  std::thread thread;

  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;             // GUARDED_BY(mu)
  EtcdStream* stream = nullptr;  // GUARDED_BY(mu): the stream being read, to cancel it
};

namespace {

using State = EtcdWatch::State;

Json CreateRequest(const State& st, int64_t start_revision) {
  Json create = {{"key", Base64Encode(st.key)}, {"progress_notify", true}};
  if (st.prefix) create["range_end"] = Base64Encode(PrefixEnd(st.key));
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  return {{"create_request", create}};
}

// The "result" of a stream line, or the status of its {"error":..}.
Result<const Json*> ResultOf(const Json& line) {
  auto error = line.find("error");
  if (error != line.end()) return GatewayError(200, line.dump()).WithPrefix("etcd: watch");
  auto result = line.find("result");
  if (result == line.end() || !result->is_object())
    return DataLoss("etcd: watch: a stream line without a result");
  return &*result;
}

// Opens a stream and waits for etcd's "created"; the stream, or why not.
// Registers it in st so that the watch's destruction can cancel it.
Result<std::unique_ptr<EtcdStream>> OpenOnce(State& st, int64_t start_revision, int64_t* created_revision) {
  auto stream = std::make_unique<EtcdStream>(st.transport);
  {
    std::lock_guard<std::mutex> l(st.mu);
    if (st.stop) return Aborted("etcd: watch: stopped");
    st.stream = stream.get();
  }
  auto unregister = [&] {
    std::lock_guard<std::mutex> l(st.mu);
    st.stream = nullptr;
  };
  const auto deadline = EtcdClock::now() + st.transport->options().request_timeout;
  Status s = stream->Open("watch", "/v3/watch", CreateRequest(st, start_revision), deadline);
  Result<Json> first = s.ok() ? stream->Next(deadline) : Result<Json>(s);
  Result<const Json*> result = first.ok() ? ResultOf(*first) : Result<const Json*>(first.status());
  bool created = false;
  if (result.ok()) s = ReadBool(**result, "created", &created);
  if (result.ok() && s.ok() && created) s = ReadRevision(**result, created_revision);
  if (!result.ok() || !s.ok() || !created) {
    unregister();
    if (!result.ok()) return result.status();
    if (!s.ok()) return s.WithPrefix("etcd: watch");
    return DataLoss("etcd: watch: the stream did not start with 'created'");
  }
  // etcd refuses a watch (its user may not read the key, or its token is
  // stale) by creating it canceled.
  bool canceled = false;
  if (ReadBool(**result, "canceled", &canceled).ok() && canceled) {
    unregister();
    std::string reason;
    auto r = (*result)->find("cancel_reason");
    if (r != (*result)->end() && r->is_string()) reason = r->get<std::string>();
    const std::string why = "etcd: watch " + st.key + ": etcd refused the watch: " + reason;
    Status refused = reason.find("permission denied") != std::string::npos ? PermissionDenied(why)
                                                                             : FailedPrecondition(why);
    if (EtcdNeedsLogin(refused)) {
      const std::string stale = stream->token();
      auto relogged = st.transport->Token(deadline, &stale);
      if (!relogged.ok()) return relogged.status();
      return Unavailable(why + " (logged in again)");
    }
    return refused;
  }
  return stream;  // still registered: the watch's thread unregisters it when done with it
}

// OpenOnce, again once when etcd refused the first for a stale token (it restarted).
Result<std::unique_ptr<EtcdStream>> Open(State& st, int64_t start_revision, int64_t* created_revision) {
  auto first = OpenOnce(st, start_revision, created_revision);
  if (first.ok() || first.status().message().find("(logged in again)") == std::string::npos) return first;
  return OpenOnce(st, start_revision, created_revision);
}

// The events of one result, those before next_revision dropped; sets *end
// (with the error event) when etcd canceled the watch.
Status ParseEvents(State& st, const Json& result, std::vector<EtcdWatchEvent>* out, bool* end) {
  bool canceled = false;
  int64_t compact = 0, header_revision = 0;
  SF_RETURN_IF_ERROR(ReadBool(result, "canceled", &canceled));
  SF_RETURN_IF_ERROR(ReadInt64(result, "compact_revision", &compact));
  SF_RETURN_IF_ERROR(ReadRevision(result, &header_revision));
  if (canceled || compact > 0) {
    EtcdWatchEvent e;
    e.type = EtcdWatchEvent::Type::kError;
    e.compact_revision = compact;
    if (compact > 0) {
      e.error = OutOfRange("etcd: watch " + st.key + ": etcd compacted its history up to revision " +
                           std::to_string(compact) + ", past revision " + std::to_string(st.next_revision.load()) +
                           " the watch needed: read again and watch from the revision read");
    } else {
      std::string reason;
      auto r = result.find("cancel_reason");
      if (r != result.end() && r->is_string()) reason = r->get<std::string>();
      e.error = FailedPrecondition("etcd: watch " + st.key + ": etcd canceled the watch: " + reason);
    }
    out->push_back(std::move(e));
    *end = true;
    return Status::OK();
  }
  auto events = result.find("events");
  if (events == result.end() || events->is_null()) {
    // A progress notification: etcd sent everything up to its header's revision.
    if (header_revision + 1 > st.next_revision) st.next_revision = header_revision + 1;
    return Status::OK();
  }
  if (!events->is_array()) return DataLoss("field 'events' is not an array");
  int64_t last = 0;
  for (const Json& ev : *events) {
    EtcdWatchEvent e;
    std::string type;
    auto t = ev.is_object() ? ev.find("type") : ev.end();
    if (t != ev.end() && t->is_string()) type = t->get<std::string>();
    if (type == "DELETE") {
      e.type = EtcdWatchEvent::Type::kDelete;
    } else if (!type.empty() && type != "PUT") {
      return DataLoss("an event of unknown type '" + type.substr(0, 20) + "'");
    }
    auto kv = ev.is_object() ? ev.find("kv") : ev.end();
    if (kv == ev.end()) return DataLoss("an event without 'kv'");
    auto parsed = ParseKeyValue(*kv);
    if (!parsed.ok()) return parsed.status();
    e.kv = std::move(*parsed);
    if (e.kv.mod_revision < st.next_revision) continue;  // delivered before a reconnect
    last = std::max(last, e.kv.mod_revision);
    out->push_back(std::move(e));
  }
  if (last > 0) st.next_revision = last + 1;
  return Status::OK();
}

void Deliver(State& st, const std::vector<EtcdWatchEvent>& events) {
  {
    std::lock_guard<std::mutex> l(st.mu);
    if (st.stop) return;
  }
  if (!events.empty()) st.on_events(events);
}

// Reads stream until it breaks, delivering; returns whether the watch ended.
bool ReadStream(State& st, EtcdStream& stream) {
  for (;;) {
    auto line = stream.Next();
    if (!line.ok()) return false;
    auto result = ResultOf(*line);
    if (!result.ok()) return false;  // etcd's error on the stream (stopping, no leader): reconnect
    std::vector<EtcdWatchEvent> events;
    bool end = false;
    Status s = ParseEvents(st, **result, &events, &end);
    if (!s.ok()) {
      // A malformed response: deliver it as the watch's end, as etcd does not
      // resend it and resuming past it would hide the events it held.
      EtcdWatchEvent e;
      e.type = EtcdWatchEvent::Type::kError;
      e.error = s.WithPrefix("etcd: watch " + st.key + ": malformed event");
      events.push_back(std::move(e));
      end = true;
    }
    Deliver(st, events);
    if (end) return true;
  }
}

void WatchLoop(std::shared_ptr<State> st, std::unique_ptr<EtcdStream> stream) {
  for (;;) {
    if (stream) {
      const bool ended = ReadStream(*st, *stream);
      {
        std::lock_guard<std::mutex> l(st->mu);
        st->stream = nullptr;
      }
      stream.reset();
      if (ended) {
        st->ended = true;
        return;
      }
    }
    {
      std::unique_lock<std::mutex> l(st->mu);
      st->cv.wait_for(l, st->transport->options().retry_interval, [&] { return st->stop; });
      if (st->stop) return;
    }
    if (st->transport->closed()) return;
    int64_t created = 0;
    auto opened = Open(*st, st->next_revision, &created);
    if (opened.ok()) stream = std::move(*opened);
  }
}

}  // namespace

EtcdWatch::EtcdWatch(std::shared_ptr<State> state) : state_(std::move(state)) {}

EtcdWatch::~EtcdWatch() {
  {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->stop = true;
    if (state_->stream != nullptr) state_->stream->Cancel();
    state_->cv.notify_all();
  }
  JoinUnlessSelf(state_->thread);
}

int64_t EtcdWatch::next_revision() const { return state_->next_revision.load(); }

bool EtcdWatch::ended() const { return state_->ended.load(); }

Result<std::unique_ptr<EtcdWatch>> EtcdClient::Watch(const std::string& prefix, int64_t start_revision,
                                                     EtcdWatchCallback on_events) {
  return StartWatch(prefix, true, start_revision, std::move(on_events));
}

Result<std::unique_ptr<EtcdWatch>> EtcdClient::WatchKey(const std::string& key, int64_t start_revision,
                                                        EtcdWatchCallback on_events) {
  return StartWatch(key, false, start_revision, std::move(on_events));
}

Result<std::unique_ptr<EtcdWatch>> EtcdClient::StartWatch(const std::string& key, bool prefix,
                                                          int64_t start_revision, EtcdWatchCallback on_events) {
  if (!on_events) return InvalidArgument("etcd: watch: no callback");
  auto st = std::make_shared<State>();
  st->transport = transport_;
  st->key = key;
  st->prefix = prefix;
  st->on_events = std::move(on_events);
  int64_t created = 0;
  SF_ASSIGN_OR_RETURN(std::unique_ptr<EtcdStream> stream, Open(*st, start_revision, &created));
  // From now: etcd sends what follows the revision it created the watch at.
  st->next_revision = start_revision > 0 ? start_revision : created + 1;
  st->thread = std::thread(WatchLoop, st, std::move(stream));
  return std::make_unique<EtcdWatch>(st);
}

}  // namespace cluster
}  // namespace sf
