#include "actors/collectives.h"

#include <cstring>
#include <map>

#include <Eigen/Core>

namespace sf {
namespace runtime {
namespace {

struct RankState {
  struct Instance {
    bool started = false, finished = false;
    Tensor buf;                   // this rank's copy, reduced in place
    std::vector<int64_t> bounds;  // chunk c is elements [bounds[c], bounds[c + 1])
    int64_t recv_step = 0;        // the next chunk step to process
    std::map<int64_t, CollectiveMsgPtr> pending;  // chunks that came early
    Status error;                 // set when the reduction failed before the contribution
    std::function<void(Result<Tensor>)> done;
  };
  std::string key;
  int64_t rank = 0, n = 1;
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

void SendChunk(Self self, int64_t id, RankState::Instance& in, int64_t step, int64_t chunk) {
  const int64_t b = in.bounds[chunk], e = in.bounds[chunk + 1];
  auto m = std::make_shared<CollectiveMsg>();
  m->kind = CollectiveMsg::kChunk;
  m->instance = id;
  m->step = step;
  m->total = in.buf.num_elements();
  m->dtype = in.buf.dtype();
  m->value = Tensor(in.buf.dtype(), {e - b});
  const size_t es = DTypeSize(in.buf.dtype());
  if (e > b)
    std::memcpy(m->value.raw_data(), static_cast<char*>(in.buf.raw_data()) + b * es, (e - b) * es);
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

template <typename T>
void AddInto(Tensor& buf, int64_t begin, const Tensor& chunk) {
  Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> dst(buf.data<T>() + begin, chunk.num_elements());
  Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> src(chunk.data<T>(), chunk.num_elements());
  dst += src;
}

// Processes the chunks of instance id that are due, in step order.
void Drain(Self self, int64_t id) {
  RankState& st = self->state;
  RankState::Instance& in = st.instances[id];
  const int64_t n = st.n, last = 2 * (n - 1);
  while (in.started && !in.finished) {
    auto it = in.pending.find(in.recv_step);
    if (it == in.pending.end()) return;
    CollectiveMsgPtr m = it->second;
    in.pending.erase(it);
    const int64_t s = in.recv_step++;
    if (m->total != in.buf.num_elements() || m->dtype != in.buf.dtype()) {
      Fail(self, id, in,
           InvalidArgument("all-reduce group '" + st.key + "': rank " + std::to_string(st.rank) +
                           " has " + std::to_string(in.buf.num_elements()) + " " +
                           DTypeName(in.buf.dtype()) + " elements but rank " +
                           std::to_string(Mod(st.rank - 1, n)) + " sent " + std::to_string(m->total) +
                           " " + DTypeName(m->dtype) + " (every rank must contribute the same shape)"),
           true);
      return;
    }
    // The chunk this step carries must fill its slot exactly (a peer's
    // chunk may come off the wire: never trust its length).
    const int64_t c_expected = s < n - 1 ? Mod(st.rank - 1 - s, n) : Mod(st.rank - (s - (n - 1)), n);
    const int64_t want = in.bounds[c_expected + 1] - in.bounds[c_expected];
    if (m->value.dtype() != in.buf.dtype() || m->value.num_elements() != want) {
      Fail(self, id, in,
           InvalidArgument("all-reduce group '" + st.key + "': rank " + std::to_string(st.rank) +
                           " got a chunk of " + std::to_string(m->value.num_elements()) + " " +
                           DTypeName(m->value.dtype()) + " elements at step " + std::to_string(s) +
                           " where " + std::to_string(want) + " " + DTypeName(in.buf.dtype()) +
                           " belong"),
           true);
      return;
    }
    if (s < n - 1) {  // reduce-scatter: add the predecessor's partial sum
      const int64_t c = Mod(st.rank - 1 - s, n);
      if (in.buf.dtype() == DType::kFloat32) AddInto<float>(in.buf, in.bounds[c], m->value);
      else AddInto<double>(in.buf, in.bounds[c], m->value);
      SendChunk(self, id, in, s + 1, s + 1 < n - 1 ? c : Mod(st.rank + 1, n));
    } else {  // all-gather: take the reduced chunk, pass it on
      const int64_t a = s - (n - 1);
      const int64_t c = Mod(st.rank - a, n);
      const size_t es = DTypeSize(in.buf.dtype());
      if (m->value.num_elements() > 0)
        std::memcpy(static_cast<char*>(in.buf.raw_data()) + in.bounds[c] * es, m->value.raw_data(),
                    m->value.num_elements() * es);
      if (s + 1 < last) SendChunk(self, id, in, s + 1, c);
    }
    if (in.recv_step == last) {
      in.finished = true;
      in.done(in.buf);
    }
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
      } else {
        in.buf = m.value.Copy();  // never reduce into the caller's buffer
        const int64_t total = in.buf.num_elements();
        for (int64_t c = 0; c <= st.n; ++c) in.bounds.push_back(total * c / st.n);
        if (st.n == 1) {
          in.finished = true;
          in.done(in.buf);
        } else {
          SendChunk(self, id, in, 0, st.rank);
          Drain(self, id);
        }
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
      } else {
        in.pending[m.step] = msg;
        Drain(self, m.instance);
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
                                        int64_t group_size) {
  return sys.spawn([key, rank, group_size](Self self) -> CollectiveRankActor::behavior_type {
    self->state.key = key;
    self->state.rank = rank;
    self->state.n = group_size;
    return {[self](CollectiveMsgPtr m) { Handle(self, m); }};
  });
}

CollectiveGroup::CollectiveGroup(caf::actor_system& sys, std::string key, int64_t group_size) {
  for (int64_t r = 0; r < group_size; ++r) ranks_.push_back(SpawnCollectiveRank(sys, key, r, group_size));
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
