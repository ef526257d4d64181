// Who a credential is to etcd once etcd's authentication is on
// (cluster/etcd_auth.h), and the files that identity needs.
//
// etcd 3.4 names a client by its certificate's common name only on gRPC:
// on the JSON gateway shardflow speaks, etcd refuses (HTTP 400) every
// request whose client certificate has a common name while authentication
// is on, because the gateway would present its own. So a credential talks
// to etcd with a second certificate for the same key that carries no
// common name (NAME.etcd.crt, signed by the cluster CA: etcd still checks
// the caller is the cluster's), and logs in as an etcd user whose name is
// its certificate's common name ("node:NAME", "session:NAME", "admin:NAME")
// and whose password is derived from its private key: only the key's holder
// can log in as it.
//
// The operator's credential, "admin" by default, is made here, not by
// net/credentials: its common name "admin:NAME" is no peer role, so no node
// or session accepts it as a peer; it only manages etcd (etcd's root role).
// Thread-safety: free functions over files and values.
#pragma once

#include <string>
#include <vector>

#include "net/credentials.h"
#include "shardflow/status.h"

namespace sf {
namespace cluster {

// The default name of the operator's credential in a credentials directory.
constexpr const char kAdminCredential[] = "admin";

// The common name of the certificate in cert_pem; InvalidArgument when it is not a PEM certificate.
Result<std::string> CertificateCommonName(const std::string& cert_pem);
// The etcd password of the credential whose private key is key_pem: 64 hex
// digits of SHA-256 over the key's DER encoding; InvalidArgument when key_pem is not a PEM key.
Result<std::string> EtcdPassword(const std::string& key_pem);

// Writes dir/NAME.etcd.crt for NAME.key (a certificate of the same key with no
// common name, signed by dir's CA) unless it exists. NotFound naming ca.key or
// NAME.key when missing, Unavailable when it cannot be written.
Status IssueEtcdCertificate(const std::string& dir, const std::string& name);
// Writes the operator credential NAME.crt/NAME.key ("admin:NAME") and its
// NAME.etcd.crt in dir unless NAME.crt exists. The errors of IssueEtcdCertificate.
Status IssueAdminCredential(const std::string& dir, const std::string& name = kAdminCredential);
// The operator credential NAME from dir, for an EtcdClient (its role field
// means nothing). NotFound naming a missing file, InvalidArgument when its
// common name is not "admin:NAME" or its key is not the certificate's.
Result<net::Credential> LoadAdminCredential(const std::string& dir, const std::string& name = kAdminCredential);

// The names of the credentials in dir (every NAME with NAME.crt and NAME.key,
// ca excluded), sorted.
std::vector<std::string> ListCredentials(const std::string& dir);

}  // namespace cluster
}  // namespace sf
