// etcd's users and roles for a cluster (cluster/cluster_auth.h), made through
// the auth API of etcd's JSON gateway.
#include "cluster/cluster_auth.h"

#include <nlohmann/json.hpp>

#include "cluster/etcd_client.h"
#include "cluster/etcd_json.h"
#include "cluster/etcd_transport.h"
#include "cluster/member_table.h"

namespace sf {
namespace cluster {

namespace {

using Json = nlohmann::json;

// One permission of a role: READ, WRITE or READWRITE over key (and the keys
// under it when prefix).
struct Perm {
  const char* type;
  std::string key;
  bool prefix;
};

class AuthCalls {
 public:
  AuthCalls(EtcdClient& client, int timeout_ms) : client_(client), timeout_ms_(timeout_ms) {}

  // Calls the auth API; an error whose message holds `exists` counts as done
  // (etcd answers "already exists" to a second add).
  Status Call(const std::string& op, const std::string& path, const Json& body, const char* exists = nullptr) {
    auto r = client_.transport()->Call(op, path, body,
                                       EtcdClock::now() + std::chrono::milliseconds(timeout_ms_), /*idempotent=*/true);
    if (r.ok() || (exists && r.status().message().find(exists) != std::string::npos)) return Status::OK();
    return r.status();
  }

  // Adds user (no password: nobody can log in as it over the gateway) or sets its password.
  Status User(const std::string& name, const std::string& password) {
    if (password.empty())
      return Call("add user " + name, "/v3/auth/user/add", {{"name", name}, {"options", {{"no_password", true}}}},
                  "already exists");
    Json add = {{"name", name}, {"password", password}};
    auto r = client_.transport()->Call("add user " + name, "/v3/auth/user/add", add,
                                       EtcdClock::now() + std::chrono::milliseconds(timeout_ms_));
    if (r.ok()) return Status::OK();
    if (r.status().message().find("already exists") == std::string::npos) return r.status();
    // A credential issued again under the same name has another key.
    return Call("set the password of " + name, "/v3/auth/user/changepw", add);
  }

  Status Role(const std::string& role, const std::vector<Perm>& perms) {
    SF_RETURN_IF_ERROR(Call("add role " + role, "/v3/auth/role/add", {{"name", role}}, "already exists"));
    for (const Perm& p : perms) {
      Json perm = {{"permType", p.type}, {"key", Base64Encode(p.key)}};
      if (p.prefix) perm["range_end"] = Base64Encode(PrefixEnd(p.key));
      SF_RETURN_IF_ERROR(Call("grant " + role + " " + p.type + " " + p.key + (p.prefix ? "*" : ""),
                              "/v3/auth/role/grant", {{"name", role}, {"perm", perm}}));
    }
    return Status::OK();
  }

  Status Grant(const std::string& user, const std::string& role) {
    return Call("grant " + role + " to " + user, "/v3/auth/user/grant", {{"user", user}, {"role", role}});
  }

