// Cap'n Proto RPC connections over mutual TLS (net/peer_rpc.h): the
// Endpoint and address parsing. The rest is in net/peer_link.h's files.
#include "net/peer_rpc.h"

#include "net/peer_link.h"

namespace sf {
namespace net {

Status ParseAddress(const std::string& address, std::string* host, uint16_t* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    return InvalidArgument("address '" + address + "' is not HOST:PORT");
  const std::string p = address.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(p.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < 0 || v > 65535)
    return InvalidArgument("address '" + address + "' has no valid port (0-65535)");
  *host = address.substr(0, colon);
  *port = static_cast<uint16_t>(v);
  return Status::OK();
}

namespace {

using detail::Core;

class EndpointImpl final : public Endpoint {
 public:
  explicit EndpointImpl(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  ~EndpointImpl() override { Shutdown(); }

  Result<uint16_t> Listen(const std::string& host, uint16_t port) override {
    if (core_->OnLoopThread()) return Internal("Listen called on the endpoint's I/O thread");
    Core* c = core_.get();
    return core_->RunOnLoop<uint16_t>([c, host, port] { return c->ListenOnLoop(host, port); });
  }
  Result<ConnectionPtr> Connect(const std::string& address) override {
    if (core_->OnLoopThread()) return Internal("Connect called on the endpoint's I/O thread");
    Core* c = core_.get();
    return core_->RunOnLoop<ConnectionPtr>([c, address] { return c->ConnectOnLoop(address); });
  }
  void Shutdown() override { core_->Shutdown(); }

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace

namespace detail {

namespace {

template <class... Ts>
std::bitset<sizeof...(Ts)> KindsOnIoThread(const Handler& h, std::variant<Ts...>*) {
  std::bitset<sizeof...(Ts)> b;
  size_t i = 0;
  ((b[i++] = h.OnIoThread(typeid(Ts))), ...);
  return b;
}

}  // namespace

std::bitset<std::variant_size_v<Body>> OnIoThreadKinds(const Handler& h) {
  return KindsOnIoThread(h, static_cast<Body*>(nullptr));
}

}  // namespace detail

Result<std::unique_ptr<Endpoint>> Endpoint::Create(EndpointOptions options, Handler* handler, DownHandler on_down) {
  if (options.heartbeat_ms <= 0 || options.peer_timeout_ms <= options.heartbeat_ms)
    return InvalidArgument("peer_timeout_ms (" + std::to_string(options.peer_timeout_ms) +
                           ") must exceed heartbeat_ms (" + std::to_string(options.heartbeat_ms) + ") > 0");
  if (options.max_connections <= 0 || options.max_connections_per_source <= 0 || options.max_handshakes <= 0)
    return InvalidArgument("connection caps must be positive");
  if (options.max_frame_bytes < 4096) return InvalidArgument("max_frame_bytes must be at least 4096");
  if (options.max_inflight_bytes < 4096) return InvalidArgument("max_inflight_bytes must be at least 4096");
  Credential cred;
  if (options.insecure) {
    cred.role = options.role;
  } else {
    if (options.tls_dir.empty())
      return InvalidArgument("no TLS credentials: give a directory made by `shardflow certs init` (or run insecure)");
    const std::string name = options.tls_name.empty() ? RoleName(options.role) : options.tls_name;
    SF_ASSIGN_OR_RETURN(cred, LoadCredential(options.tls_dir, name));
    if (cred.role != options.role)
      return InvalidArgument("credential '" + name + "' in " + options.tls_dir + " is for a " + RoleName(cred.role) +
                             ", this process is a " + RoleName(options.role));
  }
  static Handler serves_nothing;  // an endpoint made without a handler
  auto core = std::make_shared<Core>(std::move(options), std::move(cred), handler ? handler : &serves_nothing,
                                     std::move(on_down));
  SF_RETURN_IF_ERROR(core->Start());
  return std::unique_ptr<Endpoint>(new EndpointImpl(std::move(core)));
}

}  // namespace net
}  // namespace sf
