// The variable shard actor: one handler per message of
// actors/variable_shard_protocol.h, each over the shard's held state
// (actors/shard_state.h).
#include <chrono>

#include "actors/shard_state.h"

namespace sf {
namespace runtime {
namespace {

// The actor's own state: its core, emptied when the actor goes (the
// variables' memory is freed and sync waiters are failed with it, as before
// the core was shared), after which direct calls find no variable.
struct ShardActorState {
  std::shared_ptr<ShardCore> core;
  ~ShardActorState() {
    if (!core) return;
    ShardState gone;
    {
      std::lock_guard<std::mutex> l(core->mu);
      gone.pool = core->st.pool;
      gone.cold_root = core->st.cold_root;
      std::swap(gone, core->st);
    }
  }
};

using ShardPointer = VariableShardActor::stateful_pointer<ShardActorState>;

// The shard's applied window as its synchronous steps see it: a step run
// again finds its contributions there once their step was applied.
class WindowOrigins : public AppliedOrigins {
 public:
  explicit WindowOrigins(AppliedWindow& w) : w_(w) {}
  bool Seen(const UpdateOrigin& o) const override { return w_.Seen(o); }
  void Record(const UpdateOrigin& o) override { w_.Record(o, ShardState::NowMs()); }

 private:
  AppliedWindow& w_;
};

// The behavior of a variable shard actor: one handler per message of
// actors/variable_shard_protocol.h. Each answers through the message's done
// (taken by mutable reference: the message is the handler's alone, nothing
// is copied).
// One worker's contribution to a synchronous step of the variable its
// request names, handed to the variable's ReplicaState by `offer`; the
// waiter's timeout is a delayed message to the shard itself.
template <typename Msg, typename Offer>
void OfferSyncStep(ShardPointer self, Msg& m, Offer offer) {
  Held held(*self->state.core);
  ShardState& st = held.st();
  const int64_t id = m.req.req.var_ids.empty() ? -1 : m.req.req.var_ids[0];
  ShardState::Var* v = st.Find(id);
  if (!v) return m.done(NoVariable(id));
  const int64_t waiter = ++st.next_waiter;
  const int64_t timeout_ms = m.req.timeout_ms;
  offer(st, *v, id, waiter, m);
  if (timeout_ms > 0) self->delayed_send(self, std::chrono::milliseconds(timeout_ms), SyncWaitTimeout{id, waiter});
}

VariableShardActor::behavior_type VariableShard(ShardPointer self, std::shared_ptr<ShardCore> core) {
  self->state.core = std::move(core);
  return {
      [self](DefineVariable& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        st.vars[m.id] = ShardState::Var{std::move(m.name), m.dtype, std::move(m.shape), Tensor()};
      },
      [self](ReadVariable& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (v && v->hash) m.done(v->hash->Serialize());  // the state, or the cold tier's read error
        else m.done(ReadDense(v, m.id));
      },
      [self](AssignVariable& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        // A saved hash shard state (a restore or a move) makes the variable
        // that shard again, rows, slots and counts as saved.
        const bool hash_state = IsHashShardState(m.value) && m.mode == AssignMode::kAssign;
        if (v->hash || (hash_state && v->dtype == DType::kInt64)) {
          if (!hash_state)
            return m.done(InvalidArgument("variable '" + v->name +
                                          "' is a hash embedding table shard: only its saved state can be assigned"));
          auto h = HashEmbeddingShard::Deserialize(m.value, TableOfShard(v->name));
          if (!h.ok()) return m.done(h.status());
          v->hash.reset();  // closes its cold tier before the new shard opens it
          Status cold = AttachColdTier(**h, st, v->name);
          if (!cold.ok()) return m.done(cold);
          v->hash = std::move(*h);
          return m.done(m.value);
        }
        m.done(AssignDense(st, *v, m.mode, m.value, m.origin));
      },
      [self](AssignVariableRows& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        ShardState::Var* v = st.Find(m.req.var_id);
        m.done(v ? AssignRowsDense(st, *v, m.req) : NoVariable(m.req.var_id));
      },
      [self](RefillVariable& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        if (v->hash)
          return m.done(Unimplemented("variable '" + v->name + "' is a hash embedding table shard: it is assigned"));
        Status s = m.fill(&v->value);
        v->MarkAll();
        m.done(s);
      },
      [self](ApplyDense& m) {
        Held held(*self->state.core);
        m.done(ApplyUpdate(held.st(), m.req));
      },
      // Sharded embeddings: lookups and sparse updates run here, beside the rows.
      [self](GatherRows& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        Tensor out;
        if (m.spec.partition == EmbeddingPartition::kHash || v->hash) {
          if (!v->hash)
            return m.done(FailedPrecondition("hash embedding table '" + m.spec.table + "': shard '" + v->name +
                                             "' is looked up before it was initialised"));
          // A step run again reads what its first run counted and made.
          const bool counts = !m.gather.read_only;
          if (counts && st.applied.Seen(m.gather.origin)) m.gather.read_only = true;
          Status s = v->hash->GatherCombine(m.gather, &out);
          if (s.ok() && counts && !m.gather.read_only) st.applied.Record(m.gather.origin, ShardState::NowMs());
          if (s.ok()) m.done(std::move(out));
          else m.done(s);
          return;
        }
        m.done(GatherDense(st, *v, m.spec, m.gather));
      },
      [self](ApplySparse& m) {
        Held held(*self->state.core);
        m.done(ApplySparseUpdate(held.st(), m.req));
      },
      [self](InitHashShard& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        Status s = CheckHashShardConfig(m.config);
        if (!s.ok()) return m.done(s);
        v->hash.reset();  // closes its cold tier before the new shard opens it
        auto h = std::make_unique<HashEmbeddingShard>(std::move(m.config));
        s = AttachColdTier(*h, st, v->name);
        if (!s.ok()) return m.done(s);
        v->hash = std::move(h);
        m.done(Status::OK());
      },
      [self](QueryHashShard& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        if (!v->hash)
          return m.done(FailedPrecondition("variable '" + v->name + "' is not an initialised hash table shard"));
        m.done(HashShardMetricsTensor(v->hash->Metrics()));
      },
      // Replication (kernels/replica_state.h): the variable's ReplicaState
      // keeps the waiting workers' callbacks.
      [self](ApplySyncGradient& m) {
        OfferSyncStep(self, m, [](ShardState& st, ShardState::Var& v, int64_t id, int64_t waiter, ApplySyncGradient& m) {
          WindowOrigins applied(st.applied);
          st.Replica(id).OfferSync(v.name, v.value, std::move(m.req), waiter, std::move(m.done),
                                   [&st](const ApplyRequest& req) { return ApplyUpdate(st, req); }, &applied);
        });
      },
      [self](ApplySparseSyncGradient& m) {
        OfferSyncStep(self, m, [](ShardState& st, ShardState::Var& v, int64_t id, int64_t waiter,
                                  ApplySparseSyncGradient& m) {
          WindowOrigins applied(st.applied);
          st.Replica(id).OfferSparseSync(v.name, std::move(m.req), waiter, std::move(m.done),
                                         [&st](const SparseApplyRequest& req) { return ApplySparseUpdate(st, req); },
                                         &applied);
        });
      },
      [self](const SyncWaitTimeout& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        if (const ShardState::Var* v = st.Find(m.id)) st.Replica(m.id).TimeoutWaiter(v->name, m.waiter);
      },
      [self](AbortSyncSteps& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        st.Replica(m.id).AbortSync(v->name);
        m.done(Status::OK());
      },
      [self](const AbortStepWaits& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        for (auto& kv : st.replicas)
          if (const ShardState::Var* v = st.Find(kv.first); v && kv.second)
            kv.second->AbortWaits(v->name, m.run_step, m.why);
      },
      [self](ReadVersioned& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        if (!v->value.valid()) return m.done(Uninitialised(v->name, "read"));
        m.done(std::make_pair(v->value, st.Replica(m.id).version()));
      },
      [self](QueryReplicaStats& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        if (!st.Find(m.id)) return m.done(NoVariable(m.id));
        const ReplicaState& r = st.Replica(m.id);
        m.done(m.what == ReplicaQuery::kSyncStats ? r.SyncStats() : r.StalenessStats());
      },
      [self](WaitStaleSync& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        const ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        st.Replica(m.id).StaleSyncWait(v->name, m.worker, m.clock, m.num_workers, m.staleness, m.run_step,
                                       std::move(m.done));
      },
      // Checkpoints. Copy-on-write values: later updates never touch these buffers.
      [self](SnapshotShard& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        std::vector<std::pair<std::string, Tensor>> vars;
        for (const auto& kv : st.vars) {
          if (kv.second.hash) {
            auto state = kv.second.hash->Serialize();  // invalid on a cold tier read error (see above)
            vars.emplace_back(kv.second.name, state.ok() ? std::move(*state) : Tensor());
          }
          else if (kv.second.value.valid()) vars.emplace_back(kv.second.name, kv.second.value);
        }
        m.done(std::move(vars));
      },
      [self](SnapshotDirtyShard& m) {
        Held held(*self->state.core);
        m.done(TakeDirtySnapshot(held.st()));
      },
      [self](TakeShardChanges& m) {
        std::shared_ptr<ShardCore> core = self->state.core;
        // A piece is read holding the core, as a direct call does (never on
        // this actor's thread: the sender's).
        auto reader = [core](int64_t id) {
          return [core, id](int64_t first, int64_t max_bytes) -> Result<Tensor> {
            Held held(*core);
            const ShardState::Var* v = held.st().Find(id);
            if (!v) return NoVariable(id);
            return ReadRowsOf(*v, first, max_bytes);
          };
        };
        Held held(*core);
        m.done(TakeChangesOf(held.st(), m.names, m.full, m.pieces_over, reader));
      },
      [self](ApplyShardChanges& m) {
        Held held(*self->state.core);
        ShardState& st = held.st();
        ShardState::Var* v = st.Find(m.id);
        if (!v) return m.done(NoVariable(m.id));
        m.done(ApplyChangesTo(st, m.id, *v, m.changes));
      },
  };
}

}  // namespace

VariableShardActor SpawnShardActor(caf::actor_system& sys, std::shared_ptr<ShardCore> core) {
  return sys.spawn(VariableShard, std::move(core));
}

VariableShardActor SpawnVariableShard(caf::actor_system& sys, ComputePool* pool) {
  return SpawnShardActor(sys, NewShardCore(pool));
}

}  // namespace runtime
}  // namespace sf