 private:
  EtcdClient& client_;
  const int timeout_ms_;
};

}  // namespace

std::string EtcdNodeRole(const std::string& cluster) { return "shardflow:" + cluster + ":node"; }
std::string EtcdMemberRole(const std::string& cluster, const std::string& name) {
  return "shardflow:" + cluster + ":member:" + name;
}
std::string EtcdAnyNodeRole(const std::string& cluster) { return "shardflow:" + cluster + ":any-node"; }
std::string EtcdSessionRole(const std::string& cluster) { return "shardflow:" + cluster + ":session"; }
std::string DrainKey(const std::string& prefix, const std::string& name) { return prefix + "drain/" + name; }
std::string LeaderKey(const std::string& prefix, const std::string& name) { return prefix + "leader/" + name; }

Result<EtcdAuthReport> EnableEtcdAuth(const EtcdAuthOptions& o) {
  SF_ASSIGN_OR_RETURN(const std::string prefix, ClusterPrefix(o.cluster));
  if (o.etcd.empty() || o.tls_dir.empty()) return InvalidArgument("etcd auth: give etcd's address and a --tls-dir");
  SF_RETURN_IF_ERROR(IssueAdminCredential(o.tls_dir, o.admin));
  // Every credential's users, read before any call so that a bad file changes nothing in etcd.
  struct Holder {
    std::string user, password, name;
  };
  std::vector<Holder> holders;
  for (const std::string& name : ListCredentials(o.tls_dir)) {
    auto cred = net::LoadCredential(o.tls_dir, name);
    std::string cn;
    std::string key_pem;
    if (cred.ok()) {
      SF_ASSIGN_OR_RETURN(cn, CertificateCommonName(cred->cert_pem));
      key_pem = cred->key_pem;
    } else {
      auto admin = LoadAdminCredential(o.tls_dir, name);
      if (!admin.ok()) continue;  // the etcd server's credential, or not one of the cluster's
      cn = "admin:" + name;
      key_pem = admin->key_pem;
    }
    SF_RETURN_IF_ERROR(IssueEtcdCertificate(o.tls_dir, name));
    SF_ASSIGN_OR_RETURN(std::string password, EtcdPassword(key_pem));
    holders.push_back({cn, password, name});
  }
  SF_ASSIGN_OR_RETURN(net::Credential admin, LoadAdminCredential(o.tls_dir, o.admin));
  SF_ASSIGN_OR_RETURN(std::unique_ptr<EtcdClient> client, ConnectEtcd(o.etcd, admin, o.timeout_ms));
  AuthCalls calls(*client, o.timeout_ms);
  const std::string members = prefix + "members/", drain = prefix + "drain/";
  SF_RETURN_IF_ERROR(
      calls.Role(EtcdNodeRole(o.cluster), {{"READ", prefix, true}, {"READWRITE", prefix + "map", false}}));
  SF_RETURN_IF_ERROR(calls.Role(EtcdAnyNodeRole(o.cluster), {{"READWRITE", members, true},
                                                            {"READWRITE", drain, true},
                                                            {"READWRITE", prefix + "leader/", true}}));
  SF_RETURN_IF_ERROR(
      calls.Role(EtcdSessionRole(o.cluster), {{"READ", members, true}, {"READ", prefix + "map", false}}));
  // etcd turns authentication on only with a root user; it has no password,
  // so nobody logs in as it here (the operator is admin:NAME, in root's role).
  SF_RETURN_IF_ERROR(calls.User("root", ""));
  SF_RETURN_IF_ERROR(calls.Grant("root", "root"));
  EtcdAuthReport report;
  for (const Holder& h : holders) {
    std::vector<std::string> roles;
    const size_t colon = h.user.find(':');
    const std::string kind = h.user.substr(0, colon), cert_name = h.user.substr(colon + 1);
    if (kind == "admin") {
      roles = {"root"};
    } else if (kind == "node") {
      // The shared default credential names no one node (MemberNameFromCredential).
      roles = {EtcdNodeRole(o.cluster),
               h.name == "node" ? EtcdAnyNodeRole(o.cluster) : EtcdMemberRole(o.cluster, cert_name)};
      if (h.name != "node" && !ValidMemberName(cert_name)) continue;
      if (h.name != "node")
        SF_RETURN_IF_ERROR(calls.Role(EtcdMemberRole(o.cluster, cert_name),
                                      {{"READWRITE", MemberKey(prefix, cert_name), false},
                                       {"READWRITE", DrainKey(prefix, cert_name), false},
                                       {"READWRITE", LeaderKey(prefix, cert_name), false}}));
    } else if (kind == "session") {
      roles = {EtcdSessionRole(o.cluster)};
    } else {
      continue;
    }
    SF_RETURN_IF_ERROR(calls.User(h.user, h.password));
    std::string line = h.user;
    for (const std::string& r : roles) {
      SF_RETURN_IF_ERROR(calls.Grant(h.user, r));
      line += " " + r;
    }
    report.users.push_back(line);
  }
  SF_RETURN_IF_ERROR(calls.Call("enable authentication", "/v3/auth/enable", Json::object()));
  // Log in as the operator now that it counts: a user etcd refuses shows here, not at the next node's start.
  auto check = ConnectEtcd(o.etcd, admin, o.timeout_ms);
  if (!check.ok()) return check.status();
  SF_RETURN_IF_ERROR((*check)->Range(prefix).status().WithPrefix("reading the cluster's keys as " + o.admin));
  return report;
}

}  // namespace cluster
}  // namespace sf
