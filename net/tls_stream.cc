// TLS 1.3 over buffer BIOs (net/tls_stream.h): OpenSSL encrypts into and
// decrypts from buffers; this file moves the ciphertext in large pieces.
#include "net/tls_stream.h"

#include <kj/debug.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

namespace sf {
namespace net {

namespace {

// Ciphertext read from the socket per turn, and plaintext encrypted per write.
constexpr size_t kReadChunk = size_t{256} << 10;
constexpr size_t kWriteChunk = size_t{1} << 20;
// Plaintext gathered from small pieces into one record: TLS's largest.
constexpr size_t kStageBytes = size_t{16} << 10;

std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no OpenSSL error queued" : out;
}

// Bytes appended without zeroing or per-byte copies (std::vector would do
// one or the other).
struct Bytes {
  std::unique_ptr<kj::byte[]> data;
  size_t size = 0, capacity = 0;
  Bytes() = default;
  Bytes(Bytes&& o) noexcept { *this = std::move(o); }
  Bytes& operator=(Bytes&& o) noexcept {
    data = std::move(o.data);
    size = std::exchange(o.size, 0);
    capacity = std::exchange(o.capacity, 0);
    return *this;
  }
  void Reserve(size_t n) {
    if (n <= capacity) return;
    std::unique_ptr<kj::byte[]> bigger(new kj::byte[n]);
    if (size > 0) std::memcpy(bigger.get(), data.get(), size);
    data = std::move(bigger);
    capacity = n;
  }
  void Append(const void* p, size_t n) {
    if (size + n > capacity) Reserve(std::max(size + n, 2 * capacity));
    std::memcpy(data.get() + size, p, n);
    size += n;
  }
};

// The ciphertext between the socket and OpenSSL, one per stream: the read
// BIO hands out [pos, end) of what the socket read into `in`, the write BIO
// appends to `out`, which the next socket write takes whole.
struct Ciphertext {
  kj::Array<kj::byte> in;
  size_t pos = 0, end = 0;
  Bytes out;
};

int ReadCiphertext(BIO* b, char* data, size_t len, size_t* got) {
  auto* c = static_cast<Ciphertext*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  const size_t n = std::min(len, c->end - c->pos);
  if (n == 0) {
    BIO_set_retry_read(b);  // empty means "wait for more", not end of stream
    return 0;
  }
  std::memcpy(data, c->in.begin() + c->pos, n);
  c->pos += n;
  *got = n;
  return 1;
}

int WriteCiphertext(BIO* b, const char* data, size_t len, size_t* put) {
  auto* c = static_cast<Ciphertext*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  c->out.Append(data, len);
  *put = len;
  return 1;
}

long ReadCtrl(BIO* b, int cmd, long, void*) {
  auto* c = static_cast<Ciphertext*>(BIO_get_data(b));
  if (cmd == BIO_CTRL_PENDING) return static_cast<long>(c->end - c->pos);
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

long WriteCtrl(BIO* b, int cmd, long, void*) {
  auto* c = static_cast<Ciphertext*>(BIO_get_data(b));
  if (cmd == BIO_CTRL_PENDING) return static_cast<long>(c->out.size);
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

int InitBio(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

BIO_METHOD* NewMethod(bool read) {
  BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK,
                               read ? "shardflow ciphertext in" : "shardflow ciphertext out");
  if (!m) return nullptr;
  const bool ok = (read ? BIO_meth_set_read_ex(m, ReadCiphertext) : BIO_meth_set_write_ex(m, WriteCiphertext)) == 1 &&
                  BIO_meth_set_ctrl(m, read ? ReadCtrl : WriteCtrl) == 1 && BIO_meth_set_create(m, InitBio) == 1;
  if (!ok) {
    BIO_meth_free(m);
    return nullptr;
  }
  return m;
}

[[noreturn]] void Fail(const std::string& what, SSL* ssl) {
  std::string why = OpenSslErrors();
  const long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
  if (v != X509_V_OK) why += " (certificate: " + std::string(X509_verify_cert_error_string(v)) + ")";
  kj::throwFatalException(KJ_EXCEPTION(FAILED, what, why));
}

class Stream final : public kj::AsyncIoStream {
 public:
  Stream(std::shared_ptr<TlsContext> ctx, kj::Own<kj::AsyncIoStream> inner)
      : ctx_(std::move(ctx)), inner_(kj::mv(inner)), last_write_(kj::Promise<void>(kj::READY_NOW).fork()) {
    bufs_.in = kj::heapArray<kj::byte>(kReadChunk);
    ssl_ = SSL_new(static_cast<SSL_CTX*>(ctx_->ssl_ctx()));
    if (!ssl_) Fail("SSL_new", nullptr);
    BIO* rbio = BIO_new(static_cast<BIO_METHOD*>(ctx_->read_method()));
    BIO* wbio = BIO_new(static_cast<BIO_METHOD*>(ctx_->write_method()));
    if (!rbio || !wbio) {
      BIO_free(rbio);
      BIO_free(wbio);
      SSL_free(ssl_);
      ssl_ = nullptr;
      Fail("BIO_new", nullptr);
    }
    BIO_set_data(rbio, &bufs_);
    BIO_set_data(wbio, &bufs_);
    SSL_set_bio(ssl_, rbio, wbio);  // ssl_ owns both
    rbio_ = rbio;
    wbio_ = wbio;
  }
  ~Stream() noexcept(false) { SSL_free(ssl_); }

  kj::Promise<void> Handshake(bool client, const std::string& host) {
    if (client) {
      SSL_set_connect_state(ssl_);
      SSL_set_tlsext_host_name(ssl_, host.c_str());
      if (SSL_set1_host(ssl_, host.c_str()) != 1) Fail("setting the expected host", ssl_);
    } else {
      SSL_set_accept_state(ssl_);
    }
    return Step();
  }

  // A field of the peer certificate's subject (nid), "" when absent.
  std::string PeerSubject(int nid) {
    X509* cert = SSL_get1_peer_certificate(ssl_);
    if (!cert) return "";
    char text[256] = {0};
    X509_NAME_get_text_by_NID(X509_get_subject_name(cert), nid, text, sizeof text);
    X509_free(cert);
    return text;
  }

  kj::Promise<size_t> tryRead(void* buffer, size_t minBytes, size_t maxBytes) override {
    return ReadLoop(static_cast<kj::byte*>(buffer), minBytes, maxBytes, 0);
  }

  kj::Promise<void> write(const void* buffer, size_t size) override {
    auto pieces = kj::heapArray<kj::ArrayPtr<const kj::byte>>(1);
    pieces[0] = kj::ArrayPtr<const kj::byte>(static_cast<const kj::byte*>(buffer), size);
    return WriteFrom(kj::mv(pieces), 0, 0);
  }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    return WriteFrom(kj::heapArray(pieces), 0, 0);
  }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  // The framing above (Cap'n Proto) detects a truncated stream, so no close_notify is needed.
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }

 private:
  // One handshake step: send what OpenSSL produced, read what it wants.
  kj::Promise<void> Step() {
    ERR_clear_error();
    const int r = SSL_do_handshake(ssl_);
    if (r == 1) return Flush();
    const int err = SSL_get_error(ssl_, r);
    if (err != SSL_ERROR_WANT_READ && err != SSL_ERROR_WANT_WRITE) Fail("TLS handshake", ssl_);
    return Flush().then([this] { return Fill(); }).then([this](bool more) {
      if (!more) kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "peer closed during the TLS handshake"));
      return Step();
    });
  }

