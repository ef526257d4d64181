"""Control flow, gradients and queues against independent NumPy references.

Every expected value comes from NumPy: forward values from a NumPy (or plain
Python) version of the same computation, gradients from central differences
of that NumPy version in float64. Cases that could crash or hang the
interpreter run in a subprocess with a timeout. Tests marked xfail(strict)
fail on a real shardflow bug named in the reason.
"""

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import shardflow as sf

O = sf.ops
E = sf.errors


# ---- helpers ----------------------------------------------------------------

def numeric_grad(f, *arrays, eps=1e-6):
    """Central differences of the NumPy function f(*arrays) (a scalar) w.r.t. each array, float64."""
    arrays = [np.array(a, np.float64) for a in arrays]
    out = []
    for k, a in enumerate(arrays):
        gk = np.zeros(a.shape)
        for idx in np.ndindex(a.shape):
            hi = [x.copy() for x in arrays]
            lo = [x.copy() for x in arrays]
            hi[k][idx] += eps
            lo[k][idx] -= eps
            gk[idx] = (f(*hi) - f(*lo)) / (2 * eps)
        out.append(gk)
    return out


def f64(v):
    return np.asarray(v, np.float64)


def ph(dtype, shape, name):
    return sf.placeholder(dtype, shape, name=name)


def run_in_subprocess(code, timeout=30):
    """(returncode, output) of code run in a fresh interpreter; returncode None when it timed out (a hang)."""
    pre = "import numpy as np\nimport shardflow as sf\nO = sf.ops\n"
    try:
        p = subprocess.run([sys.executable, "-c", pre + textwrap.dedent(code)], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return None, (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    return p.returncode, p.stdout + p.stderr


def fetch_error(sess, fetches, feed=None):
    """The exception running fetches raises (None when it succeeds)."""
    try:
        sess.run(fetches, feed)
    except Exception as e:  # noqa: BLE001 - the test inspects it
        return e
    return None


# ---- cond: forward -------------------------------------------------------------

@pytest.mark.parametrize("pred", [True, False])
def test_cond_several_outputs_of_several_dtypes(pred):
    xv = np.array([1.0, -2.0, 3.5])
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [3], "x")
        p = ph(sf.bool_, [], "p")
        r = sf.cond(p, lambda: (x * 2.0, O.sum(x), O.cast(x, DstT=sf.int32)),
                    lambda: (x - 1.0, O.max(x), O.cast(x * 3.0, DstT=sf.int32)))
    with sf.Session(g) as s:
        a, b, c = s.run(r, {x: xv, p: pred})
    if pred:
        want = (xv * 2, xv.sum(), xv.astype(np.int32))
    else:
        want = (xv - 1, xv.max(), (xv * 3).astype(np.int32))
    np.testing.assert_allclose(a, want[0])
    np.testing.assert_allclose(b, want[1])
    assert c.dtype == np.int32
    np.testing.assert_array_equal(c, want[2])


@pytest.mark.parametrize("xv", [-3.0, 0.5, 2.0])
def test_cond_nested_with_gradients(xv):
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        r = sf.cond(x > 0, lambda: sf.cond(x > 1, lambda: x * x * x, lambda: x * x), lambda: -x)
        (gx,) = sf.gradients(r, [x])
    ref = lambda v: (v ** 3 if v > 1 else v * v) if v > 0 else -v  # noqa: E731
    with sf.Session(g) as s:
        rv, gv = s.run([r, gx], {x: xv})
    np.testing.assert_allclose(rv, ref(xv))
    np.testing.assert_allclose(gv, numeric_grad(ref, xv)[0], rtol=1e-6)


@pytest.mark.parametrize("xv,yv", [(1.0, 2.0), (1.0, -2.0), (-1.0, 2.0), (-1.0, -2.0)])
def test_cond_nested_captures_both_levels(xv, yv):
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        y = ph(sf.float64, [], "y")
        r = sf.cond(x > 0, lambda: sf.cond(y > 0, lambda: x * y, lambda: x - y),
                    lambda: sf.cond(y > 0, lambda: y, lambda: sf.constant(np.array(7.0))))
        gxy = sf.gradients(r, [x, y])
    ref = lambda a, b: (a * b if b > 0 else a - b) if a > 0 else (b if b > 0 else 7.0)  # noqa: E731
    with sf.Session(g) as s:
        rv, gx, gy = s.run([r] + gxy, {x: xv, y: yv})
    np.testing.assert_allclose(rv, ref(xv, yv))
    nx, ny = numeric_grad(ref, xv, yv)
    np.testing.assert_allclose([gx, gy], [nx, ny], atol=1e-6)


def test_cond_untaken_branch_is_not_run():
    params = np.arange(5.0)
    g = sf.Graph()
    with g.as_default():
        n = ph(sf.int32, [], "n")
        q = sf.cond(O.equal(n, 0), lambda: sf.constant(np.int32(-1)), lambda: O.div(np.int32(10), n))
        i = ph(sf.int32, [], "i")
        pv = sf.constant(params)
        row = sf.cond(O.less(i, 5), lambda: O.gather(pv, O.reshape(i, [1])), lambda: sf.constant(np.array([-1.0])))
        oob = O.gather(pv, O.reshape(i, [1]))
    with sf.Session(g) as s:
        assert s.run(q, {n: 0}) == -1
        assert s.run(q, {n: 3}) == 10 // 3
        np.testing.assert_array_equal(s.run(row, {i: 2}), params[[2]])
        np.testing.assert_array_equal(s.run(row, {i: 7}), [-1.0])
        # The same gather outside a cond does fail: the cond really kept it from running.
        with pytest.raises(E.InvalidArgumentError, match="out of range"):
            s.run(oob, {i: 7})


@pytest.mark.parametrize("iv", [2, 9])
def test_cond_gradient_untaken_branch_contributes_nothing(iv):
    xv = np.arange(4.0)
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [4], "x")
        i = ph(sf.int32, [], "i")
        r = sf.cond(i < 4, lambda: O.sum(O.gather(x, O.reshape(i, [1])) * 3.0), lambda: O.sum(x) * 2.0)
        (gx,) = sf.gradients(r, [x])
    want = np.zeros(4)
    if iv < 4:
        want[iv] = 3.0
    else:
        want[:] = 2.0
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(gx, {x: xv, i: iv}), want)


@pytest.mark.parametrize("xv", [0.0, -1.0, 2.0])
def test_cond_gradient_of_singular_untaken_branch(xv):
    # log(x) and 1/x at x=0 would give inf/nan gradients if the untaken branch ran.
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        r = sf.cond(x > 0, lambda: O.log(x), lambda: x * 2.0)
        r2 = sf.cond(O.equal(x, 0.0), lambda: x * 1.0, lambda: 1.0 / x)
        grads = sf.gradients(r + r2, [x])
    want = (1 / xv if xv > 0 else 2.0) + (1.0 if xv == 0 else -1 / xv ** 2)
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(grads, {x: xv})[0], want)


