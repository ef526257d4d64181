#include "actors/coordinator_actor.h"

namespace sf {
namespace runtime {

CoordinatorActor SpawnCoordinatorActor(caf::actor_system& sys, StartFn start) {
  return sys.spawn<caf::detached>([start = std::move(start)]() -> CoordinatorActor::behavior_type {
    return {
        [start](RunCall& call) { start(call); },
    };
  });
}

}  // namespace runtime
}  // namespace sf
