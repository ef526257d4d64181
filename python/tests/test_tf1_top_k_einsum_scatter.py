"""tf.nn.top_k, tf.einsum and tf.scatter_update / scatter_add / scatter_sub, written as TF 1.x programs use
them, checked against NumPy."""

import numpy as np
import pytest

import shardflow as tf


@pytest.fixture(autouse=True)
def _fresh_graph():
    tf.reset_default_graph()
    yield


def np_top_k(x, k):
    # TF's order: largest first, the lower index first among equal values (a stable sort of -x)
    idx = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, idx, -1), idx


def test_top_k_matches_numpy_with_ties_and_batches():
    rng = np.random.RandomState(0)
    x = rng.randint(0, 5, size=(4, 3, 9)).astype(np.float32)  # many ties
    ints = rng.randint(-100, 100, size=(6, 7)).astype(np.int32)
    p = tf.placeholder(tf.float32, [None, 3, 9])
    values, indices = tf.nn.top_k(p, k=4)
    iv, ii = tf.nn.top_k(ints, 7)
    assert values.shape.as_list() == [None, 3, 4] and indices.dtype == tf.int32
    with tf.Session() as sess:
        v, i = sess.run([values, indices], {p: x})
        v2, i2 = sess.run([iv, ii])
    ev, ei = np_top_k(x, 4)
    np.testing.assert_array_equal(v, ev)
    np.testing.assert_array_equal(i, ei)
    ev2, ei2 = np_top_k(ints, 7)
    np.testing.assert_array_equal(v2, ev2)
    np.testing.assert_array_equal(i2, ei2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="at least k"):
        tf.nn.top_k(tf.zeros([3, 2]), 3)
    assert tf.math.top_k is tf.nn.top_k


def test_top_k_with_a_fed_k_matches_numpy():
    rng = np.random.RandomState(1)
    x = rng.randint(0, 4, size=(3, 2, 8)).astype(np.float32)  # many ties
    x[0, 0, 2] = -np.inf
    p = tf.placeholder(tf.float32, [None, 2, 8])
    k = tf.placeholder(tf.int32, [])
    values, indices = tf.nn.top_k(p, k)
    assert values.shape.rank == 3 and indices.dtype == tf.int32
    with tf.Session() as sess:
        for kk in (0, 1, 5, 8):
            v, i = sess.run([values, indices], {p: x, k: kk})
            ev, ei = np_top_k(x, kk)
            np.testing.assert_array_equal(v, ev)
            np.testing.assert_array_equal(i, ei)
        with pytest.raises(tf.errors.InvalidArgumentError, match="at least k"):
            sess.run(values, {p: x, k: 9})
    grad, = tf.gradients(tf.reduce_sum(values), [p])
    with tf.Session() as sess:
        g = sess.run(grad, {p: np.array([[[1, 5, 3, 4, 0, 0, 0, 0]] * 2], np.float32), k: 2})
    np.testing.assert_array_equal(g[0, 0], [0, 1, 0, 1, 0, 0, 0, 0])
    with pytest.raises(TypeError, match="int32 scalar"):
        tf.nn.top_k(p, tf.constant([1, 2]))


def test_top_k_gradient_goes_to_the_chosen_entries():
    x = tf.Variable(np.array([[1.0, 5.0, 3.0, 4.0]], np.float32))
    values, _ = tf.nn.top_k(x, 2)
    grad, = tf.gradients(tf.reduce_sum(values * tf.constant([[2.0, 1.0]])), [x])
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_allclose(sess.run(grad), [[0.0, 2.0, 0.0, 1.0]])


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),                 # implicit output: "ik"
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)]),
    ("ijk,jl->il", [(2, 3, 4), (3, 5)]),         # k summed in the first operand alone
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
    ("...ij,jk->...ik", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 6)]),  # a dim of 1 broadcast against 5
    ("...ij,jk", [(2, 3, 4), (4, 5)]),                 # implicit output: the ... dims first
    ("i...,i...->...", [(3, 2, 4), (3, 2, 4)]),
    ("...->...", [(2, 3)]),
    ("ii->i", [(4, 4)]),                                # the diagonal
    ("ii", [(4, 4)]),                                   # the trace
    ("iij->j", [(3, 3, 5)]),
    ("bii->bi", [(2, 3, 3)]),
    ("ij,jj->ij", [(2, 3), (3, 3)]),
    ("iji,jk->k", [(3, 2, 3), (2, 4)]),
])
def test_einsum_matches_numpy(equation, shapes):
    rng = np.random.RandomState(len(equation))
    arrays = [rng.randn(*s).astype(np.float32) for s in shapes]
    out = tf.einsum(equation, *[tf.constant(a) for a in arrays])
    with tf.Session() as sess:
        got = sess.run(out)
    np.testing.assert_allclose(got, np.einsum(equation, *arrays), rtol=1e-5, atol=1e-5)


