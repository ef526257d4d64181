// An actor system on CAF's deterministic test coordinator, for actor tests:
// no message is handled until the test calls Run (on the test's thread),
// and delayed messages (timeouts) fire only when the test advances the
// clock, so waits and timeouts are tested without any time passing.
//
//   testing::Deterministic d;
//   auto q = ...spawn on d.sys...;  send it messages
//   d.Run();                                 // handles them all
//   d.sched.advance_time(std::chrono::milliseconds(50));
//   d.Run();                                 // the 50 ms timers fired
//
// A test stops its actors (and lets Run handle the exits) before the
// system goes: an actor system waits for its actors when destroyed.
#pragma once

#include <caf/all.hpp>

namespace sf::testing {

struct Deterministic {
  Deterministic() : sys(Configure(cfg)), sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())) {}
  // Handles every message sent so far, and those they send; returns how many.
  size_t Run() { return sched.run(); }

  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;

 private:
  static caf::actor_system_config& Configure(caf::actor_system_config& c) {
    c.set("scheduler.policy", caf::atom("testing"));
    c.set("logger.file-verbosity", caf::atom("quiet"));
    return c;
  }
};

}  // namespace sf::testing