@pytest.mark.parametrize("pred", [True, False])
def test_cond_gradient_matmul_branches(pred):
    X = np.array([[1.0, 2.0], [3.0, 4.0]])
    W = np.array([[0.5, -1.0], [2.0, 0.3]])
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [2, 2], "x")
        w = ph(sf.float64, [2, 2], "w")
        p = ph(sf.bool_, [], "p")
        r = sf.cond(p, lambda: x @ w, lambda: O.transpose(x, perm=[1, 0]) * w)
        grads = sf.gradients(O.sum(r * r), [x, w])
    ref = lambda a, b: np.sum((a @ b if pred else a.T * b) ** 2)  # noqa: E731
    with sf.Session(g) as s:
        got = s.run(grads, {x: X, w: W, p: pred})
    for a, n in zip(got, numeric_grad(ref, X, W)):
        np.testing.assert_allclose(a, n, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("pred", [True, False])
def test_cond_passthrough_and_outside_use(pred):
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        p = ph(sf.bool_, [], "p")
        r = sf.cond(p, lambda: x, lambda: 7.0 * x)
        (gx,) = sf.gradients(r * x + x, [x])
    ref = lambda v: (v if pred else 7 * v) * v + v  # noqa: E731
    with sf.Session(g) as s:
        rv, gv = s.run([r, gx], {x: 3.0, p: pred})
    np.testing.assert_allclose(rv, 3.0 if pred else 21.0)
    np.testing.assert_allclose(gv, numeric_grad(ref, 3.0)[0], rtol=1e-6)


def test_cond_branches_of_different_shapes_merge_to_unknown_shape():
    g = sf.Graph()
    with g.as_default():
        p = ph(sf.bool_, [], "p")
        r = sf.cond(p, lambda: sf.constant(np.ones((2, 3))), lambda: sf.constant(np.zeros(4)))
    with sf.Session(g) as s:
        assert s.run(r, {p: True}).shape == (2, 3)
        assert s.run(r, {p: False}).shape == (4,)


def test_cond_build_errors():
    g = sf.Graph()
    with g.as_default():
        p = ph(sf.bool_, [], "p")
        with pytest.raises(E.InvalidArgumentError, match="float32 in then, int32 in else"):
            sf.cond(p, lambda: sf.constant(1.0), lambda: sf.constant(np.int32(2)))
        with pytest.raises(E.InvalidArgumentError, match="then returns 2 values, else 1"):
            sf.cond(p, lambda: (sf.constant(1.0), sf.constant(1.0)), lambda: sf.constant(2.0))
        with pytest.raises(E.InvalidArgumentError, match="predicate must be bool"):
            sf.cond(ph(sf.float32, [], "fp"), lambda: 1.0, lambda: 2.0)
        with pytest.raises(E.InvalidArgumentError, match="predicate must be a scalar"):
            sf.cond(ph(sf.bool_, [2], "vp"), lambda: 1.0, lambda: 2.0)
        with pytest.raises(TypeError, match="callables"):
            sf.cond(p, 1.0, 2.0)

        def boom():
            raise KeyError("boom")
        with pytest.raises(KeyError, match="boom"):
            sf.cond(p, boom, lambda: 1.0)
        # The graph stays usable after each error.
        r = sf.cond(p, lambda: 3.0, lambda: 1.0)
        up = ph(sf.bool_, None, "up")
        ru = sf.cond(up, lambda: 3.0, lambda: 1.0)
    with sf.Session(g) as s:
        assert s.run(r, {p: True}) == 3.0
        with pytest.raises(E.InvalidArgumentError, match="bool scalar"):
            s.run(ru, {up: np.array([True, False])})


def test_cond_with_no_outputs_is_empty_or_a_clear_error():
    g = sf.Graph()
    with g.as_default():
        p = ph(sf.bool_, [], "p")
        try:
            r = sf.cond(p, lambda: [], lambda: [])
        except E.InvalidArgumentError:
            return
        assert r == []


def test_fetching_a_value_of_the_untaken_branch_is_an_error():
    inner = []
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")

        def then():
            t = x * 2.0
            inner.append(t)
            return t
        sf.cond(x > 1.0, then, lambda: x)
    with sf.Session(g) as s:
        with pytest.raises(E.InvalidArgumentError, match="dead"):
            s.run(inner[0], {x: 0.0})
        assert s.run(inner[0], {x: 2.0}) == 4.0


# ---- while_loop: forward ----------------------------------------------------------

@pytest.mark.parametrize("n", [-3, 0, 1, 2, 10, 100])
def test_while_loop_counts(n):
    g = sf.Graph()
    with g.as_default():
        nt = ph(sf.int32, [], "n")
        i, s_ = sf.while_loop(lambda i, s: i < nt, lambda i, s: (i + 1, s + i), [0, 0])
    with sf.Session(g) as s:
        iv, sv = s.run([i, s_], {nt: n})
    assert iv == max(n, 0)
    assert sv == sum(range(max(n, 0)))


def test_while_loop_single_variable_forms():
    g = sf.Graph()
    with g.as_default():
        a = sf.while_loop(lambda i: i < 5, lambda i: i + 1, 0)
        b = sf.while_loop(lambda i: i < 5, lambda i: [i + 1], [0])
    assert isinstance(a, sf.Tensor)
    assert isinstance(b, list) and len(b) == 1
    with sf.Session(g) as s:
        assert s.run(a) == 5
        assert s.run(b)[0] == 5


@pytest.mark.parametrize("par", [1, 2, 10, 64])
def test_while_loop_parallel_iterations_do_not_change_results(par):
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        i, a, b = sf.while_loop(lambda i, a, b: i < 50,
                                lambda i, a, b: (i + 1, a * 0.9 + b, b + O.cast(i, DstT=sf.float64)),
                                [0, x, x], parallel_iterations=par)
    ra, rb = 1.0, 1.0
    for k in range(50):
        ra, rb = ra * 0.9 + rb, rb + k
    with sf.Session(g) as s:
        iv, av, bv = s.run([i, a, b], {x: 1.0})
    assert iv == 50
    np.testing.assert_allclose([av, bv], [ra, rb], rtol=1e-12)


@pytest.mark.parametrize("n,limit", [(0, 5), (3, 5), (5, 5), (6, 5), (100, 5), (0, 0), (1, 0)])
def test_while_loop_maximum_iterations(n, limit):
    g = sf.Graph()
    with g.as_default():
        nt = ph(sf.int32, [], "n")
        (i,) = sf.while_loop(lambda i: i < nt, lambda i: i + 1, [0], maximum_iterations=limit)
    with sf.Session(g) as s:
        if n <= limit:
            assert s.run(i, {nt: n}) == n
        else:  # documented: running past maximum_iterations fails the step naming the loop
            with pytest.raises(E.InvalidArgumentError, match=r"loop 'while' exceeded its maximum_iterations"):
                s.run(i, {nt: n})
            assert s.run(i, {nt: 0}) == 0  # the session is still usable


@pytest.mark.parametrize("n", [0, 1, 2, 5, 12])
def test_while_loop_nested(n):
    g = sf.Graph()
    with g.as_default():
        nt = ph(sf.int32, [], "n")

        def body(i, s):
            _, t = sf.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + j * i), [0, 0])
            return i + 1, s + t
        i, s_ = sf.while_loop(lambda i, s: i < nt, body, [0, 0])
    with sf.Session(g) as s:
        assert s.run(s_, {nt: n}) == sum(j * i for i in range(n) for j in range(i))


def test_while_loop_nested_reads_outer_tensor():
    X = np.array([1.0, 2.0, 3.0])
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [3], "x")

        def body(i, acc):
            _, t = sf.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + x * O.cast(j, DstT=sf.float64)),
                                 [0, sf.constant(np.zeros(3))])
            return i + 1, acc + t
        _, acc = sf.while_loop(lambda i, acc: i < 4, body, [0, sf.constant(np.zeros(3))], parallel_iterations=3)
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(acc, {x: X}), sum(X * j for i in range(4) for j in range(i)))


def test_while_loop_body_reads_outer_tensors():
    A = np.array([[1.0, 2.0], [0.0, 1.0]])
    V = np.array([1.0, 1.0])
    g = sf.Graph()
    with g.as_default():
        a = ph(sf.float64, [2, 2], "a")
        v = ph(sf.float64, [2], "v")
        _, y = sf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, O.reshape(a @ O.reshape(y, [2, 1]), [2])),
                             [0, v])
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(y, {a: A, v: V}), np.linalg.matrix_power(A, 3) @ V)


def test_while_loop_of_several_dtypes():
    g = sf.Graph()
    with g.as_default():
        i, b, l, h = sf.while_loop(
            lambda i, b, l, h: i < 5,
            lambda i, b, l, h: (i + 1, O.logical_not(b), l * np.int64(3), h + sf.constant(np.ones((2, 2)))),
            [0, True, np.int64(1), np.zeros((2, 2))])
    with sf.Session(g) as s:
        iv, bv, lv, hv = s.run([i, b, l, h])
    assert iv == 5 and bool(bv) is False and lv == 3 ** 5 and lv.dtype == np.int64
    np.testing.assert_array_equal(hv, np.full((2, 2), 5.0))


@pytest.mark.parametrize("n", [0, 1, 7])
def test_cond_inside_while(n):
    g = sf.Graph()
    with g.as_default():
        nt = ph(sf.int32, [], "n")
        x = ph(sf.float64, [], "x")

        def body(i, s):
            even = O.equal(O.sub(i, O.mul(O.div(i, 2), 2)), 0)
            return i + 1, sf.cond(even, lambda: s + x, lambda: s * x)
        _, s_ = sf.while_loop(lambda i, s: i < nt, body, [0, O.cast(sf.constant(0), DstT=sf.float64)])
    ref = 0.0
    for k in range(n):
        ref = ref + 1.5 if k % 2 == 0 else ref * 1.5
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(s_, {nt: n, x: 1.5}), ref)


