// NodeWatch: cluster members watch each other with CAF monitors over CAF's
// own connections (BASP) with heartbeats on both sides, beside the
// transport's heartbeats on the data connections: a member that dies or
// hangs is reported by whichever notices first. Actor-private header:
// include only from actors/*.cc.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "shardflow/status.h"

namespace caf {
class actor_system;
}

namespace sf {
namespace runtime {

class NodeWatch {
 public:
  // Publishes a watch actor on host (a free port) in sys, whose io
  // middleman must be loaded; on_down(member address, why) runs once for each
  // watched member that goes down (dies, or stays silent past the
  // middleman's connection timeout). Unavailable when publishing fails.
  static Result<std::unique_ptr<NodeWatch>> Start(caf::actor_system& sys, const std::string& host,
                                                  std::function<void(const std::string&, const std::string&)> on_down);
  ~NodeWatch();
  // The port the watch actor listens on.
  uint16_t port() const;
  // Starts monitoring the member at member_address through its watch actor at
  // host:port (connects on a background thread; a member that cannot be
  // reached is reported down). Watching a member twice does nothing.
  void Watch(const std::string& member_address, const std::string& host, uint16_t port);
  // Stops watching and joins the background threads.
  void Stop();

  struct Impl;

 private:
  explicit NodeWatch(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace runtime
}  // namespace sf
