// EtcdProcess: one etcd 3.4 server run as a child process on 127.0.0.1, for
// tests and for a local cluster that needs no setup. It serves its clients
// over mutual TLS with a credential from a cluster credentials directory
// (net/credentials.h; it issues "etcd" there when missing, which needs the
// CA key), and keeps its data, its log and nothing else in a fresh
// temporary directory that it removes when destroyed.
//
//   EtcdProcessOptions o;
//   o.credentials_dir = tls_dir;  // made by InitCredentials
//   EtcdProcess etcd(o);
//   Status s = etcd.Start();      // waits until /health answers
//   ... EtcdClientOptions{.endpoints = etcd.endpoint(), ...}
//
// The child gets PR_SET_PDEATHSIG(SIGKILL) from a thread the object owns, so
// it never outlives this object's process, whatever thread started it. It
// is signalled by its PID only.
// Thread-safety: every method may be called from any thread; they take turns.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "shardflow/status.h"

namespace sf {
namespace cluster {

struct EtcdProcessOptions {
  // The etcd binary. Default Debian's.
  std::string etcd_binary = "/usr/bin/etcd";
  // A cluster credentials directory (ca.crt; ca.key too unless it already
  // holds the etcd credential). Required unless plaintext.
  std::string credentials_dir;
  // The etcd server's credential in it (NAME.crt/NAME.key). Default "etcd".
  std::string server_credential = "etcd";
  // The credential Start() checks /health with. Default "node".
  std::string client_credential = "node";
  // Raft timings (etcd's --election-timeout and --heartbeat-interval, ms).
  // Defaults 500 and 50: a single member elects itself in well under a
  // second, and etcd accepts a 1 s lease TTL (its minimum is 1.5 elections).
  int election_timeout_ms = 500;
  int heartbeat_interval_ms = 50;
  // How long Start() and Restart() wait for /health. Default 20 s.
  std::chrono::milliseconds start_timeout{20000};
  // How long Stop() waits after SIGTERM before SIGKILL. Default 5 s.
  std::chrono::milliseconds stop_timeout{5000};
  // Plain HTTP on loopback, no TLS and no credentials: only for clusters
  // run --insecure (measuring what TLS costs). Default false.
  bool plaintext = false;
    // Where its temporary directory goes. Default $TMPDIR or /tmp.
  std::string temp_parent;
};

class EtcdProcess {
 public:
  explicit EtcdProcess(EtcdProcessOptions options);
  // Stops etcd (Stop()) and removes its directory.
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // Picks two free loopback ports (the first time; after Stop it keeps
  // them and its data), starts etcd and waits until /health answers over TLS. FailedPrecondition when it runs already;
  // InvalidArgument / NotFound for credentials it cannot use or issue;
  // Unavailable with the end of etcd's log when it exits or is not healthy
  // within start_timeout.
  Status Start();
  // SIGTERM, then SIGKILL after stop_timeout; reaps it. OK when it was not running.
  Status Stop();
  // SIGKILL at once (a crash); reaps it. OK when it was not running.
  Status Kill();
  // SIGSTOP: it keeps its sockets but answers nothing (a hung server).
  // FailedPrecondition when it is not running.
  Status Pause();
  // SIGCONT after Pause. FailedPrecondition when it is not running.
  Status Resume();
  // Stop() then start again on the same ports and data (every key, lease
  // and revision kept); the errors of Start.
  Status Restart();

  // "127.0.0.1:PORT", its client address (the same across Restart); "" before Start.
  std::string endpoint() const;
  // Whether the child runs (paused counts).
  bool running() const;
  // Its temporary directory (data/ and etcd.log inside); "" before Start.
  std::string dir() const;
  // The last lines of its log, for error messages.
  std::string LogTail(size_t lines = 20) const;
  pid_t pid() const;

 private:
  struct Spawner;
  // REQUIRES for these: mu_ held.
  Status Launch();       // starts the child on the chosen ports
  Status WaitHealthy();  // until /health answers, the child exits, or start_timeout
  bool StopLocked();     // SIGTERM, SIGKILL after stop_timeout; whether SIGTERM did it
  void KillLocked();     // SIGKILL and reap; cannot fail for our own child
  std::string LogTailLocked(size_t lines) const;

  const EtcdProcessOptions options_;
  mutable std::mutex mu_;
  std::unique_ptr<Spawner> spawner_;  // the thread that forks (its death kills the child)
  std::string dir_;                   // GUARDED_BY(mu_)
  int client_port_ = 0;               // GUARDED_BY(mu_)
  int peer_port_ = 0;                 // GUARDED_BY(mu_)
  pid_t pid_ = -1;                    // GUARDED_BY(mu_)
};

}  // namespace cluster
}  // namespace sf
