"""TF 1.x's run-time checks (tf.Assert, tf.debugging.assert_*, tf.check_numerics) and tf.errors,
written as TF 1.x programs use them."""

import pickle

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def test_assert_passes_or_fails_the_step_with_its_message_and_values():
    x = tf.placeholder(tf.float32, [None])
    check = tf.Assert(tf.reduce_all(x > 0), ["x must be positive:", x, "count", tf.size(x)])
    with tf.control_dependencies([check]):
        y = tf.log(x)
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(y, {x: [1.0, np.e]}), [0.0, 1.0], rtol=1e-6)
        with pytest.raises(tf.errors.InvalidArgumentError) as e:
            sess.run(y, {x: [1.0, -2.0, 3.0, 4.0]})
        # TF's form: each data item in brackets, a tensor as its first 3 values then "...".
        assert "assertion failed: [x must be positive:] [1 -2 3...] [count] [4]" in e.value.message
        assert e.value.op == "Assert" and e.value.error_code == tf.errors.INVALID_ARGUMENT
        # the session still runs after a failed assertion
        np.testing.assert_allclose(sess.run(y, {x: [1.0]}), [0.0])


def test_assert_summarize_braces_and_every_dtype():
    a = tf.constant(np.arange(6, dtype=np.int64).reshape(2, 3))
    b = tf.constant(np.array([200, 3], np.uint8))
    c = tf.constant([True, False])
    op = tf.Assert(tf.constant(False), ["{literal} braces", a, b, c], summarize=-1, name="my_check")
    assert op.type == "Assert" and op.name == "my_check"
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match=r"assertion failed: \[\{literal\} braces\] \[0 1 2 3 4 5\] \[200 3\] \[1 0\]"):
            sess.run(op)
    op2 = tf.Assert(tf.constant(False), [a], summarize=2)
    with tf.Session() as sess:
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"assertion failed: \[0 1\.\.\.\]"):
            sess.run(op2)


def test_assert_refuses_bad_input_by_name():
    with pytest.raises(tf.errors.InvalidArgumentError, match="condition must be bool"):
        tf.Assert(tf.constant(1.0), ["x"])
    with pytest.raises(tf.errors.InvalidArgumentError, match="list of strings and tensors"):
        tf.Assert(tf.constant(True), "not a list")
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be a scalar"):
        tf.Assert(tf.constant([True, True]), ["x"])
    # a condition of unknown shape is checked when the step runs
    p = tf.placeholder(tf.bool)
    op = tf.Assert(p, ["x"])
    with tf.Session() as sess:
        sess.run(op, {p: True})
        with pytest.raises(tf.errors.InvalidArgumentError, match="condition must be one bool"):
            sess.run(op, {p: [True, False]})


def test_assert_in_an_untaken_cond_branch_does_not_fire():
    x = tf.placeholder(tf.float32, [])

    def guarded():
        with tf.control_dependencies([tf.Assert(x > 0, ["x =", x])]):
            return tf.sqrt(x)

    y = tf.cond(x > 0, guarded, lambda: tf.constant(-1.0))
    with tf.Session() as sess:
        assert sess.run(y, {x: 4.0}) == pytest.approx(2.0)
        assert sess.run(y, {x: -4.0}) == -1.0


def test_binary_asserts_at_run_time_with_tf_messages():
    x = tf.placeholder(tf.int32, [None])
    y = tf.constant([1, 2, 3])
    cases = {
        "assert_equal": (tf.assert_equal, [1, 2, 3], [1, 2, 4], "=="),
        "assert_none_equal": (tf.debugging.assert_none_equal, [4, 5, 6], [1, 0, 0], "!="),
        "assert_less": (tf.assert_less, [0, 1, 2], [0, 1, 3], "<"),
        "assert_less_equal": (tf.assert_less_equal, [1, 2, 3], [1, 2, 4], "<="),
        "assert_greater": (tf.assert_greater, [2, 3, 4], [2, 3, 3], ">"),
        "assert_greater_equal": (tf.debugging.assert_greater_equal, [1, 2, 3], [0, 2, 3], ">="),
    }
    ops = {k: (fn(x, y, message=f"{k} failed"), good, bad, sym) for k, (fn, good, bad, sym) in cases.items()}
    with tf.Session() as sess:
        for k, (op, good, bad, sym) in ops.items():
            sess.run(op, {x: good})
            with pytest.raises(tf.errors.InvalidArgumentError) as e:
                sess.run(op, {x: bad})
            msg = e.value.message
            assert f"[{k} failed] [Condition x {sym} y did not hold element-wise:]" in msg, msg
            assert f"[x ({x.name}) = ] [{' '.join(map(str, bad))}]" in msg, msg


