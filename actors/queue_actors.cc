#include "actors/queue_actors.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <random>
#include <unordered_map>

#include "actors/chunk_queue_actor.h"
#include "actors/queue_protocol.h"

namespace sf {
namespace runtime {
namespace {

}  // namespace

// Steps cancelled lately (the latest kMax) and why, shared by a store's queue
// actors: a request of one that reaches its queue after the cancel (they
// come from different threads, unordered) is refused instead of waiting for
// a step that has already failed. CancelStep records a step before it tells
// the queues, so a request either finds the record or is waiting when the
// cancel arrives. Thread-safety: any thread.
class CancelledSteps {
 public:
  void Add(int64_t step, const Status& why) {
    std::lock_guard<std::mutex> l(mu_);
    if (!why_.emplace(step, why).second) return;
    order_.push_back(step);
    if (order_.size() > kMax) {
      why_.erase(order_.front());
      order_.pop_front();
    }
  }
  // Why step was cancelled; OK when it was not (lately).
  Status Of(int64_t step) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = why_.find(step);
    return it == why_.end() ? Status::OK() : it->second;
  }

 private:
  static constexpr size_t kMax = 4096;
  mutable std::mutex mu_;
  std::unordered_map<int64_t, Status> why_;  // GUARDED_BY(mu_)
  std::deque<int64_t> order_;                // GUARDED_BY(mu_): oldest first
};

namespace {

struct QueueState {
  struct EnqWaiter {
    int64_t id;
    std::vector<QueueElement> elems;
    size_t next;  // elements before it are already in the queue
    std::function<void(Status)> done;
    int64_t step_id = 0;
  };
  struct DeqWaiter {
    int64_t id;
    int64_t n;
    bool many;
    bool up_to;  // closed with fewer than n left: takes them (at least one)
    std::function<void(Result<QueueTuple>)> done;
    int64_t step_id = 0;
    bool any = false;  // takes what there is (up to n) as soon as there is one
  };

  std::string name;
  QueueSpec spec;
  std::deque<QueueElement> items;
  std::mt19937_64 rng;
  bool closed = false;
  bool shut_down = false;
  // Waiters are served in arrival order: the first one blocks those behind it.
  std::deque<EnqWaiter> enq;
  std::deque<DeqWaiter> deq;
  int64_t next_waiter = 1;
  std::shared_ptr<const CancelledSteps> cancelled;  // the store's

