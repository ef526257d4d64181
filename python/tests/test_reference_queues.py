"""Queues against TensorFlow 1.x semantics (tf.FIFOQueue, tf.PaddingFIFOQueue, tf.RandomShuffleQueue,
shardflow's sf.train.FeedRunner), written independently of the other queue tests.

Every expected value comes from a plain-Python model of the queue (a deque) or from TensorFlow 1.x's
documented behaviour. Every op that may wait carries a timeout_ms backstop and every thread is
joined with a timeout, so a hang fails a test instead of the run; cases that could crash or hang
the interpreter (a step that never ends, huge sizes) run in a subprocess with a timeout. Tests
marked xfail(strict) fail on a real shardflow deviation from TensorFlow named in the reason.

Not covered because shardflow has no such API: tf.PriorityQueue, tf.train.Coordinator and
operation_timeout_in_ms (queue ops take timeout_ms instead).
"""

import collections
import re
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import shardflow as sf

E = sf.errors
BACKSTOP_MS = 5000  # no in-process wait may last longer than this


# ---- helpers ----------------------------------------------------------------

def ph(dtype, shape, name):
    return sf.placeholder(dtype, shape, name=name)


def outcome(sess, fetches, feed=None):
    """("ok", value) or (exception class name, message) of one step."""
    try:
        return ("ok", sess.run(fetches, feed))
    except Exception as e:  # noqa: BLE001 - the test inspects it
        return (type(e).__name__, str(e))


def in_thread(fn):
    """Starts fn in a daemon thread; returns (thread, results list it appends its outcome to)."""
    res = []
    th = threading.Thread(target=lambda: res.append(fn()), daemon=True)
    th.start()
    return th, res


def run_snippet(code, timeout=20, mem_gb=None):
    """(returncode, stdout+stderr) of code in a fresh interpreter; returncode None when it timed out.
    mem_gb caps the child's address space, so an unbounded allocation fails there, not here."""
    pre = ""
    if mem_gb:
        pre = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({mem_gb} << 30, {mem_gb} << 30))\n"
    pre += "import os, threading, time\nimport numpy as np\nimport shardflow as sf\nE = sf.errors\n"
    try:
        p = subprocess.run([sys.executable, "-c", pre + textwrap.dedent(code)], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return None, out
    return p.returncode, p.stdout + p.stderr


def lines_with(out, prefix):
    return [ln[len(prefix):].strip() for ln in out.splitlines() if ln.startswith(prefix)]


# ---- FIFO order -------------------------------------------------------------

def test_fifo_interleaved_ops_follow_a_deque_model():
    """A random interleaving of enqueue / enqueue_many / dequeue / dequeue_many on a two-component
    queue returns exactly what a Python deque returns, and size() tracks it."""
    rng = np.random.RandomState(1234)
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int64, sf.float64], shapes=[[], [2]])
        a = ph(sf.int64, [], "a")
        b = ph(sf.float64, [2], "b")
        am = ph(sf.int64, [None], "am")
        bm = ph(sf.float64, [None, 2], "bm")
        n = ph(sf.int32, [], "n")
        enq = q.enqueue([a, b], timeout_ms=BACKSTOP_MS)
        enqm = q.enqueue_many([am, bm], timeout_ms=BACKSTOP_MS)
        deq = q.dequeue(timeout_ms=BACKSTOP_MS)
        deqm = q.dequeue_many(n, timeout_ms=BACKSTOP_MS)
        size = q.size()
    model = collections.deque()
    nxt = 0
    with sf.Session(g) as s:
        for _ in range(60):
            op = rng.randint(4)
            if op == 0:
                v = (nxt, np.array([nxt * 0.5, -nxt - 0.25]))
                s.run(enq, {a: v[0], b: v[1]})
                model.append(v)
                nxt += 1
            elif op == 1:
                k = rng.randint(0, 5)
                ids = np.arange(nxt, nxt + k, dtype=np.int64)
                rows = np.stack([ids * 0.5, -ids - 0.25], axis=1) if k else np.zeros((0, 2))
                s.run(enqm, {am: ids, bm: rows})
                model.extend((int(i), r) for i, r in zip(ids, rows))
                nxt += k
            elif op == 2 and model:
                x, y = s.run(deq)
                want = model.popleft()
                assert x.dtype == np.int64 and y.dtype == np.float64
                assert int(x) == want[0]
                np.testing.assert_array_equal(y, want[1])
            elif op == 3 and model:
                k = rng.randint(1, len(model) + 1)
                x, y = s.run(deqm, {n: k})
                want = [model.popleft() for _ in range(k)]
                assert x.shape == (k,) and y.shape == (k, 2)
                np.testing.assert_array_equal(x, [w[0] for w in want])
                np.testing.assert_array_equal(y, np.stack([w[1] for w in want]))
            sz = s.run(size)
            assert sz.dtype == np.int32 and sz.shape == ()
            assert int(sz) == len(model)
    assert nxt > 20  # the interleaving did enqueue a fair amount


def test_fifo_dtypes_round_trip_exactly():
    vals = {
        sf.bool_: np.array([True, False, True]),
        sf.int32: np.array([-2**31, 0, 2**31 - 1], np.int32),
        sf.int64: np.array([-2**63, 7, 2**63 - 1], np.int64),
        sf.float16: np.array([0.5, -65504.0, 6e-8], np.float16),
        sf.float32: np.array([1e-38, -3.5, np.inf], np.float32),
        sf.float64: np.array([np.pi, -0.0, 1e308]),
    }
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue(list(vals), shapes=[[]] * len(vals))
        enqm = q.enqueue_many([sf.constant(v) for v in vals.values()])
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        dm = q.dequeue_many(2, timeout_ms=BACKSTOP_MS)
    with sf.Session(g) as s:
        s.run(enqm)
        first = s.run(d)
        rest = s.run(dm)
    for k, (dt, v) in enumerate(vals.items()):
        assert first[k].dtype == v.dtype and rest[k].dtype == v.dtype, dt
        np.testing.assert_array_equal(first[k], v[0])
        np.testing.assert_array_equal(rest[k], v[1:])
        assert np.signbit(rest[k]).tolist() == np.signbit(v[1:]).tolist()  # -0.0 stays -0.0


