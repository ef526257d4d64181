// NodeWatch (actors/cluster_watch.h).
#include "actors/cluster_watch.h"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace sf {
namespace runtime {

namespace {

// Monitors watch actors of other members; a down message names which one.
struct WatcherState {
  std::map<caf::actor_addr, std::string> members;  // watched actor -> member address
  std::function<void(const std::string&, const std::string&)> on_down;
};

caf::behavior Watcher(caf::stateful_actor<WatcherState>* self,
                      std::function<void(const std::string&, const std::string&)> on_down) {
  self->state.on_down = std::move(on_down);
  self->set_down_handler([self](caf::down_msg& dm) {
    auto it = self->state.members.find(dm.source);
    if (it == self->state.members.end()) return;
    const std::string member = it->second;
    self->state.members.erase(it);
    self->state.on_down(member, self->system().render(dm.reason));
  });
  return {
      [self](caf::actor& remote, const std::string& member) {
        self->state.members[remote.address()] = member;
        self->monitor(remote);
      },
  };
}

// What others monitor: it answers nothing and holds nothing.
caf::behavior WatchTarget() {
  return {[](const std::string&) {}};
}

}  // namespace

struct NodeWatch::Impl {
  caf::actor_system& sys;
  caf::actor target, watcher;
  uint16_t port = 0;
  std::mutex mu;
  std::set<std::string> watched;     // GUARDED_BY(mu)
  std::vector<std::thread> dialers;  // GUARDED_BY(mu)
  bool stopped = false;              // GUARDED_BY(mu)
  std::function<void(const std::string&, const std::string&)> on_down;
  explicit Impl(caf::actor_system& s) : sys(s) {}
};

Result<std::unique_ptr<NodeWatch>> NodeWatch::Start(
    caf::actor_system& sys, const std::string& host,
    std::function<void(const std::string&, const std::string&)> on_down) {
  auto impl = std::make_unique<Impl>(sys);
  impl->on_down = on_down;
  impl->target = sys.spawn(WatchTarget);
  impl->watcher = sys.spawn(Watcher, std::move(on_down));
  auto port = sys.middleman().publish(impl->target, 0, host.c_str());
  if (!port) {
    caf::anon_send_exit(impl->target, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(impl->watcher, caf::exit_reason::user_shutdown);
    return Unavailable("publishing the watch actor on " + host + ": " + sys.render(port.error()));
  }
  impl->port = *port;
  return std::unique_ptr<NodeWatch>(new NodeWatch(std::move(impl)));
}

NodeWatch::NodeWatch(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NodeWatch::~NodeWatch() { Stop(); }

uint16_t NodeWatch::port() const { return impl_->port; }

void NodeWatch::Watch(const std::string& member_address, const std::string& host, uint16_t port) {
  std::lock_guard<std::mutex> l(impl_->mu);
  if (impl_->stopped || port == 0 || !impl_->watched.insert(member_address).second) return;
  Impl* impl = impl_.get();
  // remote_actor blocks for the BASP handshake: never on a caller's thread.
  impl_->dialers.emplace_back([impl, member_address, host, port] {
    auto remote = impl->sys.middleman().remote_actor(host, port);
    {
      std::lock_guard<std::mutex> l(impl->mu);
      if (impl->stopped) return;
    }
    if (!remote) {
      impl->on_down(member_address, "its watch actor at " + host + ":" + std::to_string(port) +
                                        " cannot be reached: " + impl->sys.render(remote.error()));
      return;
    }
    caf::anon_send(impl->watcher, *remote, member_address);
  });
}

void NodeWatch::Stop() {
  std::vector<std::thread> dialers;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
    dialers.swap(impl_->dialers);
  }
  for (auto& t : dialers) t.join();
  caf::anon_send_exit(impl_->watcher, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(impl_->target, caf::exit_reason::user_shutdown);
}

}  // namespace runtime
}  // namespace sf
