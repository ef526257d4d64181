#include "actors/chunk_queue_actor.h"

#include <caf/all.hpp>

#include <chrono>
#include <deque>
#include <random>

namespace sf {
namespace runtime {

// The chunk queue actor's protocol (in-process only: callbacks by value).
// One C++ type per message.
struct TakeChunk {
  int64_t worker = 0;
  int64_t step_id = 0;
  std::function<void(Result<ChunkTicket>)> done;
};
struct ReportChunks {
  int64_t worker = 0;
  std::vector<int64_t> tickets, pos;
  bool read = false;
  std::function<void(Status)> done;
};
struct ReleaseChunkWorker {
  int64_t worker = 0;
  std::function<void(Result<int64_t>)> done;
};
struct CheckChunkLeases {
  std::function<void(Result<ChunkLeaseStats>)> done;  // null: the actor's own timer
};
struct CancelChunkStep {
  int64_t step_id = 0;
  Status why;
};
struct ShutdownChunkQueue {};

}  // namespace runtime
}  // namespace sf

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::TakeChunk)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ReportChunks)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ReleaseChunkWorker)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::CheckChunkLeases)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::CancelChunkStep)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ShutdownChunkQueue)

namespace sf {
namespace runtime {
namespace {

using ChunkQueueActor =
    caf::typed_actor<caf::reacts_to<TakeChunk>, caf::reacts_to<ReportChunks>, caf::reacts_to<ReleaseChunkWorker>,
                     caf::reacts_to<CheckChunkLeases>, caf::reacts_to<CancelChunkStep>,
                     caf::reacts_to<ShutdownChunkQueue>>;

struct ChunkQueueState {
  std::string name;
  int64_t incarnation = 0;  // in the tickets' high bits (kChunkIncarnationShift)
  std::unique_ptr<ChunkLeases> leases;
  ActorChunkQueues::Clock clock;
  std::deque<TakeChunk> waiting;  // served in arrival order
  int64_t timer_at = -1;          // clock time of the pending timer (-1: none)
  bool shut_down = false;

  std::string Where() const { return "chunk queue '" + name + "'"; }