def test_dequeue_static_shapes_follow_the_queue_shapes():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.float32, sf.int32], shapes=[[2, 3], []])
        d = q.dequeue()
        dm = q.dequeue_many(4)
        n = ph(sf.int32, [], "n")
        dmn = q.dequeue_many(n)
        qa = sf.FIFOQueue([sf.float32])  # no shapes: anything
        da = qa.dequeue()
        qp = sf.PaddingFIFOQueue([sf.int32], shapes=[[None, 2]])
        dp = qp.dequeue_many(5)
    assert list(d[0].shape) == [2, 3] and list(d[1].shape) == []
    assert list(dm[0].shape) == [4, 2, 3] and list(dm[1].shape) == [4]
    assert list(dmn[0].shape) == [None, 2, 3] and list(dmn[1].shape) == [None]
    assert da.shape.rank is None
    assert list(dp.shape) == [5, None, 2]
    assert d[0].dtype == sf.float32 and d[1].dtype == sf.int32


def test_one_component_queue_takes_and_gives_a_bare_tensor():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue(sf.int32, shapes=[[2]])
        enq = q.enqueue(sf.constant(np.array([3, 4], np.int32)))
        enqm = q.enqueue_many(sf.constant(np.array([[5, 6], [7, 8]], np.int32)))
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        dm = q.dequeue_many(2, timeout_ms=BACKSTOP_MS)
    assert isinstance(d, sf.Tensor) and isinstance(dm, sf.Tensor)
    with sf.Session(g) as s:
        s.run([enq])
        s.run(enqm)
        np.testing.assert_array_equal(s.run(d), [3, 4])
        np.testing.assert_array_equal(s.run(dm), [[5, 6], [7, 8]])


def test_enqueued_values_are_snapshots():
    """The queue holds the value at enqueue time: a fed array modified afterwards, a variable
    assigned afterwards and a fetched array modified afterwards do not change what is dequeued."""
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[3]])
        p = ph(sf.int32, [3], "p")
        pm = ph(sf.int32, [None, 3], "pm")
        v = sf.Variable(np.array([1, 2, 3], np.int32), name="v")
        c = sf.constant(np.array([9, 8, 7], np.int32))
        enq_p = q.enqueue([p])
        enq_pm = q.enqueue_many([pm])
        enq_v = q.enqueue([v])
        enq_c = q.enqueue([c])
        bump = v.assign_add(np.array([10, 10, 10], np.int32))
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        dm = q.dequeue_many(2, timeout_ms=BACKSTOP_MS)
        init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        arr = np.array([4, 5, 6], np.int32)
        s.run(enq_p, {p: arr})
        arr[:] = -1
        batch = np.array([[1, 1, 1], [2, 2, 2]], np.int32)
        s.run(enq_pm, {pm: batch})
        batch[:] = -1
        s.run(enq_v)
        s.run(bump)
        s.run(enq_c)
        s.run(enq_c)
        np.testing.assert_array_equal(s.run(d), [4, 5, 6])
        np.testing.assert_array_equal(s.run(dm), [[1, 1, 1], [2, 2, 2]])
        np.testing.assert_array_equal(s.run(d), [1, 2, 3])
        got = s.run(d)
        np.testing.assert_array_equal(got, [9, 8, 7])
        if got.flags.writeable:
            got[:] = 0
        np.testing.assert_array_equal(s.run(d), [9, 8, 7])
        np.testing.assert_array_equal(s.run(c), [9, 8, 7])


# ---- wrong components, dtypes, shapes ---------------------------------------

@pytest.mark.parametrize("case,match", [
    ("q = sf.FIFOQueue([sf.int64]); q.enqueue([sf.placeholder(sf.float64, [])])", r"float64.*int64|int64.*float64"),
    ("q = sf.FIFOQueue([sf.int32, sf.float32]); q.enqueue([sf.constant(1)])", r"2 components, got 1"),
    ("q = sf.FIFOQueue([sf.int32]); q.enqueue([sf.constant(1), sf.constant(2)])", r"1 components?, got 2"),
    ("q = sf.FIFOQueue([sf.int32, sf.int32]); q.enqueue_many([sf.constant([1, 2])])", r"2 components, got 1"),
    ("q = sf.FIFOQueue([sf.int32], shapes=[[2]]); q.enqueue_many([sf.placeholder(sf.int32, [None, 3])])",
     r"\[2\].*\[3\]|\[3\].*\[2\]"),
    ("q = sf.FIFOQueue([sf.int32], shapes=[[2]]); q.enqueue([sf.placeholder(sf.int32, [2, 1])])",
     r"\[2\].*\[2,1\]|\[2,1\].*\[2\]"),
    ("q = sf.PaddingFIFOQueue([sf.int32], shapes=[[None]]); q.enqueue([sf.placeholder(sf.int32, [2, 2])])",
     r"\[\?\].*\[2,2\]"),
    ("q = sf.FIFOQueue([sf.int32]); q.dequeue_many(-3)", r"n >= 1, got -3"),
])
def test_wrong_components_are_graph_build_errors(case, match):
    """Like TensorFlow (a ValueError/TypeError while building), statically wrong enqueues fail when
    the op is built, with a message naming what is wrong."""
    code = f"""
        g = sf.Graph()
        try:
            with g.as_default():
                {case}
            print("RESULT none")
        except Exception as e:
            print("RESULT", type(e).__name__, str(e).replace(chr(10), ' '))
    """
    rc, out = run_snippet(code)
    assert rc == 0, out
    res = lines_with(out, "RESULT")[-1]
    kind, _, msg = res.partition(" ")
    assert kind in ("InvalidArgumentError", "TypeError", "ValueError"), res
    assert re.search(match, msg), res


