"""TF 1.x's distributed-training names: tf.train.ClusterSpec, tf.train.Server, tf.train.replica_device_setter.

ClusterSpec is TF 1.x's description of a cluster (jobs, each a list or a
{task index: "host:port"} dict of tasks), with TF's methods and errors.

Server and replica_device_setter raise UnimplementedError saying what to do
instead: shardflow's cluster works differently. There is no parameter-server
job and no in-process server: a cluster is `shardflow node` processes
registered in etcd (docs/CLUSTER.md), the cluster places every variable on
its nodes by its shard map (what replica_device_setter arranged by hand),
and a worker is a sf.ClusterSession(graph, address=...) connected to any
node. Between-graph replication is several ClusterSessions over the same
nodes, each running its own copy of the graph; the variables they share are
one copy, as with TF's parameter servers.
"""

from . import errors

__all__ = ["ClusterSpec", "Server", "replica_device_setter"]

_HOW = ("shardflow has no parameter-server job and no in-process server: start `shardflow node` processes "
        "(docs/CLUSTER.md, or sf.LocalCluster on one machine), which place every variable by the cluster's shard "
        "map, and run each worker's graph in sf.ClusterSession(graph, address=NODE) without a "
        "tf.device(tf.train.replica_device_setter(...)) block")


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


class Server:
    """TF 1.x's tf.train.Server: refused (UnimplementedError) with what to use instead."""

    def __init__(self, server_or_cluster_def=None, job_name=None, task_index=None, protocol=None, config=None,
                 start=True):
        raise errors.UnimplementedError(f"tf.train.Server is not supported: {_HOW}")

    @staticmethod
    def create_local_server(config=None, start=True):
        raise errors.UnimplementedError("tf.train.Server.create_local_server is not supported: a tf.Session runs "
                                        "the graph in this process already; for a cluster on one machine use "
                                        "sf.LocalCluster and sf.ClusterSession")


def replica_device_setter(ps_tasks=0, ps_device="/job:ps", worker_device="/job:worker", merge_devices=True,
                          cluster=None, ps_ops=None, ps_strategy=None):
    """TF 1.x's device function for parameter servers: refused (UnimplementedError) with what to use instead."""
    raise errors.UnimplementedError(f"tf.train.replica_device_setter is not supported: {_HOW}")