  std::string Where() const { return std::string(QueueKindName(spec.kind)) + " '" + name + "'"; }
  bool HasRoom() const {
    return spec.capacity < 0 || static_cast<int64_t>(items.size()) < spec.capacity;
  }
  // Elements a dequeue may take now: a shuffle queue keeps min_after_dequeue
  // back until it is closed, so its order stays mixed.
  int64_t Available() const {
    const int64_t s = static_cast<int64_t>(items.size());
    if (closed || spec.kind != QueueSpec::Kind::kRandomShuffle) return s;
    return std::max<int64_t>(0, s - spec.min_after_dequeue);
  }
  QueueElement TakeOne() {
    if (spec.kind == QueueSpec::Kind::kRandomShuffle && items.size() > 1) {
      const size_t k = static_cast<size_t>(rng() % items.size());
      std::swap(items[k], items.back());
      QueueElement e = std::move(items.back());
      items.pop_back();
      return e;
    }
    QueueElement e = std::move(items.front());
    items.pop_front();
    return e;
  }
  // Answers a dequeue of n elements. REQUIRES: Available() >= n.
  void Finish(DeqWaiter& w) {
    if (!w.many) {
      w.done(MaterializeQueueElement(TakeOne()));
      return;
    }
    std::vector<QueueElement> taken;
    taken.reserve(w.n);
    for (int64_t i = 0; i < w.n; ++i) taken.push_back(TakeOne());
    auto batch = StackQueueElements(name, taken, spec.component_types,
                                    spec.kind == QueueSpec::Kind::kPaddingFIFO);
    if (!batch.ok()) {
      // Put them back where they were: a failed dequeue loses nothing.
      for (auto it = taken.rbegin(); it != taken.rend(); ++it) items.push_front(std::move(*it));
      w.done(batch.status());
      return;
    }
    w.done(std::move(batch).value());
  }
  // How many elements dequeue w takes now (0: it waits).
  int64_t Ready(const DeqWaiter& w) const {
    const int64_t a = Available();
    if (a >= w.n) return w.n;
    return w.any && a > 0 ? a : 0;
  }
  // Serves waiting enqueues and dequeues until none can progress.
  void Serve() {
    for (bool progress = true; progress;) {
      progress = false;
      while (!enq.empty()) {
        EnqWaiter& w = enq.front();
        while (w.next < w.elems.size() && HasRoom()) items.push_back(std::move(w.elems[w.next++]));
        if (w.next < w.elems.size()) break;
        auto done = std::move(w.done);
        enq.pop_front();
        done(Status::OK());
        progress = true;
      }
      while (!deq.empty()) {
        DeqWaiter& w = deq.front();
        if (const int64_t k = Ready(w); k > 0) {
          DeqWaiter taken = std::move(w);
          deq.pop_front();
          taken.n = k;
          Finish(taken);
          progress = true;
          continue;
        }
        // Closed: waiting enqueues exist only while the queue is full, so
        // nothing more can arrive for this one.
        if (!closed) break;
        if (w.up_to && !items.empty()) {
          DeqWaiter taken = std::move(w);
          deq.pop_front();
          taken.n = static_cast<int64_t>(items.size());
          Finish(taken);
          progress = true;
          continue;
        }
        auto done = std::move(w.done);
        const int64_t n = w.n;
        deq.pop_front();
        done(OutOfRange(Where() + " is closed and has " + std::to_string(items.size()) +
                        " element(s), dequeue asked for " + std::to_string(n)));
        progress = true;
      }
    }
  }
  // Fails the waiters of step step_id with s, then serves the rest (a
  // removed head waiter may have blocked those behind it).
  void FailStep(int64_t step_id, const Status& s) {
    // Taken out first, answered after: an answer may run a kernel's callback.
    auto take = [step_id](auto& waiters) {
      std::vector<decltype(waiters.front().done)> done;
      for (auto it = waiters.begin(); it != waiters.end();) {
        if (it->step_id != step_id) {
          ++it;
          continue;
        }
        done.push_back(std::move(it->done));
        it = waiters.erase(it);
      }
      return done;
    };
    auto enq_done = take(enq);
    auto deq_done = take(deq);
    for (auto& d : enq_done) d(s);
    for (auto& d : deq_done) d(s);
    if (!enq_done.empty() || !deq_done.empty()) Serve();
  }
  // Fails every waiter with s.
  void FailAll(const Status& s, bool enqueues, bool dequeues) {
    if (enqueues) {
      std::deque<EnqWaiter> e;
      e.swap(enq);
      for (auto& w : e) w.done(s);
    }
    if (dequeues) {
      std::deque<DeqWaiter> d;
      d.swap(deq);
      for (auto& w : d) w.done(s);
    }
  }
};

using QueueSelf = QueueActor::stateful_pointer<QueueState>;

void StartTimer(QueueSelf self, int64_t waiter, int64_t timeout_ms) {
  self->delayed_send(self, std::chrono::milliseconds(timeout_ms), QueueWaitTimeout{waiter, timeout_ms});
}

void Timeout(QueueState& st, const QueueWaitTimeout& m) {
  const std::string waited = " waited " + std::to_string(m.timeout_ms) + " ms";
  for (auto it = st.enq.begin(); it != st.enq.end(); ++it) {
    if (it->id != m.waiter) continue;
    auto done = std::move(it->done);
    st.enq.erase(it);
    done(Status(Code::kUnavailable, "deadline exceeded: enqueue to " + st.Where() + waited +
                                        " for room (capacity " + std::to_string(st.spec.capacity) + ")"));
    st.Serve();
    return;
  }
  for (auto it = st.deq.begin(); it != st.deq.end(); ++it) {
    if (it->id != m.waiter) continue;
    auto done = std::move(it->done);
    const int64_t n = it->n;
    st.deq.erase(it);
    done(Status(Code::kUnavailable, "deadline exceeded: dequeue of " + std::to_string(n) +
                                        " element(s) from " + st.Where() + waited + " (it holds " +
                                        std::to_string(st.items.size()) + ")"));
    // The head waiter may have blocked those behind it.
    st.Serve();
    return;
  }
}

// After ShutdownQueue every request is answered Aborted at once, and so is
// one of a step cancelled before it arrived; true when done was answered so.
// Why a request of a cancelled step fails.
Status CancelledWait(const QueueState& st, const Status& why) {
  return Aborted("waiting on " + st.Where() + " was cancelled: " + why.message());
}

template <typename Done>
bool Refused(const QueueState& st, Done& done, int64_t step_id = 0) {
  if (step_id != 0) {
    Status why = st.cancelled->Of(step_id);
    if (!why.ok()) {
      done(CancelledWait(st, why));
      return true;
    }
  }
  if (!st.shut_down) return false;
  done(Aborted(st.Where() + ": the session is shutting down"));
  return true;
}

// The behavior of a queue actor: one handler per message of
// actors/queue_protocol.h (taken by mutable reference: the message is the
// handler's alone, its elements move into the queue).
QueueActor::behavior_type QueueBehavior(QueueSelf self, std::string name, QueueSpec spec,
                                        std::shared_ptr<const CancelledSteps> cancelled) {
  QueueState& st = self->state;
  st.cancelled = std::move(cancelled);
  st.name = std::move(name);
  st.spec = std::move(spec);
  st.rng.seed(st.spec.seed != 0 ? static_cast<uint64_t>(st.spec.seed) : std::random_device{}());
  return {
      [self](EnqueueElements& m) {
        QueueState& st = self->state;
        if (Refused(st, m.done, m.step_id)) return;
        if (st.closed) return m.done(Aborted(st.Where() + " is closed"));
        if (st.enq.empty() && (st.spec.capacity < 0 ||
                               static_cast<int64_t>(st.items.size() + m.elems.size()) <= st.spec.capacity)) {
          for (auto& e : m.elems) st.items.push_back(std::move(e));
          m.done(Status::OK());
          if (!st.deq.empty()) st.Serve();
          return;
        }
        const int64_t id = st.next_waiter++;
        st.enq.push_back(QueueState::EnqWaiter{id, std::move(m.elems), 0, std::move(m.done), m.step_id});
        st.Serve();
        if (m.timeout_ms > 0 && !st.enq.empty() && st.enq.back().id == id) StartTimer(self, id, m.timeout_ms);
      },
      [self](DequeueElements& m) {
        QueueState& st = self->state;
        if (Refused(st, m.done, m.step_id)) return;
        QueueState::DeqWaiter now{0, m.n, m.many, m.up_to, nullptr, m.step_id, m.any};
        if (st.deq.empty() && st.Ready(now) > 0) {
          now.n = st.Ready(now);
          now.done = std::move(m.done);
          st.Finish(now);
          if (!st.enq.empty()) st.Serve();
          return;
        }
        const int64_t id = st.next_waiter++;
        st.deq.push_back(QueueState::DeqWaiter{id, m.n, m.many, m.up_to, std::move(m.done), m.step_id, m.any});
        st.Serve();
        if (m.timeout_ms > 0 && !st.deq.empty() && st.deq.back().id == id) StartTimer(self, id, m.timeout_ms);
      },
      [self](CloseQueue& m) {
        QueueState& st = self->state;
        if (Refused(st, m.done)) return;
        st.closed = true;
        if (m.cancel_pending)
          st.FailAll(Aborted(st.Where() + " was closed; its pending enqueue was cancelled"), true, false);
        st.Serve();
        m.done(Status::OK());
      },
      [self](QueueSize& m) {
        QueueState& st = self->state;
        if (Refused(st, m.done)) return;
        m.done(static_cast<int64_t>(st.items.size()));
      },
      [self](const QueueWaitTimeout& m) { Timeout(self->state, m); },
      [self](ShutdownQueue) {
        QueueState& st = self->state;
        st.shut_down = true;
        st.FailAll(Aborted(st.Where() + ": the session is shutting down"), true, true);
      },
      [self](CancelQueueStep& m) {
        QueueState& st = self->state;
        st.FailStep(m.step_id, CancelledWait(st, m.why));
      },
  };
}

QueueActor SpawnQueue(caf::actor_system& sys, const std::string& name, const QueueSpec& spec,
                      std::shared_ptr<const CancelledSteps> cancelled) {
  return sys.spawn(QueueBehavior, name, spec, std::move(cancelled));
}

bool SameSpec(const QueueSpec& a, const QueueSpec& b) {
  return a.kind == b.kind && a.component_types == b.component_types && a.shapes == b.shapes &&
         a.capacity == b.capacity && a.min_after_dequeue == b.min_after_dequeue && a.seed == b.seed;
}

}  // namespace

struct ActorQueues::Entry {
  std::string name;
  QueueSpec spec;
  QueueActor actor;
};

ActorQueues::ActorQueues(caf::actor_system& sys, std::function<int64_t()> chunk_clock_ms)
    : sys_(sys),
      salt_(static_cast<int64_t>(1 + std::random_device{}() % 0x7fffffffu) << 32),
      cancelled_(std::make_shared<CancelledSteps>()),
      chunks_(std::make_unique<ActorChunkQueues>(sys, std::move(chunk_clock_ms))) {}

ChunkQueueService* ActorQueues::chunk_queues() { return chunks_.get(); }

ActorQueues::~ActorQueues() {
  Shutdown();
  Stop();
}

void ActorQueues::Shutdown() {
  std::lock_guard<std::mutex> l(mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& e : queues_)
    if (e) caf::anon_send(e->actor, ShutdownQueue{});
  chunks_->Shutdown();
}

void ActorQueues::Stop() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : queues_) {
    if (!e) continue;
    if (e->actor) caf::anon_send_exit(e->actor, caf::exit_reason::user_shutdown);
    e->actor = QueueActor();
  }
  chunks_->Stop();
}