def test_run_time_wrong_feeds_fail_clearly_and_change_nothing():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32, sf.float32], shapes=[[2], [None]])
        pa = ph(sf.int32, None, "pa")
        pb = ph(sf.float32, None, "pb")
        enq = q.enqueue([pa, pb])
        enqm = q.enqueue_many([pa, pb])
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        size = q.size()
    with sf.Session(g) as s:
        s.run(enq, {pa: np.array([1, 2], np.int32), pb: np.array([0.5], np.float32)})
        # component 1 fine, component 0 of the wrong shape
        e = outcome(s, enq, {pa: np.array([1, 2, 3], np.int32), pb: np.array([1.0], np.float32)})
        assert e[0] == "InvalidArgumentError" and "component 0" in e[1] and "[3]" in e[1], e
        # component 0 fine, component 1 of the wrong rank
        e = outcome(s, enq, {pa: np.array([1, 2], np.int32), pb: np.ones((1, 1), np.float32)})
        assert e[0] == "InvalidArgumentError" and "component 1" in e[1], e
        # a batch whose components disagree on the batch size
        e = outcome(s, enqm, {pa: np.zeros((3, 2), np.int32), pb: np.zeros((2, 4), np.float32)})
        assert e[0] == "InvalidArgumentError" and "component 1" in e[1], e
        # the second row of a batch has the wrong shape: all rows have one shape, so the shape [3]
        e = outcome(s, enqm, {pa: np.zeros((2, 3), np.int32), pb: np.zeros((2, 4), np.float32)})
        assert e[0] == "InvalidArgumentError" and "[3]" in e[1], e
        assert s.run(size) == 1  # no failed enqueue added anything
        s.run(enqm, {pa: np.array([[5, 6], [7, 8]], np.int32), pb: np.array([[1, 2], [3, 4]], np.float32)})
        got = [s.run(d) for _ in range(3)]
    np.testing.assert_array_equal([x[0] for x in got], [[1, 2], [5, 6], [7, 8]])
    np.testing.assert_array_equal(got[0][1], [0.5])
    np.testing.assert_array_equal(got[2][1], [3, 4])


def test_dequeue_through_a_shared_name_with_other_types_takes_nothing():
    g = sf.Graph()
    with g.as_default():
        a = sf.FIFOQueue([sf.int32], shapes=[[]], shared_name="refq_types")
        enq = a.enqueue([sf.constant(5)])
        da = a.dequeue(timeout_ms=BACKSTOP_MS)
    with sf.Session(g) as s:
        s.run(enq)
        assert s.run(a.size()) == 1
        assert int(s.run(da)) == 5
    # A queue of the same name must agree on its spec in one session.
    g = sf.Graph()
    with g.as_default():
        a = sf.FIFOQueue([sf.int32], shapes=[[]], shared_name="refq_types")
        b = sf.FIFOQueue([sf.int32], shapes=[[]], capacity=3, shared_name="refq_types")
        enq = a.enqueue([sf.constant(5)])
        db = b.dequeue(timeout_ms=BACKSTOP_MS)
    with sf.Session(g) as s:
        s.run(enq)
        e = outcome(s, db)
        assert e[0] == "InvalidArgumentError" and "refq_types" in e[1], e
        assert s.run(a.size()) == 1


def test_queues_of_one_name_without_shared_name_are_distinct():
    g = sf.Graph()
    with g.as_default():
        q1 = sf.FIFOQueue([sf.int32], shapes=[[]], name="q")
        q2 = sf.FIFOQueue([sf.int32], shapes=[[]], name="q")
        e1 = q1.enqueue([sf.constant(1)])
    with sf.Session(g) as s:
        s.run(e1)
        assert (int(s.run(q1.size())), int(s.run(q2.size()))) == (1, 0)


def test_two_sessions_of_one_graph_have_their_own_queues():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]])
        enq = q.enqueue([sf.constant(3)])
        size = q.size()
    with sf.Session(g) as s1, sf.Session(g) as s2:
        s1.run(enq)
        s1.run(enq)
        s2.run(enq)
        assert (int(s1.run(size)), int(s2.run(size))) == (2, 1)


# ---- capacity and timeouts ----------------------------------------------------

def test_enqueue_past_capacity_waits_for_a_dequeue():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]], capacity=2)
        p = ph(sf.int32, [], "p")
        enq = q.enqueue([p], timeout_ms=BACKSTOP_MS)
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        size = q.size()
    with sf.Session(g) as s:
        s.run(enq, {p: 0})
        s.run(enq, {p: 1})
        th, res = in_thread(lambda: outcome(s, enq, {p: 2}))
        time.sleep(0.3)
        assert th.is_alive() and res == []  # blocked: the queue is full
        assert s.run(size) == 2
        assert int(s.run(d)) == 0
        th.join(5)
        assert not th.is_alive() and res == [("ok", None)]
        assert s.run(size) == 2
        assert [int(s.run(d)), int(s.run(d))] == [1, 2]


def test_blocked_dequeue_many_is_served_by_later_enqueues_in_order():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]])
        p = ph(sf.int32, [None], "p")
        enqm = q.enqueue_many([p], timeout_ms=BACKSTOP_MS)
        dm = q.dequeue_many(5, timeout_ms=BACKSTOP_MS)
    with sf.Session(g) as s:
        th, res = in_thread(lambda: outcome(s, dm))
        for chunk in ([10, 11], [12], [13, 14, 15]):
            time.sleep(0.1)
            assert th.is_alive()
            s.run(enqm, {p: np.array(chunk, np.int32)})
        th.join(5)
        assert not th.is_alive()
        assert res[0][0] == "ok"
        np.testing.assert_array_equal(res[0][1], [10, 11, 12, 13, 14])
        assert s.run(q.size()) == 1


def test_enqueue_many_timeout_keeps_the_elements_that_fit():
    """TensorFlow adds a batch element by element as room frees up; a cancelled (here timed out)
    enqueue_many leaves the elements already added."""
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]], capacity=3)
        enqm = q.enqueue_many([sf.constant(np.arange(5, dtype=np.int32))], timeout_ms=200)
        dm = q.dequeue_many(3, timeout_ms=BACKSTOP_MS)
        d = q.dequeue(timeout_ms=200)
    with sf.Session(g) as s:
        t = time.time()
        e = outcome(s, enqm)
        assert e[0] in ("UnavailableError", "DeadlineExceededError") and "deadline exceeded" in e[1], e
        assert 0.15 < time.time() - t < 4
        assert s.run(q.size()) == 3
        np.testing.assert_array_equal(s.run(dm), [0, 1, 2])
        e = outcome(s, d)
        assert e[0] in ("UnavailableError", "DeadlineExceededError"), e  # 3 and 4 were never added


# ---- close ---------------------------------------------------------------------

