// The partition host actor (protocol: actors/partition_host_protocol.h) and
// the PartitionHost a coordinator in the same process reaches it through.
// Actor-private: include only from actors/.
#pragma once

#include <memory>

#include "actors/partition_host_protocol.h"
#include "runtime/partition_host.h"
#include "runtime/rendezvous.h"

namespace sf {
namespace runtime {

struct PartitionHostOptions {
  // What the host's executors run with; its pointers outlive the actor.
  ExecutorEnv env;
  // The step table aborts and cleanups act on (null: the partitions send
  // each other nothing).
  LocalRendezvous* steps = nullptr;
  // Checks every step's feeds against the partition's fed outputs: on for
  // steps from peers, which kernels must not trust; a coordinator in the
  // process already checked its own.
  bool check_feeds = false;
  // Prefixed to the host's errors ("node N").
  std::string name;
};

// Spawns a partition host. It stops on an exit message; steps in flight
// keep their executors until they finish.
PartitionHostActor SpawnPartitionHost(caf::actor_system& sys, PartitionHostOptions options);

// A PartitionHost in this process: a host actor it owns (stopped when the
// host is destroyed) for registrations, aborts and cleanups; runs start on
// the caller's thread from the host's table, as the actor's run handler
// would, without the mailbox's thread hop. Register blocks: never call it
// from an actor thread of sys (the coordinator's actor is detached).
std::shared_ptr<PartitionHost> NewLocalPartitionHost(caf::actor_system& sys, PartitionHostOptions options);

}  // namespace runtime
}  // namespace sf
