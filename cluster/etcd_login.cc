// Logging in to etcd (EtcdTransport::Token) and the calls that log in
// first (EtcdTransport::Call): etcd's authentication through its JSON
// gateway, a token per client sent as Authorization (cluster/etcd_identity.h).
#include "cluster/etcd_transport.h"

namespace sf {
namespace cluster {

bool EtcdNeedsLogin(const Status& s) {
  const std::string& m = s.message();
  return !s.ok() && (m.find("invalid auth token") != std::string::npos ||
                     m.find("user name is empty") != std::string::npos ||
                     m.find("revision in header is old") != std::string::npos);
}

Result<std::string> EtcdTransport::Token(EtcdClock::time_point deadline, const std::string* stale) {
  if (!options_.credential || options_.user.empty()) return std::string();
  std::lock_guard<std::mutex> l(login_mu_);
  if (logged_in_ && (stale == nullptr || *stale != token_)) return token_;
  const std::string op = "login as " + options_.user;
  auto j = Send(op, "/v3/auth/authenticate", Json{{"name", options_.user}, {"password", options_.password}},
                deadline, /*idempotent=*/true, "");
  if (!j.ok()) {
    // etcd without authentication: no token, and every request is anyone's.
    if (j.status().message().find("authentication is not enabled") != std::string::npos) {
      token_.clear();
      logged_in_ = true;
      return token_;
    }
    if (j.status().message().find("authentication failed") != std::string::npos)
      return PermissionDenied(j.status().message() + " (no etcd user " + options_.user +
                              " with this credential's password: run `shardflow cluster auth` for it)");
    return j.status();
  }
  auto t = j->find("token");
  if (t == j->end() || !t->is_string() || t->get<std::string>().empty())
    return DataLoss("etcd: " + op + ": the reply has no token");
  token_ = t->get<std::string>();
  logged_in_ = true;
  return token_;
}

Result<Json> EtcdTransport::Call(const std::string& op, const std::string& path, const Json& request,
                                 EtcdClock::time_point deadline, bool idempotent) {
  std::string token;
  // Only the v3 API knows users (not /health).
  if (path.rfind("/v3/", 0) == 0) {
    SF_ASSIGN_OR_RETURN(token, Token(deadline));
  }
  auto r = Send(op, path, request, deadline, idempotent, token);
  if (!EtcdNeedsLogin(r.status()) || !options_.credential) return r;
  // etcd refused the token before running the request: log in and send it again, once.
  const std::string stale = token;
  SF_ASSIGN_OR_RETURN(token, Token(deadline, &stale));
  return Send(op, path, request, deadline, idempotent, token);
}

}  // namespace cluster
}  // namespace sf