def test_cond_inside_while_untaken_branch_not_run():
    g = sf.Graph()
    with g.as_default():
        params = sf.constant(np.arange(4.0))

        def body(i, s):
            v = sf.cond(i < 4, lambda: O.sum(O.gather(params, O.reshape(i, [1]))),
                        lambda: sf.constant(np.array(100.0)))
            return i + 1, s + v
        _, s_ = sf.while_loop(lambda i, s: i < 6, body, [0, sf.constant(np.array(0.0))])
    with sf.Session(g) as s:
        assert s.run(s_) == 0 + 1 + 2 + 3 + 100 + 100


@pytest.mark.parametrize("pred", [True, False])
def test_while_inside_cond(pred):
    g = sf.Graph()
    with g.as_default():
        nt = ph(sf.int32, [], "n")
        p = ph(sf.bool_, [], "p")
        r = sf.cond(p, lambda: sf.while_loop(lambda i: i < nt, lambda i: i + 2, [0])[0], lambda: nt * 10)
        # An untaken loop that would run past its maximum_iterations must not run at all.
        r3 = sf.cond(p, lambda: sf.constant(5),
                     lambda: sf.while_loop(lambda i: i >= 0, lambda i: i + 1, [0], maximum_iterations=10)[0])
    with sf.Session(g) as s:
        assert s.run(r, {nt: 7, p: pred}) == (8 if pred else 70)
        if pred:
            assert s.run(r3, {p: pred}) == 5
        else:
            with pytest.raises(E.InvalidArgumentError, match="maximum_iterations"):
                s.run(r3, {p: pred})


def test_while_loop_build_errors():
    g = sf.Graph()
    with g.as_default():
        with pytest.raises(E.InvalidArgumentError, match=r"loop variable 1 .* has shape \[2\] but the body returns "
                                                         r"shape \[4\]"):
            sf.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, O.concat(x, x, axis=0)),
                          [0, sf.constant(np.ones(2))])
        with pytest.raises(E.InvalidArgumentError, match="is int32 but the body returns float32"):
            sf.while_loop(lambda i: i < 3, lambda i: O.cast(i, DstT=sf.float32), [0])
        with pytest.raises(E.InvalidArgumentError, match="returns 2 values for 1 loop variables"):
            sf.while_loop(lambda i: i < 3, lambda i: (i, i), [0])
        with pytest.raises(E.InvalidArgumentError, match="returns 0 values for 1 loop variables"):
            sf.while_loop(lambda i: i < 3, lambda i: [], [0])
        with pytest.raises(E.InvalidArgumentError, match="bool scalar"):
            sf.while_loop(lambda i: i, lambda i: i + 1, [0])
        with pytest.raises(E.InvalidArgumentError, match="must be a scalar"):
            sf.while_loop(lambda i: O.less(i, [3, 4]), lambda i: i + 1, [0])
        with pytest.raises(E.InvalidArgumentError, match="parallel_iterations must be >= 1"):
            sf.while_loop(lambda i: i < 3, lambda i: i + 1, [0], parallel_iterations=0)
        with pytest.raises(E.InvalidArgumentError, match="at least one loop variable"):
            sf.while_loop(lambda: True, lambda: (), [])
        with pytest.raises(E.InvalidArgumentError, match="NoneType"):
            sf.while_loop(lambda i: i < 3, lambda i: None, [0])

        def boom(i):
            raise ZeroDivisionError("mine")
        with pytest.raises(ZeroDivisionError, match="mine"):
            sf.while_loop(lambda i: i < 3, boom, [0])
        with pytest.raises(ZeroDivisionError, match="mine"):
            sf.while_loop(boom, lambda i: i + 1, [0])
        ok = sf.while_loop(lambda i: i < 3, lambda i: i + 1, 0)
    with sf.Session(g) as s:
        assert s.run(ok) == 3


def test_while_loop_unknown_shape_may_change():
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [None], "x")
        _, y = sf.while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, O.concat(x, x, axis=0)), [0, x])
    with sf.Session(g) as s:
        np.testing.assert_array_equal(s.run(y, {x: np.ones(2)}), np.ones(16))


@pytest.mark.parametrize("n", [0, 1, 3])
@pytest.mark.parametrize("kind", ["outer", "outer*outer", "identity(outer)"])
def test_while_loop_body_returning_loop_invariant(n, kind):
    make = {"outer": lambda z: z, "outer*outer": lambda z: z * z, "identity(outer)": sf.identity}[kind]
    zv = 2.0
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        z = ph(sf.float64, [], "z")
        i, a = sf.while_loop(lambda i, a: i < n, lambda i, a: (i + 1, make(z)), [0, x])
    want = 1.5 if n == 0 else {"outer": zv, "outer*outer": zv * zv, "identity(outer)": zv}[kind]
    with sf.Session(g) as s:
        iv, av = s.run([i, a], {x: 1.5, z: zv})
    assert iv == n
    np.testing.assert_allclose(av, want)


def test_while_loop_body_values_cannot_be_fetched_or_used_outside():
    code = """
    inner = []
    g = sf.Graph()
    with g.as_default():
        def body(i):
            t = i * 2
            inner.append(t)
            return i + 1
        (i,) = sf.while_loop(lambda i: i < 3, body, [0])
        j = sf.while_loop(lambda j: j < 3, lambda j: j + inner[0], 0)

        def body2(k):
            t = k * 2
            inner.append(t)
            return t + 1
        k = sf.while_loop(lambda k: k < 30, body2, 0)
    for fetch, feed in [(inner[0], None), (k, {inner[1]: np.int32(5)}), (j, None)]:
        with sf.Session(g) as s:
            try:
                s.run(fetch, feed)
                print("NO ERROR")
            except sf.errors.InvalidArgumentError as e:
                print("InvalidArgumentError", str(e)[:80])
    """
    rc, out = run_in_subprocess(code)
    assert rc == 0, out
    assert out.count("InvalidArgumentError") == 3, out


# ---- while_loop: gradients --------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 3, 6])
def test_while_gradient_initial_value_and_captured(n):
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        w = ph(sf.float64, [], "w")
        nt = ph(sf.int32, [], "n")
        _, y = sf.while_loop(lambda i, y: i < nt, lambda i, y: (i + 1, y * w + y * y * 0.1), [0, x])
        grads = sf.gradients(y, [x, w])

    def f(X, W):
        v = X
        for _ in range(n):
            v = v * W + v * v * 0.1
        return v
    with sf.Session(g) as s:
        got = s.run(grads, {x: 0.7, w: 0.9, nt: n})
    np.testing.assert_allclose(got, numeric_grad(f, 0.7, 0.9), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("par", [1, 10])
def test_while_gradient_rnn(par):
    rng = np.random.default_rng(0)
    W = rng.normal(size=(3, 3)) * 0.5
    H = rng.normal(size=(1, 3))
    c = np.array([[1.0, 2.0, 3.0]])
    g = sf.Graph()
    with g.as_default():
        w = ph(sf.float64, [3, 3], "w")
        h0 = ph(sf.float64, [1, 3], "h")
        _, h = sf.while_loop(lambda i, h: i < 4, lambda i, h: (i + 1, O.tanh(h @ w)), [0, h0],
                             parallel_iterations=par)
        grads = sf.gradients(O.sum(h * sf.constant(c)), [w, h0])

    def f(Wv, Hv):
        for _ in range(4):
            Hv = np.tanh(Hv @ Wv)
        return (Hv * c).sum()
    with sf.Session(g) as s:
        got = s.run(grads, {w: W, h0: H})
    for a, b in zip(got, numeric_grad(f, W, H)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-8)


def test_while_gradient_cond_in_body():
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        w = ph(sf.float64, [], "w")

        def body(i, s):
            even = O.equal(O.sub(i, O.mul(O.div(i, 2), 2)), 0)
            return i + 1, sf.cond(even, lambda: s * w, lambda: s * s + x)
        _, s_ = sf.while_loop(lambda i, s: i < 5, body, [0, x])
        grads = sf.gradients(s_, [x, w])

    def f(X, W):
        v = X
        for k in range(5):
            v = v * W if k % 2 == 0 else v * v + X
        return v
    with sf.Session(g) as s:
        got = s.run(grads, {x: 0.6, w: 1.3})
    np.testing.assert_allclose(got, numeric_grad(f, 0.6, 1.3), rtol=1e-6)


@pytest.mark.parametrize("xv", [0.5, 1.7, -1.0])
def test_gradient_cond_in_cond_in_while_in_cond(xv):
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")

        def outer():
            def body(i, a):
                return i + 1, sf.cond(a < 10.0, lambda: sf.cond(a < 2.0, lambda: a * 3.0, lambda: a + x), lambda: a)
            return sf.while_loop(lambda i, a: i < 6, body, [0, x])[1]
        r = sf.cond(x > 0, outer, lambda: -x)
        (gx,) = sf.gradients(r, [x])

    def f(X):
        if X <= 0:
            return -X
        a = X
        for _ in range(6):
            a = (a * 3 if a < 2 else a + X) if a < 10 else a
        return a
    with sf.Session(g) as s:
        rv, gv = s.run([r, gx], {x: xv})
    np.testing.assert_allclose(rv, f(xv))
    np.testing.assert_allclose(gv, numeric_grad(f, xv)[0], rtol=1e-6)


@pytest.mark.parametrize("pred", [True, False])
def test_while_gradient_inside_cond(pred):
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        p = ph(sf.bool_, [], "p")
        r = sf.cond(p, lambda: sf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), [0, x])[1],
                    lambda: x * 5.0)
        (gx,) = sf.gradients(r, [x])
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(gx, {x: 1.5, p: pred}), 4 * 1.5 ** 3 if pred else 5.0)


