// The etcd identities of cluster credentials, through OpenSSL (as
// net/credentials.cc, whose certificates these mirror: ECDSA P-256, signed
// by the cluster CA).
#include "cluster/etcd_identity.h"

#include <dirent.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>

#include "net/openssl_files.h"

namespace sf {
namespace cluster {

namespace {

using net::PkeyPtr;
using net::X509Ptr;

// A client certificate for key signed by the CA in dir, with common name cn
// ("" for none: what etcd's gateway needs); its PEM text.
Result<std::string> SignedPem(const std::string& dir, EVP_PKEY* key, const std::string& cn) {
  auto ca_key_pem = net::ReadWholeFile(dir + "/ca.key");
  if (!ca_key_pem.ok()) return NotFound(dir + " has no CA key (ca.key): run this where the cluster's CA key is");
  SF_ASSIGN_OR_RETURN(std::string ca_pem, net::ReadWholeFile(dir + "/ca.crt"));
  SF_ASSIGN_OR_RETURN(PkeyPtr ca_key, net::ParseKey(*ca_key_pem, dir + "/ca.key"));
  SF_ASSIGN_OR_RETURN(X509Ptr ca, net::ParseCert(ca_pem, dir + "/ca.crt"));
  SF_ASSIGN_OR_RETURN(X509Ptr c, net::MakeCert(key, cn, ca.get(), ca_key.get(), false, {}, {}));
  return net::CertPem(c.get());
}

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64 || n == "ca") return false;
  return std::all_of(n.begin(), n.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
  });
}

}  // namespace

Result<std::string> CertificateCommonName(const std::string& cert_pem) {
  SF_ASSIGN_OR_RETURN(X509Ptr cert, net::ParseCert(cert_pem, "the credential's certificate"));
  char cn[256] = {0};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn, sizeof cn);
  return std::string(cn);
}

Result<std::string> EtcdPassword(const std::string& key_pem) {
  SF_ASSIGN_OR_RETURN(PkeyPtr key, net::ParseKey(key_pem, "the credential's key"));
  unsigned char* der = nullptr;
  const int n = i2d_PrivateKey(key.get(), &der);
  if (n <= 0) return InvalidArgument(net::OpenSslError("cannot encode the credential's key"));
  // A label first: the digest is of no use for anything but this password.
  std::string input = "shardflow etcd password v1";
  input.push_back('\0');
  input.append(reinterpret_cast<const char*>(der), static_cast<size_t>(n));
  OPENSSL_clear_free(der, static_cast<size_t>(n));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const bool ok = EVP_Digest(input.data(), input.size(), digest, &len, EVP_sha256(), nullptr) == 1;
  OPENSSL_cleanse(input.data(), input.size());
  if (!ok) return Internal(net::OpenSslError("cannot hash the credential's key"));
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

Status IssueEtcdCertificate(const std::string& dir, const std::string& name) {
  if (!ValidName(name)) return InvalidArgument("credential name '" + name + "' must be 1 to 64 of [A-Za-z0-9._-]");
  const std::string path = dir + "/" + name + ".etcd.crt";
  if (net::FileExists(path)) return Status::OK();
  auto key_pem = net::ReadWholeFile(dir + "/" + name + ".key");
  if (!key_pem.ok()) return NotFound(dir + " has no key " + name + ".key");
  SF_ASSIGN_OR_RETURN(PkeyPtr key, net::ParseKey(*key_pem, dir + "/" + name + ".key"));
  SF_ASSIGN_OR_RETURN(std::string pem, SignedPem(dir, key.get(), ""));
  return net::WriteNewFile(path, pem, 0644);
}

Status IssueAdminCredential(const std::string& dir, const std::string& name) {
  if (!ValidName(name)) return InvalidArgument("credential name '" + name + "' must be 1 to 64 of [A-Za-z0-9._-]");
  const std::string crt = dir + "/" + name + ".crt", key_path = dir + "/" + name + ".key";
  if (!net::FileExists(crt)) {
    if (net::FileExists(key_path)) return FailedPrecondition(key_path + " exists without " + crt);
    SF_ASSIGN_OR_RETURN(PkeyPtr key, net::NewEcKey());
    SF_ASSIGN_OR_RETURN(std::string cert_pem, SignedPem(dir, key.get(), "admin:" + name));
    SF_ASSIGN_OR_RETURN(std::string key_pem, net::KeyPem(key.get()));
    SF_RETURN_IF_ERROR(net::WriteNewFile(key_path, key_pem, 0600));
    SF_RETURN_IF_ERROR(net::WriteNewFile(crt, cert_pem, 0644));
  }
  return IssueEtcdCertificate(dir, name);
}

Result<net::Credential> LoadAdminCredential(const std::string& dir, const std::string& name) {
  if (!ValidName(name)) return InvalidArgument("credential name '" + name + "' must be 1 to 64 of [A-Za-z0-9._-]");
  net::Credential c;
  c.name = name;
  c.role = net::Role::kSession;  // unused: it is no peer's credential
  const std::string crt = dir + "/" + name + ".crt", key_path = dir + "/" + name + ".key";
  SF_ASSIGN_OR_RETURN(c.ca_pem, net::ReadWholeFile(dir + "/ca.crt"));
  SF_ASSIGN_OR_RETURN(c.cert_pem, net::ReadWholeFile(crt));
  SF_ASSIGN_OR_RETURN(c.key_pem, net::ReadWholeFile(key_path));
  struct stat st {};
  if (::stat(key_path.c_str(), &st) == 0 && (st.st_mode & 077))
    return FailedPrecondition(key_path + " may be read by group or others; chmod 600 it");
  SF_ASSIGN_OR_RETURN(c.etcd_cert_pem, net::ReadWholeFile(dir + "/" + name + ".etcd.crt"));
  SF_ASSIGN_OR_RETURN(std::string cn, CertificateCommonName(c.cert_pem));
  if (cn != "admin:" + name)
    return InvalidArgument(crt + " is '" + cn + "', not the operator credential admin:" + name);
  SF_ASSIGN_OR_RETURN(X509Ptr cert, net::ParseCert(c.cert_pem, crt));
  SF_ASSIGN_OR_RETURN(PkeyPtr key, net::ParseKey(c.key_pem, key_path));
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    return InvalidArgument(net::OpenSslError(key_path + " is not the key of " + crt));
  return c;
}

std::vector<std::string> ListCredentials(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const std::string f = e->d_name;
    if (f.size() <= 4 || f.compare(f.size() - 4, 4, ".crt") != 0) continue;
    const std::string name = f.substr(0, f.size() - 4);
    // NAME.etcd.crt has no NAME.etcd.key: it is no credential.
    if (ValidName(name) && net::FileExists(dir + "/" + name + ".key")) out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace cluster
}  // namespace sf