def test_einsum_with_unknown_dims_gradients_and_refusals():
    a = tf.placeholder(tf.float32, [None, 4])
    w = tf.Variable(np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    y = tf.einsum("bi,io->bo", a, w)
    grad, = tf.gradients(tf.reduce_sum(y), [w])
    xs = np.random.RandomState(1).randn(5, 4).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        got, gw = sess.run([y, grad], {a: xs})
    np.testing.assert_allclose(got, xs @ (np.arange(12).reshape(4, 3) / 10), rtol=1e-5)
    np.testing.assert_allclose(gw, np.repeat(xs.sum(0)[:, None], 3, axis=1), rtol=1e-5)
    with pytest.raises(ValueError, match="rank"):
        tf.einsum("ijk,kl->il", a, w)
    with pytest.raises(ValueError, match="more than once"):
        tf.einsum("ij->ii", w)
    with pytest.raises(ValueError, match="must have ..."):
        tf.einsum("...ij,jk->ik", tf.zeros([2, 3, 4]), w)


def test_einsum_diagonal_with_unknown_dims_and_its_gradient():
    p = tf.placeholder(tf.float32, [None, None])
    w = tf.Variable(np.arange(9, dtype=np.float32).reshape(3, 3))
    trace = tf.einsum("ii->", p)
    grad, = tf.gradients(tf.einsum("ii", w) * 2.0, [w])
    x = np.random.RandomState(3).randn(5, 5).astype(np.float32)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_allclose(sess.run(trace, {p: x}), np.trace(x), rtol=1e-5)
        np.testing.assert_allclose(sess.run(grad), 2.0 * np.eye(3))


def test_scatter_update_add_sub_on_variables():
    init = np.arange(12, dtype=np.float32).reshape(4, 3)
    v = tf.Variable(init)
    upd = tf.scatter_update(v, [2, 0], [[100.0, 101.0, 102.0], [-1.0, -2.0, -3.0]])
    add = tf.scatter_add(v, tf.constant([1, 1, 3], tf.int64), np.ones((3, 3), np.float32))
    sub = tf.scatter_sub(v, [0], [[0.5, 0.5, 0.5]])
    dup = tf.scatter_update(v, [1, 1], [[7.0, 7.0, 7.0], [8.0, 8.0, 8.0]])  # the last wins
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        expect = init.copy()
        expect[[2, 0]] = [[100, 101, 102], [-1, -2, -3]]
        np.testing.assert_array_equal(sess.run(upd), expect)
        np.testing.assert_array_equal(sess.run(v), expect)  # the variable holds it
        np.add.at(expect, [1, 1, 3], 1.0)
        np.testing.assert_array_equal(sess.run(add), expect)  # duplicates add up, as TF
        expect[0] -= 0.5
        np.testing.assert_array_equal(sess.run(sub), expect)
        expect[1] = 8.0
        np.testing.assert_array_equal(sess.run(dup), expect)


def test_scatter_on_a_get_variable_read_and_errors():
    emb = tf.get_variable("emb", [5, 2], initializer=tf.zeros_initializer())
    ids = tf.placeholder(tf.int32, [None])
    rows = tf.placeholder(tf.float32, [None, 2])
    op = tf.scatter_add(emb, ids, rows)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(op, {ids: [4, 0], rows: [[1, 2], [3, 4]]})
        sess.run(op, {ids: [4], rows: [[1, 1]]})
        np.testing.assert_array_equal(sess.run(emb), [[3, 4], [0, 0], [0, 0], [0, 0], [2, 3]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="needs a variable"):
        tf.scatter_update(tf.zeros([3]), [0], [1.0])
    with pytest.raises(TypeError, match="int32 or int64"):
        tf.scatter_add(emb, tf.constant([0.0]), [[1.0, 1.0]])


def test_scatter_add_sub_on_a_float_matrix_are_sparse_row_updates():
    v = tf.Variable(np.zeros((6, 2), np.float32))
    ids = tf.placeholder(tf.int32, [None])
    rows = tf.placeholder(tf.float32, [None, 2])
    add = tf.scatter_add(v, ids, rows)
    sub = tf.scatter_sub(v, tf.constant([[5, 0]]), tf.constant([[[1.0, 1.0], [2.0, 2.0]]]))  # indices of rank 2
    types = {op.type for op in tf.get_default_graph().get_operations()}
    assert "EmbeddingSparseApplyGradientDescent" in types and "AssignAdd" not in types and "AssignSub" not in types
    ints = tf.Variable(np.zeros((3, 2), np.int32))
    int_add = tf.scatter_add(ints, [2, 2], [[1, 2], [3, 4]])  # not float32: one AssignAdd of the segment sums
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        expect = np.zeros((6, 2), np.float32)
        for i in range(3):
            idx = np.array([i, 4, i], np.int32)
            upd = np.arange(6, dtype=np.float32).reshape(3, 2) * (i + 1)
            np.add.at(expect, idx, upd)
            np.testing.assert_array_equal(sess.run(add, {ids: idx, rows: upd}), expect)
        expect[5] -= 1.0
        expect[0] -= 2.0
        np.testing.assert_array_equal(sess.run(sub), expect)
        np.testing.assert_array_equal(sess.run(int_add), [[0, 0], [0, 0], [4, 6]])
        with pytest.raises(tf.errors.InvalidArgumentError):
            sess.run(add, {ids: [6], rows: [[1.0, 1.0]]})  # a row outside the variable, refused as TF



def _np_scatter_update(a, idx, upd):
    # TF's ScatterUpdate, row by row in order: of duplicate indices the last wins
    out = a.copy()
    for i, r in enumerate(np.asarray(idx).reshape(-1)):
        out[r] = np.asarray(upd).reshape((-1,) + a.shape[1:])[i]
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_scatter_update_is_one_op_on_every_dtype_and_rank(dtype):
    rng = np.random.default_rng(39)
    for shape in [(7,), (6, 3), (5, 2, 4)]:
        tf.reset_default_graph()
        init = (rng.integers(-50, 50, size=shape) / (2 if np.issubdtype(dtype, np.floating) else 1)).astype(dtype)
        v = tf.Variable(init)
        for idx_type in (tf.int32, tf.int64):
            ids = tf.placeholder(idx_type, [None, 2])  # indices of rank 2: rows of rank 1 + 2 more dims
            rows = tf.placeholder(tf.as_dtype(dtype), [None, 2] + list(shape[1:]))
            upd = tf.scatter_update(v, ids, rows)
            types = [op.type for op in tf.get_default_graph().get_operations()]
            assert types.count("ResourceScatterUpdate") == (1 if idx_type == tf.int32 else 2)  # one op a call
            assert types.count("Assign") == 1  # the initializer's alone
            assert not {"AssignAdd", "EmbeddingSparseApplyGradientDescent", "Switch"} & set(types)
            with tf.Session() as sess:
                sess.run(tf.global_variables_initializer())
                expect = init.copy()
                for _ in range(3):
                    idx = rng.integers(0, shape[0], size=(2, 2))
                    idx[1, 1] = idx[0, 0]  # a duplicate: the later one wins
                    new = rng.integers(-99, 99, size=(2, 2) + shape[1:]).astype(dtype)
                    expect = _np_scatter_update(expect, idx, new)
                    got = sess.run(upd, {ids: idx, rows: new})
                    assert got.dtype == dtype
                    np.testing.assert_array_equal(got, expect)
                    np.testing.assert_array_equal(sess.run(v), expect)  # the variable holds it


def test_scatter_update_writes_values_as_given_and_refuses_bad_input():
    v = tf.Variable(np.arange(10, dtype=np.float32).reshape(5, 2), name="table")
    ids = tf.placeholder(tf.int64, [None])
    rows = tf.placeholder(tf.float32, [None, 2])
    upd = tf.scatter_update(v, ids, rows)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        expect = np.arange(10, dtype=np.float32).reshape(5, 2)
        got = sess.run(upd, {ids: [1, 3], rows: [[np.inf, np.nan], [-0.0, 7.0]]})
        expect[1] = [np.inf, np.nan]
        expect[3] = [-0.0, 7.0]
        np.testing.assert_array_equal(got, expect)
        assert np.signbit(got[3, 0])  # -0.0 stays -0.0: the row is written, not computed
        got = sess.run(upd, {ids: [1], rows: [[2.0, 3.0]]})  # a row holding inf and NaN is replaced like any
        expect[1] = [2.0, 3.0]
        np.testing.assert_array_equal(got, expect)
        # An index out of range fails the step naming the variable and the index; no row is written.
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"'table.*index 5"):
            sess.run(upd, {ids: [0, 5], rows: [[-9.0, -9.0], [-9.0, -9.0]]})
        with pytest.raises(tf.errors.InvalidArgumentError, match="index -1"):
            sess.run(upd, {ids: [-1], rows: [[-9.0, -9.0]]})
        np.testing.assert_array_equal(sess.run(v), expect)
        with pytest.raises(tf.errors.InvalidArgumentError, match="shape"):
            sess.run(upd, {ids: [0, 1], rows: [[1.0, 1.0]]})  # one row for two indices
    with pytest.raises(tf.errors.InvalidArgumentError, match="need shape"):
        tf.scatter_update(v, [0, 1], [[1.0, 2.0, 3.0]])
    with pytest.raises(TypeError, match="int32 or int64"):
        tf.scatter_update(v, tf.constant([0.0]), [[1.0, 1.0]])


def test_scatter_update_is_atomic_for_a_concurrent_reader():
    # Step k sets every row to k: a read that saw part of a step would see two values, or a value below
    # one it read before (two sparse updates, the old form, showed zeros between them).
    import threading

    n, dim = 256, 64
    v = tf.Variable(np.zeros((n, dim), np.float32))
    k = tf.placeholder(tf.float32, [])
    perm = np.random.default_rng(1).permutation(n)
    put = tf.scatter_update(v, perm, tf.fill([n, dim], k))
    read = tf.identity(v)
    torn, reads = [], [0]
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        done = threading.Event()

        def reader():
            last = 0.0
            while not done.is_set():
                got = sess.run(read)
                reads[0] += 1
                if not (got == got.flat[0]).all() or got.flat[0] < last:
                    torn.append((last, np.unique(got)))
                last = got.flat[0]

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            for step in range(1, 2001):
                sess.run(put.op, {k: float(step)})
        finally:
            done.set()
            for t in threads:
                t.join()
        assert reads[0] > 0
        assert torn == []
        np.testing.assert_array_equal(sess.run(v), np.full((n, dim), 2000.0, np.float32))


def test_scatter_update_on_a_cluster_session_of_two_nodes():
    cluster = tf.LocalCluster(nodes=2)
    try:
        g = tf.Graph()
        with g.as_default():
            with g.device("/job:worker/task:0"):
                v = tf.Variable(np.zeros((4, 2), np.int64), name="counts")
            with g.device("/job:worker/task:1"):
                ids = tf.placeholder(tf.int32, [None])
                rows = tf.placeholder(tf.int64, [None, 2])
                upd = tf.scatter_update(v, ids, rows * 2)  # the rows computed on the other node
            init = tf.global_variables_initializer()
        with tf.ClusterSession(g, cluster=cluster) as s:
            assert len(s.tasks) == 2
            s.run(init)
            got = s.run(upd, {ids: [3, 1, 3], rows: [[1, 2], [3, 4], [5, 6]]})
            np.testing.assert_array_equal(got, [[0, 0], [6, 8], [0, 0], [10, 12]])
            with pytest.raises(tf.errors.InvalidArgumentError, match=r"counts.*index 4"):
                s.run(upd, {ids: [4], rows: [[1, 1]]})
            np.testing.assert_array_equal(s.run(v), [[0, 0], [6, 8], [0, 0], [10, 12]])
    finally:
        cluster.close()
