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
  int64_t reader = 0;
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
// The store wrote the state of change number seq (ChunkQueueStore::persist).
struct ChunkStatePersisted {
  int64_t seq = 0;
  Status status;
};
// Resolve found a state another queue object wrote: go on from it.
struct RestoreChunkQueue {
  std::shared_ptr<ChunkLeases> leases;
  int64_t incarnation = 0;
  int64_t writer = 0;
};

}  // namespace runtime
}  // namespace sf

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::TakeChunk)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ReportChunks)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ReleaseChunkWorker)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::CheckChunkLeases)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::CancelChunkStep)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ShutdownChunkQueue)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::ChunkStatePersisted)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::RestoreChunkQueue)

namespace sf {
namespace runtime {
namespace {

using ChunkQueueActor =
    caf::typed_actor<caf::reacts_to<TakeChunk>, caf::reacts_to<ReportChunks>, caf::reacts_to<ReleaseChunkWorker>,
                     caf::reacts_to<CheckChunkLeases>, caf::reacts_to<CancelChunkStep>,
                     caf::reacts_to<ShutdownChunkQueue>, caf::reacts_to<ChunkStatePersisted>,
                     caf::reacts_to<RestoreChunkQueue>>;

// How a queue actor starts: afresh, or from a stored state (leases set).
struct ChunkQueueStart {
  std::string name;
  ChunkLeaseOptions options;
  ActorChunkQueues::Clock clock;
  std::shared_ptr<const ChunkQueueStore> store;  // null: none
  std::shared_ptr<ChunkLeases> leases;           // null: a fresh queue
  int64_t incarnation = 0, writer = 0;           // of the stored state
};

struct ChunkQueueState {
  std::string name;
  int64_t incarnation = 0;  // in the tickets' high bits (kChunkIncarnationShift)
  std::unique_ptr<ChunkLeases> leases;
  ActorChunkQueues::Clock clock;
  std::deque<TakeChunk> waiting;  // served in arrival order
  int64_t timer_at = -1;          // clock time of the pending timer (-1: none)
  bool shut_down = false;
  // The store: this queue object's id in the states it writes, and the
  // stored state it went on from last (another writer's), so that Resolve
  // finding that state again changes nothing.
  std::shared_ptr<const ChunkQueueStore> store;
  int64_t writer = 0;
  int64_t adopted_writer = 0, adopted_version = -1;
  // Changes are numbered (seq) as the leases' version moves; replies wait
  // until the state of their change is written (written_seq), one write
  // at a time so that they land in order.
  int64_t seen_version = 0;
  int64_t seq = 0, written_seq = 0;
  bool writing = false;
  std::deque<std::pair<int64_t, std::function<void(Status)>>> held;

  std::string Where() const { return "chunk queue '" + name + "'"; }

