"""LocalCluster and ClusterSession: node processes on 127.0.0.1, steps across them, checkpoints, cleanup."""

import os
import shutil
import tempfile
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import shardflow as sf


def wait_gone(pids, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = []
        for p in pids:
            try:
                os.kill(p, 0)
                with open(f"/proc/{p}/stat") as f:
                    if f.read().split()[2] != "Z":
                        alive.append(p)
            except (ProcessLookupError, FileNotFoundError):
                pass
        if not alive:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def cluster():
    c = sf.LocalCluster(nodes=2)
    yield c
    c.close()


def test_cluster_session_runs_across_nodes(cluster, tmp_path):
    g = sf.Graph()
    with g.as_default():
        x = sf.placeholder(sf.float32, [None, 3], name="x")
        y = sf.placeholder(sf.float32, [None, 1], name="y")
        with g.device("/job:worker/task:0"):
            w = sf.Variable(np.zeros((3, 1), np.float32), name="w")
        with g.device("/job:worker/task:1"):
            pred = x @ w
            loss = sf.ops.mean(sf.ops.square(pred - y))
        train = sf.train.GradientDescentOptimizer(0.1).minimize(loss)
        init = sf.global_variables_initializer()
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((32, 3)).astype(np.float32)
    ys = xs @ np.array([[1.0], [2.0], [-1.0]], np.float32)
    with sf.ClusterSession(g, cluster=cluster) as s:
        assert len(s.tasks) == 2
        s.run(init)
        first = s.run(loss, {x: xs, y: ys})
        for _ in range(50):
            s.run(train, {x: xs, y: ys})
        assert s.run(loss, {x: xs, y: ys}) < 0.1 * first
        d = tmp_path / "ckpt"
        saver = sf.train.CheckpointSaver()
        saver.save(s, d, global_step=50)
        trained = s.run(w)
        s.run(w.assign(np.zeros((3, 1), np.float32)))
        assert saver.restore(s, d) == 50
        np.testing.assert_array_equal(s.run(w), trained)
    # A cluster's checkpoint restores in a local session.
    with sf.Session(g) as local:
        sf.train.CheckpointSaver().restore(local, d)
        np.testing.assert_array_equal(local.run(w), trained)


def test_cluster_errors(cluster):
    g = sf.Graph()
    with g.as_default():
        x = sf.placeholder(sf.float32, [2], name="x")
        y = x * 2.0
    with pytest.raises(sf.errors.PermissionDeniedError):
        other = tempfile.mkdtemp(prefix="sf-other-ca-")
        try:
            sf.cluster.init_credentials(os.path.join(other, "tls"))
            sf.ClusterSession(g, address=cluster.address, tls_dir=os.path.join(other, "tls"))
        finally:
            shutil.rmtree(other, ignore_errors=True)
    with sf.ClusterSession(g, cluster=cluster) as s:
        with pytest.raises(sf.errors.InvalidArgumentError):
            s.run(y, {x: [1.0, 2.0, 3.0]})
        np.testing.assert_array_equal(s.run(y, {x: [1.0, 2.0]}), [2.0, 4.0])
    with pytest.raises(sf.errors.UnavailableError):
        sf.ClusterSession(g, address="127.0.0.1:1", tls_dir=cluster.tls_dir, request_timeout_ms=2000)


def test_nodes_stop_on_close():
    c = sf.LocalCluster(nodes=1)
    pids = c.pids
    c.close()
    assert wait_gone(pids)


def test_nodes_stop_when_the_python_process_dies():
    env = dict(os.environ)
    code = textwrap.dedent("""
        import sys, shardflow as sf
        c = sf.LocalCluster(nodes=2)
        print(" ".join(map(str, c.pids)), flush=True)
        sys.stdin.read()
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=env)
    try:
        line = p.stdout.readline()
        pids = [int(v) for v in line.split()]
        assert len(pids) == 2
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        assert wait_gone(pids)
    finally:
        if p.poll() is None:
            p.kill()


def test_a_step_with_no_progress_fails_after_its_deadline(cluster):
    g = sf.Graph()
    with g.as_default():
        with g.device("/job:worker/task:0"):
            q = sf.FIFOQueue([sf.float32], shapes=[[]])
            x = q.dequeue()
            enq = q.enqueue([sf.constant(np.float32(3))])
    with sf.ClusterSession(g, cluster=cluster, step_progress_timeout_ms=500) as s:
        t0 = time.monotonic()
        with pytest.raises(sf.errors.DeadlineExceededError, match="no op of the step finished"):
            s.run(x)
        assert time.monotonic() - t0 >= 0.5
        s.run(enq)  # ends the abandoned dequeue
        s.run(enq)
        assert s.run(x) == np.float32(3)
    with pytest.raises(sf.errors.InvalidArgumentError, match="step_progress_timeout_ms"):
        sf.ClusterSession(g, cluster=cluster, step_progress_timeout_ms=-1)


def test_a_session_credential_carries_its_namespace(tmp_path):
    from shardflow import cluster as sfc
    d = tmp_path / "tls"
    sfc.init_credentials(d)
    sfc.issue_credential(d, "session", "job_a", namespace="team_a")
    subject = subprocess.run(["openssl", "x509", "-noout", "-subject", "-in", str(d / "job_a.crt")],
                             capture_output=True, text=True, check=True).stdout
    assert "OU = team_a" in subject and "CN = session:job_a" in subject
    # A node serves every namespace; a bad name is refused by name.
    with pytest.raises(sf.errors.InvalidArgumentError, match="namespace"):
        sfc.issue_credential(d, "node", "n2", namespace="team_a")
    with pytest.raises(sf.errors.InvalidArgumentError, match="namespace"):
        sfc.issue_credential(d, "session", "job_b", namespace="a/b")