Result<int64_t> ActorQueues::Resolve(const std::string& name, const QueueSpec& spec) {
  SF_RETURN_IF_ERROR(ValidateQueueSpec(name, spec));
  std::lock_guard<std::mutex> l(mu_);
  if (shut_down_) return Aborted("queue '" + name + "': the session is shutting down");
  auto it = ids_.find(name);
  if (it != ids_.end()) {
    const QueueSpec& have = queues_[it->second]->spec;
    if (!SameSpec(have, spec))
      return InvalidArgument("queue '" + name + "' already exists as a " + QueueKindName(have.kind) +
                             " with other component types, shapes, capacity or seed; a " +
                             QueueKindName(spec.kind) + " cannot share its name");
    return it->second;
  }
  // Each queue is an actor: bounded, so graphs naming queues without end cannot exhaust the process.
  if (ids_.size() >= kMaxQueues || queues_.size() >= 16 * kMaxQueues)
    return ResourceExhausted("queue '" + name + "' refused: " + std::to_string(ids_.size()) +
                             " queues exist here already (at most " + std::to_string(kMaxQueues) + ", and " +
                             std::to_string(16 * kMaxQueues) + " in the store's life)");
  if (quotas_) SF_RETURN_IF_ERROR(quotas_->Take(NamespaceQuotas::Kind::kQueue, name, 0, true));
  const int64_t id = static_cast<int64_t>(queues_.size());
  auto e = std::make_shared<Entry>();
  e->name = name;
  e->spec = spec;
  e->actor = SpawnQueue(sys_, name, spec, cancelled_);
  queues_.push_back(std::move(e));
  ids_[name] = id;
  return id;
}

