// The partition actor's protocol (actor-private: includes CAF; include it
// only from actors/). A partition actor runs steps of one registered
// partition through its executor. In-process only for now (the step carries
// its done callback); the wire form comes with Send/Recv between processes.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "runtime/executor.h"

namespace sf {
namespace runtime {

// One step of one partition.
struct StepCall {
  int64_t step_id = 0;
  std::vector<Tensor> feeds;
  Executor::DoneFn done;
};
using StepCallPtr = std::shared_ptr<StepCall>;

}  // namespace runtime
}  // namespace sf

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::StepCallPtr)

namespace sf {
namespace runtime {

using PartitionActor = caf::typed_actor<caf::reacts_to<StepCallPtr>>;

}  // namespace runtime
}  // namespace sf