  // Reads ciphertext for OpenSSL (after what it has not taken yet); false
  // at the end of the stream.
  kj::Promise<bool> Fill() {
    Ciphertext& c = bufs_;
    if (c.pos > 0) {
      std::memmove(c.in.begin(), c.in.begin() + c.pos, c.end - c.pos);
      c.end -= c.pos;
      c.pos = 0;
    }
    if (c.end == c.in.size()) return true;  // OpenSSL has a full buffer to take first
    return inner_->tryRead(c.in.begin() + c.end, 1, c.in.size() - c.end).then([this](size_t n) {
      bufs_.end += n;
      return n > 0;
    });
  }

  // Sends whatever OpenSSL has written, after any write already under way.
  kj::Promise<void> Flush() {
    if (bufs_.out.size == 0) return last_write_.addBranch();
    Bytes out = std::move(bufs_.out);
    // The next records go to a buffer of their own: this one is under way.
    bufs_.out = std::move(spare_);
    bufs_.out.size = 0;
    auto send = [this](Bytes out) {
      const kj::byte* data = out.data.get();
      const size_t size = out.size;
      return inner_->write(data, size).then([this, out = std::move(out)]() mutable {
        if (out.capacity > spare_.capacity) spare_ = std::move(out);
      });
    };
    // With no write under way the socket write is tried now, in this turn,
    // not in a later one behind the idle fork's continuation (evalNow: a
    // failing write rejects, as it did inside the continuation).
    kj::Promise<void> p = writes_under_way_ == 0
                              ? kj::evalNow([&] { return send(std::move(out)); })
                              : last_write_.addBranch().then([send, out = std::move(out)]() mutable {
                                  return send(std::move(out));
                                });
    ++writes_under_way_;
    last_write_ = p.then([this] { --writes_under_way_; },
                         [this](kj::Exception&& e) {
                           --writes_under_way_;
                           kj::throwFatalException(kj::mv(e));
                         })
                      .fork();
    return last_write_.addBranch();
  }

