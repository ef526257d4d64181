// The coordinator's own actor, for the local Session and the ClusterSession
// alike (actor-private: includes CAF; include it only from actors/). A run
// whose plan is registered starts on its caller's thread
// (runtime::Coordinator::Find, then StartStep); every other run goes to
// this actor, which plans and registers it, or first follows the cluster's
// membership, one call at a time, so RunAsync never blocks its caller. The
// actor is detached (its own thread): registration waits on hosts, which
// may be remote.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "runtime/coordinator.h"

namespace sf {
namespace runtime {

// One Session::RunAsync call that could not start on its caller's thread.
struct RunCall {
  NamedFeeds feeds;
  std::vector<std::string> fetches;
  std::vector<std::string> targets;
  Coordinator::DoneFn done;
  RunOptions options;
};

}  // namespace runtime
}  // namespace sf

// In-process only: the call carries the client's callback.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(sf::runtime::RunCall)

namespace sf {
namespace runtime {

using CoordinatorActor = caf::typed_actor<caf::reacts_to<RunCall>>;

// What the session does with a call on the actor's thread: plan it and
// start its step (a cluster session reconfigures first when it must).
using StartFn = std::function<void(RunCall&)>;

// Spawns the detached coordinator actor; it stops on an exit message,
// after the calls before it.
CoordinatorActor SpawnCoordinatorActor(caf::actor_system& sys, StartFn start);

}  // namespace runtime
}  // namespace sf
