// The endpoint of a one-off request to nodes (listing members or
// namespaces, dropping one): a credential of the cluster in the role it was
// issued for, one handler thread, no logging.
// Thread-safety: a free function.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "net/credentials.h"
#include "net/peer_rpc.h"

namespace sf {
namespace cluster {

// An endpoint holding credential tls_name ("" = "session") of tls_dir, or
// plaintext with insecure; *credential (when not null) gets the credential
// loaded. InvalidArgument when neither tls_dir nor insecure is given, the
// errors of net::LoadCredential and net::Endpoint::Create otherwise.
Result<std::unique_ptr<net::Endpoint>> AdminEndpoint(const std::string& tls_dir, const std::string& tls_name,
                                                     bool insecure,
                                                     std::optional<net::Credential>* credential = nullptr);

}  // namespace cluster
}  // namespace sf