  kj::Promise<size_t> ReadLoop(kj::byte* buf, size_t min, size_t max, size_t got) {
    for (;;) {
      if (got >= max || (got >= min && got > 0 && SSL_pending(ssl_) == 0 && BIO_ctrl_pending(rbio_) == 0))
        return got;
      ERR_clear_error();
      const int n = SSL_read(ssl_, buf + got, static_cast<int>(std::min<size_t>(max - got, 1 << 30)));
      if (n > 0) {
        got += static_cast<size_t>(n);
        continue;
      }
      const int err = SSL_get_error(ssl_, n);
      if (err == SSL_ERROR_ZERO_RETURN) return got;  // the peer's close_notify
      if (err != SSL_ERROR_WANT_READ) Fail("TLS read", ssl_);
      if (got >= min) return got;
      // A post-handshake message (a key update) may have produced output.
      if (BIO_ctrl_pending(wbio_) > 0) Flush().detach([](kj::Exception&&) {});
      return Fill().then([this, buf, min, max, got](bool more) -> kj::Promise<size_t> {
        if (!more) return got;
        return ReadLoop(buf, min, max, got);
      });
    }
  }

  // Encrypts pieces from (i, offset) on, a chunk per write. Small pieces
  // share a record with their neighbours: Cap'n Proto writes a message as
  // its segment table and its segments, and a record of its own for each
  // cost a small message twice the AES-GCM passes, calls and bytes.
  kj::Promise<void> WriteFrom(kj::Array<kj::ArrayPtr<const kj::byte>> pieces, size_t i, size_t offset) {
    size_t left = 0;
    for (size_t j = i; j < pieces.size() && left < kWriteChunk; ++j) left += pieces[j].size() - (j == i ? offset : 0);
    // Room for this turn's records at once: growing the buffer record by
    // record would copy the ciphertext again (a record adds 22 bytes per 16 KiB).
    if (left >= kReadChunk) bufs_.out.Reserve(bufs_.out.size + std::min(left, kWriteChunk) + (kWriteChunk >> 8));
    size_t done = 0, staged = 0;
    auto encrypt = [this](const kj::byte* p, size_t n) {
      ERR_clear_error();
      if (SSL_write(ssl_, p, static_cast<int>(n)) != static_cast<int>(n)) Fail("TLS write", ssl_);
    };
    while (i < pieces.size() && done < kWriteChunk) {
      auto p = pieces[i];
      const size_t take = std::min(p.size() - offset, kWriteChunk - done);
      if (take > 0 && take < kStageBytes && staged + take <= kStageBytes) {
        std::memcpy(stage_ + staged, p.begin() + offset, take);
        staged += take;
      } else if (take > 0) {
        if (staged > 0) encrypt(stage_, std::exchange(staged, 0));
        if (take < kStageBytes) {
          std::memcpy(stage_, p.begin() + offset, take);
          staged = take;
        } else {
          encrypt(p.begin() + offset, take);
        }
      }
      done += take;
      offset += take;
      if (offset == p.size()) {
        ++i;
        offset = 0;
      }
    }
    if (staged > 0) encrypt(stage_, staged);
    auto sent = Flush();
    if (i >= pieces.size()) return sent;
    return sent.then([this, pieces = kj::mv(pieces), i, offset]() mutable {
      return WriteFrom(kj::mv(pieces), i, offset);
    });
  }

