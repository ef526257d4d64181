#include "actors/collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>

#include <Eigen/Core>

namespace sf {
namespace runtime {
namespace {

struct RankState {
  struct Instance {
    bool started = false, finished = false;
    Tensor input;                 // the contribution: only read (step 0 sends views of it)
    Tensor buf;                   // the result, each element written once
    std::vector<int64_t> bounds;  // chunk c is elements [bounds[c], bounds[c + 1])
    int64_t piece = 1;            // elements per piece
    std::vector<int64_t> first;   // by step: its first piece's index in seen
    std::vector<bool> seen;       // by step and piece: processed (a second copy is refused)
    int64_t left = 0;             // pieces still to process
    std::vector<CollectiveMsgPtr> early;  // pieces that came before the contribution
    Status error;                 // set when the reduction failed before the contribution
    std::function<void(Result<Tensor>)> done;
  };
  std::string key;
  int64_t rank = 0, n = 1;
  int64_t piece_bytes = kDefaultPieceBytes;
  CollectiveRankActor next;
  std::function<void(CollectiveMsgPtr)> forward;  // when set, used instead of next
  Status dead;                // after kFailAll: every later contribution fails with it
  int64_t contributions = 0;  // the instance of the next local contribution
  std::map<int64_t, Instance> instances;