def test_close_semantics():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32, sf.float32], shapes=[[], []])
        enqm = q.enqueue_many([sf.constant(np.arange(5, dtype=np.int32)),
                               sf.constant(np.arange(5, dtype=np.float32) / 4)])
        enq = q.enqueue([sf.constant(7), sf.constant(7.0)])
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        dm3 = q.dequeue_many(3, timeout_ms=BACKSTOP_MS)
        close = q.close()
        cancel = q.close(cancel_pending_enqueues=True)
        size = q.size()
        qe = sf.FIFOQueue([sf.int32], shapes=[[]])
        de = qe.dequeue(timeout_ms=BACKSTOP_MS)
        dme = qe.dequeue_many(2, timeout_ms=BACKSTOP_MS)
        closee = qe.close()
    with sf.Session(g) as s:
        s.run(enqm)
        s.run(close)
        for op in (enq, enqm):
            e = outcome(s, op)
            assert e[0] in ("AbortedError", "CancelledError") and "closed" in e[1], e
        assert s.run(size) == 5
        x, y = s.run(dm3)
        np.testing.assert_array_equal(x, [0, 1, 2])
        np.testing.assert_array_equal(y, [0, 0.25, 0.5])
        e = outcome(s, dm3)  # only 2 left: a full batch can never come
        assert e[0] == "OutOfRangeError", e
        assert s.run(size) == 2  # nothing was taken
        x, y = s.run(d)
        assert (int(x), float(y)) == (3, 0.75)
        s.run(cancel)  # closing again (even cancelling) is fine
        x, y = s.run(d)
        assert (int(x), float(y)) == (4, 1.0)
        for op in (d, dm3):
            e = outcome(s, op)
            assert e[0] == "OutOfRangeError", e
        # An empty closed queue: dequeue and dequeue_many fail at once, not after a wait.
        s.run(closee)
        t = time.time()
        assert outcome(s, de)[0] == "OutOfRangeError"
        assert outcome(s, dme)[0] == "OutOfRangeError"
        assert time.time() - t < 2


def test_close_wakes_waiting_dequeues_that_can_never_be_served():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]])
        enq = q.enqueue([sf.constant(1)])
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        dm = q.dequeue_many(3, timeout_ms=BACKSTOP_MS)
        close = q.close()
    with sf.Session(g) as s:
        s.run(enq)
        th1, r1 = in_thread(lambda: outcome(s, dm))  # 1 of 3 there
        time.sleep(0.2)
        th2, r2 = in_thread(lambda: outcome(s, dm))
        time.sleep(0.2)
        assert th1.is_alive() and th2.is_alive()
        t = time.time()
        s.run(close)
        th1.join(3)
        th2.join(3)
        assert not th1.is_alive() and not th2.is_alive()
        assert time.time() - t < 2
        assert r1[0][0] == "OutOfRangeError" and r2[0][0] == "OutOfRangeError"
        assert int(s.run(d)) == 1  # the failed dequeue_many gave its element back


def test_cancel_pending_enqueues_fails_them_and_keeps_what_was_added():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]], capacity=2)
        enqm = q.enqueue_many([sf.constant(np.arange(4, dtype=np.int32))], timeout_ms=BACKSTOP_MS)
        enq = q.enqueue([sf.constant(9)], timeout_ms=BACKSTOP_MS)
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        cancel = q.close(cancel_pending_enqueues=True)
    with sf.Session(g) as s:
        th1, r1 = in_thread(lambda: outcome(s, enqm))  # 0 and 1 fit, 2 and 3 wait
        time.sleep(0.2)
        th2, r2 = in_thread(lambda: outcome(s, enq))
        time.sleep(0.2)
        assert th1.is_alive() and th2.is_alive()
        s.run(cancel)
        th1.join(3)
        th2.join(3)
        assert not th1.is_alive() and not th2.is_alive()
        for r in (r1, r2):
            assert r[0][0] in ("AbortedError", "CancelledError") and "cancel" in r[0][1], r
        assert [int(s.run(d)), int(s.run(d))] == [0, 1]
        assert outcome(s, d)[0] == "OutOfRangeError"


def test_dequeue_up_to_returns_the_remainder_after_close():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]])
        enqm = q.enqueue_many([sf.constant(np.arange(5, dtype=np.int32))])
        close = q.close()
        du = q.dequeue_up_to(3, timeout_ms=BACKSTOP_MS)
    with sf.Session(g) as s:
        s.run(enqm)
        s.run(close)
        np.testing.assert_array_equal(s.run(du), [0, 1, 2])
        np.testing.assert_array_equal(s.run(du), [3, 4])
        assert outcome(s, du)[0] == "OutOfRangeError"


def test_dequeue_up_to_static_shape_has_an_unknown_batch_dimension():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.float32, sf.int32], shapes=[[2], []])
        a, b = q.dequeue_up_to(4, timeout_ms=BACKSTOP_MS)
        m, _ = q.dequeue_many(4, timeout_ms=BACKSTOP_MS)
    assert list(a.shape) == [None, 2] and list(b.shape) == [None]
    assert list(m.shape) == [4, 2]


def test_dequeue_up_to_waits_while_open_and_a_close_releases_the_remainder():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]])
        enqm = q.enqueue_many([sf.constant(np.arange(2, dtype=np.int32))])
        close = q.close()
        du = q.dequeue_up_to(5, timeout_ms=BACKSTOP_MS)
        du_short = q.dequeue_up_to(5, timeout_ms=50)
        size = q.size()
    with sf.Session(g) as s:
        s.run(enqm)
        # Open: it waits for all 5 and, timing out, takes nothing.
        assert outcome(s, du_short)[0] != "ok"
        assert int(s.run(size)) == 2
        th, res = in_thread(lambda: outcome(s, du))
        time.sleep(0.1)
        assert th.is_alive()
        s.run(close)
        th.join(3)
        assert not th.is_alive()
        assert res[0][0] == "ok"
        np.testing.assert_array_equal(res[0][1], [0, 1])
        assert outcome(s, du)[0] == "OutOfRangeError"


def test_padding_queue_dequeue_up_to_pads_the_remainder():
    g = sf.Graph()
    with g.as_default():
        q = sf.PaddingFIFOQueue([sf.int32], shapes=[[None]])
        p = ph(sf.int32, [None], "p")
        enq = q.enqueue([p])
        close = q.close()
        du = q.dequeue_up_to(2, timeout_ms=BACKSTOP_MS)
    with sf.Session(g) as s:
        for v in ([1], [2, 3], [4, 5, 6]):
            s.run(enq, {p: np.array(v, np.int32)})
        s.run(close)
        np.testing.assert_array_equal(s.run(du), [[1, 0], [2, 3]])
        np.testing.assert_array_equal(s.run(du), [[4, 5, 6]])
        assert outcome(s, du)[0] == "OutOfRangeError"


# ---- RandomShuffleQueue ---------------------------------------------------------

