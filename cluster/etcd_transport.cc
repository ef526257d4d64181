// EtcdTransport: kj-http over kj-tls on one event-loop thread.
//
// Everything kj lives on the loop thread (Loop, the connections, the
// streams' state); other threads reach it only through executeSync, whose
// work always resolves to a Reply or LineResult (errors as values) so no kj
// exception crosses back. The order of members and attachments below is the
// order of destruction kj needs: a response body is dropped before the
// HttpClient it came from, the HttpClient before its TLS stream.
#include "cluster/etcd_transport.h"

#include <kj/async-io.h>
#include <kj/compat/http.h>
#include <kj/compat/tls.h>
#include <kj/debug.h>

#include <atomic>
#include <future>
#include <set>
#include <thread>

namespace sf {
namespace cluster {

namespace {

// Idle connections kept per client: a client makes few concurrent calls.
constexpr size_t kMaxIdleConnections = 4;
constexpr size_t kReadChunk = 64 * 1024;

std::string Why(const kj::Exception& e) { return std::string(e.getDescription().cStr()); }

Result<std::vector<std::string>> ParseEndpoints(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string ep = list.substr(start, comma - start);
    ep.erase(0, ep.find_first_not_of(" \t"));
    ep.erase(ep.find_last_not_of(" \t") + 1);
    if (ep.find("://") != std::string::npos)
      return InvalidArgument("etcd endpoint '" + ep + "' must be host:port, without a scheme");
    const size_t colon = ep.rfind(':');
    const std::string port = colon == std::string::npos ? "" : ep.substr(colon + 1);
    if (colon == 0 || port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) == 0 || std::stoi(port) > 65535)
      return InvalidArgument("etcd endpoint '" + ep + "' is not host:port");
    out.push_back(ep);
    start = comma + 1;
  }
  if (out.empty()) return InvalidArgument("no etcd endpoints");
  return out;
}

struct Conn {
  std::string endpoint;
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<kj::HttpClient> http;  // over *stream, so declared (and destroyed) after it
};

struct ConnResult {
  kj::Own<Conn> conn;  // null: status says why
  Status status;
};

// What the loop hands back: the reply's bytes, or why there are none.
struct Reply {
  Status status;
  int http_status = 0;
  std::string body;
  std::string endpoint;
};

struct LineResult {
  Status status;
  std::string line;
};

struct Request {
  std::string op;
  kj::HttpMethod method = kj::HttpMethod::POST;
  std::string path;
  std::string body;
  EtcdTransport::StreamState* stream = nullptr;  // set: keep the body open as this stream
  bool idempotent = true;                        // may be sent again if it may have reached etcd
  std::string token;                             // etcd's auth token, sent as Authorization ("": none)
};

// Reads a body to its end, refusing more than cap bytes.
struct BodyReader {
  kj::Own<kj::AsyncInputStream> in;
  size_t cap;
  std::string text;
  bool too_big = false;
  kj::Array<kj::byte> chunk = kj::heapArray<kj::byte>(kReadChunk);

  kj::Promise<void> Run() {
    return in->tryRead(chunk.begin(), 1, chunk.size()).then([this](size_t n) -> kj::Promise<void> {
      if (n == 0) return kj::READY_NOW;
      if (text.size() + n > cap) {
        too_big = true;
        return kj::READY_NOW;
      }
      text.append(reinterpret_cast<const char*>(chunk.begin()), n);
      return Run();
    });
  }
};

}  // namespace

struct EtcdTransport::StreamState {
  kj::Own<Conn> conn;
  kj::Own<kj::AsyncInputStream> body;  // from conn->http: destroyed before it
  std::string buffer;
  size_t scanned = 0;  // buffer[0, scanned) holds no newline
  kj::Array<kj::byte> chunk = kj::heapArray<kj::byte>(kReadChunk);
  kj::Canceler canceler;
  bool canceled = false;
  bool eof = false;
};