std::shared_ptr<const ActorQueues::Entry> ActorQueues::Find(int64_t id, Status* error) const {
  std::lock_guard<std::mutex> l(mu_);
  if (id < 0 || id >= static_cast<int64_t>(queues_.size()) || !queues_[id]) {
    *error = NotFound("no queue with id " + std::to_string(id) + " (or it was dropped with its namespace)");
    return nullptr;
  }
  std::shared_ptr<const Entry> e = queues_[id];
  if (shut_down_) {
    *error = Aborted("queue '" + e->name + "': the session is shutting down");
    return nullptr;
  }
  return e;
}

// Requests go straight to the queue's actor: Stop() is only called once no
// request is in flight, so the handle is live.

Result<QueueSpec> ActorQueues::SpecOf(int64_t id) const {
  Status err;
  std::shared_ptr<const Entry> e = Find(id, &err);
  if (!e) return err;
  return e->spec;
}

void ActorQueues::Enqueue(int64_t id, QueueTuple t, int64_t timeout_ms, std::function<void(Status)> done,
                          int64_t step_id) {
  Status err;
  std::shared_ptr<const Entry> e = Find(id, &err);
  if (!e) return done(err);
  Status s = ValidateQueueTuple(e->name, e->spec, t);
  if (!s.ok()) return done(s);
  EnqueueElements m{{}, timeout_ms, std::move(done), step_id};
  m.elems.push_back(QueueElement{std::make_shared<const QueueTuple>(std::move(t)), -1});
  caf::anon_send(e->actor, std::move(m));
}

