// Mutual TLS over a kj stream with OpenSSL memory BIOs: the handshake, then
// reads and writes that move many TLS records per event-loop turn.
//
// Why not kj-tls's TlsConnection: it hands OpenSSL one 16 KiB record per
// turn and system call in each direction, which held a 64 MiB transfer to a
// fifth of loopback TCP here (docs/PERFORMANCE_NOTES.md); here a turn reads up to
// 256 KiB of ciphertext and writes up to 1 MiB of plaintext. OpenSSL reads
// ciphertext straight from the buffer the socket read into and writes its
// records into the buffer the next socket write sends (its memory BIOs
// would copy every byte once more each way).
// Thread-safety: a context may be shared; a stream belongs to one event loop.
#pragma once

#include <kj/async-io.h>

#include <memory>
#include <string>

#include "net/credentials.h"
#include "shardflow/status.h"

namespace sf {
namespace net {

// An OpenSSL context for one credential: TLS 1.3, the cluster CA as the only
// trust anchor, peers' certificates required on both sides.
class TlsContext {
 public:
  // InvalidArgument naming the credential when OpenSSL refuses its PEM texts.
  static Result<std::shared_ptr<TlsContext>> Create(const Credential& cred);
  ~TlsContext();
  void* ssl_ctx() const { return ctx_; }  // SSL_CTX*
  // BIO_METHOD*s of the streams' ciphertext buffers (net/tls_stream.cc).
  void* read_method() const { return read_method_; }
  void* write_method() const { return write_method_; }

 private:
  TlsContext() = default;
  void* ctx_ = nullptr;
  void* read_method_ = nullptr;
  void* write_method_ = nullptr;
};

// A stream after its handshake, and the common name and organizational unit
// (a session's namespace: net/credentials.h) its peer's certificate carries.
struct TlsStream {
  kj::Own<kj::AsyncIoStream> stream;
  std::string peer_common_name;
  std::string peer_unit;
};

// Runs the handshake over inner as the server (client = false) or the
// client, which also checks that the server's certificate names
// expected_host. Rejects (kj exception describing OpenSSL's error) when the
// peer's certificate is missing, not signed by the CA, or for another host.
kj::Promise<TlsStream> WrapTls(std::shared_ptr<TlsContext> ctx, kj::Own<kj::AsyncIoStream> inner, bool client,
                               const std::string& expected_host);

}  // namespace net
}  // namespace sf