struct EtcdTransport::Loop {
  Loop(kj::AsyncIoContext& io, const EtcdClientOptions& o, std::vector<std::string> eps)
      : timer(io.provider->getTimer()),
        network(io.provider->getNetwork()),
        options(o),
        endpoints(std::move(eps)),
        server_name(kj::heapString(o.server_name.c_str())) {
    if (!o.credential) return;
    kj::TlsContext::Options tls_options;
    tls_options.useSystemTrustStore = false;
    ca = kj::heap<kj::TlsCertificate>(kj::StringPtr(o.credential->ca_pem.c_str()));
    // The certificate without a common name when there is one: etcd's
    // gateway refuses any other once its authentication is on.
    const std::string& cert =
        o.credential->etcd_cert_pem.empty() ? o.credential->cert_pem : o.credential->etcd_cert_pem;
    keypair = kj::heap<kj::TlsKeypair>(kj::TlsKeypair{kj::TlsPrivateKey(kj::StringPtr(o.credential->key_pem.c_str())),
                                                      kj::TlsCertificate(kj::StringPtr(cert.c_str()))});
    tls_options.trustedCertificates = kj::arrayPtr(ca.get(), 1);
    tls_options.defaultKeypair = *keypair;
    tls_options.minVersion = kj::TlsVersion::TLS_1_2;
    tls = kj::heap<kj::TlsContext>(kj::mv(tls_options));
  }

  kj::Promise<ConnResult> Connect(size_t i) {
    const std::string ep = endpoints[i];
    trying = i;
    return network.parseAddress(kj::heapString(ep.c_str()))
        .then([](kj::Own<kj::NetworkAddress> addr) {
          auto connected = addr->connect();
          return connected.attach(kj::mv(addr));
        })
        .then(
            [this, ep](kj::Own<kj::AsyncIoStream> raw) -> kj::Promise<ConnResult> {
              if (tls.get() == nullptr) return NewConn(ep, kj::mv(raw));
              return tls->wrapClient(kj::mv(raw), server_name)
                  .then([this, ep](kj::Own<kj::AsyncIoStream> s) { return NewConn(ep, kj::mv(s)); },
                        [ep](kj::Exception&& e) {
                          return ConnResult{kj::Own<Conn>(), PermissionDenied(ep + ": TLS handshake failed: " + Why(e))};
                        });
            },
            [ep](kj::Exception&& e) -> kj::Promise<ConnResult> {
              return ConnResult{kj::Own<Conn>(), Unavailable(ep + ": cannot connect: " + Why(e))};
            });
  }

  ConnResult NewConn(const std::string& ep, kj::Own<kj::AsyncIoStream> stream) {
    auto c = kj::heap<Conn>();
    c->endpoint = ep;
    c->stream = kj::mv(stream);
    c->http = kj::newHttpClient(table, *c->stream);
    return ConnResult{kj::mv(c), Status::OK()};
  }

  // Tries every endpoint once from base on; the first that connects becomes current.
  kj::Promise<ConnResult> ConnectAny(size_t base, size_t attempt, std::string errors, bool tls_refused) {
    if (attempt == endpoints.size()) {
      const std::string msg = "cannot reach etcd: " + errors;
      return ConnResult{kj::Own<Conn>(), tls_refused ? PermissionDenied(msg) : Unavailable(msg)};
    }
    const size_t i = (base + attempt) % endpoints.size();
    return Connect(i).then([this, i, base, attempt, errors, tls_refused](ConnResult r) mutable -> kj::Promise<ConnResult> {
      if (r.conn.get() != nullptr) {
        current = i;
        return kj::mv(r);
      }
      errors += (errors.empty() ? "" : "; ") + r.status.message();
      return ConnectAny(base, attempt + 1, errors, tls_refused || r.status.code() == Code::kPermissionDenied);
    });
  }

  kj::Promise<Reply> Send(std::shared_ptr<Request> req, bool may_retry) {
    if (closed) return Reply{Aborted("the client is closed")};
    kj::Own<Conn> idle_conn;
    if (!idle.empty()) {
      idle_conn = kj::mv(idle.back());
      idle.pop_back();
    }
    const bool reused = idle_conn.get() != nullptr;
    kj::Promise<ConnResult> got = reused ? kj::Promise<ConnResult>(ConnResult{kj::mv(idle_conn), Status::OK()})
                                         : ConnectAny(current, 0, "", false);
    return got.then([this, req, reused, may_retry](ConnResult r) mutable -> kj::Promise<Reply> {
      if (r.conn.get() == nullptr) return Reply{r.status};
      return Exchange(req, kj::mv(r.conn), reused && may_retry);
    });
  }

