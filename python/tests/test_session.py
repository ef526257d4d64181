"""Sessions: nested fetches, targets, feeds by name, errors with node and op, threads."""

import collections
import threading

import numpy as np
import pytest

import shardflow as sf


def test_nested_fetch_structures(g):
    x = sf.placeholder(sf.float32, [None], name="x")
    a, b = x + 1, x * 2
    noop = sf.no_op()
    Pair = collections.namedtuple("Pair", "first second")
    with sf.Session(g) as s:
        out = s.run({"a": a, "nested": [b, (a, noop)], "pair": Pair(a, b), "none": None},
                    feed_dict={x: [1.0, 2.0]})
    np.testing.assert_array_equal(out["a"], [2, 3])
    np.testing.assert_array_equal(out["nested"][0], [2, 4])
    assert isinstance(out["nested"][1], tuple) and out["nested"][1][1] is None
    assert isinstance(out["pair"], Pair)
    np.testing.assert_array_equal(out["pair"].second, [2, 4])
    assert out["none"] is None


def test_fetch_and_feed_by_name(g):
    x = sf.placeholder(sf.float32, [2], name="x")
    sf.identity(x * 3.0, name="y")
    with sf.Session(g) as s:
        np.testing.assert_array_equal(s.run("y", {"x": [1, 2]}), [3, 6])
        np.testing.assert_array_equal(s.run(["y:0"], {"x:0": [1, 1]})[0], [3, 3])
        with pytest.raises(sf.errors.NotFoundError):
            s.run("nope")


def test_run_errors_carry_node_and_op(g):
    x = sf.placeholder(sf.float32, [None, 3], name="x")
    labels = sf.placeholder(sf.int32, [None], name="labels")
    loss = sf.ops.sparse_softmax_cross_entropy_with_logits(x, labels, name="xent")[0]
    with sf.Session(g) as s:
        with pytest.raises(sf.errors.InvalidArgumentError) as e:
            s.run(loss, {x: np.zeros((2, 3), np.float32), labels: [0, 7]})
        assert e.value.node == "xent" and e.value.op == "SparseSoftmaxCrossEntropyWithLogits"
        with pytest.raises(sf.errors.InvalidArgumentError):
            s.run(loss)  # a placeholder not fed
        # The session is still fine after errors.
        out = s.run(loss, {x: np.zeros((1, 3), np.float32), labels: [1]})
        np.testing.assert_allclose(out, [np.log(3)], rtol=1e-6)


def test_wrong_fetch_types_and_closed_session(g):
    x = sf.constant(1.0)
    s = sf.Session(g)
    with pytest.raises(TypeError):
        s.run(3)
    with pytest.raises(TypeError):
        s.run({"a": object()})
    s.close()
    s.close()
    with pytest.raises(sf.errors.FailedPreconditionError):
        s.run(x)


def test_other_graph_objects_are_refused(g):
    other = sf.Graph()
    with other.as_default():
        y = sf.constant(1.0)
    with sf.Session(g) as s:
        with pytest.raises(sf.errors.InvalidArgumentError, match="another graph"):
            s.run(y)


def test_python_threads_run_steps_at_once(g):
    # Two steps that each wait for the other's enqueue can only finish if the
    # GIL is released while a step runs.
    q1 = sf.FIFOQueue([sf.float32], shapes=[[]])
    q2 = sf.FIFOQueue([sf.float32], shapes=[[]])
    a = q1.dequeue()
    enq2 = q2.enqueue([sf.constant(2.0)])
    b = q2.dequeue()
    enq1 = q1.enqueue([sf.constant(1.0)])
    results = {}
    with sf.Session(g) as s:
        def first():
            results["a"] = s.run([a, enq2])[0]

        t = threading.Thread(target=first)
        t.start()
        results["b"] = s.run([b, enq1])[0]
        t.join(60)
        assert not t.is_alive()
    assert results == {"a": 1.0, "b": 2.0}


def test_session_options(g):
    with g.device("/job:localhost/task:0/device:CPU:1"):
        y = sf.constant(np.ones(3, np.float32)) * 2.0
    with sf.Session(g, sf.SessionOptions(num_cpu_devices=2, compute_threads=1)) as s:
        np.testing.assert_array_equal(s.run(y), [2, 2, 2])
    with sf.Session(g, {"num_cpu_devices": 2}) as s:
        np.testing.assert_array_equal(s.run(y), [2, 2, 2])
    with pytest.raises(TypeError):
        sf.Session(g, bogus_option=1)


