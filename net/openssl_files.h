// What net/credentials.cc and cluster/etcd_identity.cc share of OpenSSL:
// owning pointers, errors with OpenSSL's reason, PEM parsing and writing,
// certificates signed by the cluster's CA, and the credential files. An
// internal header (it includes OpenSSL's): include it only from .cc files
// that issue or load credentials.
#pragma once

#include <openssl/evp.h>
#include <openssl/x509.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "shardflow/status.h"

namespace sf {
namespace net {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct X509Free {
  void operator()(X509* p) const { X509_free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;

// 3650 days: a cluster's certificates outlive any training run; operators
// rotate them by issuing new ones.
inline constexpr long kCertValidSeconds = 3650L * 24 * 3600;

// `what`, then OpenSSL's reason for the last error (which is cleared).
std::string OpenSslError(const std::string& what);

// Whether path exists (a file or anything else).
bool FileExists(const std::string& path);
// The whole of path; NotFound naming it when it cannot be read.
Result<std::string> ReadWholeFile(const std::string& path);
// Creates path exclusively with mode (an existing file is never replaced)
// holding text; Unavailable naming it and why when it cannot.
Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode);

// A new ECDSA P-256 key; Internal when OpenSSL cannot make one.
Result<PkeyPtr> NewEcKey();
// The PEM text of a key or a certificate; Internal when it cannot be encoded.
Result<std::string> KeyPem(EVP_PKEY* key);
Result<std::string> CertPem(X509* cert);
// The certificate or key in PEM text; InvalidArgument naming `what` (its path) otherwise.
Result<X509Ptr> ParseCert(const std::string& pem, const std::string& what);
Result<PkeyPtr> ParseKey(const std::string& pem, const std::string& what);

// A certificate for key, organization "shardflow", common name cn ("" for
// none), organizational unit `unit` ("" for none), signed by issuer_key
// (self-signed when issuer is null): a CA's when ca, else one for TLS
// servers and clients with the DNS names and IP addresses given.
// InvalidArgument when cn or unit does not fit (X.509 holds at most 64
// bytes), Internal when OpenSSL fails.
Result<X509Ptr> MakeCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, bool ca,
                         const std::vector<std::string>& dns, const std::vector<std::string>& ips,
                         const std::string& unit = "");

}  // namespace net
}  // namespace sf
