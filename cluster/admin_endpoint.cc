// The endpoint of a one-off request to nodes (cluster/admin_endpoint.h).
#include "cluster/admin_endpoint.h"

namespace sf {
namespace cluster {

Result<std::unique_ptr<net::Endpoint>> AdminEndpoint(const std::string& tls_dir, const std::string& tls_name,
                                                     bool insecure, std::optional<net::Credential>* credential) {
  net::EndpointOptions to;
  to.tls_dir = tls_dir;
  to.tls_name = tls_name.empty() ? "session" : tls_name;
  to.insecure = insecure;
  to.role = net::Role::kSession;
  to.handler_threads = 1;
  to.log = false;
  if (!insecure) {
    if (tls_dir.empty()) return InvalidArgument("no credentials: give a directory made by `shardflow certs init`");
    // Any credential of the cluster may ask: take the role it was issued for.
    SF_ASSIGN_OR_RETURN(net::Credential cred, net::LoadCredential(tls_dir, to.tls_name));
    to.role = cred.role;
    if (credential) *credential = std::move(cred);
  }
  return net::Endpoint::Create(to, nullptr, nullptr);
}

}  // namespace cluster
}  // namespace sf
