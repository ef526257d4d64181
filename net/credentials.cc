// Cluster credentials through OpenSSL (the library the TLS connections use):
// ECDSA P-256 keys, X.509 v3 certificates signed by the cluster's CA.
#include "net/credentials.h"

#include <arpa/inet.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "net/openssl_files.h"

namespace sf {
namespace net {

namespace {

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char ch : n)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-')) return false;
  return true;
}

bool IsIp(const std::string& h) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, h.c_str(), buf) == 1 || ::inet_pton(AF_INET6, h.c_str(), buf) == 1;
}

Status CheckKeyMode(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return NotFound("cannot read " + path);
  if (st.st_mode & 077)
    return FailedPrecondition(path + " may be read by group or others (mode " +
                              std::to_string(st.st_mode & 0777) + " octal " + [&] {
                                char b[8];
                                std::snprintf(b, sizeof b, "%03o", st.st_mode & 0777);
                                return std::string(b);
                              }() + "); chmod 600 it");
  return Status::OK();
}

}  // namespace

const char* RoleName(Role r) { return r == Role::kNode ? "node" : "session"; }

Result<Role> ParseRole(const std::string& s) {
  if (s == "node") return Role::kNode;
  if (s == "session") return Role::kSession;
  return InvalidArgument("unknown role '" + s + "' (node or session)");
}

Status ParseCommonName(const std::string& cn, Role* role, std::string* name) {
  const size_t colon = cn.find(':');
  if (colon == std::string::npos) return InvalidArgument("certificate name '" + cn + "' is not ROLE:NAME");
  auto r = ParseRole(cn.substr(0, colon));
  if (!r.ok()) return InvalidArgument("certificate name '" + cn + "': " + r.status().message());
  *role = *r;
  *name = cn.substr(colon + 1);
  // As `certs issue` makes them: a certificate naming no one (a CA could
  // sign "session:") names no peer in logs and errors.
  if (name->empty() || name->size() > 64)
    return InvalidArgument("certificate name '" + cn + "': the name after the role must be 1 to 64 characters");
  return Status::OK();
}

Status InitCredentials(const std::string& dir) {
  if (FileExists(dir + "/ca.crt")) return FailedPrecondition(dir + " already holds a cluster CA (ca.crt)");
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Unavailable("cannot create " + dir + ": " + std::strerror(errno));
  SF_ASSIGN_OR_RETURN(PkeyPtr key, NewEcKey());
  SF_ASSIGN_OR_RETURN(X509Ptr ca, MakeCert(key.get(), "shardflow cluster CA", nullptr, key.get(), true, {}, {}));
  SF_ASSIGN_OR_RETURN(std::string key_pem, KeyPem(key.get()));
  SF_ASSIGN_OR_RETURN(std::string ca_pem, CertPem(ca.get()));
  SF_RETURN_IF_ERROR(WriteNewFile(dir + "/ca.key", key_pem, 0600));
  SF_RETURN_IF_ERROR(WriteNewFile(dir + "/ca.crt", ca_pem, 0644));
  SF_RETURN_IF_ERROR(IssueCredential(dir, Role::kNode, "node"));
  return IssueCredential(dir, Role::kSession, "session");
}

namespace {

// NAME.crt/NAME.key in dir signed by its CA, with common name cn, valid for
// the DNS names in dns plus hosts (each a DNS name or an IP address).
Status IssueSigned(const std::string& dir, const std::string& cn, const std::string& name,
                   std::vector<std::string> dns, const std::vector<std::string>& hosts, const std::string& unit = "") {
  if (!ValidName(name))
    return InvalidArgument("credential name '" + name + "' must be 1 to 64 of [A-Za-z0-9._-]");
  if (name == "ca") return InvalidArgument("credential name 'ca' is the CA's own");
  const std::string crt_path = dir + "/" + name + ".crt", key_path = dir + "/" + name + ".key";
  if (FileExists(crt_path) || FileExists(key_path)) return FailedPrecondition(crt_path + " already exists");
  auto ca_key_pem = ReadWholeFile(dir + "/ca.key");
  if (!ca_key_pem.ok()) return NotFound(dir + " has no CA key (ca.key): run shardflow certs init there first");
  SF_RETURN_IF_ERROR(CheckKeyMode(dir + "/ca.key"));
  SF_ASSIGN_OR_RETURN(std::string ca_pem, ReadWholeFile(dir + "/ca.crt"));
  SF_ASSIGN_OR_RETURN(PkeyPtr ca_key, ParseKey(*ca_key_pem, dir + "/ca.key"));
  SF_ASSIGN_OR_RETURN(X509Ptr ca, ParseCert(ca_pem, dir + "/ca.crt"));
  std::vector<std::string> ips;
  for (const auto& h : hosts) {
    if (h.empty()) return InvalidArgument("--host must not be empty");
    (IsIp(h) ? ips : dns).push_back(h);
  }
  SF_ASSIGN_OR_RETURN(PkeyPtr key, NewEcKey());
  SF_ASSIGN_OR_RETURN(X509Ptr cert, MakeCert(key.get(), cn, ca.get(), ca_key.get(), false, dns, ips, unit));
  SF_ASSIGN_OR_RETURN(std::string key_pem, KeyPem(key.get()));
  SF_ASSIGN_OR_RETURN(std::string cert_pem, CertPem(cert.get()));
  SF_RETURN_IF_ERROR(WriteNewFile(key_path, key_pem, 0600));
  return WriteNewFile(crt_path, cert_pem, 0644);
}

}  // namespace