  // Answers waiting Takes while chunks are free; all of them once none is left.
  void Serve() {
    const int64_t now = clock();
    while (!waiting.empty()) {
      ChunkTicket t;
      const ChunkLeases::Took took = leases->Take(waiting.front().worker, now, &t);
      if (took == ChunkLeases::Took::kWait) return;
      auto done = std::move(waiting.front().done);
      waiting.pop_front();
      t.ticket |= incarnation << kChunkIncarnationShift;
      if (took == ChunkLeases::Took::kTicket) done(t);
      else done(OutOfRange(Where() + ": every chunk of every epoch is done"));
    }
  }
};

using ChunkQueueSelf = ChunkQueueActor::stateful_pointer<ChunkQueueState>;

Status IgnoreLost(Status s) { return s.code() == Code::kFailedPrecondition ? Status::OK() : s; }

// With Takes waiting, checks again when the earliest lease would end.
void ArmTimer(ChunkQueueSelf self) {
  ChunkQueueState& st = self->state;
  const int64_t at = st.leases->NextExpiry();
  if (st.waiting.empty() || at < 0 || (st.timer_at >= 0 && st.timer_at <= at)) return;
  st.timer_at = at;
  const int64_t wait = std::max<int64_t>(1, at - st.clock() + 1);
  self->delayed_send(self, std::chrono::milliseconds(wait), CheckChunkLeases{});
}

ChunkQueueActor::behavior_type ChunkQueueBehavior(ChunkQueueSelf self, std::string name, ChunkLeaseOptions options,
                                                  ActorChunkQueues::Clock clock) {
  ChunkQueueState& st = self->state;
  st.name = std::move(name);
  // 1 to kMaxChunkIncarnation: a ticket stays a positive int64.
  st.incarnation = 1 + static_cast<int64_t>(std::random_device{}() % kMaxChunkIncarnation);
  st.leases = std::make_unique<ChunkLeases>(options);
  st.clock = std::move(clock);
  auto down = [self] { return Aborted(self->state.Where() + ": the session is shutting down"); };
  return {
      [self, down](TakeChunk& m) {
        ChunkQueueState& st = self->state;
        if (st.shut_down) return m.done(down());
        st.waiting.push_back(std::move(m));
        st.Serve();
        ArmTimer(self);
      },
      [self, down](ReportChunks& m) {
        ChunkQueueState& st = self->state;
        if (st.shut_down) return m.done(down());
        const int64_t now = st.clock();
        Status first;
        std::vector<int64_t> tickets;  // without the incarnation
        for (int64_t t : m.tickets) {
          if ((t >> kChunkIncarnationShift) != st.incarnation) {
            first = FailedPrecondition("ticket " + std::to_string(t) + " was handed out by an earlier chunk queue "
                                       "of this name (its task moved, and the queue started afresh): this epoch "
                                       "cannot go on with every example once; start it again");
            break;
          }
          tickets.push_back(t & ((int64_t{1} << kChunkIncarnationShift) - 1));
        }
        if (first.ok() && !m.read) first = st.leases->TrainedAll(m.worker, tickets, m.pos, now);
        // A chunk the worker lost while reading it is no error of its input:
        // its new holder reads it again, and the rows enqueued here are
        // refused when reported trained.
        for (size_t i = 0; first.ok() && m.read && i < tickets.size(); ++i)
          first = IgnoreLost(st.leases->Read(m.worker, tickets[i], m.pos[i], now));
        if (!first.ok()) first = first.WithPrefix(st.Where());
        st.Serve();
        ArmTimer(self);
        m.done(first);
      },
      [self, down](ReleaseChunkWorker& m) {
        ChunkQueueState& st = self->state;
        if (st.shut_down) return m.done(down());
        const int64_t n = st.leases->Release(m.worker);
        st.Serve();
        ArmTimer(self);
        m.done(n);
      },
      [self, down](CheckChunkLeases& m) {
        ChunkQueueState& st = self->state;
        if (!m.done) st.timer_at = -1;
        if (st.shut_down) {
          if (m.done) m.done(down());
          return;
        }
        st.leases->Expire(st.clock());
        st.Serve();
        ArmTimer(self);
        if (m.done) m.done(st.leases->stats());
      },
      [self](CancelChunkStep& m) {
        ChunkQueueState& st = self->state;
        for (auto it = st.waiting.begin(); it != st.waiting.end();) {
          if (it->step_id != m.step_id) {
            ++it;
            continue;
          }
          auto done = std::move(it->done);
          it = st.waiting.erase(it);
          done(m.why);
        }
      },
      [self, down](ShutdownChunkQueue) {
        ChunkQueueState& st = self->state;
        st.shut_down = true;
        std::deque<TakeChunk> waiting;
        waiting.swap(st.waiting);
        for (auto& w : waiting) w.done(down());
      },
  };
}

bool SameOptions(const ChunkLeaseOptions& a, const ChunkLeaseOptions& b) {
  return a.num_chunks == b.num_chunks && a.num_epochs == b.num_epochs && a.lease_ms == b.lease_ms;
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct ActorChunkQueues::Entry {
  std::string name;
  ChunkLeaseOptions options;
  ChunkQueueActor actor;
};

ActorChunkQueues::ActorChunkQueues(caf::actor_system& sys, Clock clock)
    : sys_(sys), clock_(clock ? std::move(clock) : Clock(SteadyMs)) {}

ActorChunkQueues::~ActorChunkQueues() {
  Shutdown();
  Stop();
}

void ActorChunkQueues::Shutdown() {
  std::lock_guard<std::mutex> l(mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& e : queues_) caf::anon_send(e->actor, ShutdownChunkQueue{});
}

void ActorChunkQueues::Stop() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : queues_) {
    if (e->actor) caf::anon_send_exit(e->actor, caf::exit_reason::user_shutdown);
    e->actor = ChunkQueueActor();
  }
}

Result<int64_t> ActorChunkQueues::Resolve(const std::string& name, const ChunkLeaseOptions& options) {
  if (Status v = ValidateChunkLeaseOptions(options); !v.ok()) return v.WithPrefix("chunk queue '" + name + "'");
  std::lock_guard<std::mutex> l(mu_);
  if (shut_down_) return Aborted("chunk queue '" + name + "': the session is shutting down");
  auto it = ids_.find(name);
  if (it != ids_.end()) {
    const ChunkLeaseOptions& have = queues_[it->second]->options;
    if (!SameOptions(have, options))
      return InvalidArgument("chunk queue '" + name + "' already exists with " + std::to_string(have.num_chunks) +
                             " chunks, " + std::to_string(have.num_epochs) + " epochs and leases of " +
                             std::to_string(have.lease_ms) + " ms; asked for " + std::to_string(options.num_chunks) +
                             ", " + std::to_string(options.num_epochs) + " and " + std::to_string(options.lease_ms) +
                             " (do the workers read the same files?)");
    return it->second;
  }
  if (queues_.size() >= kMaxQueues)
    return ResourceExhausted("chunk queue '" + name + "' refused: " + std::to_string(queues_.size()) +
                             " chunk queues exist here already (at most " + std::to_string(kMaxQueues) + ")");
  const int64_t id = static_cast<int64_t>(queues_.size());
  auto e = std::make_unique<Entry>();
  e->name = name;
  e->options = options;
  e->actor = sys_.spawn(ChunkQueueBehavior, name, options, clock_);
  queues_.push_back(std::move(e));
  ids_[name] = id;
  return id;
}

const ActorChunkQueues::Entry* ActorChunkQueues::Find(int64_t id, Status* error) const {
  std::lock_guard<std::mutex> l(mu_);
  if (id < 0 || id >= static_cast<int64_t>(queues_.size())) {
    *error = NotFound("no chunk queue with id " + std::to_string(id));
    return nullptr;
  }
  const Entry* e = queues_[id].get();
  if (shut_down_) {
    *error = Aborted("chunk queue '" + e->name + "': the session is shutting down");
    return nullptr;
  }
  return e;
}

void ActorChunkQueues::Take(int64_t id, int64_t worker, int64_t step_id,
                            std::function<void(Result<ChunkTicket>)> done) {
  Status err;
  const Entry* e = Find(id, &err);
  if (!e) return done(err);
  caf::anon_send(e->actor, TakeChunk{worker, step_id, std::move(done)});
}

void ActorChunkQueues::Report(int64_t id, int64_t worker, std::vector<int64_t> tickets, std::vector<int64_t> pos,
                              bool read, std::function<void(Status)> done) {
  Status err;
  const Entry* e = Find(id, &err);
  if (!e) return done(err);
  if (tickets.size() != pos.size())
    return done(InvalidArgument("chunk queue '" + e->name + "': " + std::to_string(tickets.size()) + " tickets and " +
                                std::to_string(pos.size()) + " positions"));
  caf::anon_send(e->actor, ReportChunks{worker, std::move(tickets), std::move(pos), read, std::move(done)});
}

void ActorChunkQueues::Release(int64_t id, int64_t worker, std::function<void(Result<int64_t>)> done) {
  Status err;
  const Entry* e = Find(id, &err);
  if (!e) return done(err);
  caf::anon_send(e->actor, ReleaseChunkWorker{worker, std::move(done)});
}

void ActorChunkQueues::CheckLeases(int64_t id, std::function<void(Result<ChunkLeaseStats>)> done) {
  Status err;
  const Entry* e = Find(id, &err);
  if (!e) return done(err);
  caf::anon_send(e->actor, CheckChunkLeases{std::move(done)});
}

void ActorChunkQueues::CancelStep(int64_t step_id, const Status& why) {
  if (step_id == 0) return;
  std::lock_guard<std::mutex> l(mu_);
  for (auto& e : queues_)
    if (e->actor) caf::anon_send(e->actor, CancelChunkStep{step_id, why});
}

std::string ActorChunkQueues::NameOf(int64_t id) const {
  std::lock_guard<std::mutex> l(mu_);
  return id >= 0 && id < static_cast<int64_t>(queues_.size()) ? queues_[id]->name : "";
}

}  // namespace runtime
}  // namespace sf
