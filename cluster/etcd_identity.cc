// The etcd identities of cluster credentials, through OpenSSL (as
// net/credentials.cc, whose certificates these mirror: ECDSA P-256, signed
// by the cluster CA).
#include "cluster/etcd_identity.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

namespace sf {
namespace cluster {

namespace {

struct PkeyFree { void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); } };
struct X509Free { void operator()(X509* p) const { X509_free(p); } };
struct BioFree { void operator()(BIO* p) const { BIO_free(p); } };
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using BioPtr = std::unique_ptr<BIO, BioFree>;

// As the cluster's other certificates (net/credentials.cc).
constexpr long kValidSeconds = 3650L * 24 * 3600;

std::string SslError(const std::string& what) {
  std::string out = what;
  const unsigned long e = ERR_get_error();
  if (e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += std::string(": ") + buf;
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

// Creates path exclusively with mode: an existing file is never replaced.
Status WriteNew(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return Unavailable("cannot write " + path + ": " + std::strerror(errno));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (::close(fd) != 0 || !ok) return Unavailable("cannot write " + path);
  ::chmod(path.c_str(), mode);
  return Status::OK();
}

Result<X509Ptr> ParseCert(const std::string& pem, const std::string& what) {
  BioPtr b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr c(b ? PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!c) return InvalidArgument(SslError(what + " is not a PEM certificate"));
  return c;
}

Result<PkeyPtr> ParseKey(const std::string& pem, const std::string& what) {
  BioPtr b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  PkeyPtr k(b ? PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!k) return InvalidArgument(SslError(what + " is not a PEM private key"));
  return k;
}

Status AddExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return Internal(SslError(std::string("bad certificate extension ") + value));
  const int ok = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  return ok == 1 ? Status::OK() : Internal(SslError("cannot add a certificate extension"));
}

// A client certificate for key signed by the CA in dir, with common name cn
// ("" for none: what etcd's gateway needs); its PEM text.
Result<std::string> SignedPem(const std::string& dir, EVP_PKEY* key, const std::string& cn) {
  auto ca_key_pem = ReadFile(dir + "/ca.key");
  if (!ca_key_pem.ok()) return NotFound(dir + " has no CA key (ca.key): run this where the cluster's CA key is");
  SF_ASSIGN_OR_RETURN(std::string ca_pem, ReadFile(dir + "/ca.crt"));
  SF_ASSIGN_OR_RETURN(PkeyPtr ca_key, ParseKey(*ca_key_pem, dir + "/ca.key"));
  SF_ASSIGN_OR_RETURN(X509Ptr ca, ParseCert(ca_pem, dir + "/ca.crt"));
  X509Ptr c(X509_new());
  if (!c) return Internal(SslError("cannot allocate a certificate"));
  X509_set_version(c.get(), 2);
  unsigned char serial[16];
  if (RAND_bytes(serial, sizeof serial) != 1) return Internal(SslError("no random serial"));
  serial[0] &= 0x7f;
  BIGNUM* bn = BN_bin2bn(serial, sizeof serial, nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(c.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(c.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(c.get()), kValidSeconds);
  X509_set_pubkey(c.get(), key);
  X509_NAME* name = X509_get_subject_name(c.get());
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("shardflow"), -1, -1, 0);
  if (!cn.empty() &&
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1)
    return InvalidArgument(SslError("common name '" + cn + "' does not fit a certificate"));
  X509_set_issuer_name(c.get(), X509_get_subject_name(ca.get()));
  SF_RETURN_IF_ERROR(AddExt(c.get(), ca.get(), NID_basic_constraints, "critical,CA:FALSE"));
  SF_RETURN_IF_ERROR(AddExt(c.get(), ca.get(), NID_key_usage, "critical,digitalSignature"));
  SF_RETURN_IF_ERROR(AddExt(c.get(), ca.get(), NID_ext_key_usage, "clientAuth"));
  if (X509_sign(c.get(), ca_key.get(), EVP_sha256()) <= 0) return Internal(SslError("cannot sign a certificate"));
  BioPtr b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_X509(b.get(), c.get()) != 1) return Internal(SslError("cannot encode a certificate"));
  char* p = nullptr;
  const long n = BIO_get_mem_data(b.get(), &p);
  return std::string(p, static_cast<size_t>(n));
}

bool ValidName(const std::string& n) {
  if (n.empty() || n.size() > 64 || n == "ca") return false;
  return std::all_of(n.begin(), n.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
  });
}

}  // namespace

