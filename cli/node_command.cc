#include "cli/node_command.h"

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <set>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <iostream>

#include "cli/auth_command.h"
#include "cli/flags.h"
#include "shardflow/cluster.h"

namespace sf {

const char kNodeUsage[] =
    "usage: shardflow node --listen HOST:PORT (--tls-dir DIR [--tls-name NAME] | --insecure)\n"
    "                      [--etcd HOST:PORT[,...] [--cluster NAME] [--lease-ttl-s S] [--map-slots N] [--replicas N]\n"
    "                       [--copy-mib-per-s N]]\n"
    "                      [--name NAME] [--threads N]\n"
    "                      [--lifetime-s SECONDS] [--drain-timeout-s SECONDS]\n"
    "                      [--heartbeat-ms MS] [--peer-timeout-ms MS]\n"
    "                      [--max-tensor-bytes N] [--max-open-files N]\n"
    "                      [--max-peer-buffer-mib N] [--max-connections N]\n"
    "                      [--max-connections-per-credential N] [--max-connections-per-source N]\n"
    "                      [--checkpoint-dir DIR] [--data-dir DIR] [--log]\n"
    "                      [--ns-max-variables N] [--ns-max-tables N] [--ns-max-queues N] [--ns-max-bytes N]\n"
    "                      [--ns-expiry-s S]\n"
    "       shardflow node drain NAME|HOST:PORT --etcd HOST:PORT[,...]\n"
    "                      (--tls-dir DIR [--tls-name NAME] | --insecure) [--cluster NAME] [--wait-s SECONDS]\n"
    "       shardflow node members HOST:PORT (--tls-dir DIR [--tls-name NAME] | --insecure)\n"
    "                      [--json]\n"
    "\n"
    "Runs one member of a shardflow cluster: it hosts graph partitions, variable\n"
    "shards and queues for cluster sessions (sf::ClusterSession). Prints\n"
    "'shardflow node NAME listening on HOST:PORT' once it serves, then serves\n"
    "until SIGINT or SIGTERM.\n"
    "\n"
    "  --listen HOST:PORT          where to listen (port 0 picks a free port)\n"
    "  --tls-dir DIR               the cluster's credentials ('shardflow certs init DIR'):\n"
    "                              peers must hold a certificate of its CA\n"
    "  --tls-name NAME             which credential in DIR this node uses (default node)\n"
    "  --insecure                  plaintext and unauthenticated (trusted networks only;\n"
    "                              logged as a warning)\n"
    "  --etcd HOST:PORT[,...]      etcd's client addresses: the cluster's membership\n"
    "                              lives there (the node registers under a lease; every\n"
    "                              member and session follows the same list); etcd is\n"
    "                              reached over mutual TLS with this node's credential\n"
    "  --cluster NAME              the cluster's name in etcd (default 'default')\n"
    "  --lease-ttl-s S             with --etcd: a hung node is gone after about S\n"
    "                              seconds (default 2, at least 1)\n"
    "                              (without --etcd: a cluster of this node alone)\n"
    "  --map-slots N               with --etcd: the slots of the cluster's shard map, the\n"
    "                              logical tasks sessions place on (default 64; the same\n"
    "                              on every node)\n"
    "  --replicas N                with --etcd: 2 keeps a backup of every slot on another\n"
    "                              node, which takes over when its holder dies (default 2;\n"
    "                              1: none; the same on every node)\n"
    "  --copy-mib-per-s N          a slot's whole copy to a new backup or holder goes at\n"
    "                              most this fast (default 256; 0: unlimited)\n"
    "  --name NAME                 the member's name (default: with a node credential of\n"
    "                              its own, --tls-name NAME, its certificate's name, the\n"
    "                              only one it may register under; else node@HOST:PORT)\n"
    "  --threads N                 compute threads (default: one per core)\n"
    "  --lifetime-s SECONDS        stop by itself after this long (tests)\n"
    "  --heartbeat-ms MS           idle time before a heartbeat (default 200)\n"
    "  --peer-timeout-ms MS        silence after which a peer is down (default 1000)\n"
    "  --drain-timeout-s SECONDS   when drained, leave after this long even if a\n"
    "                              session still uses the node (default 60)\n"
    "  --max-tensor-bytes N        the largest tensor a partition's op may allocate;\n"
    "                              past it the step fails with ResourceExhausted\n"
    "                              naming the op (default: the machine's memory)\n"
    "  --max-open-files N          lower the process's descriptor limit to N (a node out\n"
    "                              of descriptors drops its oldest handshake, else the\n"
    "                              least recently used connection of the biggest holder)\n"
    "  --max-peer-buffer-mib N     what one peer may leave here (its calls unanswered,\n"
    "                              our replies it has not taken) before its bytes stop\n"
    "                              being read (default 32)\n"
    "  --max-connections N         authenticated peers that dialed the node (default\n"
    "                              1024); past it the least recently used connection of\n"
    "                              the credential holding the most makes room\n"
    "  --max-connections-per-credential N\n"
    "                              of one certificate (default 256); past it its least\n"
    "                              recently used connection makes room\n"
    "  --max-connections-per-source N\n"
    "                              from one address, handshaking or not (default 256);\n"
    "                              past it new ones from there are refused\n"
    "  --checkpoint-dir DIR        where in-graph SaveCheckpoint/RestoreCheckpoint ops\n"
    "                              of partitions here write and read: their dir is a\n"
    "                              relative path under DIR (default: none, those ops\n"
    "                              fail; a session's own Save is not affected)\n"
    "  --data-dir DIR              where ops of partitions here keep and read data\n"
    "                              files (a hash table's cold tier, a reader's input\n"
    "                              files): relative paths under DIR (default: none,\n"
    "                              those ops fail)\n"
    "  --ns-max-variables N        what one namespace (a session credential's) may make\n"
    "  --ns-max-tables N           this node hold: variables (default 65536), hash\n"
    "  --ns-max-queues N           tables (4096), queues (4096) and declared bytes of its\n"
    "  --ns-max-bytes N            variables and hash rows (16 GiB); past one,\n"
    "                              ResourceExhausted\n"
    "  --ns-expiry-s S             drop a namespace (not the default one) no session\n"
    "                              used here for S seconds (default 0: never)\n"
    "  --log                       log membership changes and refused peers\n"
    "\n"
    "'node drain' asks a running node to leave: the sessions using it move its\n"
    "tasks and their variables to other members before their next step, then\n"
    "the node exits. It waits up to --wait-s (default 60) for the node to go. It\n"
    "writes the operator's drain mark in etcd with the operator credential\n"
    "(--tls-name, default admin: made by 'shardflow cluster auth'); etcd refuses a\n"
    "node's or session's mark of another node, and nodes refuse drains by peers.\n"
    "\n"
    "'node members' prints the node's view of the membership: one line per member\n"
    "(itself first) with its name, address, incarnation and state (alive, leaving);\n"
    "with --json one JSON object per line. Any credential of the cluster may ask.\n";

int NodeUsageError(const std::string& msg) {
  std::cerr << "shardflow node: " << msg << " (see 'shardflow node --help')\n";
  return 2;
}

void AddNodeFlags(CLI::App& node, NodeFlags* f) {
  NodeOptions& o = f->options;
  o.listen.clear();
  node.require_subcommand(0, 1);
  // As before CLI11, a repeated option takes its last value: launchers such as
  // examples/common/local_cluster.cc append their extra options to a base line.
  node.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  node.add_option("--listen", o.listen);
  node.add_option("--join", f->join);
  node.add_option("--etcd", o.etcd);
  node.add_option("--cluster", o.cluster);
  node.add_option("--lease-ttl-s", o.lease_ttl_s)->transform(cli::IntegerIn(1, 3600));
  node.add_option("--tls-dir", o.tls_dir);
  node.add_option("--tls-name", o.tls_name);
  node.add_flag("--insecure", o.insecure);
  node.add_option("--name", o.name);
  node.add_option("--threads", o.compute_threads)->transform(cli::IntegerIn(0, 4096));
  node.add_option("--lifetime-s", f->lifetime_s)->check(cli::Real());
  node.add_option("--heartbeat-ms", o.heartbeat_ms)->transform(cli::Integer<int>());
  node.add_option("--peer-timeout-ms", o.peer_timeout_ms)->transform(cli::Integer<int>());
  // The seconds here and in --wait-s become int milliseconds: at most 2e6 s.
  node.add_option("--drain-timeout-s", f->drain_timeout_s)->check(cli::Real(0, 2e6));
  node.add_option("--max-tensor-bytes", o.max_tensor_bytes)->transform(cli::IntegerIn(0, std::numeric_limits<int64_t>::max()));
  node.add_option("--max-open-files", f->max_open_files)->transform(cli::IntegerIn(16, 1 << 20));
  node.add_option("--max-peer-buffer-mib", f->max_peer_buffer_mib)->transform(cli::IntegerIn(1, 1 << 20));
  node.add_option("--max-connections", o.max_connections)->transform(cli::IntegerIn(1, 1 << 20));
  node.add_option("--max-connections-per-credential", o.max_connections_per_credential)
      ->transform(cli::IntegerIn(1, 1 << 20));
  node.add_option("--max-connections-per-source", o.max_connections_per_source)->transform(cli::IntegerIn(1, 1 << 20));
  node.add_option("--checkpoint-dir", o.checkpoint_root);
  node.add_option("--data-dir", o.data_root);
  node.add_option("--map-slots", o.map_slots)->transform(cli::IntegerIn(1, 4096));
  node.add_option("--replicas", o.replicas)->transform(cli::IntegerIn(1, 2));
  node.add_option("--copy-mib-per-s", o.copy_mib_per_s)->transform(cli::IntegerIn(0, 1 << 20));
  node.add_option("--ns-max-variables", o.ns_max_variables)->transform(cli::IntegerIn(0, int64_t{1} << 18));
  node.add_option("--ns-max-tables", o.ns_max_tables)->transform(cli::IntegerIn(0, int64_t{1} << 18));
  node.add_option("--ns-max-queues", o.ns_max_queues)->transform(cli::IntegerIn(0, int64_t{1} << 16));
  node.add_option("--ns-expiry-s", o.ns_expiry_s)->transform(cli::IntegerIn(0, int64_t{1} << 31));
  node.add_option("--ns-max-bytes", o.ns_max_bytes)->transform(cli::IntegerIn(0, std::numeric_limits<int64_t>::max()));
  node.add_flag("--log", o.log);
  CLI::App* drain = node.add_subcommand("drain");
  drain->add_option("address", f->drain_addresses);
  drain->add_option("--tls-dir", f->drain_tls_dir);
  drain->add_option("--tls-name", f->drain_tls_name);
  drain->add_flag("--insecure", f->drain_insecure);
  drain->add_option("--wait-s", f->wait_s)->check(cli::Real(0, 2e6));
  drain->add_option("--etcd", f->members_etcd);
  drain->add_option("--cluster", f->members_cluster);
  CLI::App* members = node.add_subcommand("members");
  members->add_option("address", f->drain_addresses);
  members->add_option("--tls-dir", f->drain_tls_dir);
  members->add_option("--tls-name", f->drain_tls_name);
  members->add_flag("--insecure", f->drain_insecure);
  members->add_flag("--json", f->members_json);
  members->add_option("--etcd", f->members_etcd);
  members->add_option("--cluster", f->members_cluster);
}

namespace {

// `shardflow node drain NAME|HOST:PORT --etcd ...`: the operator's mark in
// etcd, which holds the membership (no node drains at a peer's request).
int DrainCommand(const NodeFlags& f) {
  const auto& addresses = f.drain_addresses;
  if (addresses.size() > 1)
    return NodeUsageError("drain takes one address (got '" + addresses[0] + "' and '" + addresses[1] + "')");
  if (addresses.empty()) return NodeUsageError("drain needs the node's HOST:PORT");
  if (f.drain_tls_dir.empty() == !f.drain_insecure)
    return NodeUsageError("give --tls-dir DIR or --insecure (exactly one)");
  if (f.members_etcd.empty())
    return NodeUsageError("drain needs --etcd HOST:PORT[,...]: the cluster's members are in etcd, where the "
                          "operator's credential marks a node draining (nodes take no drain from a peer)");
  return EtcdDrainCommand(f);  // cli/auth_command.h
}

// Quotes s as a JSON string.
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      out += b;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// `shardflow node members HOST:PORT ...`.
int MembersCommand(const NodeFlags& f) {
  const auto& addresses = f.drain_addresses;
  if (addresses.size() != (f.members_etcd.empty() ? 1u : 0u))
    return NodeUsageError("members takes one node's HOST:PORT, or --etcd HOST:PORT[,...]");
  if (f.drain_tls_dir.empty() == !f.drain_insecure)
    return NodeUsageError("give --tls-dir DIR or --insecure (exactly one)");
  auto m = f.members_etcd.empty()
               ? ListClusterMembers(addresses[0], f.drain_tls_dir, f.drain_tls_name, f.drain_insecure)
               : ListEtcdMembers(f.members_etcd, f.drain_tls_dir, f.members_cluster, f.drain_tls_name, f.drain_insecure);
  if (!m.ok()) {
    std::cerr << "shardflow node members: " << m.status().ToString() << "\n";
    return 1;
  }
  for (const MemberInfo& i : *m) {
    if (f.members_json)
      std::cout << "{\"name\": " << JsonString(i.name) << ", \"address\": " << JsonString(i.address)
                << ", \"incarnation\": " << i.incarnation << ", \"state\": " << JsonString(i.state) << "}\n";
    else
      std::cout << i.name << "  " << i.address << "  incarnation " << i.incarnation << "  " << i.state << "\n";
  }
  return 0;
}

}  // namespace

int NodeCommand(const CLI::App& command, const NodeFlags& flags) {
  if (!command.get_subcommands().empty()) {
    const CLI::App* sub = command.get_subcommands()[0];
    for (const CLI::Option* opt : command.get_options()) {
      if (opt->count() > 0)
        return NodeUsageError("'node " + sub->get_name() + "' takes no " + opt->get_name() + "; give its options after '" +
                              sub->get_name() + "'");
    }
    if (sub->get_name() == "members") return MembersCommand(flags);
    return DrainCommand(flags);
  }
  NodeOptions o = flags.options;
  o.drain_timeout_ms = static_cast<int>(flags.drain_timeout_s * 1000);
  o.max_peer_buffer_bytes = int64_t{flags.max_peer_buffer_mib} << 20;
  const double lifetime = flags.lifetime_s;
  if (o.listen.empty()) return NodeUsageError("--listen HOST:PORT is required");
  if (o.heartbeat_ms < 1 || o.peer_timeout_ms <= o.heartbeat_ms)
    return NodeUsageError("--heartbeat-ms must be at least 1 and below --peer-timeout-ms");
  if (o.tls_dir.empty() == !o.insecure) return NodeUsageError("give --tls-dir DIR or --insecure (exactly one)");
  if (!flags.join.empty())
    return NodeUsageError("--join is gone: a cluster's membership lives in etcd; start every node with --etcd "
                          "HOST:PORT (see docs/CLUSTER.md)");
  if (flags.max_open_files > 0) {
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = std::min<rlim_t>(static_cast<rlim_t>(flags.max_open_files), rl.rlim_max);
    if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) {
      std::cerr << "shardflow node: cannot set --max-open-files: " << std::strerror(errno) << "\n";
      return 1;
    }
  }
  // Block the stop signals before any thread starts, so only sigtimedwait sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  // The launcher may close our stdout after the first line; a later write
  // must not kill the node.
  signal(SIGPIPE, SIG_IGN);
  // This process is only a node: big tensors arrive over the network every
  // step, so it keeps their memory warm (see KeepTensorMemoryWarm).
  KeepTensorMemoryWarm();
  auto node = ClusterNode::Start(o);
  if (!node.ok()) {
    std::cerr << "shardflow node: " << node.status().ToString() << "\n";
    return 1;
  }
  std::cout << "shardflow node " << (*node)->name() << " listening on " << (*node)->address()
            << std::endl;
  // Wakes every 100 ms: a drained node leaves by itself.
  const auto start = std::chrono::steady_clock::now();
  timespec tick{0, 100 * 1000 * 1000};
  for (;;) {
    const int sig = sigtimedwait(&stop, nullptr, &tick);
    if (sig > 0) break;  // a stop signal
    if ((*node)->WaitLeft(0)) {
      const std::string by = (*node)->ReplacedBy();
      std::cerr << "shardflow node " << (*node)->name() << ": "
                << (by.empty() ? "drained" : "replaced by " + by + " while away") << ", leaving\n";
      break;
    }
    const double up = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (lifetime > 0 && up >= lifetime) break;
  }
  (*node)->Stop();
  return 0;
}

}  // namespace sf

