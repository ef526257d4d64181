// ForgetCafThreadLogger: lets an actor system be destroyed on any thread.
//
// CAF 0.17 keeps, in a thread-local of each thread that creates an actor
// system or spawns an actor, a reference to that system's logger, and
// ~actor_system waits until the logger is gone. Destroyed on another thread
// (a Python garbage collection, a worker thread), a system would wait forever
// for the reference its creating thread still holds. Public entry points
// that create systems or spawn on their caller's thread hold one of these;
// it drops that thread's reference when they return.
#pragma once

#include <caf/logger.hpp>

namespace sf {

struct ForgetCafThreadLogger {
  ForgetCafThreadLogger() = default;
  ForgetCafThreadLogger(const ForgetCafThreadLogger&) = delete;
  ForgetCafThreadLogger& operator=(const ForgetCafThreadLogger&) = delete;
  ~ForgetCafThreadLogger() { caf::logger::set_current_actor_system(nullptr); }
};

}  // namespace sf
