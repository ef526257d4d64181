// MemberRegistry: a node's membership client. The node registers itself in
// etcd under a lease it keeps alive (PREFIX/members/NAME, cluster/
// member_table.h), watches every member's key, and reports each change of
// the list: etcd is the one source of truth, so every node and session sees
// the same members in the same order, and a node whose lease ends (killed,
// hung past the TTL, or reported down by a peer that lost its connection)
// is gone for all of them at once.
//
// A node that loses its lease while it still runs (it was paused, or cut
// off from etcd) registers again as a new life; if another node took its
// name meanwhile, it was replaced and leaves (on_replaced).
//
// Thread-safety: every method may be called from any thread. on_change and
// on_replaced run on the registry's own threads (never while a lock of the
// registry is held), one at a time.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cluster/member_table.h"
#include "net/credentials.h"
#include "shardflow/status.h"

namespace sf {
namespace cluster {

struct MemberRegistryOptions {
  std::string etcd;     // "host:port[,host:port...]" of etcd's client URLs (required)
  // The node's credential for mutual TLS with etcd; none: plaintext (only
  // for clusters run --insecure, whose etcd listens without TLS).
  std::optional<net::Credential> credential;
  std::string cluster = "default";  // the etcd key namespace: several clusters may share one etcd
  std::string name;                 // the node's name (required)
  std::string address;              // "host:port" it listens on (required)
  int lease_ttl_s = 2;              // a hung node is gone after about this long (etcd's minimum: 1)
  int request_timeout_ms = 5000;    // each etcd call
  // The members (in the order they joined) after each change, starting with
  // the list read at Start.
  std::function<void(const std::vector<MemberRecord>&)> on_change;
  // This node lost its lease and another node now holds its name (which one).
  std::function<void(const std::string& holder)> on_replaced;
  // Asked on the registry's thread before the lease of a member reported
  // down (ReportDownLater) ends: true when the member at address answers
  // after all. A closed connection is no proof of death: the peer may have
  // closed it because this node went silent (it was stopped, or too busy to
  // send its heartbeats), and ending a live member's lease would move its
  // slots (and depose it as leader) for nothing. Null: every report ends it.
  std::function<bool(const std::string& address)> answers;
  std::function<void(const std::string&)> log;  // null: silent
};

class MemberRegistry {
 public:
  // Connects to etcd, registers the node and starts watching. InvalidArgument
  // for bad options (a name that is not [A-Za-z0-9._@:-]{1,64}), FailedPrecondition naming the holder when a live node at
  // another address has this name, Unavailable / DeadlineExceeded /
  // PermissionDenied naming etcd when it cannot be reached.
  static Result<std::unique_ptr<MemberRegistry>> Start(MemberRegistryOptions options);
  // Revokes the node's lease (Leave) and stops the threads.
  ~MemberRegistry();

  // Marks this node leaving (draining) in etcd; the call's error otherwise.
  Status SetLeaving();
  // Ends, on the registry's thread (callers such as a connection's handler
  // must not wait on etcd), the lease of the member at address, a peer whose
  // connection to it closed, and its candidacy for placement leader: it is
  // gone for every node and session at once, and a leader it was is
  // replaced at once. Not when it still answers (MemberRegistryOptions::
  // answers). The outcome is logged.
  void ReportDownLater(const std::string& address);
  // Revokes this node's lease (its key goes at once) and stops renewing it;
  // idempotent. The registry reports no more changes.
  void Leave();

  struct Impl;

 private:
  explicit MemberRegistry(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The name a node registers under: with a node credential of its own (any
// but the shared default "node"), its certificate's, so that a node
// registers only itself; `name` (--name) may only repeat it (InvalidArgument
// naming both otherwise). With the shared credential, `name` as given.
Result<std::string> MemberNameFromCredential(const net::Credential& credential, const std::string& name);

// The members of cluster `cluster` read from etcd (`shardflow cluster
// members`), in the order they joined; Unavailable / PermissionDenied naming
// etcd when it cannot be read. Malformed keys are skipped.
Result<std::vector<MemberRecord>> ReadMembers(const std::string& etcd, const std::optional<net::Credential>& credential,
                                              const std::string& cluster, int timeout_ms = 5000);

}  // namespace cluster
}  // namespace sf
