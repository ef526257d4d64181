"""LocalCluster: node processes (`shardflow node`) on 127.0.0.1 for tests and notebooks.

    with sf.LocalCluster(nodes=2) as cluster:
        sess = sf.ClusterSession(g, cluster=cluster)

The nodes listen on 127.0.0.1 only, trust fresh TLS credentials (a cluster CA
made for them, in cluster.tls_dir), and stop by
themselves: when close() runs, when the object is collected, when the
interpreter exits, and (Linux's parent-death signal) when the Python process
dies, with --lifetime-s as a last bound. (The parent-death signal follows the
thread that started the cluster: make one from a thread that lives as long as
you need it, such as the main thread.)
"""

import ctypes
import os
import re
import signal
import shutil
import subprocess
import tempfile
import threading
import time
import weakref

from . import errors

__all__ = ["LocalCluster", "LocalEnvironment", "find_shardflow_binary", "init_credentials", "issue_credential",
           "spawn_node", "read_listening_address"]


def init_credentials(directory):
    """Creates a cluster CA with the credentials "node" and "session" in directory
    (what `shardflow certs init` does). FailedPreconditionError if it has a CA."""
    from . import _core
    _core.init_cluster_credentials(str(directory))


def issue_credential(directory, role, name, hosts=(), namespace=""):
    """Issues credential name ("node" or "session" role) signed by directory's CA;
    a session's in `namespace` (its sessions see only that namespace's state)."""
    from . import _core
    _core.issue_cluster_credential(str(directory), str(role), str(name), [str(h) for h in hosts],
                                   str(namespace))

_LISTENING = re.compile(r"listening on (\S+:\d+)")


def find_shardflow_binary():
    """The `shardflow` program: $SF_BIN_DIR, the build's or the install prefix's bin/, or PATH; NotFoundError otherwise."""
    candidates = []
    if os.environ.get("SF_BIN_DIR"):
        candidates.append(os.path.join(os.environ["SF_BIN_DIR"], "shardflow"))
    here = os.path.dirname(os.path.abspath(__file__))
    candidates.append(os.path.normpath(os.path.join(here, "..", "..", "bin", "shardflow")))  # build/
    candidates.append(os.path.normpath(os.path.join(here, "..", "..", "..", "..", "bin", "shardflow")))  # installed
    found = shutil.which("shardflow")
    if found:
        candidates.append(found)
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise errors.NotFoundError("cannot find the `shardflow` program (looked at " + ", ".join(candidates) +
                               "); build it or set SF_BIN_DIR")


# A node gets SIGTERM when this process dies (Linux's parent-death signal).
# util-linux's setpriv (always on Debian) sets it and execs the node, so no
# Python runs between fork and exec; without it a preexec_fn does, with prctl
# resolved here beforehand so the child only makes the one call.
_SETPRIV = shutil.which("setpriv")
try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent():
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def spawn_node(args, binary=None):
    """Starts `shardflow node` (binary, default find_shardflow_binary()) with args, the list after "node":
    a subprocess.Popen with text pipes that gets SIGTERM when this process dies (Linux's parent-death
    signal, from the calling thread). read_listening_address(p) waits until it serves."""
    args = [binary or find_shardflow_binary(), "node"] + [str(a) for a in args]
    if _SETPRIV:
        return subprocess.Popen([_SETPRIV, "--pdeathsig", "TERM", "--"] + args, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            preexec_fn=_die_with_parent, text=True)


def read_listening_address(p, timeout_s):
    """The HOST:PORT node process p (from spawn_node) prints once it serves; its output is drained from
    then on. UnavailableError (with its stderr) when it exits first, DeadlineExceededError after timeout_s."""
    result = {}
    stderr_tail = []

    def read():
        for line in p.stdout:
            m = _LISTENING.search(line)
            if m:
                result["address"] = m.group(1)
                break
        # Keep draining so a chatty node never blocks on a full pipe.
        for _ in p.stdout:
            pass

    def drain_stderr():
        for line in p.stderr:
            stderr_tail.append(line)
            del stderr_tail[:-20]

    p.sf_stderr_tail = stderr_tail  # the last lines it wrote, for errors after it started
    t = threading.Thread(target=read, daemon=True)
    t.start()
    e = threading.Thread(target=drain_stderr, daemon=True)
    e.start()
    deadline = time.monotonic() + timeout_s
    while "address" not in result:
        if p.poll() is not None:
            e.join(5)
            raise errors.UnavailableError(f"node process exited with {p.returncode}: {''.join(stderr_tail).strip()}")
        if time.monotonic() > deadline:
            raise errors.DeadlineExceededError(f"node process did not listen within {timeout_s} s")
        t.join(0.05)
    return result["address"]