def _shuffle_order(seed, sessions=1):
    """The order one seeded RandomShuffleQueue gives 30 elements through dequeue_many and dequeue,
    once per session of one graph."""
    g = sf.Graph()
    with g.as_default():
        q = sf.RandomShuffleQueue(capacity=40, min_after_dequeue=4, dtypes=[sf.int32], shapes=[[]], seed=seed)
        enqm = q.enqueue_many([sf.constant(np.arange(30, dtype=np.int32))])
        dm = q.dequeue_many(5, timeout_ms=BACKSTOP_MS)
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        close = q.close()
    orders = []
    for _ in range(sessions):
        with sf.Session(g) as s:
            s.run(enqm)
            out = [int(v) for _ in range(4) for v in s.run(dm)]
            out += [int(s.run(d)) for _ in range(6)]  # 10 left: 6 may go before close
            s.run(close)
            assert outcome(s, dm)[0] == "OutOfRangeError"  # 4 left, 5 asked: nothing taken
            out += [int(s.run(d)) for _ in range(4)]
            assert outcome(s, d)[0] == "OutOfRangeError"
        orders.append(out)
    return orders


def test_random_shuffle_seeded_order_is_deterministic_permutation():
    a1, a2 = _shuffle_order(123, sessions=2)
    (b,) = _shuffle_order(123)
    (c,) = _shuffle_order(124)
    assert sorted(a1) == list(range(30))
    assert a1 == a2 == b  # same seed: same order, in any session of any graph
    assert c != a1
    assert a1 != list(range(30))
    (u,) = _shuffle_order(0)  # unseeded: still a permutation
    assert sorted(u) == list(range(30))


def test_random_shuffle_min_after_dequeue_until_close():
    g = sf.Graph()
    with g.as_default():
        q = sf.RandomShuffleQueue(capacity=10, min_after_dequeue=3, dtypes=[sf.int32], shapes=[[]], seed=5)
        p = ph(sf.int32, [None], "p")
        enqm = q.enqueue_many([p], timeout_ms=BACKSTOP_MS)
        d = q.dequeue(timeout_ms=200)
        dm2 = q.dequeue_many(2, timeout_ms=200)
        dm3 = q.dequeue_many(3, timeout_ms=BACKSTOP_MS)
        close = q.close()
        size = q.size()
    got = []
    with sf.Session(g) as s:
        s.run(enqm, {p: np.arange(4, dtype=np.int32)})
        got.append(int(s.run(d)))  # 4 > 3: one may go
        assert s.run(size) == 3
        assert outcome(s, d)[0] in ("UnavailableError", "DeadlineExceededError")  # 3 == min_after_dequeue
        s.run(enqm, {p: np.array([4], np.int32)})
        assert outcome(s, dm2)[0] in ("UnavailableError", "DeadlineExceededError")  # needs 5
        assert s.run(size) == 4
        got.append(int(s.run(d)))
        assert s.run(size) == 3
        s.run(close)
        e = outcome(s, enqm, {p: np.array([9], np.int32)})
        assert e[0] in ("AbortedError", "CancelledError"), e
        got += [int(v) for v in s.run(dm3)]  # closed: min_after_dequeue no longer holds back
        assert outcome(s, d)[0] == "OutOfRangeError"
    assert sorted(got) == [0, 1, 2, 3, 4]


def test_random_shuffle_dequeue_many_over_capacity_minus_min_waits_for_close():
    """Accepted TensorFlow-like behaviour: n > capacity - min_after_dequeue cannot be served
    before close (the queue is full first), and is served once the queue closes."""
    g = sf.Graph()
    with g.as_default():
        q = sf.RandomShuffleQueue(capacity=10, min_after_dequeue=5, dtypes=[sf.int32], shapes=[[]], seed=9)
        enqm = q.enqueue_many([sf.constant(np.arange(10, dtype=np.int32))], timeout_ms=BACKSTOP_MS)
        dm = q.dequeue_many(7, timeout_ms=BACKSTOP_MS)
        close = q.close()
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
    with sf.Session(g) as s:
        s.run(enqm)
        th, res = in_thread(lambda: outcome(s, dm))
        time.sleep(0.3)
        assert th.is_alive()
        s.run(close)
        th.join(3)
        assert not th.is_alive() and res[0][0] == "ok", res
        first = [int(v) for v in res[0][1]]
        rest = [int(s.run(d)) for _ in range(3)]
    assert sorted(first + rest) == list(range(10))


def test_random_shuffle_keeps_components_together_under_concurrency():
    """A producer and two consumers through a small RandomShuffleQueue: every element comes out
    exactly once with its components still paired."""
    total = 240
    g = sf.Graph()
    with g.as_default():
        q = sf.RandomShuffleQueue(capacity=24, min_after_dequeue=6,
                                  dtypes=[sf.int32, sf.float64, sf.int64], shapes=[[], [], [2]], seed=77)
        a = ph(sf.int32, [None], "a")
        b = ph(sf.float64, [None], "b")
        c = ph(sf.int64, [None, 2], "c")
        enqm = q.enqueue_many([a, b, c], timeout_ms=BACKSTOP_MS)
        dm = q.dequeue_many(5, timeout_ms=BACKSTOP_MS)
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        close = q.close()
    got = [[], []]
    errors = []

    def consume(k):
        op = dm if k == 0 else d
        while True:
            try:
                x, y, z = s.run(op)
            except E.OutOfRangeError:
                break
            except Exception as e:  # noqa: BLE001
                errors.append(e)
                break
            x, y, z = np.atleast_1d(x), np.atleast_1d(y), np.atleast_2d(z)
            got[k].extend(zip(x.tolist(), y.tolist(), z.tolist()))

    with sf.Session(g) as s:
        cons = [threading.Thread(target=consume, args=(k,), daemon=True) for k in range(2)]
        for t in cons:
            t.start()
        for start in range(0, total, 16):
            ids = np.arange(start, start + 16, dtype=np.int32)
            s.run(enqm, {a: ids, b: ids * 1.5, c: np.stack([ids, -ids], 1).astype(np.int64)})
        s.run(close)
        for t in cons:
            t.join(10)
        assert not any(t.is_alive() for t in cons)
    assert errors == []
    allgot = got[0] + got[1]
    assert sorted(x for x, _, _ in allgot) == list(range(total))
    for x, y, z in allgot:
        assert y == x * 1.5 and z == [x, -x]
    assert [x for x, _, _ in allgot] != list(range(total))


