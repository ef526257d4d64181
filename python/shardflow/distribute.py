"""TF 1.x's distributed-training names: tf.train.ClusterSpec, tf.train.Server, tf.train.replica_device_setter.

ClusterSpec is TF 1.x's description of a cluster (jobs, each a list or a
{task index: "host:port"} dict of tasks), with TF's methods and errors.

How a TF 1.x cluster maps onto shardflow (docs/PYTHON.md, "Coming from
TensorFlow 1.x"): the tasks of the "ps" job are shardflow nodes, and the
workers are clients of them.

- tf.train.Server(cluster, job_name="ps", task_index=i) starts a `shardflow
  node` process listening on ps task i's address (named ps<i>); join() waits
  for it. It stops when this process dies.
- tf.train.Server(cluster, job_name="worker", ...) starts nothing: a worker
  holds no state in shardflow. Its target names the ps nodes.
- tf.Session(server.target) and MonitoredTrainingSession(master=
  server.target, is_chief=...) are cluster sessions (sf.ClusterSession) over
  the ps nodes, with one logical task per ps task. Variables live on the
  nodes, keyed by name, so the workers' graphs share them as TF's parameter
  servers; the chief initializes or restores them and the other workers wait
  until they are.
- tf.train.replica_device_setter places the variables (the ops of ps_ops) on
  ps task k as /job:worker/task:k, shardflow's name for its k-th logical task,
  by the ps_strategy (round robin by default). Other ops keep the device they
  request without worker_device: a worker's computation runs on the nodes,
  beside its inputs.

The nodes' settings come from the environment (or Server's keywords):
SHARDFLOW_TLS_DIR, the cluster's credentials (`shardflow certs init DIR`,
copied to every machine), or SHARDFLOW_INSECURE=1 for plaintext on a trusted
network; SHARDFLOW_ETCD=HOST:PORT[,...], the etcd the nodes register in,
needed with more than one ps task. sf.cluster.LocalEnvironment makes both on
one machine.
"""

import os
import threading
import time
import urllib.parse
import weakref

from . import errors

__all__ = ["ClusterSpec", "Server", "replica_device_setter", "Supervisor", "SyncReplicasOptimizer"]

_SCHEME = "shardflow://"

class ClusterSpec:
    """TF 1.x's tf.train.ClusterSpec: {job name: ["host:port", ...] or {task index: "host:port"}}."""

    def __init__(self, cluster):
        if isinstance(cluster, ClusterSpec):
            cluster = cluster.as_dict()
        if not isinstance(cluster, dict):
            raise TypeError("`cluster` must be a dictionary mapping one or more job names to (i) a list of "
                            "network addresses, or (ii) a dictionary mapping integer task indices to network "
                            "addresses; or a tf.train.ClusterSpec")
        self._jobs = {}
        for job, tasks in cluster.items():
            if not isinstance(job, str):
                raise TypeError(f"Job name must be a string, got {job!r}")
            if isinstance(tasks, (list, tuple)):
                parsed = dict(enumerate(tasks))
            elif isinstance(tasks, dict):
                parsed = {}
                for i, addr in tasks.items():
                    if not isinstance(i, int) or isinstance(i, bool):
                        raise TypeError(f"Task index must be an integer, got {i!r} in job {job!r}")
                    parsed[i] = addr
            else:
                raise TypeError("The tasks for job %r must be a list or a dictionary from integers to strings."
                                % job)
            for i, addr in parsed.items():
                if not isinstance(addr, str):
                    raise TypeError(f"Task address must be a string, got {addr!r} for /job:{job}/task:{i}")
            self._jobs[job] = dict(sorted(parsed.items()))

    def __bool__(self):
        return bool(self._jobs)

    def __eq__(self, other):
        return isinstance(other, ClusterSpec) and self._jobs == other._jobs

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash(repr(self))

    def __repr__(self):
        return f"ClusterSpec({self.as_dict()!r})"

    def as_dict(self):
        """{job: [addresses]} where a job's indices are 0..n-1, else {job: {index: address}}, as TF."""
        out = {}
        for job, tasks in self._jobs.items():
            if list(tasks) == list(range(len(tasks))):
                out[job] = list(tasks.values())
            else:
                out[job] = dict(tasks)
        return out

    @property
    def jobs(self):
        """The job names, sorted."""
        return sorted(self._jobs)

    def _tasks(self, job_name):
        if job_name not in self._jobs:
            raise ValueError(f"No such job in cluster: {job_name!r}")
        return self._jobs[job_name]

    def num_tasks(self, job_name):
        """How many tasks job_name has (ValueError for an unknown job)."""
        return len(self._tasks(job_name))

    def task_indices(self, job_name):
        """The task indices of job_name, sorted."""
        return list(self._tasks(job_name))

    def task_address(self, job_name, task_index):
        """The address of /job:job_name/task:task_index (ValueError when there is none)."""
        tasks = self._tasks(job_name)
        if task_index not in tasks:
            raise ValueError(f"No task with index {task_index!r} in job {job_name!r}")
        return tasks[task_index]

    def job_tasks(self, job_name):
        """job_name's addresses by index, None where an index has no task."""
        tasks = self._tasks(job_name)
        if not tasks:
            return []
        return [tasks.get(i) for i in range(max(tasks) + 1)]

    def as_cluster_def(self):
        raise errors.UnimplementedError("ClusterSpec.as_cluster_def: shardflow has no ClusterDef protocol buffer; "
                                        "use as_dict()")