Status IssueCredential(const std::string& dir, Role role, const std::string& name,
                       const std::vector<std::string>& hosts, const std::string& ns) {
  std::vector<std::string> dns;
  if (role == Role::kNode) dns.push_back(kNodeHostName);
  const std::string unit = ns == "default" ? "" : ns;
  if (!unit.empty() && role != Role::kSession)
    return InvalidArgument("--namespace is for session credentials: a node serves every namespace");
  if (!unit.empty() && !ValidName(unit))
    return InvalidArgument("namespace '" + unit + "' must be 1 to 64 of [A-Za-z0-9._-]");
  return IssueSigned(dir, std::string(RoleName(role)) + ":" + name, name, std::move(dns), hosts, unit);
}

Status IssueEtcdCredential(const std::string& dir, const std::string& name, const std::vector<std::string>& hosts) {
  return IssueSigned(dir, "etcd:" + name, name, {kEtcdHostName}, hosts);
}

Result<Credential> LoadCredential(const std::string& dir, const std::string& name) {
  if (!ValidName(name)) return InvalidArgument("credential name '" + name + "' must be 1 to 64 of [A-Za-z0-9._-]");
  Credential c;
  c.name = name;
  const std::string crt_path = dir + "/" + name + ".crt", key_path = dir + "/" + name + ".key";
  SF_ASSIGN_OR_RETURN(c.ca_pem, ReadWholeFile(dir + "/ca.crt"));
  SF_ASSIGN_OR_RETURN(c.cert_pem, ReadWholeFile(crt_path));
  SF_RETURN_IF_ERROR(CheckKeyMode(key_path));
  SF_ASSIGN_OR_RETURN(c.key_pem, ReadWholeFile(key_path));
  SF_ASSIGN_OR_RETURN(X509Ptr ca, ParseCert(c.ca_pem, dir + "/ca.crt"));
  SF_ASSIGN_OR_RETURN(X509Ptr cert, ParseCert(c.cert_pem, crt_path));
  SF_ASSIGN_OR_RETURN(PkeyPtr key, ParseKey(c.key_pem, key_path));
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    return InvalidArgument(OpenSslError(key_path + " is not the key of " + crt_path));
  PkeyPtr ca_pub(X509_get_pubkey(ca.get()));
  if (!ca_pub || X509_verify(cert.get(), ca_pub.get()) != 1)
    return InvalidArgument(OpenSslError(crt_path + " was not signed by " + dir + "/ca.crt"));
  char cn[256] = {0};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn, sizeof cn);
  std::string cert_name;
  SF_RETURN_IF_ERROR(ParseCommonName(cn, &c.role, &cert_name).WithPrefix(crt_path));
  char unit[256] = {0};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_organizationalUnitName, unit, sizeof unit);
  if (c.role == Role::kSession) c.ns = unit;
  // Made by `shardflow cluster auth` (cluster/etcd_identity.h); etcd checks it.
  const std::string etcd_crt = dir + "/" + name + ".etcd.crt";
  if (FileExists(etcd_crt)) {
    SF_ASSIGN_OR_RETURN(c.etcd_cert_pem, ReadWholeFile(etcd_crt));
  }
  return c;
}

Result<std::string> MakeTemporaryCredentials() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/shardflow-tls-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) return Unavailable("cannot create " + pattern + ": " + std::strerror(errno));
  const std::string dir(buf.data());
  SF_RETURN_IF_ERROR(InitCredentials(dir));
  return dir;
}

}  // namespace net
}  // namespace sf