def test_close_while_another_thread_runs_a_step(g):
    # The waiting step keeps the session alive until it ends (here by its
    # dequeue timeout); close() itself returns at once and nothing crashes.
    q = sf.FIFOQueue([sf.float32], shapes=[[]])
    waiting = q.dequeue(timeout_ms=1500)
    s = sf.Session(g)
    outcome = {}

    def run():
        try:
            s.run(waiting)
            outcome["result"] = "value"
        except sf.errors.OpError as e:
            outcome["result"] = type(e).__name__

    t = threading.Thread(target=run)
    t.start()
    s.close()
    assert s.closed
    t.join(60)
    assert not t.is_alive()
    assert outcome["result"] in ("UnavailableError", "DeadlineExceededError", "AbortedError")
    with pytest.raises(sf.errors.FailedPreconditionError):
        s.run(waiting)


def test_symbolic_tensors_are_not_arrays(g):
    x = sf.constant(1.0)
    with pytest.raises(TypeError, match="symbolic"):
        np.asarray(x)
    with pytest.raises(TypeError, match="truth value"):
        bool(x)


def test_run_options_trace_file_writes_the_steps_timeline(g, tmp_path):
    import json
    x = sf.placeholder(sf.float32, [2], name="x")
    y = sf.identity(x * 3.0, name="y")
    path = tmp_path / "step.json"
    with sf.Session(g) as s:
        out = s.run(y, feed_dict={x: [1.0, 2.0]}, options=sf.RunOptions(trace_file=str(path)))
        np.testing.assert_array_equal(out, [3, 6])
        trace = json.loads(path.read_text())
        events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        assert "y" in {e["name"] for e in events}
        assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in events)
        assert trace["droppedEvents"] == 0
        # A file that cannot be written is the step's error, naming it.
        bad = tmp_path / "missing" / "t.json"
        with pytest.raises(sf.errors.UnavailableError, match="missing"):
            s.run(y, feed_dict={x: [1.0, 2.0]}, options=sf.RunOptions(trace_file=str(bad)))