namespace sf {

const char kClusterUsage[] =
    "usage: shardflow cluster members --etcd HOST:PORT[,...] (--tls-dir DIR [--tls-name NAME] | --insecure)\n"
    "                                 [--cluster NAME] [--json]\n"
    "       shardflow cluster map --etcd HOST:PORT[,...] (--tls-dir DIR [--tls-name NAME] | --insecure)\n"
    "                             [--cluster NAME] [--json]\n"
    "       shardflow cluster namespaces [drop NS] --etcd HOST:PORT[,...] (--tls-dir DIR [--tls-name NAME] |\n"
    "                             --insecure) [--cluster NAME] [--json]\n"
    "       shardflow cluster auth --etcd HOST:PORT[,...] --tls-dir DIR [--tls-name ADMIN] [--cluster NAME]\n"
    "\n"
    "Prints the members of a cluster whose membership lives in etcd (nodes started\n"
    "with --etcd), in the order they joined: one line per member with its name,\n"
    "address, incarnation (its life: the revision of its key in etcd) and state\n"
    "(alive, leaving); with --json one JSON object per line. Any credential of\n"
    "the cluster may read it (default: session).\n"
    "\n"
    "'cluster map' prints the shard map: which member serves each slot (the logical\n"
    "task /job:worker/task:S sessions place on), one line per slot, marked while\n"
    "it moves, then its epoch (its revision in etcd); with --json one JSON object\n"
    "per slot, then a summary line with epoch, slots, members and moving.\n"
    "\n"
    "'cluster namespaces' asks every member what each namespace (a session\n"
    "credential's: 'shardflow certs issue --namespace NS') holds: variables,\n"
    "tables, queues, their declared bytes and sessions, summed over the nodes; a\n"
    "session credential sees its own namespace only. 'namespaces drop NS' drops\n"
    "NS on every member (its sessions there close; its state goes, memory\n"
    "returned); a session credential may drop only its own namespace, a node\n"
    "credential any.\n"
    "\n"
    "'cluster auth' turns on etcd's authentication for the cluster: an etcd user\n"
    "per credential in DIR (run it where ca.key is, again after issuing one), the\n"
    "operator credential ADMIN (default admin) made when missing, and roles: a\n"
    "session reads members and the map, a node writes only its own member key\n"
    "and drain mark (the shared 'node' credential: any node's), the election and\n"
    "the map; the operator everything (docs/CLUSTER.md, 'Messages and security').\n";

void AddClusterFlags(CLI::App& cluster, NodeFlags* f) {
  cluster.require_subcommand(1, 1);
  for (const char* name : {"members", "map", "namespaces", "auth"}) {
    CLI::App* sub = cluster.add_subcommand(name);
    if (std::string(name) == "namespaces") sub->add_option("args", f->ns_args);
    sub->add_option("--etcd", f->members_etcd)->required();
    sub->add_option("--cluster", f->members_cluster);
    sub->add_option("--tls-dir", f->drain_tls_dir);
    sub->add_option("--tls-name", f->drain_tls_name);
    sub->add_flag("--insecure", f->drain_insecure);
    sub->add_flag("--json", f->members_json);
  }
}

namespace {

// `shardflow cluster map --etcd ...`.
int MapCommand(const NodeFlags& f) {
  if (f.drain_tls_dir.empty() == !f.drain_insecure) {
    std::cerr << "shardflow cluster map: give --tls-dir DIR or --insecure (exactly one)\n" << kClusterUsage;
    return 2;
  }
  auto m = ReadClusterMap(f.members_etcd, f.drain_tls_dir, f.members_cluster.empty() ? "default" : f.members_cluster,
                          f.drain_tls_name, f.drain_insecure);
  if (!m.ok()) {
    std::cerr << "shardflow cluster map: " << m.status().ToString() << "\n";
    return 1;
  }
  std::set<std::string> members;
  int moving = 0;
  for (size_t s = 0; s < m->holder.size(); ++s) {
    members.insert(m->holder[s]);
    const std::string& from = m->moving_from[s];
    moving += !from.empty();
    const std::string& backup = m->backup[s];
    if (f.members_json)
      std::cout << "{\"slot\": " << s << ", \"holder\": " << JsonString(m->holder[s])
                << ", \"moving_from\": " << JsonString(from) << ", \"lost_after\": " << m->lost_after[s]
                << ", \"backup\": " << JsonString(backup) << ", \"synced\": " << (m->synced[s] ? "true" : "false")
                << "}\n";
    else
      std::cout << "slot " << s << "  " << m->holder[s]
                << (backup.empty() ? "" : "  backup " + backup + (m->synced[s] ? "" : " (being copied)"))
                << (from.empty() ? "" : "  (moving from " + from + ")")
                << (m->lost_after[s] ? "  (state lost after epoch " + std::to_string(m->lost_after[s]) + ")" : "")
                << "\n";
  }
  if (f.members_json)
    std::cout << "{\"epoch\": " << m->epoch << ", \"slots\": " << m->holder.size() << ", \"members\": "
              << members.size() << ", \"moving\": " << moving << "}\n";
  else
    std::cout << "epoch " << m->epoch << ": " << m->holder.size() << " slots on " << members.size() << " members"
              << (moving ? ", " + std::to_string(moving) + " moving" : "") << "\n";
  return 0;
}

// `shardflow cluster namespaces [drop NS] --etcd ...`.
int NamespacesCommand(const NodeFlags& f) {
  const bool drop = !f.ns_args.empty() && f.ns_args[0] == "drop";
  if (f.drain_tls_dir.empty() == !f.drain_insecure || (!f.ns_args.empty() && (!drop || f.ns_args.size() != 2))) {
    std::cerr << "shardflow cluster namespaces: give --tls-dir DIR or --insecure (exactly one), and no argument "
                 "or 'drop NS'\n"
              << kClusterUsage;
    return 2;
  }
  const std::string cluster = f.members_cluster.empty() ? "default" : f.members_cluster;
  std::vector<NamespaceInfo> all;
  if (drop) {
    auto d = DropClusterNamespace(f.members_etcd, f.drain_tls_dir, f.ns_args[1], cluster, f.drain_tls_name,
                                  f.drain_insecure);
    if (!d.ok()) {
      std::cerr << "shardflow cluster namespaces drop: " << d.status().ToString() << "\n";
      return 1;
    }
    all.push_back(*d);
  } else {
    auto l = ListClusterNamespaces(f.members_etcd, f.drain_tls_dir, cluster, f.drain_tls_name, f.drain_insecure);
    if (!l.ok()) {
      std::cerr << "shardflow cluster namespaces: " << l.status().ToString() << "\n";
      return 1;
    }
    all = std::move(*l);
  }
  for (const NamespaceInfo& i : all) {
    if (f.members_json)
      std::cout << "{\"namespace\": " << JsonString(i.name) << ", \"variables\": " << i.variables
                << ", \"tables\": " << i.tables << ", \"queues\": " << i.queues << ", \"bytes\": " << i.bytes
                << ", \"sessions\": " << i.sessions << ", \"nodes\": " << i.nodes
                << (drop ? ", \"dropped\": true" : "") << "}\n";
    else
      std::cout << (drop ? "dropped " : "") << i.name << "  " << i.variables << " variables, " << i.tables
                << " tables, " << i.queues << " queues, " << i.bytes << " bytes, " << i.sessions << " sessions on "
                << i.nodes << " nodes\n";
  }
  return 0;
}

}  // namespace

int ClusterCommand(const CLI::App& command, const NodeFlags& flags) {
  if (!command.get_subcommands().empty() && command.get_subcommands()[0]->get_name() == "map") return MapCommand(flags);
  if (!command.get_subcommands().empty() && command.get_subcommands()[0]->get_name() == "auth")
    return ClusterAuthCommand(flags);
  if (!command.get_subcommands().empty() && command.get_subcommands()[0]->get_name() == "namespaces")
    return NamespacesCommand(flags);
  return MembersCommand(flags);
}

}  // namespace sf