def test_while_gradient_several_variables_sharing_an_initial_value():
    X = np.array([0.4, 0.7])
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [2], "x")
        _, a, b = sf.while_loop(lambda i, a, b: i < 3, lambda i, a, b: (i + 1, a * b, b + a), [0, x, x])
        (gx,) = sf.gradients(O.sum(a) + O.sum(b * b), [x])

    def f(v):
        a, b = v.copy(), v.copy()
        for _ in range(3):
            a, b = a * b, b + a
        return a.sum() + (b * b).sum()
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(gx, {x: X}), numeric_grad(f, X)[0], rtol=1e-6)


def test_while_gradient_captured_and_initial_and_outside():
    X = np.array([0.4, 0.7])
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [2], "x")
        z = ph(sf.float64, [], "z")
        _, a = sf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, a * x + O.sum(a) + z * z), [0, x])
        grads = sf.gradients(O.sum(a * a) + O.sum(x), [x, z])

    def f(v, zz):
        a = v.copy()
        for _ in range(3):
            a = a * v + a.sum() + zz * zz
        return (a * a).sum() + v.sum()
    with sf.Session(g) as s:
        got = s.run(grads, {x: X, z: 0.3})
    for a_, n_ in zip(got, numeric_grad(f, X, 0.3)):
        np.testing.assert_allclose(a_, n_, rtol=1e-6)


def test_while_gradient_swapped_and_passed_through_variables():
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        z = ph(sf.float64, [], "z")
        _, a, b = sf.while_loop(lambda i, a, b: i < 3, lambda i, a, b: (i + 1, b, a * 2.0), [0, x, z])
        _, c, d = sf.while_loop(lambda i, c, d: i < 3, lambda i, c, d: (i + 1, c * d, d), [0, x, z])
        g1 = sf.gradients(a + 3.0 * b, [x, z])
        g2 = sf.gradients(c, [x, z])

    def f1(X, Z):
        a, b = X, Z
        for _ in range(3):
            a, b = b, a * 2
        return a + 3 * b

    def f2(X, Z):
        return X * Z ** 3
    with sf.Session(g) as s:
        got1, got2 = s.run([g1, g2], {x: 1.5, z: 2.0})
    np.testing.assert_allclose(got1, numeric_grad(f1, 1.5, 2.0), rtol=1e-6)
    np.testing.assert_allclose(got2, numeric_grad(f2, 1.5, 2.0), rtol=1e-6)


def test_while_gradient_uses_integer_counter_and_mixed_precision():
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float32, [2], "x")
        y = ph(sf.float64, [], "y")
        _, a, b = sf.while_loop(lambda i, a, b: i < 3,
                                lambda i, a, b: (i + 1, a * O.cast(b, DstT=sf.float32) * O.cast(i + 1, DstT=sf.float32),
                                                 b * 1.5), [0, x, y])
        grads = sf.gradients(O.sum(a), [x, y])

    def f(X, Y):
        a, b = X.copy(), Y
        for k in range(3):
            a, b = a * b * (k + 1), b * 1.5
        return a.sum()
    X = np.array([1.0, 2.0], np.float32)
    with sf.Session(g) as s:
        gx, gy = s.run(grads, {x: X, y: 1.1})
    assert gx.dtype == np.float32 and gy.dtype == np.float64
    nx, ny = numeric_grad(f, X, 1.1)
    np.testing.assert_allclose(gx, nx, rtol=1e-5)
    np.testing.assert_allclose(gy, ny, rtol=1e-6)


def test_while_gradient_gather_from_captured_table():
    ids = [1, 3, 1, 4]
    Ev = np.arange(10.0).reshape(5, 2) / 10
    g = sf.Graph()
    with g.as_default():
        emb = ph(sf.float64, [5, 2], "emb")
        idt = sf.constant(np.array(ids, np.int32))

        def body(i, acc):
            row = O.gather(emb, O.reshape(O.gather(idt, O.reshape(i, [1])), [1]))
            return i + 1, acc * 1.5 + row
        _, acc = sf.while_loop(lambda i, acc: i < 4, body, [0, sf.constant(np.zeros((1, 2)))])
        (ge,) = sf.gradients(O.sum(acc * acc), [emb])

    def f(Em):
        acc = np.zeros((1, 2))
        for k in ids:
            acc = acc * 1.5 + Em[k:k + 1]
        return (acc * acc).sum()
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(ge, {emb: Ev}), numeric_grad(f, Ev)[0], rtol=1e-6, atol=1e-8)


def test_while_gradient_select_and_stop_gradient_in_body():
    X = np.array([0.2, 0.9, 5.0])
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [3], "x")
        w = ph(sf.float64, [], "w")
        _, a = sf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, O.select(a > 1.0, a * 0.5, a * 3.0)), [0, x])
        _, b = sf.while_loop(lambda i, b: i < 3, lambda i, b: (i + 1, O.stop_gradient(b) * w + b), [0, w])
        ga = sf.gradients(O.sum(a), [x])[0]
        gb = sf.gradients(b, [w])[0]

    def f(v):
        a = v.copy()
        for _ in range(3):
            a = np.where(a > 1.0, a * 0.5, a * 3.0)
        return a.sum()
    # b_{k+1} = sg(b_k) * w + b_k: the gradient follows only "+ b_k" and the explicit w.
    bs = [0.5]
    for _ in range(3):
        bs.append(bs[-1] * 0.5 + bs[-1])
    with sf.Session(g) as s:
        gav, gbv = s.run([ga, gb], {x: X, w: 0.5})
    np.testing.assert_allclose(gav, numeric_grad(f, X)[0], rtol=1e-6)
    np.testing.assert_allclose(gbv, 1.0 + bs[0] + bs[1] + bs[2])


def test_while_gradient_with_maximum_iterations_and_two_gradients_of_one_loop():
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        nt = ph(sf.int32, [], "n")
        _, a = sf.while_loop(lambda i, a: i < nt, lambda i, a: (i + 1, a * x), [0, x], maximum_iterations=3,
                             parallel_iterations=1)
        (g1,) = sf.gradients(a, [x])
        (g2,) = sf.gradients(a * 2.0, [x])
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run([g1, g2], {x: 1.5, nt: 3}), [4 * 1.5 ** 3, 8 * 1.5 ** 3])
        np.testing.assert_allclose(s.run(g2, {x: 1.5, nt: 2}), 6 * 1.5 ** 2)
        with pytest.raises(E.InvalidArgumentError, match="maximum_iterations"):
            s.run(g1, {x: 1.5, nt: 5})
        np.testing.assert_allclose(s.run(g1, {x: 1.5, nt: 0}), 1.0)