  kj::Promise<Reply> Exchange(std::shared_ptr<Request> req, kj::Own<Conn> conn, bool retry_if_dead) {
    const std::string ep = conn->endpoint;
    kj::HttpHeaders headers(table);
    headers.set(kj::HttpHeaderId::HOST, server_name);
    uint64_t size = 0;
    if (req->method == kj::HttpMethod::POST) {
      headers.set(kj::HttpHeaderId::CONTENT_TYPE, "application/json");
      size = req->body.size();
    }
    if (!req->token.empty()) headers.add(kj::StringPtr("Authorization"), kj::StringPtr(req->token.c_str()));
    kj::Maybe<kj::HttpClient::Request> made;
    try {
      made = conn->http->request(req->method, kj::StringPtr(req->path.c_str()), headers, size);
    } catch (const kj::Exception& e) {
      // kj knows a kept connection that etcd closed: open a new one.
      if (retry_if_dead) return Send(req, false);
      return Reply{Unavailable(ep + ": " + Why(e))};
    }
    kj::HttpClient::Request http = kj::mv(KJ_ASSERT_NONNULL(made));
    kj::Promise<void> sent = kj::READY_NOW;
    if (http.body.get() != nullptr && size > 0) {
      auto write = http.body->write(req->body.data(), req->body.size());
      sent = write.attach(kj::mv(http.body));
    }
    http.body = nullptr;  // a request without a body is complete once its stream is dropped
    auto response = sent.then([r = kj::mv(http.response)]() mutable { return kj::mv(r); });
    return response.then(
        [this, req, ep, conn = kj::mv(conn)](kj::HttpClient::Response&& resp) mutable -> kj::Promise<Reply> {
          const int status = resp.statusCode;
          if (req->stream != nullptr && status == 200) {
            req->stream->conn = kj::mv(conn);
            req->stream->body = kj::mv(resp.body);
            return Reply{Status::OK(), status, "", ep};
          }
          KJ_IF_MAYBE(length, resp.body->tryGetLength()) {
            if (*length > options.max_response_bytes)
              return Reply{ResourceExhausted(ep + ": a reply of " + std::to_string(*length) + " bytes, over the " +
                                             std::to_string(options.max_response_bytes) + " allowed")};
          }
          // kj drops a continuation's dependency before running it, so the
          // continuation owns the reader (and the body in it); Reading keeps
          // the body's destruction before its connection's.
          struct Reading {
            kj::Own<Conn> conn;
            kj::Own<BodyReader> reader;
          };
          Reading reading{kj::mv(conn), kj::heap<BodyReader>(BodyReader{kj::mv(resp.body), options.max_response_bytes})};
          auto read = reading.reader->Run();
          return read.then([this, status, ep, reading = kj::mv(reading)]() mutable -> Reply {
            if (reading.reader->too_big)
              return Reply{ResourceExhausted(ep + ": a reply over the " + std::to_string(options.max_response_bytes) +
                                             " bytes allowed")};
            std::string text = kj::mv(reading.reader->text);
            reading.reader = nullptr;  // the body read to its end: the connection may serve the next request
            if (!closed && idle.size() < kMaxIdleConnections) idle.push_back(kj::mv(reading.conn));
            return Reply{Status::OK(), status, kj::mv(text), ep};
          });
        },
        [this, req, ep, retry_if_dead](kj::Exception&& e) -> kj::Promise<Reply> {
          // A kept connection that etcd closed while idle (a restart) fails
          // before any reply. Most likely the request never reached etcd,
          // but it may have: only an idempotent one is sent again.
          if (retry_if_dead && req->idempotent && e.getType() == kj::Exception::Type::DISCONNECTED)
            return Send(req, false);
          if (e.getType() == kj::Exception::Type::DISCONNECTED) {
            // What a TLS server does to a client it refuses once the
            // handshake is over (TLS 1.3), or to plaintext: it hangs up.
            return Reply{Unavailable(ep + ": etcd closed the connection before answering (" + Why(e) + "): " +
                                     (tls.get() != nullptr
                                          ? "it may refuse this client's certificate (not signed by its CA), or it stopped"
                                          : "it may serve TLS only, or it stopped"))};
          }
          return Reply{Unavailable(ep + ": the connection failed: " + Why(e))};
        });
  }