def _env_flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _stop_node(procs):
    for p in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except Exception:  # noqa: BLE001 - TimeoutExpired: kill it
                p.kill()
                p.wait()


class Server:
    """TF 1.x's tf.train.Server over shardflow: a ps task's server is a `shardflow node` process on its
    address; a worker's starts nothing, and its target names the ps nodes (see the module's note).

    Beyond TF's arguments: tls_dir (default $SHARDFLOW_TLS_DIR), insecure (default $SHARDFLOW_INSECURE),
    etcd (default $SHARDFLOW_ETCD), start_timeout_s (how long a node may take to listen).
    """

    def __init__(self, server_or_cluster_def, job_name=None, task_index=None, protocol=None, config=None,
                 start=True, tls_dir=None, insecure=None, etcd=None, start_timeout_s=60):
        if isinstance(server_or_cluster_def, Server):
            server_or_cluster_def = server_or_cluster_def._cluster
        cluster = ClusterSpec(server_or_cluster_def)
        if not cluster:
            raise ValueError("The cluster must name at least one job")
        if job_name is None:
            if len(cluster.jobs) != 1:
                raise ValueError("Must specify an explicit `job_name`.")
            job_name = cluster.jobs[0]
        if task_index is None:
            indices = cluster.task_indices(job_name)
            if len(indices) != 1:
                raise ValueError("Must specify an explicit `task_index`.")
            task_index = indices[0]
        self._address = cluster.task_address(job_name, int(task_index))
        if protocol not in (None, "grpc"):
            raise errors.UnimplementedError(f"tf.train.Server(protocol={protocol!r}): shardflow's nodes speak their "
                                            "own protocol over TLS; leave protocol out (or \"grpc\")")
        if "ps" not in cluster.jobs:
            raise errors.UnimplementedError(
                "tf.train.Server: shardflow maps a TF cluster's \"ps\" job onto its nodes (each ps task is a "
                f"`shardflow node` process) and this cluster has none (jobs {cluster.jobs}). For between-graph "
                "replication add a \"ps\" job. In-graph replication (one client placing replicas with "
                "tf.device(\"/job:worker/task:i\")) is not run through tf.train.Server: start `shardflow node` "
                "processes (or sf.LocalCluster(nodes=n)) and run the same graph in sf.ClusterSession(graph, "
                "cluster=...), whose tasks are /job:worker/task:0..n-1 (docs/CLUSTER.md, \"Connect a session\")")
        ps = cluster.job_tasks("ps")
        if None in ps:
            raise ValueError(f"the ps job's task indices must be 0..n-1, got {cluster.task_indices('ps')}")
        self._cluster, self._job, self._task = cluster, job_name, int(task_index)
        self._ps = ps
        self._tls_dir = tls_dir if tls_dir is not None else os.environ.get("SHARDFLOW_TLS_DIR", "")
        self._insecure = bool(insecure) if insecure is not None else _env_flag("SHARDFLOW_INSECURE")
        self._etcd = etcd if etcd is not None else os.environ.get("SHARDFLOW_ETCD", "")
        if not self._tls_dir and not self._insecure:
            raise errors.FailedPreconditionError(
                "tf.train.Server needs the shardflow cluster's credentials: set SHARDFLOW_TLS_DIR to a directory "
                "made by `shardflow certs init DIR` (the same on every task), or SHARDFLOW_INSECURE=1 on a trusted "
                "network (sf.cluster.LocalEnvironment makes them on one machine)")
        if job_name == "ps" and len(ps) > 1 and not self._etcd:
            raise errors.FailedPreconditionError(
                f"tf.train.Server: a cluster of {len(ps)} ps tasks is one shardflow cluster through etcd: set "
                "SHARDFLOW_ETCD=HOST:PORT to the etcd every ps task registers in (docs/CLUSTER.md; "
                "sf.cluster.LocalEnvironment starts one on this machine)")
        self._threads = 0
        if config is not None and getattr(config, "intra_op_parallelism_threads", 0):
            self._threads = int(config.intra_op_parallelism_threads)
        self._start_timeout_s = start_timeout_s
        self._procs = []
        self._finalizer = weakref.finalize(self, _stop_node, self._procs)
        self._started = False
        self._local = None
        if start:
            self.start()

    @property
    def target(self):
        """What tf.Session(target) and MonitoredTrainingSession(master=) take:
        "shardflow://PS0,PS1,...?tls_dir=DIR" (or insecure=1)."""
        query = {"insecure": "1"} if self._insecure else {"tls_dir": os.path.abspath(self._tls_dir)}
        return _SCHEME + ",".join(self._ps) + "?" + urllib.parse.urlencode(query)

    @property
    def server_def(self):
        raise errors.UnimplementedError("tf.train.Server.server_def: shardflow has no ServerDef protocol buffer")

    def start(self):
        """A ps task: starts its `shardflow node` on its address (once) and waits until it serves."""
        if self._started:
            return
        self._started = True
        if self._job != "ps":
            return
        from . import cluster as _cluster
        args = ["--listen", self._address, "--name", f"ps{self._task}"]
        args += ["--insecure"] if self._insecure else ["--tls-dir", self._tls_dir]
        if self._etcd:
            args += ["--etcd", self._etcd]
            if os.environ.get("SHARDFLOW_CLUSTER"):
                args += ["--cluster", os.environ["SHARDFLOW_CLUSTER"]]
        if self._threads:
            args += ["--threads", str(self._threads)]
        p = _cluster.spawn_node(args)
        self._procs.append(p)
        try:
            _cluster.read_listening_address(p, self._start_timeout_s)
        except BaseException:
            self._finalizer()
            raise

    def join(self):
        """Blocks as TF's join does: a ps task until its node stops (UnavailableError when it failed), a worker
        for ever (it serves nothing here)."""
        if self._job != "ps":
            threading.Event().wait()
        for p in self._procs:
            code = p.wait()
            if code not in (0, -15):
                tail = "".join(getattr(p, "sf_stderr_tail", [])).strip()
                raise errors.UnavailableError(f"the node of /job:ps/task:{self._task} stopped with {code}: {tail}")

    def close(self):
        """shardflow's (TF's Server has none): stops a ps task's node now, not when this process ends."""
        self._finalizer()

    @staticmethod
    def create_local_server(config=None, start=True):
        """A one-node shardflow cluster on 127.0.0.1 (sf.LocalCluster) whose target tf.Session takes."""
        from .cluster import LocalCluster
        local = LocalCluster(nodes=1)
        s = Server.__new__(Server)
        s._cluster = ClusterSpec({"ps": [local.address]})
        s._job, s._task, s._ps, s._address = "ps", 0, [local.address], local.address
        s._tls_dir, s._insecure, s._etcd = local.tls_dir, False, local.etcd
        s._procs, s._started, s._local = [], True, local
        s._finalizer = weakref.finalize(s, local.close)
        return s