def _stop(procs, tmpdir, etcd):
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + 10
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    etcd.clear()  # after the nodes, which leave etcd as they stop; dropping it stops etcd
    shutil.rmtree(tmpdir, ignore_errors=True)


class _Closable:
    """close() runs self._finalizer (stops the processes, removes the temporary files; idempotent); a with
    block closes on exit."""

    def close(self):
        """Stops what this object started and removes its temporary files (idempotent); raises nothing."""
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class LocalCluster(_Closable):
    """nodes `shardflow node` processes joined into one cluster on 127.0.0.1."""

    def __init__(self, nodes=2, threads=1, lifetime_s=3600, start_timeout_s=60, log=False, binary=None):
        if int(nodes) < 1:
            raise errors.InvalidArgumentError(f"a LocalCluster needs at least one node, got {nodes}")
        self.binary = binary or find_shardflow_binary()
        self._tmp = tempfile.mkdtemp(prefix="sf-cluster-")
        from . import _core
        self.tls_dir = os.path.join(self._tmp, "tls")
        _core.init_cluster_credentials(self.tls_dir)
        self._procs = []
        self.addresses = []
        self._etcd = []
        self._finalizer = weakref.finalize(self, _stop, self._procs, self._tmp, self._etcd)
        try:
            # The cluster's membership lives in etcd: a real one, on a free port.
            self._etcd.append(_core.LocalEtcd(self.tls_dir))
            self.etcd = self._etcd[0].endpoint
            for i in range(int(nodes)):
                args = ["--listen", "127.0.0.1:0", "--tls-dir", self.tls_dir,
                        "--threads", str(int(threads)), "--lifetime-s", str(int(lifetime_s)),
                        "--name", f"local{i}"]
                args += ["--etcd", self.etcd, "--lease-ttl-s", "1"]
                if log:
                    args.append("--log")
                p = spawn_node(args, self.binary)
                self._procs.append(p)
                self.addresses.append(read_listening_address(p, start_timeout_s))
            self._wait_members(start_timeout_s)
        except BaseException:
            self.close()
            raise

    def _wait_members(self, timeout_s):
        # A node listens before the others know it: a session connecting now
        # could miss it. Wait until a client session sees every member.
        from . import _core, graph as _graph
        g = _graph.Graph()
        deadline = time.monotonic() + timeout_s
        want = len(self.addresses)
        while True:
            try:
                s = _core.cluster_session(g._g, self.addresses[0], self.tls_dir, "", False, 0, 0, 5000, "", False, 60000)
                n = len(s.tasks())
                s.close()
                if n >= want:
                    return
            except errors.OpError:
                pass
            if time.monotonic() > deadline:
                raise errors.DeadlineExceededError(f"the cluster did not reach {want} members within {timeout_s} s")
            time.sleep(0.05)

    @property
    def address(self):
        """The first member's HOST:PORT (what ClusterSession connects to)."""
        return self.addresses[0]

    @property
    def pids(self):
        return [p.pid for p in self._procs]

    def __repr__(self):
        return f"<sf.LocalCluster {self.addresses}>"


class LocalEnvironment(_Closable):
    """What the processes of a TF 1.x cluster on this machine need to become a shardflow cluster: fresh
    credentials (tls_dir) and an etcd on 127.0.0.1 (etcd), given to tf.train.Server through the
    environment variables in env (SHARDFLOW_TLS_DIR, SHARDFLOW_ETCD):

        with sf.cluster.LocalEnvironment() as local:
            subprocess.run([sys.executable, "trainer.py", "--job_name=ps", ...], env=dict(os.environ, **local.env))

    close() (or leaving the block, or collecting the object) stops etcd and removes the credentials.
    """

    def __init__(self):
        from . import _core
        self._tmp = tempfile.mkdtemp(prefix="sf-tf1-")
        self._etcd = []
        self._finalizer = weakref.finalize(self, _stop, [], self._tmp, self._etcd)
        try:
            self.tls_dir = os.path.join(self._tmp, "tls")
            _core.init_cluster_credentials(self.tls_dir)
            self._etcd.append(_core.LocalEtcd(self.tls_dir))
            self.etcd = self._etcd[0].endpoint
        except BaseException:
            self.close()
            raise

    @property
    def env(self):
        """{"SHARDFLOW_TLS_DIR": tls_dir, "SHARDFLOW_ETCD": etcd}."""
        return {"SHARDFLOW_TLS_DIR": self.tls_dir, "SHARDFLOW_ETCD": self.etcd}