  kj::Promise<LineResult> ReadLine(StreamState& s) {
    for (;;) {
      const size_t nl = s.buffer.find('\n', s.scanned);
      if (nl == std::string::npos) break;
      std::string line = s.buffer.substr(0, nl);
      s.buffer.erase(0, nl + 1);
      s.scanned = 0;
      if (line.find_first_not_of(" \t\r") != std::string::npos) return LineResult{Status::OK(), std::move(line)};
    }
    s.scanned = s.buffer.size();
    if (s.buffer.size() > options.max_response_bytes)
      return LineResult{ResourceExhausted("a stream line over the " + std::to_string(options.max_response_bytes) +
                                          " bytes allowed")};
    if (s.eof) return LineResult{Unavailable("etcd ended the stream")};
    return s.body->tryRead(s.chunk.begin(), 1, s.chunk.size()).then([this, &s](size_t n) -> kj::Promise<LineResult> {
      if (n == 0) {
        // The last line may lack its newline.
        s.eof = true;
        std::string last = std::move(s.buffer);
        s.buffer.clear();
        s.scanned = 0;
        if (last.find_first_not_of(" \t\r") == std::string::npos)
          return LineResult{Unavailable("etcd ended the stream")};
        return LineResult{Status::OK(), std::move(last)};
      }
      s.buffer.append(reinterpret_cast<const char*>(s.chunk.begin()), n);
      return ReadLine(s);
    });
  }

  void Close() {
    closed = true;
    for (StreamState* s : streams) {
      s->canceled = true;
      s->canceler.cancel("the client is closed");
    }
    idle.clear();
  }

  kj::Timer& timer;
  kj::Network& network;
  const EtcdClientOptions& options;
  const std::vector<std::string> endpoints;
  size_t current = 0;  // the endpoint that connected last
  size_t trying = 0;   // the endpoint connected to last (for a deadline's message)
  const kj::String server_name;
  kj::HttpHeaderTable table;
  kj::Own<kj::TlsCertificate> ca;
  kj::Own<kj::TlsKeypair> keypair;
  kj::Own<kj::TlsContext> tls;  // null: plaintext
  std::vector<kj::Own<Conn>> idle;
  std::set<StreamState*> streams;
  bool closed = false;
};

struct EtcdTransport::Thread {
  std::thread thread;
  kj::Own<const kj::Executor> executor;
  Loop* loop = nullptr;  // lives on the thread's stack; touched only on it
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> stop;
  std::atomic<bool> closed{false};
};

namespace {

// Runs f on the loop thread and waits for its result; a failure of the loop
// itself (its thread gone) comes back as fail(why).
template <typename F, typename Fail>
auto OnLoop(const kj::Executor& executor, F&& f, Fail&& fail) -> decltype(fail(std::string())) {
  try {
    return executor.executeSync(std::forward<F>(f));
  } catch (const kj::Exception& e) {
    return fail("the client's I/O thread failed: " + Why(e));
  }
}

// Runs req with a deadline; the reply or why there is none.
Reply Run(const kj::Executor& executor, EtcdTransport::Loop& loop, std::shared_ptr<Request> req,
          EtcdClock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - EtcdClock::now());
  if (left.count() <= 0) return Reply{DeadlineExceeded("no time left for the call")};
  return OnLoop(
      executor,
      [&]() -> kj::Promise<Reply> {
        auto timeout = loop.timer.afterDelay(left.count() * kj::MILLISECONDS).then([&loop, left]() {
          return Reply{DeadlineExceeded(loop.endpoints[loop.trying] + ": no answer within " +
                                        std::to_string(left.count()) + " ms")};
        });
        // evalNow: a kj call that throws at once (a malformed address) fails this call only.
        auto work = kj::evalNow([&] { return loop.Send(req, true); })
                        .catch_([](kj::Exception&& e) { return Reply{Unavailable(Why(e))}; })
                        .exclusiveJoin(kj::mv(timeout));
        if (req->stream == nullptr) return work;
        EtcdTransport::StreamState& s = *req->stream;
        if (s.canceled) return Reply{Aborted("canceled")};
        return s.canceler.wrap(kj::mv(work)).catch_([&s](kj::Exception&& e) {
          return Reply{s.canceled ? Aborted("canceled") : Unavailable(Why(e))};
        });
      },
      [](const std::string& why) { return Reply{Unavailable(why)}; });
}