def _parse_target(target):
    """(addresses, tls_dir, insecure) of a Server's target; None for a target that is not shardflow's."""
    if not isinstance(target, str) or not target.startswith(_SCHEME):
        return None
    rest = target[len(_SCHEME):]
    hosts, _, query = rest.partition("?")
    q = urllib.parse.parse_qs(query)
    addresses = [h for h in hosts.split(",") if h]
    if not addresses:
        raise errors.InvalidArgumentError(f"target {target!r} names no node")
    insecure = q.get("insecure", ["0"])[0] == "1"
    tls_dir = q.get("tls_dir", [""])[0]
    if not tls_dir and not insecure:
        tls_dir = os.environ.get("SHARDFLOW_TLS_DIR", "")
    return addresses, tls_dir, insecure


def _connect(graph, target, wait_s=600):
    """A cluster session (the C++ binding's) over target's nodes with one logical task per node, once every
    node listed is a member: waits up to wait_s for them to start, as TF's workers wait for their ps tasks."""
    from . import _core, graph as _graph
    parsed = _parse_target(target)
    if parsed is None:
        raise errors.UnimplementedError(
            f"Session(target={target!r}): shardflow runs on a cluster with the target of a tf.train.Server "
            "(\"shardflow://...\", its ps tasks are shardflow nodes) or with sf.ClusterSession(graph, address=...)")
    addresses, tls_dir, insecure = parsed
    if not tls_dir and not insecure:
        raise errors.FailedPreconditionError(f"target {target!r} names no credentials: set SHARDFLOW_TLS_DIR")
    probe = _graph.Graph()
    deadline = time.monotonic() + wait_s
    delay, last = 0.05, None
    while True:
        for address in addresses:
            try:
                s = _core.cluster_session(probe._g, address, tls_dir, "", insecure, 0, 0, 5000, "", False, 60000)
                members = len(set(s.tasks()))
                s.close()
                if members >= len(addresses):
                    return _core.cluster_session(graph._g, address, tls_dir, "", insecure, len(addresses), 0,
                                                 10000, "", True, 60000)
                last = f"{members} of the {len(addresses)} ps nodes are members"
            except (errors.UnavailableError, errors.DeadlineExceededError) as e:
                last = str(e)
        if time.monotonic() > deadline:
            raise errors.UnavailableError(f"the ps nodes {addresses} were not all up within {wait_s} s: {last}")
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