def test_gradient_inside_while_body_newton():
    g = sf.Graph()
    with g.as_default():
        a = ph(sf.float64, [], "a")

        def body(i, x):
            fx = x * x - a
            (d,) = sf.gradients(fx, [x])
            return i + 1, x - fx / d
        _, x = sf.while_loop(lambda i, x: i < 20, body, [0, a])
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(x, {a: 2.0}), np.sqrt(2.0))


# ---- gradients of loops nested in loops (stacks indexed by both iterations) ----

@pytest.mark.parametrize("outer_n,inner_n", [(0, 2), (1, 1), (2, 2), (3, 2), (2, 0), (4, 3)])
def test_while_gradient_of_nested_loop(outer_n, inner_n):
    # y = x ** (1 + outer_n * inner_n), built as repeated products.
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")

        def body(i, y):
            _, z = sf.while_loop(lambda j, z: j < inner_n, lambda j, z: (j + 1, z * x), [0, y])
            return i + 1, z
        _, y = sf.while_loop(lambda i, y: i < outer_n, body, [0, x])
        dx, = sf.gradients(y, [x])
    p = 1 + outer_n * inner_n
    with sf.Session(g) as s:
        yv, dv = s.run([y, dx], {x: 1.3})
    np.testing.assert_allclose(yv, 1.3 ** p, rtol=1e-12)
    np.testing.assert_allclose(dv, p * 1.3 ** (p - 1), rtol=1e-12)


@pytest.mark.parametrize("par", [1, 2, 10])
def test_while_gradient_nested_inner_length_depends_on_outer(par):
    # The inner loop runs i times in outer iteration i, reading the outer loop
    # variable (a different value each outer iteration) and an outside vector.
    X = np.array([0.7, -1.2, 0.4])
    W = np.array([0.5, 1.5, -0.25])

    def ref(x, w):
        acc = np.zeros(3)
        h = x.copy()
        for i in range(4):
            t = np.zeros(3)
            for j in range(i):
                t = t + np.sin(h * w) * (j + 1)
            h = h * 0.9 + t * 0.1
            acc = acc + h
        return float(np.sum(acc * acc))

    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [3], "x")
        w = ph(sf.float64, [3], "w")

        def body(i, h, acc):
            def inner(j, t):
                return j + 1, t + sf.math.sin(h * w) * O.cast(j + 1, DstT=sf.float64)
            _, t = sf.while_loop(lambda j, t: j < i, inner, [0, sf.zeros([3], sf.float64)],
                                 parallel_iterations=par)
            h2 = h * 0.9 + t * 0.1
            return i + 1, h2, acc + h2
        _, _, acc = sf.while_loop(lambda i, h, acc: i < 4, body, [0, x, sf.zeros([3], sf.float64)],
                                  parallel_iterations=par)
        loss = sf.reduce_sum(acc * acc)
        dx, dw = sf.gradients(loss, [x, w])
    with sf.Session(g) as s:
        lv, dxv, dwv = s.run([loss, dx, dw], {x: X, w: W})
    np.testing.assert_allclose(lv, ref(X, W), rtol=1e-12)
    ex, ew = numeric_grad(ref, X, W)
    np.testing.assert_allclose(dxv, ex, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(dwv, ew, rtol=1e-6, atol=1e-8)


def test_while_gradient_three_loops_deep_with_a_cond():
    def ref(x):
        y = x
        for i in range(2):
            for j in range(3):
                for k in range(2):
                    y = np.tanh(y) * 1.5 if (i + j + k) % 2 == 0 else y * x
        return float(y)

    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")

        def l3(i, j):
            def body(k, y):
                odd = sf.math.floormod(i + j + k, 2) > 0
                return k + 1, sf.cond(odd, lambda: y * x, lambda: sf.math.tanh(y) * 1.5)
            return body

        def l2(i):
            def body(j, y):
                _, y2 = sf.while_loop(lambda k, y: k < 2, l3(i, j), [0, y])
                return j + 1, y2
            return body

        def l1(i, y):
            _, y2 = sf.while_loop(lambda j, y: j < 3, l2(i), [0, y])
            return i + 1, y2
        _, y = sf.while_loop(lambda i, y: i < 2, l1, [0, x])
        dx, = sf.gradients(y, [x])
    with sf.Session(g) as s:
        for xv in (0.3, -0.8):
            yv, dv = s.run([y, dx], {x: xv})
            np.testing.assert_allclose(yv, ref(xv), rtol=1e-12)
            np.testing.assert_allclose(dv, numeric_grad(ref, xv)[0], rtol=1e-6, atol=1e-9)


def test_while_gradient_nested_loop_trains_a_variable():
    # A variable read inside the inner loop gets its gradient summed over
    # every (outer, inner) iteration; one SGD step moves it to the reference.
    def ref(v):
        y = 1.0
        for i in range(3):
            for j in range(2):
                y = y * v + 0.1 * j
        return y * y

    g = sf.Graph()
    with g.as_default():
        v = sf.Variable(np.float64(0.8), name="v")

        def body(i, y):
            _, y2 = sf.while_loop(lambda j, y: j < 2,
                                  lambda j, y: (j + 1, y * v.value() + 0.1 * O.cast(j, DstT=sf.float64)),
                                  [0, y])
            return i + 1, y2
        _, y = sf.while_loop(lambda i, y: i < 3, body, [0, sf.constant(np.float64(1.0))])
        loss = y * y
        train = sf.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = sf.global_variables_initializer()
    with sf.Session(g) as s:
        s.run(init)
        s.run(train)
        expected = 0.8 - 0.01 * numeric_grad(ref, 0.8)[0]
        np.testing.assert_allclose(s.run(v.value()), expected, rtol=1e-9)


def test_while_gradient_unconnected_loop_input():
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        z = ph(sf.float64, [], "z")
        _, a, b = sf.while_loop(lambda i, a, b: i < 3, lambda i, a, b: (i + 1, a * x, b + z), [0, x, z])
        assert sf.gradients(a, [x, z], allow_unconnected=True)[1] is None


def test_while_second_order_gradient():
    # It was silently wrong (13.5 for 27): the backward loop reads the forward
    # values through StackPop, whose dependence on x the walk did not see.
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        _, y = sf.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * x), [0, x])
        (gx,) = sf.gradients(y, [x])
        try:
            (ggx,) = sf.gradients(gx, [x])
        except (E.UnimplementedError, E.InvalidArgumentError):
            return  # refusing would be fine
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(ggx, {x: 1.5}), 12 * 1.5 ** 2)  # d2/dx2 x^4


def test_cond_second_order_gradient():
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [], "x")
        y = sf.cond(x > 0, lambda: x * x * x, lambda: x * x)
        (gx,) = sf.gradients(y, [x])
        (ggx,) = sf.gradients(gx, [x])
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run([gx, ggx], {x: 2.0}), [12.0, 12.0])
        np.testing.assert_allclose(s.run([gx, ggx], {x: -2.0}), [-4.0, 2.0])


# ---- gradients in general ----------------------------------------------------------

def test_stop_gradient_and_unconnected():
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [2], "x")
        z = ph(sf.float64, [2], "z")
        (gx,) = sf.gradients(O.sum(x * O.stop_gradient(x * x)), [x])
        assert sf.gradients(O.sum(O.stop_gradient(x)), [x], allow_unconnected=True) == [None]
        with pytest.raises(E.InvalidArgumentError, match="'x' is not connected"):
            sf.gradients(O.sum(O.stop_gradient(x)), [x])
        gs = sf.gradients(O.sum(x * x), [x, z], allow_unconnected=True)
        assert gs[1] is None
        with pytest.raises(E.InvalidArgumentError, match="'z'"):
            sf.gradients(O.sum(x * x), [z])
    X = np.array([1.0, 2.0])
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(gx, {x: X}), X * X)
        np.testing.assert_allclose(s.run(gs[0], {x: X}), 2 * X)


def test_grad_ys():
    X = np.array([1.0, 2.0])
    gy1, gy2 = np.array([1.0, 10.0]), np.array([2.0, 0.5])
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [2], "x")
        (gx,) = sf.gradients([x * x, x * 3.0], [x], grad_ys=[gy1, gy2])
        (gs,) = sf.gradients(O.sum(x * x), [x], grad_ys=[np.float64(3.0)])
        with pytest.raises(E.InvalidArgumentError, match="1 grad_ys for 2 ys"):
            sf.gradients([x * x, x * 3.0], [x], grad_ys=[gy1])
        with pytest.raises(E.InvalidArgumentError, match="incompatible shapes"):
            sf.gradients([x * x], [x], grad_ys=[np.array([1.0, 2.0, 3.0])])
    with sf.Session(g) as s:
        np.testing.assert_allclose(s.run(gx, {x: X}), 2 * X * gy1 + 3 * gy2)
        np.testing.assert_allclose(s.run(gs, {x: X}), 6 * X)