# ---- PaddingFIFOQueue -----------------------------------------------------------------

def test_padding_fifo_pads_to_each_batch_largest_shape():
    g = sf.Graph()
    with g.as_default():
        q = sf.PaddingFIFOQueue([sf.int64, sf.float32, sf.bool_], shapes=[[None, None], [2, None], []])
        a = ph(sf.int64, [None, None], "a")
        b = ph(sf.float32, [2, None], "b")
        c = ph(sf.bool_, [], "c")
        am = ph(sf.int64, [None, None, None], "am")
        bm = ph(sf.float32, [None, 2, None], "bm")
        cm = ph(sf.bool_, [None], "cm")
        enq = q.enqueue([a, b, c], timeout_ms=BACKSTOP_MS)
        enqm = q.enqueue_many([am, bm, cm], timeout_ms=BACKSTOP_MS)
        n = ph(sf.int32, [], "n")
        dm = q.dequeue_many(n, timeout_ms=BACKSTOP_MS)
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
    els = [
        (np.arange(6, dtype=np.int64).reshape(2, 3), np.full((2, 1), 1.5, np.float32), True),
        (np.array([[7]], np.int64), np.arange(8, dtype=np.float32).reshape(2, 4), False),
        (np.zeros((0, 5), np.int64), np.zeros((2, 0), np.float32), True),
    ]
    batch = (np.array([[[1, 2]], [[3, 4]]], np.int64), np.ones((2, 2, 1), np.float32), np.array([False, True]))
    with sf.Session(g) as s:
        for x, y, z in els:
            s.run(enq, {a: x, b: y, c: z})
        s.run(enqm, {am: batch[0], bm: batch[1], cm: batch[2]})
        s.run(enq, {a: np.full((1, 1), 5, np.int64), b: np.zeros((2, 3), np.float32), c: True})
        ga, gb, gc = s.run(dm, {n: 3})
        # the first batch: the largest dims are [2, 5] and [2, 4]
        wa = np.zeros((3, 2, 5), np.int64)
        wb = np.zeros((3, 2, 4), np.float32)
        for k, (x, y, _) in enumerate(els):
            wa[k, :x.shape[0], :x.shape[1]] = x
            wb[k, :, :y.shape[1]] = y
        assert ga.dtype == np.int64 and gb.dtype == np.float32 and gc.dtype == np.bool_
        np.testing.assert_array_equal(ga, wa)
        np.testing.assert_array_equal(gb, wb)
        np.testing.assert_array_equal(gc, [True, False, True])
        # the second batch pads only to its own largest shape ([1, 2] and [2, 1]), not the first's
        ga, gb, gc = s.run(dm, {n: 2})
        np.testing.assert_array_equal(ga, batch[0])
        np.testing.assert_array_equal(gb, batch[1])
        np.testing.assert_array_equal(gc, [False, True])
        # a single dequeue is never padded
        x, y, z = s.run(d)
        assert x.shape == (1, 1) and y.shape == (2, 3) and bool(z) is True
        assert int(x[0, 0]) == 5


def test_padding_fifo_all_empty_elements_batch_to_zero_width():
    g = sf.Graph()
    with g.as_default():
        q = sf.PaddingFIFOQueue([sf.float64], shapes=[[None]])
        p = ph(sf.float64, [None], "p")
        enq = q.enqueue([p])
        dm = q.dequeue_many(3, timeout_ms=BACKSTOP_MS)
    with sf.Session(g) as s:
        for _ in range(3):
            s.run(enq, {p: np.zeros(0)})
        out = s.run(dm)
        assert out.shape == (3, 0) and out.dtype == np.float64
        s.run(enq, {p: np.array([1.0])})
        s.run(enq, {p: np.zeros(0)})
        s.run(enq, {p: np.array([2.0, 3.0])})
        np.testing.assert_array_equal(s.run(dm), [[1, 0], [0, 0], [2, 3]])


# ---- zero-size tensors, empty batches, huge sizes ------------------------------------------

def test_zero_size_elements_and_empty_enqueue_many():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.float32, sf.int32], shapes=[[0, 3], []], capacity=2)
        pa = ph(sf.float32, [None, 0, 3], "pa")
        pb = ph(sf.int32, [None], "pb")
        enqm = q.enqueue_many([pa, pb], timeout_ms=300)
        enq = q.enqueue([sf.constant(np.zeros((0, 3), np.float32)), sf.constant(4)], timeout_ms=300)
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        dm = q.dequeue_many(2, timeout_ms=BACKSTOP_MS)
        size = q.size()
    empty = {pa: np.zeros((0, 0, 3), np.float32), pb: np.zeros(0, np.int32)}
    with sf.Session(g) as s:
        s.run(enqm, empty)  # nothing to add: fine, even repeatedly
        s.run(enqm, empty)
        assert s.run(size) == 0
        s.run(enqm, {pa: np.zeros((2, 0, 3), np.float32), pb: np.array([1, 2], np.int32)})
        assert s.run(size) == 2
        s.run(enqm, empty)  # a full queue has room for nothing: no wait (it would time out)
        assert s.run(size) == 2
        x, y = s.run(dm)
        assert x.shape == (2, 0, 3) and x.dtype == np.float32
        np.testing.assert_array_equal(y, [1, 2])
        s.run(enq)
        x, y = s.run(d)
        assert x.shape == (0, 3) and int(y) == 4