  ~RankState() {
    for (auto& kv : instances)
      if (kv.second.done && !kv.second.finished)
        kv.second.done(Aborted("all-reduce group '" + key + "' shut down before the reduction finished"));
  }
};

using Self = CollectiveRankActor::stateful_pointer<RankState>;

// Sends m to this rank's successor.
void Emit(Self self, CollectiveMsgPtr m) {
  if (self->state.forward) self->state.forward(std::move(m));
  else self->send(self->state.next, std::move(m));
}

int64_t Mod(int64_t a, int64_t n) { return ((a % n) + n) % n; }

// The chunk that rank receives at step s.
int64_t ChunkAt(int64_t rank, int64_t n, int64_t s) {
  return s < n - 1 ? Mod(rank - 1 - s, n) : Mod(rank - (s - (n - 1)), n);
}

// How many pieces chunk c travels as (an empty chunk still travels once, so
// every step has a message to drive the ring).
int64_t Pieces(const RankState::Instance& in, int64_t c) {
  const int64_t len = in.bounds[c + 1] - in.bounds[c];
  return len == 0 ? 1 : (len + in.piece - 1) / in.piece;
}

// Elements [offset, offset + len) of t without copying when they are
// aligned enough to be wrapped (the view keeps t alive), else copied.
Tensor View(const Tensor& t, int64_t offset, int64_t len) {
  if (len == 0) return Tensor(t.dtype(), {0});
  char* p = static_cast<char*>(t.raw_data()) + offset * DTypeSize(t.dtype());
  if (reinterpret_cast<uintptr_t>(p) % 16 == 0) {
    auto v = Tensor::WrapExternal(t.dtype(), {len}, p, [keep = t] {});
    if (v.ok()) return std::move(*v);
  }
  Tensor copy(t.dtype(), {len});
  std::memcpy(copy.raw_data(), p, copy.bytes());
  return copy;
}

void SendPiece(Self self, int64_t id, const RankState::Instance& in, int64_t step, int64_t offset, Tensor value) {
  auto m = std::make_shared<CollectiveMsg>();
  m->kind = CollectiveMsg::kChunk;
  m->instance = id;
  m->step = step;
  m->offset = offset;
  m->total = in.buf.num_elements();
  m->dtype = in.buf.dtype();
  m->value = std::move(value);
  Emit(self, std::move(m));
}

void SendError(Self self, int64_t id, const Status& s) {
  auto m = std::make_shared<CollectiveMsg>();
  m->kind = CollectiveMsg::kChunk;
  m->instance = id;
  m->error = s;
  Emit(self, std::move(m));
}

// Ends instance id with an error, telling the ring once.
void Fail(Self self, int64_t id, RankState::Instance& in, const Status& s, bool forward) {
  if (in.finished || !in.error.ok()) return;
  in.error = s;
  if (forward) SendError(self, id, s);
  if (in.started) {
    in.finished = true;
    in.done(s);
  }
}

// out = a + b (out may be a), and also = out when also is set.
template <typename T>
void Sum(void* out, const void* a, const void* b, void* also, int64_t len) {
  using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<Vec> dst(static_cast<T*>(out), len);
  dst = Eigen::Map<const Vec>(static_cast<const T*>(a), len) + Eigen::Map<const Vec>(static_cast<const T*>(b), len);
  if (also) std::memcpy(also, out, len * sizeof(T));
}

// Adds or places one piece of instance id and passes it on.
void Process(Self self, int64_t id, RankState::Instance& in, CollectiveMsg& m) {
  RankState& st = self->state;
  const int64_t n = st.n, last = 2 * (n - 1), s = m.step;
  auto who = [&] { return "all-reduce group '" + st.key + "': rank " + std::to_string(st.rank); };
  if (m.total != in.buf.num_elements() || m.dtype != in.buf.dtype()) {
    Fail(self, id, in,
         InvalidArgument(who() + " has " + std::to_string(in.buf.num_elements()) + " " + DTypeName(in.buf.dtype()) +
                         " elements but rank " + std::to_string(Mod(st.rank - 1, n)) + " sent " +
                         std::to_string(m.total) + " " + DTypeName(m.dtype) +
                         " (every rank must contribute the same shape)"),
         true);
    return;
  }
  // The piece must fill one slot of the chunk this step carries exactly,
  // and only once (a peer's piece may come off the wire: never trust it).
  const int64_t c = ChunkAt(st.rank, n, s);
  const int64_t b = in.bounds[c], e = in.bounds[c + 1];
  const int64_t k = m.offset >= b ? (m.offset - b) / in.piece : -1;
  if (m.offset < b || (m.offset - b) % in.piece != 0 || k >= Pieces(in, c)) {
    Fail(self, id, in,
         InvalidArgument(who() + " got a chunk at offset " + std::to_string(m.offset) + " at step " +
                         std::to_string(s) + ", where no piece of elements [" + std::to_string(b) + ", " +
                         std::to_string(e) + ") starts"),
         true);
    return;
  }
  const int64_t want = std::min(in.piece, e - m.offset);
  if (m.value.dtype() != in.buf.dtype() || m.value.num_elements() != want) {
    Fail(self, id, in,
         InvalidArgument(who() + " got a chunk of " + std::to_string(m.value.num_elements()) + " " +
                         DTypeName(m.value.dtype()) + " elements at step " + std::to_string(s) + " where " +
                         std::to_string(want) + " " + DTypeName(in.buf.dtype()) + " belong (offset " +
                         std::to_string(m.offset) + ")"),
         true);
    return;
  }
  const int64_t slot = in.first[s] + k;
  if (in.seen[slot]) {
    Fail(self, id, in,
         InvalidArgument(who() + " got the chunk at offset " + std::to_string(m.offset) + " of step " +
                         std::to_string(s) + " twice"),
         true);
    return;
  }
  in.seen[slot] = true;
  --in.left;
  const size_t es = DTypeSize(in.buf.dtype());
  char* place = static_cast<char*>(in.buf.raw_data()) + m.offset * es;
  if (s < n - 1) {
    // Reduce-scatter: the partial sum goes into the received buffer when
    // this rank holds it alone (a wire piece), so it can be forwarded as
    // it is; the last step's sum is also this rank's share of the result.
    const bool own = m.value.BufferIsUnique();
    Tensor out = own ? std::move(m.value) : Tensor(in.buf.dtype(), {want});
    const void* a = own ? out.raw_data() : m.value.raw_data();
    const void* local = static_cast<const char*>(in.input.raw_data()) + m.offset * es;
    void* also = s == n - 2 ? place : nullptr;
    if (want > 0) {
      if (in.buf.dtype() == DType::kFloat32) Sum<float>(out.raw_data(), a, local, also, want);
      else Sum<double>(out.raw_data(), a, local, also, want);
    }
    m.value = Tensor();
    SendPiece(self, id, in, s + 1, m.offset, std::move(out));
  } else {  // all-gather: take the reduced piece, pass it on
    if (want > 0) std::memcpy(place, m.value.raw_data(), want * es);
    if (s + 1 < last) SendPiece(self, id, in, s + 1, m.offset, std::move(m.value));
  }
  if (in.left == 0) {
    in.finished = true;
    in.input = Tensor();
    in.done(in.buf);
  }
}

// Starts instance id with this rank's contribution: sends step 0 (views of
// the contribution) and processes the pieces that came early.
void Start(Self self, int64_t id, RankState::Instance& in, Tensor value) {
  RankState& st = self->state;
  const int64_t n = st.n;
  in.input = std::move(value);
  in.buf = Tensor(in.input.dtype(), in.input.shape());
  const int64_t total = in.buf.num_elements();
  for (int64_t c = 0; c <= n; ++c) in.bounds.push_back(total * c / n);
  in.piece = std::max<int64_t>(1, st.piece_bytes / static_cast<int64_t>(DTypeSize(in.buf.dtype())));
  const int64_t last = 2 * (n - 1);
  in.first.assign(last + 1, 0);
  for (int64_t s = 0; s < last; ++s) in.first[s + 1] = in.first[s] + Pieces(in, ChunkAt(st.rank, n, s));
  in.left = in.first[last];
  in.seen.assign(in.left, false);
  const int64_t b = in.bounds[st.rank], e = in.bounds[st.rank + 1];
  for (int64_t off = b; off == b || off < e; off += in.piece)
    SendPiece(self, id, in, 0, off, View(in.input, off, std::min(in.piece, e - off)));
  std::vector<CollectiveMsgPtr> early = std::move(in.early);
  in.early.clear();
  for (auto& m : early) {
    if (in.finished) break;
    Process(self, id, in, *m);
  }
}

void Handle(Self self, const CollectiveMsgPtr& msg) {
  RankState& st = self->state;
  CollectiveMsg& m = *msg;
  switch (m.kind) {
    case CollectiveMsg::kInit:
      st.next = m.next;
      st.forward = std::move(m.forward);
      return;
    case CollectiveMsg::kFailAll: {
      if (st.dead.ok()) st.dead = m.error;
      for (auto& kv : st.instances)
        if (kv.second.started && !kv.second.finished) {
          kv.second.finished = true;
          kv.second.done(m.error);
        }
      st.instances.clear();
      if (m.retire) self->quit();
      return;
    }
    case CollectiveMsg::kContribute: {
      const int64_t id = st.contributions++;
      if (!st.dead.ok()) return m.done(st.dead);
      RankState::Instance& in = st.instances[id];
      in.done = std::move(m.done);
      in.started = true;
      if (!in.error.ok()) {
        in.finished = true;
        in.done(in.error);
      } else if (m.value.dtype() != DType::kFloat32 && m.value.dtype() != DType::kFloat64) {
        Fail(self, id, in, InvalidArgument("all-reduce group '" + st.key + "': rank " +
                                           std::to_string(st.rank) + " contributes " +
                                           DTypeName(m.value.dtype()) + "; only float32 and float64 are summed"),
             st.n > 1);
      } else if (st.n == 1) {
        in.finished = true;
        in.done(m.value.Copy());  // never hand back the caller's buffer as the result
      } else {
        Start(self, id, in, std::move(m.value));
      }
      if (in.finished) st.instances.erase(id);
      return;
    }
    case CollectiveMsg::kChunk: {
      if (!st.dead.ok()) return;  // failed for good: late chunks mean nothing
      RankState::Instance& in = st.instances[m.instance];
      if (!m.error.ok()) {
        // Forward unless this rank already knows (the error came round the ring).
        Fail(self, m.instance, in, m.error, true);
      } else if (!in.started) {
        in.early.push_back(msg);
      } else if (!in.finished) {
        Process(self, m.instance, in, m);
      }
      if (in.finished) st.instances.erase(m.instance);
      return;
    }
  }
}

}  // namespace

CollectiveSpawner SpawnCollectiveSpawner(caf::actor_system& sys) {
  return sys.spawn([]() -> CollectiveSpawner::behavior_type {
    return {[](CollectiveTaskPtr t) { t->run(); }};
  });
}

CollectiveRankActor SpawnCollectiveRank(caf::actor_system& sys, const std::string& key, int64_t rank,
                                        int64_t group_size, int64_t piece_bytes) {
  return sys.spawn([key, rank, group_size, piece_bytes](Self self) -> CollectiveRankActor::behavior_type {
    self->state.key = key;
    self->state.rank = rank;
    self->state.n = group_size;
    self->state.piece_bytes = piece_bytes;
    return {[self](CollectiveMsgPtr m) { Handle(self, m); }};
  });
}

CollectiveGroup::CollectiveGroup(caf::actor_system& sys, std::string key, int64_t group_size, int64_t piece_bytes) {
  for (int64_t r = 0; r < group_size; ++r)
    ranks_.push_back(SpawnCollectiveRank(sys, key, r, group_size, piece_bytes));
  for (int64_t r = 0; r < group_size; ++r) {
    auto m = std::make_shared<CollectiveMsg>();
    m->kind = CollectiveMsg::kInit;
    m->next = ranks_[(r + 1) % group_size];
    // Sent before any contribution can be, so every rank knows its successor first.
    caf::anon_send(ranks_[r], std::move(m));
  }
}

CollectiveGroup::~CollectiveGroup() {
  for (auto& r : ranks_) caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
}

void CollectiveGroup::Contribute(int64_t rank, Tensor value, std::function<void(Result<Tensor>)> done) {
  auto m = std::make_shared<CollectiveMsg>();
  m->kind = CollectiveMsg::kContribute;
  m->value = std::move(value);
  m->done = std::move(done);
  caf::anon_send(ranks_[rank], std::move(m));
}

}  // namespace runtime
}  // namespace sf
