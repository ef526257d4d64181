// The session's VariableService: variables live in variable shard actors
// (actor-private header: include only from actors/*.cc).
//
// Each variable belongs to one shard actor; a slot "<var>/<Optimizer>/<slot>"
// joins the shard of "<var>" so an optimizer update (variable + slots) is one
// message handled by one actor: atomic without locks.
#pragma once

#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/variable_shard_protocol.h"

namespace sf {
namespace runtime {

// Spawns a variable shard actor.
VariableShardActor SpawnVariableShard(caf::actor_system& sys);

class ActorVariables : public VariableService {
 public:
  // graph_variables: the shared names of the graph's VarHandles, used to
  // colocate "<var>/..." with "<var>".
  ActorVariables(caf::actor_system& sys, std::set<std::string> graph_variables);
  ~ActorVariables() override;

  Result<int64_t> Resolve(const std::string& name, DType dtype, const PartialShape& shape) override;
  void Read(int64_t id, std::function<void(Result<Tensor>)> done) override;
  void Assign(int64_t id, AssignMode mode, Tensor value,
              std::function<void(Result<Tensor>)> done) override;
  void Apply(ApplyRequest req, std::function<void(Status)> done) override;
  std::string NameOf(int64_t id) const override;

  // Every initialised variable (and slot) with its value, sorted by name;
  // each shard answers with the state between two of its updates. Blocks
  // the calling thread (never call it from a runtime thread).
  std::vector<std::pair<std::string, Tensor>> SnapshotAll();

  // Stops every shard actor.
  void Shutdown();

 private:
  struct Var {
    std::string name;
    DType dtype;
    PartialShape shape;
    VariableShardActor shard;
  };
  // The shard of id, or null (and done is told NotFound).
  bool ShardOf(int64_t id, VariableShardActor* out) const;
  // REQUIRES: mu_ held.
  std::string ColocationKey(const std::string& name) const;

  caf::actor_system& sys_;
  const std::set<std::string> graph_variables_;
  mutable std::mutex mu_;
  std::vector<Var> vars_;                                  // GUARDED_BY(mu_)
  std::unordered_map<std::string, int64_t> ids_;           // GUARDED_BY(mu_)
  std::unordered_map<std::string, VariableShardActor> shards_;  // GUARDED_BY(mu_), by key
};

}  // namespace runtime
}  // namespace sf