def test_huge_dequeue_many_n_fails_clearly_without_allocating():
    """n far beyond anything the queue holds: a bounded queue refuses it (it can never be served),
    an unbounded one waits until its timeout or close. Nothing sized by n is allocated (the child
    may use 3 GiB)."""
    rc, out = run_snippet("""
        g = sf.Graph()
        with g.as_default():
            qu = sf.FIFOQueue([sf.int32], shapes=[[]])
            qb = sf.FIFOQueue([sf.int32], shapes=[[4]], capacity=8)
            qp = sf.PaddingFIFOQueue([sf.int32], shapes=[[None]])
            qr = sf.RandomShuffleQueue(8, 2, [sf.int32], shapes=[[]], seed=1)
            n = sf.placeholder(sf.int64, [], name="n")
            ops = {"unbounded": qu.dequeue_many(n, timeout_ms=200), "bounded": qb.dequeue_many(n, timeout_ms=200),
                   "padding": qp.dequeue_many(n, timeout_ms=200), "shuffle": qr.dequeue_many(n, timeout_ms=200),
                   "closed": qu.dequeue_many(n)}
            enq = qu.enqueue_many([sf.constant(np.arange(3, dtype=np.int32))])
            close = qu.close()
            d = qu.dequeue(timeout_ms=1000)
        def show(tag, feed):
            t = time.time()
            try:
                sess.run(ops[tag], {n: feed})
                print("R", tag, "ok", 0)
            except Exception as e:
                print("R", tag, type(e).__name__, round(time.time() - t, 2), str(e).replace(chr(10), " "))
        with sf.Session(g) as sess:
            sess.run(enq)
            for tag in ("unbounded", "bounded", "padding", "shuffle"):
                for big in (2**31 - 1, 2**40, 2**63 - 1):
                    show(tag, big)
            sess.run(close)
            show("closed", 2**62)
            print("LEFT", [int(sess.run(d)) for _ in range(3)], sess.run(qu.size()))
    """, timeout=40, mem_gb=3)
    assert rc == 0, out
    res = [ln.split(" ", 4) for ln in lines_with(out, "R")]
    assert len(res) == 13, out
    for tag, kind, secs, msg in (r[:4] for r in res):
        if tag in ("unbounded", "padding"):
            assert kind in ("UnavailableError", "DeadlineExceededError") and float(secs) < 3, (tag, kind, msg)
        elif tag in ("bounded", "shuffle"):
            assert kind == "InvalidArgumentError" and float(secs) < 1, (tag, kind, msg)
        else:
            assert kind == "OutOfRangeError", (tag, kind, msg)
    assert lines_with(out, "LEFT") == ["[0, 1, 2] 0"], out


def test_python_int_n_beyond_int32_is_not_truncated():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]])
        enqm = q.enqueue_many([sf.constant(np.arange(10, dtype=np.int32))])
        built = None
        try:
            dm = q.dequeue_many(2**32 + 3, timeout_ms=200)
            built = dm
        except (E.InvalidArgumentError, ValueError, TypeError, OverflowError):
            pass  # refused while building: what TensorFlow does
    if built is None:
        return
    assert built.shape[0] in (None, 2**32 + 3), built.shape
    with sf.Session(g) as s:
        s.run(enqm)
        e = outcome(s, built)
        assert e[0] != "ok", e  # 2**32 + 3 elements can never be there
        assert s.run(q.size()) == 10


def test_enqueue_many_of_a_huge_zero_size_batch_does_not_crash():
    """A [2**40, 0] batch holds no bytes but 2**40 elements: enqueued into a queue of capacity 10
    with a timeout, it must not crash (TensorFlow adds 10 and times out; a clear
    resource error is acceptable too). The child may use 3 GiB."""
    rc, out = run_snippet("""
        g = sf.Graph()
        with g.as_default():
            q = sf.FIFOQueue([sf.float32], shapes=[[0]], capacity=10)
            p = sf.placeholder(sf.float32, [None, 0], name="p")
            em = q.enqueue_many([p], timeout_ms=300)
            ok = q.enqueue_many([sf.constant(np.zeros((3, 0), np.float32))])
            dm = q.dequeue_many(3, timeout_ms=1000)
        with sf.Session(g) as sess:
            try:
                sess.run(em, {p: np.zeros((2**40, 0), np.float32)})
                print("R ok")
            except Exception as e:
                print("R", type(e).__name__, str(e).replace(chr(10), " "))
            k = int(sess.run(q.size()))
            print("SIZE", k)
            if k == 0:
                sess.run(ok)
            print("AFTER", sess.run(dm).shape)
    """, timeout=40, mem_gb=3)
    assert rc == 0, out
    r = lines_with(out, "R")[-1]
    assert r.startswith(("UnavailableError", "DeadlineExceededError", "ResourceExhaustedError",
                         "InvalidArgumentError")), out
    if r.startswith("ResourceExhaustedError"):
        assert "alloc" in r or "too many" in r or "exhausted" in r.lower(), out
    assert lines_with(out, "SIZE")[-1] in ("0", "10"), out
    assert lines_with(out, "AFTER") == ["(3, 0)"], out


# ---- concurrency --------------------------------------------------------------------