void ActorQueues::EnqueueMany(int64_t id, QueueTuple batch, int64_t timeout_ms, std::function<void(Status)> done,
                              int64_t step_id) {
  Status err;
  std::shared_ptr<const Entry> e = Find(id, &err);
  if (!e) return done(err);
  auto n = ValidateQueueBatch(e->name, e->spec, batch);
  if (!n.ok()) return done(n.status());
  // Each row costs an element entry up front, whatever its bytes: a batch of
  // zero-size rows may ask for no more entries than a tensor may take bytes.
  const int64_t entry = static_cast<int64_t>(sizeof(QueueElement));
  if (*n > AllocationLimit() / entry)
    return done(ResourceExhausted("queue '" + e->name + "': enqueue_many of " + std::to_string(*n) +
                                  " elements needs " + std::to_string(entry) + " bytes of bookkeeping each, past the " +
                                  "allocation limit of " + std::to_string(AllocationLimit()) + " bytes"));
  EnqueueElements m{{}, timeout_ms, std::move(done), step_id};
  // Rows of the batch, not copies: the elements share its buffers.
  auto src = std::make_shared<const QueueTuple>(std::move(batch));
  m.elems.reserve(*n);
  for (int64_t i = 0; i < *n; ++i) m.elems.push_back(QueueElement{src, i});
  caf::anon_send(e->actor, std::move(m));
}

void ActorQueues::Dequeue(int64_t id, int64_t timeout_ms, std::function<void(Result<QueueTuple>)> done,
                          int64_t step_id) {
  Status err;
  std::shared_ptr<const Entry> e = Find(id, &err);
  if (!e) return done(err);
  caf::anon_send(e->actor, DequeueElements{1, false, false, timeout_ms, std::move(done), step_id});
}

void ActorQueues::DequeueMany(int64_t id, int64_t n, int64_t timeout_ms,
                              std::function<void(Result<QueueTuple>)> done, int64_t step_id) {
  DequeueBatch(id, n, false, timeout_ms, std::move(done), step_id);
}