  // The state as the store keeps it (kernels/chunk_queue_service.h).
  Tensor State() const {
    std::vector<int64_t> words = {kChunkQueueStateMagic, incarnation, writer};
    std::vector<int64_t> l = leases->Serialize();
    words.insert(words.end(), l.begin(), l.end());
    return Tensor::FromVector(words);
  }
  // Numbers a change of the leases made since the last look.
  void Note() {
    if (leases->version() == seen_version) return;
    seen_version = leases->version();
    ++seq;
  }
};

using ChunkQueueSelf = ChunkQueueActor::stateful_pointer<ChunkQueueState>;

// Writes the state when it changed since the last write and no write is in flight.
void Persist(ChunkQueueSelf self) {
  ChunkQueueState& st = self->state;
  st.Note();
  if (!st.store || !st.store->persist || st.writing || st.written_seq == st.seq || st.shut_down) return;
  st.writing = true;
  auto me = caf::actor_cast<ChunkQueueActor>(self);
  st.store->persist(st.name, st.State(), [me, seq = st.seq](Status s) {
    caf::anon_send(me, ChunkStatePersisted{seq, std::move(s)});
  });
}

// Runs reply once the state as it is now is written (at once without a
// store); its argument: the write's error, if any.
void Answer(ChunkQueueSelf self, std::function<void(Status)> reply) {
  ChunkQueueState& st = self->state;
  st.Note();
  if (!st.store || !st.store->persist || st.seq == st.written_seq) return reply(Status::OK());
  st.held.emplace_back(st.seq, std::move(reply));
  Persist(self);
}

// Answers waiting Takes while chunks are free; all of them once none is left.
void Serve(ChunkQueueSelf self) {
  ChunkQueueState& st = self->state;
  const int64_t now = st.clock();
  while (!st.waiting.empty()) {
    ChunkTicket t;
    const ChunkLeases::Took took = st.leases->Take(st.waiting.front().worker, now, &t, st.waiting.front().reader);
    if (took == ChunkLeases::Took::kWait) return;
    auto done = std::move(st.waiting.front().done);
    st.waiting.pop_front();
    t.ticket |= st.incarnation << kChunkIncarnationShift;
    if (took == ChunkLeases::Took::kTicket) {
      Answer(self, [done = std::move(done), t](Status written) {
        if (written.ok()) done(t);
        else done(written);
      });
    } else {
      Answer(self, [done = std::move(done), end = OutOfRange(st.Where() + ": every chunk of every epoch is done")](
                       Status) { done(end); });
    }
  }
}

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

int64_t RandomWriter() {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return static_cast<int64_t>(r >> 1) | 1;  // positive, never 0
}

ChunkQueueActor::behavior_type ChunkQueueBehavior(ChunkQueueSelf self, ChunkQueueStart start) {
  ChunkQueueState& st = self->state;
  st.name = std::move(start.name);
  st.clock = std::move(start.clock);
  st.store = std::move(start.store);
  st.writer = RandomWriter();
  if (start.leases) {
    // A moved or promoted slot's queue: its tickets stay valid.
    st.incarnation = start.incarnation;
    st.leases = std::make_unique<ChunkLeases>(std::move(*start.leases));
    st.adopted_writer = start.writer;
    st.adopted_version = st.leases->version();
    st.seen_version = st.leases->version();
  } else {
    // 1 to kMaxChunkIncarnation: a ticket stays a positive int64.
    st.incarnation = 1 + static_cast<int64_t>(std::random_device{}() % kMaxChunkIncarnation);
    st.leases = std::make_unique<ChunkLeases>(start.options);
  }
  auto down = [self] { return Aborted(self->state.Where() + ": the session is shutting down"); };
  return {
      [self, down](TakeChunk& m) {
        ChunkQueueState& st = self->state;
        if (st.shut_down) return m.done(down());
        // At once, not when its turn to be served comes: the chunks it
        // takes back may be what the Takes before it wait for.
        st.leases->ReadsInto(m.worker, m.reader);
        st.waiting.push_back(std::move(m));
        Serve(self);
        ArmTimer(self);
        Persist(self);
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
        Answer(self, [done = std::move(m.done), first](Status written) { done(first.ok() ? written : first); });
        Serve(self);
        ArmTimer(self);
      },
      [self, down](ReleaseChunkWorker& m) {
        ChunkQueueState& st = self->state;
        if (st.shut_down) return m.done(down());
        const int64_t n = st.leases->Release(m.worker);
        Answer(self, [done = std::move(m.done), n](Status written) {
          if (written.ok()) done(n);
          else done(written);
        });
        Serve(self);
        ArmTimer(self);
      },
      [self, down](CheckChunkLeases& m) {
        ChunkQueueState& st = self->state;
        if (!m.done) st.timer_at = -1;
        if (st.shut_down) {
          if (m.done) m.done(down());
          return;
        }
        st.leases->Expire(st.clock());
        if (m.done) {
          Answer(self, [done = std::move(m.done), stats = st.leases->stats()](Status written) {
            if (written.ok()) done(stats);
            else done(written);
          });
        }
        Serve(self);
        ArmTimer(self);
        Persist(self);
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
        // Writes that may never end (the node stops): not acknowledged.
        auto held = std::move(st.held);
        st.held.clear();
        for (auto& h : held) h.second(down());
      },
      [self](ChunkStatePersisted& m) {
        ChunkQueueState& st = self->state;
        st.writing = false;
        st.written_seq = std::max(st.written_seq, m.seq);
        const Status failed = m.status.ok() ? Status::OK() : Unavailable(st.Where() + ": its state was not stored (" +
                                                                          m.status.message() + ")");
        while (!st.held.empty() && st.held.front().first <= m.seq) {
          auto reply = std::move(st.held.front().second);
          st.held.pop_front();
          reply(failed);
        }
        Persist(self);
      },
      [self](RestoreChunkQueue& m) {
        ChunkQueueState& st = self->state;
        // Its own state (maybe older than its latest, a write in flight), or
        // the one it went on from already: nothing new.
        if (st.shut_down || m.writer == st.writer ||
            (m.writer == st.adopted_writer && m.leases->version() == st.adopted_version))
          return;
        st.incarnation = m.incarnation;
        st.leases = std::make_unique<ChunkLeases>(std::move(*m.leases));
        st.adopted_writer = m.writer;
        st.adopted_version = st.leases->version();
        st.seen_version = st.leases->version();
        // Written again as its own, after any write of its old state in flight.
        ++st.seq;
        Serve(self);
        ArmTimer(self);
        Persist(self);
      },
  };
}

bool SameOptions(const ChunkLeaseOptions& a, const ChunkLeaseOptions& b) {
  return a.num_chunks == b.num_chunks && a.num_epochs == b.num_epochs && a.lease_ms == b.lease_ms;
}

// A stored state (kernels/chunk_queue_service.h) as a restore message;
// InvalidArgument naming what is wrong (it may come from another node).
Result<RestoreChunkQueue> ParseState(const Tensor& state, const ChunkLeaseOptions& options, int64_t now_ms) {
  if (!IsChunkQueueState(state))
    return InvalidArgument("its stored state is no chunk queue state: " + state.DebugString(0));
  const int64_t* w = state.data<int64_t>();
  RestoreChunkQueue m;
  m.incarnation = w[1];
  m.writer = w[2];
  if (m.incarnation < 1 || m.incarnation > kMaxChunkIncarnation)
    return InvalidArgument("its stored state has incarnation " + std::to_string(m.incarnation) + ", outside [1, " +
                           std::to_string(kMaxChunkIncarnation) + "]");
  auto leases = ChunkLeases::Restore(w + kChunkQueueStateHeader,
                                     static_cast<size_t>(state.num_elements()) - kChunkQueueStateHeader, options, now_ms);
  if (!leases.ok()) return leases.status();
  m.leases = std::make_shared<ChunkLeases>(std::move(*leases));
  return m;
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

void ActorChunkQueues::SetStore(ChunkQueueStore store) {
  std::lock_guard<std::mutex> l(mu_);
  store_ = std::make_shared<const ChunkQueueStore>(std::move(store));
}

Result<int64_t> ActorChunkQueues::Resolve(const std::string& name, const ChunkLeaseOptions& options) {
  if (Status v = ValidateChunkLeaseOptions(options); !v.ok()) return v.WithPrefix("chunk queue '" + name + "'");
  std::shared_ptr<const ChunkQueueStore> store;
  {
    std::lock_guard<std::mutex> l(mu_);
    store = store_;
  }
  RestoreChunkQueue stored;
  if (store && store->load) {
    Tensor state = store->load(name);
    if (state.valid()) {
      auto r = ParseState(state, options, clock_());
      if (!r.ok()) return r.status().WithPrefix("chunk queue '" + name + "'");
      stored = std::move(*r);
    }
  }
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
    if (stored.leases && queues_[it->second]->actor) caf::anon_send(queues_[it->second]->actor, std::move(stored));
    return it->second;
  }
  if (queues_.size() >= kMaxQueues)
    return ResourceExhausted("chunk queue '" + name + "' refused: " + std::to_string(queues_.size()) +
                             " chunk queues exist here already (at most " + std::to_string(kMaxQueues) + ")");
  const int64_t id = static_cast<int64_t>(queues_.size());
  auto e = std::make_unique<Entry>();
  e->name = name;
  e->options = options;
  ChunkQueueStart start{name, options, clock_, store_, std::move(stored.leases), stored.incarnation, stored.writer};
  e->actor = sys_.spawn(ChunkQueueBehavior, std::move(start));
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

void ActorChunkQueues::Take(int64_t id, int64_t worker, int64_t reader, int64_t step_id,
                            std::function<void(Result<ChunkTicket>)> done) {
  Status err;
  const Entry* e = Find(id, &err);
  if (!e) return done(err);
  caf::anon_send(e->actor, TakeChunk{worker, reader, step_id, std::move(done)});
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