// OK for a reply of 200; why not otherwise, naming op and the endpoint.
Status CheckReply(const std::string& op, const Reply& reply) {
  if (!reply.status.ok()) return reply.status.WithPrefix("etcd: " + op);
  if (reply.http_status == 400 && reply.body.find("CommonName of client") != std::string::npos)
    return PermissionDenied("etcd " + reply.endpoint + ": " + op +
                            ": etcd's authentication is on and its gateway refuses a client certificate with a "
                            "common name: this credential has no NAME.etcd.crt (run `shardflow cluster auth` where "
                            "the CA key is, and copy the file)");
  if (reply.http_status != 200)
    return GatewayError(reply.http_status, reply.body).WithPrefix("etcd " + reply.endpoint + ": " + op);
  return Status::OK();
}

Result<Json> Interpret(const std::string& op, const Reply& reply) {
  SF_RETURN_IF_ERROR(CheckReply(op, reply));
  const std::string where = "etcd " + reply.endpoint + ": " + op;
  Json j;
  try {
    j = Json::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  } catch (const std::exception& e) {
    return DataLoss(where + ": the reply is not JSON: " + e.what());
  }
  if (!j.is_object())
    return DataLoss(where + ": the reply is not a JSON object (" + std::to_string(reply.body.size()) + " bytes)");
  return j;
}

}  // namespace

EtcdTransport::EtcdTransport(EtcdClientOptions options)
    : options_(std::move(options)), thread_(std::make_unique<Thread>()) {}

Result<std::shared_ptr<EtcdTransport>> EtcdTransport::Create(const EtcdClientOptions& options) {
  SF_ASSIGN_OR_RETURN(std::vector<std::string> endpoints, ParseEndpoints(options.endpoints));
  if (!options.credential && !options.plaintext_for_tests)
    return InvalidArgument("etcd client: a credential is required (plaintext is for tests only)");
  if (options.request_timeout.count() <= 0 || options.retry_interval.count() <= 0 || options.max_response_bytes == 0)
    return InvalidArgument("etcd client: request_timeout, retry_interval and max_response_bytes must be positive");
  std::shared_ptr<EtcdTransport> t(new EtcdTransport(options));
  std::promise<Status> ready;
  Thread* th = t->thread_.get();
  const EtcdClientOptions* o = &t->options_;
  th->thread = std::thread([th, o, endpoints, &ready] {
    bool told = false;
    try {
      kj::AsyncIoContext io = kj::setupAsyncIo();
      Loop loop(io, *o, endpoints);
      auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
      th->stop = kj::mv(paf.fulfiller);
      th->executor = kj::getCurrentThreadExecutor().addRef();
      th->loop = &loop;
      told = true;
      ready.set_value(Status::OK());
      paf.promise.wait(io.waitScope);
      th->loop = nullptr;
    } catch (const kj::Exception& e) {
      if (!told) ready.set_value(InvalidArgument("etcd client: cannot set up TLS: " + Why(e)));
    }
  });
  Status s = ready.get_future().get();
  if (!s.ok()) {
    th->thread.join();
    return s;
  }
  return t;
}

EtcdTransport::~EtcdTransport() {
  if (!thread_->thread.joinable()) return;
  if (thread_->stop.get() != nullptr) thread_->stop->fulfill();
  thread_->thread.join();
}

bool EtcdTransport::closed() const { return thread_->closed.load(); }

void EtcdTransport::Close() {
  if (thread_->closed.exchange(true)) return;
  Loop& loop = *thread_->loop;
  OnLoop(
      *thread_->executor, [&] { loop.Close(); }, [](const std::string&) {});
}

Result<Json> EtcdTransport::Send(const std::string& op, const std::string& path, const Json& request,
                                 EtcdClock::time_point deadline, bool idempotent, const std::string& token) {
  if (closed()) return Aborted("etcd: " + op + ": the client is closed");
  auto req = std::make_shared<Request>();
  req->op = op;
  req->idempotent = idempotent;
  req->path = path;
  req->token = token;
  if (request.is_null()) {
    req->method = kj::HttpMethod::GET;
  } else {
    req->body = request.dump();
  }
  return Interpret(op, Run(*thread_->executor, *thread_->loop, req, deadline));
}

