// A cluster's TLS credentials: its own certificate authority, and one
// certificate per node or session that it signed.
//
// A directory made by InitCredentials holds
//   ca.crt, ca.key            the cluster CA (ca.key only where certificates are issued)
//   NAME.crt, NAME.key        a credential: an ECDSA P-256 key and its certificate
// Keys are written mode 600 and refused when group or others may read them.
// A certificate's common name is "ROLE:NAME" (ROLE is node or session): the
// role is what the holder may do (only nodes change membership), and it is
// signed by the CA, so a peer cannot claim another. Node certificates carry
// the DNS name kNodeHostName, which dialers verify, plus any --host names. A
// session certificate's organizational unit, when it has one, is its
// namespace (graph/namespaces.h): what its sessions may see on a node.
// Thread-safety: free functions over files and values.
#pragma once

#include <string>
#include <vector>

#include "shardflow/status.h"

namespace sf {
namespace net {

// What a credential's holder may do.
enum class Role { kNode, kSession };

// "node" or "session".
const char* RoleName(Role r);
// Parses "node" or "session"; InvalidArgument naming the text otherwise.
Result<Role> ParseRole(const std::string& s);

// The DNS name in every node certificate; a dialer checks the node it
// reached presents it (any node of the cluster's CA may serve any address).
constexpr const char kNodeHostName[] = "node.shardflow.internal";

// The PEM texts a TLS endpoint needs: the CA to trust, its own certificate and key.
struct Credential {
  std::string name;  // the NAME of NAME.crt
  Role role = Role::kNode;
  std::string ns;  // a session's namespace ("": the default one)
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
  // NAME.etcd.crt when present: the same key's certificate without a common
  // name, which etcd's JSON gateway needs once etcd's authentication is on
  // (cluster/etcd_identity.h); "" otherwise.
  std::string etcd_cert_pem;
};

// Creates dir (mode 700) with a new CA and the credentials "node" and
// "session"; FailedPrecondition when dir already holds a CA, Unavailable naming
// the path when a file cannot be written.
Status InitCredentials(const std::string& dir);

// Issues NAME.crt/NAME.key in dir, signed by its CA, for role, valid for
// the DNS names or IP addresses in hosts (nodes also get kNodeHostName); a
// session's in namespace ns ("" or "default": the default one).
// InvalidArgument for a name or namespace that is not [A-Za-z0-9._-]{1,64}
// (or a namespace for a node), NotFound when dir has no CA key,
// FailedPrecondition when NAME.crt exists.
Status IssueCredential(const std::string& dir, Role role, const std::string& name,
                       const std::vector<std::string>& hosts = {}, const std::string& ns = "");

// The DNS name in every etcd server certificate; EtcdClient checks the etcd
// it reached presents it (cluster/etcd_client.h).
constexpr const char kEtcdHostName[] = "etcd.shardflow.internal";

// Issues NAME.crt/NAME.key in dir for an etcd server, signed by its CA: common
// name "etcd:NAME" (not a Role: ParseCommonName refuses it, so no node or
// session accepts an etcd credential as a peer), valid for kEtcdHostName and
// the DNS names or IP addresses in hosts, usable as TLS server and client (etcd
// dials its own JSON gateway with it). The errors of IssueCredential.
Status IssueEtcdCredential(const std::string& dir, const std::string& name,
                           const std::vector<std::string>& hosts = {});

// Reads credential `name` and the CA from dir. NotFound naming a missing
// file, FailedPrecondition when a key file may be read by group or others,
// InvalidArgument when the certificate was not signed by dir's CA or its
// common name is not "ROLE:NAME".
Result<Credential> LoadCredential(const std::string& dir, const std::string& name);

// The role and name in a peer's common name "ROLE:NAME"; InvalidArgument
// naming the text when it has no known role.
Status ParseCommonName(const std::string& cn, Role* role, std::string* name);

// Makes a fresh credentials directory under $TMPDIR (or /tmp) for a local
// cluster that needs no setup step; its path, or the errors of
// InitCredentials. The caller removes it.
Result<std::string> MakeTemporaryCredentials();

}  // namespace net
}  // namespace sf