void ActorQueues::DequeueUpTo(int64_t id, int64_t n, int64_t timeout_ms,
                              std::function<void(Result<QueueTuple>)> done, int64_t step_id) {
  DequeueBatch(id, n, true, timeout_ms, std::move(done), step_id);
}

void ActorQueues::DequeueAvailable(int64_t id, int64_t n, int64_t timeout_ms,
                                   std::function<void(Result<QueueTuple>)> done, int64_t step_id) {
  DequeueBatch(id, n, true, timeout_ms, std::move(done), step_id, /*any=*/true);
}

void ActorQueues::DequeueBatch(int64_t id, int64_t n, bool up_to, int64_t timeout_ms,
                               std::function<void(Result<QueueTuple>)> done, int64_t step_id, bool any) {
  Status err;
  std::shared_ptr<const Entry> e = Find(id, &err);
  if (!e) return done(err);
  const char* what = up_to ? "dequeue_up_to" : "dequeue_many";
  if (n < 1) return done(InvalidArgument("queue '" + e->name + "': " + what + " needs n >= 1, got " +
                                         std::to_string(n)));
  if (e->spec.capacity > 0 && n > e->spec.capacity)
    return done(InvalidArgument("queue '" + e->name + "': " + what + " of " + std::to_string(n) +
                                " elements can never be served by a queue of capacity " +
                                std::to_string(e->spec.capacity)));
  caf::anon_send(e->actor, DequeueElements{n, true, up_to, timeout_ms, std::move(done), step_id, any});
}

void ActorQueues::CancelStep(int64_t step_id, const Status& why) {
  if (step_id == 0) return;  // requests without a step are never cancelled
  cancelled_->Add(step_id, why);  // first: a request arriving later finds it
  chunks_->CancelStep(step_id, why);
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : queues_)
    if (e && e->actor) caf::anon_send(e->actor, CancelQueueStep{step_id, why});
}

void ActorQueues::Close(int64_t id, bool cancel_pending, std::function<void(Status)> done) {
  Status err;
  std::shared_ptr<const Entry> e = Find(id, &err);
  if (!e) return done(err);
  caf::anon_send(e->actor, CloseQueue{cancel_pending, std::move(done)});
}

void ActorQueues::Size(int64_t id, std::function<void(Result<int64_t>)> done) {
  Status err;
  std::shared_ptr<const Entry> e = Find(id, &err);
  if (!e) return done(err);
  caf::anon_send(e->actor, QueueSize{std::move(done)});
}

std::string ActorQueues::NameOf(int64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  return id >= 0 && id < static_cast<int64_t>(queues_.size()) && queues_[id] ? queues_[id]->name : "";
}

Result<int64_t> ActorQueues::IncarnationOf(int64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  if (id < 0 || id >= static_cast<int64_t>(queues_.size()) || !queues_[id])
    return NotFound("no queue with id " + std::to_string(id));
  return salt_ | (id & 0xffffffff);
}

std::vector<std::string> ActorQueues::NamesWhere(const std::function<bool(const std::string&)>& keep) const {
  std::lock_guard<std::mutex> l(mu_);
  return SortedKeysWhere(ids_, keep);
}

int64_t ActorQueues::DropWhere(const std::function<bool(const std::string&)>& drop) {
  std::lock_guard<std::mutex> l(mu_);
  int64_t dropped = 0;
  for (auto it = ids_.begin(); it != ids_.end();) {
    if (!drop(it->first)) {
      ++it;
      continue;
    }
    std::shared_ptr<Entry>& e = queues_[it->second];
    // Its waiting requests fail (Aborted) instead of waiting for ever; its
    // elements go with the actor once the last request holding it is done.
    caf::anon_send(e->actor, ShutdownQueue{});
    if (quotas_) quotas_->Give(NamespaceQuotas::Kind::kQueue, e->name, 0);
    e.reset();
    ++dropped;
    it = ids_.erase(it);
  }
  return dropped;
}

}  // namespace runtime
}  // namespace sf