def test_gradients_of_integer_tensors():
    g = sf.Graph()
    with g.as_default():
        n = ph(sf.int32, [2], "n")
        x = ph(sf.float64, [2], "x")
        assert sf.gradients(O.sum(n * n), [n], allow_unconnected=True) == [None]
        with pytest.raises(E.InvalidArgumentError, match="'n' is not connected"):
            sf.gradients(O.sum(n * n), [n])
        # An integer hop cuts the path.
        assert sf.gradients(O.sum(O.cast(O.cast(x, DstT=sf.int32), DstT=sf.float64)), [x],
                            allow_unconnected=True) == [None]
        (gc,) = sf.gradients(O.sum(O.cast(x, DstT=sf.float32) * 2.0), [x])
    with sf.Session(g) as s:
        v = s.run(gc, {x: np.array([1.0, 2.0])})
        assert v.dtype == np.float64
        np.testing.assert_allclose(v, [2.0, 2.0])


def test_gradient_of_a_tensor_used_many_times_and_listed_twice():
    X = np.array([1.0, 2.0])
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [2], "x")
        y = O.sum(x + x + x * x + x * 3.0 + O.identity(x))
        (g1,) = sf.gradients(y, [x])
        g2 = sf.gradients(O.sum(x * x), [x, x])
        (g3,) = sf.gradients([O.sum(x * x), O.sum(x * x * x)], [x])
        yy = O.sum(x * x)
        (g4,) = sf.gradients([yy, yy], [x])
        (g5,) = sf.gradients(x, [x])
    with sf.Session(g) as s:
        v1, v2, v3, v4, v5 = s.run([g1, g2, g3, g4, g5], {x: X})
    np.testing.assert_allclose(v1, 1 + 1 + 2 * X + 3 + 1)
    np.testing.assert_allclose(v2, [2 * X, 2 * X])
    np.testing.assert_allclose(v3, 2 * X + 3 * X * X)
    np.testing.assert_allclose(v4, 4 * X)  # d(yy + yy)/dx
    np.testing.assert_allclose(v5, np.ones(2))


def test_gradient_through_identity_reshape_transpose_chain():
    Wn = np.arange(6.0).reshape(2, 3)
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [2, 3], "x")
        y = O.identity(O.transpose(O.reshape(O.identity(x), [3, 2]), perm=[1, 0]))
        (gx,) = sf.gradients(O.sum(y * sf.constant(Wn)), [x])
    with sf.Session(g) as s:
        got = s.run(gx, {x: np.ones((2, 3))})
    np.testing.assert_allclose(got, numeric_grad(lambda v: np.sum(v.reshape(3, 2).T * Wn), np.ones((2, 3)))[0],
                               atol=1e-7)


@pytest.mark.parametrize("idx", [[0, 2, 0, 0, 3], [[0, 1], [1, 1], [3, 0]], [3, 3, 3]])
@pytest.mark.parametrize("itype", [np.int32, np.int64])
def test_gather_gradient_with_duplicate_indices(idx, itype):
    idx = np.array(idx, itype)
    X = np.arange(8.0).reshape(4, 2) / 4
    Wn = np.arange(idx.size * 2, dtype=np.float64).reshape(idx.shape + (2,))
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [4, 2], "x")
        y = O.gather(x, sf.constant(idx))
        (gx,) = sf.gradients(O.sum(y * y * sf.constant(Wn)), [x])
    with sf.Session(g) as s:
        yv, gv = s.run([y, gx], {x: X})
    np.testing.assert_array_equal(yv, X[idx])
    np.testing.assert_allclose(gv, numeric_grad(lambda v: np.sum(v[idx] ** 2 * Wn), X)[0], atol=1e-7)


@pytest.mark.parametrize("cs,as_,bs", [((3, 1), (1, 4), (3, 4)), ((), (), (2,)), ((3, 4), (4,), (3, 1)),
                                       ((1, 4), (3, 4), ())])
def test_select_gradient_with_broadcasting(cs, as_, bs):
    rng = np.random.default_rng(5)
    C = rng.random(cs) > 0.4
    A = rng.normal(size=as_)
    B = rng.normal(size=bs)
    out_shape = np.broadcast_shapes(cs, as_, bs)
    Wn = rng.uniform(0.5, 1.5, size=out_shape)
    g = sf.Graph()
    with g.as_default():
        c = ph(sf.bool_, list(cs), "c")
        a = ph(sf.float64, list(as_), "a")
        b = ph(sf.float64, list(bs), "b")
        y = O.select(c, a, b)
        grads = sf.gradients(O.sum(y * y * sf.constant(Wn)), [a, b])
    with sf.Session(g) as s:
        yv, ga, gb = s.run([y] + grads, {c: C, a: A, b: B})
    np.testing.assert_allclose(yv, np.where(C, A, B))
    na, nb = numeric_grad(lambda p, q: np.sum(np.where(C, p, q) ** 2 * Wn), A, B)
    np.testing.assert_allclose(ga, na, atol=1e-6)
    np.testing.assert_allclose(gb, nb, atol=1e-6)


@pytest.mark.parametrize("name", ["exp", "log", "cube", "rsqrt", "reciprocal", "sum_bcast", "matmul"])
def test_second_order_gradients(name):
    X0 = np.array([0.3, 0.8, 1.2, 0.5])
    V = np.array([1.0, -1.0, 0.5, 2.0])
    Wn = np.array([1.0, 2.0, -1.5, 0.7])
    fns = {
        "exp": (lambda x: O.sum(O.exp(x) * x * Wn), lambda v: np.sum(np.exp(v) * v * Wn)),
        "log": (lambda x: O.sum(O.log(x) * x * Wn), lambda v: np.sum(np.log(v) * v * Wn)),
        "cube": (lambda x: O.sum(x * x * x * Wn), lambda v: np.sum(v ** 3 * Wn)),
        "rsqrt": (lambda x: O.sum(O.rsqrt(x) * Wn), lambda v: np.sum(v ** -0.5 * Wn)),
        "reciprocal": (lambda x: O.sum(O.reciprocal(x) * x * x * Wn), lambda v: np.sum(v * Wn)),
        "sum_bcast": (lambda x: O.sum(O.sum(x) * x * Wn), lambda v: np.sum(v.sum() * v * Wn)),
        "matmul": (lambda x: O.sum(O.square(O.reshape(x, [2, 2]) @ O.reshape(x, [2, 2]))),
                   lambda v: np.sum((v.reshape(2, 2) @ v.reshape(2, 2)) ** 2)),
    }
    sf_fn, np_fn = fns[name]
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [4], "x")
        (g1,) = sf.gradients(sf_fn(x), [x])
        (g2,) = sf.gradients(O.sum(g1 * sf.constant(V)), [x])
    with sf.Session(g) as s:
        got = s.run(g2, {x: X0})
    hvp = lambda v: np.sum(numeric_grad(np_fn, v, eps=1e-5)[0] * V)  # noqa: E731
    np.testing.assert_allclose(got, numeric_grad(hvp, X0, eps=1e-4)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["tanh", "sigmoid", "relu"])
def test_second_order_gradients_through_activation_grads(name):
    X0 = np.array([0.3, -0.8, 1.2, 0.5])
    Wn = np.array([1.0, 2.0, -1.5, 0.7])
    act = {"tanh": (O.tanh, np.tanh), "sigmoid": (O.sigmoid, lambda v: 1 / (1 + np.exp(-v))),
           "relu": (O.relu, lambda v: np.maximum(v, 0))}[name]
    g = sf.Graph()
    with g.as_default():
        x = ph(sf.float64, [4], "x")
        (g1,) = sf.gradients(O.sum(act[0](x) * x * Wn), [x])
        (g2,) = sf.gradients(O.sum(g1), [x])
    with sf.Session(g) as s:
        got = s.run(g2, {x: X0})
    gsum = lambda v: np.sum(numeric_grad(lambda u: np.sum(act[1](u) * u * Wn), v, eps=1e-5)[0])  # noqa: E731
    np.testing.assert_allclose(got, numeric_grad(gsum, X0, eps=1e-4)[0], rtol=1e-3, atol=1e-3)


