// The coordinator actor's protocol (actor-private: includes CAF; include it
// only from actors/). The coordinator prunes, validates and partitions the
// client's graph (cached per run signature) and drives steps. In-process
// only: a run call carries the client's callback.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "shardflow/session.h"

namespace sf {
namespace runtime {

// One Session::RunAsync call.
struct RunCall {
  NamedFeeds feeds;
  std::vector<std::string> fetches;
  std::vector<std::string> targets;
  std::function<void(Result<std::vector<Tensor>>)> done;
};
using RunCallPtr = std::shared_ptr<RunCall>;

}  // namespace runtime
}  // namespace sf

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::RunCallPtr)

namespace sf {
namespace runtime {

using CoordinatorActor = caf::typed_actor<caf::reacts_to<RunCallPtr>>;

}  // namespace runtime
}  // namespace sf
