#include "net/openssl_files.h"

#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace sf {
namespace net {

namespace {

struct BioFree {
  void operator()(BIO* p) const { BIO_free(p); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

// The PEM text a writer put into a memory BIO; Internal naming `what` otherwise.
template <typename Write>
Result<std::string> PemOf(Write write, const char* what) {
  BioPtr b(BIO_new(BIO_s_mem()));
  if (!b || write(b.get()) != 1) return Internal(OpenSslError(std::string("cannot encode ") + what));
  char* p = nullptr;
  const long n = BIO_get_mem_data(b.get(), &p);
  return std::string(p, static_cast<size_t>(n));
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

// Adds field=value to a certificate's name; InvalidArgument when it does not fit.
Status AddName(X509_NAME* name, const char* field, const std::string& value, const std::string& what) {
  if (X509_NAME_add_entry_by_txt(name, field, MBSTRING_ASC, reinterpret_cast<const unsigned char*>(value.c_str()),
                                 -1, -1, 0) != 1)
    return InvalidArgument(OpenSslError(what + " '" + value + "' does not fit a certificate (at most 64 bytes)"));
  return Status::OK();
}

}  // namespace

std::string OpenSslError(const std::string& what) {
  std::string out = what;
  const unsigned long e = ERR_get_error();
  if (e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    out += ": ";
    out += buf;
  }
  ERR_clear_error();
  return out;
}

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Result<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Status WriteNewFile(const std::string& path, const std::string& text, mode_t mode) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return Unavailable("cannot write " + path + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 || done != text.size()) return Unavailable("cannot write " + path);
  ::chmod(path.c_str(), mode);  // the umask may have narrowed it; never widened past mode
  return Status::OK();
}

Result<PkeyPtr> NewEcKey() {
  PkeyPtr k(EVP_EC_gen("P-256"));
  if (!k) return Internal(OpenSslError("cannot generate an EC key"));
  return k;
}

Result<std::string> KeyPem(EVP_PKEY* key) {
  return PemOf([key](BIO* b) { return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr); },
               "a key");
}

Result<std::string> CertPem(X509* cert) {
  return PemOf([cert](BIO* b) { return PEM_write_bio_X509(b, cert); }, "a certificate");
}

Result<X509Ptr> ParseCert(const std::string& pem, const std::string& what) {
  BioPtr b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509Ptr c(b ? PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!c) return InvalidArgument(OpenSslError(what + " is not a PEM certificate"));
  return c;
}

Result<PkeyPtr> ParseKey(const std::string& pem, const std::string& what) {
  BioPtr b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  PkeyPtr k(b ? PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr) : nullptr);
  if (!k) return InvalidArgument(OpenSslError(what + " is not a PEM private key"));
  return k;
}

Result<X509Ptr> MakeCert(EVP_PKEY* key, const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, bool ca,
                         const std::vector<std::string>& dns, const std::vector<std::string>& ips,
                         const std::string& unit) {
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
  X509_gmtime_adj(X509_getm_notAfter(c.get()), kCertValidSeconds);
  X509_set_pubkey(c.get(), key);
  X509_NAME* name = X509_get_subject_name(c.get());
  SF_RETURN_IF_ERROR(AddName(name, "O", "shardflow", "organization"));
  if (!unit.empty()) SF_RETURN_IF_ERROR(AddName(name, "OU", unit, "organizational unit"));
  // X.509 holds common names of at most 64 bytes; without this check a long
  // name made a certificate with no common name, refused only when loaded.
  if (!cn.empty()) SF_RETURN_IF_ERROR(AddName(name, "CN", cn, "common name"));
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

}  // namespace net
}  // namespace sf