def _mlp(g):
    x = sf.placeholder(sf.float32, [None, 4], name="x")
    labels = sf.placeholder(sf.int32, [None], name="labels")
    lr = sf.placeholder(sf.float32, [], name="lr")
    w = sf.Variable(sf.random.truncated_normal([4, 3], stddev=0.5, seed=7), name="w")
    logits = x @ w
    loss = sf.reduce_mean(sf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    train = sf.train.GradientDescentOptimizer(lr).minimize(loss)
    return x, labels, lr, w, logits, loss, train


def test_make_callable_gives_what_run_gives(g):
    x, labels, lr, w, logits, loss, train = _mlp(g)
    init = sf.global_variables_initializer()
    rng = np.random.default_rng(3)
    xb, yb = rng.random((5, 4), dtype=np.float32), np.array([0, 1, 2, 1, 0], np.int32)
    with sf.Session(g) as a, sf.Session(g) as b:
        a.run(init)
        b.run(init)
        step = b.make_callable([loss, train], [x, labels, lr])
        for _ in range(3):
            want = a.run([loss, train], {x: xb, labels: yb, lr: 0.1})
            got = step(xb, yb, 0.1)  # a Python float for a float32 scalar: converted as run() does
            assert isinstance(got, list) and got[1] is None
            np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(b.run(w), a.run(w))
        # Structures, feeds by name and in another order, a single fetch, no feeds at all.
        f = b.make_callable({"logits": logits, "w": "w"}, ["labels", "x:0"])
        out = f(yb, xb.tolist())
        np.testing.assert_array_equal(out["logits"], a.run(logits, {x: xb}))
        np.testing.assert_array_equal(out["w"], a.run(w))
        np.testing.assert_array_equal(b.make_callable(logits, [x])(xb), a.run(logits, {x: xb}))
        np.testing.assert_array_equal(b.make_callable(w)(), a.run(w))
        assert b.make_callable(sf.no_op())() is None


def test_make_callable_feeds_scalars_as_run_does(g):
    # Scalars are made in C++ (the Python converter cost a step about 25 us):
    # the same values, and the same refusals, as run() gives.
    with g.as_default():
        f32 = sf.placeholder(sf.float32, [], name="f32")
        f64 = sf.placeholder(sf.float64, [], name="f64")
        i32 = sf.placeholder(sf.int32, [], name="i32")
        i64 = sf.placeholder(sf.int64, [], name="i64")
        vec = sf.placeholder(sf.float32, [2], name="vec")
    feeds = [f32, f64, i32, i64]
    with sf.Session(g) as s:
        f = s.make_callable(tuple(feeds), feeds)
        for values in [(np.float32(0.1), np.float64(0.1), np.int32(-7), np.int64(2**40)),
                       (0.1, 0.1, -7, 2**40), (1e39, 1e-320, 2**31 - 1, -2**63)]:
            got = f(*values)
            assert isinstance(got, tuple) and len(got) == 4
            want = s.run(feeds, dict(zip(feeds, values)))
            for a, b, t in zip(got, want, feeds):
                assert a.dtype == b.dtype == t.dtype.as_numpy_dtype and a.shape == ()
                np.testing.assert_array_equal(a, b)
        with pytest.raises(sf.errors.InvalidArgumentError, match="does not fit"):
            f(0.1, 0.1, 2**31, 0)
        with pytest.raises(sf.errors.InvalidArgumentError):
            f(0.1, 0.1, 0, 2**64)
        with pytest.raises(sf.errors.InvalidArgumentError, match="'i32'"):
            f(0.1, 0.1, 1.5, 0)  # a float for an int: refused by run()'s casting rules
        with pytest.raises(sf.errors.InvalidArgumentError, match="'f32'"):
            f(np.complex64(1), 0.1, 0, 0)
        with pytest.raises(sf.errors.InvalidArgumentError, match="shape"):
            s.make_callable(vec, [vec])(np.float32(1))


def test_make_callable_checks_its_feeds(g, tmp_path):
    x, labels, lr, w, logits, loss, train = _mlp(g)
    with sf.Session(g) as s:
        s.run(sf.global_variables_initializer())
        f = s.make_callable(logits, [x])
        with pytest.raises(sf.errors.InvalidArgumentError, match="takes 1 feed value.*got 2"):
            f(np.zeros((1, 4), np.float32), np.zeros((1, 4), np.float32))
        with pytest.raises(sf.errors.InvalidArgumentError, match="takes 1 feed value.*got 0"):
            f()
        # run()'s rules: shapes, dtypes (same-kind casting), symbolic values.
        with pytest.raises(sf.errors.InvalidArgumentError, match="shape"):
            f(np.zeros((2, 5), np.float32))
        with pytest.raises(sf.errors.InvalidArgumentError, match="'x'"):
            f(np.zeros((2, 4), np.complex64))
        with pytest.raises(sf.errors.InvalidArgumentError, match="symbolic"):
            f(x)
        np.testing.assert_array_equal(f(np.zeros((2, 4), np.float64)), np.zeros((2, 3), np.float32))
        np.testing.assert_array_equal(f(np.zeros((4, 2), np.float32).T), np.zeros((2, 3), np.float32))
        np.testing.assert_array_equal(f(np.zeros((2, 4), ">f4")), np.zeros((2, 3), np.float32))
        # A fetched feed does not alias the caller's array.
        ident = s.make_callable(x, [x])
        xb = np.ones((1, 4), np.float32)
        out = ident(xb)
        xb[0, 0] = 5
        assert out[0, 0] == 1
        # Errors when it is made: unknown names, twice the same feed, other graphs, bad fetches.
        with pytest.raises(sf.errors.NotFoundError):
            s.make_callable(logits, ["nope"])
        with pytest.raises(sf.errors.InvalidArgumentError, match="twice"):
            s.make_callable(logits, [x, "x"])
        with pytest.raises(TypeError):
            s.make_callable(logits, [3])
        with pytest.raises(TypeError):
            s.make_callable(object())
        # A placeholder not fed fails each call as run() does.
        with pytest.raises(sf.errors.InvalidArgumentError):
            s.make_callable(logits)()
        # Options, when accepted.
        traced = s.make_callable(logits, [x], accept_options=True)
        path = tmp_path / "step.json"
        traced(np.zeros((1, 4), np.float32), options=sf.RunOptions(trace_file=str(path)), run_metadata=None)
        assert path.exists()
        with pytest.raises(TypeError):
            f(np.zeros((1, 4), np.float32), options=sf.RunOptions())
    # A closed session refuses the callables it made, and making new ones.
    with pytest.raises(sf.errors.FailedPreconditionError):
        f(np.zeros((1, 4), np.float32))
    with pytest.raises(sf.errors.FailedPreconditionError):
        s.make_callable(logits, [x])