def test_concurrent_producers_and_consumers_lose_and_duplicate_nothing():
    """Three producer and three consumer threads (separate Session.run calls) through a FIFOQueue
    of capacity 5: each element arrives once, paired, and each consumer sees each producer's
    elements in the order that producer enqueued them."""
    per_producer = 60
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32, sf.int64], shapes=[[], []], capacity=5)
        a = ph(sf.int32, [None], "a")
        b = ph(sf.int64, [None], "b")
        enqm = q.enqueue_many([a, b], timeout_ms=BACKSTOP_MS)
        x = ph(sf.int32, [], "x")
        y = ph(sf.int64, [], "y")
        enq = q.enqueue([x, y], timeout_ms=BACKSTOP_MS)
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
        dm = q.dequeue_many(3, timeout_ms=BACKSTOP_MS)
        close = q.close()
    errors = []
    got = [[] for _ in range(3)]

    def produce(p):
        try:
            ids = [p * 1000 + i for i in range(per_producer)]
            k = 0
            while k < len(ids):
                if p == 0:  # one element at a time
                    s.run(enq, {x: ids[k], y: 2 * ids[k]})
                    k += 1
                else:
                    chunk = np.array(ids[k:k + 1 + (k % 7)], np.int32)
                    s.run(enqm, {a: chunk, b: 2 * chunk.astype(np.int64)})
                    k += len(chunk)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def consume(c):
        while True:
            try:
                u, v = s.run(dm if c == 0 else d)
            except E.OutOfRangeError:
                break
            except Exception as e:  # noqa: BLE001
                errors.append(e)
                break
            got[c].extend(zip(np.atleast_1d(u).tolist(), np.atleast_1d(v).tolist()))

    with sf.Session(g) as s:
        prods = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(3)]
        cons = [threading.Thread(target=consume, args=(c,), daemon=True) for c in range(3)]
        for t in prods + cons:
            t.start()
        for t in prods:
            t.join(15)
        assert not any(t.is_alive() for t in prods)
        s.run(close)
        for t in cons:
            t.join(10)
        assert not any(t.is_alive() for t in cons)
        left = s.run(q.size())
        rest = []
        while left:
            u, v = s.run(d)
            rest.append((int(u), int(v)))
            left -= 1
    assert errors == []
    allgot = got[0] + got[1] + got[2] + rest
    want = sorted(p * 1000 + i for p in range(3) for i in range(per_producer))
    assert sorted(u for u, _ in allgot) == want
    assert all(v == 2 * u for u, v in allgot)
    for c in range(3):
        for p in range(3):
            mine = [u for u, _ in got[c] if u // 1000 == p]
            assert mine == sorted(mine), (c, p)
    assert len(rest) <= 2  # a closed queue keeps only what no full batch of 3 could take


# ---- steps that fail or sessions that close while a queue op waits ---------------------------

def test_failing_step_cancels_its_waiting_dequeue():
    rc, out = run_snippet("""
        g = sf.Graph()
        with g.as_default():
            q = sf.FIFOQueue([sf.int32], shapes=[[]])
            d = q.dequeue()
            p = sf.placeholder(sf.float32, [None], name="p")
            bad = sf.ops.reshape(p, sf.constant(np.array([2, 2], np.int32)))
            enq = q.enqueue([sf.constant(5)])
            dt = q.dequeue(timeout_ms=500)
        s = sf.Session(g)
        res = []
        def step():
            try:
                s.run([d, bad], {p: np.ones(3, np.float32)})
                res.append("ok")
            except Exception as e:
                res.append(type(e).__name__)
        th = threading.Thread(target=step, daemon=True)
        th.start()
        th.join(2)
        print("PROMPT", not th.is_alive(), res)
        s.run(enq)  # lets a still-waiting dequeue finish
        th.join(3)
        print("STEP", res)
        try:
            print("KEPT", int(s.run(dt)))
        except Exception as e:
            print("KEPT", type(e).__name__)
        os._exit(0)
    """, timeout=20)
    assert rc == 0, out
    assert lines_with(out, "PROMPT") == ["True ['InvalidArgumentError']"], out
    assert lines_with(out, "KEPT") == ["5"], out


def test_session_close_ends_a_step_waiting_on_a_queue():
    rc, out = run_snippet("""
        g = sf.Graph()
        with g.as_default():
            q = sf.FIFOQueue([sf.int32], shapes=[[]])
            d = q.dequeue()
        s = sf.Session(g)
        res = []
        def step():
            try:
                s.run(d)
                res.append("ok")
            except Exception as e:
                res.append(type(e).__name__)
        th = threading.Thread(target=step, daemon=True)
        th.start()
        time.sleep(0.3)
        t = time.time()
        s.close()
        th.join(3)
        print("ENDED", not th.is_alive(), res, time.time() - t < 3.5)
        os._exit(0)
    """, timeout=20)
    assert rc == 0, out
    ended = lines_with(out, "ENDED")[-1]
    assert ended.startswith("True") and "ok" not in ended, out


# ---- FeedRunner ----------------------------------------------------------------------

def test_queue_runner_feeds_every_item_once_then_closes():
    total = 90
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32, sf.float32], shapes=[[], [2]], capacity=4)
        x = ph(sf.int32, [], "x")
        y = ph(sf.float32, [2], "y")
        enq = q.enqueue([x, y], timeout_ms=BACKSTOP_MS)
        close = q.close()
        dm = q.dequeue_many(4, timeout_ms=BACKSTOP_MS)
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
    items = iter(range(total))
    lock = threading.Lock()

    def feed(i):
        with lock:
            k = next(items)  # StopIteration ends the thread normally
        return {x: k, y: np.array([k, -k], np.float32)}

    runner = sf.train.FeedRunner(enq, threads=3, feed_fn=feed, close_op=close)
    got = []
    with sf.Session(g) as s:
        threads = runner.start(s)
        assert len(threads) == 3
        with pytest.raises(E.FailedPreconditionError):
            runner.start(s)
        t0 = time.time()
        while time.time() - t0 < 15:
            try:
                u, v = s.run(dm)
            except E.OutOfRangeError:
                break
            got.extend(zip(u.tolist(), v.tolist()))
        while time.time() - t0 < 15:
            try:
                u, v = s.run(d)
            except E.OutOfRangeError:
                break
            got.append((int(u), v.tolist()))
        runner.join(5)
        assert not any(t.is_alive() for t in threads)
    assert runner.steps == total
    assert sorted(u for u, _ in got) == list(range(total))
    assert all(v == [u, -u] for u, v in got)


def test_queue_runner_stop_with_cancel_op_frees_blocked_threads():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]], capacity=3)
        enq = q.enqueue([sf.constant(1)], timeout_ms=BACKSTOP_MS)
        cancel = q.close(cancel_pending_enqueues=True)
        close = q.close()
    runner = sf.train.FeedRunner(enq, threads=2, close_op=close, cancel_op=cancel)
    with sf.Session(g) as s:
        threads = runner.start(s)
        t0 = time.time()
        while s.run(q.size()) < 3 and time.time() - t0 < 5:
            time.sleep(0.02)
        time.sleep(0.2)
        assert s.run(q.size()) == 3 and all(t.is_alive() for t in threads)  # both wait for room
        t = time.time()
        runner.stop()
        runner.join(3)  # the cancelled enqueues are a normal end: no error
        assert not any(th.is_alive() for th in threads)
        assert time.time() - t < 2  # well before the enqueue backstop
        assert runner.steps >= 3


def test_queue_runner_join_raises_a_real_error_and_leaves_the_queue_open():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[2]])
        x = ph(sf.int32, None, "x")
        enq = q.enqueue([x], timeout_ms=BACKSTOP_MS)
        close = q.close()
        ok = q.enqueue([sf.constant(np.array([8, 9], np.int32))])
        d = q.dequeue(timeout_ms=BACKSTOP_MS)
    calls = []

    def feed(i):
        calls.append(i)
        if len(calls) == 1:
            return {x: np.array([1, 2], np.int32)}
        return {x: np.array([1, 2, 3], np.int32)}  # wrong shape: a real error

    runner = sf.train.FeedRunner(enq, threads=1, feed_fn=feed, close_op=close)
    with sf.Session(g) as s:
        runner.start(s)
        with pytest.raises(E.InvalidArgumentError, match=r"\[3\]"):
            runner.join(5)
        assert runner.steps == 1
        s.run(ok)  # close_op did not run: the input did not end normally
        np.testing.assert_array_equal(s.run(d), [1, 2])
        np.testing.assert_array_equal(s.run(d), [8, 9])