# ---- tensors of another graph --------------------------------------------------------

def _two_graphs():
    g1, g2 = sf.Graph(), sf.Graph()
    with g1.as_default():
        a = ph(sf.float32, [], "a")
        a2 = a * 100.0  # node 2 of g1
    with g2.as_default():
        x = ph(sf.float32, [], "x")
        y = x * 1.0  # node 2 of g2: same id as a2
    return g2, a2, x, y


def test_ordinary_op_refuses_a_tensor_of_another_graph():
    g2, a2, x, y = _two_graphs()
    with g2.as_default():
        with pytest.raises(E.InvalidArgumentError, match="another graph"):
            sf.while_loop(lambda i: i < 3, lambda i: i + a2, [sf.constant(0.0)])


@pytest.mark.parametrize("where", ["cond_branch", "while_body", "while_init", "enqueue", "grad_ys"])
def test_tensor_of_another_graph_is_refused(where):
    g2, a2, x, y = _two_graphs()
    with g2.as_default():
        with pytest.raises((E.InvalidArgumentError, ValueError)):
            if where == "cond_branch":
                sf.cond(ph(sf.bool_, [], "p"), lambda: a2, lambda: y)
            elif where == "while_body":
                sf.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, a2), [0, y])
            elif where == "while_init":
                sf.while_loop(lambda i, v: i < 2, lambda i, v: (i + 1, v * 2.0), [sf.constant(0), a2])
            elif where == "enqueue":
                sf.FIFOQueue([sf.float32], shapes=[[]]).enqueue([a2])
            else:
                sf.gradients(y * y, [x], grad_ys=[a2])


# ---- queues --------------------------------------------------------------------------

def test_fifo_queue_order_enqueue_many_dequeue_many_shapes():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.float32, sf.int32], shapes=[[2], []], capacity=10)
        x = ph(sf.float32, [2], "x")
        y = ph(sf.int32, [], "y")
        enq = q.enqueue([x, y])
        xs = ph(sf.float32, [None, 2], "xs")
        ys = ph(sf.int32, [None], "ys")
        enqm = q.enqueue_many([xs, ys])
        d = q.dequeue()
        dm = q.dequeue_many(3)
        n = ph(sf.int64, [], "n")
        dmn = q.dequeue_many(n)
        size = q.size()
    assert list(d[0].shape) == [2] and list(d[1].shape) == []
    assert list(dm[0].shape) == [3, 2] and list(dm[1].shape) == [3]
    want_x = [np.array([k, k + 0.5], np.float32) for k in range(3)] + list(np.arange(8, dtype=np.float32).reshape(4, 2))
    want_y = [0, 1, 2, 10, 11, 12, 13]
    with sf.Session(g) as s:
        for k in range(3):
            s.run(enq, {x: want_x[k], y: k})
        s.run(enqm, {xs: np.stack(want_x[3:]), ys: np.array(want_y[3:], np.int32)})
        assert s.run(size) == 7
        a, b = s.run(d)
        np.testing.assert_array_equal(a, want_x[0])
        assert b == 0 and b.dtype == np.int32
        a, b = s.run(dm)
        np.testing.assert_array_equal(a, np.stack(want_x[1:4]))
        np.testing.assert_array_equal(b, want_y[1:4])
        assert s.run(size) == 3
        a, b = s.run(dmn, {n: np.int64(3)})
        np.testing.assert_array_equal(a, np.stack(want_x[4:]))
        np.testing.assert_array_equal(b, want_y[4:])
        assert s.run(size) == 0


def test_queue_timeouts_while_full_or_empty():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], capacity=2)
        enq = q.enqueue([sf.constant(1)], timeout_ms=150)
        d = q.dequeue(timeout_ms=150)
        dm = q.dequeue_many(2, timeout_ms=150)
    with sf.Session(g) as s:
        t = time.time()
        with pytest.raises(E.UnavailableError, match="deadline exceeded: dequeue of 1"):
            s.run(d)
        assert 0.1 < time.time() - t < 5
        s.run(enq)
        s.run(enq)
        t = time.time()
        with pytest.raises(E.UnavailableError, match=r"deadline exceeded: enqueue .* \(capacity 2\)"):
            s.run(enq)
        assert 0.1 < time.time() - t < 5
        assert s.run(d) == 1
        with pytest.raises(E.UnavailableError, match="dequeue of 2"):
            s.run(dm)
        assert s.run(q.size()) == 1  # a timed-out dequeue_many takes nothing


def test_queue_enqueue_many_larger_than_capacity_waits_for_room():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]], capacity=3)
        em = q.enqueue_many([sf.constant(np.arange(10, dtype=np.int32))])
        n = ph(sf.int32, [], "n")
        dm = q.dequeue_many(n)
    with sf.Session(g) as s:
        res = []
        th = threading.Thread(target=lambda: res.append(fetch_error(s, em)))
        th.start()
        got = []
        for k in (3, 2, 3, 2):
            got.extend(s.run(dm, {n: k}))
        th.join(10)
        assert not th.is_alive() and res == [None]
    assert got == list(range(10))


def test_queue_close_drains_then_out_of_range():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]])
        enqm = q.enqueue_many([sf.constant(np.arange(5, dtype=np.int32))])
        d = q.dequeue()
        dm = q.dequeue_many(3)
        close = q.close()
        enq = q.enqueue([sf.constant(9)])
    with sf.Session(g) as s:
        s.run(enqm)
        s.run(close)
        with pytest.raises(E.AbortedError, match="is closed"):
            s.run(enq)
        np.testing.assert_array_equal(s.run(dm), [0, 1, 2])
        with pytest.raises(E.OutOfRangeError, match="closed and has 2 element"):
            s.run(dm)  # fewer than 3 left: nothing is taken
        assert [int(s.run(d)), int(s.run(d))] == [3, 4]
        for _ in range(2):
            with pytest.raises(E.OutOfRangeError, match="closed and has 0 element"):
                s.run(d)
        s.run(close)  # closing twice is fine


def test_queue_close_wakes_a_waiting_dequeue_and_cancels_pending_enqueues():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[]], capacity=1)
        d = q.dequeue()
        enq = q.enqueue([sf.constant(1)])
        close = q.close(cancel_pending_enqueues=True)
        q2 = sf.FIFOQueue([sf.int32], shapes=[[]], capacity=1)
        enq2a = q2.enqueue([sf.constant(1)])
        enq2b = q2.enqueue([sf.constant(2)])
        close2 = q2.close()
        d2 = q2.dequeue()
    with sf.Session(g) as s:
        res = []
        th = threading.Thread(target=lambda: res.append(fetch_error(s, d)))
        th.start()
        time.sleep(0.2)
        s.run(enq)  # serves the waiting dequeue
        th.join(5)
        assert res == [None]
        s.run(enq)
        th = threading.Thread(target=lambda: res.append(fetch_error(s, enq)))
        th.start()
        time.sleep(0.2)
        s.run(close)
        th.join(5)
        assert not th.is_alive()
        assert isinstance(res[1], E.AbortedError) and "cancelled" in str(res[1])
        assert s.run(d) == 1
        th = threading.Thread(target=lambda: res.append(fetch_error(s, d)))
        th.start()
        th.join(5)
        assert isinstance(res[2], E.OutOfRangeError)
        # Without cancel_pending_enqueues the pending enqueue still lands.
        s.run(enq2a)
        th = threading.Thread(target=lambda: res.append(fetch_error(s, enq2b)))
        th.start()
        time.sleep(0.2)
        s.run(close2)
        assert [int(s.run(d2)), int(s.run(d2))] == [1, 2]
        th.join(5)
        assert res[3] is None
        with pytest.raises(E.OutOfRangeError):
            s.run(d2)


def _shuffled(seed, n=20):
    g = sf.Graph()
    with g.as_default():
        q = sf.RandomShuffleQueue(capacity=50, min_after_dequeue=5, dtypes=[sf.int32], shapes=[[]], seed=seed)
        enqm = q.enqueue_many([sf.constant(np.arange(n, dtype=np.int32))])
        close = q.close()
        dm = q.dequeue_many(4)
        d = q.dequeue()
    with sf.Session(g) as s:
        s.run(enqm)
        out = list(s.run(dm)) + list(s.run(dm))
        s.run(close)
        out += [int(s.run(d)) for _ in range(n - 8)]
        with pytest.raises(E.OutOfRangeError):
            s.run(d)
    return [int(v) for v in out]


