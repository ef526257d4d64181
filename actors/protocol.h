// The runtime's actor protocols (actor-private: includes CAF; include it only
// from actors/*.cc). Each actor's interface is one typed_actor here.
//
// These messages stay inside one process for now: they carry callbacks and
// tensors by reference (refcounted buffers, no copy). The Cap'n Proto wire
// forms for cross-process runs come with the distributed runtime.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/executor.h"
#include "kernels/variable_service.h"
#include "shardflow/session.h"

namespace sf {
namespace runtime {

// One request to a variable shard actor; the matching callback answers it.
struct VarMsg {
  enum Kind { kDefine, kRead, kAssign, kApply } kind = kRead;
  int64_t id = -1;
  std::string name;  // kDefine
  DType dtype = DType::kInvalid;
  PartialShape shape;
  AssignMode mode = AssignMode::kAssign;
  Tensor value;  // kAssign
  ApplyRequest req;  // kApply
  std::function<void(Result<Tensor>)> tensor_done;  // kRead, kAssign
  std::function<void(Status)> status_done;          // kApply
};
using VarMsgPtr = std::shared_ptr<VarMsg>;

// One step of one partition.
struct StepCall {
  int64_t step_id = 0;
  std::vector<Tensor> feeds;
  Executor::DoneFn done;
};
using StepCallPtr = std::shared_ptr<StepCall>;

// One Session::RunAsync call.
struct RunCall {
  FeedMap feeds;
  std::vector<std::string> fetches;
  std::vector<std::string> targets;
  std::function<void(Result<std::vector<Tensor>>)> done;
};
using RunCallPtr = std::shared_ptr<RunCall>;

}  // namespace runtime
}  // namespace sf

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::VarMsgPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::StepCallPtr)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::RunCallPtr)

namespace sf {
namespace runtime {

// Owns some variables (a variable and its optimizer slots); serializes their
// updates, so each update is atomic; reads answer with a copy-on-write snapshot.
using VariableShardActor = caf::typed_actor<caf::reacts_to<VarMsgPtr>>;
// Runs steps of one registered partition.
using PartitionActor = caf::typed_actor<caf::reacts_to<StepCallPtr>>;
// Prunes, validates, partitions (cached per run signature) and drives steps.
using CoordinatorActor = caf::typed_actor<caf::reacts_to<RunCallPtr>>;

}  // namespace runtime
}  // namespace sf