  std::shared_ptr<TlsContext> ctx_;
  kj::Own<kj::AsyncIoStream> inner_;
  Ciphertext bufs_;                // the BIOs' data: outlives ssl_ (destroyed after it)
  Bytes spare_;                    // a sent write buffer, kept for its capacity
  kj::ForkedPromise<void> last_write_;
  int writes_under_way_ = 0;       // socket writes started and not done (Flush)
  kj::byte stage_[kStageBytes];    // small pieces gathered into one record (WriteFrom)
  SSL* ssl_ = nullptr;
  BIO* rbio_ = nullptr;  // owned by ssl_
  BIO* wbio_ = nullptr;  // owned by ssl_
};

}  // namespace

Result<std::shared_ptr<TlsContext>> TlsContext::Create(const Credential& cred) {
  std::shared_ptr<TlsContext> c(new TlsContext());
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  if (!ctx) return Internal("SSL_CTX_new: " + OpenSslErrors());
  c->ctx_ = ctx;
  c->read_method_ = NewMethod(true);
  c->write_method_ = NewMethod(false);
  if (!c->read_method_ || !c->write_method_) return Internal("BIO_meth_new: " + OpenSslErrors());
  auto bad = [&](const std::string& what) {
    return InvalidArgument("TLS credential '" + cred.name + "': " + what + ": " + OpenSslErrors());
  };
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  // AES-128-GCM first: the fastest suite with AES-NI, and strong.
  SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
  SSL_CTX_set_num_tickets(ctx, 0);  // no resumption: no post-handshake tickets to send
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  auto load_cert = [](const std::string& pem) -> X509* {
    BIO* b = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
    X509* x = b ? PEM_read_bio_X509(b, nullptr, nullptr, nullptr) : nullptr;
    BIO_free(b);
    return x;
  };
  X509* ca = load_cert(cred.ca_pem);
  if (!ca) return bad("the CA certificate");
  const bool ca_ok = X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca) == 1;
  X509_free(ca);
  if (!ca_ok) return bad("trusting the CA");
  X509* cert = load_cert(cred.cert_pem);
  if (!cert) return bad("the certificate");
  const bool cert_ok = SSL_CTX_use_certificate(ctx, cert) == 1;
  X509_free(cert);
  if (!cert_ok) return bad("using the certificate");
  BIO* kb = BIO_new_mem_buf(cred.key_pem.data(), static_cast<int>(cred.key_pem.size()));
  EVP_PKEY* key = kb ? PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr) : nullptr;
  BIO_free(kb);
  if (!key) return bad("the private key");
  const bool key_ok = SSL_CTX_use_PrivateKey(ctx, key) == 1 && SSL_CTX_check_private_key(ctx) == 1;
  EVP_PKEY_free(key);
  if (!key_ok) return bad("the private key does not match the certificate");
  return c;
}

TlsContext::~TlsContext() {
  SSL_CTX_free(static_cast<SSL_CTX*>(ctx_));
  BIO_meth_free(static_cast<BIO_METHOD*>(read_method_));
  BIO_meth_free(static_cast<BIO_METHOD*>(write_method_));
}

kj::Promise<TlsStream> WrapTls(std::shared_ptr<TlsContext> ctx, kj::Own<kj::AsyncIoStream> inner, bool client,
                               const std::string& expected_host) {
  // evalNow: OpenSSL refusing the stream or its host becomes a rejected
  // promise, never an exception through the caller.
  return kj::evalNow([&] {
    auto s = kj::heap<Stream>(std::move(ctx), kj::mv(inner));
    Stream* raw = s.get();
    return raw->Handshake(client, expected_host).then([s = kj::mv(s)]() mutable {
    TlsStream out;
    out.peer_common_name = s->PeerSubject(NID_commonName);
    out.peer_unit = s->PeerSubject(NID_organizationalUnitName);
    out.stream = kj::mv(s);
    return out;
  });
  });
}

}  // namespace net
}  // namespace sf