Result<std::string> CertificateCommonName(const std::string& cert_pem) {
  SF_ASSIGN_OR_RETURN(X509Ptr cert, ParseCert(cert_pem, "the credential's certificate"));
  char cn[256] = {0};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn, sizeof cn);
  return std::string(cn);
}

Result<std::string> EtcdPassword(const std::string& key_pem) {
  SF_ASSIGN_OR_RETURN(PkeyPtr key, ParseKey(key_pem, "the credential's key"));
  unsigned char* der = nullptr;
  const int n = i2d_PrivateKey(key.get(), &der);
  if (n <= 0) return InvalidArgument(SslError("cannot encode the credential's key"));
  // A label first: the digest is of no use for anything but this password.
  std::string input = "shardflow etcd password v1";
  input.push_back('\0');
  input.append(reinterpret_cast<const char*>(der), static_cast<size_t>(n));
  OPENSSL_clear_free(der, static_cast<size_t>(n));
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const bool ok = EVP_Digest(input.data(), input.size(), digest, &len, EVP_sha256(), nullptr) == 1;
  OPENSSL_cleanse(input.data(), input.size());
  if (!ok) return Internal(SslError("cannot hash the credential's key"));
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
  if (Exists(path)) return Status::OK();
  auto key_pem = ReadFile(dir + "/" + name + ".key");
  if (!key_pem.ok()) return NotFound(dir + " has no key " + name + ".key");
  SF_ASSIGN_OR_RETURN(PkeyPtr key, ParseKey(*key_pem, dir + "/" + name + ".key"));
  SF_ASSIGN_OR_RETURN(std::string pem, SignedPem(dir, key.get(), ""));
  return WriteNew(path, pem, 0644);
}

Status IssueAdminCredential(const std::string& dir, const std::string& name) {
  if (!ValidName(name)) return InvalidArgument("credential name '" + name + "' must be 1 to 64 of [A-Za-z0-9._-]");
  const std::string crt = dir + "/" + name + ".crt", key_path = dir + "/" + name + ".key";
  if (!Exists(crt)) {
    if (Exists(key_path)) return FailedPrecondition(key_path + " exists without " + crt);
    PkeyPtr key(EVP_EC_gen("P-256"));
    if (!key) return Internal(SslError("cannot generate an EC key"));
    SF_ASSIGN_OR_RETURN(std::string cert_pem, SignedPem(dir, key.get(), "admin:" + name));
    BioPtr b(BIO_new(BIO_s_mem()));
    if (!b || PEM_write_bio_PrivateKey(b.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1)
      return Internal(SslError("cannot encode a key"));
    char* p = nullptr;
    const long n = BIO_get_mem_data(b.get(), &p);
    SF_RETURN_IF_ERROR(WriteNew(key_path, std::string(p, static_cast<size_t>(n)), 0600));
    SF_RETURN_IF_ERROR(WriteNew(crt, cert_pem, 0644));
  }
  return IssueEtcdCertificate(dir, name);
}

Result<net::Credential> LoadAdminCredential(const std::string& dir, const std::string& name) {
  if (!ValidName(name)) return InvalidArgument("credential name '" + name + "' must be 1 to 64 of [A-Za-z0-9._-]");
  net::Credential c;
  c.name = name;
  c.role = net::Role::kSession;  // unused: it is no peer's credential
  const std::string crt = dir + "/" + name + ".crt", key_path = dir + "/" + name + ".key";
  SF_ASSIGN_OR_RETURN(c.ca_pem, ReadFile(dir + "/ca.crt"));
  SF_ASSIGN_OR_RETURN(c.cert_pem, ReadFile(crt));
  SF_ASSIGN_OR_RETURN(c.key_pem, ReadFile(key_path));
  struct stat st {};
  if (::stat(key_path.c_str(), &st) == 0 && (st.st_mode & 077))
    return FailedPrecondition(key_path + " may be read by group or others; chmod 600 it");
  SF_ASSIGN_OR_RETURN(c.etcd_cert_pem, ReadFile(dir + "/" + name + ".etcd.crt"));
  SF_ASSIGN_OR_RETURN(std::string cn, CertificateCommonName(c.cert_pem));
  if (cn != "admin:" + name)
    return InvalidArgument(crt + " is '" + cn + "', not the operator credential admin:" + name);
  SF_ASSIGN_OR_RETURN(X509Ptr cert, ParseCert(c.cert_pem, crt));
  SF_ASSIGN_OR_RETURN(PkeyPtr key, ParseKey(c.key_pem, key_path));
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    return InvalidArgument(SslError(key_path + " is not the key of " + crt));
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
    if (ValidName(name) && Exists(dir + "/" + name + ".key")) out.push_back(name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace cluster
}  // namespace sf
