// Cluster credentials through OpenSSL (the library the TLS connections use):
// ECDSA P-256 keys, X.509 v3 certificates signed by the cluster's CA.
#include "net/credentials.h"

#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace sf {
namespace net {

namespace {

struct PkeyFree { void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); } };
struct X509Free { void operator()(X509* p) const { X509_free(p); } };
struct BioFree { void operator()(BIO* p) const { BIO_free(p); } };
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using BioPtr = std::unique_ptr<BIO, BioFree>;

// 3650 days: a cluster's certificates outlive any training run; operators
// rotate them by issuing new ones.
constexpr long kValidSeconds = 3650L * 24 * 3600;

std::string OpenSslError(const std::string& what) {
  std::string out = what;
  unsigned long e = ERR_get_error();
  if (e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += ": ";
    out += buf;
  }
  ERR_clear_error();
  return out;
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Writes text to path with mode (created exclusively, so an existing key is never replaced).
Status WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  std::FILE* f = nullptr;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd >= 0) f = ::fdopen(fd, "wb");
  if (!f) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return Unavailable("cannot write " + path + ": " + why);
  }
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return Unavailable("cannot write " + path);
  ::chmod(path.c_str(), mode);  // the umask may have narrowed it; never widened past mode
  return Status::OK();
}

Result<PkeyPtr> NewKey() {
  PkeyPtr k(EVP_EC_gen("P-256"));
  if (!k) return Internal(OpenSslError("cannot generate an EC key"));
  return k;
}

Result<std::string> KeyPem(EVP_PKEY* k) {
  BioPtr b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_PrivateKey(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return Internal(OpenSslError("cannot encode a key"));
  char* p = nullptr;
  const long n = BIO_get_mem_data(b.get(), &p);
  return std::string(p, static_cast<size_t>(n));
}

Result<std::string> CertPem(X509* c) {
  BioPtr b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_X509(b.get(), c) != 1) return Internal(OpenSslError("cannot encode a certificate"));
  char* p = nullptr;
  const long n = BIO_get_mem_data(b.get(), &p);
  return std::string(p, static_cast<size_t>(n));
}

Result<X509Ptr> ParseCert(const std::string& pem, const std::string& path) {
  BioPtr b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr c(b ? PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!c) return InvalidArgument(OpenSslError(path + " is not a PEM certificate"));
  return c;
}

Result<PkeyPtr> ParseKey(const std::string& pem, const std::string& path) {
  BioPtr b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  PkeyPtr k(b ? PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!k) return InvalidArgument(OpenSslError(path + " is not a PEM private key"));
  return k;
}

Status AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
  if (!ext) return InvalidArgument(OpenSslError("bad certificate extension '" + value + "'"));
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? Status::OK() : Internal(OpenSslError("cannot add a certificate extension"));
}