def test_sign_asserts_and_static_checks():
    x = tf.placeholder(tf.float32, [None])
    checks = [tf.assert_positive(x), tf.assert_non_negative(x), tf.assert_negative(-x - 1),
              tf.assert_non_positive(-x)]
    with tf.Session() as sess:
        sess.run(checks, {x: [1.0, 2.0]})
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"Condition x > 0 did not hold"):
            sess.run(checks[0], {x: [1.0, 0.0]})
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"Condition x >= 0 did not hold"):
            sess.run(checks[1], {x: [-1.0]})
    # Constants decide at graph construction, as TF 1.x: a false check raises now, a true one adds no Assert.
    with pytest.raises(tf.errors.InvalidArgumentError, match="Condition x == y did not hold"):
        tf.assert_equal(tf.constant([1, 2]), tf.constant([1, 3]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Condition x > 0"):
        tf.assert_positive(tf.constant([1.0, -1.0]))
    ok = tf.assert_equal(tf.constant([1, 2]), [1, 2])
    assert ok.type == "NoOp"
    with pytest.raises(tf.errors.InvalidArgumentError, match="int32 but y .* float32"):
        tf.assert_equal(tf.constant([1]), tf.constant([1.0]))


def test_rank_type_integer_scalar_asserts():
    x = tf.placeholder(tf.float32, [None, 3])
    assert tf.assert_rank(x, 2).type == "NoOp"
    with pytest.raises(ValueError, match="must have rank 3"):
        tf.assert_rank(x, 3)
    assert tf.assert_rank_at_least(x, 1).type == "NoOp"
    with pytest.raises(ValueError, match="must have at least rank 3"):
        tf.assert_rank_at_least(x, 3)
    u = tf.placeholder(tf.float32)  # unknown rank: checked when the step runs
    r = tf.assert_rank(u, 2)
    with tf.Session() as sess:
        sess.run(r, {u: np.zeros((2, 2), np.float32)})
        with pytest.raises(tf.errors.InvalidArgumentError, match="must have rank"):
            sess.run(r, {u: np.zeros(3, np.float32)})
    with pytest.raises(TypeError, match="must be of type"):
        tf.assert_type(x, tf.int32)
    assert tf.assert_type(x, tf.float32).type == "NoOp"
    with pytest.raises(TypeError, match="integer type"):
        tf.assert_integer(x)
    tf.assert_integer(tf.constant([1], tf.uint8))
    s = tf.constant(3.0)
    assert tf.assert_scalar(s) is s
    with pytest.raises(ValueError, match="Expected scalar"):
        tf.assert_scalar(x)
    assert tf.is_numeric_tensor(x) and not tf.is_numeric_tensor(x > 0) and not tf.is_numeric_tensor(3)


def test_check_numerics_passes_values_and_gradients_and_fails_on_nan():
    x = tf.placeholder(tf.float32, [None])
    y = tf.check_numerics(tf.log(x), "log of x")
    loss = tf.reduce_sum(y * y)
    (grad,) = tf.gradients(loss, [x])
    v = tf.verify_tensor_all_finite(x, "x itself")
    with tf.Session() as sess:
        got, g = sess.run([y, grad], {x: [1.0, 2.0]})
        np.testing.assert_allclose(got, np.log([1.0, 2.0]), rtol=1e-6)
        np.testing.assert_allclose(g, 2 * np.log([1.0, 2.0]) / [1.0, 2.0], rtol=1e-5)
        with pytest.raises(tf.errors.InvalidArgumentError, match="log of x : Tensor had NaN or Inf values"):
            sess.run(y, {x: [1.0, -1.0]})
        with pytest.raises(tf.errors.InvalidArgumentError, match="x itself : Tensor had NaN or Inf values"):
            sess.run(v, {x: [np.inf]})
    with pytest.raises(TypeError, match="floating"):
        tf.check_numerics(tf.constant([1]), "ints")


def test_reduce_all_and_any_as_tf():
    b = np.array([[True, False, True], [True, True, True]])
    t = tf.constant(b)
    e = tf.constant(np.zeros((0, 2), bool))
    got = tf.Session().run([tf.reduce_all(t), tf.reduce_all(t, 1), tf.reduce_any(t, axis=0, keepdims=True),
                            tf.reduce_any(tf.logical_not(t), reduction_indices=[1]), tf.reduce_all(e),
                            tf.reduce_any(e), tf.reduce_all(e, 0)])
    want = [b.all(), b.all(1), b.any(0, keepdims=True), (~b).any(1), True, False, [True, True]]
    for g_, w in zip(got, want):
        np.testing.assert_array_equal(g_, w)
    with pytest.raises(tf.errors.InvalidArgumentError, match="needs a bool tensor"):
        tf.reduce_all(tf.constant([1, 0]))


def test_errors_have_tf_names_codes_and_constructors():
    e = tf.errors
    assert (e.OK, e.CANCELLED, e.INVALID_ARGUMENT, e.NOT_FOUND, e.RESOURCE_EXHAUSTED, e.OUT_OF_RANGE,
            e.UNAVAILABLE, e.DATA_LOSS, e.UNAUTHENTICATED) == (0, 1, 3, 5, 8, 11, 14, 15, 16)
    pairs = [(e.CancelledError, 1), (e.UnknownError, 2), (e.InvalidArgumentError, 3), (e.DeadlineExceededError, 4),
             (e.NotFoundError, 5), (e.AlreadyExistsError, 6), (e.PermissionDeniedError, 7),
             (e.ResourceExhaustedError, 8), (e.FailedPreconditionError, 9), (e.AbortedError, 10),
             (e.OutOfRangeError, 11), (e.UnimplementedError, 12), (e.InternalError, 13), (e.UnavailableError, 14),
             (e.DataLossError, 15), (e.UnauthenticatedError, 16)]
    for cls, code in pairs:
        assert issubclass(cls, e.OpError) and cls.error_code == code, cls
    # TF 1.x's constructor: (node_def, op, message)
    err = e.OutOfRangeError(None, None, "end of input")
    assert err.message == "end of input" and str(err) == "end of input" and err.node_def is None
    assert err.error_code == e.OUT_OF_RANGE
    generic = e.OpError(None, None, "odd", e.ABORTED)
    assert generic.error_code == e.ABORTED and generic.message == "odd"
    # shardflow's own form keeps working, and exceptions survive pickling (multiprocessing)
    mine = e.InvalidArgumentError("node 'x' (op MatMul): bad")
    assert (mine.node, mine.op) == ("x", "MatMul")
    back = pickle.loads(pickle.dumps(mine))
    assert type(back) is e.InvalidArgumentError and back.message == mine.message
    # catching a TF error class shardflow never raises is harmless
    try:
        raise e.ResourceExhaustedError("too big")
    except (e.CancelledError, e.ResourceExhaustedError) as caught:
        assert caught.code == 12


def test_cluster_spec_as_tf1_and_what_servers_refuse(monkeypatch):
    spec = tf.train.ClusterSpec({"ps": ["ps0:2222", "ps1:2222"], "worker": {0: "w0:2222", 2: "w2:2222"}})
    assert spec.jobs == ["ps", "worker"] and bool(spec) and not tf.train.ClusterSpec({})
    assert spec.num_tasks("ps") == 2 and spec.task_indices("worker") == [0, 2]
    assert spec.task_address("worker", 2) == "w2:2222" and spec.job_tasks("worker") == ["w0:2222", None, "w2:2222"]
    assert spec.as_dict() == {"ps": ["ps0:2222", "ps1:2222"], "worker": {0: "w0:2222", 2: "w2:2222"}}
    assert tf.train.ClusterSpec(spec) == spec
    with pytest.raises(ValueError, match="No such job"):
        spec.num_tasks("chief")
    with pytest.raises(ValueError, match="No task with index 1"):
        spec.task_address("worker", 1)
    with pytest.raises(TypeError):
        tf.train.ClusterSpec(["ps0:2222"])
    # Servers map onto shardflow nodes (test_tf1_replicated.py); what stays refused says what to do.
    for var in ("SHARDFLOW_TLS_DIR", "SHARDFLOW_INSECURE", "SHARDFLOW_ETCD"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(tf.errors.FailedPreconditionError, match="SHARDFLOW_TLS_DIR"):
        tf.train.Server(spec, job_name="ps", task_index=0)
    with pytest.raises(tf.errors.FailedPreconditionError, match="SHARDFLOW_ETCD"):
        tf.train.Server(spec, job_name="ps", task_index=1, tls_dir="/nonexistent")
    with pytest.raises(tf.errors.UnimplementedError, match=r"In-graph replication .* sf\.ClusterSession\(graph"):
        tf.train.Server({"worker": ["w0:2222"]}, job_name="worker", task_index=0, insecure=True)
    with pytest.raises(tf.errors.UnimplementedError, match="protocol"):
        tf.train.Server(spec, job_name="ps", task_index=0, protocol="grpc+verbs", insecure=True)
    with pytest.raises(tf.errors.UnimplementedError, match="merge_devices"):
        tf.train.replica_device_setter(cluster=spec, merge_devices=False)
    with pytest.raises(tf.errors.UnimplementedError, match="tf.train.Server"):
        tf.Session("grpc://w0:2222")
    with pytest.raises(tf.errors.UnimplementedError, match="MonitoredTrainingSession"):
        tf.train.Supervisor(is_chief=True)
    with pytest.raises(tf.errors.UnimplementedError, match="all-reduce"):
        tf.train.SyncReplicasOptimizer(tf.train.GradientDescentOptimizer(0.1), replicas_to_aggregate=2)