def test_random_shuffle_queue_seeded_is_a_deterministic_permutation():
    a, b, c = _shuffled(7), _shuffled(7), _shuffled(8)
    assert sorted(a) == list(range(20))
    assert a == b
    assert a != c
    assert a != list(range(20))


def test_random_shuffle_queue_keeps_min_after_dequeue_until_closed():
    g = sf.Graph()
    with g.as_default():
        q = sf.RandomShuffleQueue(capacity=20, min_after_dequeue=5, dtypes=[sf.int32], shapes=[[]], seed=11)
        enqm = q.enqueue_many([sf.constant(np.arange(8, dtype=np.int32))])
        close = q.close()
        dm = q.dequeue_many(3)
        d = q.dequeue(timeout_ms=150)
    with sf.Session(g) as s:
        s.run(enqm)
        first = list(s.run(dm))  # 8 - 5 = 3 may be taken
        with pytest.raises(E.UnavailableError):
            s.run(d)
        s.run(close)
        second = list(s.run(dm))
        with pytest.raises(E.OutOfRangeError, match="closed and has 2 element"):
            s.run(dm)
        assert s.run(q.size()) == 2
        rest = [int(s.run(d)), int(s.run(d))]
    assert sorted(first + second + rest) == list(range(8))


def test_padding_fifo_queue_pads_each_component():
    els = [(np.array([1, 2], np.float32), np.ones((1, 2), np.int32)),
           (np.array([3], np.float32), 2 * np.ones((3, 2), np.int32)),
           (np.array([4, 5, 6, 7], np.float32), np.zeros((0, 2), np.int32)),
           (np.array([9], np.float32), 5 * np.ones((2, 2), np.int32))]
    g = sf.Graph()
    with g.as_default():
        q = sf.PaddingFIFOQueue([sf.float32, sf.int32], shapes=[[None], [None, 2]])
        a = ph(sf.float32, [None], "a")
        b = ph(sf.int32, [None, 2], "b")
        enq = q.enqueue([a, b])
        dm = q.dequeue_many(3)
        d = q.dequeue()
        pb = ph(sf.int32, None, "pb")
        bad = q.enqueue([a, pb])
    assert list(dm[0].shape) == [3, None] and list(dm[1].shape) == [3, None, 2]
    want_a = np.zeros((3, 4), np.float32)
    want_b = np.zeros((3, 3, 2), np.int32)
    for k, (x, y) in enumerate(els[:3]):
        want_a[k, :len(x)] = x
        want_b[k, :len(y)] = y
    with sf.Session(g) as s:
        for x, y in els:
            s.run(enq, {a: x, b: y})
        ga, gb = s.run(dm)
        np.testing.assert_array_equal(ga, want_a)
        np.testing.assert_array_equal(gb, want_b)
        la, lb = s.run(d)
        np.testing.assert_array_equal(la, els[3][0])
        np.testing.assert_array_equal(lb, els[3][1])
        with pytest.raises(E.InvalidArgumentError, match=r"has shape \[\?,2\], enqueue gave shape \[2,3\]"):
            s.run(bad, {a: np.ones(1, np.float32), pb: np.ones((2, 3), np.int32)})


def test_queue_build_errors():
    def err(f):
        g = sf.Graph()
        with g.as_default():
            with pytest.raises(E.InvalidArgumentError) as ei:
                f()
        return str(ei.value)

    assert "is float32, but int32 is needed" in err(lambda: sf.FIFOQueue([sf.int32]).enqueue([sf.constant(1.5)]))
    assert "has shape [2], got shape [3]" in err(
        lambda: sf.FIFOQueue([sf.int32], shapes=[[2]]).enqueue([sf.constant(np.arange(3, dtype=np.int32))]))
    assert "has 2 components, got 1" in err(lambda: sf.FIFOQueue([sf.int32, sf.int32]).enqueue([sf.constant(1)]))
    assert "needs a batch dimension" in err(lambda: sf.FIFOQueue([sf.int32]).enqueue_many([sf.constant(1)]))
    assert "capacity must be positive" in err(lambda: sf.FIFOQueue([sf.int32], capacity=0))
    assert "must be below capacity" in err(lambda: sf.RandomShuffleQueue(5, 5, [sf.int32]))
    assert "needs a known rank" in err(lambda: sf.PaddingFIFOQueue([sf.int32], shapes=[None]))
    assert "2 component types but 1 shapes" in err(lambda: sf.FIFOQueue([sf.int32, sf.float32], shapes=[[]]))
    assert "at least one component type" in err(lambda: sf.FIFOQueue([]))
    assert "n >= 1, got 0" in err(lambda: sf.FIFOQueue([sf.int32]).dequeue_many(0))
    assert "n must be int32 or int64" in err(lambda: sf.FIFOQueue([sf.int32]).dequeue_many(sf.constant(2.0)))
    assert "queue handle" in err(lambda: sf.ops.queue_enqueue(sf.constant(1), sf.constant(1)))


def test_queue_run_time_errors_change_nothing():
    g = sf.Graph()
    with g.as_default():
        q = sf.FIFOQueue([sf.int32], shapes=[[2]], capacity=4)
        p = ph(sf.int32, None, "p")
        enq = q.enqueue([p])
        enqm = q.enqueue_many([p])
        n = ph(sf.int32, [], "n")
        dm = q.dequeue_many(n)
        q2 = sf.FIFOQueue([sf.int32])
        pa = ph(sf.int32, None, "pa")
        pb = ph(sf.int32, None, "pb")
        enq2 = q2.enqueue([pa])
        dm2 = q2.dequeue_many(2)
        q3 = sf.FIFOQueue([sf.int32, sf.int32])
        em3 = q3.enqueue_many([pa, pb])
    with sf.Session(g) as s:
        with pytest.raises(E.InvalidArgumentError, match=r"has shape \[2\], enqueue gave shape \[3\]"):
            s.run(enq, {p: np.arange(3, dtype=np.int32)})
        with pytest.raises(E.InvalidArgumentError, match=r"enqueue_many gave elements of shape \[3\]"):
            s.run(enqm, {p: np.zeros((2, 3), np.int32)})
        with pytest.raises(E.InvalidArgumentError, match="needs a batch dimension"):
            s.run(enqm, {p: np.int32(1)})
        assert s.run(q.size()) == 0
        for k in (0, -1):
            with pytest.raises(E.InvalidArgumentError, match=f"n >= 1, got {k}"):
                s.run(dm, {n: k})
        with pytest.raises(E.InvalidArgumentError, match="can never be served by a queue of capacity 4"):
            s.run(dm, {n: 5})
        s.run(enq2, {pa: np.array([1, 2], np.int32)})
        s.run(enq2, {pa: np.array([1, 2, 3], np.int32)})
        with pytest.raises(E.InvalidArgumentError, match=r"cannot batch elements of shapes \[2\] and \[3\]"):
            s.run(dm2)
        assert s.run(q2.size()) == 2  # a failed dequeue_many loses nothing
        with pytest.raises(E.InvalidArgumentError, match="component 1 has 2 elements in the batch, component 0 has 3"):
            s.run(em3, {pa: np.arange(3, dtype=np.int32), pb: np.arange(2, dtype=np.int32)})
        assert s.run(q3.size()) == 0


def test_queue_shared_name():
    g = sf.Graph()
    with g.as_default():
        a = sf.FIFOQueue([sf.int32], shared_name="shq")
        b = sf.FIFOQueue([sf.int32], shared_name="shq")
        e = a.enqueue([sf.constant(4)])
        d = b.dequeue()
    with sf.Session(g) as s:
        s.run(e)
        assert s.run(d) == 4
    g = sf.Graph()
    with g.as_default():
        a = sf.FIFOQueue([sf.int32], shared_name="shq")
        b = sf.FIFOQueue([sf.float32], shared_name="shq")
        e = a.enqueue([sf.constant(4)])
        d = b.dequeue()
    with sf.Session(g) as s:
        with pytest.raises(E.InvalidArgumentError, match="already exists as a FIFOQueue with other component types"):
            s.run([e, d])