// A certificate for key with common name cn, signed by issuer_key (self-signed when issuer is null).
Result<X509Ptr> MakeCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, bool ca,
                         const std::vector<std::string>& dns, const std::vector<std::string>& ips,
                         const std::string& unit = "") {
  X509Ptr c(X509_new());
  if (!c) return Internal(OpenSslError("cannot allocate a certificate"));
  X509_set_version(c.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return Internal(OpenSslError("no random serial"));
  serial[0] &= 0x7f;  // a positive serial
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(c.get()), -3600);  // tolerate clocks an hour apart
  X509_gmtime_adj(X509_getm_notAfter(c.get()), kValidSeconds);
  X509_set_pubkey(c.get(), key);
  X509_NAME* name = X509_get_subject_name(c.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("shardflow"), -1, -1, 0);
  if (!unit.empty() &&
      X509_NAME_add_entry_by_txt(name, "OU", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(unit.c_str()), -1, -1,
                                 0) != 1)
    return InvalidArgument(OpenSslError("cannot put organizational unit '" + unit + "' in a certificate"));
  // X.509 holds common names of at most 64 bytes; without this check a long
  // name made a certificate with no common name, refused only when loaded.
  if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1)
    return InvalidArgument(OpenSslError("common name '" + cn + "' does not fit a certificate (at most 64 bytes)"));
  X509* signer = issuer ? issuer : c.get();
  X509_set_issuer_name(c.get(), X509_get_subject_name(signer));
  if (ca) {
    SF_RETURN_IF_ERROR(AddExt(c.get(), signer, NID_basic_constraints, "critical,CA:TRUE,pathlen:0"));
    SF_RETURN_IF_ERROR(AddExt(c.get(), signer, NID_key_usage, "critical,keyCertSign,cRLSign"));
  } else {
    SF_RETURN_IF_ERROR(AddExt(c.get(), signer, NID_basic_constraints, "critical,CA:FALSE"));
    SF_RETURN_IF_ERROR(AddExt(c.get(), signer, NID_key_usage, "critical,digitalSignature"));
    SF_RETURN_IF_ERROR(AddExt(c.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth"));
    std::string san;
    for (const auto& d : dns) san += (san.empty() ? "" : ",") + std::string("DNS:") + d;
    for (const auto& i : ips) san += (san.empty() ? "" : ",") + std::string("IP:") + i;
    if (!san.empty()) SF_RETURN_IF_ERROR(AddExt(c.get(), signer, NID_subject_alt_name, san));
  }
  if (X509_sign(c.get(), issuer_key, EVP_sha256()) <= 0) return Internal(OpenSslError("cannot sign a certificate"));
  return c;
}

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
  if (Exists(dir + "/ca.crt")) return FailedPrecondition(dir + " already holds a cluster CA (ca.crt)");
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Unavailable("cannot create " + dir + ": " + std::strerror(errno));
  SF_ASSIGN_OR_RETURN(PkeyPtr key, NewKey());
  SF_ASSIGN_OR_RETURN(X509Ptr ca, MakeCert(key.get(), "shardflow cluster CA", nullptr, key.get(), true, {}, {}));
  SF_ASSIGN_OR_RETURN(std::string key_pem, KeyPem(key.get()));
  SF_ASSIGN_OR_RETURN(std::string ca_pem, CertPem(ca.get()));
  SF_RETURN_IF_ERROR(WriteFile(dir + "/ca.key", key_pem, 0600));
  SF_RETURN_IF_ERROR(WriteFile(dir + "/ca.crt", ca_pem, 0644));
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
  if (Exists(crt_path) || Exists(key_path)) return FailedPrecondition(crt_path + " already exists");
  auto ca_key_pem = ReadFile(dir + "/ca.key");
  if (!ca_key_pem.ok()) return NotFound(dir + " has no CA key (ca.key): run shardflow certs init there first");
  SF_RETURN_IF_ERROR(CheckKeyMode(dir + "/ca.key"));
  SF_ASSIGN_OR_RETURN(std::string ca_pem, ReadFile(dir + "/ca.crt"));
  SF_ASSIGN_OR_RETURN(PkeyPtr ca_key, ParseKey(*ca_key_pem, dir + "/ca.key"));
  SF_ASSIGN_OR_RETURN(X509Ptr ca, ParseCert(ca_pem, dir + "/ca.crt"));
  std::vector<std::string> ips;
  for (const auto& h : hosts) {
    if (h.empty()) return InvalidArgument("--host must not be empty");
    (IsIp(h) ? ips : dns).push_back(h);
  }
  SF_ASSIGN_OR_RETURN(PkeyPtr key, NewKey());
  SF_ASSIGN_OR_RETURN(X509Ptr cert, MakeCert(key.get(), cn, ca.get(), ca_key.get(), false, dns, ips, unit));
  SF_ASSIGN_OR_RETURN(std::string key_pem, KeyPem(key.get()));
  SF_ASSIGN_OR_RETURN(std::string cert_pem, CertPem(cert.get()));
  SF_RETURN_IF_ERROR(WriteFile(key_path, key_pem, 0600));
  return WriteFile(crt_path, cert_pem, 0644);
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
  SF_ASSIGN_OR_RETURN(c.ca_pem, ReadFile(dir + "/ca.crt"));
  SF_ASSIGN_OR_RETURN(c.cert_pem, ReadFile(crt_path));
  SF_RETURN_IF_ERROR(CheckKeyMode(key_path));
  SF_ASSIGN_OR_RETURN(c.key_pem, ReadFile(key_path));
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
  if (Exists(etcd_crt)) {
    SF_ASSIGN_OR_RETURN(c.etcd_cert_pem, ReadFile(etcd_crt));
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