EtcdStream::EtcdStream(std::shared_ptr<EtcdTransport> transport) : transport_(std::move(transport)) {
  EtcdTransport::Loop& loop = *transport_->thread_->loop;
  state_ = OnLoop(
      *transport_->thread_->executor,
      [&] {
        auto* s = new EtcdTransport::StreamState;
        s->canceled = loop.closed;
        loop.streams.insert(s);
        return s;
      },
      [](const std::string&) -> EtcdTransport::StreamState* { return nullptr; });
}

EtcdStream::~EtcdStream() {
  if (state_ == nullptr) return;
  EtcdTransport::Loop& loop = *transport_->thread_->loop;
  EtcdTransport::StreamState* s = state_;
  OnLoop(
      *transport_->thread_->executor,
      [&] {
        loop.streams.erase(s);
        delete s;
      },
      [](const std::string&) {});
}

Status EtcdStream::Open(const std::string& op, const std::string& path, const Json& request,
                        EtcdClock::time_point deadline) {
  if (state_ == nullptr) return Unavailable("etcd: " + op + ": the client's I/O thread is gone");
  auto req = std::make_shared<Request>();
  req->op = op;
  req->path = path;
  req->body = request.dump();
  req->stream = state_;
  SF_ASSIGN_OR_RETURN(req->token, transport_->Token(deadline));
  Reply reply = Run(*transport_->thread_->executor, *transport_->thread_->loop, req, deadline);
  if (EtcdNeedsLogin(CheckReply(op, reply))) {
    const std::string stale = req->token;
    SF_ASSIGN_OR_RETURN(req->token, transport_->Token(deadline, &stale));
    reply = Run(*transport_->thread_->executor, *transport_->thread_->loop, req, deadline);
  }
  token_ = req->token;
  what_ = "etcd " + (reply.endpoint.empty() ? transport_->options().endpoints : reply.endpoint) + ": " + op;
  return CheckReply(op, reply);
}

Result<Json> EtcdStream::Next(EtcdClock::time_point deadline) {
  if (state_ == nullptr) return Unavailable("etcd stream: the client's I/O thread is gone");
  EtcdTransport::Loop& loop = *transport_->thread_->loop;
  EtcdTransport::StreamState* s = state_;
  const bool timed = deadline != EtcdClock::time_point::max();
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - EtcdClock::now());
  LineResult r = OnLoop(
      *transport_->thread_->executor,
      [&]() -> kj::Promise<LineResult> {
        if (s->canceled) return LineResult{Aborted("canceled")};
        if (s->body.get() == nullptr) return LineResult{FailedPrecondition("the stream is not open")};
        auto line = loop.ReadLine(*s);
        if (timed) {
          line = line.exclusiveJoin(loop.timer.afterDelay(std::max<int64_t>(left.count(), 0) * kj::MILLISECONDS)
                                        .then([left] {
                                          return LineResult{DeadlineExceeded("no line within " +
                                                                             std::to_string(left.count()) + " ms")};
                                        }));
        }
        return s->canceler.wrap(kj::mv(line)).catch_([s](kj::Exception&& e) {
          return LineResult{s->canceled ? Aborted("canceled") : Unavailable("the stream broke: " + Why(e))};
        });
      },
      [](const std::string& why) { return LineResult{Unavailable(why)}; });
  if (!r.status.ok()) return r.status.WithPrefix(what_);
  Json j;
  try {
    j = Json::parse(r.line, nullptr, /*allow_exceptions=*/false);
  } catch (const std::exception& e) {
    j = Json();
  }
  if (!j.is_object())
    return DataLoss(what_ + ": a line that is not a JSON object (" + std::to_string(r.line.size()) + " bytes)");
  return j;
}

void EtcdStream::Cancel() {
  if (state_ == nullptr) return;
  EtcdTransport::StreamState* s = state_;
  OnLoop(
      *transport_->thread_->executor,
      [s] {
        s->canceled = true;
        s->canceler.cancel("canceled");
      },
      [](const std::string&) {});
}

}  // namespace cluster
}  // namespace sf
