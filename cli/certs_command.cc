#include "cli/certs_command.h"

#include <iostream>

#include "cli/flags.h"
#include "net/credentials.h"
#include "shardflow/cluster.h"

namespace sf {

const char kCertsUsage[] =
    "usage: shardflow certs init DIR\n"
    "       shardflow certs issue DIR --role node|session|etcd --name NAME [--host HOST]...\n"
    "                             [--namespace NS]\n"
    "\n"
    "'init' creates DIR (mode 700) with a new cluster CA (ca.crt, ca.key) and two\n"
    "credentials signed by it: node (node.crt, node.key) for 'shardflow node\n"
    "--tls-dir DIR' and session (session.crt, session.key) for sessions\n"
    "(sf::ClusterOptions::tls_dir). Keys are ECDSA P-256, written mode 600.\n"
    "'issue' adds NAME.crt and NAME.key; the role is signed into the certificate:\n"
    "only nodes may change membership, a session may only run work. Role etcd\n"
    "is the etcd server's (etcd --cert-file NAME.crt --key-file NAME.key\n"
    "--trusted-ca-file ca.crt --client-cert-auth): valid for etcd.shardflow.internal,\n"
    "which shardflow checks, and never accepted as a node or a session.\n"
    "\n"
    "  --role node|session|etcd  what the credential may do (default node)\n"
    "  --name NAME               its name: 1 to 64 of [A-Za-z0-9._-] (required)\n"
    "  --host HOST               a DNS name or IP address it is valid for; repeatable\n"
    "                            (etcd: the addresses etcd listens on, e.g. 127.0.0.1)\n"
    "  --namespace NS            a session's namespace: its sessions see and change only\n"
    "                            NS's variables, tables and queues on the nodes\n"
    "                            (default: the default namespace)\n"
    "\n"
    "Copy DIR without ca.key to the machines that only run nodes or sessions.\n";

void AddCertsFlags(CLI::App& certs, CertsFlags* f) {
  certs.add_option("action", f->action);
  certs.add_option("dir", f->dir);
  certs.add_option("--role", f->role);
  certs.add_option("--name", f->name);
  certs.add_option("--host", f->hosts);
  certs.add_option("--namespace", f->ns);
}

int CertsCommand(const CertsFlags& f) {
  auto usage = [](const std::string& m) {
    std::cerr << "shardflow certs: " << m << " (see 'shardflow certs --help')\n";
    return 2;
  };
  if (f.action.empty() || f.dir.empty()) return usage("expected an action (init, issue) and a directory");
  Status s;
  if (f.action == "init") {
    if (!f.name.empty() || !f.hosts.empty()) return usage("init takes no --name or --host");
    s = InitClusterCredentials(f.dir);
    if (s.ok()) std::cout << "cluster CA and credentials node, session written to " << f.dir << std::endl;
  } else if (f.action == "issue") {
    if (f.name.empty()) return usage("issue needs --name NAME");
    if (f.role != "node" && f.role != "session" && f.role != "etcd")
      return usage("--role must be node, session or etcd, not '" + f.role + "'");
    if (f.role == "etcd" && !f.ns.empty()) return usage("--namespace is for session credentials");
    s = f.role == "etcd" ? net::IssueEtcdCredential(f.dir, f.name, f.hosts)
                         : IssueClusterCredential(f.dir, f.role, f.name, f.hosts, f.ns);
    if (s.ok()) std::cout << f.role << " credential " << f.name << " written to " << f.dir << std::endl;
  } else {
    return usage("unknown action '" + f.action + "'");
  }
  if (!s.ok()) {
    std::cerr << "shardflow certs: " << s.ToString() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace sf
