// A real CAF actor system for actor tests: two parked worker threads (the
// "sharing" policy), as the runtime configures its own.
#pragma once

#include <caf/all.hpp>

namespace sf::testing {

struct CafSystem {
  static caf::actor_system_config& Configure(caf::actor_system_config& cfg) {
    cfg.set("scheduler.policy", caf::atom("sharing"));
    cfg.set("scheduler.max-threads", size_t{2});
    return cfg;
  }
  caf::actor_system_config cfg;
  caf::actor_system sys{Configure(cfg)};
};

}  // namespace sf::testing