class _ReplicaDeviceChooser:
    """TF 1.x's replica_device_setter function, mapped onto shardflow's tasks (see the module's note)."""

    def __init__(self, ps_tasks, ps_device, ps_ops, ps_strategy):
        self._ps_tasks, self._ps_job = ps_tasks, _job_of(ps_device)
        self._ps_ops, self._ps_strategy = ps_ops, ps_strategy

    def device_function(self, op):
        current = op.device or ""
        if op.type not in self._ps_ops:
            return current
        job = _job_of(current)
        if job not in (None, self._ps_job):
            return current  # an explicit device of another job wins (merge_devices)
        task = int(self._ps_strategy(op))
        if not 0 <= task < self._ps_tasks:
            raise ValueError(f"ps_strategy gave task {task} for {op.name!r}; there are {self._ps_tasks} ps tasks")
        return f"/job:worker/task:{task}"


def _job_of(device):
    for part in (device or "").split("/"):
        if part.startswith("job:"):
            return part[4:]
    return None


class _RoundRobinStrategy:
    def __init__(self, num_tasks):
        self._num_tasks, self._next = num_tasks, 0

    def __call__(self, op):
        task = self._next
        self._next = (self._next + 1) % self._num_tasks
        return task


# TF 1.x's ps_ops (what goes to the ps tasks), and shardflow's variable op.
_PS_OPS = ("VarHandle", "Variable", "VariableV2", "AutoReloadVariable", "VarHandleOp", "MutableHashTable",
           "MutableHashTableV2", "MutableHashTableOfTensors", "MutableHashTableOfTensorsV2", "MutableDenseHashTable",
           "MutableDenseHashTableV2")


def replica_device_setter(ps_tasks=0, ps_device="/job:ps", worker_device="/job:worker", merge_devices=True,
                          cluster=None, ps_ops=None, ps_strategy=None):
    """TF 1.x's device function for between-graph replication: with tf.device(it), each variable goes to a ps
    task (round robin, or ps_strategy(op) -> task), which in shardflow is the logical task
    /job:worker/task:k; other ops keep their own device (worker_device is not used: a worker's ops run on
    the nodes). None when there are no ps tasks, as TF."""
    if cluster is not None:
        cluster = cluster if isinstance(cluster, ClusterSpec) else ClusterSpec(cluster)
        ps_job = _job_of(ps_device) or "ps"
        ps_tasks = cluster.num_tasks(ps_job) if ps_job in cluster.jobs else 0
    if ps_tasks == 0:
        return None
    if not merge_devices:
        raise errors.UnimplementedError("replica_device_setter(merge_devices=False) is not supported (TF 1.x "
                                        "deprecated it): an op's own device always wins")
    if ps_strategy is None:
        ps_strategy = _RoundRobinStrategy(ps_tasks)
    elif not callable(ps_strategy):
        raise TypeError("ps_strategy must be callable")
    return _ReplicaDeviceChooser(ps_tasks, ps_device, tuple(ps_ops or _PS_OPS), ps_strategy).device_function


class Supervisor:
    """TF 1.x's tf.train.Supervisor (deprecated there): refused with what to use instead."""

    def __init__(self, *args, **kwargs):
        raise errors.UnimplementedError(
            "tf.train.Supervisor is not supported: use tf.train.MonitoredTrainingSession(master=server.target, "
            "is_chief=..., checkpoint_dir=...), which TF 1.x recommends in its place and shardflow runs on a "
            "tf.train.Server's ps nodes")


class SyncReplicasOptimizer:
    """TF 1.x's tf.train.SyncReplicasOptimizer: refused with what to use instead."""

    def __init__(self, *args, **kwargs):
        raise errors.UnimplementedError(
            "tf.train.SyncReplicasOptimizer is not supported: between-graph replication on shardflow updates the "
            "ps nodes' variables asynchronously; for synchronous data parallelism use one graph whose replicas "
            "all-reduce their gradients (docs/CLUSTER.md, \"All-reduce between nodes\")")
